// moe_cuda.cu — dropless top-k mixture of TSCT experts on the GPU (contract: kernels/cpu/moe.h,
// SPEC §1). Same plan and the same order of sums as kernels/cpu/moe.c:
//   route (softmax + top-k, ties to the lower index)       one thread per token
//   sort the N*k assignments expert-major                 stable radix sort on the expert id:
//                                                           tokens increasing inside an expert
//   per expert: gather rows, the low-rank chain as cuBLAS gemms over its c_e rows only (no dense
//   compute of all experts), scatter w * y back           a host loop over experts, in index
//                                                           order, on one stream: a token's
//                                                           k contributions add in expert order
// The per-expert row counts are needed on the host to size the gemms, and the engine wants the
// aux loss and the load counts on the host (its call site passes host pointers: `aux`, `load`),
// so forward downloads off [E+1] and aux (one small synchronising copy; backward re-reads off).
// A CUDA-graph step would replace the host loop by a grouped gemm over padded tiles.
//
// ws layout (floats; "persistent" = forward -> backward; A = N*k):
//   p [N, E] | w [N, k] | a1 [A, r] | a2 [A, r] | h [A, f] (backward overwrites with silu'(h)) |
//   tf [N, f] | td [N, d] | tr [N, r] | tr2 [N, r] | dw [N, k] | auxd [2] |
//   ints: idx [N, k] | asg [A] | off [E + 1]
// Backward is destructive on h, as on the CPU: run forward again before a second backward.
#include "cuda_common.cuh"
#include <vector>

#ifndef DM_DOUBLE

#define MOE_MAXE 64

struct MoeLayout { size_t p, w, a1, a2, h, tf, td, tr, tr2, dw, auxd, ints, total; };

static MoeLayout moe_layout(MoEShape s) {
    size_t N = (size_t)s.N, A = (size_t)s.N * s.k, o = 0;
    MoeLayout L;
    L.p = o;    o += N * s.E;
    L.w = o;    o += N * s.k;
    L.a1 = o;   o += A * s.r;
    L.a2 = o;   o += A * s.r;
    L.h = o;    o += A * s.f;
    L.tf = o;   o += N * s.f;
    L.td = o;   o += N * s.d;
    L.tr = o;   o += N * s.r;
    L.tr2 = o;  o += N * s.r;
    L.dw = o;   o += N * s.k;
    L.auxd = o; o += 2;
    L.ints = o; o += N * s.k + A + (size_t)s.E + 1;  // ints are 4 bytes, as floats
    L.total = o;
    return L;
}

size_t cuda_moe_ws_size(MoEShape s) { return moe_layout(s).total; }

