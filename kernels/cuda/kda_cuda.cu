// kda_cuda.cu — the KDA core (SPEC §2) on the GPU: forward, exact backward, one decoding step.
//
// This is the RECURRENT (time-sequential, exact) form: the backend table uses the chunked form
// of kda_chunk_cuda.cu; these entry points stay as its on-device reference (tests/gpu/parity.cu
// compares the two) and the decoding step. Latency-bound: one block per (b, h), T steps.
//
// Why this shape is cheap to get right: with S[i][j] (key i, value j), column j of the state
// evolves on its own — r_j = sum_i a_i S_ij k_i, u_j = beta (v_j - r_j), S_ij = a_i S_ij + k_i u_j,
// o_j = sum_i S_ij q_i — so thread j owns column j and the forward needs no reduction across
// threads at all. The backward's sums over j (dq, dk, dg, dbeta) go through shared memory and
// are added in a fixed order by one thread per output (deterministic, no atomics).
//
// Layout (as the CPU): q, k, v, g, o [B, T, H, D]; beta [B, T, H]; per-step S is [D, D].
// ws per (b, h), in floats (forward -> backward; the checkpoint scheme of kda_recurrent_*):
//   ck [nseg, D, D] state before each segment of KDA_SEG tokens
//   st [SEG+1, D, D] the states of the segment being differentiated (recomputed)
//   dS [D, D]        d loss / d S_t
//   ur [SEG, 2, D]   u_t and r_t of the segment
// Supports D <= 128 (shared memory); the presets use dh = 64.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

#define KDA_SEG 16
#define KDA_MAXD 128

static __host__ __device__ size_t kda_per_bh(int T, int D) {
    size_t nseg = (size_t)(T + KDA_SEG - 1) / KDA_SEG, DD = (size_t)D * D;
    return (nseg + KDA_SEG + 2) * DD + 2 * (size_t)KDA_SEG * D;
}

size_t cuda_kda_recurrent_ws_size(int B, int T, int H, int D, int C) {
    (void)C;  // the recurrent form has no chunk
    return (size_t)B * H * kda_per_bh(T, D);
}

static void kda_check_d(int D) {
    if (D < 1 || D > KDA_MAXD) {
        fprintf(stderr, "cuda kda: head dim %d unsupported (1..%d)\n", D, KDA_MAXD);
        exit(1);
    }
}

// grid B*H, block D: thread j owns column j of S (shared memory [D, D], column-private)
__global__ void kda_fwd_kernel(float *o, float *ws, const float *q, const float *k, const float *v,
                               const float *beta, const float *g, int T, int H, int D) {
    extern __shared__ float sm[];
    float *S = sm;             // [D, D]
    float *ks = S + D * D;     // [D] k_t
    float *qs = ks + D;        // [D] q_t
    float *as = qs + D;        // [D] exp(g_t)
    int bh = blockIdx.x, b = bh / H, h = bh % H, j = threadIdx.x;
    size_t DD = (size_t)D * D, HD = (size_t)H * D;
    float *ck = ws + (size_t)bh * kda_per_bh(T, D);  // [nseg, D, D]
    for (int i = 0; i < D; i++) S[i * D + j] = 0;
    for (int t = 0; t < T; t++) {
        size_t row = ((size_t)b * T + t) * HD + (size_t)h * D;
        if (t % KDA_SEG == 0)
            for (int i = 0; i < D; i++) ck[(size_t)(t / KDA_SEG) * DD + i * D + j] = S[i * D + j];
        __syncthreads();  // everyone is done reading the previous token's vectors
        ks[j] = k[row + j]; qs[j] = q[row + j]; as[j] = expf(g[row + j]);
        __syncthreads();
        float r = 0;
        for (int i = 0; i < D; i++) {  // decay first, then read against k
            float s = S[i * D + j] * as[i];
            S[i * D + j] = s;
            r += s * ks[i];
        }
        float u = beta[((size_t)b * T + t) * H + h] * (v[row + j] - r);
        float oj = 0;
        for (int i = 0; i < D; i++) {  // rank-1 write, then the read-out with q
            float s = S[i * D + j] + ks[i] * u;
            S[i * D + j] = s;
            oj += s * qs[i];
        }
        o[row + j] = oj;
    }
}

