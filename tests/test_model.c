// test_model.c — the whole dormouse model: finite-difference gradient check of every parameter
// group and of the input-side activations (double build), with every arm on and each arm off;
// parameter counts; arm counters; determinism of the forward.
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../engine/model.h"
#include "../engine/engine.h"
#include "../kernels/cpu/retract.h"

static Config tiny_config(void) {
    Config c;
    config_defaults(&c);
    c.d = 8; c.H = 2; c.L = 3; c.E = 3; c.k = 2; c.r = 2; c.f = 6;
    c.engram_rows = 13; c.engram_dim = 3; c.n_orders = 2; c.engram_orders[0] = 1; c.engram_orders[1] = 3;
    c.seq = 9; c.batch = 2; c.kda_chunk = 4;  // T=9 is not a multiple of the chunk
    c.moe_aux = 0.3;
    return c;
}

// Random everything (alpha != 0 so the block's gradients are not multiplied away; A_h != 0).
static void randomize(Model *m, uint64_t seed) {
    Rng r = {seed};
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m->t[i];
        real *p = m->params + t->offset;
        double std = (i == P_TABLES || i == P_EMB) ? 0.7 : 0.35;
        fill_randn(p, t->numel, std, &r);
    }
    m->params[m->t[P_ALPHA].offset] = (real)0.5;
    // A large router spreads the expert logits far apart, so no finite-difference step can flip
    // a token's top-k choice (a kink that no stencil differentiates).
    for (size_t j = 0; j < m->t[P_ROUTER].numel; j++) m->params[m->t[P_ROUTER].offset + j] *= 6;
    for (size_t j = 0; j < m->t[P_W_ON].numel; j++) m->params[m->t[P_W_ON].offset + j] += 1;
}

typedef struct { int *x, *y; int B, T; } Batch;

static Batch rand_batch(int B, int T, uint64_t seed) {
    Rng r = {seed};
    Batch b = {malloc(sizeof(int) * B * T), malloc(sizeof(int) * B * T), B, T};
    for (int i = 0; i < B * T; i++) { b.x[i] = (int)(rng_next(&r) % 7) * 37 % 256; b.y[i] = (int)(rng_next(&r) % 256); }
    return b;
}

