// sgemm.c — the float matrix product of the CPU backend, tuned for this model's shapes.
//
// Why our own: nano's products are small and thin ([1024,128]x[128,128], K = 16..64 blocks in
// the chunked KDA, [128,128] Newton-Schulz). Inside a training step OpenBLAS spends ~17 % of
// the step outside its compute kernel on these shapes: packing both operands on every call and a
// separate pass that scales or zeroes C (`sgemm_beta`) before accumulating. Here C is written
// once, from registers, with alpha and beta applied in the same store (beta = 0 never reads C),
// and A is packed six rows at a time straight into L1.
//
// Scheme (the Goto/BLIS loop nest, one level of cache blocking):
//   for jc over N in NC columns:  for pc over K in KC:  pack B[pc, jc] into 16-wide panels
//     for ic over M in 6 rows:    pack A[ic, pc] (6 x kc, k-major)
//       for jr over the panels:   6x16 register tile += A panel x B panel (AVX2 FMA), or
//                                 6x32 over two panels (AVX-512, when the compiler targets it),
//                                 then C = alpha acc + beta C (first K block) or C += alpha acc.
// The order of every sum is fixed by (M, N, K) alone: the result never depends on the thread
// count (rows of C are split between threads, never K) — the determinism rule of the project.
// Without AVX2 + FMA at compile time this file forwards to cblas_sgemm.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "blas.h"
#include "sgemm.h"
#ifdef _OPENMP
#include <omp.h>
#endif

int dm_emulate_bf16;  // blas.h gemm_lp: off except inside a parity check of a bf16 device

// float -> bf16 -> float, round to nearest even (NaN stays NaN): __float2bfloat16's rounding
static inline float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) u |= 0x00400000u;  // quiet NaN
    else u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

void dm_sgemm_bf16ops(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    // dense rounded copies of op(A) [M, K] and op(B) [K, N], then the ordinary product
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N);
    if (!a || !b) abort();
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) a[(size_t)i * K + k] = bf16_round(tA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) b[(size_t)k * N + j] = bf16_round(tB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
    dm_sgemm(0, 0, M, N, K, alpha, a, K, b, N, beta, C, ldc);
    free(a);
    free(b);
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

enum { MR = 6, NR = 16, KC = 256, NC = 512, MC = 96, SMALL_M = 96 };
// CW: the columns one register tile covers. With AVX-512 a tile is 6 x 32 (two 16-wide panels,
// two zmm accumulators per row): twice the FMA width of the AVX2 6 x 16 tile. Each element of C
// is still one FMA chain over k in order, so both tiles give the same bits.
#ifdef __AVX512F__
enum { CW = 2 * NR };
#else
enum { CW = NR };
#endif

// Thread-local packing buffers (slot 0: the A micro-panel, slot 1: the B block), grown on
// demand and kept: no malloc per call (a 512 KiB malloc is an mmap + page faults every time).
static _Thread_local float *tl_buf[2];
static _Thread_local size_t tl_cap[2];
static float *scratch(int slot, size_t nfloat) {
    if (nfloat > tl_cap[slot]) {
        free(tl_buf[slot]);
        size_t bytes = (nfloat * sizeof(float) + 63) & ~(size_t)63;
        tl_buf[slot] = aligned_alloc(64, bytes);
        if (!tl_buf[slot]) abort();
        tl_cap[slot] = bytes / sizeof(float);
    }
    return tl_buf[slot];
}

// dst[r * ds + c] = src[c * ss + r], r, c < 8: eight rows of 8 in, eight columns out
static inline void transpose8_store(float *dst, ptrdiff_t ds, const float *src, ptrdiff_t ss) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss), r2 = _mm256_loadu_ps(src + 2 * ss),
           r3 = _mm256_loadu_ps(src + 3 * ss), r4 = _mm256_loadu_ps(src + 4 * ss), r5 = _mm256_loadu_ps(src + 5 * ss),
           r6 = _mm256_loadu_ps(src + 6 * ss), r7 = _mm256_loadu_ps(src + 7 * ss);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// B block op(B)[pc:pc+kc, jc:jc+nc] -> Bp [ceil(nc/16)][kc][16], columns past nc zero.
