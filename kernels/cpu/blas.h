// blas.h — the few CBLAS entry points the CPU backend uses, declared here so the build needs
// only libopenblas.so, not cblas.h (the H200 machine has the library but no headers).
#pragma once
#include "../real.h"
#include "sgemm.h"

enum { DmCblasRowMajor = 101 };
enum { DmCblasNoTrans = 111, DmCblasTrans = 112 };

void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
void cblas_dgemm(int order, int transa, int transb, int m, int n, int k, double alpha,
                 const double *a, int lda, const double *b, int ldb, double beta, double *c,
                 int ldc);

// OpenBLAS's own: its threads split a product's work by their count, and the sums' order with it,
// so the double build's results followed OPENBLAS_NUM_THREADS across processes (QA, session 31).
// The CPU backend sets one thread (backend_cpu.c): OpenMP is the backend's parallelism.
void openblas_set_num_threads(int n);
int openblas_get_parallel(void);  // 0 sequential, 1 pthreads, 2 OpenMP
// Around every OpenBLAS call: an OpenMP build of OpenBLAS takes OpenMP's thread count at each
// call, so it is 1 for the call and the backend's own afterwards (a no-op with other builds).
// backend_cpu.c.
int dm_blas_enter(void);
void dm_blas_leave(int saved);

// Row-major C[M,N] = alpha * op(A) op(B) + beta * C, op(A) is [M,K], op(B) is [K,N].
static inline void gemm_rm(int transA, int transB, int M, int N, int K, real alpha,
                           const real *A, int lda, const real *B, int ldb, real beta, real *C,
                           int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // BLAS would leave C untouched for alpha*0; make beta scaling explicit
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
#ifdef DM_DOUBLE
    int blas = dm_blas_enter();
    cblas_dgemm(DmCblasRowMajor, transA ? DmCblasTrans : DmCblasNoTrans,
                transB ? DmCblasTrans : DmCblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    dm_blas_leave(blas);
#else
    dm_sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // sgemm.c
#endif
}

// The products the CUDA backend's bf16 mode runs with bf16 operands (the model's dense products,
// the MoE's grouped ones and Muon's Newton-Schulz products; not the KDA core or the retraction). On the CPU they
// are plain products unless `dm_emulate_bf16` is on: then both operands are rounded to bf16
// (round to nearest even, as the device's to_bf16_kernel) and accumulated in fp32, so a parity
// check compares the device with the same arithmetic instead of with fp32 (sgemm.c).
extern int dm_emulate_bf16;
void dm_sgemm_bf16ops(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
static inline void gemm_lp(int transA, int transB, int M, int N, int K, real alpha, const real *A, int lda,
                           const real *B, int ldb, real beta, real *C, int ldc) {
#ifndef DM_DOUBLE
    if (dm_emulate_bf16 && M > 0 && N > 0 && K > 0) {
        dm_sgemm_bf16ops(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    gemm_rm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
