// ops.h — the elementary CPU ops (dense layers, norms, activations, embedding, loss, Engram
// lookup). Every backward ACCUMULATES (+=) into its d-buffers. Only matmul_backward (dinp, dW,
// dbias) and rmsnorm_backward (dinp, dgain) take NULL for a gradient that is not needed; the
// others write through every d-buffer they are given.
#pragma once
#include <stdint.h>
#include <math.h>
#include <string.h>
#include "../real.h"

// ---- inline helpers shared by the ops and the engine's element-wise passes ----
// dm_exp: e^x. The float build uses a branch-free polynomial exp that GCC vectorises (no libm
// call, no float compares — the clamps are integer masks on the bit pattern, which is what
// keeps the loops vectorisable): Cody–Waite reduction x log2(e) = n + r and the Cephes degree-6
// polynomial, max relative error 8.3e-8 (1.4 ulp; tests/test_perf_exp.c). |x| is clamped to 87
// first (inf included), so the result stays in [1.6e-38, 6.1e37] — never 0 or inf, harmless
// inside 1 / (1 + e^-x) and in a max-subtracted softmax; NaN in gives NaN out. The double build
// (finite-difference gradient tests) keeps libm's exp.
#ifdef DM_DOUBLE
static inline double dm_exp(double x) { return exp(x); }
#else
static inline float dm_exp(float x) {
    int32_t xi0;
    memcpy(&xi0, &x, sizeof xi0);
    // |x| clamped to 87 as an unsigned min on the magnitude bits (inf and NaN too; NaN is put
    // back at the end): one vector min instead of a compare-and-blend per bound
    uint32_t ax = (uint32_t)xi0 & 0x7fffffffu;
    int32_t nan_mask = -(int32_t)(ax > 0x7f800000u);
    uint32_t axc = ax < 0x42AE0000u ? ax : 0x42AE0000u;
    int32_t xi = (int32_t)(((uint32_t)xi0 & 0x80000000u) | axc);
    memcpy(&x, &xi, sizeof x);
    const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    float t = x * 1.44269504088896341f + shifter;
    float nf = t - shifter;
    int32_t ti;
    memcpy(&ti, &t, sizeof ti);
    int32_t ni = ti - 0x4B400000;     // the integer n in [-126, 126], read off the mantissa
    float r = x - nf * 0.693359375f;  // ln2 split in two: r exact to float precision
    r = r + nf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t yi;
    memcpy(&yi, &y, sizeof yi);
    yi += ni * (1 << 23);                        // y * 2^n through the exponent field
    yi = (yi & ~nan_mask) | (xi0 & nan_mask);    // NaN in, NaN out
    memcpy(&y, &yi, sizeof y);
    return y;
}
#endif
static inline real dm_sigmoid(real x) { return (real)1 / ((real)1 + dm_exp(-x)); }

// Reductions in double with 8 independent partial sums (vectorisable, and a fixed order: the
// result is a pure function of the inputs), combined pairwise at the end.
static inline double dm_dot_d(const real *restrict a, const real *restrict b, size_t n) {
    double s[8] = {0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) s[u] += (double)a[j + u] * b[j + u];
    for (; j < n; j++) s[0] += (double)a[j] * b[j];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}
static inline double dm_sumsq_d(const real *restrict a, size_t n) {
    double s[8] = {0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) s[u] += (double)a[j + u] * a[j + u];
    for (; j < n; j++) s[0] += (double)a[j] * a[j];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// out[N,OC] = inp[N,C] W[OC,C]^T (+ bias[OC])
void matmul_forward(real *out, const real *inp, const real *W, const real *bias, int N, int C, int OC);
void matmul_backward(real *dinp, real *dW, real *dbias, const real *dout, const real *inp,
                     const real *W, int N, int C, int OC);

// out[N,C] = inp * rstd * gain (gain may be NULL = 1); rstd[N] = 1/sqrt(mean(inp^2) + eps)
void rmsnorm_forward(real *out, real *rstd, const real *inp, const real *gain, int N, int C);
void rmsnorm_backward(real *dinp, real *dgain, const real *dout, const real *inp, const real *gain,
                      const real *rstd, int N, int C);

// out[N,C] = inp / sqrt(sum(inp^2) + eps) * scale; rn[N] = the reciprocal norm
void l2norm_forward(real *out, real *rn, const real *inp, real scale, int N, int C);
void l2norm_backward(real *dinp, const real *dout, const real *out, const real *rn, real scale, int N, int C);

void silu_forward(real *out, const real *inp, size_t n);
void silu_backward(real *dinp, const real *dout, const real *inp, size_t n);
void sigmoid_forward(real *out, const real *inp, size_t n);
// dinp += dout * out * (1 - out), from the sigmoid's output
void sigmoid_backward(real *dinp, const real *dout, const real *out, size_t n);

// out[N,C] = table[x[n]]
void embedding_forward(real *out, const int *x, const real *table, int N, int C);
void embedding_backward(real *dtable, const real *dout, const int *x, int N, int C);

// Cross-entropy of logits[N,V] against targets[N]: losses[N] (nats), probs[N,V] the softmax
// (kept for backward). dlogits += scale * (probs - onehot).
void softmax_ce_forward(real *losses, real *probs, const real *logits, const int *targets, int N, int V);
void softmax_ce_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V);

// Engram (SPEC §3). rows[o][B*T] for order orders[o]: FNV-1a over (n as one byte, then each
// symbol of x[t-n+1..t] oldest first as 2 little-endian bytes; 256 before the sequence start).
uint64_t engram_hash(const int *syms, int n);
void engram_rows(int32_t *rows, const int *x, int B, int T, const int *orders, int O, int64_t R);
// m[N, O*D]: concat over orders of tables[o][rows[o][t]], tables[o] at tables + o*R*D.
void engram_gather(real *m, const real *tables, const int32_t *rows, int N, int O, int64_t R, int D);
// dtables[o][row] += dm[t, o*D:(o+1)*D] summed over t in index order (deterministic).
void engram_scatter(real *dtables, const real *dm, const int32_t *rows, int N, int O, int64_t R, int D);