static void pack_b(float *restrict Bp, const float *B, int ldb, int tB, int pc, int jc, int kc, int nc) {
    for (int j0 = 0; j0 < nc; j0 += NR) {
        int nr = nc - j0 < NR ? nc - j0 : NR;
        float *restrict dst = Bp + (size_t)(j0 / NR) * kc * NR;
        if (!tB) {  // op(B)(k, j) = B[k ldb + j]: rows are contiguous
            for (int k = 0; k < kc; k++) {
                const float *src = B + (size_t)(pc + k) * ldb + jc + j0;
                if (nr == NR) {
                    _mm256_store_ps(dst + k * NR, _mm256_loadu_ps(src));
                    _mm256_store_ps(dst + k * NR + 8, _mm256_loadu_ps(src + 8));
                } else {
                    int j = 0;
                    for (; j < nr; j++) dst[k * NR + j] = src[j];
                    for (; j < NR; j++) dst[k * NR + j] = 0;
                }
            }
        } else {    // op(B)(k, j) = B[j ldb + k]: a transpose, 8 x 8 blocks in registers
            if (nr < NR) memset(dst, 0, sizeof(float) * (size_t)kc * NR);
            int j = 0;
            for (; j + 8 <= nr; j += 8) {
                const float *src = B + (size_t)(jc + j0 + j) * ldb + pc;
                int k = 0;
                for (; k + 8 <= kc; k += 8) transpose8_store(dst + (size_t)k * NR + j, NR, src + k, ldb);
                for (; k < kc; k++)
                    for (int jj = 0; jj < 8; jj++) dst[k * NR + j + jj] = src[(size_t)jj * ldb + k];
            }
            for (; j < nr; j++) {
                const float *src = B + (size_t)(jc + j0 + j) * ldb + pc;
                for (int k = 0; k < kc; k++) dst[k * NR + j] = src[k];
            }
        }
    }
}

// A rows op(A)[ic:ic+mc, pc:pc+kc] -> Ap [ceil(mc/6)][kc][6], rows past mc zero. The source is
// read in its storage order (rows of A, or rows of A^T for tA), one cache line after another:
// reading six values per row at a power-of-two stride instead thrashes a few L1 sets.
static void pack_a(float *restrict Ap, const float *A, int lda, int tA, int ic, int pc, int mc, int kc) {
    int nb = (mc + MR - 1) / MR;
    if (mc % MR) memset(Ap + (size_t)(nb - 1) * kc * MR, 0, sizeof(float) * (size_t)kc * MR);
    if (tA) {       // op(A)(i, k) = A[k lda + i]: row k of A holds op(A)(ic.., k)
        for (int k = 0; k < kc; k++) {
            const float *src = A + (size_t)(pc + k) * lda + ic;
            float *dst = Ap + (size_t)k * MR;
            int i = 0;
            // six values as a 4-wide and a 2-wide move (exactly six read and written: the
            // source row may end right after them)
            for (; i + MR <= mc; i += MR, dst += (size_t)kc * MR) {
                _mm_storeu_ps(dst, _mm_loadu_ps(src + i));
                // (through memcpy: a double load from a float address is undefined behaviour,
                // which UBSan reports on every step; the compiler emits the same 8-byte move)
                uint64_t two;
                memcpy(&two, src + i + 4, sizeof two);
                memcpy(dst + 4, &two, sizeof two);
            }
            for (int r = 0; i + r < mc; r++) dst[r] = src[i + r];
        }
    } else {        // op(A)(i, k) = A[i lda + k]
        for (int i = 0; i < mc; i++) {
            const float *src = A + (size_t)(ic + i) * lda + pc;
            float *dst = Ap + (size_t)(i / MR) * kc * MR + i % MR;
            for (int k = 0; k < kc; k++) dst[(size_t)k * MR] = src[k];
        }
    }
}

#ifndef __AVX512F__
// C[mr, nr] (row stride ldc) = alpha acc + beta C   (first: the first K block; beta = 0: C is
// not read), or C += alpha acc for the later K blocks.
static inline void store_row(float *c, __m256 lo, __m256 hi, int nr, float alpha, float beta, int first) {
    __m256 va = _mm256_set1_ps(alpha);
    lo = _mm256_mul_ps(lo, va);
    hi = _mm256_mul_ps(hi, va);
    if (nr == NR) {
        if (first && beta == 0) {
            _mm256_storeu_ps(c, lo);
            _mm256_storeu_ps(c + 8, hi);
        } else {
            __m256 vb = _mm256_set1_ps(first ? beta : 1.0f);
            _mm256_storeu_ps(c, _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), lo));
            _mm256_storeu_ps(c + 8, _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8), hi));
        }
        return;
    }
    float t[NR] __attribute__((aligned(32)));
    _mm256_store_ps(t, lo);
    _mm256_store_ps(t + 8, hi);
    float bb = first ? beta : 1.0f;
    // the same rounding as the vector path: one fma (beta c + t), or the plain product
    if (first && beta == 0)
        for (int j = 0; j < nr; j++) c[j] = t[j];
    else
        for (int j = 0; j < nr; j++) c[j] = __builtin_fmaf(bb, c[j], t[j]);
}