// grid B*H, block D. Shared: R1, R2 [D, D+1] per-column contributions (padded: the row-wise
// sums read across rows without bank conflicts), ks, qs, as [D], dbv [D].
__global__ void kda_bwd_kernel(float *dq, float *dk, float *dv, float *dbeta, float *dg,
                               const float *dout, const float *q, const float *k, const float *v,
                               const float *beta, const float *g, float *ws, int T, int H, int D) {
    extern __shared__ float sm[];
    int P = D + 1;
    float *R1 = sm, *R2 = R1 + D * P;                // [D, D+1] each
    float *ks = R2 + D * P, *qs = ks + D, *as = qs + D, *dbv = as + D;  // [D] each
    int bh = blockIdx.x, b = bh / H, h = bh % H, j = threadIdx.x;
    size_t DD = (size_t)D * D, HD = (size_t)H * D;
    int nseg = (T + KDA_SEG - 1) / KDA_SEG;
    float *ck = ws + (size_t)bh * kda_per_bh(T, D);  // [nseg, D, D]
    float *st = ck + (size_t)nseg * DD;              // [SEG+1, D, D]; slot x = S_{t0+x-1}
    float *dS = st + (KDA_SEG + 1) * DD;             // [D, D]
    float *ur = dS + DD;                             // [SEG, 2, D]
    for (int i = 0; i < D; i++) dS[i * D + j] = 0;
    for (int seg = nseg - 1; seg >= 0; seg--) {
        int t0 = seg * KDA_SEG, n = T - t0 < KDA_SEG ? T - t0 : KDA_SEG;
        for (int i = 0; i < D; i++) st[i * D + j] = ck[(size_t)seg * DD + i * D + j];
        for (int x = 0; x < n; x++) {  // recompute the segment's states (forward's op order)
            size_t row = ((size_t)b * T + t0 + x) * HD + (size_t)h * D;
            __syncthreads();
            ks[j] = k[row + j]; as[j] = expf(g[row + j]);
            __syncthreads();
            const float *Sp = st + (size_t)x * DD;
            float *Sn = st + (size_t)(x + 1) * DD;
            float r = 0;
            for (int i = 0; i < D; i++) {
                float s = Sp[i * D + j] * as[i];
                Sn[i * D + j] = s;
                r += s * ks[i];
            }
            float u = beta[((size_t)b * T + t0 + x) * H + h] * (v[row + j] - r);
            for (int i = 0; i < D; i++) Sn[i * D + j] = Sn[i * D + j] + ks[i] * u;
            ur[(size_t)x * 2 * D + j] = u;
            ur[(size_t)x * 2 * D + D + j] = r;
        }
        for (int x = n - 1; x >= 0; x--) {
            size_t row = ((size_t)b * T + t0 + x) * HD + (size_t)h * D;
            size_t bi = ((size_t)b * T + t0 + x) * H + h;
            __syncthreads();  // previous step's reductions have read R1/R2 and the vectors
            ks[j] = k[row + j]; qs[j] = q[row + j]; as[j] = expf(g[row + j]);
            __syncthreads();
            const float *St = st + (size_t)(x + 1) * DD, *Sp = st + (size_t)x * DD;
            float u = ur[(size_t)x * 2 * D + j], r = ur[(size_t)x * 2 * D + D + j];
            float doj = dout[row + j], bt = beta[bi];
            // o = S_t^T q, S_t = S' + k u^T: dS += q do^T; dq_i = sum_j S_t,ij do_j;
            // dk_i += sum_j dS_ij u_j; du_j = sum_i k_i dS_ij
            float du = 0;
            for (int i = 0; i < D; i++) {
                float ds = dS[i * D + j] + qs[i] * doj;
                dS[i * D + j] = ds;
                R1[i * P + j] = St[i * D + j] * doj;
                R2[i * P + j] = ds * u;
                du += ks[i] * ds;
            }
            // u = beta (v - r): dbeta, dv; dr = -beta du
            dbv[j] = du * (v[row + j] - r);
            dv[row + j] += bt * du;
            float dr = -bt * du;
            __syncthreads();
            {
                float s = 0;
                for (int jj = 0; jj < D; jj++) s += R1[j * P + jj];
                dq[row + j] += s;
            }
            if (j == 0) {
                float s = 0;
                for (int jj = 0; jj < D; jj++) s += dbv[jj];
                dbeta[bi] += s;
            }
            __syncthreads();
            // r = S'^T k, S' = Diag(a) S_{t-1}: dS' = dS + k dr^T; dk_i += sum_j S'_ij dr_j;
            // dg_i = sum_j dS'_ij S'_ij; dS_{t-1} = Diag(a) dS'
            for (int i = 0; i < D; i++) {
                float sp = as[i] * Sp[i * D + j], dsp = dS[i * D + j] + ks[i] * dr;
                R2[i * P + j] += sp * dr;
                R1[i * P + j] = dsp * sp;
                dS[i * D + j] = as[i] * dsp;
            }
            __syncthreads();
            {
                float sk = 0, sg = 0;
                for (int jj = 0; jj < D; jj++) { sk += R2[j * P + jj]; sg += R1[j * P + jj]; }
                dk[row + j] += sk;
                dg[row + j] += sg;
            }
        }
    }
}

