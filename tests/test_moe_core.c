// test_moe_core.c — the CUDA backend's MoE (kernels/cuda/moe_core.h) run on the CPU: the same
// source and the same step lists the GPU executes, against kernels/cpu/moe.c.
// Each block step runs as an OpenMP team of nt threads per block (DM_SYNC = an OpenMP barrier,
// so the phases are separated exactly as on the device), blocks one after another; item steps
// loop over their items. nt = 1 runs blocks and items in order, nt = 4 in REVERSE order: a step
// whose outputs depend on the order of its blocks / items (a race on the GPU), or a phase that
// misses its stride, changes the result, and the two runs must be bit-identical.
// Checked: forward out, aux, load (exact) and every backward gradient (dn, dz, the six expert
// groups; all accumulate onto random starting values) — float <= 1e-5, double <= 1e-10
// normwise relative — for k = 1 and 2, N not a multiple of the 64-row tile, an expert with more
// than one row tile, wide f (two column tiles, several K steps), every token routed to one
// expert (the others empty) also with every logit near 1000, one expert never chosen, and more
// assignments than sort chunks.
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include <omp.h>
#include "../kernels/cpu/moe.h"
#define DM_SYNC() _Pragma("omp barrier")
#include "../kernels/cuda/moe_core.h"

#ifdef DM_DOUBLE
static const double BAR = 1e-10;
#else
static const double BAR = 1e-5;
#endif

enum { G_DN, G_DZ, G_U1, G_S1, G_V1, G_U2, G_S2, G_V2, G_COUNT };
static const char *g_name[G_COUNT] = {"dn", "dz", "dU1", "ds1", "dV1", "dU2", "ds2", "dV2"};

typedef struct {
    MoEShape s;
    real *prm[6];          // U1 [E,f,r] s1 [E,r] V1 [E,d,r] U2 [E,d,r] s2 [E,r] V2 [E,f,r]
    real *n, *z, *dout;    // [N, d], [N, E], [N, d]
    real *g0[G_COUNT];     // starting values of the gradients (backward accumulates onto them)
    size_t gn[G_COUNT];
} Case;

// Router: 0 random logits; 1 every token to expert `ex` (by a wide margin); 2 expert `ex` never
// chosen (its logit far below); 3 exact ties (equal logits on every other token); 4 as 1 with
// logits near 1000, past exp's overflow in float (88.7) and in double (709.8): the softmax must
// subtract the max first (exp(1000) = inf, inf / inf = NaN everywhere, and the top-k of NaNs
// is expert 0)
static Case case_new(MoEShape s, int router, int ex, uint64_t seed) {
    Case c;
    memset(&c, 0, sizeof c);
    c.s = s;
    Rng g = {seed};
    size_t E = s.E, sz[6] = {E * s.f * s.r, E * s.r, E * s.d * s.r, E * s.d * s.r, E * s.r, E * s.f * s.r};
    for (int i = 0; i < 6; i++) c.prm[i] = malloc(sizeof(real) * sz[i]);
    // factors ~ 1/sqrt(rows), s ~ 1 +- 0.5 (s1 times sqrt d): pre-activations of order 1, silu curved
    fill_randn(c.prm[0], sz[0], 1 / sqrt(s.f), &g);
    fill_randn(c.prm[2], sz[2], 1 / sqrt(s.d), &g);
    fill_randn(c.prm[3], sz[3], 1 / sqrt(s.d), &g);
    fill_randn(c.prm[5], sz[5], 1 / sqrt(s.f), &g);
    for (size_t i = 0; i < sz[1]; i++) c.prm[1][i] = (real)((0.5 + rng_uniform(&g)) * sqrt(s.d) / sqrt(s.r));
    for (size_t i = 0; i < sz[4]; i++) c.prm[4][i] = (real)(0.5 + rng_uniform(&g));
    size_t Nd = (size_t)s.N * s.d, NE = (size_t)s.N * s.E;
    c.n = malloc(sizeof(real) * Nd);
    c.z = malloc(sizeof(real) * NE);
    c.dout = malloc(sizeof(real) * Nd);
    fill_randn(c.n, Nd, 1, &g);
    fill_randn(c.z, NE, 1, &g);
    fill_randn(c.dout, Nd, 1, &g);
    for (int t = 0; t < s.N; t++) {
        real *zt = c.z + (size_t)t * s.E;
        if (router == 1) zt[ex] += 30;
        if (router == 4) {
            for (int e = 0; e < s.E; e++) zt[e] += 990;
            zt[ex] += 10;
        }
        if (router == 2) zt[ex] -= 30;
        if (router == 3 && t % 2 == 0)
            for (int e = 0; e < s.E; e++) zt[e] = t % 4 == 0 ? (real)0.5 : (e < 2 ? (real)1 : zt[e]);
    }
    size_t gsz[G_COUNT] = {Nd, NE, sz[0], sz[1], sz[2], sz[3], sz[4], sz[5]};
    for (int i = 0; i < G_COUNT; i++) {
        c.gn[i] = gsz[i];
        c.g0[i] = malloc(sizeof(real) * gsz[i]);
        fill_randn(c.g0[i], gsz[i], 0.1, &g);
    }
    return c;
}

