// ops.c — elementary CPU ops. See ops.h for the contracts.
#include "ops.h"
#include <math.h>
#include <string.h>
#include "blas.h"

#define NORM_EPS 1e-6

void matmul_forward(real *out, const real *inp, const real *W, const real *bias, int N, int C, int OC) {
    // out[N,OC] = inp[N,C] @ W[OC,C]^T
    gemm_lp(0, 1, N, OC, C, 1, inp, C, W, C, 0, out, OC);
    if (bias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

void matmul_backward(real *dinp, real *dW, real *dbias, const real *dout, const real *inp,
                     const real *W, int N, int C, int OC) {
    if (dinp) gemm_lp(0, 0, N, C, OC, 1, dout, OC, W, C, 1, dinp, C);      // [N,C] += dout W
    if (dW) gemm_lp(1, 0, OC, C, N, 1, dout, OC, inp, C, 1, dW, C);        // [OC,C] += dout^T inp
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += (real)s;
        }
}

void rmsnorm_forward(real *out, real *rstd, const real *inp, const real *gain, int N, int C) {
    for (int n = 0; n < N; n++) {
        const real *restrict x = inp + (size_t)n * C;
        real *restrict y = out + (size_t)n * C;
        double ss = dm_sumsq_d(x, C);
        real r = (real)(1.0 / sqrt(ss / C + NORM_EPS));
        rstd[n] = r;
        if (gain)
            for (int c = 0; c < C; c++) y[c] = x[c] * r * gain[c];
        else
            for (int c = 0; c < C; c++) y[c] = x[c] * r;
    }
}

void rmsnorm_backward(real *dinp, real *dgain, const real *dout, const real *inp, const real *gain,
                      const real *rstd, int N, int C) {
    real gdy[C > 0 ? C : 1];
    for (int n = 0; n < N; n++) {
        const real *restrict x = inp + (size_t)n * C, *restrict dy = dout + (size_t)n * C;
        real r = rstd[n];
        // y = x r g; dx = r (g dy) - x r^3/C * sum(g dy x)
        const real *gd = dy;
        if (gain) {
            for (int c = 0; c < C; c++) gdy[c] = dy[c] * gain[c];
            gd = gdy;
        }
        double dot = dm_dot_d(gd, x, C);
        real k = (real)(dot * r * r * r / C);
        if (dinp) {
            real *restrict dx = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++) dx[c] += r * gd[c] - x[c] * k;
        }
        if (dgain) {
            real *restrict dgn = dgain;
            for (int c = 0; c < C; c++) dgn[c] += dy[c] * x[c] * r;
        }
    }
}

void l2norm_forward(real *out, real *rn, const real *inp, real scale, int N, int C) {
    for (int n = 0; n < N; n++) {
        const real *restrict x = inp + (size_t)n * C;
        real *restrict y = out + (size_t)n * C;
        double ss = dm_sumsq_d(x, C);
        real r = (real)(1.0 / sqrt(ss + NORM_EPS));
        rn[n] = r;
        for (int c = 0; c < C; c++) y[c] = x[c] * r * scale;
    }
}

void l2norm_backward(real *dinp, const real *dout, const real *out, const real *rn, real scale, int N, int C) {
    // y = s x r, r = (|x|^2+eps)^-1/2: dx = s r dy - s r^3 x (x.dy) = r (s dy - y (y.dy) / s)
    for (int n = 0; n < N; n++) {
        const real *restrict y = out + (size_t)n * C, *restrict dy = dout + (size_t)n * C;
        real *restrict dx = dinp + (size_t)n * C;
        double dot = dm_dot_d(dy, y, C);
        real r = rn[n];
        real k = (real)(dot / scale);
        for (int c = 0; c < C; c++) dx[c] += r * (scale * dy[c] - y[c] * k);
    }
}

