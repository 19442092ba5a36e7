// gemm_cuda.cu — the CUDA backend's matrix products (SPEC §8): cuBLAS on row-major device
// arrays, fp32 (SGEMM, pedantic) or bf16 operands with fp32 accumulation. The bf16 operands are
// packed densely first (to_bf16_pair_kernel), into the grow-only scratch slots — or, for a caller that
// must not allocate once it has started (the optimizer's Muon products), into its own workspace.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE
// dst [rows, cols] bf16 dense <- src [rows, cols] fp32 at leading dimension ld, element i; the
// index split in 32 bits when it fits, none when dense (a 64-bit division per element is a long
// software sequence)
__device__ inline void to_bf16_one(__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld, size_t i) {
    size_t n = (size_t)rows * cols;
    if (i >= n) return;
    size_t j = i;
    if (ld != cols) {
        unsigned u = (unsigned)i, uc = (unsigned)cols, r = u / uc;
        j = n <= 0xffffffffu ? (size_t)r * ld + (u - r * uc) : i / cols * ld + i % cols;
    }
    dst[i] = __float2bfloat16_rn(src[j]);
}
// Both operands of one product in ONE launch: blocks [0, nba) pack A [ra, ca] (at lda), the rest
// B [rb, cb] (at ldb). The two conversions are independent; a step packs some 300 products, and a
// launch costs its gap on the device even inside a graph (session 17's census: half of a step's
// ~1 300 launches were these conversions, two per product).
__global__ void to_bf16_pair_kernel(__nv_bfloat16 *da, const float *sa, int ra, int ca, int lda, unsigned nba,
                                    __nv_bfloat16 *db, const float *sb, int rb, int cb, int ldb) {
    unsigned b = blockIdx.x;
    if (b < nba) to_bf16_one(da, sa, ra, ca, lda, (size_t)b * blockDim.x + threadIdx.x);
    else to_bf16_one(db, sb, rb, cb, ldb, (size_t)(b - nba) * blockDim.x + threadIdx.x);
}
static void pack_pair(__nv_bfloat16 *da, const float *sa, int ra, int ca, int lda, __nv_bfloat16 *db,
                      const float *sb, int rb, int cb, int ldb) {
    long long nba = ceil_div((long long)ra * ca, 256), nbb = ceil_div((long long)rb * cb, 256);
    to_bf16_pair_kernel<<<(unsigned)(nba + nbb), 256, 0, dm_stream>>>(da, sa, ra, ca, lda, (unsigned)nba, db, sb, rb,
                                                                     cb, ldb);
    cudaLaunchCheck();
}
// C [M, N] (ld ldc) *= beta, or = 0 when beta == 0 (the K == 0 case: BLAS semantics made explicit)
__global__ void scale_mat_kernel(float *C, int M, int N, int ldc, float beta) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N) return;
    float *c = C + (i / N) * ldc + i % N;
    *c = beta == 0.0f ? 0.0f : beta * *c;
}

// Room for the packed bf16 operands: the caller's workspace ws (A's na values, then B's at the next
// 16-byte boundary: dm_gemm_ws_size) or, ws == NULL, the grow-only scratch slots.
static void bf16_room(void *ws, size_t na, size_t nb, __nv_bfloat16 **Ab, __nv_bfloat16 **Bb) {
    if (ws) {
        *Ab = (__nv_bfloat16 *)ws;
        *Bb = *Ab + ((na + 7) & ~(size_t)7);
        return;
    }
    *Ab = (__nv_bfloat16 *)dm_scratch(SCR_BF16A, sizeof(__nv_bfloat16) * na);
    *Bb = (__nv_bfloat16 *)dm_scratch(SCR_BF16B, sizeof(__nv_bfloat16) * nb);
}
size_t dm_gemm_ws_size(size_t na, size_t nb) { return sizeof(__nv_bfloat16) * (((na + 7) & ~(size_t)7) + nb); }

void dm_gemm_bf16(int tA, int tB, int M, int N, int K, float alpha, const __nv_bfloat16 *A, int lda, long long sA,
                  const __nv_bfloat16 *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                  int batch) {
    // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands
    cublasOperation_t oa = tA ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
        cublasCheck(cublasGemmEx(dm_cublas, ob, oa, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta,
                                 C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    cublasCheck(cublasGemmStridedBatchedEx(dm_cublas, ob, oa, N, M, K, &alpha, B, CUDA_R_16BF, ldb, sB, A,
                                           CUDA_R_16BF, lda, sA, &beta, C, CUDA_R_32F, ldc, sC, batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void dm_gemm_ws(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc, int lowp, void *ws) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        scale_mat_kernel<<<ceil_div((long long)M * N, 256), 256, 0, dm_stream>>>(C, M, N, ldc, beta);
        cudaLaunchCheck();
        return;
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    cublasOperation_t oa = tA ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (dm_fp32 || !lowp) {
        cublasCheck(cublasSgemm(dm_cublas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
        return;
    }
    // bf16: pack op-operands densely (handles strided views such as KDA's [B,T,H,D] rows)
    int ar = tA ? K : M, ac = tA ? M : K;  // A as stored: [ar, ac] at lda
    int br = tB ? N : K, bc = tB ? K : N;  // B as stored: [br, bc] at ldb
    __nv_bfloat16 *Ab, *Bb;
    bf16_room(ws, (size_t)ar * ac, (size_t)br * bc, &Ab, &Bb);
    pack_pair(Ab, A, ar, ac, lda, Bb, B, br, bc, ldb);
    dm_gemm_bf16(tA, tB, M, N, K, alpha, Ab, ac, 0, Bb, bc, 0, beta, C, ldc, 0, 1);
}

void dm_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc, int lowp) {
    dm_gemm_ws(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, lowp, NULL);
}

void dm_gemm_batched_ws(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                        const float *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                        int batch, int lowp, void *ws) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if (batch == 1 || K <= 0) {  // one product, or C = beta C: dm_gemm's own paths, per matrix
        for (int i = 0; i < batch; i++)
            dm_gemm_ws(tA, tB, M, N, K, alpha, A + i * sA, lda, B + i * sB, ldb, beta, C + i * sC, ldc, lowp, ws);
        return;
    }
    cublasOperation_t oa = tA ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (dm_fp32 || !lowp) {  // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
        cublasCheck(cublasSgemmStridedBatched(dm_cublas, ob, oa, N, M, K, &alpha, B, ldb, sB, A, lda, sA, &beta, C,
                                              ldc, sC, batch));
        return;
    }
    int ar = tA ? K : M, br = tB ? N : K;  // rows as stored; dense: sA = ar * lda, sB = br * ldb
    if (sA != (long long)ar * lda || sB != (long long)br * ldb) {
        fprintf(stderr, "dm_gemm_batched: bf16 operands must be dense batches (%s:%d)\n", __FILE__, __LINE__);
        exit(1);
    }
    __nv_bfloat16 *Ab, *Bb;
    bf16_room(ws, (size_t)sA * batch, (size_t)sB * batch, &Ab, &Bb);
    pack_pair(Ab, A, ar * batch, lda, lda, Bb, B, br * batch, ldb, ldb);
    dm_gemm_bf16(tA, tB, M, N, K, alpha, Ab, lda, sA, Bb, ldb, sB, beta, C, ldc, sC, batch);
}

void dm_gemm_batched(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                     const float *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                     int batch, int lowp) {
    dm_gemm_batched_ws(tA, tB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch, lowp, NULL);
}

#endif  // DM_DOUBLE