// How a tile reads A (a compile-time constant at every call site, so each variant is its own
// loop: one pointer with constant offsets, or six row pointers and one shared index):
//   A_PACKED  a packed panel, a(r, k) = a[6 k + r]
//   A_ROWS    rows of A in place, a(r, k) = a[r lda + k]
//   A_COLS    rows of A^T in place, a(r, k) = a[k lda + r]
enum { A_PACKED, A_ROWS, A_COLS };

// 6x16 tile: acc[r][j] = sum_k a(r, k) b(k, j), 12 accumulators in ymm registers.
//   Rows r >= mr re-read row 0 (always valid memory) and are not stored.
//   b(k, :) = b + k bs, 16 wide: a packed panel (bs = 16) or rows of B in place (bs = ldb);
//   `masked` loads only nr < 16 columns, so an in-place edge panel never reads past its row.
static inline __attribute__((always_inline)) void
tile(int kc, const int amode, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t bs,
     const int masked, __m256i m0, __m256i m1, float *c, int ldc, int mr, int nr, float alpha,
     float beta, int first) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    // offsets of rows 1..5 from row 0 (0 for rows past mr)
    ptrdiff_t rs = amode == A_ROWS ? lda : 1;
    ptrdiff_t o1 = (mr > 1) * rs, o2 = (mr > 2) * 2 * rs, o3 = (mr > 3) * 3 * rs;
    ptrdiff_t o4 = (mr > 4) * 4 * rs, o5 = (mr > 5) * 5 * rs;
    ptrdiff_t ks = amode == A_PACKED ? MR : amode == A_ROWS ? 1 : lda;
#define DM_TILE_STEP(A0, A1, A2, A3, A4, A5)                                                          \
    do {                                                                                           \
        __m256 b0, b1, x;                                                                          \
        if (masked) { b0 = _mm256_maskload_ps(b, m0); b1 = _mm256_maskload_ps(b + 8, m1); }        \
        else        { b0 = _mm256_loadu_ps(b); b1 = _mm256_loadu_ps(b + 8); }                      \
        x = _mm256_broadcast_ss(A0); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01); \
        x = _mm256_broadcast_ss(A1); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11); \
        x = _mm256_broadcast_ss(A2); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21); \
        x = _mm256_broadcast_ss(A3); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31); \
        x = _mm256_broadcast_ss(A4); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41); \
        x = _mm256_broadcast_ss(A5); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51); \
        b += bs;                                                                                   \
    } while (0)
    if (amode == A_ROWS) {  // six fixed row pointers, one index
        const float *r0 = a, *r1 = a + o1, *r2 = a + o2, *r3 = a + o3, *r4 = a + o4, *r5 = a + o5;
#pragma GCC unroll 4
        for (int k = 0; k < kc; k++) DM_TILE_STEP(r0 + k, r1 + k, r2 + k, r3 + k, r4 + k, r5 + k);
    } else {                // one moving pointer, rows at constant offsets
#pragma GCC unroll 4
        for (int k = 0; k < kc; k++, a += ks) DM_TILE_STEP(a, a + o1, a + o2, a + o3, a + o4, a + o5);
    }
#undef DM_TILE_STEP
    store_row(c, c00, c01, nr, alpha, beta, first);
    if (mr > 1) store_row(c + (size_t)ldc, c10, c11, nr, alpha, beta, first);
    if (mr > 2) store_row(c + 2 * (size_t)ldc, c20, c21, nr, alpha, beta, first);
    if (mr > 3) store_row(c + 3 * (size_t)ldc, c30, c31, nr, alpha, beta, first);
    if (mr > 4) store_row(c + 4 * (size_t)ldc, c40, c41, nr, alpha, beta, first);
    if (mr > 5) store_row(c + 5 * (size_t)ldc, c50, c51, nr, alpha, beta, first);
}

