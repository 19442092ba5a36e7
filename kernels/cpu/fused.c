// fused.c — the fused element-wise ops of the looped block on the CPU. See fused.h for the
// contracts. These are the loops engine/forward.c and engine/backward.c used to run on host
// pointers, moved here verbatim (same fusion, same operation order: bit-identical results).
#include "fused.h"
#include <math.h>
#include <string.h>
#include "ops.h"

// ---- forward ----

void add_row_forward(real *out, const real *inp, const real *row, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++) {
        real *restrict o = out + n * C;
        const real *restrict x = inp + n * C, *restrict r = row;
        for (int c = 0; c < C; c++) o[c] = x[c] + r[c];
    }
}

void silu_rows_forward(real *out, real *sg, const real *inp, int ldx, int N, int C) {
    for (int n = 0; n < N; n++) {
        real *restrict o = out + (size_t)n * C, *restrict sr = sg + (size_t)n * C;
        const real *restrict x = inp + (size_t)n * ldx;
        for (int c = 0; c < C; c++) {
            real s = dm_sigmoid(x[c]);
            sr[c] = s;
            o[c] = x[c] * s;
        }
    }
}

void sigmoid_split_forward(real *sg, real *cp, const real *inp, int ldx, const real *bias, int N,
                           int Cs, int Cc) {
    for (size_t n = 0; n < (size_t)N; n++) {
        const real *x = inp + n * ldx;
        if (bias)
            for (int j = 0; j < Cs; j++) sg[n * Cs + j] = dm_sigmoid(x[j] + bias[j]);
        else
            for (int j = 0; j < Cs; j++) sg[n * Cs + j] = dm_sigmoid(x[j]);
        for (int j = 0; j < Cc; j++) cp[n * Cc + j] = x[Cs + j];
    }
}

void decay_gate_forward(real *gs, real *g, const real *z, const real *A, const real *bias, real gmin,
                        int N, int H, int dh) {
    size_t d = (size_t)H * dh;
    real ea[H > 0 ? H : 1];
    for (int h = 0; h < H; h++) ea[h] = (real)exp(A[h]);
    for (size_t n = 0; n < (size_t)N; n++)
        for (int h = 0; h < H; h++) {
            real eh = ea[h];
            size_t j0 = n * d + (size_t)h * dh;
            const real *restrict zr = z + j0, *restrict b = bias + (size_t)h * dh;
            real *restrict gsr = gs + j0, *restrict gr = g + j0;
            for (int x = 0; x < dh; x++) {
                real s = dm_sigmoid(eh * (zr[x] + b[x]));
                gsr[x] = s;
                gr[x] = gmin * s;
            }
        }
}

void gate_mul_forward(real *gt, real *og, const real *on, const real *bias, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++) {
        real *restrict g = gt + n * C, *restrict o = og + n * C;
        const real *restrict x = on + n * C;
        for (int c = 0; c < C; c++) {
            real s = dm_sigmoid(g[c] + bias[c]);
            g[c] = s;
            o[c] = x[c] * s;
        }
    }
}

void mem_gate_forward(real *gate, real *e, const real *nn, const real *kn, const real *val,
                      real scale, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++) {
        double dot = dm_dot_d(nn + n * C, kn + n * C, C);
        real gte = (real)(1.0 / (1.0 + exp(-dot * scale)));
        gate[n] = gte;
        real *restrict er = e + n * C;
        const real *restrict vr = val + n * C;
        for (int c = 0; c < C; c++) er[c] = gte * vr[c];
    }
}

void mix_forward(real *body, real *h, const real *hprev, const real *w, const real *a, const real *e,
                 const real *gout, real cap, const real *alpha, int N, int C) {
    real al = alpha ? alpha[0] : 1;
    for (size_t n = 0; n < (size_t)N; n++) {
        real *restrict b = body + n * C, *restrict hr = h + n * C;
        const real *restrict hp = hprev + n * C;
        const real *ct = w + n * 3;
        real wm = ct[1] < cap ? ct[1] : cap;
        for (int c = 0; c < C; c++) b[c] = 0;
        if (a) {
            const real *restrict ar = a + n * C;
            for (int c = 0; c < C; c++) b[c] += ct[0] * ar[c];
        }
        if (e) {
            const real *restrict er = e + n * C;
            for (int c = 0; c < C; c++) b[c] += wm * er[c];
        }
        if (gout) {
            const real *restrict gr = gout + n * C;
            for (int c = 0; c < C; c++) b[c] += ct[2] * gr[c];
        }
        for (int c = 0; c < C; c++) hr[c] = hp[c] + al * b[c];
    }
}

