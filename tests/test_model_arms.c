// test_model_arms.c — the whole model's state across forwards and backwards (QA mutation, session
// 38), where test_model.c checks one fresh forward and backward:
//   * an arm switched off after a backward with it on gives the gradients, bit for bit, of a model
//     that never ran with it on (`:arm moe off` mid-run is the documented live ablation), and a
//     second forward + backward on one batch gives the first one's gradients (nothing is
//     accumulated into a gradient buffer the backward did not clear);
//   * the per-iteration expert loads (:probe moe.load@i, :plot experts) at every depth, zeros with
//     moe off;
//   * a NaN in an orthonormal factor makes model_orth_error NaN wherever it sits.
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../engine/model.h"

// test_model.c's tiny model: every arm, L = 3 so that rows past the first iteration exist
static Config tiny_config(void) {
    Config c;
    config_defaults(&c);
    c.d = 8; c.H = 2; c.L = 3; c.E = 3; c.k = 2; c.r = 2; c.f = 6;
    c.engram_rows = 13; c.engram_dim = 3; c.n_orders = 2; c.engram_orders[0] = 1; c.engram_orders[1] = 3;
    c.seq = 9; c.batch = 2; c.kda_chunk = 4;
    c.moe_aux = 0.3;
    return c;
}

// A model with every parameter random and alpha = 0.5: with alpha at its init of 0 the block's
// gradients are multiplied away and a wrong block gradient reaches only the residual path.
static void make_model(Model *m, const Config *c, uint64_t seed) {
    dm_err err = {0};
    assert_int_equal(model_create(m, c, backend_cpu(), seed, &err), 0);
    real *p = malloc(sizeof(real) * m->n_params);
    Rng r = {seed + 1};
    fill_randn(p, m->n_params, 0.35, &r);
    p[m->t[P_ALPHA].offset] = (real)0.5;
    model_params_put(m, p);
    free(p);
}

static void rand_batch(int *x, int *y, int n, uint64_t seed) {
    Rng r = {seed};
    for (int i = 0; i < n; i++) { x[i] = (int)(rng_next(&r) % 256); y[i] = (int)(rng_next(&r) % 256); }
}

// forward + backward; the gradients (every tensor, host tables included) into g
static void fwd_bwd(Model *m, const int *x, const int *y, real *g) {
    model_forward(m, x, y, m->cfg.batch, m->cfg.seq, m->cfg.L, FWD_TRAIN);
    model_backward(m);
    model_grads_get(m, g);
}

// The first tensor whose gradients differ, and by how much (a failure says where it went wrong).
static void assert_same_grads(const Model *m, const real *a, const real *b, const char *when) {
    for (int i = 0; i < P_COUNT; i++) {
        const ParamTensor *t = &m->t[i];
        if (!memcmp(a + t->offset, b + t->offset, sizeof(real) * t->numel)) continue;
        double worst = 0;
        for (size_t j = 0; j < t->numel; j++) worst = fmax(worst, fabs((double)a[t->offset + j] - b[t->offset + j]));
        fail_msg("%s: gradient of %s differs (max |diff| %.3e)", when, t->name, worst);
    }
}

// Model A runs with every arm on, then with one arm off; model B (same weights, same batch) has
// that arm off from its first forward. Their gradients are the same bits: nothing the arm's last
// backward wrote is still read (QA mutation, session 38: with kda on and moe off, dproj's router
// columns kept the previous backward's dz, and the fused projection's gemm carried it into dn,
// every upstream tensor and the frozen router's gradient); and back on, those of a model always
// on. First, all on twice: the second forward + backward equals the first (a gradient buffer
// accumulated into without being cleared; engram_ram too: its host table gradient clears only
// the rows it wrote).
static void toggle_matches_fresh(int engram_ram) {
    Config c = tiny_config();
    c.engram_ram = engram_ram;
    int N = c.batch * c.seq, x[64], y[64];
    rand_batch(x, y, N, 21);
    Model a;
    make_model(&a, &c, 5);
    size_t n = a.n_params;
    real *ga = malloc(sizeof(real) * n), *gb = malloc(sizeof(real) * n);
    const int arms[] = {ARM_KDA, ARM_ENGRAM, ARM_MOE};
    char when[96];
    // two forwards and backwards on one batch, every arm on: the same gradients twice
    fwd_bwd(&a, x, y, ga);
    fwd_bwd(&a, x, y, gb);
    snprintf(when, sizeof when, "engram_ram=%d, the same batch twice", engram_ram);
    assert_same_grads(&a, ga, gb, when);
    for (int q = 0; q < 3; q++) {
        fwd_bwd(&a, x, y, ga);  // all on
        a.arms.on[arms[q]] = 0;
        fwd_bwd(&a, x, y, ga);
        Model b;
        make_model(&b, &c, 5);
        b.arms.on[arms[q]] = 0;
        fwd_bwd(&b, x, y, gb);
        snprintf(when, sizeof when, "engram_ram=%d, %s off after a backward with it on", engram_ram, dm_arm_names[arms[q]]);
        if (a.last_loss != b.last_loss) fail_msg("%s: loss %.17g, fresh %.17g", when, a.last_loss, b.last_loss);
        assert_same_grads(&a, ga, gb, when);
        // the arm back on after a backward with it off: the gradients of a model always on
        a.arms.on[arms[q]] = 1;
        fwd_bwd(&a, x, y, ga);
        model_free(&b);
        make_model(&b, &c, 5);
        fwd_bwd(&b, x, y, gb);
        snprintf(when, sizeof when, "engram_ram=%d, %s back on", engram_ram, dm_arm_names[arms[q]]);
        assert_same_grads(&a, ga, gb, when);
        model_free(&b);
    }
    free(ga); free(gb);
    model_free(&a);
}

