// test_stress.c — the stress protocol (engine/stress.c, :stress; SPEC §7) on a tiny live model:
// interrupted before its first step it reports nothing and changes nothing; a run trains at a
// constant LR of X times the base from its first step (no warm-up, no cosine), counts and judges
// what it says it does, and gives the config back as it was.
#include <math.h>
#include <signal.h>
#include <string.h>
#include "engine_fixture.h"
#include "../engine/stress.h"

static char corpus[256];

static void tiny_engine(Engine *e) {
    dm_err err = {0};
    engine_init(e);
    assert_int_equal(config_preset(&e->cfg, "nano", &err), 0);
    e->cfg.d = 32; e->cfg.H = 2; e->cfg.f = 64; e->cfg.r = 8; e->cfg.seq = 32; e->cfg.batch = 2;
    e->cfg.kda_chunk = 16; e->cfg.engram_rows = 97; e->cfg.warmup = 50;  // warm-up and cosine on
    assert_int_equal(engine_open_data(e, corpus, NULL, &err), 0);
    assert_int_equal(engine_build(e, 5, &err), 0);
    MetricRow r;
    assert_int_equal(engine_step(e, &r, &err), 0);  // one ordinary step first: it has a history
}

static void same_schedule(const Config *a, const Config *b) {
    assert_memory_equal(&a->lr, &b->lr, sizeof a->lr);
    assert_memory_equal(&a->lr_muon, &b->lr_muon, sizeof a->lr_muon);
    assert_int_equal(a->lr_cosine, b->lr_cosine);
    assert_int_equal(a->warmup, b->warmup);
}

static void test_interrupted_before_first_step(void **st) {
    (void)st;
    Engine e;
    tiny_engine(&e);
    volatile sig_atomic_t flag = 1;  // Ctrl-C came before the first step
    e.interrupt = &flag;
    Config cfg0 = e.cfg;
    int64_t step0 = e.step, honored0 = e.intr_honored;
    int rows0 = e.nrows;
    real *p0 = params_of(&e);
    StressReport r;
    dm_err err = {0};
    assert_int_equal(engine_stress(&e, 4.0, 5, &r, &err), 0);
    assert_int_equal(r.done, 0);
    assert_true(r.interrupted);
    assert_int_equal(e.intr_honored, honored0 + 1);  // the transcript comments the line out
    assert_true(isnan(r.final_loss) && isnan(r.gnorm_p999));
    assert_int_equal(e.step, step0);
    assert_int_equal(e.nrows, rows0);
    same_schedule(&e.cfg, &cfg0);
    same_schedule(&e.model.cfg, &cfg0);
    real *p1 = params_of(&e);
    assert_memory_equal(p0, p1, sizeof(real) * e.model.n_params);
    free(p0); free(p1);
    engine_free(&e);
}

static void test_run_counts_and_restores(void **st) {
    (void)st;
    Engine e;
    tiny_engine(&e);
    volatile sig_atomic_t flag = 0;
    e.interrupt = &flag;
    Config cfg0 = e.cfg;
    int64_t step0 = e.step;
    int rows0 = e.nrows;
    const double mult = 3;
    StressReport r;
    dm_err err = {0};
    assert_int_equal(engine_stress(&e, mult, 12, &r, &err), 0);
    assert_int_equal(r.done, 12);
    assert_false(r.interrupted);
    assert_int_equal(e.step, step0 + 12);
    assert_int_equal(e.nrows, rows0 + 12);
    // every step at base x 3 from the first (in warm-up, at step 1 of 50, the schedule would
    // give 2 % of that)
    double gmax = 0;
    for (int i = rows0; i < e.nrows; i++) {
        const MetricRow *m = &e.rows[i];
        if (fabs(m->lr - mult * cfg0.lr) > 1e-12 * mult * cfg0.lr) print_error("row %d lr %g\n", i, m->lr);
        assert_true(fabs(m->lr - mult * cfg0.lr) <= 1e-12 * mult * cfg0.lr);
        assert_true(isfinite(m->loss));
        if (m->gnorm > gmax) gmax = m->gnorm;
    }
    // a step is judged with 10 earlier finite losses of the run: steps 11 and 12 of 12
    assert_int_equal(r.judged, 2);
    assert_true(r.spikes >= 0 && r.spikes <= r.judged);
    // the scatter printed beside the bar: 1.4826 x the median |loss[i] - loss[i-1]| / sqrt 2 of the
    // run's 11 consecutive pairs (QA, session 32), recomputed from its rows
    double d[11];
    for (int i = 0; i < 11; i++) d[i] = fabs(e.rows[rows0 + i + 1].loss - e.rows[rows0 + i].loss);
    for (int a = 1; a < 11; a++)
        for (int b = a; b > 0 && d[b] < d[b - 1]; b--) { double t = d[b]; d[b] = d[b - 1]; d[b - 1] = t; }
    double want = 1.4826 / sqrt(2.0) * d[5];
    if (!(fabs(r.noise - want) <= 1e-12 * want)) print_error("noise %g, want %g\n", r.noise, want);
    assert_true(want > 0 && fabs(r.noise - want) <= 1e-12 * want);
    assert_int_equal(r.nonfinite, 0);
    assert_int_equal(r.gnorm_bad, 0);
    assert_memory_equal(&r.gnorm_p999, &gmax, sizeof gmax);  // n <= 1000: the largest norm
    assert_memory_equal(&r.final_loss, &e.rows[e.nrows - 1].loss, sizeof(double));
    for (int k = 0; k < 3; k++) assert_true(r.amax[k] > 0 && isfinite(r.amax[k]));
    same_schedule(&e.cfg, &cfg0);
    same_schedule(&e.model.cfg, &cfg0);
    // the next ordinary step is back on the schedule (in warm-up: below the base)
    MetricRow m;
    assert_int_equal(engine_step(&e, &m, &err), 0);
    assert_true(m.lr < cfg0.lr);
    engine_free(&e);
}