static void case_free(Case *c) {
    for (int i = 0; i < 6; i++) free(c->prm[i]);
    for (int i = 0; i < G_COUNT; i++) free(c->g0[i]);
    free(c->n); free(c->z); free(c->dout);
}

static MoEParams case_params(const Case *c) {
    MoEParams p = {c->prm[0], c->prm[1], c->prm[2], c->prm[3], c->prm[4], c->prm[5]};
    return p;
}

// The results of one implementation
typedef struct {
    real *out, aux, *g[G_COUNT];
    int load[MOE_MAXE];
} Result;

static Result result_new(const Case *c) {
    Result r;
    memset(&r, 0, sizeof r);
    r.out = malloc(sizeof(real) * c->s.N * c->s.d);
    for (int i = 0; i < G_COUNT; i++) {
        r.g[i] = malloc(sizeof(real) * c->gn[i]);
        memcpy(r.g[i], c->g0[i], sizeof(real) * c->gn[i]);
    }
    return r;
}
static void result_free(Result *r) {
    free(r->out);
    for (int i = 0; i < G_COUNT; i++) free(r->g[i]);
}
static MoEGrads result_grads(Result *r) {
    MoEGrads g = {r->g[G_U1], r->g[G_S1], r->g[G_V1], r->g[G_U2], r->g[G_S2], r->g[G_V2]};
    return g;
}

static Result run_cpu(const Case *c, real daux) {
    Result r = result_new(c);
    real *ws = malloc(sizeof(real) * moe_ws_size(c->s));
    moe_forward(r.out, &r.aux, r.load, ws, c->n, c->z, case_params(c), c->s);
    moe_backward(r.g[G_DN], r.g[G_DZ], result_grads(&r), c->dout, daux, ws, c->n, c->z, case_params(c), c->s);
    free(ws);
    return r;
}

// An executor of moe_core steps, as moe_cuda.cu launches them: nt threads per block.
static void run_steps(const MoeStep *st, int ns, const MoeView *v, int nt) {
    real *sA = malloc(sizeof(real) * MOE_SA), *sB = malloc(sizeof(real) * MOE_SB);  // the block's "shared memory"
    int rev = nt > 1;
    for (int i = 0; i < ns; i++) {
        size_t items;
        int gx, gy;
        moe_core_shape(&st[i], v, &items, &gx, &gy);
        for (size_t x = 0; x < items; x++) moe_core_item(&st[i], v, rev ? items - 1 - x : x);
        for (int b = 0; b < gx * gy; b++) {
            int bb = rev ? gx * gy - 1 - b : b, bx = bb % gx, by = bb / gx;
            #pragma omp parallel num_threads(nt)
            moe_core_block(&st[i], v, bx, by, sA, sB, omp_get_thread_num(), omp_get_num_threads());
        }
    }
    free(sA); free(sB);
}