static void test_arm_toggle_matches_fresh(void **s) {
    (void)s;
    toggle_matches_fresh(0);
    toggle_matches_fresh(1);
}

// The top-k experts of each of N tokens' router logits z [N, E], counted per expert (a recount,
// not the kernel's: ties are measure-zero with random weights).
static void recount(int *cnt, const real *z, int N, int E, int k) {
    memset(cnt, 0, sizeof(int) * E);
    for (int t = 0; t < N; t++) {
        unsigned chosen = 0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!(chosen >> e & 1) && (best < 0 || z[(size_t)t * E + e] > z[(size_t)t * E + best])) best = e;
            chosen |= 1u << best;
            cnt[best]++;
        }
    }
}

// expert_load [L, E] after a forward: row i holds iteration i's routed counts, N k assignments,
// the top-k of that iteration's logits (QA mutation, session 38: a download of the first row only,
// and every iteration counting into row 0, went unseen: the tests probed iteration 1). With moe
// off after a forward with it on, the loads and last_aux are zeros (model.h), not the last
// forward's with moe on.
static void test_expert_load_every_depth(void **s) {
    (void)s;
    Config c = tiny_config();
    int N = c.batch * c.seq, x[64], y[64];
    rand_batch(x, y, N, 31);
    Model m;
    make_model(&m, &c, 7);
    real *z = malloc(sizeof(real) * (size_t)N * c.E);
    int cnt[8];
    for (int depth = c.L; depth >= 1; depth -= c.L - 1) {  // the full depth, and depth 1
        model_forward(&m, x, y, c.batch, c.seq, depth, FWD_TRAIN);
        assert_true(m.last_aux > 0);
        for (int i = 0; i < c.L; i++) {
            int sum = 0;
            for (int e = 0; e < c.E; e++) sum += m.expert_load[i * c.E + e];
            if (i >= depth) {  // not run: no counts
                if (sum) fail_msg("depth %d: expert_load row %d sums to %d, iteration not run", depth, i, sum);
                continue;
            }
            if (sum != N * c.k) fail_msg("depth %d: expert_load row %d sums to %d, not N k = %d", depth, i, sum, N * c.k);
            m.be->download(z, m.acts.it[i].z, sizeof(real) * (size_t)N * c.E);
            recount(cnt, z, N, c.E, c.k);
            for (int e = 0; e < c.E; e++)
                if (m.expert_load[i * c.E + e] != cnt[e])
                    fail_msg("depth %d: expert_load[%d][%d] = %d, iteration %d's logits route %d", depth, i, e,
                             m.expert_load[i * c.E + e], i + 1, cnt[e]);
        }
    }
    // the logits differ between iterations (else row 0 standing for every row would pass)
    model_forward(&m, x, y, c.batch, c.seq, c.L, FWD_TRAIN);
    int differ = 0;
    for (int i = 1; i < c.L; i++) differ |= memcmp(m.expert_load, m.expert_load + i * c.E, sizeof(int) * c.E) != 0;
    assert_true(differ);
    m.arms.on[ARM_MOE] = 0;
    model_forward(&m, x, y, c.batch, c.seq, c.L, FWD_TRAIN);
    for (int j = 0; j < c.L * c.E; j++)
        if (m.expert_load[j]) fail_msg("moe off: expert_load[%d] = %d, the last forward with moe on's", j, m.expert_load[j]);
    if (m.last_aux != 0) fail_msg("moe off: last_aux %g", m.last_aux);
    free(z);
    model_free(&m);
}

// A NaN anywhere in an orthonormal factor: model_orth_error is NaN, never the finite factors'
// error around it (QA mutation, session 38: a NaN err lost every `err > worst` comparison and the
// counters line said a healthy orth_err). The first factor's first expert (finite ones are
// measured after it), and the last factor's last expert.
static void test_orth_error_nan(void **s) {
    (void)s;
    Config c = tiny_config();
    Model m;
    dm_err err = {0};
    assert_int_equal(model_create(&m, &c, backend_cpu(), 3, &err), 0);
    real *p = malloc(sizeof(real) * m.n_params), *keep = malloc(sizeof(real) * m.n_params);
    model_params_get(&m, keep);
    double clean = model_orth_error(&m);
    assert_true(clean >= 0 && clean < 1e-5);
    const ParamTensor *u1 = &m.t[P_U1], *v2 = &m.t[P_V2];
    size_t at[2] = {u1->offset + 1, v2->offset + v2->numel - 2};
    for (int q = 0; q < 2; q++) {
        memcpy(p, keep, sizeof(real) * m.n_params);
        p[at[q]] = NAN;
        model_params_put(&m, p);
        double oe = model_orth_error(&m);
        if (!isnan(oe)) fail_msg("a NaN in %s: model_orth_error %g", q ? "moe.V2's last expert" : "moe.U1's expert 0", oe);
    }
    model_params_put(&m, keep);
    assert_true(model_orth_error(&m) == clean);
    free(p); free(keep);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arm_toggle_matches_fresh),
        cmocka_unit_test(test_expert_load_every_depth),
        cmocka_unit_test(test_orth_error_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