// skipped is the run's own count, as every other number of the report (the model's total was
// printed: a clean run after one with skips said it skipped them: QA, session 24)
static void test_skipped_is_the_runs(void **st) {
    (void)st;
    Engine e;
    tiny_engine(&e);
    real *p = e.model.params + e.model.t[P_WK].offset;  // (the CPU backend: host memory)
    real keep = *p;
    *p = (real)NAN;  // every step's loss is NaN: the firewall skips it
    StressReport r;
    dm_err err = {0};
    assert_int_equal(engine_stress(&e, 1.0, 3, &r, &err), 0);
    assert_int_equal(r.done, 3);
    assert_int_equal(r.skipped, 3);
    assert_int_equal(r.nonfinite, 3);
    *p = keep;
    assert_int_equal(engine_stress(&e, 1.0, 2, &r, &err), 0);
    assert_int_equal(r.skipped, 0);
    assert_int_equal(e.opt.total_skips, 3);
    engine_free(&e);
}

static void test_arm_off_has_no_maximum(void **st) {
    (void)st;
    Engine e;
    tiny_engine(&e);
    e.model.arms.on[ARM_MOE] = 0;
    StressReport r;
    dm_err err = {0};
    assert_int_equal(engine_stress(&e, 1.0, 2, &r, &err), 0);
    assert_int_equal(r.done, 2);
    assert_true(r.amax[0] > 0 && r.amax[1] > 0);
    assert_true(r.amax[2] == 0);
    engine_free(&e);
}