#ifdef DM_DOUBLE
// A fingerprint of every token's top-k expert set at every iteration: top-k routing is
// discontinuous (swapping an expert swaps its FFN), so an FD step that changes the routing
// measures a jump, not a derivative, and that entry is skipped (and counted).
static uint64_t routing_sig(const Model *m) {
    if (!m->arms.on[ARM_MOE]) return 0;
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

static int byte_used(const Batch *b, int v) {
    for (int i = 0; i < b->B * b->T; i++) if (b->x[i] == v) return 1;
    return 0;
}

static uint64_t last_sig;
static double objective(Model *m, Batch *b) {
    model_forward(m, b->x, b->y, b->B, b->T, m->cfg.L, FWD_TRAIN);
    last_sig = routing_sig(m);
    return model_objective(m);
}

// FD check of every tensor of the model; `arm_off` < 0 keeps every arm on.
static void check_all(Config c, int arm_off, uint64_t seed) {
    Model m;
    dm_err err = {0};
    assert_int_equal(model_create(&m, &c, backend_cpu(), seed, &err), 0);
    randomize(&m, seed + 1);
    if (c.lam_max < 1) m.params[m.t[P_CTRL_B].offset + 1] = 6;
    if (arm_off >= 0) m.arms.on[arm_off] = 0;
    const char *extra = getenv("DM_TEST_OFF");  // debugging aid: more arms off, e.g. kda,moe
    for (int a = 0; extra && a < ARM_COUNT; a++)
        if (strstr(extra, dm_arm_names[a])) m.arms.on[a] = 0;
    Batch b = rand_batch(c.batch, c.seq, seed + 2);
    objective(&m, &b);
    uint64_t base_sig = last_sig;
    model_backward(&m);
    size_t skipped = 0, checked = 0;
    double *an = malloc(sizeof(double) * m.n_params), *num = malloc(sizeof(double) * m.n_params);
    for (size_t j = 0; j < m.n_params; j++) an[j] = m.grads[j];
    const double h = getenv("DM_FD_H") ? atof(getenv("DM_FD_H")) : 3e-4;
    double worst_all = 0;
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m.t[i];
        size_t n = t->numel;
        for (size_t j = 0; j < n; j++) {
            real *p = m.params + t->offset + j;
            real save = *p;
            if (i == P_EMB && !byte_used(&b, (int)(j / c.d))) {
                // a row no position reads: its gradient is exactly zero, no FD needed
                num[t->offset + j] = 0;
                assert_true(an[t->offset + j] == 0);
                continue;
            }
            // Sixth-order central stencil at two steps, h and h/3. The large step keeps the
            // loss's round-off (~1e-15 / h) small; the small one keeps truncation (~h^6) small
            // where the looped block bends sharply. Their difference estimates the large step's
            // truncation error (no analytic value involved): when it exceeds the round-off
            // level, the small step's value is used.
            double dfd[2];
            int flipped = 0;
            for (int pass = 0; pass < 2; pass++) {
                double hh = pass ? h / 3 : h, f[7];
                for (int q = -3; q <= 3; q++) {
                    if (q == 0) continue;
                    *p = save + q * hh;
                    f[q + 3] = objective(&m, &b);
                    flipped |= last_sig != base_sig;
                }
                dfd[pass] = (45 * (f[4] - f[2]) - 9 * (f[5] - f[1]) + (f[6] - f[0])) / (60 * hh);
            }
            *p = save;
            num[t->offset + j] = fabs(dfd[0] - dfd[1]) > 1e-10 ? dfd[1] : dfd[0];
            checked++;
            if (flipped) { skipped++; num[t->offset + j] = an[t->offset + j]; continue; }
        }
        double e = grad_rel_err(an + t->offset, num + t->offset, n);
        worst_all = err_max(worst_all, e);
        if (e > 1e-6 || getenv("DM_VERBOSE")) {
            size_t wi = 0;
            double wd = -1;
            for (size_t j = 0; j < n; j++) {
                double dd = fabs(an[t->offset + j] - num[t->offset + j]);
                if (dd > wd) { wd = dd; wi = j; }
            }
            print_error("arm_off=%d tensor %s: max rel err %.3e (worst abs diff at [%zu]: analytic %.9e numeric %.9e)\n",
                        arm_off, t->name, e, wi, an[t->offset + wi], num[t->offset + wi]);
        }
        assert_true(e <= 1e-6);
    }
    // The input-side activations are covered through their tables: an embedding row's gradient
    // is the sum of d obj / d h0 over the positions that read it (test_ops checks that sum), and
    // likewise the Engram rows for the retrieved memory m.
    print_message("arm_off=%-2d worst rel err over all tensors %.2e (%zu entries, %zu skipped: routing flip)\n",
                  arm_off, worst_all, checked, skipped);
    assert_true(skipped * 50 < checked);  // a rare event, not a way to pass
    free(an); free(num); free(b.x); free(b.y);
    model_free(&m);
}

static void test_grad_all_arms(void **s) { (void)s; check_all(tiny_config(), -1, 11); }
static void test_grad_kda_off(void **s) { (void)s; check_all(tiny_config(), ARM_KDA, 12); }
static void test_grad_engram_off(void **s) { (void)s; check_all(tiny_config(), ARM_ENGRAM, 13); }
static void test_grad_moe_off(void **s) { (void)s; check_all(tiny_config(), ARM_MOE, 14); }
static void test_grad_rezero_off(void **s) { (void)s; check_all(tiny_config(), ARM_REZERO, 15); }
static void test_grad_aux_off(void **s) { (void)s; check_all(tiny_config(), ARM_AUX, 16); }
static void test_grad_loss_final_k1(void **s) {
    (void)s;
    Config c = tiny_config();
    c.loss_final = 1; c.k = 1;
    check_all(c, -1, 17);
}
static void test_grad_lam_capped(void **s) {
    (void)s;
    Config c = tiny_config();
    c.lam_max = 0.5;  // with ctrl.b[1] = +6 the memory gate is ~0.99 everywhere: always capped
    check_all(c, -1, 18);
}

#endif

