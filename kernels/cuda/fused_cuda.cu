// fused_cuda.cu — the fused element-wise ops of the looped block on the device (the CUDA side of
// kernels/cpu/fused.c; contracts in kernels/cpu/fused.h and kernels/backend.h). Every pointer is
// device memory, the scalars passed by value are host values; parameters a formula reads (A,
// alpha, biases) are read on the device, so no op waits for the host.
//
// Same formulas, same fusion and the same write/accumulate semantics as the CPU. Results are
// not bit-identical to the CPU (expf vs the CPU's polynomial exp, FMA contraction, and the
// reduction orders noted below), but they are deterministic: every reduction is a fixed-shape
// tree (block_sum_d) or a sequential loop owned by one thread — no atomics — so a run repeats
// itself bit for bit.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

// threads of a row block: the smallest power of two >= C, in [32, 256] (block_sum_d needs a power
// of two; the tree shape then depends on C only)
static int row_threads(int C) {
    int t = 32;
    while (t < C && t < 256) t <<= 1;
    return t;
}
#define EW(kern, n, ...) do { if ((long long)(n) > 0) { \
    kern<<<ceil_div((long long)(n), 256), 256, 0, dm_stream>>>(__VA_ARGS__); cudaLaunchCheck(); } } while (0)

// ================================================================================================
// forward
// ================================================================================================
// out [N, C] = inp [N, C] + row [C]
__global__ void add_row_fwd_kernel(float *out, const float *inp, const float *row, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = inp[i] + row[i % C];
}
static void cu_add_row_forward(real *out, const real *inp, const real *row, int N, int C) {
    size_t n = (size_t)N * C;
    EW(add_row_fwd_kernel, n, out, inp, row, n, C);
}

// sg, out [N, C]; inp rows at stride ldx
__global__ void silu_rows_fwd_kernel(float *out, float *sg, const float *inp, int ldx, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[(i / C) * ldx + i % C], s = sigmoidf_dev(x);
    sg[i] = s;
    out[i] = x * s;
}
static void cu_silu_rows_forward(real *out, real *sg, const real *inp, int ldx, int N, int C) {
    size_t n = (size_t)N * C;
    EW(silu_rows_fwd_kernel, n, out, sg, inp, ldx, n, C);
}

// sg [N, Cs] = sigmoid(inp[:, :Cs] + bias), cp [N, Cc] = inp[:, Cs:Cs+Cc]; inp at stride ldx
__global__ void sigmoid_split_fwd_kernel(float *sg, float *cp, const float *inp, int ldx, const float *bias,
                                         int N, int Cs, int Cc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int W = Cs + Cc;
    if (i >= (size_t)N * W) return;
    size_t n = i / W;
    int j = (int)(i % W);
    float x = inp[n * ldx + j];
    if (j < Cs) sg[n * Cs + j] = sigmoidf_dev(bias ? x + bias[j] : x);
    else cp[n * Cc + (j - Cs)] = x;
}
static void cu_sigmoid_split_forward(real *sg, real *cp, const real *inp, int ldx, const real *bias, int N,
                                     int Cs, int Cc) {
    long long n = (long long)N * (Cs + Cc);
    EW(sigmoid_split_fwd_kernel, n, sg, cp, inp, ldx, bias, N, Cs, Cc);
}

// gs, g [N, H*dh]; A [H], bias [H*dh]. exp(A_h) in double rounded to float, as the CPU.
__global__ void decay_gate_fwd_kernel(float *gs, float *g, const float *z, const float *A, const float *bias,
                                      float gmin, size_t n, int d, int dh) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int c = (int)(i % d);
    float eh = (float)exp((double)A[c / dh]);
    float s = sigmoidf_dev(eh * (z[i] + bias[c]));
    gs[i] = s;
    g[i] = gmin * s;
}
static void cu_decay_gate_forward(real *gs, real *g, const real *z, const real *A, const real *bias, real gmin,
                                  int N, int H, int dh) {
    size_t n = (size_t)N * H * dh;
    EW(decay_gate_fwd_kernel, n, gs, g, z, A, bias, gmin, n, H * dh, dh);
}

