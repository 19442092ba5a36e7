// kda_chunk_cuda.cu — the KDA core (SPEC §2) on the GPU in the chunked WY/UT form: the backend
// table's kda_forward / kda_backward.
//
// One thread block per (b, h) runs kda_chunk_core.h: chunks of 16 tokens in sequence, each chunk
// a handful of phases over its [16, D] / [D, D] outputs spread across the block's threads,
// separated by __syncthreads(). Every sum is one thread's fixed-order loop (no atomics, no
// dependence on the block size), so the result is deterministic; the same source runs on the CPU
// in tests/test_kda_chunk_core.c against the recurrent reference (float <= 1e-4, double <= 1e-9),
// which is how it was verified without a device. The workspace that passes from forward to
// backward (Sc, U, W, PM) lives in global memory; the chunk-local views (the [16, D] operands and
// gradients, dS, dS0, S0 Y U transposed: 144 KB at D = 64, the head size of every preset) live in the block's
// shared memory when they fit the device's opt-in limit (227 KB on an H200), else in the global
// workspace (D = 128 and up) — a choice made from D and the device only. The host test runs the
// shared-memory carving with the local buffer poisoned between forward and backward.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

#define DM_HD __device__
#define DM_HDS __host__ __device__
#define DM_SYNC() __syncthreads()
#include "kda_chunk_core.h"
static_assert(KDA_GC == 16, "backend_cuda.cu sets Backend.kda_fixed_chunk = 16: keep the two together");

#define KDA_THREADS 256

extern __shared__ __align__(16) float kda_smem[];  // kda_core_local_size(D) floats when use_smem

__global__ void kda_chunk_fwd_kernel(float *o, float *ws, const float *q, const float *k, const float *v,
                                     const float *beta, const float *g, int T, int H, int D, int use_smem) {
    int bh = blockIdx.x, b = bh / H, h = bh % H;
    size_t HD = (size_t)H * D, r0 = (size_t)b * T * HD + (size_t)h * D, b0 = (size_t)b * T * H + h;
    KdaCoreWs w = kda_core_carve(ws, bh, T, D);
    if (use_smem) kda_core_carve_local(&w, kda_smem, D);
    kda_core_forward(&w, o + r0, q + r0, k + r0, v + r0, beta + b0, g + r0, HD, H, T, D, threadIdx.x,
                     blockDim.x);
}

__global__ void kda_chunk_bwd_kernel(float *dq, float *dk, float *dv, float *dbeta, float *dg,
                                     const float *dout, const float *q, const float *k, const float *beta,
                                     const float *g, float *ws, int T, int H, int D, int use_smem) {
    int bh = blockIdx.x, b = bh / H, h = bh % H;
    size_t HD = (size_t)H * D, r0 = (size_t)b * T * HD + (size_t)h * D, b0 = (size_t)b * T * H + h;
    KdaCoreWs w = kda_core_carve(ws, bh, T, D);
    if (use_smem) kda_core_carve_local(&w, kda_smem, D);
    kda_core_backward(&w, dq + r0, dk + r0, dv + r0, dbeta + b0, dg + r0, dout + r0, q + r0, k + r0,
                      beta + b0, g + r0, HD, H, T, D, threadIdx.x, blockDim.x);
}

// Shared memory for the chunk-local views of head size D: the bytes, or 0 when they do not fit
// this device (then the views stay in the global workspace). The kernels' opt-in limit is raised
// once, on the first (eager, never captured) call that needs it.
static size_t kda_smem_bytes(int D) {
    static int limit = -1;
    if (limit < 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    size_t bytes = sizeof(float) * kda_core_local_size(D);
    if (bytes > (size_t)limit) return 0;
    static size_t raised = 48 * 1024;  // the default limit needs no attribute
    if (bytes > raised) {
        cudaCheck(cudaFuncSetAttribute(kda_chunk_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        cudaCheck(cudaFuncSetAttribute(kda_chunk_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        raised = bytes;
    }
    return bytes;
}

// C (the config's kda_chunk) sets the CPU's chunk; the GPU kernel's chunk is fixed at 16 (a
// function of nothing but the code: no shape- or timing-dependent choice).
size_t cuda_kda_ws_size(int B, int T, int H, int D, int C) {
    (void)C;
    return kda_core_ws_size(B, T, H, D);
}

void cuda_kda_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                      const real *beta, const real *g, int B, int T, int H, int D, int C) {
    (void)C;
    if (B * H <= 0 || T <= 0) return;
    size_t sm = kda_smem_bytes(D);
    kda_chunk_fwd_kernel<<<B * H, KDA_THREADS, sm, dm_stream>>>(o, ws, q, k, v, beta, g, T, H, D, sm > 0);
    cudaLaunchCheck();
}

void cuda_kda_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                       const real *q, const real *k, const real *v, const real *beta,
                       const real *g, real *ws, int B, int T, int H, int D, int C) {
    (void)C; (void)v;  // v enters the backward only through W, which the forward kept
    if (B * H <= 0 || T <= 0) return;
    size_t sm = kda_smem_bytes(D);
    kda_chunk_bwd_kernel<<<B * H, KDA_THREADS, sm, dm_stream>>>(dq, dk, dv, dbeta, dg, dout, q, k, beta, g, ws,
                                                                T, H, D, sm > 0);
    cudaLaunchCheck();
}

#endif  // DM_DOUBLE
