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
// The expert GEMMs: at precision=fp32 the fp32 shared-memory tiles of moe_core.h (the ones the
// CPU test runs); in the default bf16 mode the same 64 x 64 output tiles on the tensor cores
// (moe_gemm_bf16_kernel below: operands rounded to bf16 as they are staged in shared memory,
// fp32 accumulation — the rounding every other product of the bf16 mode has). Same grids and tile
// table, same epilogues; the K loop is the same fixed sequence of 32-deep steps every run.
#include "cuda_common.cuh"
#include <mma.h>

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

// ---- the bf16 tensor-core version of moe_gemm_kernel ----
// Block = 8 warps over a 64 x 64 output tile: warp w owns rows 16 (w / 2) .. +16 and columns
// 32 (w % 2) .. +32 (two 16 x 16 fp32 accumulator fragments). Per 32-deep K step the block stages
// A and B in shared memory as bf16 (through moe_rows_at: gathers, scales, silu as the fp32 tile
// does; zeros past the rows / columns / depth), then each warp runs 2 x 2 bf16 mma_syncs. The
// accumulators go through shared memory to the same epilogues as moe_core.h's tiles.
#define MB_K 32                  // depth of one staged step
#define MB_LDA (MB_K + 8)        // grouped GEMM: sA[m][kk], row-major (bf16: ld a multiple of 8)
#define MB_LDAT (MOE_TM + 8)     // weight GEMM: sA[kk][p] = A^T column-major
#define MB_LDB (MOE_TN + 8)      // sB[kk][j], row-major
#define MB_LDC (MOE_TN + 4)      // sC[m][j] fp32
#define MB_SA (MOE_TM * MB_LDA > MB_K * MB_LDAT ? MOE_TM * MB_LDA : MB_K * MB_LDAT)
static_assert(MOE_TM == 64 && MOE_TN == 64 && MOE_THREADS == 256, "the warp layout below assumes 8 warps on 64 x 64");

typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> MbAcc;
// One staged 32-deep step of a warp: c0, c1 (columns wc, wc+16 of the warp's 16 rows) += A B.
// A's 16 x 16 block at depth kk0 starts at a + kk0 * kstep (row-major: kstep 1; col-major A^T:
// kstep = its ld), ld `lda`; B is sB[kk][j] row-major.
template <typename ALayout>
__device__ __forceinline__ void mb_mma(MbAcc &c0, MbAcc &c1, const __nv_bfloat16 *a, int kstep, int lda,
                                       const __nv_bfloat16 *sB, int wc) {
    using namespace nvcuda;
#pragma unroll
    for (int kk0 = 0; kk0 < MB_K; kk0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, ALayout> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b0, b1;
        wmma::load_matrix_sync(fa, a + kk0 * kstep, lda);
        wmma::load_matrix_sync(b0, sB + kk0 * MB_LDB + wc, MB_LDB);
        wmma::load_matrix_sync(b1, sB + kk0 * MB_LDB + wc + 16, MB_LDB);
        wmma::mma_sync(c0, fa, b0, c0);
        wmma::mma_sync(c1, fa, b1, c1);
    }
}
// the warp's accumulators into sC [64][MB_LDC], then a block barrier (the epilogue reads all)
__device__ __forceinline__ void mb_store(float *sC, const MbAcc &c0, const MbAcc &c1, int wr, int wc) {
    nvcuda::wmma::store_matrix_sync(sC + wr * MB_LDC + wc, c0, MB_LDC, nvcuda::wmma::mem_row_major);
    nvcuda::wmma::store_matrix_sync(sC + wr * MB_LDC + wc + 16, c1, MB_LDC, nvcuda::wmma::mem_row_major);
    __syncthreads();
}