// The tile variants the loops use, each its own specialised copy of `tile`.
#define DM_TILE_VARIANTS(MODE, SUF)                                                                 \
    static void tile_pb_##SUF(int kc, const float *a, ptrdiff_t lda, const float *Bp, float *c,      \
                              int ldc, int mr, int nr, float alpha, float beta, int first) {         \
        __m256i z = _mm256_setzero_si256();                                                       \
        tile(kc, MODE, a, lda, Bp, NR, 0, z, z, c, ldc, mr, nr, alpha, beta, first);              \
    }                                                                                             \
    static void tile_db_##SUF(int kc, const float *a, ptrdiff_t lda, const float *b, int ldb,        \
                              float *c, int ldc, int mr, int nr, float alpha, float beta) {          \
        if (nr == NR) {                                                                           \
            __m256i z = _mm256_setzero_si256();                                                   \
            tile(kc, MODE, a, lda, b, ldb, 0, z, z, c, ldc, mr, NR, alpha, beta, 1);              \
        } else {                                                                                  \
            __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                             \
            __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);                         \
            __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lane);                     \
            tile(kc, MODE, a, lda, b, ldb, 1, m0, m1, c, ldc, mr, nr, alpha, beta, 1);            \
        }                                                                                         \
    }
DM_TILE_VARIANTS(A_ROWS, rows)
DM_TILE_VARIANTS(A_COLS, cols)
#undef DM_TILE_VARIANTS
static void tile_pb_packed(int kc, const float *a, const float *Bp, float *c, int ldc, int mr, int nr,
                           float alpha, float beta, int first) {
    __m256i z = _mm256_setzero_si256();
    tile(kc, A_PACKED, a, 0, Bp, NR, 0, z, z, c, ldc, mr, nr, alpha, beta, first);
}

#else  // __AVX512F__
// AVX-512: C[mr, nr] (row stride ldc, nr <= 32) = alpha acc + beta C, or C += alpha acc for the
// later K blocks; the same operations per element as the AVX2 store (a product by alpha, then one
// fma with beta C), masked past nr. two = 0: only the first 16 columns exist (nr <= 16).
static inline __attribute__((always_inline)) void
store_row2(float *c, __m512 lo, __m512 hi, const int two, __mmask16 k0, __mmask16 k1, float alpha, float beta,
           int first) {
    __m512 va = _mm512_set1_ps(alpha);
    lo = _mm512_mul_ps(lo, va);
    if (two) hi = _mm512_mul_ps(hi, va);
    if (first && beta == 0) {
        _mm512_mask_storeu_ps(c, k0, lo);
        if (two) _mm512_mask_storeu_ps(c + 16, k1, hi);
    } else {
        __m512 vb = _mm512_set1_ps(first ? beta : 1.0f);
        _mm512_mask_storeu_ps(c, k0, _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k0, c), lo));
        if (two) _mm512_mask_storeu_ps(c + 16, k1, _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k1, c + 16), hi));
    }
}

// How a tile reads A (a compile-time constant at every call site, so each variant is its own
// loop: one pointer with constant offsets, or six row pointers and one shared index):
//   A_PACKED  a packed panel, a(r, k) = a[6 k + r]
//   A_ROWS    rows of A in place, a(r, k) = a[r lda + k]
//   A_COLS    rows of A^T in place, a(r, k) = a[k lda + r]
enum { A_PACKED, A_ROWS, A_COLS };