// gt [N, C] = sigmoid(gt + bias) in place, og = on gt
__global__ void gate_mul_fwd_kernel(float *gt, float *og, const float *on, const float *bias, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = sigmoidf_dev(gt[i] + bias[i % C]);
    gt[i] = s;
    og[i] = on[i] * s;
}
static void cu_gate_mul_forward(real *gt, real *og, const real *on, const real *bias, int N, int C) {
    size_t n = (size_t)N * C;
    EW(gate_mul_fwd_kernel, n, gt, og, on, bias, n, C);
}

// one block per row: gate[n] = sigmoid(nn . kn * scale) (dot in double: a fixed tree over the
// block, not the CPU's 8 partial sums), e = gate val
__global__ void mem_gate_fwd_kernel(float *gate, float *e, const float *nn, const float *kn, const float *val,
                                    float scale, int C) {
    __shared__ double sh[256];
    size_t off = (size_t)blockIdx.x * C;
    double s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)nn[off + c] * kn[off + c];
    double dot = block_sum_d(s, sh);
    float g = (float)(1.0 / (1.0 + exp(-dot * scale)));
    if (threadIdx.x == 0) gate[blockIdx.x] = g;
    for (int c = threadIdx.x; c < C; c += blockDim.x) e[off + c] = g * val[off + c];
}
static void cu_mem_gate_forward(real *gate, real *e, const real *nn, const real *kn, const real *val,
                                real scale, int N, int C) {
    if (N <= 0) return;
    mem_gate_fwd_kernel<<<N, row_threads(C), 0, dm_stream>>>(gate, e, nn, kn, val, scale, C);
    cudaLaunchCheck();
}

// body = w0 a + min(w1, cap) e + w2 gout (from 0, in that order; NULL arms absent),
// h = hprev + alpha body; w [N, 3], alpha [1] on the device (NULL: 1)
__global__ void mix_fwd_kernel(float *body, float *h, const float *hprev, const float *w, const float *a,
                               const float *e, const float *gout, float cap, const float *alpha, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float *ct = w + (i / C) * 3;
    float wm = ct[1] < cap ? ct[1] : cap;
    float b = 0;
    if (a) b += ct[0] * a[i];
    if (e) b += wm * e[i];
    if (gout) b += ct[2] * gout[i];
    body[i] = b;
    h[i] = hprev[i] + (alpha ? alpha[0] : 1.0f) * b;
}
static void cu_mix_forward(real *body, real *h, const real *hprev, const real *w, const real *a, const real *e,
                           const real *gout, real cap, const real *alpha, int N, int C) {
    size_t n = (size_t)N * C;
    EW(mix_fwd_kernel, n, body, h, hprev, w, a, e, gout, cap, alpha, n, C);
}

__global__ void running_mean_fwd_kernel(float *out, const float *prev, const float *y, float wp, float wy, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = wp * prev[i] + wy * y[i];
}
static void cu_running_mean_forward(real *out, const real *prev, const real *y, int i, size_t n) {
    if (!n) return;
    if (i == 0 || !prev) {
        cudaCheck(cudaMemcpyAsync(out, y, sizeof(float) * n, cudaMemcpyDeviceToDevice, dm_stream));
        return;
    }
    float wp = (float)i / (i + 1), wy = 1.0f / (i + 1);
    EW(running_mean_fwd_kernel, n, out, prev, y, wp, wy, n);
}

