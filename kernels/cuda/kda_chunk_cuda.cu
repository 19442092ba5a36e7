// kda_chunk_cuda.cu — the KDA core (SPEC §2) on the GPU in the chunked WY/UT form: the backend
// table's kda_forward / kda_backward.
//
// One thread block per (b, h) runs kda_chunk_core.h: chunks of 16 tokens in sequence, each chunk
// a handful of phases over its [16, D] / [D, D] outputs spread across the block's threads,
// separated by __syncthreads(). Every sum is one thread's fixed-order loop (no atomics, no
// dependence on the block size), so the result is deterministic; the same source runs on the CPU
// in tests/test_kda_chunk_core.c against the recurrent reference (float <= 1e-5, SPEC §2's bar; double <= 1e-9),
// which is how it was verified without a device. The workspace that passes from forward to
// backward (Sc, U, W, PM) lives in global memory; the chunk-local views (the [16, D] operands and
// gradients, dS, dS0, S0 Y U transposed), only those each kernel reads, live in the block's shared
// memory when they fit the device's opt-in limit (227 KB on an H200), else in the global workspace
// — a choice made from D and the device only. At D = 64, the head size of every preset, that is
// 48.8 KiB for the forward and 107.6 KiB for the backward, so two blocks of each fit an SM; the forward's
// fit up to D = 298, the backward's up to D = 105. The host test runs the shared-memory carvings
// with the local buffer poisoned between forward and backward.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

#define DM_HD __device__
#define DM_HDS __host__ __device__
#define DM_SYNC() __syncthreads()
#ifdef __CUDACC__
#define DM_UNROLL _Pragma("unroll")
#endif
#include "kda_chunk_core.h"
static_assert(KDA_GC == 16, "backend_cuda.cu sets Backend.kda_fixed_chunk = 16: keep the two together");

#define KDA_THREADS 256
// Two blocks per SM: the chunk loop is a chain of barriers with short, latency-bound phases
// (the 16-row solves run 64 of the 256 threads), so a second block's phases fill the gaps. It
// caps the registers at 65 536 / (2 * 256) = 128 a thread, and each kernel's shared memory must
// stay under half an SM's (kda_core_local_size_fwd / _bwd: 48.8 and 107.6 KiB at D = 64).
#define KDA_MIN_BLOCKS 2

extern __shared__ __align__(16) float kda_smem[];  // kda_core_local_size_fwd / _bwd(D) floats when use_smem

// Each kernel comes twice: the chunk-local views in shared memory (`local` = 1) or in the global
// workspace. Two kernels rather than a run-time flag: with the views known to come from kda_smem
// the compiler addresses them as shared memory (not through generic pointers) and can recompute
// a view's address instead of holding it in a register.
static __device__ __forceinline__ void kda_fwd_block(int local, float *o, float *ws, const float *q, const float *k,
                                                     const float *v, const float *beta, const float *g, int T,
                                                     int H, int D) {
    int bh = blockIdx.x, b = bh / H, h = bh % H;
    size_t HD = (size_t)H * D, r0 = (size_t)b * T * HD + (size_t)h * D, b0 = (size_t)b * T * H + h;
    KdaCoreWs w = kda_core_carve(ws, bh, T, D);
    if (local) kda_core_carve_local_fwd(&w, kda_smem, D);
    kda_core_forward(&w, o + r0, q + r0, k + r0, v + r0, beta + b0, g + r0, HD, H, T, D, threadIdx.x,
                     blockDim.x);
}

static __device__ __forceinline__ void kda_bwd_block(int local, float *dq, float *dk, float *dv, float *dbeta,
                                                     float *dg, const float *dout, const float *q, const float *k,
                                                     const float *beta, const float *g, float *ws, int T, int H,
                                                     int D) {
    int bh = blockIdx.x, b = bh / H, h = bh % H;
    size_t HD = (size_t)H * D, r0 = (size_t)b * T * HD + (size_t)h * D, b0 = (size_t)b * T * H + h;
    KdaCoreWs w = kda_core_carve(ws, bh, T, D);
    if (local) kda_core_carve_local_bwd(&w, kda_smem, D);
    kda_core_backward(&w, dq + r0, dk + r0, dv + r0, dbeta + b0, dg + r0, dout + r0, q + r0, k + r0,
                      beta + b0, g + r0, HD, H, T, D, threadIdx.x, blockDim.x);
}

__global__ void __launch_bounds__(KDA_THREADS, KDA_MIN_BLOCKS)
kda_chunk_fwd_smem_kernel(float *o, float *ws, const float *q, const float *k, const float *v, const float *beta,
                          const float *g, int T, int H, int D) {
    kda_fwd_block(1, o, ws, q, k, v, beta, g, T, H, D);
}
__global__ void __launch_bounds__(KDA_THREADS, KDA_MIN_BLOCKS)
kda_chunk_fwd_kernel(float *o, float *ws, const float *q, const float *k, const float *v, const float *beta,
                     const float *g, int T, int H, int D) {
    kda_fwd_block(0, o, ws, q, k, v, beta, g, T, H, D);
}
__global__ void __launch_bounds__(KDA_THREADS, KDA_MIN_BLOCKS)
kda_chunk_bwd_smem_kernel(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                          const float *q, const float *k, const float *beta, const float *g, float *ws, int T,
                          int H, int D) {
    kda_bwd_block(1, dq, dk, dv, dbeta, dg, dout, q, k, beta, g, ws, T, H, D);
}
__global__ void __launch_bounds__(KDA_THREADS, KDA_MIN_BLOCKS)
kda_chunk_bwd_kernel(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout, const float *q,
                     const float *k, const float *beta, const float *g, float *ws, int T, int H, int D) {
    kda_bwd_block(0, dq, dk, dv, dbeta, dg, dout, q, k, beta, g, ws, T, H, D);
}