// 6x32 tile: acc[r][j] = sum_k a(r, k) b(k, j), 12 accumulators in zmm registers.
//   Rows r >= mr re-read row 0 (always valid memory) and are not stored.
//   b(k, j) = b[k bs + j] for j < 16 and b[b1 + k bs + j - 16] for the second half: two packed
//   panels (bs = 16, b1 = kc 16) or a row of B in place (bs = ldb, b1 = 16). `masked` loads
//   only the nr columns (an in-place edge never reads past its row); two = 0: 16 columns only.
static inline __attribute__((always_inline)) void
tile2(int kc, const int amode, const float *a, ptrdiff_t lda, const float *b, ptrdiff_t bs, ptrdiff_t b1,
      const int two, const int masked, float *c, int ldc, int mr, int nr, float alpha, float beta, int first) {
    __mmask16 k0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
    __mmask16 k1 = nr >= 32 ? (__mmask16)0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
    __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
    __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
    __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
    ptrdiff_t rs = amode == A_ROWS ? lda : 1;
    ptrdiff_t o1 = (mr > 1) * rs, o2 = (mr > 2) * 2 * rs, o3 = (mr > 3) * 3 * rs;
    ptrdiff_t o4 = (mr > 4) * 4 * rs, o5 = (mr > 5) * 5 * rs;
    ptrdiff_t ks = amode == A_PACKED ? MR : amode == A_ROWS ? 1 : lda;
#define DM_FMA2(R, AP)                                                                              \
    x = _mm512_set1_ps(*(AP));                                                                     \
    c##R##0 = _mm512_fmadd_ps(x, b0, c##R##0);                                                     \
    if (two) c##R##1 = _mm512_fmadd_ps(x, b1v, c##R##1);
#define DM_TILE_STEP2(A0, A1, A2, A3, A4, A5)                                                         \
    do {                                                                                           \
        __m512 b0, b1v = _mm512_setzero_ps(), x;                                                   \
        if (masked) { b0 = _mm512_maskz_loadu_ps(k0, b); if (two) b1v = _mm512_maskz_loadu_ps(k1, b + b1); } \
        else        { b0 = _mm512_loadu_ps(b); if (two) b1v = _mm512_loadu_ps(b + b1); }             \
        DM_FMA2(0, A0) DM_FMA2(1, A1) DM_FMA2(2, A2) DM_FMA2(3, A3) DM_FMA2(4, A4) DM_FMA2(5, A5)   \
        b += bs;                                                                                   \
    } while (0)
    if (amode == A_ROWS) {
        const float *r0 = a, *r1 = a + o1, *r2 = a + o2, *r3 = a + o3, *r4 = a + o4, *r5 = a + o5;
#pragma GCC unroll 4
        for (int k = 0; k < kc; k++) DM_TILE_STEP2(r0 + k, r1 + k, r2 + k, r3 + k, r4 + k, r5 + k);
    } else {
#pragma GCC unroll 4
        for (int k = 0; k < kc; k++, a += ks) DM_TILE_STEP2(a, a + o1, a + o2, a + o3, a + o4, a + o5);
    }
#undef DM_TILE_STEP2
#undef DM_FMA2
    store_row2(c, c00, c01, two, k0, k1, alpha, beta, first);
    if (mr > 1) store_row2(c + (size_t)ldc, c10, c11, two, k0, k1, alpha, beta, first);
    if (mr > 2) store_row2(c + 2 * (size_t)ldc, c20, c21, two, k0, k1, alpha, beta, first);
    if (mr > 3) store_row2(c + 3 * (size_t)ldc, c30, c31, two, k0, k1, alpha, beta, first);
    if (mr > 4) store_row2(c + 4 * (size_t)ldc, c40, c41, two, k0, k1, alpha, beta, first);
    if (mr > 5) store_row2(c + 5 * (size_t)ldc, c50, c51, two, k0, k1, alpha, beta, first);
}

// The tile variants the loops use (nr <= CW = 32 columns from the panel at Bp / column b on).
#define DM_TILE_VARIANTS(MODE, SUF)                                                                 \
    static void tile_pb_##SUF(int kc, const float *a, ptrdiff_t lda, const float *Bp, float *c,      \
                              int ldc, int mr, int nr, float alpha, float beta, int first) {         \
        if (nr > NR) tile2(kc, MODE, a, lda, Bp, NR, (ptrdiff_t)kc * NR, 1, 0, c, ldc, mr, nr, alpha, beta, first); \
        else tile2(kc, MODE, a, lda, Bp, NR, 0, 0, 0, c, ldc, mr, nr, alpha, beta, first);        \
    }                                                                                             \
    static void tile_db_##SUF(int kc, const float *a, ptrdiff_t lda, const float *b, int ldb,        \
                              float *c, int ldc, int mr, int nr, float alpha, float beta) {          \
        if (nr == CW) tile2(kc, MODE, a, lda, b, ldb, NR, 1, 0, c, ldc, mr, nr, alpha, beta, 1);   \
        else if (nr > NR) tile2(kc, MODE, a, lda, b, ldb, NR, 1, 1, c, ldc, mr, nr, alpha, beta, 1); \
        else tile2(kc, MODE, a, lda, b, ldb, 0, 0, 1, c, ldc, mr, nr, alpha, beta, 1);            \
    }