void cuda_kda_recurrent_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                      const real *beta, const real *g, int B, int T, int H, int D, int C) {
    (void)C;
    if (B * H <= 0 || T <= 0) return;
    kda_check_d(D);
    size_t smem = sizeof(float) * ((size_t)D * D + 3 * D);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(kda_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kda_fwd_kernel<<<B * H, D, smem, dm_stream>>>(o, ws, q, k, v, beta, g, T, H, D);
    cudaLaunchCheck();
}

void cuda_kda_recurrent_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                       const real *q, const real *k, const real *v, const real *beta,
                       const real *g, real *ws, int B, int T, int H, int D, int C) {
    (void)C;
    if (B * H <= 0 || T <= 0) return;
    kda_check_d(D);
    size_t smem = sizeof(float) * (2 * (size_t)D * (D + 1) + 4 * D);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(kda_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kda_bwd_kernel<<<B * H, D, smem, dm_stream>>>(dq, dk, dv, dbeta, dg, dout, q, k, v, beta, g, ws, T, H, D);
    cudaLaunchCheck();
}

// One decoding step: S [H, D, D] in place; q, k, v, g [H, D]; beta [H]; o [H, D].
// grid (H, ceil(D / threads)): thread j owns column j of head h's state (kda_step's arithmetic,
// every sum in i order). k, exp(g) and q pass through shared memory in tiles of KS_T, so any head
// dim the config allows runs (a decode of a model with wide heads must not end the session).
#define KS_T 256
__global__ void __launch_bounds__(KS_T) kda_step_kernel(float *o, float *S, const float *q, const float *k,
                                                        const float *v, const float *beta, const float *g, int D) {
    __shared__ float ks[KS_T], qs[KS_T], as[KS_T];
    const int h = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    const bool own = j < D;  // the last block's spare threads stage tiles and pass barriers only
    const size_t hd = (size_t)h * D;
    float *Sh = S + hd * D;  // [D, D]
    float r = 0;
    for (int i0 = 0; i0 < D; i0 += KS_T) {
        const int n = D - i0 < KS_T ? D - i0 : KS_T;
        __syncthreads();  // the previous tile's readers are done
        for (int x = threadIdx.x; x < n; x += blockDim.x) { ks[x] = k[hd + i0 + x]; as[x] = expf(g[hd + i0 + x]); }
        __syncthreads();
        if (own)
            for (int x = 0; x < n; x++) {
                size_t at = (size_t)(i0 + x) * D + j;
                float s = Sh[at] * as[x];
                Sh[at] = s;
                r += s * ks[x];
            }
    }
    const float u = own ? beta[h] * (v[hd + j] - r) : 0.0f;
    float oj = 0;
    for (int i0 = 0; i0 < D; i0 += KS_T) {
        const int n = D - i0 < KS_T ? D - i0 : KS_T;
        __syncthreads();
        for (int x = threadIdx.x; x < n; x += blockDim.x) { ks[x] = k[hd + i0 + x]; qs[x] = q[hd + i0 + x]; }
        __syncthreads();
        if (own)
            for (int x = 0; x < n; x++) {
                size_t at = (size_t)(i0 + x) * D + j;
                float s = Sh[at] + ks[x] * u;
                Sh[at] = s;
                oj += s * qs[x];
            }
    }
    if (own) o[hd + j] = oj;
}

void cuda_kda_step(real *o, real *S, const real *q, const real *k, const real *v,
                   const real *beta, const real *g, int H, int D) {
    if (H <= 0 || D <= 0) return;
    const int nt = D < KS_T ? (D + 31) / 32 * 32 : KS_T;  // whole warps
    kda_step_kernel<<<dim3(H, ceil_div(D, nt)), nt, 0, dm_stream>>>(o, S, q, k, v, beta, g, D);
    cudaLaunchCheck();
}

#endif  // DM_DOUBLE