// ---- deterministic whole-array reductions: a fixed grid (a function of n only) of block
// partials in double, then one block sums the partials; both levels are fixed trees, so the
// result is a pure function of the inputs (the CPU sums in index order / dm_dot_d's lanes). ----
#define RED_THREADS 256
#define RED_MAX_BLOCKS DM_RED_MAX_BLOCKS
static int red_blocks(size_t n) {
    long long b = ceil_div((long long)n, RED_THREADS * 8);  // >= 8 elements per thread
    return (int)(b < 1 ? 1 : b > RED_MAX_BLOCKS ? RED_MAX_BLOCKS : b);
}
// partial[blockIdx] = sum over this block's share of a[i] (b == NULL) or a[i] b[i]
__global__ void red_partial_kernel(double *partial, const float *a, const float *b, size_t n) {
    __shared__ double sh[RED_THREADS];
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * RED_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * RED_THREADS)
        s += b ? (double)a[i] * b[i] : (double)a[i];
    double t = block_sum_d(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = t;
}
// one block: the sum of nb partials, written (out_d) or added to a float (out_f += (float)sum)
__global__ void red_final_kernel(double *out_d, float *out_f, const double *partial, int nb) {
    __shared__ double sh[RED_THREADS];
    double s = 0;
    for (int i = threadIdx.x; i < nb; i += RED_THREADS) s += partial[i];
    double t = block_sum_d(s, sh);
    if (threadIdx.x == 0) {
        if (out_d) out_d[0] = t;
        if (out_f) out_f[0] += (float)t;
    }
}
int dm_reduce_partials(double *partial, const float *a, const float *b, size_t n) {
    int nb = red_blocks(n);
    red_partial_kernel<<<nb, RED_THREADS, 0, dm_stream>>>(partial, a, b, n);
    cudaLaunchCheck();
    return nb;
}
static void reduce_launch(double *out_d, float *out_f, const float *a, const float *b, size_t n) {
    double *partial = (double *)dm_scratch(SCR_MISC, sizeof(double) * RED_MAX_BLOCKS);
    int nb = dm_reduce_partials(partial, a, b, n);
    red_final_kernel<<<1, RED_THREADS, 0, dm_stream>>>(out_d, out_f, partial, nb);
    cudaLaunchCheck();
}
static void cu_sum_forward(double *out, const real *x, size_t n) { reduce_launch(out, NULL, x, NULL, n); }

// ================================================================================================
// backward
// ================================================================================================
// dlogits [N, V] = scale (probs - onehot(targets)), the CPU's two steps in its order
__global__ void ce_logits_bwd_kernel(float *dlogits, const float *probs, const int *targets, float scale,
                                     size_t n, int V) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float d = scale * probs[i];
    if ((int)(i % V) == targets[i / V]) d -= scale;
    dlogits[i] = d;
}
static void cu_ce_logits_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V) {
    size_t n = (size_t)N * V;
    EW(ce_logits_bwd_kernel, n, dlogits, probs, targets, scale, n, V);
}

__global__ void running_mean_bwd_kernel(float *dy, float *dbar, float wy, float wp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float b = dbar[i];
    dy[i] = b * wy;
    dbar[i] = b * wp;
}
static void cu_running_mean_backward(real *dy, real *dbar, int i, size_t n) {
    float wy = 1.0f / (i + 1), wp = (float)i / (i + 1);
    EW(running_mean_bwd_kernel, n, dy, dbar, wy, wp, n);
}

__global__ void scale_by_param_kernel(float *out, const float *in, const float *alpha, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (alpha ? alpha[0] : 1.0f) * in[i];
}
// dalpha += dh . body (the two-level tree above; the CPU uses dm_dot_d's 8 lanes), dbody = alpha dh
static void cu_rezero_backward(real *dbody, real *dalpha, const real *dh, const real *body, const real *alpha,
                               size_t n) {
    if (dalpha && n) reduce_launch(NULL, dalpha, dh, body, n);  // reads dh before anything writes
    EW(scale_by_param_kernel, n, dbody, dh, alpha, n);
}

