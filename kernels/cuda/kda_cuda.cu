// kda_cuda.cu — one KDA decoding step (SPEC §2) on the GPU: `:gen` and `:sample` advance each
// head's state by one token. Training uses the chunked form (kda_chunk_cuda.cu), which
// tests/gpu/parity.cu checks against the CPU's recurrent reference. (A recurrent training
// forward/backward lived here with no caller since the chunked form replaced it — its comment
// said parity compared the two, which it never did — and was deleted: QA, session 38.)
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

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
