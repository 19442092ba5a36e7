// moe_cuda.cu — dropless top-k mixture of TSCT experts on the GPU (contract: kernels/cpu/moe.h,
// SPEC §1): the backend table's moe_ws_size / moe_forward / moe_backward.
//
// The algorithm lives in moe_core.h as a list of steps (route, plan, grouped GEMMs over a tile
// table, weight GEMMs, combine, ...); this file only launches them, in order, on dm_stream. The
// same steps run on the CPU in tests/test_moe_core.c against kernels/cpu/moe.c (float <= 1e-5,
// double <= 1e-10, with 1 and 4 threads per block bit-identical), which is how they were verified
// without a device.
//
// Graph-safe: no launch configuration depends on the routing (grids are sized for the worst case
// and a device tile table says which tiles have work), nothing is copied to the host, nothing is
// allocated: `aux` [1] and `load` [E] are DEVICE pointers that the plan kernel writes, and the
// engine downloads them when it reports them. Deterministic: no atomics, every sum in a fixed
// order owned by one thread (not bit-identical to the CPU: the GEMM sums run in another order).
// The expert GEMMs are fp32 shared-memory tiles whatever dm_fp32 says; bf16 tensor-core tiles are
// the next speed step.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

#define MOE_THREADS 256                                // threads of a GEMM block
#define MOE_PLAN_THREADS 1024                          // the one plan block
#define DM_HD __device__
#define DM_HDS __host__ __device__
#define DM_SYNC() __syncthreads()
#define MOE_ACC (MOE_TM * MOE_TN / MOE_THREADS)        // accumulators per thread: registers
#define MOE_UNROLL _Pragma("unroll")
#include "moe_core.h"

static_assert(MOE_ACC * MOE_THREADS == MOE_TM * MOE_TN, "a GEMM tile's outputs fill the block's accumulators");

size_t cuda_moe_ws_size(MoEShape s) { return moe_core_ws_size(s); }

// one thread per item of an item step
__global__ void moe_items_kernel(MoeStep st, MoeView v, size_t n) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x < n) moe_core_item(&st, &v, x);
}

// one block per (bx, by) of a GEMM step (grouped or weight)
__global__ void __launch_bounds__(MOE_THREADS) moe_gemm_kernel(MoeStep st, MoeView v) {
    __shared__ float sA[MOE_SA], sB[MOE_SB];
    if (st.kind == MOE_K_RG) moe_core_rg_tile(&st.rg, &v, blockIdx.x, blockIdx.y, sA, sB, threadIdx.x, blockDim.x);
    else moe_core_wg_tile(&st.wg, &v, blockIdx.x, blockIdx.y, sA, sB, threadIdx.x, blockDim.x);
}

// the plan: one block (sort, offsets, load, aux, tile table)
__global__ void __launch_bounds__(MOE_PLAN_THREADS) moe_plan_kernel(MoeStep st, MoeView v) {
    moe_core_block(&st, &v, 0, 0, NULL, NULL, threadIdx.x, blockDim.x);
}

static void moe_check(MoEShape s) {
    if (s.E < 1 || s.E > MOE_MAXE || s.k < 1 || s.k > s.E) {
        fprintf(stderr, "cuda moe: E=%d k=%d unsupported (1 <= k <= E <= %d)\n", s.E, s.k, MOE_MAXE);
        exit(1);
    }
}

static void moe_run(const MoeStep *st, int ns, const MoeView *v) {
    for (int i = 0; i < ns; i++) {
        size_t items;
        int gx, gy;
        moe_core_shape(&st[i], v, &items, &gx, &gy);
        if (items > 0) {
            moe_items_kernel<<<ceil_div((long long)items, 256), 256, 0, dm_stream>>>(st[i], *v, items);
            cudaLaunchCheck();
        } else if (gx > 0 && gy > 0) {
            if (st[i].kind == MOE_K_PLAN) moe_plan_kernel<<<1, MOE_PLAN_THREADS, 0, dm_stream>>>(st[i], *v);
            else moe_gemm_kernel<<<dim3(gx, gy), MOE_THREADS, 0, dm_stream>>>(st[i], *v);
            cudaLaunchCheck();
        }
    }
}

// out [N, d] written; aux [1], load [E]: device memory (either may be NULL); n [N, d]; z [N, E]
void cuda_moe_forward(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                      MoEParams p, MoEShape s) {
    moe_check(s);
    if (s.N <= 0) {  // nothing routed: out is empty, aux and the counts are 0
        if (aux) cudaCheck(cudaMemsetAsync(aux, 0, sizeof(float), dm_stream));
        if (load) cudaCheck(cudaMemsetAsync(load, 0, sizeof(int) * s.E, dm_stream));
        return;
    }
    MoeView v = moe_core_view(ws, s);
    MoeStep st[16];
    int ns = moe_core_forward_steps(st, &v, out, aux, load, n, z, p);
    moe_run(st, ns, &v);
}

// accumulates into dn [N, d], dz [N, E] and g; dout [N, d]; ws as the forward left it
void cuda_moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                       const real *n, const real *z, MoEParams p, MoEShape s) {
    (void)z;  // the routing was saved by forward
    moe_check(s);
    if (s.N <= 0) return;
    MoeView v = moe_core_view(ws, s);
    MoeStep st[16];
    int ns = moe_core_backward_steps(st, &v, dn, dz, g, dout, daux, n, p);
    moe_run(st, ns, &v);
}

#endif  // DM_DOUBLE