// one block per row: dw[n, j] = dbody . arm (0 where capped), darm = wc dbody
__global__ void mix_arm_bwd_kernel(float *darm, float *dw, const float *dbody, const float *arm, const float *w,
                                   int j, int use_cap, float cap, int C) {
    __shared__ double sh[256];
    size_t off = (size_t)blockIdx.x * C;
    float wn = w[(size_t)blockIdx.x * 3 + j];
    int capped = use_cap && !(wn < cap);
    float wc = capped ? cap : wn;
    double s = 0;
    if (!capped)
        for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)dbody[off + c] * arm[off + c];
    double dot = block_sum_d(s, sh);
    if (threadIdx.x == 0) dw[(size_t)blockIdx.x * 3 + j] = capped ? 0.0f : (float)dot;
    for (int c = threadIdx.x; c < C; c += blockDim.x) darm[off + c] = wc * dbody[off + c];
}
static void cu_mix_arm_backward(real *darm, real *dw, const real *dbody, const real *arm, const real *w, int j,
                                int use_cap, real cap, int N, int C) {
    if (N <= 0) return;
    mix_arm_bwd_kernel<<<N, row_threads(C), 0, dm_stream>>>(darm, dw, dbody, arm, w, j, use_cap, cap, C);
    cudaLaunchCheck();
}

__global__ void gate_mul_bwd_kernel(float *don, float *dpre, const float *dog, const float *gt, const float *on,
                                    size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = gt[i], d = dog[i];
    don[i] = d * s;
    dpre[i] = d * on[i] * s * (1 - s);
}
static void cu_gate_mul_backward(real *don, real *dpre, const real *dog, const real *gt, const real *on, size_t n) {
    EW(gate_mul_bwd_kernel, n, don, dpre, dog, gt, on, n);
}

// Block (x, y): 32 channels x 32 row-threads over slice y of the rows. Writes dz (each element by
// exactly one thread) and sums per channel over the slice's rows (thread ty takes rows ty,
// ty+32, ...; a fixed tree over ty) into part_b[y][c] = sum dz and part_a[y][c] = sum dz (z + bias);
// decay_gate_final adds the slices in order. Two stages for the reason colsum has them
// (backend_cuda.cu): ceil(d/32) blocks alone (16 at small, 24 at base) would stream N x d x 5
// floats through a few SMs of 132. The slicing is a function of N only (deterministic).
__global__ void __launch_bounds__(1024) decay_gate_bwd_kernel(float *dz, double *part_b, double *part_a, const float *dg,
                                      const float *gs, const float *z, const float *A, const float *bias, float gmin,
                                      int N, int d, int dh, int rows_per) {
    __shared__ double sb_sh[32][33], sa_sh[32][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
    double sb = 0, sa = 0;
    if (c < d) {
        float eh = (float)exp((double)A[c / dh]), b = bias[c];
        for (int n = r0 + ty; n < r1; n += 32) {
            size_t i = (size_t)n * d + c;
            float g = gs[i];
            float v = dg[i] * gmin * g * (1 - g) * eh;
            dz[i] = v;
            sb += v;
            sa += (double)(v * (z[i] + b));
        }
    }
    sb_sh[ty][tx] = sb;
    sa_sh[ty][tx] = sa;
    __syncthreads();
    for (int w = 16; w > 0; w >>= 1) {
        if (ty < w) { sb_sh[ty][tx] += sb_sh[ty + w][tx]; sa_sh[ty][tx] += sa_sh[ty + w][tx]; }
        __syncthreads();
    }
    if (ty == 0 && c < d) {
        part_b[(size_t)blockIdx.y * d + c] = sb_sh[0][tx];
        part_a[(size_t)blockIdx.y * d + c] = sa_sh[0][tx];
    }
}
// per channel, the slices in order: dbias[c] += sum dz, sA[c] = sum dz (z + bias)
__global__ void decay_gate_final_kernel(float *dbias, double *sA, const double *part_b, const double *part_a, int S,
                                        int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= d) return;
    double sb = 0, sa = 0;
    for (int k = 0; k < S; k++) { sb += part_b[(size_t)k * d + c]; sa += part_a[(size_t)k * d + c]; }
    dbias[c] += (float)sb;
    sA[c] = sa;
}
// one thread per head: dA[h] += (float)sA[c] for the head's channels in order (as the CPU)
__global__ void decay_gate_dA_kernel(float *dA, const double *sA, int H, int dh) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    float acc = dA[h];
    for (int x = 0; x < dh; x++) acc += (float)sA[(size_t)h * dh + x];
    dA[h] = acc;
}
static void cu_decay_gate_backward(real *dz, real *dA, real *dbias, const real *dg, const real *gs, const real *z,
                                   const real *A, const real *bias, real gmin, int N, int H, int dh) {
    int d = H * dh;
    if (d <= 0) return;
    int S = row_slices(N);  // as colsum
    int rows_per = ceil_div(N, S);
    double *sA = (double *)dm_scratch(SCR_MISC, sizeof(double) * d);
    double *part = (double *)dm_scratch(SCR_COLSUM, sizeof(double) * 2 * (size_t)S * d);
    decay_gate_bwd_kernel<<<dim3(ceil_div(d, 32), S), dim3(32, 32), 0, dm_stream>>>(
        dz, part, part + (size_t)S * d, dg, gs, z, A, bias, gmin, N, d, dh, rows_per);
    cudaLaunchCheck();
    decay_gate_final_kernel<<<ceil_div(d, 256), 256, 0, dm_stream>>>(dbias, sA, part, part + (size_t)S * d, S, d);
    cudaLaunchCheck();
    decay_gate_dA_kernel<<<ceil_div(H, 64), 64, 0, dm_stream>>>(dA, sA, H, dh);
    cudaLaunchCheck();
}