// :check grad (engine/gradcheck.c) checks the live config's choices of computation, says which,
// and can fail: an analytic gradient 10 % off is a FAIL on its row (QA, session 24: it checked
// one fixed model whatever the config, and no test ran it).
extern int gradcheck_test_corrupt;
int engine_check_grad(Engine *e, const int *arms_on, FILE *out, int *ok, dm_err *err);
static void test_check_grad_command(void **s) {
    (void)s;
    Engine e;
    engine_init(&e);
    dm_err err = {0};
    assert_int_equal(config_preset(&e.cfg, "nano", &err), 0);
    e.cfg.loss_final = 1;
    e.cfg.lam_max = 0.5;
    int on[ARM_COUNT], ok = -1;
    for (int a = 0; a < ARM_COUNT; a++) on[a] = 1;
    char buf[16384];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(engine_check_grad(&e, on, f, &ok, &err), 0);
    fclose(f);
    assert_non_null(strstr(buf, " L=2 E=3 k=1 "));
    assert_non_null(strstr(buf, "loss=final lam_max=0.5 "));
#ifdef DM_DOUBLE
    if (!ok) print_error("%s\n", buf);
    assert_int_equal(ok, 1);
    assert_null(strstr(buf, "FAIL"));
#endif
#ifdef DM_DOUBLE
    // a gate cap inside the stencil (L=3, lam_max=0.3: a right gradient failed at 4e-3 until the
    // check took a smaller step where h and h/2 disagree; QA, session 24)
    Config keep = e.cfg;
    e.cfg.L = 3;
    e.cfg.lam_max = 0.3;
    e.cfg.loss_final = 0;
    f = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(engine_check_grad(&e, on, f, &ok, &err), 0);
    fclose(f);
    if (!ok || strstr(buf, "not compared")) print_error("%s\n", buf);
    assert_int_equal(ok, 1);
    // every tensor compared: a row the check could not make smooth is skipped, not failed, so
    // ok alone would pass a step search that never finds a smooth stencil (QA, session 37)
    assert_null(strstr(buf, "not compared"));
    assert_null(strstr(buf, "not smooth here"));
    e.cfg = keep;
#endif
    // an arm off (off=kda, or the live model's `:arm kda off`) is checked off: the mix without it
    // and its backward, its own rows with no gradient either way, said so (QA, session 37: the
    // arms were all on whatever was asked, and the header still said "arms off: kda"); with the
    // live config's moe_aux and Engram orders, named on the model line
    Config keep2 = e.cfg;
    e.cfg.moe_aux = 0.05;
    e.cfg.n_orders = 2;
    e.cfg.engram_orders[0] = 2;
    e.cfg.engram_orders[1] = 5;
    on[ARM_KDA] = 0;
    f = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(engine_check_grad(&e, on, f, &ok, &err), 0);
    fclose(f);
    on[ARM_KDA] = 1;
    e.cfg = keep2;
    assert_non_null(strstr(buf, " moe_aux=0.05 engram_orders=2,5\n"));
    assert_non_null(strstr(buf, "arms off: kda\n"));
    int nkda = 0;
    for (const char *row = buf; (row = strstr(row, "\n  kda.")); row++) {
        const char *eol = strchr(row + 1, '\n');
        const char *na = strstr(row, "n/a: its arm (kda) is off");
        if (!na || na > eol) print_error("a kda row with the arm off: %.*s\n", (int)(eol - row - 1), row + 1);
        assert_true(na && na < eol);
        nkda++;
    }
    assert_true(nkda >= 3);
#ifdef DM_DOUBLE
    if (!ok) print_error("%s\n", buf);
    assert_int_equal(ok, 1);  // the rest, without KDA, with moe_aux's gradient in it
#endif
    gradcheck_test_corrupt = P_HEAD;
    f = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(engine_check_grad(&e, on, f, &ok, &err), 0);
    fclose(f);
    gradcheck_test_corrupt = -1;
    assert_int_equal(ok, 0);
    const char *row = strstr(buf, "  head ");
    assert_non_null(row);
    assert_true(strstr(row, "FAIL") && strstr(row, "FAIL") < strchr(row, '\n'));
    engine_free(&e);
}

static void test_param_counts_nano(void **s) {
    (void)s;
    Config c;
    dm_err err = {0};
    assert_int_equal(config_preset(&c, "nano", &err), 0);
    Model m;
    assert_int_equal(model_create(&m, &c, backend_cpu(), 1, &err), 0);
    size_t comp, tab;
    model_param_counts(&m, &comp, &tab);
    print_message("nano: %zu compute + %zu table\n", comp, tab);
    assert_true(comp > 280000 && comp < 300000);  // SPEC table: 0.29M
    assert_int_equal(tab, 3 * 4096 * 16);          // 0.20M
    // U, V start orthonormal
    assert_true(model_orth_error(&m) < 1e-5);
    model_free(&m);
}

static void test_arms_counters_and_effect(void **s) {
    (void)s;
    Config c = tiny_config();
    Model m;
    dm_err err = {0};
    assert_int_equal(model_create(&m, &c, backend_cpu(), 3, &err), 0);
    randomize(&m, 4);
    Batch b = rand_batch(c.batch, c.seq, 5);
    double l_on = model_forward(&m, b.x, b.y, b.B, b.T, c.L, FWD_TRAIN);
    assert_int_equal(m.arms.fwd[ARM_KDA], c.L);
    model_backward(&m);
    assert_int_equal(m.arms.bwd[ARM_KDA], c.L);
    m.arms.on[ARM_KDA] = 0;
    double l_off = model_forward(&m, b.x, b.y, b.B, b.T, c.L, FWD_TRAIN);
    assert_int_equal(m.arms.fwd[ARM_KDA], c.L);  // did not run
    assert_true(fabs(l_on - l_off) > 1e-6);        // and the loss saw it
    model_backward(&m);
    assert_int_equal(m.arms.bwd[ARM_KDA], c.L);
    // gradients of an arm that is off are exactly zero
    for (size_t j = 0; j < m.t[P_WQ].numel; j++) assert_true(m.grads[m.t[P_WQ].offset + j] == 0);
    free(b.x); free(b.y);
    model_free(&m);
}