// nosplit: every row reduction in one piece (the weight GEMMs and s-gradients of these small
// shapes are otherwise split, moe_wg_split / moe_sg_split)
static Result run_core(const Case *c, real daux, int nt, int nosplit) {
    Result r = result_new(c);
    size_t nws = moe_core_ws_size(c->s);
    real *ws = malloc(sizeof(real) * nws);
    for (size_t i = 0; i < nws; i++) ws[i] = (real)NAN;  // nothing may be read before it is written
    MoeView v = moe_core_view(ws, c->s);
    v.nosplit = nosplit;
    // the device outputs aux / load: backend memory, here plain host arrays
    real *aux = malloc(sizeof(real));
    int *load = malloc(sizeof(int) * c->s.E);
    MoeStep st[MOE_MAX_STEPS];
    int ns = moe_core_forward_steps(st, &v, r.out, aux, load, c->n, c->z, case_params(c));
    assert_true(ns <= MOE_MAX_STEPS);
    run_steps(st, ns, &v, nt);
    r.aux = *aux;
    memcpy(r.load, load, sizeof(int) * c->s.E);
    ns = moe_core_backward_steps(st, &v, r.g[G_DN], r.g[G_DZ], result_grads(&r), c->dout, daux, c->n, case_params(c));
    assert_true(ns <= MOE_MAX_STEPS);
    run_steps(st, ns, &v, nt);
    free(aux); free(load); free(ws);
    return r;
}

static int same_result(const Case *c, const Result *a, const Result *b) {
    int same = !memcmp(a->out, b->out, sizeof(real) * c->s.N * c->s.d) && !memcmp(&a->aux, &b->aux, sizeof(real)) &&
               !memcmp(a->load, b->load, sizeof(int) * c->s.E);
    for (int i = 0; i < G_COUNT; i++) same &= !memcmp(a->g[i], b->g[i], sizeof(real) * c->gn[i]);
    return same;
}