// dx [N, C] at stride ldd = dy y (1 - y)
__global__ void sigmoid_rows_bwd_kernel(float *dx, int ldd, const float *dy, const float *y, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = y[i];
    dx[(i / C) * ldd + i % C] = dy[i] * s * (1 - s);
}
static void cu_sigmoid_rows_backward(real *dx, int ldd, const real *dy, const real *y, int N, int C) {
    size_t n = (size_t)N * C;
    EW(sigmoid_rows_bwd_kernel, n, dx, ldd, dy, y, n, C);
}

__global__ void silu_rows_bwd_kernel(float *dx, int ldd, const float *dy, const float *x, int ldx, const float *sg,
                                     size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / C, c = i % C;
    float s = sg[i];
    dx[r * ldd + c] = dy[i] * s * (1 + x[r * ldx + c] * (1 - s));
}
static void cu_silu_rows_backward(real *dx, int ldd, const real *dy, const real *x, int ldx, const real *sg,
                                  int N, int C) {
    size_t n = (size_t)N * C;
    EW(silu_rows_bwd_kernel, n, dx, ldd, dy, x, ldx, sg, n, C);
}

// one block per (n, h) row of dh: k = (dy . y) / scale (a fixed tree, not dm_dot_d's lanes), then
// du = r (scale dy - y k) through silu'
__global__ void l2norm_silu_bwd_kernel(float *dx, int ldd, const float *dy, const float *y, const float *rn,
                                       float scale, const float *x, int ldx, const float *sg, int H, int dh) {
    __shared__ double sh[256];
    int n = blockIdx.x / H, h = blockIdx.x % H;
    size_t j = (size_t)n * H * dh + (size_t)h * dh;
    const float *g = dy + j, *yr = y + j, *sr = sg + j;
    const float *xr = x + (size_t)n * ldx + (size_t)h * dh;
    float *o = dx + (size_t)n * ldd + (size_t)h * dh;
    double s = 0;
    for (int c = threadIdx.x; c < dh; c += blockDim.x) s += (double)g[c] * yr[c];
    double dot = block_sum_d(s, sh);
    float r = rn[blockIdx.x], k = (float)(dot / scale);
    for (int c = threadIdx.x; c < dh; c += blockDim.x) {
        float du = r * (scale * g[c] - yr[c] * k), sv = sr[c];
        o[c] = du * sv * (1 + xr[c] * (1 - sv));
    }
}
static void cu_l2norm_silu_backward(real *dx, int ldd, const real *dy, const real *y, const real *rn, real scale,
                                    const real *x, int ldx, const real *sg, int N, int H, int dh) {
    if ((long long)N * H <= 0) return;  // N H <= 2^31 - 2^26 (shape_limits.h): one block per (token, head)
    l2norm_silu_bwd_kernel<<<N * H, row_threads(dh), 0, dm_stream>>>(dx, ldd, dy, y, rn, scale, x, ldx, sg, H, dh);
    cudaLaunchCheck();
}

