// sgemm_isa_same.c — the AVX-512 6x32 tiles and the AVX2 6x16 tiles of kernels/cpu/sgemm.c give
// the same bits (docs/decisions.md): a checkpoint trained on one kind of host resumes on the
// other exactly. Linked against sgemm.c twice: as built (AVX-512) and rebuilt with AVX-512 off,
// its symbols renamed *_avx2 (Makefile test-sgemm-avx2). Random operands, every transpose pair,
// sizes across both tiles' edges and the K block, alpha/beta, and the Newton-Schulz syrk.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../engine/rng.h"
#include "../kernels/cpu/sgemm.h"

void dm_sgemm_avx2(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);
void dm_ssyrk_upper_avx2(int trans, int n, int k, float alpha, const float *A, int lda, float beta,
                         float *C, int ldc);

static float *randv(size_t n, Rng *r) {
    float *p = malloc(sizeof(float) * (n + 1));
    for (size_t i = 0; i < n; i++) p[i] = (float)rng_normal(r);
    return p;
}

int main(void) {
    Rng r = {2026};
    const int Ms[] = {1, 6, 7, 37, 130}, Ns[] = {1, 16, 17, 31, 32, 33, 70, 600}, Ks[] = {1, 17, 256, 300};
    const float al[] = {1, -0.5f}, be[] = {0, 1, 0.3f};
    int cases = 0, bad = 0;
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
                for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
                    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
                        int M = Ms[mi], N = Ns[ni], K = Ks[ki], pad = (int)(ki % 2) * 3;
                        float alpha = al[(mi + ni) % 2], beta = be[(mi + ki) % 3];
                        int lda = (tA ? M : K) + pad, ldb = (tB ? K : N) + pad, ldc = N + pad;
                        float *A = randv((size_t)(tA ? K : M) * lda, &r), *B = randv((size_t)(tB ? N : K) * ldb, &r);
                        float *C1 = randv((size_t)M * ldc, &r), *C2 = malloc(sizeof(float) * ((size_t)M * ldc + 1));
                        memcpy(C2, C1, sizeof(float) * (size_t)M * ldc);
                        dm_sgemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C1, ldc);
                        dm_sgemm_avx2(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc);
                        cases++;
                        if (memcmp(C1, C2, sizeof(float) * (size_t)M * ldc)) {
                            if (bad++ < 5) printf("differ: tA %d tB %d M %d N %d K %d\n", tA, tB, M, N, K);
                        }
                        free(A); free(B); free(C1); free(C2);
                    }
    const int ns[] = {7, 33, 128}, ks[] = {5, 300};
    for (int tr = 0; tr < 2; tr++)
        for (size_t i = 0; i < 3; i++)
            for (size_t j = 0; j < 2; j++) {
                int n = ns[i], k = ks[j];
                float *A = randv((size_t)n * k, &r), *C1 = randv((size_t)n * n, &r);
                float *C2 = malloc(sizeof(float) * ((size_t)n * n + 1));
                memcpy(C2, C1, sizeof(float) * (size_t)n * n);
                dm_ssyrk_upper(tr, n, k, 0.7f, A, tr ? n : k, 0.25f, C1, n);
                dm_ssyrk_upper_avx2(tr, n, k, 0.7f, A, tr ? n : k, 0.25f, C2, n);
                cases++;
                for (int a = 0; a < n; a++)  // the upper triangle is the result
                    if (memcmp(C1 + (size_t)a * n + a, C2 + (size_t)a * n + a, sizeof(float) * (size_t)(n - a))) {
                        if (bad++ < 5) printf("syrk differ: trans %d n %d k %d\n", tr, n, k);
                        break;
                    }
                free(A); free(C1); free(C2);
            }
    printf("sgemm AVX-512 vs AVX2 tiles: %d cases, %d not bit-identical\n", cases, bad);
    return bad != 0;
}