void silu_forward(real *out, const real *inp, size_t n) {
    real *restrict o = out;
    const real *restrict x = inp;
    if (out == inp) {  // in place (the decoder): same formula
        for (size_t i = 0; i < n; i++) out[i] = inp[i] * dm_sigmoid(inp[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) o[i] = x[i] * dm_sigmoid(x[i]);
}

void silu_backward(real *dinp, const real *dout, const real *inp, size_t n) {
    real *restrict dx = dinp;
    const real *restrict dy = dout, *restrict x = inp;
    for (size_t i = 0; i < n; i++) {
        real s = dm_sigmoid(x[i]);
        dx[i] += dy[i] * s * (1 + x[i] * (1 - s));
    }
}

void sigmoid_forward(real *out, const real *inp, size_t n) {
    if (out == inp) {
        for (size_t i = 0; i < n; i++) out[i] = dm_sigmoid(inp[i]);
        return;
    }
    real *restrict o = out;
    const real *restrict x = inp;
    for (size_t i = 0; i < n; i++) o[i] = dm_sigmoid(x[i]);
}

void sigmoid_backward(real *dinp, const real *dout, const real *out, size_t n) {
    real *restrict dx = dinp;
    const real *restrict dy = dout, *restrict y = out;
    for (size_t i = 0; i < n; i++) dx[i] += dy[i] * y[i] * (1 - y[i]);
}

void embedding_forward(real *out, const int *x, const real *table, int N, int C) {
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, table + (size_t)x[n] * C, sizeof(real) * C);
}

void embedding_backward(real *dtable, const real *dout, const int *x, int N, int C) {
    // sequential in token order: the same sum order every run (no atomics, no thread race)
    for (int n = 0; n < N; n++) {
        real *d = dtable + (size_t)x[n] * C;
        const real *g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}

void softmax_ce_forward(real *losses, real *probs, const real *logits, const int *targets, int N, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *restrict l = logits + (size_t)n * V;
        real *restrict p = probs + (size_t)n * V;
        // the max in 8 lanes (a max is exact in any order; one serial chain of compares was
        // half of this function's time), folded in a fixed order
        real m8[8];
        for (int u = 0; u < 8; u++) m8[u] = l[0];
        int v0 = 0;
        for (; v0 + 8 <= V; v0 += 8)
            for (int u = 0; u < 8; u++) m8[u] = l[v0 + u] > m8[u] ? l[v0 + u] : m8[u];
        for (; v0 < V; v0++) m8[0] = l[v0] > m8[0] ? l[v0] : m8[0];
        real mx = m8[0];
        for (int u = 1; u < 8; u++) mx = m8[u] > mx ? m8[u] : mx;
        for (int v = 0; v < V; v++) p[v] = dm_exp(l[v] - mx);
        double s8[8] = {0};
        int v = 0;
        for (; v + 8 <= V; v += 8)
            for (int u = 0; u < 8; u++) s8[u] += p[v + u];
        for (; v < V; v++) s8[0] += p[v];
        double s = ((s8[0] + s8[4]) + (s8[1] + s8[5])) + ((s8[2] + s8[6]) + (s8[3] + s8[7]));
        real inv = (real)(1.0 / s);
        for (int v2 = 0; v2 < V; v2++) p[v2] *= inv;
        losses[n] = (real)(log(s) + mx - l[targets[n]]);
    }
}

void softmax_ce_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V) {
    for (int n = 0; n < N; n++) {
        real *d = dlogits + (size_t)n * V;
        const real *p = probs + (size_t)n * V;
        for (int v = 0; v < V; v++) d[v] += scale * p[v];
        d[targets[n]] -= scale;
    }
}

uint64_t engram_hash(const int *syms, int n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    const uint64_t prime = 0x100000001b3ULL;
    h ^= (uint8_t)n; h *= prime;
    for (int i = 0; i < n; i++) {
        unsigned s = (unsigned)syms[i];
        h ^= (uint8_t)(s & 0xff); h *= prime;
        h ^= (uint8_t)(s >> 8); h *= prime;
    }
    return h;
}

void engram_rows(int32_t *rows, const int *x, int B, int T, const int *orders, int O, int64_t R) {
    for (int o = 0; o < O; o++) {
        int n = orders[o];
        int syms[16];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                for (int i = 0; i < n; i++) {
                    int p = t - n + 1 + i;
                    syms[i] = p < 0 ? 256 : x[(size_t)b * T + p];
                }
                rows[(size_t)o * B * T + (size_t)b * T + t] = (int32_t)(engram_hash(syms, n) % (uint64_t)R);
            }
    }
}

void engram_gather(real *m, const real *tables, const int32_t *rows, int N, int O, int64_t R, int D) {
    for (int t = 0; t < N; t++)
        for (int o = 0; o < O; o++)
            memcpy(m + (size_t)t * O * D + (size_t)o * D,
                   tables + ((size_t)o * R + rows[(size_t)o * N + t]) * D, sizeof(real) * D);
}

void engram_scatter(real *dtables, const real *dm, const int32_t *rows, int N, int O, int64_t R, int D) {
    for (int o = 0; o < O; o++)
        for (int t = 0; t < N; t++) {
            real *d = dtables + ((size_t)o * R + rows[(size_t)o * N + t]) * D;
            const real *g = dm + (size_t)t * O * D + (size_t)o * D;
            for (int c = 0; c < D; c++) d[c] += g[c];
        }
}
