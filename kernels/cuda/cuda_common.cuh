// cuda_common.cuh — what the CUDA backend's translation units share: error-check macros, the
// one cuBLAS handle, the precision switch, grow-only scratch buffers, the row-major gemm helper
// and deterministic block reductions. Float build only (the table is fp32; DM_DOUBLE builds get
// a backend_cuda() that says so).
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
extern "C" {
#include "../backend.h"
#include "../guard.h"
}

// ---- error checks: every runtime / cuBLAS call goes through these. A failed call is a bug or a
// broken device, not a recoverable condition, so they print where and why and exit.
void dm_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
void dm_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line);
#define cudaCheck(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) dm_cuda_fail(e_, #x, __FILE__, __LINE__); } while (0)
#define cublasCheck(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) dm_cublas_fail(s_, #x, __FILE__, __LINE__); } while (0)
// after a kernel launch: catches bad launch configurations at the launch site (asynchronous
// faults surface at the next synchronising call, which is checked too)
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

#ifndef DM_DOUBLE
// ---- shared state (defined in backend_cuda.cu) ----
extern cublasHandle_t dm_cublas;  // one handle, on dm_stream
extern cudaStream_t dm_stream;    // every kernel and cuBLAS call is ordered on this one stream
extern int dm_fp32;               // 1: fp32 matrix products (pedantic); 0: bf16 operands, fp32 accumulate

// Graph capture (graph_cuda.cu). While dm_capturing, ops are recorded, not run: dm_scratch may
// not grow, upload/download may not run, and a failed CUDA / cuBLAS call is recorded with
// dm_capture_fail (graph_end reports it, the engine reruns the step eagerly) instead of exiting.
extern int dm_capturing;
extern long dm_nallocs;           // device + pinned allocations so far (Backend.allocs)
void dm_capture_fail(const char *what);
void cuda_graph_fill(Backend *b); // the step entries of the table (graph_cuda.cu)

// Grow-only device scratch, one buffer per slot (slots let one op hold several at once).
// Growing frees and reallocates (synchronising): warm-up does it, steady state never does. A
// growth the device cannot hold raises (kernels/guard.h): back to the step's or the eval's guard,
// which undo the forward and backward that ran; the optimizer never grows a slot.
enum { SCR_BF16A, SCR_BF16B, SCR_SORT, SCR_KEYS, SCR_MISC, SCR_COLSUM, SCR_N };

// Deterministic whole-array reduction, first level (fused_cuda.cu): partial[j] = block j's share
// of sum a[i] (b == NULL) or sum a[i] b[i], in double, over a fixed grid of nb blocks (a function
// of n only, <= DM_RED_MAX_BLOCKS); returns nb. The caller sums partial[0..nb) in a fixed order.
#define DM_RED_MAX_BLOCKS 256
int dm_reduce_partials(double *partial, const float *a, const float *b, size_t n);
// acc [C] += the column sums of x [N, C] at row stride ld, in double, in a fixed order that
// depends on (N, C) only (row slices over the whole device, then the slices in order)
void dm_colsum_rows(float *acc, const float *x, int ld, int N, int C);
void *dm_scratch(int slot, size_t bytes);

// Row-major C[M,N] = alpha op(A) op(B) + beta C on device pointers (same contract as the CPU's
// gemm_rm). lowp = 1 lets the product use bf16 operands when the backend is in bf16 mode;
// internal numerics that must stay fp32 (retraction, KDA) pass 0.
void dm_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc, int lowp);
// The same for `batch` products at once: matrix i of A, B, C starts sA, sB, sC floats after
// matrix i-1 (strided-batched cuBLAS). A and B must be DENSE (lda, ldb the stored widths, every
// matrix packed: sA = rows * lda of A as stored, likewise B), which lets the bf16 mode convert
// each whole batch in one pass.
void dm_gemm_batched(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                     const float *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                     int batch, int lowp);
// The same two with the packed bf16 operands in the caller's workspace ws (16-byte aligned, at
// least dm_gemm_ws_size(largest A, largest B) bytes, in elements of the operands as stored) instead
// of the grow-only scratch: for a caller that must not allocate once it has begun (the optimizer,
// whose update cannot be undone half-way; kernels/guard.h)
void dm_gemm_ws(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc, int lowp, void *ws);
void dm_gemm_batched_ws(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                        const float *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                        int batch, int lowp, void *ws);
size_t dm_gemm_ws_size(size_t na, size_t nb);
// The bf16 products themselves, on operands the caller has already packed (A as stored [ar, ac]
// at leading dimension lda, matrix i sA elements after matrix i-1; likewise B): the cuBLAS call
// the two above make after packing (batch 1: one GemmEx, else strided-batched), for a caller that
// packs an operand once and uses it twice (Muon's Newton-Schulz: X X^T, then X again)
void dm_gemm_bf16(int tA, int tB, int M, int N, int K, float alpha, const __nv_bfloat16 *A, int lda, long long sA,
                  const __nv_bfloat16 *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                  int batch);

// Stable device radix sort of (key, value) pairs, keys in [0, 2^bits): values with equal keys
// keep their input order, so a fixed-order walk of each key's run is deterministic.
void dm_sort_pairs(const uint64_t *keys_in, uint64_t *keys_out, const int *vals_in, int *vals_out,
                   int n, int bits);
// the same with cub's temporary storage in the caller's ws (at least dm_sort_pairs_tmp(n, bits)
// bytes) instead of the scratch slot: the optimizer's lazy Adam, which must not allocate
size_t dm_sort_pairs_tmp(int n, int bits);
void dm_sort_pairs_ws(const uint64_t *keys_in, uint64_t *keys_out, const int *vals_in, int *vals_out,
                      int n, int bits, void *ws);