// Normwise relative error max|a - b| / max|b| that, unlike fmax-based metrics, cannot skip a
// NaN: a non-finite value where the reference is finite is an infinite error (the core's
// workspace starts as NaN, so a row or tile the algorithm forgets to compute shows up here).
static double rel_err(const real *a, const real *b, size_t n) {
    double mx = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite((double)a[i]) && isfinite((double)b[i])) return INFINITY;
        mx = fmax(mx, fabs((double)b[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    return diff / fmax(mx, 1e-30);
}

// worst relative error of the core against the CPU; loads must match exactly (else returns 1)
static double compare(const Case *c, const Result *core, const Result *ref, int verbose) {
    for (int e = 0; e < c->s.E; e++)
        if (core->load[e] != ref->load[e]) {
            if (verbose) print_message("  load[%d]: core %d cpu %d\n", e, core->load[e], ref->load[e]);
            return 1;
        }
    double worst = rel_err(core->out, ref->out, (size_t)c->s.N * c->s.d);
    double ea = rel_err(&core->aux, &ref->aux, 1);
    if (verbose) print_message("  out %.1e aux %.1e", worst, ea);
    worst = fmax(worst, ea);
    for (int i = 0; i < G_COUNT; i++) {
        double e = rel_err(core->g[i], ref->g[i], c->gn[i]);
        if (verbose) print_message(" %s %.1e", g_name[i], e);
        worst = fmax(worst, e);
    }
    if (verbose) print_message("\n");
    return worst;
}

static double check(MoEShape s, int router, int ex, uint64_t seed) {
    Case c = case_new(s, router, ex, seed);
    const real daux = (real)0.3;
    Result ref = run_cpu(&c, daux), c4 = run_core(&c, daux, 4, 0), c1 = run_core(&c, daux, 1, 0);
    Result cn = run_core(&c, daux, 1, 1);
    assert_true(same_result(&c, &c4, &c1));  // nt and block / item order change nothing
    if (router == 1 || router == 4)  // every token on one expert: the others really are empty
        for (int e = 0; e < s.E; e++) assert_int_equal(c1.load[e], e == ex ? s.N : 0);
    if (router == 2) assert_int_equal(c1.load[ex], 0);
    print_message("N=%d d=%d E=%d k=%d r=%d f=%d router=%d  slices: wg %d/%d sg %d  load", s.N, s.d, s.E, s.k, s.r,
                  s.f, router, moe_wg_split(s.d, s.r, s.E), moe_wg_split(s.f, s.r, s.E), moe_sg_split(s.E, s.r));
    for (int e = 0; e < s.E; e++) print_message(" %d", c1.load[e]);
    print_message("\n");
    double w = compare(&c, &c1, &ref, 1);
    print_message("  unsplit:");
    w = fmax(w, compare(&c, &cn, &ref, 1));
    result_free(&ref); result_free(&c4); result_free(&c1); result_free(&cn);
    case_free(&c);
    return w;
}

static void test_core_vs_cpu(void **state) {
    (void)state;
    double w = 0;
    MoEShape a = {50, 24, 4, 2, 8, 40};     // k = 2, N and every width off the tiles
    MoEShape b = {150, 20, 2, 1, 20, 70};   // k = 1, experts of > 64 rows, f over two column tiles
    MoEShape c = {300, 33, 5, 2, 6, 17};    // A = 600 > 256 sort chunks
    MoEShape d = {97, 16, 3, 1, 16, 96};    // k = 1
    MoEShape e = {70, 18, 4, 3, 5, 23};     // k = 3
    w = fmax(w, check(a, 0, 0, 1));
    w = fmax(w, check(b, 0, 0, 2));
    w = fmax(w, check(c, 0, 0, 3));
    w = fmax(w, check(d, 0, 0, 4));
    w = fmax(w, check(e, 0, 0, 5));
    w = fmax(w, check(b, 1, 1, 6));         // k = 1, every token on expert 1 (150 rows: 3 tiles)
    w = fmax(w, check(d, 1, 0, 7));         // every token on expert 0, experts 1, 2 empty
    w = fmax(w, check(b, 4, 1, 13));        // every token on expert 1, every logit near 1000
    w = fmax(w, check(a, 2, 2, 8));         // k = 2, expert 2 never chosen
    w = fmax(w, check(c, 2, 0, 9));         // k = 2, expert 0 never chosen
    w = fmax(w, check(a, 3, 0, 10));        // exact ties (lower index wins)
    MoEShape one = {1, 8, 4, 2, 4, 12};     // the decoder's single token
    w = fmax(w, check(one, 0, 0, 11));
    // every row on expert 0: 2040 rows, so each of the weight GEMMs' 8 slices (256 rows) and the
    // s-gradients' 64 (32 rows) has rows, the last one short
    MoEShape big = {2040, 8, 2, 1, 4, 12};
    w = fmax(w, check(big, 1, 0, 12));
    print_message("worst %.2e (bar %.0e)\n", w, BAR);
    assert_true(w <= BAR);
}

// A test that cannot fail is a defect: the comparison must catch a perturbed gradient, output,
// load and a NaN, and the nt / order check a result that depends on the run.
static void test_checker_catches(void **state) {
    (void)state;
    MoEShape s = {50, 24, 4, 2, 8, 40};
    Case c = case_new(s, 0, 0, 12);
    Result ref = run_cpu(&c, (real)0.3), core = run_core(&c, (real)0.3, 1, 0);
    assert_true(compare(&c, &core, &ref, 0) <= BAR);
    core.g[G_U1][7] += (real)1e-3 * (real)fabs((double)core.g[G_U1][7]) + (real)1e-4;
    assert_true(compare(&c, &core, &ref, 0) > BAR);
    Result core2 = run_core(&c, (real)0.3, 4, 0);
    assert_false(same_result(&c, &core, &core2));
    core2.out[3] *= (real)1.0001;
    assert_true(compare(&c, &core2, &ref, 0) > BAR);
    memcpy(core2.out, ref.out, sizeof(real) * s.N * s.d);
    core2.load[1]++; core2.load[2]--;  // a load off by one is caught even when the total is right
    assert_true(compare(&c, &core2, &ref, 0) > BAR);
    memcpy(core2.load, ref.load, sizeof ref.load);
    core2.g[G_V2][5] = (real)NAN;  // a value never computed (the workspace starts as NaN)
    assert_true(compare(&c, &core2, &ref, 0) > BAR);
    result_free(&ref); result_free(&core); result_free(&core2);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_vs_cpu),
        cmocka_unit_test(test_checker_catches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