// Shared memory for one kernel's chunk-local views (`floats` of them): the bytes, or 0 when they
// do not fit this device (then the views stay in the global workspace). A kernel's opt-in limit
// is raised once, on the first (eager, never captured) call that needs it.
static int kda_smem_limit(void) {
    static int limit = -1;
    if (limit < 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    return limit;
}
static size_t kda_smem_bytes(size_t floats) {
    size_t bytes = sizeof(float) * floats;
    return bytes > (size_t)kda_smem_limit() ? 0 : bytes;
}
// (a macro: cudaFuncSetAttribute takes the kernel itself)
#define KDA_RAISE(kernel, raised, bytes)                                                                  \
    do {                                                                                                  \
        if ((bytes) > (raised)) {                                                                         \
            cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
            (raised) = (bytes);                                                                           \
        }                                                                                                 \
    } while (0)
static size_t kda_raised_fwd = 48 * 1024, kda_raised_bwd = 48 * 1024;  // the default limit needs no attribute
// The shared memory of both kernels at head size D (0: global views), both attributes raised:
// whichever of the two runs first (eagerly, before any step is captured) raises the other's too.
static void kda_smem_prepare(int D, size_t *sf, size_t *sb) {
    *sf = kda_smem_bytes(kda_core_local_size_fwd(D));
    *sb = kda_smem_bytes(kda_core_local_size_bwd(D));
    KDA_RAISE(kda_chunk_fwd_smem_kernel, kda_raised_fwd, *sf);
    KDA_RAISE(kda_chunk_bwd_smem_kernel, kda_raised_bwd, *sb);
    // two blocks an SM (the launch bounds' aim) need the backward's 2 x 110 KB at D = 64 in
    // shared memory: ask for the largest carveout rather than leave the split to the driver
    // (a hint, set once, in the eager warm-up)
    static int carved = 0;
    if (!carved) {
        cudaCheck(cudaFuncSetAttribute(kda_chunk_fwd_smem_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
        cudaCheck(cudaFuncSetAttribute(kda_chunk_bwd_smem_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
        carved = 1;
    }
}

// For bench_gpu: what each KDA kernel gets on this device at head size D — registers, local
// memory (spills), shared memory, blocks resident per SM (two is what the launch bounds and the
// carvings are for) — or why the runtime cannot say.
#define KDA_OCC(kernel, smem, out, nb)                                                                    \
    (cudaFuncGetAttributes(&(out), kernel) != cudaSuccess                                                \
         ? cudaGetLastError()                                                                             \
         : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&(nb), kernel, KDA_THREADS, smem) != cudaSuccess \
               ? cudaGetLastError()                                                                       \
               : cudaSuccess)
extern "C" void cuda_kda_report(int D, char *buf, size_t n) {
    size_t sf, sb;
    kda_smem_prepare(D, &sf, &sb);
    cudaFuncAttributes af = {}, ab = {};
    int nf = 0, nb = 0;
    cudaError_t ef = sf ? KDA_OCC(kda_chunk_fwd_smem_kernel, sf, af, nf) : KDA_OCC(kda_chunk_fwd_kernel, 0, af, nf);
    cudaError_t eb = sb ? KDA_OCC(kda_chunk_bwd_smem_kernel, sb, ab, nb) : KDA_OCC(kda_chunk_bwd_kernel, 0, ab, nb);
    if (ef != cudaSuccess || eb != cudaSuccess) {
        snprintf(buf, n, "KDA chunk kernels, D=%d: shared memory %.1f / %.1f KB; registers and occupancy n/a (%s)", D,
                 sf / 1024.0, sb / 1024.0, cudaGetErrorString(ef != cudaSuccess ? ef : eb));
        return;
    }
    snprintf(buf, n, "KDA chunk kernels, D=%d: forward %d regs, %zu B spilled, %.1f KB shared, %d blocks/SM; "
             "backward %d regs, %zu B spilled, %.1f KB shared, %d blocks/SM", D, af.numRegs, af.localSizeBytes,
             sf / 1024.0, nf, ab.numRegs, ab.localSizeBytes, sb / 1024.0, nb);
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
    size_t sm, sb;
    kda_smem_prepare(D, &sm, &sb);
    if (sm)
        kda_chunk_fwd_smem_kernel<<<B * H, KDA_THREADS, sm, dm_stream>>>(o, ws, q, k, v, beta, g, T, H, D);
    else
        kda_chunk_fwd_kernel<<<B * H, KDA_THREADS, 0, dm_stream>>>(o, ws, q, k, v, beta, g, T, H, D);
    cudaLaunchCheck();
}

void cuda_kda_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                       const real *q, const real *k, const real *v, const real *beta,
                       const real *g, real *ws, int B, int T, int H, int D, int C) {
    (void)C; (void)v;  // v enters the backward only through W, which the forward kept
    if (B * H <= 0 || T <= 0) return;
    size_t sf, sm;
    kda_smem_prepare(D, &sf, &sm);
    if (sm)
        kda_chunk_bwd_smem_kernel<<<B * H, KDA_THREADS, sm, dm_stream>>>(dq, dk, dv, dbeta, dg, dout, q, k, beta, g,
                                                                         ws, T, H, D);
    else
        kda_chunk_bwd_kernel<<<B * H, KDA_THREADS, 0, dm_stream>>>(dq, dk, dv, dbeta, dg, dout, q, k, beta, g, ws, T,
                                                                   H, D);
    cudaLaunchCheck();
}

#endif  // DM_DOUBLE
