// test_fused_tail.c — the rezero backward (kernels/cpu/fused.c) at element counts that are not a
// multiple of 8: its 8-wide blocks leave the last n % 8 elements to a scalar tail loop, which no
// other test ran (every gradient-checked model had d = 8). Central finite differences of the
// forward (mix_forward) against the backward, exact values of dbody and dalpha, and (double) a
// whole-model gradient check at d = 12, batch 1, seq 9 (B T d = 108, a tail of 4).
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../kernels/cpu/fused.h"
#include "../engine/model.h"
#include "../engine/engine.h"

// FD step and bar: double at test_ops' bar (1e-6); float at its own round-off (the objective is
// linear in body and alpha: a large step costs no truncation, only round-off enters: float ~1e-5)
#ifdef DM_DOUBLE
static const double FD_H = 1e-3, FD_BAR = 1e-6, DOT_TOL = 1e-12;
#else
static const double FD_H = 1e-2, FD_BAR = 1e-3, DOT_TOL = 4 * FLT_EPSILON;
#endif

typedef struct {
    int N, C;
    real *hprev, *w, *gout, *R, *body, *h;
    real alpha;
} Rz;

// f = sum R . h with h = hprev + alpha body and body = 1 x gout (mix_forward, the gout arm alone
// at gate 1: body is gout bit for bit, so d f / d gout is d f / d body)
static double rz_objective(Rz *z) {
    mix_forward(z->body, z->h, z->hprev, z->w, NULL, NULL, z->gout, (real)1e30, &z->alpha, z->N, z->C);
    double s = 0;
    for (size_t j = 0; j < (size_t)z->N * z->C; j++) s += (double)z->R[j] * z->h[j];
    return s;
}

static void rz_make(Rz *z, int N, int C, uint64_t seed) {
    size_t n = (size_t)N * C;
    Rng r = {seed};
    z->N = N; z->C = C;
    z->hprev = malloc(sizeof(real) * n); z->gout = malloc(sizeof(real) * n); z->R = malloc(sizeof(real) * n);
    z->body = malloc(sizeof(real) * n); z->h = malloc(sizeof(real) * n);
    z->w = malloc(sizeof(real) * 3 * (size_t)N);
    fill_randn(z->hprev, n, 1, &r); fill_randn(z->gout, n, 1, &r); fill_randn(z->R, n, 1, &r);
    fill_randn(z->w, 3 * (size_t)N, 1, &r);
    for (int i = 0; i < N; i++) z->w[i * 3 + 2] = 1;
    z->alpha = (real)0.7;
}

static void rz_free(Rz *z) { free(z->hprev); free(z->gout); free(z->R); free(z->body); free(z->h); free(z->w); }

// QA mutation, session 41 (F03, F04): rezero_backward's tail (j >= n - n % 8) dropped alpha from
// dbody (dbody = dh there) or left its products out of dalpha; both survived every test because
// no shape had B T d % 8 != 0. Central differences of f = R . h against the backward with dh = R,
// at n = 5 (tail only), 13, 21 and 108 (blocks and a tail), and 16 (no tail) as a control.
static void test_rezero_backward_fd(void **st) {
    (void)st;
    const int shapes[][2] = {{1, 5}, {1, 13}, {3, 7}, {9, 12}, {2, 8}};
    for (int si = 0; si < 5; si++) {
        Rz z;
        rz_make(&z, shapes[si][0], shapes[si][1], 100 + si);
        size_t n = (size_t)z.N * z.C;
        rz_objective(&z);  // body from the forward
        real *dbody = malloc(sizeof(real) * n);
        for (size_t j = 0; j < n; j++) dbody[j] = (real)99;  // = semantics: overwritten
        real dalpha = 0;
        rezero_backward(dbody, &dalpha, z.R, z.body, &z.alpha, n);
        double *an = malloc(sizeof(double) * n), *num = malloc(sizeof(double) * n);
        for (size_t j = 0; j < n; j++) {
            real s = z.gout[j];
            z.gout[j] = (real)(s + FD_H); double fp = rz_objective(&z);
            z.gout[j] = (real)(s - FD_H); double fm = rz_objective(&z);
            z.gout[j] = s;
            num[j] = (fp - fm) / ((double)(real)(s + FD_H) - (double)(real)(s - FD_H));
            an[j] = dbody[j];
        }
        double e_body = grad_rel_err(an, num, n);
        real sa = z.alpha;
        z.alpha = (real)(sa + FD_H); double fp = rz_objective(&z);
        z.alpha = (real)(sa - FD_H); double fm = rz_objective(&z);
        double num_a = (fp - fm) / ((double)(real)(sa + FD_H) - (double)(real)(sa - FD_H)), an_a = dalpha;
        z.alpha = sa;
        double e_alpha = grad_rel_err(&an_a, &num_a, 1);
        print_message("n=%-3zu dbody rel err %.2e, dalpha %.9g vs %.9g rel err %.2e\n", n, e_body, an_a, num_a, e_alpha);
        assert_true(e_body <= FD_BAR);
        assert_true(e_alpha <= FD_BAR);
        free(an); free(num); free(dbody);
        rz_free(&z);
    }
}

