// moe.c — dropless top-k mixture of TSCT experts on the CPU (contract: moe.h, SPEC §1).
//
// Plan: route every token (softmax + top-k), then sort the N*k assignments expert-major with a
// counting sort (tokens in increasing index inside each expert, so the order — and every sum —
// is a pure function of z). Each expert then runs its whole low-rank chain as a handful of
// gemms over its gathered rows:
//   a1 = X V1         [c, r]     (X: the expert's rows of n, gathered, [c, d])
//   h  = (a1*s1) U1^T [c, f]     pre-activation
//   a2 = silu(h) V2   [c, r]
//   y  = (a2*s2) U2^T [c, d]     out[t] += w * y
// The work is proportional to N*k, never N*E: no dense compute of all experts.
//
// Workspace (reals, in this order; A = N*k assignments; "persistent" = forward -> backward):
//   p    [N, E]   softmax of z                               persistent
//   w    [N, k]   routing weights                            persistent
//   a1   [A, r]   X V1 (before s1)                           persistent
//   a2   [A, r]   silu(h) V2 (before s2)                     persistent
//   h    [A, f]   silu'(h): forward computes h here and replaces it with the derivative
//   g    [A, f]   silu(h)                                    persistent
//   tf   [N, f]   scratch: dg / dh of one expert (an expert has at most N rows)
//   td   [N, d]   scratch: gathered X / y / gathered dout / dX of one expert
//   tr   [N, r]   scratch: a*s (the scaled rank-r vectors) of one expert
//   tr2  [N, r]   scratch: rank-r gradients of one expert
//   dw   [N, k]   scratch: d loss / d w
//   dp   [E]      scratch: d loss / d p of one token
//   then ints:  idx [N, k] chosen experts, asg [A] assignment ids (t*k + j) expert-major,
//               off [E + 1] expert offsets into asg, cur [E] sort cursors.
// The gathered inputs are not kept: backward re-gathers them from n (a copy of c*d reals, far
// cheaper than holding A*d of workspace). Forward keeps both silu(h) and silu'(h) (one exp per
// element, and none in backward: recomputing the sigmoid there was ~1.3 % of a nano step).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "blas.h"
#include "moe.h"
#include "ops.h"

#ifdef DM_DOUBLE
#define EXP_R exp
#else
#define EXP_R expf
#endif

// Offsets of the ws regions, in reals. One place so forward and backward agree.
typedef struct {
    size_t p, w, a1, a2, h, g, tf, td, tr, tr2, dw, dp, ints, total;
} MoEWsLayout;

static MoEWsLayout moe_layout(MoEShape s) {
    size_t N = (size_t)s.N, A = (size_t)s.N * s.k;
    MoEWsLayout L;
    size_t o = 0;
    L.p = o;   o += N * s.E;
    L.w = o;   o += N * s.k;
    L.a1 = o;  o += A * s.r;
    L.a2 = o;  o += A * s.r;
    L.h = o;   o += A * s.f;
    L.g = o;   o += A * s.f;
    L.tf = o;  o += N * s.f;
    L.td = o;  o += N * s.d;
    L.tr = o;  o += N * s.r;
    L.tr2 = o; o += N * s.r;
    L.dw = o;  o += N * s.k;
    L.dp = o;  o += (size_t)s.E;
    L.ints = o;
    size_t nint = N * s.k + A + 2 * (size_t)s.E + 1;  // idx, asg, off, cur
    o += (nint * sizeof(int) + sizeof(real) - 1) / sizeof(real);
    L.total = o;
    return L;
}

size_t moe_ws_size(MoEShape s) { return moe_layout(s).total; }