DM_TILE_VARIANTS(A_ROWS, rows)
DM_TILE_VARIANTS(A_COLS, cols)
#undef DM_TILE_VARIANTS
static void tile_pb_packed(int kc, const float *a, const float *Bp, float *c, int ldc, int mr, int nr,
                           float alpha, float beta, int first) {
    if (nr > NR) tile2(kc, A_PACKED, a, 0, Bp, NR, (ptrdiff_t)kc * NR, 1, 0, c, ldc, mr, nr, alpha, beta, first);
    else tile2(kc, A_PACKED, a, 0, Bp, NR, 0, 0, 0, c, ldc, mr, nr, alpha, beta, first);
}

#endif

// Rows [i0, i1) of C against one packed B block. A rows are read in place (they stream from
// L1 once the first panel has touched them); A^T is packed MC rows at a time, because reading
// six values per row of A^T at a power-of-two stride thrashes a few L1 sets.
static void rows_block(int i0, int i1, const float *A, int lda, int tA, const float *Bp, int pc,
                       int kc, int jc, int nc, float *C, int ldc, float alpha, float beta, int first) {
    float *Ap = tA ? scratch(0, (size_t)MC * KC) : NULL;
    for (int ic0 = i0; ic0 < i1; ic0 += MC) {
        int mc = i1 - ic0 < MC ? i1 - ic0 : MC;
        if (tA) pack_a(Ap, A, lda, tA, ic0, pc, mc, kc);
        for (int ib = 0; ib * MR < mc; ib++) {
            int mr = mc - ib * MR < MR ? mc - ib * MR : MR;
            float *crow = C + (size_t)(ic0 + ib * MR) * ldc + jc;
            for (int j0 = 0; j0 < nc; j0 += CW) {
                int nr = nc - j0 < CW ? nc - j0 : CW;
                const float *bp = Bp + (size_t)(j0 / NR) * kc * NR;
                if (tA) tile_pb_packed(kc, Ap + (size_t)ib * kc * MR, bp, crow + j0, ldc, mr, nr, alpha, beta, first);
                else tile_pb_rows(kc, A + (size_t)(ic0 + ib * MR) * lda + pc, lda, bp, crow + j0, ldc, mr, nr,
                                  alpha, beta, first);
            }
        }
    }
}

// Small products (the chunked KDA's 16..64-sized blocks, Newton-Schulz, the retraction): no
// packing at all when op(B) = B (its rows are read in place, edge panels with masked loads),
// A and A^T always in place; op(B) = B^T is packed (transposed) once, it is small.
static void small_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    const float *Bp = NULL;
    if (tB) {
        float *buf = scratch(1, (size_t)K * ((N + NR - 1) / NR) * NR);
        pack_b(buf, B, ldb, 1, 0, 0, K, N);
        Bp = buf;
    }
    for (int ic = 0; ic < M; ic += MR) {
        int mr = M - ic < MR ? M - ic : MR;
        const float *a = tA ? A + ic : A + (size_t)ic * lda;
        float *crow = C + (size_t)ic * ldc;
        for (int j0 = 0; j0 < N; j0 += CW) {
            int nr = N - j0 < CW ? N - j0 : CW;
            const float *bp = tB ? Bp + (size_t)(j0 / NR) * K * NR : NULL;
            if (tB && tA) tile_pb_cols(K, a, lda, bp, crow + j0, ldc, mr, nr, alpha, beta, 1);
            else if (tB) tile_pb_rows(K, a, lda, bp, crow + j0, ldc, mr, nr, alpha, beta, 1);
            else if (tA) tile_db_cols(K, a, lda, B + j0, ldb, crow + j0, ldc, mr, nr, alpha, beta);
            else tile_db_rows(K, a, lda, B + j0, ldb, crow + j0, ldc, mr, nr, alpha, beta);
        }
    }
}