void running_mean_forward(real *out, const real *prev, const real *y, int i, size_t n) {
    if (i == 0 || !prev) {
        memcpy(out, y, sizeof(real) * n);
        return;
    }
    real wp = (real)i / (i + 1), wy = (real)1 / (i + 1);
    real *restrict o = out;
    const real *restrict p = prev, *restrict yy = y;
    for (size_t j = 0; j < n; j++) o[j] = wp * p[j] + wy * yy[j];
}

void sum_forward(double *out, const real *x, size_t n) {
    double s = 0;
    for (size_t j = 0; j < n; j++) s += x[j];
    out[0] = s;
}

// ---- backward ----

void ce_logits_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V) {
    size_t NV = (size_t)N * V;
    real *restrict d = dlogits;
    const real *restrict p = probs;
    for (size_t j = 0; j < NV; j++) d[j] = scale * p[j];
    for (int n = 0; n < N; n++) d[(size_t)n * V + targets[n]] -= scale;
}

void running_mean_backward(real *dy, real *dbar, int i, size_t n) {
    real wy = (real)1 / (i + 1), wp = (real)i / (i + 1);
    real *restrict o = dy, *restrict b = dbar;
    for (size_t j = 0; j < n; j++) { o[j] = b[j] * wy; b[j] *= wp; }
}

void rezero_backward(real *dbody, real *dalpha, const real *dh, const real *body, const real *alpha,
                     size_t n) {
    // one pass: the dot in dm_dot_d's exact order (8 partial sums, pairwise) beside the scaling
    real al = alpha ? alpha[0] : 1;
    real *restrict db = dbody;
    const real *restrict g = dh, *restrict x = body;
    if (!dalpha) {
        for (size_t j = 0; j < n; j++) db[j] = al * g[j];
        return;
    }
    double s[8] = {0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) {
            s[u] += (double)g[j + u] * x[j + u];
            db[j + u] = al * g[j + u];
        }
    for (; j < n; j++) {
        s[0] += (double)g[j] * x[j];
        db[j] = al * g[j];
    }
    dalpha[0] += (real)(((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])));
}

void mix_arm_backward(real *darm, real *dw, const real *dbody, const real *arm, const real *w, int j,
                      int use_cap, real cap, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++) {
        real wn = w[n * 3 + j];
        int capped = use_cap && !(wn < cap);
        real wc = capped ? cap : wn;
        const real *restrict db = dbody + n * C;
        real *restrict da = darm + n * C;
        dw[n * 3 + j] = capped ? 0 : (real)dm_dot_d(db, arm + n * C, C);
        for (int c = 0; c < C; c++) da[c] = wc * db[c];
    }
}

void gate_mul_backward(real *don, real *dpre, const real *dog, const real *gt, const real *on, size_t n) {
    real *restrict dn = don, *restrict dp = dpre;
    const real *restrict dg = dog, *restrict g = gt, *restrict o = on;
    for (size_t i = 0; i < n; i++) {
        real s = g[i], d = dg[i];
        dn[i] = d * s;
        dp[i] = d * o[i] * s * (1 - s);
    }
}