static void test_forward_deterministic(void **s) {
    (void)s;
    Config c = tiny_config();
    Model m1, m2;
    dm_err err = {0};
    model_create(&m1, &c, backend_cpu(), 9, &err);
    model_create(&m2, &c, backend_cpu(), 9, &err);
    assert_memory_equal(m1.params, m2.params, sizeof(real) * m1.n_params);
    Batch b = rand_batch(c.batch, c.seq, 5);
    model_forward(&m1, b.x, b.y, b.B, b.T, c.L, FWD_TRAIN); model_backward(&m1);
    model_forward(&m2, b.x, b.y, b.B, b.T, c.L, FWD_TRAIN); model_backward(&m2);
    assert_memory_equal(m1.grads, m2.grads, sizeof(real) * m1.n_params);
    assert_true(m1.last_loss == m2.last_loss);
    // all-depths forward: depth_loss[L-1] equals the FWD_LAST loss at full depth, and a
    // depth-1 eval equals depth_loss[0]
    model_forward(&m1, b.x, b.y, b.B, b.T, c.L, FWD_ALL_DEPTHS);
    double d0 = m1.depth_loss[0], dl = m1.depth_loss[c.L - 1];
    double last = model_forward(&m1, b.x, b.y, b.B, b.T, c.L, FWD_LAST);
    double first = model_forward(&m1, b.x, b.y, b.B, b.T, 1, FWD_LAST);
    assert_true(fabs(dl - last) < 1e-12 && fabs(d0 - first) < 1e-12);
    free(b.x); free(b.y);
    model_free(&m1); model_free(&m2);
}

// The TSCT factors U1, V1, U2, V2 are exactly the orthonormal (retracted) tensors, each starts with
// orthonormal columns, measured here directly rather than through the `orthonormal` flag the code
// itself uses (QA mutation, session 36: V2 dropped from the set started at zero, was never
// retracted and left model_orth_error, and every test passed)
static void test_moe_factors_orthonormal(void **s) {
    (void)s;
    Config c = tiny_config();
    Model m;
    dm_err err = {0};
    assert_int_equal(model_create(&m, &c, backend_cpu(), 5, &err), 0);
    const char *fac[] = {"moe.U1", "moe.V1", "moe.U2", "moe.V2"};
    int n_orth = 0;
    for (int i = 0; i < P_COUNT; i++) n_orth += m.t[i].orthonormal != 0;
    assert_int_equal(n_orth, 4);
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        int i = model_find_param(&m, fac[k]);
        assert_true(i >= 0);
        const ParamTensor *t = &m.t[i];
        if (!t->orthonormal) fail_msg("%s is not marked orthonormal", fac[k]);
        assert_int_equal(t->n_mats, c.E);
        assert_int_equal(t->cols, c.r);
        for (int e = 0; e < t->n_mats; e++) {
            double oe = orth_error(m.params + t->offset + (size_t)e * t->rows * t->cols, t->rows, t->cols);
            if (!(oe < 1e-5)) fail_msg("%s expert %d: orth error %g at init", fac[k], e, oe);
            if (oe > worst) worst = oe;
        }
    }
    assert_false(m.t[model_find_param(&m, "moe.s1")].orthonormal);
    assert_false(m.t[model_find_param(&m, "moe.s2")].orthonormal);
    assert_true(model_orth_error(&m) == worst);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts_nano),
        cmocka_unit_test(test_moe_factors_orthonormal),
        cmocka_unit_test(test_check_grad_command),
        cmocka_unit_test(test_arms_counters_and_effect),
        cmocka_unit_test(test_forward_deterministic),
#ifdef DM_DOUBLE
        cmocka_unit_test(test_grad_all_arms),
        cmocka_unit_test(test_grad_kda_off),
        cmocka_unit_test(test_grad_engram_off),
        cmocka_unit_test(test_grad_moe_off),
        cmocka_unit_test(test_grad_rezero_off),
        cmocka_unit_test(test_grad_aux_off),
        cmocka_unit_test(test_grad_loss_final_k1),
        cmocka_unit_test(test_grad_lam_capped),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