// Deterministic row scatter-add: for items i = 0..n-1 in sorted order (keys sorted, vals the
// item ids, equal keys in increasing id), dst[key * D + c] += src_row(val)[c], where item a
// reads src + (a % per) * ld + (a / per) * D. One block per run of equal keys; inside a run the
// adds happen in id order — the same float operations, in the same order, as the CPU loops.
void dm_scatter_sorted(float *dst, const float *src, const uint64_t *keys, const int *vals, int n,
                       int per, size_t ld, int D);

// KDA: the chunked form the table uses (kda_chunk_cuda.cu), same contracts as kernels/cpu/kda.h;
// MoE (moe_cuda.cu)
size_t cuda_kda_ws_size(int B, int T, int H, int D, int C);
void cuda_kda_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                      const real *beta, const real *g, int B, int T, int H, int D, int C);
void cuda_kda_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                       const real *q, const real *k, const real *v, const real *beta,
                       const real *g, real *ws, int B, int T, int H, int D, int C);
void cuda_kda_step(real *o, real *S, const real *q, const real *k, const real *v,
                   const real *beta, const real *g, int H, int D);
size_t cuda_moe_ws_size(MoEShape s);
void cuda_moe_forward(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                      MoEParams p, MoEShape s);
void cuda_moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                       const real *n, const real *z, MoEParams p, MoEShape s);
void cuda_moe_route_read(int *idx, const real *ws, MoEShape s);

// optimizer entry points (optim_cuda.cu; the Backend table's "optimizer ops")
void cuda_opt_sumsq(double *ss, int32_t *bad, const real *x, const OptSeg *segs, int nseg);
void cuda_opt_decide(OptStatus *st, const double *ss, const int32_t *bad, int nseg, const double *loss,
                     const StepHyper *hp);
void cuda_opt_clip(real *g, size_t n, const OptStatus *st);
void cuda_opt_adamw(real *p, const real *g, real *m, real *v, size_t n, int decay, const StepHyper *hp,
                    const OptStatus *st);
size_t cuda_opt_adam_rows_ws_size(int O, int N, int64_t R);
void cuda_opt_adam_rows(real *p, const real *g, real *m, real *v, int64_t *row_steps, const int32_t *rows,
                        int O, int N, int64_t R, int D, void *ws, const StepHyper *hp, const OptStatus *st);
size_t cuda_opt_muon_scratch_size(int n_mats, int rows, int cols);
void cuda_opt_muon(real *p, const real *g, real *buf, int n_mats, int rows, int cols, int colrow,
                   real *scratch, const StepHyper *hp, const OptStatus *st);
size_t cuda_opt_retract_scratch_size(int n_mats, int rows, int r);
void cuda_opt_retract(real *X, int n_mats, int rows, int r, int iters, real *scratch, OptStatus *st);

static inline int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }
// Row slices of a two-stage column reduction (colsum, the decay gate's backward): ceil(N / 2048)
// of them, at most 64 (so <= 2048 rows each up to 131072 rows), a function of N only (the
// summation order may not depend on anything else)
static inline int row_slices(int N) {
    int S = ceil_div(N, 2048);
    return S < 1 ? 1 : S > 64 ? 64 : S;
}

// Fixed-order block sum: every thread passes its partial; the tree shape depends on blockDim
// only, so the result is a pure function of the inputs. blockDim must be a power of two <= 1024.
// Returns the total to every thread. `sh` is blockDim doubles of shared memory.
__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();  // sh is reused by the caller's next reduction
    return r;
}
__device__ __forceinline__ float block_max_f(float v, float *sh) {
    int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] = fmaxf(sh[tid], sh[tid + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
__device__ __forceinline__ float sigmoidf_dev(float x) { return 1.0f / (1.0f + expf(-x)); }
// The retraction's spectral guard (kernels/cpu/retract.c, retract_gersh_scale): for matrix
// e = blockIdx.x of A [E, r, r], g = max_i sum_j |A_ij| (each row summed in double, in order, by
// one thread; the max over rows by a tree: exact, any order), sc = min(1, 2.25 / g); writes
// sa[e] = sc and sx[e] = sqrt(sc) as floats. 256 threads.
static __global__ void gersh_scale_kernel(float *sa, float *sx, const float *A, int r) {
    __shared__ double sh[256];
    const float *Ae = A + (size_t)blockIdx.x * r * r;
    double g = 0;
    for (int i = threadIdx.x; i < r; i += 256) {
        double s = 0;
        for (int j = 0; j < r; j++) s += fabs((double)Ae[(size_t)i * r + j]);
        if (s > g) g = s;  // a NaN row is passed over, as on the CPU
    }
    sh[threadIdx.x] = g;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (threadIdx.x < k && sh[threadIdx.x + k] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double sc = sh[0] > 2.25 ? 2.25 / sh[0] : 1.0;
        sa[blockIdx.x] = (float)sc;
        sx[blockIdx.x] = (float)sqrt(sc);
    }
}
// The orthogonality error's terms (the retraction reports it, backend_cuda.cu and optim_cuda.cu):
// err [r, r]: the weighted squared deviation of (X^T X)_ij from I for j >= i (0 below), in double
static __global__ void orth_terms_kernel(double *err, const float *X, int rows, int r) {
    int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= r) return;
    double v = 0;
    if (j >= i) {
        double s = 0;
        for (int q = 0; q < rows; q++) s += (double)X[(size_t)q * r + i] * (double)X[(size_t)q * r + j];
        double dev = s - (i == j ? 1.0 : 0.0);
        v = (i == j ? 1.0 : 2.0) * dev * dev;
    }
    err[(size_t)i * r + j] = v;
}

#endif