// QA mutation, session 41 (F03, F04): the same tail, exactly. dbody = alpha dh is one product per
// element, bit for bit (at alpha = 0, a fresh model, every element is 0: F03 left the tail at dh,
// so every arm got a gradient from it); dalpha accumulates onto what it held (+=) the whole dot
// dh . body (F04 lost the j >= 8 terms). dalpha NULL: dbody alone; alpha NULL: alpha = 1.
static void test_rezero_backward_exact(void **st) {
    (void)st;
    const size_t ns[] = {5, 13, 21, 108};
    const real alphas[] = {(real)0.7, 0};
    for (int ni = 0; ni < 4; ni++)
        for (int ai = 0; ai < 2; ai++) {
            size_t n = ns[ni];
            Rng r = {200 + ni * 2 + (uint64_t)ai};
            real *dh = malloc(sizeof(real) * n), *body = malloc(sizeof(real) * n), *db = malloc(sizeof(real) * n);
            fill_randn(dh, n, 1, &r); fill_randn(body, n, 1, &r);
            real al = alphas[ai];
            double dot = 0, mag = 0.25;
            for (size_t j = 0; j < n; j++) { dot += (double)dh[j] * body[j]; mag += fabs((double)dh[j] * body[j]); }
            real dalpha = (real)0.25;
            for (size_t j = 0; j < n; j++) db[j] = (real)99;
            rezero_backward(db, &dalpha, dh, body, &al, n);
            for (size_t j = 0; j < n; j++) {
                real want = al * dh[j];
                if (!(db[j] == want)) print_error("n=%zu alpha=%g: dbody[%zu] = %.9g, want %.9g\n", n, (double)al, j, (double)db[j], (double)want);
                assert_true(db[j] == want);
            }
            double want_a = 0.25 + dot;
            if (!(fabs(dalpha - want_a) <= DOT_TOL * mag)) print_error("n=%zu: dalpha %.17g, want %.17g\n", n, (double)dalpha, want_a);
            assert_true(fabs(dalpha - want_a) <= DOT_TOL * mag);
            // no dalpha (the rezero arm's alpha is not trained): dbody alone, the same values
            for (size_t j = 0; j < n; j++) db[j] = (real)99;
            rezero_backward(db, NULL, dh, body, &al, n);
            for (size_t j = 0; j < n; j++) assert_true(db[j] == al * dh[j]);
            // no alpha (the rezero arm off): alpha = 1, dbody = dh
            dalpha = (real)0.25;
            rezero_backward(db, &dalpha, dh, body, NULL, n);
            for (size_t j = 0; j < n; j++) assert_true(db[j] == dh[j]);
            assert_true(fabs(dalpha - want_a) <= DOT_TOL * mag);
            free(dh); free(body); free(db);
        }
}

#ifdef DM_DOUBLE
// QA mutation, session 41 (F03, F04): the whole model at a shape whose B T d (12 x 9 x 1 = 108) is
// not a multiple of 8, every arm on, alpha = 0.5: the sixth-order FD check of test_model.c (its
// shape, d = 8, never reached an n % 8 tail), here for alpha and every tensor the tail's dbody
// feeds. Routing flips are skipped and counted as there.
static uint64_t routing_sig(const Model *m) {
    const Config *c = &m->cfg;
    int N = m->acts.B * m->acts.T;
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < m->last_depth; i++)
        for (int n = 0; n < N; n++) {
            const real *z = m->acts.it[i].z + (size_t)n * c->E;
            uint64_t chosen = 0;
            for (int j = 0; j < c->k; j++) {
                int best = -1;
                for (int e = 0; e < c->E; e++)
                    if (!(chosen >> e & 1) && (best < 0 || z[e] > z[best])) best = e;
                chosen |= 1ULL << best;
            }
            h = (h ^ chosen) * 1099511628211ULL;
        }
    return h;
}