__global__ void __launch_bounds__(MOE_THREADS) moe_gemm_bf16_kernel(MoeStep st, MoeView v) {
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 sA[MB_SA];
    __shared__ __align__(32) __nv_bfloat16 sB[MB_K * MB_LDB];
    __shared__ __align__(32) float sC[MOE_TM * MB_LDC];
    const int tid = threadIdx.x, nt = blockDim.x, warp = tid / 32;
    const int wr = (warp / 2) * 16, wc = (warp % 2) * 32;  // this warp's first row and column
    MbAcc c0, c1;
    wmma::fill_fragment(c0, 0.0f);
    wmma::fill_fragment(c1, 0.0f);
    if (st.kind == MOE_K_RG) {
        const MoeRG *g = &st.rg;
        const int *tb = v.tiles + 3 * (size_t)blockIdx.x;
        const int e = tb[0], row0 = tb[1], rows = tb[2], K = g->K, Nc = g->Nc, j0 = blockIdx.y * MOE_TN;
        if (rows <= 0 || j0 >= Nc) return;  // block-uniform
        const float *Bw = g->B + (size_t)e * K * Nc;
        for (int k0 = 0; k0 < K; k0 += MB_K) {
            const int kw = K - k0 < MB_K ? K - k0 : MB_K;
            for (int x = tid; x < MOE_TM * MB_K; x += nt) {
                int m = x / MB_K, kk = x % MB_K;
                float a = m < rows && kk < kw ? moe_rows_at(&g->A, &v, e, row0 + m, k0 + kk) : 0.0f;
                sA[m * MB_LDA + kk] = __float2bfloat16(a);
            }
            for (int x = tid; x < MB_K * MOE_TN; x += nt) {
                int kk, j;
                if (g->btrans) { j = x / MB_K; kk = x % MB_K; } else { kk = x / MOE_TN; j = x % MOE_TN; }
                float b = 0.0f;
                if (kk < kw && j0 + j < Nc)
                    b = g->btrans ? Bw[(size_t)(j0 + j) * K + k0 + kk] : Bw[(size_t)(k0 + kk) * Nc + j0 + j];
                sB[kk * MB_LDB + j] = __float2bfloat16(b);
            }
            __syncthreads();
            mb_mma<nvcuda::wmma::row_major>(c0, c1, sA + wr * MB_LDA, 1, MB_LDA, sB, wc);
            __syncthreads();
        }
        mb_store(sC, c0, c1, wr, wc);
        for (int x = tid; x < MOE_TM * MOE_TN; x += nt) {
            int m = x / MOE_TN, j = x % MOE_TN;
            if (m >= rows || j0 + j >= Nc) continue;
            float acc = sC[m * MB_LDC + j];
            float *c = g->C + (size_t)(row0 + m) * g->ldc + j0 + j;
            if (g->epi == MOE_EPI_DSILU) {  // c holds h: silu'(h) = sig + silu(h) (1 - sig)
                float hv = *c, sg = moe_sigmoid(hv), gv = hv * sg;
                *c = acc * (sg + gv * (1.0f - sg));
            } else {
                *c = acc;
            }
        }
    } else {  // MOE_K_WG: C_e[p, q] += sum over expert e's rows of A(i, p) B(i, q)
        const MoeWG *g = &st.wg;
        // blockIdx.y = slice * E + expert: the slice's rows (moe_core.h's weight GEMM)
        const int e = blockIdx.y % v.E, sl = blockIdx.y / v.E, P = g->P, Q = g->Q;
        int o, o1;
        moe_slice_rows(&v, e, sl, g->S, &o, &o1);
        const int cnt = o1 - o;
        const int ntq = (Q + MOE_TN - 1) / MOE_TN, p0 = (blockIdx.x / ntq) * MOE_TM, q0 = (blockIdx.x % ntq) * MOE_TN;
        // block-uniform; a slice of a split reduction writes its partial tile even without rows
        if (p0 >= P || (cnt == 0 && g->S == 1)) return;
        for (int k0 = 0; k0 < cnt; k0 += MB_K) {
            const int kw = cnt - k0 < MB_K ? cnt - k0 : MB_K;
            for (int x = tid; x < MB_K * MOE_TM; x += nt) {  // sA[kk][p]: row o+k0+kk of A, p fastest
                int kk = x / MOE_TM, p = x % MOE_TM;
                float a = kk < kw && p0 + p < P ? moe_rows_at(&g->A, &v, e, o + k0 + kk, p0 + p) : 0.0f;
                sA[kk * MB_LDAT + p] = __float2bfloat16(a);
            }
            for (int x = tid; x < MB_K * MOE_TN; x += nt) {  // sB[kk][q]
                int kk = x / MOE_TN, q = x % MOE_TN;
                float b = kk < kw && q0 + q < Q ? moe_rows_at(&g->B, &v, e, o + k0 + kk, q0 + q) : 0.0f;
                sB[kk * MB_LDB + q] = __float2bfloat16(b);
            }
            __syncthreads();
            // A^T (p, kk) sits at sA[kk * MB_LDAT + p]: column-major with ld MB_LDAT
            mb_mma<nvcuda::wmma::col_major>(c0, c1, sA + wr, MB_LDAT, MB_LDAT, sB, wc);
            __syncthreads();
        }
        mb_store(sC, c0, c1, wr, wc);
        float *Ce = g->S > 1 ? g->part + ((size_t)sl * v.E + e) * P * Q : g->C + (size_t)e * P * Q;
        for (int x = tid; x < MOE_TM * MOE_TN; x += nt) {
            int p = x / MOE_TN, q = x % MOE_TN;
            if (p0 + p >= P || q0 + q >= Q) continue;
            if (g->S > 1) Ce[(size_t)(p0 + p) * Q + q0 + q] = sC[p * MB_LDC + q];
            else Ce[(size_t)(p0 + p) * Q + q0 + q] += sC[p * MB_LDC + q];
        }
    }
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
            else if (dm_fp32) moe_gemm_kernel<<<dim3(gx, gy), MOE_THREADS, 0, dm_stream>>>(st[i], *v);
            else moe_gemm_bf16_kernel<<<dim3(gx, gy), MOE_THREADS, 0, dm_stream>>>(st[i], *v);
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
    MoeStep st[MOE_MAX_STEPS];
    int ns = moe_core_forward_steps(st, &v, out, aux, load, n, z, p);
    moe_run(st, ns, &v);
}