// p [N, E] softmax; idx [N, k] chosen experts (descending p, ties to lower index); w [N, k]
__global__ void moe_route_kernel(int *idx, float *w, float *p, const float *z, int N, int E, int k) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const float *zt = z + (size_t)t * E;
    float *pt = p + (size_t)t * E;
    int *it = idx + (size_t)t * k;
    float *wt = w + (size_t)t * k;
    float zmax = zt[0];
    for (int e = 1; e < E; e++) zmax = zt[e] > zmax ? zt[e] : zmax;
    double sum = 0;
    for (int e = 0; e < E; e++) { pt[e] = expf(zt[e] - zmax); sum += pt[e]; }
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < E; e++) pt[e] *= inv;
    for (int j = 0; j < k; j++) {  // repeated selection; strict '>' keeps the lower index
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int l = 0; l < j; l++) taken |= it[l] == e;
            if (!taken && (best < 0 || pt[e] > pt[best])) best = e;
        }
        it[j] = best;
    }
    if (k == 1) {
        wt[0] = pt[it[0]];
    } else {
        float S = 0;
        for (int j = 0; j < k; j++) S += pt[it[j]];
        for (int j = 0; j < k; j++) wt[j] = pt[it[j]] / S;
    }
}
__global__ void moe_keys_kernel(uint64_t *keys, int *vals, const int *idx, int A) {
    int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a < A) { keys[a] = (uint64_t)idx[a]; vals[a] = a; }
}
// off [E + 1]: off[e] = first sorted position with expert >= e (lower bound)
__global__ void moe_offsets_kernel(int *off, const uint64_t *skeys, int A, int E) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e > E) return;
    int lo = 0, hi = A;
    while (lo < hi) { int mid = (lo + hi) / 2; if (skeys[mid] < (uint64_t)e) lo = mid + 1; else hi = mid; }
    off[e] = lo;
}
// auxd[0] = E * sum_e (cnt_e / (N k)) * mean_t p[t, e]   (one block, fixed-order sums)
__global__ void moe_aux_kernel(float *auxd, const float *p, const int *off, int N, int E, int k) {
    __shared__ double sh[256];
    double auxv = 0;
    for (int e = 0; e < E; e++) {
        double s = 0;
        for (int t = threadIdx.x; t < N; t += 256) s += p[(size_t)t * E + e];
        double Pe = block_sum_d(s, sh);
        int cnt = off[e + 1] - off[e];
        auxv += ((double)cnt / ((double)N * k)) * (Pe / N);
    }
    if (threadIdx.x == 0) auxd[0] = (float)(E * auxv);
}
// dst [c, d] <- rows src[asg[i] / k] (assignment -> token)
__global__ void moe_gather_kernel(float *dst, const float *src, const int *asg, int c, int k, int d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)c * d) return;
    size_t row = i / d, q = i % d;
    dst[i] = src[(size_t)(asg[row] / k) * d + q];
}
// tr [c, r] = a [c, r] * s [r]
__global__ void moe_scale_kernel(float *tr, const float *a, const float *s, int c, int r) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)c * r) tr[i] = a[i] * s[i % r];
}
__global__ void moe_silu_kernel(float *g, const float *h, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = h[i]; g[i] = x * sigmoidf_dev(x); }
}
// g = silu(h); h <- silu'(h) = sig + g (1 - sig)
__global__ void moe_silu_prep_kernel(float *g, float *h, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = h[i], sg = sigmoidf_dev(x), gv = x * sg; g[i] = gv; h[i] = sg + gv * (1 - sg); }
}
__global__ void moe_mul_kernel(float *a, const float *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= b[i];
}
// out[token(i)] += (w or 1) * y[i]; one expert's rows have distinct tokens: no two threads
// write the same element
__global__ void moe_scatter_kernel(float *out, const float *y, const int *asg, const float *W,
                                   int c, int k, int d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)c * d) return;
    size_t row = i / d, q = i % d;
    int a = asg[row];
    float v = W ? W[a] * y[i] : y[i];
    out[(size_t)(a / k) * d + q] += v;
}
// one block per row i: dw[a] = D_i . b_i (sequential, the CPU's float order), then
// G_i *= w_a (d) and D_i *= w_a (r)
__global__ void moe_dw_kernel(float *dW, float *G, float *Dm, const float *b, const float *W,
                              const int *asg, int d, int r) {
    int i = blockIdx.x, a = asg[i];
    float *Gi = G + (size_t)i * d, *Di = Dm + (size_t)i * r;
    const float *bi = b + (size_t)i * r;
    __shared__ float wa;
    if (threadIdx.x == 0) {
        float acc = 0;
        for (int q = 0; q < r; q++) acc += Di[q] * bi[q];
        dW[a] = acc;
        wa = W[a];
    }
    __syncthreads();
    for (int q = threadIdx.x; q < d; q += blockDim.x) Gi[q] *= wa;
    for (int q = threadIdx.x; q < r; q += blockDim.x) Di[q] *= wa;
}
// thread q: gs[q] += sum_i v[i,q] a[i,q] in row order; v[i,q] *= s[q]
__global__ void moe_sgrad_kernel(float *gs, float *v, const float *a, const float *s, int c, int r) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= r) return;
    float acc = gs[q], sq = s[q];
    for (int i = 0; i < c; i++) {
        float x = v[(size_t)i * r + q];
        acc += x * a[(size_t)i * r + q];
        v[(size_t)i * r + q] = x * sq;
    }
    gs[q] = acc;
}
// router backward, one thread per token (moe.c's formulas)
__global__ void moe_router_bwd_kernel(float *dz, const float *P, const float *W, const float *dW,
                                      const int *idx, const int *off, float daux, int N, int E, int k) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const float *pt = P + (size_t)t * E, *wt = W + (size_t)t * k, *dwt = dW + (size_t)t * k;
    const int *it = idx + (size_t)t * k;
    float dp[MOE_MAXE];
    for (int e = 0; e < E; e++) {
        int cnt = off[e + 1] - off[e];
        dp[e] = daux * (float)((double)E * cnt / ((double)N * k) / N);
    }
    if (k == 1) {
        dp[it[0]] += dwt[0];
    } else {
        float S = 0, dot = 0;
        for (int j = 0; j < k; j++) { S += pt[it[j]]; dot += dwt[j] * wt[j]; }
        for (int j = 0; j < k; j++) dp[it[j]] += (dwt[j] - dot) / S;
    }
    float pdp = 0;
    for (int e = 0; e < E; e++) pdp += pt[e] * dp[e];
    float *dzt = dz + (size_t)t * E;
    for (int e = 0; e < E; e++) dzt[e] += pt[e] * (dp[e] - pdp);
}

