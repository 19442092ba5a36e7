// sgemm.h — the CPU backend's float matrix product (sgemm.c), row-major:
// C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C; beta = 0 never reads C.
#pragma once

void dm_sgemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

// Upper triangle of C[n,n] = alpha op(A) op(A)^T + beta C, op(A) [n,k] = A (trans 0) or A^T
// (trans 1). Entries below the diagonal near it may be written too: mirror the upper triangle.
void dm_ssyrk_upper(int trans, int n, int k, float alpha, const float *A, int lda, float beta,
                    float *C, int ldc);