static void test_model_grad_d12(void **st) {
    (void)st;
    Config c;
    config_defaults(&c);
    c.d = 12; c.H = 3; c.L = 2; c.E = 3; c.k = 2; c.r = 2; c.f = 6;
    c.engram_rows = 13; c.engram_dim = 3; c.n_orders = 2; c.engram_orders[0] = 1; c.engram_orders[1] = 3;
    c.seq = 9; c.batch = 1; c.kda_chunk = 4;
    c.moe_aux = 0.3;
    Model m;
    dm_err err = {0};
    assert_int_equal(model_create(&m, &c, backend_cpu(), 41, &err), 0);
    Rng r = {42};
    for (int i = 0; i < P_COUNT; i++)
        fill_randn(m.params + m.t[i].offset, m.t[i].numel, (i == P_TABLES || i == P_EMB) ? 0.7 : 0.35, &r);
    m.params[m.t[P_ALPHA].offset] = (real)0.5;
    for (size_t j = 0; j < m.t[P_ROUTER].numel; j++) m.params[m.t[P_ROUTER].offset + j] *= 6;
    for (size_t j = 0; j < m.t[P_W_ON].numel; j++) m.params[m.t[P_W_ON].offset + j] += 1;
    int x[9], y[9];
    for (int i = 0; i < 9; i++) { x[i] = (int)(rng_next(&r) % 7) * 37 % 256; y[i] = (int)(rng_next(&r) % 256); }
    model_forward(&m, x, y, 1, 9, c.L, FWD_TRAIN);
    uint64_t sig0 = routing_sig(&m);
    model_backward(&m);
    double *an = malloc(sizeof(double) * m.n_params), *num = malloc(sizeof(double) * m.n_params);
    for (size_t j = 0; j < m.n_params; j++) an[j] = m.grads[j];
    const double h = 3e-4;
    size_t checked = 0, skipped = 0;
    double worst = 0;
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m.t[i];
        for (size_t j = 0; j < t->numel; j++) {
            size_t at = t->offset + j;
            if (i == P_EMB) {  // a row no position reads has an exact zero
                int used = 0;
                for (int q = 0; q < 9; q++) used |= x[q] == (int)(j / c.d);
                if (!used) { num[at] = 0; assert_true(an[at] == 0); continue; }
            }
            real *p = m.params + at, save = *p;
            double dfd[2];
            int flipped = 0;
            for (int pass = 0; pass < 2; pass++) {
                double hh = pass ? h / 3 : h, f[7];
                for (int q = -3; q <= 3; q++) {
                    if (q == 0) continue;
                    *p = save + q * hh;
                    model_forward(&m, x, y, 1, 9, c.L, FWD_TRAIN);
                    f[q + 3] = model_objective(&m);
                    flipped |= routing_sig(&m) != sig0;
                }
                dfd[pass] = (45 * (f[4] - f[2]) - 9 * (f[5] - f[1]) + (f[6] - f[0])) / (60 * hh);
            }
            *p = save;
            num[at] = fabs(dfd[0] - dfd[1]) > 1e-10 ? dfd[1] : dfd[0];
            checked++;
            if (flipped) { skipped++; num[at] = an[at]; }
        }
        double e = grad_rel_err(an + t->offset, num + t->offset, t->numel);
        worst = err_max(worst, e);
        if (e > 1e-6 || getenv("DM_VERBOSE")) print_error("tensor %s: max rel err %.3e\n", t->name, e);
        assert_true(e <= 1e-6);
    }
    print_message("d=12 B T d=108: worst rel err %.2e (%zu entries, %zu skipped: routing flip)\n", worst, checked, skipped);
    assert_true(skipped * 50 < checked);
    free(an); free(num);
    model_free(&m);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rezero_backward_fd),
        cmocka_unit_test(test_rezero_backward_exact),
#ifdef DM_DOUBLE
        cmocka_unit_test(test_model_grad_d12),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