#define L1D(kern, n, ...) do { if ((size_t)(n) > 0) { \
    kern<<<ceil_div((long long)(n), 256), 256, 0, dm_stream>>>(__VA_ARGS__); cudaLaunchCheck(); } } while (0)

static void moe_check(MoEShape s) {
    if (s.E < 1 || s.E > MOE_MAXE || s.k < 1 || s.k > s.E) {
        fprintf(stderr, "cuda moe: E=%d k=%d unsupported (1 <= k <= E <= %d)\n", s.E, s.k, MOE_MAXE);
        exit(1);
    }
}

void cuda_moe_forward(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                      MoEParams p, MoEShape s) {
    moe_check(s);
    const int N = s.N, d = s.d, E = s.E, k = s.k, r = s.r, f = s.f, A = N * k;
    MoeLayout L = moe_layout(s);
    float *P = ws + L.p, *W = ws + L.w, *A1 = ws + L.a1, *A2 = ws + L.a2, *Hh = ws + L.h;
    float *tf = ws + L.tf, *td = ws + L.td, *tr = ws + L.tr, *auxd = ws + L.auxd;
    int *idx = (int *)(ws + L.ints);  // [N, k]
    int *asg = idx + A;               // [A]
    int *off = asg + A;               // [E + 1]
    cudaCheck(cudaMemsetAsync(out, 0, sizeof(float) * (size_t)N * d, dm_stream));
    if (N <= 0) { *aux = 0; if (load) for (int e = 0; e < E; e++) load[e] = 0; return; }

    L1D(moe_route_kernel, N, idx, W, P, z, N, E, k);
    // stable sort of assignments by expert: keys and the sort's input values in scratch
    char *sp = (char *)dm_scratch(SCR_KEYS, (size_t)A * (2 * sizeof(uint64_t) + sizeof(int)));
    uint64_t *kin = (uint64_t *)sp, *kout = kin + A;
    int *vin = (int *)(kout + A);
    L1D(moe_keys_kernel, A, kin, vin, idx, A);
    int bits = 1;
    while ((1 << bits) < E) bits++;
    dm_sort_pairs(kin, kout, vin, asg, A, bits);
    L1D(moe_offsets_kernel, E + 1, off, kout, A, E);
    moe_aux_kernel<<<1, 256, 0, dm_stream>>>(auxd, P, off, N, E, k);
    cudaLaunchCheck();

    std::vector<int> hoff(E + 1);
    cudaCheck(cudaMemcpyAsync(hoff.data(), off, sizeof(int) * (E + 1), cudaMemcpyDeviceToHost, dm_stream));
    cudaCheck(cudaMemcpyAsync(aux, auxd, sizeof(float), cudaMemcpyDeviceToHost, dm_stream));
    cudaCheck(cudaStreamSynchronize(dm_stream));
    if (load) for (int e = 0; e < E; e++) load[e] = hoff[e + 1] - hoff[e];

    for (int e = 0; e < E; e++) {
        const int o = hoff[e], c = hoff[e + 1] - hoff[e];
        if (c == 0) continue;
        const float *U1 = p.U1 + (size_t)e * f * r, *s1 = p.s1 + (size_t)e * r;  // [f, r], [r]
        const float *V1 = p.V1 + (size_t)e * d * r, *U2 = p.U2 + (size_t)e * d * r;  // [d, r] each
        const float *s2 = p.s2 + (size_t)e * r, *V2 = p.V2 + (size_t)e * f * r;  // [r], [f, r]
        float *a1 = A1 + (size_t)o * r, *a2 = A2 + (size_t)o * r;  // [c, r]
        float *he = Hh + (size_t)o * f;                            // [c, f]
        const int *ae = asg + o;                                   // [c]
        L1D(moe_gather_kernel, (size_t)c * d, td, n, ae, c, k, d);  // X [c, d]
        dm_gemm(0, 0, c, r, d, 1, td, d, V1, r, 0, a1, r, 1);      // a1 = X V1
        L1D(moe_scale_kernel, (size_t)c * r, tr, a1, s1, c, r);
        dm_gemm(0, 1, c, f, r, 1, tr, r, U1, r, 0, he, f, 1);      // h = b1 U1^T
        L1D(moe_silu_kernel, (size_t)c * f, tf, he, (size_t)c * f);
        dm_gemm(0, 0, c, r, f, 1, tf, f, V2, r, 0, a2, r, 1);      // a2 = silu(h) V2
        L1D(moe_scale_kernel, (size_t)c * r, tr, a2, s2, c, r);
        dm_gemm(0, 1, c, d, r, 1, tr, r, U2, r, 0, td, d, 1);      // y = b2 U2^T
        L1D(moe_scatter_kernel, (size_t)c * d, out, td, ae, W, c, k, d);
    }
}