// Tests only (tests/gpu/parity.cu): 1 runs every row reduction of the backward in one piece, as
// test_moe_core does with MoeView.nosplit. The shapes a parity row can afford are all split
// (moe_wg_split), so the unsplit weight GEMMs (base's and large's [f, r] weights) would otherwise
// be compared only by a full-size model run.
extern "C" {
int cuda_moe_nosplit = 0;
}

// accumulates into dn [N, d], dz [N, E] and g; dout [N, d]; ws as the forward left it
void cuda_moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                       const real *n, const real *z, MoEParams p, MoEShape s) {
    (void)z;  // the routing was saved by forward
    moe_check(s);
    if (s.N <= 0) return;
    MoeView v = moe_core_view(ws, s);
    v.nosplit = cuda_moe_nosplit;
    MoeStep st[MOE_MAX_STEPS];
    int ns = moe_core_backward_steps(st, &v, dn, dz, g, dout, daux, n, p);
    moe_run(st, ns, &v);
}

// the routing the last forward left in ws: idx [N, k] to the host (:check parity's reference
// follows it). A host round trip: never inside a captured step.
void cuda_moe_route_read(int *idx, const real *ws, MoEShape s) {
    if (s.N <= 0) return;
    if (dm_capturing) {
        dm_capture_fail("a routing read (host round trip) inside the captured step");
        memset(idx, 0, sizeof(int) * (size_t)s.N * s.k);
        return;
    }
    MoeView v = moe_core_view((real *)ws, s);
    cudaCheck(cudaMemcpyAsync(idx, v.idx, sizeof(int) * (size_t)s.N * s.k, cudaMemcpyDeviceToHost, dm_stream));
    cudaCheck(cudaStreamSynchronize(dm_stream));
}

#endif  // DM_DOUBLE
