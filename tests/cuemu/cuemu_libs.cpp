// cuemu_libs.cpp — cuemu's stand-ins for the two CUDA libraries the backend calls: cuBLAS's
// products (column-major, as the real one; through OpenBLAS in fp32, bf16 operands converted
// exactly) and cub's radix sort of pairs (a stable host sort). Both run when their stream gets
// to them, like any op (cuemu.cpp's queue). Split from cuemu.cpp, which keeps the runtime.
#include "include/cuemu.h"
#include "include/cublas_v2.h"
#include "include/cub/cub.cuh"
#include "cuemu_internal.h"
#include <algorithm>
#include <vector>
#include <stdio.h>
#include <string.h>

// ================================================================================================
// cuBLAS (column-major, as the real one), through OpenBLAS
// ================================================================================================
extern "C" void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                            const float *B, int ldb, float beta, float *C, int ldc);
struct EmuCublas { cudaStream_t s; cublasMath_t math; };
cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new EmuCublas{NULL, CUBLAS_DEFAULT_MATH}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->s = s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *ws, size_t n) {
    return ws && emu_mem_kind(ws, n) == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *m) { *m = h->math; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
}
// an operand of r x c (column-major, leading dimension ld) must lie in one device allocation
static int operand_ok(const void *p, int r, int c, int ld, size_t esz, const char *what, const char *fn) {
    if (r <= 0 || c <= 0) return 1;
    size_t n = ((size_t)(c - 1) * ld + r) * esz;
    if (ld < r || emu_mem_kind(p, n) != 0) {
        fprintf(stderr, "cuemu: %s: operand %s (%d x %d, ld %d) is not inside device memory (%s)\n", fn, what, r, c,
                ld, emu_kind_name(emu_mem_kind(p, n)));
        return 0;
    }
    return 1;
}
static float bf16f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
// one product, any of the supported operand types; runs when the stream gets to it
static cublasStatus_t gemm_one(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                               float alpha, const void *A, cudaDataType at, int lda, long long sA, const void *B,
                               cudaDataType bt, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                               int batch, const char *fn) {
    if (m < 0 || n < 0 || k < 0 || batch < 0 || ta > 1 || tb > 1) return CUBLAS_STATUS_INVALID_VALUE;
    if ((at != CUDA_R_32F && at != CUDA_R_16BF) || bt != at) return CUBLAS_STATUS_NOT_SUPPORTED;
    size_t esz = at == CUDA_R_32F ? 4 : 2;
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    for (int i = 0; i < batch; i++)
        if (!operand_ok((const char *)A + i * sA * esz, ar, ac, lda, esz, "A", fn) ||
            !operand_ok((const char *)B + i * sB * esz, br, bc, ldb, esz, "B", fn) ||
            !operand_ok(C + i * sC, m, n, ldc, 4, "C", fn))
            return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    cudaError_t e = emu_enqueue(h->s, [=] {
        if (emu_prof_on()) {
            char key[160];
            snprintf(key, sizeof key, "%s %c%c m %d n %d k %d batch %d %s", fn, ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k,
                     batch, at == CUDA_R_16BF ? "bf16" : "fp32");
            emu_prof_call(key);
        }
        std::vector<float> fa, fb;
        for (int i = 0; i < batch; i++) {
            const float *a = (const float *)A + i * sA, *b = (const float *)B + i * sB;
            if (at == CUDA_R_16BF) {  // bf16 -> fp32 is exact; the product accumulates in fp32
                const uint16_t *a16 = (const uint16_t *)A + i * sA, *b16 = (const uint16_t *)B + i * sB;
                size_t na = (size_t)(ac - 1) * lda + ar, nb = (size_t)(bc - 1) * ldb + br;
                fa.resize(na);
                fb.resize(nb);
                for (size_t j = 0; j < na; j++) fa[j] = bf16f(a16[j]);
                for (size_t j = 0; j < nb; j++) fb[j] = bf16f(b16[j]);
                a = fa.data();
                b = fb.data();
            }
            float *c = C + i * sC;
            if (k == 0) {  // BLAS: C = beta C (and exactly 0 when beta is 0)
                for (int col = 0; col < n; col++)
                    for (int r = 0; r < m; r++) c[(size_t)col * ldc + r] = beta == 0 ? 0 : beta * c[(size_t)col * ldc + r];
                continue;
            }
            cblas_sgemm(102, ta ? 112 : 111, tb ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        }
    }, fn);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return gemm_one(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, *beta, C, ldc, 0, 1,
                    "cublasSgemm");
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch) {
    return gemm_one(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sA, B, CUDA_R_32F, ldb, sB, *beta, C, ldc, sC,
                    batch, "cublasSgemmStridedBatched");
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t,
                            cublasGemmAlgo_t) {
    if (ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_one(h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, 0, B, bt, ldb, 0, *(const float *)beta,
                    (float *)C, ldc, 0, 1, "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sA, const void *B, cudaDataType bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sC,
                                          int batch, cublasComputeType_t, cublasGemmAlgo_t) {
    if (ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_one(h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sA, B, bt, ldb, sB, *(const float *)beta,
                    (float *)C, ldc, sC, batch, "cublasGemmStridedBatchedEx");
}

// ================================================================================================
// cub::DeviceRadixSort::SortPairs
// ================================================================================================
cudaError_t cub::emu_sort_pairs_u64(void *tmp, size_t &tmp_bytes, const uint64_t *kin, uint64_t *kout,
                                    const int *vin, int *vout, int n, int begin_bit, int end_bit, cudaStream_t s) {
    size_t need = 256 + (size_t)(n > 0 ? n : 0) * 16;
    if (!tmp) { tmp_bytes = need; return cudaSuccess; }
    if (tmp_bytes < need || emu_mem_kind(tmp, need) != 0 || begin_bit < 0 || end_bit > 64 || begin_bit >= end_bit)
        return emu_set_err(cudaErrorInvalidValue);
    if (n <= 0) return cudaSuccess;
    if (emu_mem_kind(kin, 8 * (size_t)n) != 0 || emu_mem_kind(kout, 8 * (size_t)n) != 0 ||
        emu_mem_kind(vin, 4 * (size_t)n) != 0 || emu_mem_kind(vout, 4 * (size_t)n) != 0) {
        fprintf(stderr, "cuemu: cub SortPairs: keys or values not in device memory\n");
        return emu_set_err(cudaErrorInvalidValue);
    }
    return emu_set_err(emu_enqueue(s, [=] {
        if (emu_prof_on()) {  // counted where it runs: a graph replay runs it again
            char key[96];
            snprintf(key, sizeof key, "cub::SortPairs n %d bits %d", n, end_bit - begin_bit);
            emu_prof_call(key);
        }
        uint64_t mask = end_bit - begin_bit == 64 ? ~0ull : ((1ull << (end_bit - begin_bit)) - 1);
        std::vector<int> ix(n);
        for (int i = 0; i < n; i++) ix[i] = i;
        std::stable_sort(ix.begin(), ix.end(), [&](int a, int b) {
            return ((kin[a] >> begin_bit) & mask) < ((kin[b] >> begin_bit) & mask);
        });
        std::vector<uint64_t> ko(n);
        std::vector<int> vo(n);
        for (int i = 0; i < n; i++) { ko[i] = kin[ix[i]]; vo[i] = vin[ix[i]]; }
        memcpy(kout, ko.data(), 8 * (size_t)n);
        memcpy(vout, vo.data(), 4 * (size_t)n);
    }, "cub::DeviceRadixSort::SortPairs"));
}