// one block per row: dgate = de . val (tree), dval += gate de, dnn = dp kn, dkn += dp nn
__global__ void mem_gate_bwd_kernel(float *dnn, float *dkn, float *dval, const float *de, const float *gate,
                                    const float *nn, const float *kn, const float *val, float scale, int C) {
    __shared__ double sh[256];
    size_t off = (size_t)blockIdx.x * C;
    float g = gate[blockIdx.x];
    double s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        s += (double)de[off + c] * val[off + c];
        dval[off + c] += g * de[off + c];
    }
    double dgate = block_sum_d(s, sh);
    float dp = (float)dgate * g * (1 - g) * scale;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        dnn[off + c] = dp * kn[off + c];
        dkn[off + c] += dp * nn[off + c];
    }
}
static void cu_mem_gate_backward(real *dnn, real *dkn, real *dval, const real *de, const real *gate, const real *nn,
                                 const real *kn, const real *val, real scale, int N, int C) {
    if (N <= 0) return;
    mem_gate_bwd_kernel<<<N, row_threads(C), 0, dm_stream>>>(dnn, dkn, dval, de, gate, nn, kn, val, scale, C);
    cudaLaunchCheck();
}

// dbias [C] += column sums of dout [N, C] at stride ld (the CPU sums in row order): the two-stage
// column sum of backend_cuda.cu — the controller's 3 columns over 16k rows would otherwise run
// on one block
static void cu_bias_backward(real *dbias, const real *dout, int ld, int N, int C) {
    if (C <= 0 || N <= 0) return;
    dm_colsum_rows(dbias, dout, ld, N, C);
}

static void cu_copy_rows(real *dst, int ldd, const real *src, int lds, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaCheck(cudaMemcpy2DAsync(dst, sizeof(float) * ldd, src, sizeof(float) * lds, sizeof(float) * C, N,
                                cudaMemcpyDeviceToDevice, dm_stream));
}

__global__ void add_inplace_kernel(float *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
static void cu_add_inplace(real *dst, const real *src, size_t n) { EW(add_inplace_kernel, n, dst, src, n); }

// ================================================================================================
// the table entries (called by backend_cuda() when it fills the table)
// ================================================================================================
void cuda_fused_fill(Backend *b) {
    b->add_row_forward = cu_add_row_forward;
    b->silu_rows_forward = cu_silu_rows_forward;
    b->sigmoid_split_forward = cu_sigmoid_split_forward;
    b->decay_gate_forward = cu_decay_gate_forward;
    b->gate_mul_forward = cu_gate_mul_forward;
    b->mem_gate_forward = cu_mem_gate_forward;
    b->mix_forward = cu_mix_forward;
    b->running_mean_forward = cu_running_mean_forward;
    b->sum_forward = cu_sum_forward;
    b->ce_logits_backward = cu_ce_logits_backward;
    b->running_mean_backward = cu_running_mean_backward;
    b->rezero_backward = cu_rezero_backward;
    b->mix_arm_backward = cu_mix_arm_backward;
    b->gate_mul_backward = cu_gate_mul_backward;
    b->decay_gate_backward = cu_decay_gate_backward;
    b->sigmoid_rows_backward = cu_sigmoid_rows_backward;
    b->silu_rows_backward = cu_silu_rows_backward;
    b->l2norm_silu_backward = cu_l2norm_silu_backward;
    b->mem_gate_backward = cu_mem_gate_backward;
    b->bias_backward = cu_bias_backward;
    b->copy_rows = cu_copy_rows;
    b->add_inplace = cu_add_inplace;
}
#endif  // DM_DOUBLE