// Requires 1 <= k <= E (a token's k experts are distinct). given (may be NULL): [N, k] the
// experts to use instead of the own top-k, diff (may be NULL) counts where they differ.
static void route_tokens(int *idx, real *w, real *p, const real *z, int N, int E, int k, const int *given,
                         MoERouteDiff *diff) {
    for (int t = 0; t < N; t++) {
        const real *zt = z + (size_t)t * E;  // [E]
        real *pt = p + (size_t)t * E;        // [E]
        int *it = idx + (size_t)t * k;       // [k]
        real *wt = w + (size_t)t * k;        // [k]
        // softmax, max-subtracted so exp never overflows; the sum in double
        real zmax = zt[0];
        for (int e = 1; e < E; e++) zmax = zt[e] > zmax ? zt[e] : zmax;
        double sum = 0;
        for (int e = 0; e < E; e++) { pt[e] = EXP_R(zt[e] - zmax); sum += pt[e]; }
        real inv = (real)(1.0 / sum);
        for (int e = 0; e < E; e++) pt[e] *= inv;
        // top-k by repeated selection (k is tiny): the strict '>' keeps the lower index on ties,
        // and picks come out in descending p
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int l = 0; l < j; l++) taken |= it[l] == e;
                if (!taken && (best < 0 || pt[e] > pt[best])) best = e;
            }
            it[j] = best;
        }
        if (given) {
            const int *gt = given + (size_t)t * k;  // [k]
            const real pk = pt[it[k - 1]];          // the own k-th pick's p
            for (int j = 0; j < k; j++) {
                int own = 0;
                for (int l = 0; l < k; l++) own |= it[l] == gt[j];
                if (own || !diff) continue;
                diff->moved++;
                double g = pk > 0 ? ((double)pk - (double)pt[gt[j]]) / (double)pk : 0;
                if (g > diff->gap) diff->gap = g;
            }
            for (int j = 0; j < k; j++) it[j] = gt[j];
        }
        if (k == 1) {  // Switch: the bare p_e, so the router keeps a gradient from the task loss
            wt[0] = pt[it[0]];
        } else {
            real S = 0;
            for (int j = 0; j < k; j++) S += pt[it[j]];
            for (int j = 0; j < k; j++) wt[j] = pt[it[j]] / S;
        }
    }
}

void moe_route(int *idx, real *w, real *p, const real *z, int N, int E, int k) {
    route_tokens(idx, w, p, z, N, E, k, NULL, NULL);
}

int moe_route_valid(const int *route, int N, int E, int k) {
    for (int t = 0; t < N; t++) {
        const int *rt = route + (size_t)t * k;  // [k]
        for (int j = 0; j < k; j++) {
            if (rt[j] < 0 || rt[j] >= E) return 0;
            for (int l = 0; l < j; l++)
                if (rt[l] == rt[j]) return 0;
        }
    }
    return 1;
}