// The spike rule's median (QA, session 21: an even window used its upper middle value, so a
// loss between the true median + 0.1 and the upper value + 0.1 was missed)
static void test_spike_median(void **st) {
    (void)st;
    double loss[300];
    int spike = -1;
    for (int a = 0; a < 10; a++) loss[a] = a < 5 ? 1.0 : 2.0;  // 10 losses: middle two 1 and 2, median 1.5
    loss[10] = 1.65;
    assert_int_equal(stress_judge(loss, 10, &spike), 1);
    assert_int_equal(spike, 1);
    loss[10] = 1.55;
    assert_int_equal(stress_judge(loss, 10, &spike), 1);
    assert_int_equal(spike, 0);
    for (int a = 0; a < 11; a++) loss[a] = a;  // 11 losses 0..10: median 5
    loss[11] = 5.11;
    assert_int_equal(stress_judge(loss, 11, &spike), 1);
    assert_int_equal(spike, 1);
    loss[11] = 5.09;
    assert_int_equal(stress_judge(loss, 11, &spike), 1);
    assert_int_equal(spike, 0);
    loss[3] = NAN;  // 10 finite left (0..10 without 3): median (5 + 6) / 2
    assert_int_equal(stress_judge(loss, 11, &spike), 1);
    assert_int_equal(spike, 0);
    loss[11] = 5.61;
    assert_int_equal(stress_judge(loss, 11, &spike), 1);
    assert_int_equal(spike, 1);
    loss[4] = NAN;  // 9 finite: not judged
    assert_int_equal(stress_judge(loss, 11, &spike), 0);
    // the window is the last 201: losses before it do not count
    for (int a = 0; a < 300; a++) loss[a] = a < 99 ? 100.0 : 1.0;
    loss[299] = 1.05;
    assert_int_equal(stress_judge(loss, 299, &spike), 1);
    assert_int_equal(spike, 0);
    // the window's edge: 200 losses in two shuffled clusters (low in [1, 1.2), high in [2, 2.2)),
    // an outlier 201 back from step i, and older losses at 50 before it. The outlier is in the
    // window and decides which cluster holds the median (an odd 201: the 101st smallest); a
    // window of 200 would take the mean of the clusters' edges (~1.6), one of 202 a loss of 50 too
    Rng r = {314};
    double cl[200], lmax = 0, hmin = 9;
    for (int a = 0; a < 200; a++) {
        cl[a] = (a < 100 ? 1.0 : 2.0) + 0.2 * rng_uniform(&r);
        if (a < 100 && cl[a] > lmax) lmax = cl[a];
        if (a >= 100 && cl[a] < hmin) hmin = cl[a];
    }
    for (int a = 199; a > 0; a--) {
        int b = (int)(rng_next(&r) % (uint64_t)(a + 1));
        double t = cl[a]; cl[a] = cl[b]; cl[b] = t;
    }
    const struct { double outlier, probe; int want; } cs[] = {
        {5.0, hmin - 0.05, 0},   // median hmin: the probe is under it + 0.1 (a window of 200: a spike)
        {0.5, lmax + 0.15, 1},   // median lmax: the probe is over it + 0.1 (200 or 202: none)
    };
    for (unsigned c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int i = 250;
        for (int a = 0; a < i - 201; a++) loss[a] = 50.0;
        loss[i - 201] = cs[c].outlier;
        for (int a = i - 200; a < i; a++) loss[a] = cl[a - (i - 200)];
        loss[i] = cs[c].probe;
        spike = -1;
        assert_int_equal(stress_judge(loss, i, &spike), 1);
        if (spike != cs[c].want) print_error("outlier %g 201 back: loss %g judged %s\n", cs[c].outlier, cs[c].probe, spike ? "a spike" : "none");
        assert_int_equal(spike, cs[c].want);
    }
}

// The p99.9 :stress reports, nearest rank (the ceil(0.999 n)-th smallest): the largest for
// n < 1000, the second largest at 1000, the third at 2000 (QA37: every test ran 12 steps, where
// it is the maximum). Shuffled distinct values, so the rank is read off their order.
static void test_p999_nearest_rank(void **st) {
    (void)st;
    Rng r = {2718};
    const long long ns[] = {1, 2, 999, 1000, 1001, 2000, 5000};
    const long long want_rank[] = {1, 2, 999, 999, 1000, 1998, 4995};
    for (unsigned c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        long long n = ns[c];
        double *x = malloc(sizeof(double) * (size_t)n);
        for (long long a = 0; a < n; a++) x[a] = 0.25 * (double)a - 7;  // the k-th smallest is 0.25 (k - 1) - 7
        for (long long a = n - 1; a > 0; a--) {
            long long b = (long long)(rng_next(&r) % (uint64_t)(a + 1));
            double t = x[a]; x[a] = x[b]; x[b] = t;
        }
        double got = stress_nearest_rank(x, n, 0.999), want = 0.25 * (double)(want_rank[c] - 1) - 7;
        if (got != want) print_error("n %lld: p99.9 %g, want the %lld-th smallest %g\n", n, got, want_rank[c], want);
        assert_true(got == want);
        for (long long a = 1; a < n; a++) assert_true(x[a - 1] < x[a]);  // sorted in place, as said
        free(x);
    }
    double none[1] = {1};
    assert_true(isnan(stress_nearest_rank(none, 0, 0.999)));
    double two[2] = {3, -1};
    assert_true(stress_nearest_rank(two, 2, 0.5) == -1);  // ceil(1) = the 1st
}

static void test_needs_a_model(void **st) {
    (void)st;
    Engine e;
    engine_init(&e);
    StressReport r;
    dm_err err = {0};
    assert_int_equal(engine_stress(&e, 2.0, 3, &r, &err), 1);
    assert_non_null(strstr(err.msg, "no model"));
    assert_int_equal(r.done, 0);
    engine_free(&e);
}

int main(void) {
    make_corpus(corpus, sizeof corpus);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interrupted_before_first_step),
        cmocka_unit_test(test_run_counts_and_restores),
        cmocka_unit_test(test_skipped_is_the_runs),
        cmocka_unit_test(test_arm_off_has_no_maximum),
        cmocka_unit_test(test_needs_a_model),
        cmocka_unit_test(test_spike_median),
        cmocka_unit_test(test_p999_nearest_rank),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    remove(corpus);
    return rc;
}