void cuda_moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                       const real *n, const real *z, MoEParams p, MoEShape s) {
    (void)z;
    moe_check(s);
    const int N = s.N, d = s.d, E = s.E, k = s.k, r = s.r, f = s.f, A = N * k;
    if (N <= 0) return;
    MoeLayout L = moe_layout(s);
    float *P = ws + L.p, *W = ws + L.w, *A1 = ws + L.a1, *A2 = ws + L.a2, *Hh = ws + L.h;
    float *tf = ws + L.tf, *td = ws + L.td, *tr = ws + L.tr, *tr2 = ws + L.tr2, *dW = ws + L.dw;
    int *idx = (int *)(ws + L.ints), *asg = idx + A, *off = asg + A;
    std::vector<int> hoff(E + 1);
    cudaCheck(cudaMemcpyAsync(hoff.data(), off, sizeof(int) * (E + 1), cudaMemcpyDeviceToHost, dm_stream));
    cudaCheck(cudaStreamSynchronize(dm_stream));

    for (int e = 0; e < E; e++) {
        const int o = hoff[e], c = hoff[e + 1] - hoff[e];
        if (c == 0) continue;
        const float *U1 = p.U1 + (size_t)e * f * r, *s1 = p.s1 + (size_t)e * r;
        const float *V1 = p.V1 + (size_t)e * d * r, *U2 = p.U2 + (size_t)e * d * r;
        const float *s2 = p.s2 + (size_t)e * r, *V2 = p.V2 + (size_t)e * f * r;
        float *gU1 = g.U1 + (size_t)e * f * r, *gs1 = g.s1 + (size_t)e * r;
        float *gV1 = g.V1 + (size_t)e * d * r, *gU2 = g.U2 + (size_t)e * d * r;
        float *gs2 = g.s2 + (size_t)e * r, *gV2 = g.V2 + (size_t)e * f * r;
        const float *a1 = A1 + (size_t)o * r, *a2 = A2 + (size_t)o * r;  // [c, r]
        float *he = Hh + (size_t)o * f;                                  // [c, f]
        const int *ae = asg + o;
        L1D(moe_gather_kernel, (size_t)c * d, td, dout, ae, c, k, d);  // G [c, d]
        L1D(moe_scale_kernel, (size_t)c * r, tr, a2, s2, c, r);        // b2
        dm_gemm(0, 0, c, r, d, 1, td, d, U2, r, 0, tr2, r, 1);         // D = G U2
        moe_dw_kernel<<<c, 256, 0, dm_stream>>>(dW, td, tr2, tr, W, ae, d, r);
        cudaLaunchCheck();
        dm_gemm(1, 0, d, r, c, 1, td, d, tr, r, 1, gU2, r, 1);         // dU2 += dy^T b2
        L1D(moe_sgrad_kernel, r, gs2, tr2, a2, s2, c, r);               // ds2; da2 = db2 s2
        L1D(moe_silu_prep_kernel, (size_t)c * f, tf, he, (size_t)c * f);
        dm_gemm(1, 0, f, r, c, 1, tf, f, tr2, r, 1, gV2, r, 1);        // dV2 += g^T da2
        dm_gemm(0, 1, c, f, r, 1, tr2, r, V2, r, 0, tf, f, 1);         // dg = da2 V2^T
        L1D(moe_mul_kernel, (size_t)c * f, tf, he, (size_t)c * f);     // dh = dg silu'(h)
        L1D(moe_scale_kernel, (size_t)c * r, tr, a1, s1, c, r);        // b1
        dm_gemm(1, 0, f, r, c, 1, tf, f, tr, r, 1, gU1, r, 1);         // dU1 += dh^T b1
        dm_gemm(0, 0, c, r, f, 1, tf, f, U1, r, 0, tr2, r, 1);         // db1 = dh U1
        L1D(moe_sgrad_kernel, r, gs1, tr2, a1, s1, c, r);               // ds1; da1 = db1 s1
        L1D(moe_gather_kernel, (size_t)c * d, td, n, ae, c, k, d);     // X again
        dm_gemm(1, 0, d, r, c, 1, td, d, tr2, r, 1, gV1, r, 1);        // dV1 += X^T da1
        dm_gemm(0, 1, c, d, r, 1, tr2, r, V1, r, 0, td, d, 1);         // dX = da1 V1^T
        L1D(moe_scatter_kernel, (size_t)c * d, dn, td, ae, (const float *)NULL, c, k, d);
    }
    L1D(moe_router_bwd_kernel, N, dz, P, W, dW, idx, off, daux, N, E, k);
}

#endif  // DM_DOUBLE
