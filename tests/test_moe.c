// test_moe.c — the dropless top-k TSCT mixture (kernels/cpu/moe.h).
// Float build: routing, forward against a dense per-token reference, determinism.
// Double build (-DDM_DOUBLE): the same, plus a central finite-difference check of every
// gradient moe_backward produces (dn, dz, and the six parameter groups), for k = 1 and k = 2.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../kernels/cpu/moe.h"

// the larger of two errors, a NaN counting as infinite (fmax and `e > worst` both skip a NaN);
// testutil.h has the same helper, but this file keeps its own Rng
static double err_max(double a, double b) { return isnan(a) || isnan(b) ? INFINITY : (a > b ? a : b); }

// ---- deterministic random numbers (splitmix64 + Box–Muller) ----
typedef struct { uint64_t s; } Rng;
static uint64_t rng_u64(Rng *g) {
    uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(Rng *g) { return ((rng_u64(g) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double rng_gauss(Rng *g) {
    double u = rng_unif(g), v = rng_unif(g);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static void fill_gauss(real *x, size_t n, double scale, Rng *g) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(scale * rng_gauss(g));
}

// ---- a model instance: parameters, inputs, workspace ----
typedef struct {
    MoEShape s;
    real *U1, *s1, *V1, *U2, *s2, *V2;  // [E,f,r] [E,r] [E,d,r] [E,d,r] [E,r] [E,f,r]
    real *n;                            // [N, d]
    real *z;                            // [N, E]
    real *ws;                           // [moe_ws_size]
} Inst;

static MoEParams inst_params(const Inst *m) {
    MoEParams p = {m->U1, m->s1, m->V1, m->U2, m->s2, m->V2};
    return p;
}

static Inst inst_new(MoEShape s, uint64_t seed) {
    Rng g = {seed};
    Inst m;
    m.s = s;
    size_t E = s.E;
    m.U1 = malloc(sizeof(real) * E * s.f * s.r);
    m.s1 = malloc(sizeof(real) * E * s.r);
    m.V1 = malloc(sizeof(real) * E * s.d * s.r);
    m.U2 = malloc(sizeof(real) * E * s.d * s.r);
    m.s2 = malloc(sizeof(real) * E * s.r);
    m.V2 = malloc(sizeof(real) * E * s.f * s.r);
    m.n = malloc(sizeof(real) * s.N * s.d);
    m.z = malloc(sizeof(real) * s.N * s.E);
    m.ws = malloc(sizeof(real) * moe_ws_size(s));
    // factor entries ~ 1/sqrt(rows) (like an orthonormal frame), s ~ 1 +- 0.5: pre-activations
    // of order 1, so silu is exercised in its curved region
    fill_gauss(m.U1, E * s.f * s.r, 1 / sqrt(s.f), &g);
    fill_gauss(m.V1, E * s.d * s.r, 1 / sqrt(s.d), &g);
    fill_gauss(m.U2, E * s.d * s.r, 1 / sqrt(s.d), &g);
    fill_gauss(m.V2, E * s.f * s.r, 1 / sqrt(s.f), &g);
    for (size_t i = 0; i < E * s.r; i++) m.s1[i] = (real)(0.5 + rng_unif(&g)) * (real)sqrt(s.d);
    for (size_t i = 0; i < E * s.r; i++) m.s2[i] = (real)(0.5 + rng_unif(&g));
    fill_gauss(m.n, (size_t)s.N * s.d, 1.0, &g);
    fill_gauss(m.z, (size_t)s.N * s.E, 1.0, &g);
    return m;
}

static void inst_free(Inst *m) {
    free(m->U1); free(m->s1); free(m->V1); free(m->U2); free(m->s2); free(m->V2);
    free(m->n); free(m->z); free(m->ws);
}

#ifdef DM_DOUBLE
// z with every pair of experts at least `gap` apart in each token: a finite-difference step on
// z (or anything else) can then never change a top-k choice.
static void fill_z_gapped(real *z, int N, int E, double gap, Rng *g) {
    int perm[64];
    for (int t = 0; t < N; t++) {
        for (int e = 0; e < E; e++) perm[e] = e;
        for (int e = E - 1; e > 0; e--) {  // Fisher–Yates
            int j = (int)(rng_u64(g) % (uint64_t)(e + 1));
            int tmp = perm[e]; perm[e] = perm[j]; perm[j] = tmp;
        }
        double base = rng_gauss(g);
        for (int j = 0; j < E; j++)
            z[(size_t)t * E + perm[j]] = (real)(base + j * gap + 0.5 * gap * rng_unif(g));
    }
}
#endif

// ---- dense reference: explicit W1 = U1 diag(s1) V1^T [f, d], W2 = U2 diag(s2) V2^T [d, f],
// per-token routing from scratch, everything in double; given (may be NULL): [N, k] the experts
// each token uses instead of its own top-k, weighted by their own p (moe_forward_routed) ----
static void dense_reference(double *out, double *aux, int *load, const Inst *m, const int *given) {
    const MoEShape s = m->s;
    const int N = s.N, d = s.d, E = s.E, k = s.k, r = s.r, f = s.f;
    double *W1 = malloc(sizeof(double) * E * f * d);  // [E, f, d]
    double *W2 = malloc(sizeof(double) * E * d * f);  // [E, d, f]
    for (int e = 0; e < E; e++) {
        for (int i = 0; i < f; i++)
            for (int j = 0; j < d; j++) {
                double acc = 0;
                for (int q = 0; q < r; q++)
                    acc += (double)m->U1[((size_t)e * f + i) * r + q] * m->s1[e * r + q] *
                           m->V1[((size_t)e * d + j) * r + q];
                W1[((size_t)e * f + i) * d + j] = acc;
            }
        for (int i = 0; i < d; i++)
            for (int j = 0; j < f; j++) {
                double acc = 0;
                for (int q = 0; q < r; q++)
                    acc += (double)m->U2[((size_t)e * d + i) * r + q] * m->s2[e * r + q] *
                           m->V2[((size_t)e * f + j) * r + q];
                W2[((size_t)e * d + i) * f + j] = acc;
            }
    }
    double *P = calloc(E, sizeof(double));  // [E] sum over tokens of p
    double *hid = malloc(sizeof(double) * f);
    for (int e = 0; e < E; e++) load[e] = 0;
    for (int t = 0; t < N; t++) {
        double p[64], zmax = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) zmax = fmax(zmax, (double)m->z[t * E + e]);
        for (int e = 0; e < E; e++) { p[e] = exp(m->z[t * E + e] - zmax); sum += p[e]; }
        for (int e = 0; e < E; e++) { p[e] /= sum; P[e] += p[e]; }
        int chosen[64] = {0}, pick[64];
        double S = 0;
        for (int j = 0; j < k; j++) {  // by z: same order as p, exact ties stay ties
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!chosen[e] && (best < 0 || m->z[t * E + e] > m->z[t * E + best])) best = e;
            if (given) best = given[(size_t)t * k + j];
            chosen[best] = 1; pick[j] = best; S += p[best];
            load[best]++;
        }
        for (int q = 0; q < d; q++) out[(size_t)t * d + q] = 0;
        for (int j = 0; j < k; j++) {
            int e = pick[j];
            double w = k == 1 ? p[e] : p[e] / S;
            for (int i = 0; i < f; i++) {
                double a = 0;
                for (int q = 0; q < d; q++) a += W1[((size_t)e * f + i) * d + q] * m->n[(size_t)t * d + q];
                hid[i] = a / (1 + exp(-a));
            }
            for (int i = 0; i < d; i++) {
                double a = 0;
                for (int q = 0; q < f; q++) a += W2[((size_t)e * d + i) * f + q] * hid[q];
                out[(size_t)t * d + i] += w * a;
            }
        }
    }
    double a = 0;
    for (int e = 0; e < E; e++) a += ((double)load[e] / ((double)N * k)) * (P[e] / N);
    *aux = E * a;
    free(W1); free(W2); free(P); free(hid);
}

#ifdef DM_DOUBLE
static const double FWD_TOL = 1e-12;
#else
static const double FWD_TOL = 1e-5;
#endif

// out vs the dense reference: max |diff| relative to max |ref| (out is O(1) by construction)
static void check_forward(Inst *m, int expect_all_to_0) {
    const MoEShape s = m->s;
    real *out = malloc(sizeof(real) * s.N * s.d);
    double *ref = malloc(sizeof(double) * s.N * s.d);
    int load[64], load_ref[64];
    real aux;
    double aux_ref;
    moe_forward(out, &aux, load, m->ws, m->n, m->z, inst_params(m), s);
    dense_reference(ref, &aux_ref, load_ref, m, NULL);
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < (size_t)s.N * s.d; i++) {
        maxd = err_max(maxd, fabs(out[i] - ref[i]));
        maxr = fmax(maxr, fabs(ref[i]));
    }
    print_message("  forward N=%d E=%d k=%d: max rel diff %.3e, aux %.6f vs %.6f\n", s.N, s.E,
                  s.k, maxd / maxr, (double)aux, aux_ref);
    assert_true(maxr > 0.1);
    assert_true(maxd / maxr < FWD_TOL);
    assert_true(fabs(aux - aux_ref) < FWD_TOL * fmax(1, fabs(aux_ref)));
    int total = 0;
    for (int e = 0; e < s.E; e++) {
        assert_int_equal(load[e], load_ref[e]);
        total += load[e];
    }
    assert_int_equal(total, s.N * s.k);  // dropless: every assignment is served
    if (expect_all_to_0) assert_int_equal(load[0], s.N);
    free(out); free(ref);
}

// ---- routing ----
static void check_route(const real *z, int N, int E, int k) {
    int *idx = malloc(sizeof(int) * N * k);
    real *w = malloc(sizeof(real) * N * k);
    real *p = malloc(sizeof(real) * N * E);
    moe_route(idx, w, p, z, N, E, k);
    for (int t = 0; t < N; t++) {
        const int *it = idx + t * k;
        const real *pt = p + t * E, *wt = w + t * k;
        double psum = 0;
        for (int e = 0; e < E; e++) psum += pt[e];
        assert_true(fabs(psum - 1) < 1e-6);
        int chosen[64] = {0};
        for (int j = 0; j < k; j++) {
            assert_true(it[j] >= 0 && it[j] < E);
            assert_false(chosen[it[j]]);  // k distinct experts
            chosen[it[j]] = 1;
            if (j > 0) {  // descending p, ties to the lower index
                assert_true(pt[it[j - 1]] >= pt[it[j]]);
                if (pt[it[j - 1]] == pt[it[j]]) assert_true(it[j - 1] < it[j]);
            }
        }
        // nobody left out beats (or ties from a lower index) the last chosen
        int last = it[k - 1];
        for (int e = 0; e < E; e++)
            if (!chosen[e]) {
                assert_true(pt[e] <= pt[last]);
                if (pt[e] == pt[last]) assert_true(e > last);
            }
        if (k == 1) {
            assert_true(wt[0] == pt[it[0]]);  // Switch: the bare p, not renormalised
        } else {
            double ws = 0, S = 0;
            for (int j = 0; j < k; j++) { ws += wt[j]; S += pt[it[j]]; }
            assert_true(fabs(ws - 1) < 1e-6);
            for (int j = 0; j < k; j++) assert_true(fabs(wt[j] - pt[it[j]] / S) < 1e-6);
        }
    }
    free(idx); free(w); free(p);
}

static void test_route_random(void **state) {
    (void)state;
    Rng g = {11};
    int N = 200, E = 6;
    real *z = malloc(sizeof(real) * N * E);
    fill_gauss(z, (size_t)N * E, 2.0, &g);
    // sprinkle exact ties into some tokens
    for (int t = 0; t < N; t += 7) z[t * E + 3] = z[t * E + 1];
    for (int k = 1; k <= 3; k++) check_route(z, N, E, k);
    free(z);
}

static void test_route_ties(void **state) {
    (void)state;
    int idx[4];
    real w[4], p[8];
    const real flat[4] = {0.5, 0.5, 0.5, 0.5};
    moe_route(idx, w, p, flat, 1, 4, 1);
    assert_int_equal(idx[0], 0);
    assert_true(fabs(w[0] - 0.25) < 1e-6);
    moe_route(idx, w, p, flat, 1, 4, 3);
    assert_int_equal(idx[0], 0); assert_int_equal(idx[1], 1); assert_int_equal(idx[2], 2);
    for (int j = 0; j < 3; j++) assert_true(fabs(w[j] - 1.0 / 3) < 1e-6);
    const real twin[4] = {1, 3, 3, 0};
    moe_route(idx, w, p, twin, 1, 4, 1);
    assert_int_equal(idx[0], 1);
    moe_route(idx, w, p, twin, 1, 4, 2);
    assert_int_equal(idx[0], 1); assert_int_equal(idx[1], 2);
    assert_true(fabs(w[0] - 0.5) < 1e-6 && fabs(w[1] - 0.5) < 1e-6);
    const real edge[4] = {-1, 2, -1, -1};  // tie at the k boundary: the lowest index wins
    moe_route(idx, w, p, edge, 1, 4, 2);
    assert_int_equal(idx[0], 1); assert_int_equal(idx[1], 0);
    // two tokens at once, second all tied: per-token independence
    const real two[8] = {0, 0, 0, 9, 7, 7, 7, 7};
    moe_route(idx, w, p, two, 2, 4, 2);
    assert_int_equal(idx[0], 3); assert_int_equal(idx[1], 0);
    assert_int_equal(idx[2], 0); assert_int_equal(idx[3], 1);
}

// Router logits spread far apart (a diverging run): the softmax is shifted by the token's max,
// so p and w stay finite and the pick is the max. Shifted by the min instead, exp overflows past
// a spread of ~88 (float) or ~709 (double) and the routing is NaN (a mutation pass, session 39).
static void test_route_spread(void **state) {
    (void)state;
    const struct { int E, k, top; real z[4]; } cs[] = {
        {4, 2, 0, {60, -40, 0, 1}}, {2, 1, 1, {-100, 100}}, {3, 2, 1, {-400, 400, 0}}, {3, 1, 2, {-500, 0, 300}},
    };
    for (unsigned c = 0; c < sizeof cs / sizeof *cs; c++) {
        int E = cs[c].E, k = cs[c].k, idx[4];
        real w[4], p[4];
        moe_route(idx, w, p, cs[c].z, 1, E, k);
        double sp = 0, sw = 0;
        for (int e = 0; e < E; e++) {
            if (!isfinite((double)p[e])) print_error("case %u: p[%d] = %g\n", c, e, (double)p[e]);
            assert_true(isfinite((double)p[e]) && p[e] >= 0);
            sp += p[e];
        }
        for (int j = 0; j < k; j++) {
            assert_true(isfinite((double)w[j]));
            sw += w[j];
        }
        assert_true(fabs(sp - 1) < 1e-6);
        assert_int_equal(idx[0], cs[c].top);
        assert_true(fabs((double)p[cs[c].top] - 1) < 1e-6);   // the others are below e^-40
        if (k > 1) assert_true(fabs(sw - 1) < 1e-6);           // renormalised over the picks
        else assert_true(fabs((double)w[0] - 1) < 1e-6);      // Switch: the bare p
    }
}

// every token forced to expert 0: nothing dropped, out = the dense per-token reference
static void test_forced_router(void **state) {
    (void)state;
    for (int k = 1; k <= 2; k++) {
        MoEShape s = {.N = 33, .d = 8, .E = 4, .k = k, .r = 3, .f = 12};
        Inst m = inst_new(s, 100 + k);
        for (int t = 0; t < s.N; t++) m.z[t * s.E + 0] = 30;  // others N(0, 1)
        check_forward(&m, 1);
        inst_free(&m);
    }
}

static void test_forward_dense(void **state) {
    (void)state;
    for (int k = 1; k <= 3; k++) {
        MoEShape s = {.N = 41, .d = 16, .E = 4, .k = k, .r = 4, .f = 24};
        Inst m = inst_new(s, 200 + k);
        check_forward(&m, 0);
        inst_free(&m);
    }
    // nano-like proportions (E = 2, k = 1), one expert possibly empty-ish
    MoEShape s = {.N = 64, .d = 32, .E = 2, .k = 1, .r = 8, .f = 64};
    Inst m = inst_new(s, 300);
    check_forward(&m, 0);
    inst_free(&m);
}

// forward + backward twice from the same inputs: bit-identical results
static void test_deterministic(void **state) {
    (void)state;
    MoEShape s = {.N = 50, .d = 16, .E = 4, .k = 2, .r = 4, .f = 20};
    Inst m = inst_new(s, 400);
    size_t np = (size_t)s.E * s.r * (2 * s.f + 2 * s.d + 2);
    real *grads[2], *dn[2], *dz[2], *out[2];
    real aux[2];
    Rng g = {401};
    real *dout = malloc(sizeof(real) * s.N * s.d);
    fill_gauss(dout, (size_t)s.N * s.d, 1, &g);
    for (int rep = 0; rep < 2; rep++) {
        grads[rep] = calloc(np, sizeof(real));
        dn[rep] = calloc((size_t)s.N * s.d, sizeof(real));
        dz[rep] = calloc((size_t)s.N * s.E, sizeof(real));
        out[rep] = malloc(sizeof(real) * s.N * s.d);
        real *q = grads[rep];
        MoEGrads gr = {q, q + (size_t)s.E * s.f * s.r, q + (size_t)s.E * (s.f * s.r + s.r),
                       q + (size_t)s.E * (s.f * s.r + s.r + s.d * s.r),
                       q + (size_t)s.E * (s.f * s.r + s.r + 2 * s.d * s.r),
                       q + (size_t)s.E * (s.f * s.r + 2 * s.r + 2 * s.d * s.r)};
        moe_forward(out[rep], &aux[rep], NULL, m.ws, m.n, m.z, inst_params(&m), s);
        moe_backward(dn[rep], dz[rep], gr, dout, (real)0.3, m.ws, m.n, m.z, inst_params(&m), s);
    }
    assert_memory_equal(out[0], out[1], sizeof(real) * s.N * s.d);
    assert_memory_equal(grads[0], grads[1], sizeof(real) * np);
    assert_memory_equal(dn[0], dn[1], sizeof(real) * s.N * s.d);
    assert_memory_equal(dz[0], dz[1], sizeof(real) * s.N * s.E);
    assert_true(aux[0] == aux[1]);
    for (int rep = 0; rep < 2; rep++) { free(grads[rep]); free(dn[rep]); free(dz[rep]); free(out[rep]); }
    free(dout);
    inst_free(&m);
}

// moe_forward_routed (the parity reference's): its own routing given back is moe_forward bit
// for bit; another routing is followed (load, route_read) and measured against the own top-k
static void test_forward_routed(void **state) {
    (void)state;
    MoEShape s = {.N = 37, .d = 12, .E = 5, .k = 2, .r = 4, .f = 16};
    Inst m = inst_new(s, 700);
    size_t Nd = (size_t)s.N * s.d, Nk = (size_t)s.N * s.k;
    real *o1 = malloc(sizeof(real) * Nd), *o2 = malloc(sizeof(real) * Nd);
    real *w = malloc(sizeof(real) * Nk), *p = malloc(sizeof(real) * s.N * s.E);
    int *own = malloc(sizeof(int) * Nk), *given = malloc(sizeof(int) * Nk), *back = malloc(sizeof(int) * Nk);
    int l1[8], l2[8];
    real a1, a2;
    moe_forward(o1, &a1, l1, m.ws, m.n, m.z, inst_params(&m), s);
    moe_route_read(own, m.ws, s);
    moe_route(given, w, p, m.z, s.N, s.E, s.k);
    assert_memory_equal(own, given, sizeof(int) * Nk);  // route_read gives the forward's choice
    MoERouteDiff diff = {0, 0};
    moe_forward_routed(o2, &a2, l2, m.ws, m.n, m.z, inst_params(&m), s, own, &diff);
    assert_memory_equal(o1, o2, sizeof(real) * Nd);
    assert_memory_equal(l1, l2, sizeof(int) * s.E);
    assert_true(a1 == a2);
    assert_int_equal(diff.moved, 0);
    assert_true(diff.gap == 0);
    // token t's second pick replaced by the next expert up that it did not pick (every third token)
    memcpy(given, own, sizeof(int) * Nk);
    long want = 0;
    double want_gap = 0;
    for (int t = 0; t < s.N; t += 3) {
        int *gt = given + (size_t)t * s.k;
        int e = gt[1];
        do e = (e + 1) % s.E; while (e == gt[0] || e == gt[1]);
        const real *pt = p + (size_t)t * s.E;
        double gap = ((double)pt[gt[1]] - (double)pt[e]) / (double)pt[gt[1]];
        want_gap = gap > want_gap ? gap : want_gap;
        gt[1] = e;
        want++;
    }
    assert_true(moe_route_valid(given, s.N, s.E, s.k));
    diff = (MoERouteDiff){0, 0};
    moe_forward_routed(o2, &a2, l2, m.ws, m.n, m.z, inst_params(&m), s, given, &diff);
    print_message("given routing: %ld moved (want %ld), gap %.4f (want %.4f)\n", diff.moved, want, diff.gap, want_gap);
    assert_int_equal(diff.moved, want);
    assert_true(fabs(diff.gap - want_gap) < 1e-6 && diff.gap > 0);
    moe_route_read(back, m.ws, s);
    assert_memory_equal(back, given, sizeof(int) * Nk);
    int cnt[8] = {0};
    for (size_t a = 0; a < Nk; a++) cnt[given[a]]++;
    assert_memory_equal(cnt, l2, sizeof(int) * s.E);  // the load is the given routing's
    assert_true(memcmp(o1, o2, sizeof(real) * Nd) != 0);
    // what is not a routing
    given[0] = s.E;
    assert_false(moe_route_valid(given, s.N, s.E, s.k));
    given[0] = given[1];
    assert_false(moe_route_valid(given, s.N, s.E, s.k));
    given[0] = -1;
    assert_false(moe_route_valid(given, s.N, s.E, s.k));
    free(o1); free(o2); free(w); free(p); free(own); free(given); free(back);
    inst_free(&m);
}

// The values of a given routing's output, not only that it differs from the own routing's: the
// weights are the given experts' own p (renormalised over them at k > 1), as the dense reference
// computes them. Weights taken from the own top-k and applied to the given experts passed every
// check above (a mutation pass, session 39): :check parity follows a device's routing with it.
static void test_forward_routed_values(void **state) {
    (void)state;
    for (int k = 1; k <= 2; k++) {
        MoEShape s = {.N = 37, .d = 12, .E = 5, .k = k, .r = 4, .f = 16};
        Inst m = inst_new(s, 700 + k);
        size_t Nd = (size_t)s.N * s.d, Nk = (size_t)s.N * s.k;
        int *given = malloc(sizeof(int) * Nk), l[8], lref[8];
        real *w = malloc(sizeof(real) * Nk), *p = malloc(sizeof(real) * s.N * s.E), *o = malloc(sizeof(real) * Nd);
        double *ref = malloc(sizeof(double) * Nd), aref;
        real a;
        moe_route(given, w, p, m.z, s.N, s.E, s.k);
        for (int t = 0; t < s.N; t += 3) {  // every third token's last pick: the next expert up it did not pick
            int *gt = given + (size_t)t * k, e = gt[k - 1];
            do e = (e + 1) % s.E; while (e == gt[0] || e == gt[k - 1]);
            gt[k - 1] = e;
        }
        moe_forward_routed(o, &a, l, m.ws, m.n, m.z, inst_params(&m), s, given, NULL);
        dense_reference(ref, &aref, lref, &m, given);
        double md = 0, mr = 0;
        for (size_t i = 0; i < Nd; i++) {
            md = fmax(md, fabs((double)o[i] - ref[i]));
            mr = fmax(mr, fabs(ref[i]));
        }
        print_message("k=%d: the given routing's output vs the dense reference of it: %.2e\n", k, md / mr);
        assert_true(md / mr < FWD_TOL);
        assert_true(fabs((double)a - aref) <= FWD_TOL * fabs(aref));
        assert_memory_equal(l, lref, sizeof(int) * s.E);
        free(given); free(w); free(p); free(o); free(ref);
        inst_free(&m);
    }
}

#ifdef DM_DOUBLE
// ---- finite differences (double build only) ----
typedef struct {
    Inst *m;
    const real *R;  // [N, d] loss weights
    real c;         // aux coefficient
    real *out;      // [N, d] scratch
    int *idx0;      // [N, k] the routing at the unperturbed point
    const int *route;  // [N, k] a given routing (moe_forward_routed), or NULL: the own top-k
} FdCtx;

// loss = sum(out * R) + c * aux; also asserts the routing did not move
static double fd_loss(FdCtx *x) {
    const MoEShape s = x->m->s;
    real aux;
    moe_forward_routed(x->out, &aux, NULL, x->m->ws, x->m->n, x->m->z, inst_params(x->m), s, x->route, NULL);
    if (x->route) goto sum;  // the routing is given: it cannot move
    int *now = malloc(sizeof(int) * s.N * s.k);
    real *w = malloc(sizeof(real) * s.N * s.k), *p = malloc(sizeof(real) * s.N * s.E);
    moe_route(now, w, p, x->m->z, s.N, s.E, s.k);
    assert_memory_equal(now, x->idx0, sizeof(int) * s.N * s.k);
    free(now); free(w); free(p);
sum:;
    double L = 0;
    for (size_t i = 0; i < (size_t)s.N * s.d; i++) L += (double)x->out[i] * x->R[i];
    return L + (double)x->c * aux;
}

// max over entries of |analytic - numeric| / max(|analytic|, |numeric|, floor), floor = 1e-3 of
// the group's largest numeric entry: relative where the gradient is sizeable, absolute (at the
// group's scale) where it is ~0. A wrong factor, sign or missing term anywhere fails it.
static double fd_group(FdCtx *x, real *param, const real *grad, size_t cnt, const char *name) {
    const double eps = 1e-5;
    double *num = malloc(sizeof(double) * cnt);
    double scale = 0;
    for (size_t i = 0; i < cnt; i++) {
        real keep = param[i];
        param[i] = keep + (real)eps;
        double Lp = fd_loss(x);
        param[i] = keep - (real)eps;
        double Lm = fd_loss(x);
        param[i] = keep;
        num[i] = (Lp - Lm) / (2 * eps);
        scale = fmax(scale, fabs(num[i]));
    }
    double worst = 0;
    for (size_t i = 0; i < cnt; i++) {
        double den = fmax(fmax(fabs(grad[i]), fabs(num[i])), 1e-3 * scale);
        worst = err_max(worst, fabs(grad[i] - num[i]) / den);
    }
    print_message("  %-3s [%4zu] max rel err %.3e (max |g| %.3e)\n", name, cnt, worst, scale);
    assert_true(scale > 1e-8);  // the check must see a non-trivial gradient
    free(num);
    return worst;
}

// routed: the forward follows a given routing, each token's k LEAST likely experts (what no
// top-k would pick): the gradients through the weights, experts and aux are then those of that
// fixed assignment (the parity reference's case, where it follows a device's choice)
static void fd_check(int k, int routed) {
    MoEShape s = {.N = 10, .d = 5, .E = 4, .k = k, .r = 3, .f = 7};
    Inst m = inst_new(s, 500 + k);
    Rng g = {600 + k};
    fill_z_gapped(m.z, s.N, s.E, 0.4, &g);
    int *route = NULL;
    if (routed) {
        route = malloc(sizeof(int) * s.N * k);
        real *zneg = malloc(sizeof(real) * s.N * s.E), *w = malloc(sizeof(real) * s.N * k);
        real *p = malloc(sizeof(real) * s.N * s.E);
        for (int i = 0; i < s.N * s.E; i++) zneg[i] = -m.z[i];
        moe_route(route, w, p, zneg, s.N, s.E, k);  // the top-k of -z: the bottom-k of z
        free(zneg); free(w); free(p);
    }
    real *R = malloc(sizeof(real) * s.N * s.d);
    fill_gauss(R, (size_t)s.N * s.d, 1, &g);
    const real c = (real)0.7;  // a big aux weight, so its gradient is not lost in the task's
    const size_t E = s.E;
    real *gU1 = calloc(E * s.f * s.r, sizeof(real)), *gs1 = calloc(E * s.r, sizeof(real));
    real *gV1 = calloc(E * s.d * s.r, sizeof(real)), *gU2 = calloc(E * s.d * s.r, sizeof(real));
    real *gs2 = calloc(E * s.r, sizeof(real)), *gV2 = calloc(E * s.f * s.r, sizeof(real));
    real *dn = calloc((size_t)s.N * s.d, sizeof(real)), *dz = calloc((size_t)s.N * s.E, sizeof(real));
    // a nonzero start: gradients must ACCUMULATE, so subtract it back afterwards
    for (size_t i = 0; i < (size_t)s.N * s.d; i++) dn[i] = 1;
    real *out = malloc(sizeof(real) * s.N * s.d);
    real aux;
    int load[64];
    moe_forward_routed(out, &aux, load, m.ws, m.n, m.z, inst_params(&m), s, route, NULL);
    for (int e = 0; e < s.E; e++) print_message("  k=%d load[%d] = %d\n", k, e, load[e]);
    MoEGrads gr = {gU1, gs1, gV1, gU2, gs2, gV2};
    moe_backward(dn, dz, gr, R, c, m.ws, m.n, m.z, inst_params(&m), s);
    for (size_t i = 0; i < (size_t)s.N * s.d; i++) dn[i] -= 1;

    int *idx0 = malloc(sizeof(int) * s.N * s.k);
    real *w0 = malloc(sizeof(real) * s.N * s.k), *p0 = malloc(sizeof(real) * s.N * s.E);
    moe_route(idx0, w0, p0, m.z, s.N, s.E, s.k);
    FdCtx x = {&m, R, c, out, idx0, route};
    double worst = 0;
    worst = err_max(worst, fd_group(&x, m.n, dn, (size_t)s.N * s.d, "dn"));
    worst = err_max(worst, fd_group(&x, m.z, dz, (size_t)s.N * s.E, "dz"));
    worst = err_max(worst, fd_group(&x, m.U1, gU1, E * s.f * s.r, "U1"));
    worst = err_max(worst, fd_group(&x, m.s1, gs1, E * s.r, "s1"));
    worst = err_max(worst, fd_group(&x, m.V1, gV1, E * s.d * s.r, "V1"));
    worst = err_max(worst, fd_group(&x, m.U2, gU2, E * s.d * s.r, "U2"));
    worst = err_max(worst, fd_group(&x, m.s2, gs2, E * s.r, "s2"));
    worst = err_max(worst, fd_group(&x, m.V2, gV2, E * s.f * s.r, "V2"));
    print_message("  k=%d%s: worst %.3e\n", k, routed ? " (given routing)" : "", worst);
    assert_true(worst <= 1e-6);

    // the aux part of dz alone: with R = 0 the router gradient is c * d aux / d z only
    memset(dz, 0, sizeof(real) * s.N * s.E);
    real *Rz = calloc((size_t)s.N * s.d, sizeof(real));
    moe_forward_routed(out, &aux, NULL, m.ws, m.n, m.z, inst_params(&m), s, route, NULL);
    moe_backward(dn, dz, gr, Rz, c, m.ws, m.n, m.z, inst_params(&m), s);
    x.R = Rz;
    double wz = fd_group(&x, m.z, dz, (size_t)s.N * s.E, "dz~");
    assert_true(wz <= 1e-6);

    free(Rz); free(R); free(gU1); free(gs1); free(gV1); free(gU2); free(gs2); free(gV2);
    free(dn); free(dz); free(out); free(idx0); free(w0); free(p0); free(route);
    inst_free(&m);
}

static void test_fd_k1(void **state) { (void)state; fd_check(1, 0); }
static void test_fd_k2(void **state) { (void)state; fd_check(2, 0); }
static void test_fd_routed(void **state) { (void)state; fd_check(1, 1); fd_check(2, 1); }
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_random),
        cmocka_unit_test(test_route_ties),
        cmocka_unit_test(test_route_spread),
        cmocka_unit_test(test_forced_router),
        cmocka_unit_test(test_forward_dense),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_forward_routed),
        cmocka_unit_test(test_forward_routed_values),
#ifdef DM_DOUBLE
        cmocka_unit_test(test_fd_k1),
        cmocka_unit_test(test_fd_k2),
        cmocka_unit_test(test_fd_routed),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