void decay_gate_backward(real *dz, real *dA, real *dbias, const real *dg, const real *gs, const real *z,
                         const real *A, const real *bias, real gmin, int N, int H, int dh) {
    int d = H * dh;
    real ea[H > 0 ? H : 1];
    for (int h = 0; h < H; h++) ea[h] = (real)exp(A[h]);
    double sA[d > 0 ? d : 1], sb[d > 0 ? d : 1];
    for (int ch = 0; ch < d; ch++) sA[ch] = sb[ch] = 0;
    for (size_t n = 0; n < (size_t)N; n++)
        for (int h = 0; h < H; h++) {
            real eh = ea[h];
            size_t j0 = n * d + (size_t)h * dh;
            const real *restrict gsr = gs + j0, *restrict dgr = dg + j0, *restrict zr = z + j0;
            const real *restrict b = bias + (size_t)h * dh;
            real *restrict dzr = dz + j0;
            double *restrict sa = sA + (size_t)h * dh, *restrict sbb = sb + (size_t)h * dh;
            for (int x = 0; x < dh; x++) {
                real dpre = dgr[x] * gmin * gsr[x] * (1 - gsr[x]);
                real v = dpre * eh;
                dzr[x] = v;
                sbb[x] += v;
                sa[x] += v * (zr[x] + b[x]);
            }
        }
    for (int ch = 0; ch < d; ch++) {
        dbias[ch] += (real)sb[ch];
        dA[ch / dh] += (real)sA[ch];
    }
}

void sigmoid_rows_backward(real *dx, int ldd, const real *dy, const real *y, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++)
        for (int c = 0; c < C; c++) {
            real s = y[n * C + c];
            dx[n * ldd + c] = dy[n * C + c] * s * (1 - s);
        }
}

void silu_rows_backward(real *dx, int ldd, const real *dy, const real *x, int ldx, const real *sg,
                        int N, int C) {
    for (int n = 0; n < N; n++) {
        real *restrict o = dx + (size_t)n * ldd;
        const real *restrict g = dy + (size_t)n * C, *restrict xr = x + (size_t)n * ldx;
        const real *restrict sr = sg + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            real s = sr[c];
            o[c] = g[c] * s * (1 + xr[c] * (1 - s));
        }
    }
}

void l2norm_silu_backward(real *dx, int ldd, const real *dy, const real *y, const real *rn, real scale,
                          const real *x, int ldx, const real *sg, int N, int H, int dh) {
    int d = H * dh;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t j = (size_t)n * d + (size_t)h * dh;
            const real *restrict g = dy + j, *restrict yr = y + j, *restrict sr = sg + j;
            const real *restrict xr = x + (size_t)n * ldx + (size_t)h * dh;
            real *restrict o = dx + (size_t)n * ldd + (size_t)h * dh;
            real r = rn[(size_t)n * H + h];
            real k = (real)(dm_dot_d(g, yr, dh) / scale);
            for (int c = 0; c < dh; c++) {
                real du = r * (scale * g[c] - yr[c] * k), s = sr[c];
                o[c] = du * s * (1 + xr[c] * (1 - s));
            }
        }
}

void mem_gate_backward(real *dnn, real *dkn, real *dval, const real *de, const real *gate, const real *nn,
                       const real *kn, const real *val, real scale, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++) {
        const real *restrict der = de + n * C, *restrict vr = val + n * C;
        const real *restrict knr = kn + n * C, *restrict nnr = nn + n * C;
        real *restrict dvr = dval + n * C, *restrict dnr = dnn + n * C, *restrict dkr = dkn + n * C;
        real g = gate[n];
        double dgate = 0;
        for (int c = 0; c < C; c++) {
            dgate += (double)der[c] * vr[c];
            dvr[c] += g * der[c];
        }
        real dp = (real)dgate * g * (1 - g) * scale;
        for (int c = 0; c < C; c++) {
            dnr[c] = dp * knr[c];
            dkr[c] += dp * nnr[c];
        }
    }
}

void bias_backward(real *dbias, const real *dout, int ld, int N, int C) {
    double acc[C > 0 ? C : 1];
    for (int c = 0; c < C; c++) acc[c] = 0;
    for (int n = 0; n < N; n++) {
        const real *r = dout + (size_t)n * ld;
        for (int c = 0; c < C; c++) acc[c] += r[c];
    }
    for (int c = 0; c < C; c++) dbias[c] += (real)acc[c];
}

void copy_rows(real *dst, int ldd, const real *src, int lds, int N, int C) {
    for (size_t n = 0; n < (size_t)N; n++) memcpy(dst + n * ldd, src + n * lds, sizeof(real) * C);
}

void add_inplace(real *dst, const real *src, size_t n) {
    real *restrict d = dst;
    const real *restrict s = src;
    for (size_t j = 0; j < n; j++) d[j] += s[j];
}