void dm_sgemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0) {  // C = beta C (beta = 0: C is not read)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    if (M <= SMALL_M && K <= KC) {
        small_gemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    // Threads over row blocks only for products big enough to pay for a fork, and never inside
    // an enclosing parallel region (the KDA and MoE kernels call this from their own loops).
    double work = (double)M * N * K;
    int par = 0;
#ifdef _OPENMP
    par = work >= 4e6 && M >= 4 * MR && !omp_in_parallel() && omp_get_max_threads() > 1;
#endif
    float *Bp = scratch(1, (size_t)KC * NC);  // the caller's; shared read-only by its threads
    // Balanced blocks: K = 514 runs as 3 x 172 rather than 256 + 256 + 2 (a whole pass over C
    // for two k's); NC stays a multiple of the 16-wide panel.
    int nkb = (K + KC - 1) / KC, kb = (K + nkb - 1) / nkb;
    int njb = (N + NC - 1) / NC, nb = ((N + njb - 1) / njb + CW - 1) / CW * CW;
    for (int jc = 0; jc < N; jc += nb) {
        int nc = N - jc < nb ? N - jc : nb;
        for (int pc = 0; pc < K; pc += kb) {
            int kc = K - pc < kb ? K - pc : kb;
            int first = pc == 0;
            pack_b(Bp, B, ldb, tB, pc, jc, kc, nc);
            if (!par) {
                rows_block(0, M, A, lda, tA, Bp, pc, kc, jc, nc, C, ldc, alpha, beta, first);
            } else {
#ifdef _OPENMP
                // contiguous row ranges, multiples of MR: each C element is still one fixed sum
                #pragma omp parallel
                {
                    int nt = omp_get_num_threads(), id = omp_get_thread_num();
                    int blocks = (M + MR - 1) / MR;
                    int b0 = (int)((long)blocks * id / nt), b1 = (int)((long)blocks * (id + 1) / nt);
                    int i0 = b0 * MR, i1 = b1 * MR < M ? b1 * MR : M;  // MC blocks start at i0
                    if (i0 < i1) rows_block(i0, i1, A, lda, tA, Bp, pc, kc, jc, nc, C, ldc, alpha, beta, first);
                }
#endif
            }
        }
    }
}

// Upper triangle of C[n,n] = alpha op(A) op(A)^T + beta C, op(A) [n,k] = A (trans 0) or A^T
// (trans 1). Only the 6x16 tiles that touch the upper triangle are computed (about half the
// work of a gemm); the entries below the diagonal inside those tiles are written too, so the
// caller mirrors the upper triangle down (Newton-Schulz needs the full symmetric matrix).
void dm_ssyrk_upper(int trans, int n, int k, float alpha, const float *A, int lda, float beta,
                    float *C, int ldc) {
    if (n <= 0) return;
    if (k <= 0 || alpha == 0) {
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    float *Bp = scratch(1, (size_t)KC * (((size_t)n + NR - 1) / NR) * NR);
    int nkb = (k + KC - 1) / KC, kb = (k + nkb - 1) / nkb;
    for (int pc = 0; pc < k; pc += kb) {
        int kc = k - pc < kb ? k - pc : kb;
        // op(B) = op(A)^T: (kk, j) = op(A)(j, kk): A^T stored as A for trans 0, A itself for 1
        pack_b(Bp, A, lda, !trans, pc, 0, kc, n);
        for (int ic = 0; ic < n; ic += MR) {
            int mr = n - ic < MR ? n - ic : MR;
            const float *a = trans ? A + (size_t)pc * lda + ic : A + (size_t)ic * lda + pc;
            for (int j0 = ic / CW * CW; j0 < n; j0 += CW) {  // first tile holding column ic
                int nr = n - j0 < CW ? n - j0 : CW;
                const float *bp = Bp + (size_t)(j0 / NR) * kc * NR;
                if (trans) tile_pb_cols(kc, a, lda, bp, C + (size_t)ic * ldc + j0, ldc, mr, nr, alpha, beta, pc == 0);
                else tile_pb_rows(kc, a, lda, bp, C + (size_t)ic * ldc + j0, ldc, mr, nr, alpha, beta, pc == 0);
            }
        }
    }
}

#else  // no AVX2/FMA at compile time: the reference BLAS

void dm_sgemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    int blas = dm_blas_enter();
    cblas_sgemm(DmCblasRowMajor, tA ? DmCblasTrans : DmCblasNoTrans, tB ? DmCblasTrans : DmCblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    dm_blas_leave(blas);
}

void cblas_ssyrk(int order, int uplo, int trans, int n, int k, float alpha, const float *a, int lda,
                 float beta, float *c, int ldc);
void dm_ssyrk_upper(int trans, int n, int k, float alpha, const float *A, int lda, float beta,
                    float *C, int ldc) {
    int blas = dm_blas_enter();
    cblas_ssyrk(DmCblasRowMajor, 121 /* upper */, trans ? DmCblasTrans : DmCblasNoTrans, n, k, alpha, A, lda,
                beta, C, ldc);
    dm_blas_leave(blas);
}

#endif