// Counting sort of the assignments by expert; walking them in (t, j) order keeps the tokens
// increasing inside each expert. cur [E] is the per-expert write cursor.
static void moe_sort(int *asg, int *off, int *cur, const int *idx, int N, int E, int k) {
    for (int e = 0; e <= E; e++) off[e] = 0;
    for (int a = 0; a < N * k; a++) off[idx[a] + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    for (int e = 0; e < E; e++) cur[e] = off[e];
    for (int a = 0; a < N * k; a++) asg[cur[idx[a]]++] = a;
}

// ---- silu, the one transcendental of the expert chain ----
// It runs on c*f elements per expert twice a step (forward, backward) and would cost more than
// all the gemms with a scalar libm expf, so it uses the shared branch-free exp of ops.h, which
// the compiler vectorises (libm's exp in the double build, for the gradient tests).
static inline real exp_neg(real x) { return dm_exp(-x); }

static inline real sigmoid_r(real x) { return (real)1 / ((real)1 + exp_neg(x)); }

// The loops below run in fixed blocks of VB over restrict pointers: a known trip count and no
// aliasing is what GCC's -O2 ("very cheap") vectoriser needs. The tail uses the same scalar
// formula; which elements are in the tail depends on the shape only, so results stay a pure
// function of the inputs.
enum { VB = 64 };

// On x86-64 GCC/Clang also build AVX2 copies of these loops, picked once at load time by the
// CPU (ifunc): twice the vector width without asking the whole build for -march=native. Both
// copies do the same IEEE operations in the same order (ISO C mode: no FMA contraction), so
// the choice does not change results.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(DM_DOUBLE) && !defined(__SANITIZE_ADDRESS__)
#define DM_VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DM_VEC_CLONES
#endif

// g = silu(h) and, in place of h, silu'(h) = sig + g (1 - sig): one exp per element serves both
DM_VEC_CLONES static void silu_fwd_deriv(real *restrict g, real *restrict h, size_t n) {
    size_t i = 0;
    for (; i + VB <= n; i += VB) {
        real *restrict gb = g + i;
        real *restrict hb = h + i;
        for (int j = 0; j < VB; j++) {
            real sg = sigmoid_r(hb[j]), gv = hb[j] * sg;
            gb[j] = gv;
            hb[j] = sg + gv * ((real)1 - sg);
        }
    }
    for (; i < n; i++) {
        real sg = sigmoid_r(h[i]), gv = h[i] * sg;
        g[i] = gv;
        h[i] = sg + gv * ((real)1 - sg);
    }
}

// a *= b elementwise
DM_VEC_CLONES static void mul_inplace(real *restrict a, const real *restrict b, size_t n) {
    size_t i = 0;
    for (; i + VB <= n; i += VB) {
        real *restrict ab = a + i;
        const real *restrict bb = b + i;
        for (int j = 0; j < VB; j++) ab[j] *= bb[j];
    }
    for (; i < n; i++) a[i] *= b[i];
}

void moe_route_read(int *idx, const real *ws, MoEShape s) {
    memcpy(idx, ws + moe_layout(s).ints, sizeof(int) * (size_t)s.N * s.k);
}

void moe_forward(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                 MoEParams p, MoEShape s) {
    moe_forward_routed(out, aux, load, ws, n, z, p, s, NULL, NULL);
}

void moe_forward_routed(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                        MoEParams p, MoEShape s, const int *route, MoERouteDiff *diff) {
    const int N = s.N, d = s.d, E = s.E, k = s.k, r = s.r, f = s.f;
    MoEWsLayout L = moe_layout(s);
    real *P = ws + L.p;                 // [N, E]
    real *W = ws + L.w;                 // [N, k]
    real *A1 = ws + L.a1;               // [A, r]
    real *A2 = ws + L.a2;               // [A, r]
    real *Hh = ws + L.h;                // [A, f]  h, then silu'(h)
    real *G = ws + L.g;                 // [A, f]  silu(h)
    real *td = ws + L.td;               // [N, d]
    real *tr = ws + L.tr;               // [N, r]
    int *idx = (int *)(ws + L.ints);    // [N, k]
    int *asg = idx + (size_t)N * k;     // [A]
    int *off = asg + (size_t)N * k;     // [E + 1]
    int *cur = off + E + 1;             // [E]

    route_tokens(idx, W, P, z, N, E, k, route, diff);
    moe_sort(asg, off, cur, idx, N, E, k);
    memset(out, 0, sizeof(real) * (size_t)N * d);

    // aux = E * sum_e f_e P_e; f_e from the counts, P_e the mean router probability (double sums)
    double auxv = 0;
    for (int e = 0; e < E; e++) {
        double Pe = 0;
        for (int t = 0; t < N; t++) Pe += P[(size_t)t * E + e];
        int cnt = off[e + 1] - off[e];
        if (load) load[e] = cnt;
        auxv += ((double)cnt / ((double)N * k)) * (Pe / N);
    }
    if (aux) aux[0] = (real)(E * auxv);

    for (int e = 0; e < E; e++) {
        const int o = off[e], c = off[e + 1] - off[e];
        if (c == 0) continue;
        const real *U1 = p.U1 + (size_t)e * f * r;  // [f, r]
        const real *s1 = p.s1 + (size_t)e * r;      // [r]
        const real *V1 = p.V1 + (size_t)e * d * r;  // [d, r]
        const real *U2 = p.U2 + (size_t)e * d * r;  // [d, r]
        const real *s2 = p.s2 + (size_t)e * r;      // [r]
        const real *V2 = p.V2 + (size_t)e * f * r;  // [f, r]
        real *Xe = td;                              // [c, d] gathered rows of n
        real *a1 = A1 + (size_t)o * r;              // [c, r]
        real *a2 = A2 + (size_t)o * r;              // [c, r]
        real *he = Hh + (size_t)o * f;              // [c, f]
        real *ge = G + (size_t)o * f;               // [c, f]

        for (int i = 0; i < c; i++)
            memcpy(Xe + (size_t)i * d, n + (size_t)(asg[o + i] / k) * d, sizeof(real) * d);
        gemm_lp(0, 0, c, r, d, 1, Xe, d, V1, r, 0, a1, r);                 // a1 = X V1
        for (int i = 0; i < c; i++)
            for (int q = 0; q < r; q++) tr[(size_t)i * r + q] = a1[(size_t)i * r + q] * s1[q];
        gemm_lp(0, 1, c, f, r, 1, tr, r, U1, r, 0, he, f);                 // h = b1 U1^T
        silu_fwd_deriv(ge, he, (size_t)c * f);                  // g = silu(h), h <- silu'(h)
        gemm_lp(0, 0, c, r, f, 1, ge, f, V2, r, 0, a2, r);                 // a2 = g V2
        for (int i = 0; i < c; i++)
            for (int q = 0; q < r; q++) tr[(size_t)i * r + q] = a2[(size_t)i * r + q] * s2[q];
        gemm_lp(0, 1, c, d, r, 1, tr, r, U2, r, 0, td, d);                 // y = b2 U2^T
        // scatter: experts run in index order, so each token's sum has a fixed order
        for (int i = 0; i < c; i++) {
            int a = asg[o + i];
            real wa = W[a];
            real *ot = out + (size_t)(a / k) * d;  // [d]
            const real *y = td + (size_t)i * d;    // [d]
            for (int q = 0; q < d; q++) ot[q] += wa * y[q];
        }
    }
}

void moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                  const real *n, const real *z, MoEParams p, MoEShape s) {
    (void)z;  // the routing was saved by forward
    const int N = s.N, d = s.d, E = s.E, k = s.k, r = s.r, f = s.f;
    MoEWsLayout L = moe_layout(s);
    const real *P = ws + L.p;           // [N, E]
    const real *W = ws + L.w;           // [N, k]
    const real *A1 = ws + L.a1;         // [A, r]
    const real *A2 = ws + L.a2;         // [A, r]
    const real *Hh = ws + L.h;          // [A, f]  silu'(h)
    const real *G = ws + L.g;           // [A, f]  silu(h)
    real *tf = ws + L.tf;               // [N, f]
    real *td = ws + L.td;               // [N, d]
    real *tr = ws + L.tr;               // [N, r]
    real *tr2 = ws + L.tr2;             // [N, r]
    real *dW = ws + L.dw;               // [N, k]
    real *dp = ws + L.dp;               // [E]
    const int *idx = (const int *)(ws + L.ints);  // [N, k]
    const int *asg = idx + (size_t)N * k;         // [A]
    const int *off = asg + (size_t)N * k;         // [E + 1]

    for (int e = 0; e < E; e++) {
        const int o = off[e], c = off[e + 1] - off[e];
        if (c == 0) continue;
        const real *U1 = p.U1 + (size_t)e * f * r;  // [f, r]
        const real *s1 = p.s1 + (size_t)e * r;      // [r]
        const real *V1 = p.V1 + (size_t)e * d * r;  // [d, r]
        const real *U2 = p.U2 + (size_t)e * d * r;  // [d, r]
        const real *s2 = p.s2 + (size_t)e * r;      // [r]
        const real *V2 = p.V2 + (size_t)e * f * r;  // [f, r]
        real *gU1 = g.U1 + (size_t)e * f * r;       // [f, r]
        real *gs1 = g.s1 + (size_t)e * r;           // [r]
        real *gV1 = g.V1 + (size_t)e * d * r;       // [d, r]
        real *gU2 = g.U2 + (size_t)e * d * r;       // [d, r]
        real *gs2 = g.s2 + (size_t)e * r;           // [r]
        real *gV2 = g.V2 + (size_t)e * f * r;       // [f, r]
        const real *a1 = A1 + (size_t)o * r;        // [c, r]
        const real *a2 = A2 + (size_t)o * r;        // [c, r]
        const real *he = Hh + (size_t)o * f;        // [c, f]
        const real *ge = G + (size_t)o * f;         // [c, f]

        // G = gathered dout rows [c, d] (in td); b2 = a2*s2 (in tr)
        for (int i = 0; i < c; i++)
            memcpy(td + (size_t)i * d, dout + (size_t)(asg[o + i] / k) * d, sizeof(real) * d);
        for (int i = 0; i < c; i++)
            for (int q = 0; q < r; q++) tr[(size_t)i * r + q] = a2[(size_t)i * r + q] * s2[q];
        // D = G U2 [c, r]: both d loss/d w (= D . b2, since y = U2 b2) and, times w, d b2
        gemm_lp(0, 0, c, r, d, 1, td, d, U2, r, 0, tr2, r);
        for (int i = 0; i < c; i++) {
            int a = asg[o + i];
            const real *Di = tr2 + (size_t)i * r, *bi = tr + (size_t)i * r;
            real acc = 0;
            for (int q = 0; q < r; q++) acc += Di[q] * bi[q];
            dW[a] = acc;
            // dy = w * dout: scale the gathered rows now (for dU2) and D (for db2)
            real wa = W[a];
            real *Gi = td + (size_t)i * d;
            for (int q = 0; q < d; q++) Gi[q] *= wa;
            real *Dm = tr2 + (size_t)i * r;
            for (int q = 0; q < r; q++) Dm[q] *= wa;
        }
        gemm_lp(1, 0, d, r, c, 1, td, d, tr, r, 1, gU2, r);               // dU2 += dy^T b2
        // db2 (tr2) -> ds2 += sum db2*a2, da2 = db2*s2 (in place)
        for (int i = 0; i < c; i++)
            for (int q = 0; q < r; q++) {
                real v = tr2[(size_t)i * r + q];
                gs2[q] += v * a2[(size_t)i * r + q];
                tr2[(size_t)i * r + q] = v * s2[q];
            }
        gemm_lp(1, 0, f, r, c, 1, ge, f, tr2, r, 1, gV2, r);              // dV2 += g^T da2
        gemm_lp(0, 1, c, f, r, 1, tr2, r, V2, r, 0, tf, f);               // dg = da2 V2^T
        mul_inplace(tf, he, (size_t)c * f);                                 // dh = dg silu'(h)
        for (int i = 0; i < c; i++)
            for (int q = 0; q < r; q++) tr[(size_t)i * r + q] = a1[(size_t)i * r + q] * s1[q];
        gemm_lp(1, 0, f, r, c, 1, tf, f, tr, r, 1, gU1, r);               // dU1 += dh^T b1
        gemm_lp(0, 0, c, r, f, 1, tf, f, U1, r, 0, tr2, r);               // db1 = dh U1
        for (int i = 0; i < c; i++)
            for (int q = 0; q < r; q++) {
                real v = tr2[(size_t)i * r + q];
                gs1[q] += v * a1[(size_t)i * r + q];
                tr2[(size_t)i * r + q] = v * s1[q];
            }
        for (int i = 0; i < c; i++)  // re-gather X (td is free again)
            memcpy(td + (size_t)i * d, n + (size_t)(asg[o + i] / k) * d, sizeof(real) * d);
        gemm_lp(1, 0, d, r, c, 1, td, d, tr2, r, 1, gV1, r);              // dV1 += X^T da1
        gemm_lp(0, 1, c, d, r, 1, tr2, r, V1, r, 0, td, d);               // dX = da1 V1^T
        // scatter-add into dn: experts in index order, so a token's sum order is fixed
        for (int i = 0; i < c; i++) {
            real *dnt = dn + (size_t)(asg[o + i] / k) * d;  // [d]
            const real *dx = td + (size_t)i * d;            // [d]
            for (int q = 0; q < d; q++) dnt[q] += dx[q];
        }
    }

    // Router. d aux / d p[t,e] = E f_e / N (f_e held constant: counts have no gradient).
    // Weights: k == 1, w = p_i -> dp_i += dw; k >= 2, w_j = p_ij / S ->
    // dp_ij += (dw_j - sum_l dw_l w_l) / S. Then through the softmax:
    // dz = p * (dp - sum_e p_e dp_e).
    for (int t = 0; t < N; t++) {
        const real *pt = P + (size_t)t * E;     // [E]
        const real *wt = W + (size_t)t * k;     // [k]
        const real *dwt = dW + (size_t)t * k;   // [k]
        const int *it = idx + (size_t)t * k;    // [k]
        for (int e = 0; e < E; e++) {
            int cnt = off[e + 1] - off[e];
            dp[e] = daux * (real)((double)E * cnt / ((double)N * k) / N);
        }
        if (k == 1) {
            dp[it[0]] += dwt[0];
        } else {
            real S = 0, dot = 0;
            for (int j = 0; j < k; j++) { S += pt[it[j]]; dot += dwt[j] * wt[j]; }
            for (int j = 0; j < k; j++) dp[it[j]] += (dwt[j] - dot) / S;
        }
        real pdp = 0;
        for (int e = 0; e < E; e++) pdp += pt[e] * dp[e];
        real *dzt = dz + (size_t)t * E;  // [E]
        for (int e = 0; e < E; e++) dzt[e] += pt[e] * (dp[e] - pdp);
    }
}
