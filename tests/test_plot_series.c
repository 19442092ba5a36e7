// test_plot_series.c — the numbers :plot hands viz, not the pixels (test_plot.c checks those):
// each train metric's series holds that metric of the kept train rows, and an eval repeated at
// one step is one point, the later row's. Mutation testing (QA, session 36) found `:plot lr`
// drawing gnorm and a repeated eval drawn twice at one x unnoticed. The Makefile links this test
// with --wrap=viz_charts_png: the charts are recorded, not drawn (no PNG library needed).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../repl/shell.h"
#include "../viz/plot.h"

int cmd_plot(Shell *sh, Words *w, dm_err *err);

// the panels of the last chart :plot drew: each series' points (and label), each reference
// line's height and label, and whether the y axis is log, copied
enum { PANELS = 8, SERIES = 32, POINTS = 512, REFS = 4 };
static int seen_charts, seen_nseries[PANELS], seen_n[PANELS][SERIES], seen_logy[PANELS], seen_nrefs[PANELS];
static char seen_title[PANELS][120], seen_label[PANELS][SERIES][64], seen_ref_label[PANELS][REFS][64];
static double seen_x[PANELS][SERIES][POINTS], seen_y[PANELS][SERIES][POINTS], seen_ref_y[PANELS][REFS];
int __wrap_viz_charts_png(const char *path, const VizChart *c, int ncharts, int width, int height, char *err, size_t n) {
    (void)path; (void)width; (void)height; (void)err; (void)n;
    seen_charts = ncharts;
    for (int p = 0; p < ncharts && p < PANELS; p++) {
        snprintf(seen_title[p], sizeof seen_title[p], "%s", c[p].title ? c[p].title : "");
        seen_nseries[p] = c[p].nseries;
        seen_logy[p] = c[p].logy;
        seen_nrefs[p] = c[p].nrefs;
        for (int r = 0; r < c[p].nrefs && r < REFS; r++) {
            seen_ref_y[p][r] = c[p].refs[r].y;
            snprintf(seen_ref_label[p][r], sizeof seen_ref_label[p][r], "%s", c[p].refs[r].label ? c[p].refs[r].label : "");
        }
        for (int k = 0; k < c[p].nseries && k < SERIES; k++) {
            seen_n[p][k] = c[p].series[k].n;
            snprintf(seen_label[p][k], sizeof seen_label[p][k], "%s", c[p].series[k].label ? c[p].series[k].label : "");
            for (int i = 0; i < c[p].series[k].n && i < POINTS; i++) {
                seen_x[p][k][i] = c[p].series[k].x[i];
                seen_y[p][k][i] = c[p].series[k].y[i];
            }
        }
    }
    return 0;
}

static Engine eng;
static char dir[64];

static void plot(const char *args) {
    char buf[600];
    snprintf(buf, sizeof buf, ":plot %s out=%s/p.png", args, dir);
    Words w = {0};
    for (char *tok = strtok(buf, " "); tok && w.argc < SH_MAX_WORDS; tok = strtok(NULL, " ")) w.argv[w.argc++] = tok;
    FILE *f = tmpfile();
    Shell sh = {.eng = &eng, .out = f, .src = "-e"};
    dm_err err = {0};
    seen_charts = 0;
    int rc = cmd_plot(&sh, &w, &err);
    fclose(f);
    if (rc) fail_msg(":plot %s: %s", args, err.msg);
    assert_true(seen_charts > 0);
}

// 60 train steps whose loss, lr, gnorm and tok_s all differ (no two metrics share a value)
static void fill_train(int nsteps) {
    engine_init(&eng);
    for (int s = 0; s < nsteps; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 256;
        r.loss = 3.0 - 0.01 * s; r.lr = 1e-3 * (s + 1) / nsteps; r.gnorm = 0.5 + 0.02 * s;
        r.ms = 10 + s % 3; r.tok_s = 256 / (r.ms / 1e3);
        engine_add_row(&eng, &r);
    }
    eng.step = nsteps; eng.tokens = (int64_t)nsteps * 256;
}

// :plot loss,lr,gnorm,tok_s: panel p, series 0, point k is rows[k]'s own metric, at x = its step
static void test_train_metrics(void **state) {
    (void)state;
    fill_train(60);
    plot("loss,lr,gnorm,tok_s");
    assert_int_equal(seen_charts, 4);
    for (int p = 0; p < 4; p++) {
        assert_true(seen_nseries[p] >= 1);
        assert_int_equal(seen_n[p][0], 60);
        for (int k = 0; k < 60; k++) {
            const MetricRow *r = &eng.rows[k];
            double want = p == 0 ? r->loss : p == 1 ? r->lr : p == 2 ? r->gnorm : r->tok_s;
            if (seen_y[p][0][k] != want) print_error("panel %d (%s) point %d: %g, want %g\n", p, seen_title[p], k, seen_y[p][0][k], want);
            assert_true(seen_y[p][0][k] == want);
            assert_true(seen_x[p][0][k] == (double)r->step);
        }
    }
    // one metric alone draws the same numbers
    const char *one[] = {"lr", "gnorm", "tok_s"};
    for (int m = 0; m < 3; m++) {
        plot(one[m]);
        assert_int_equal(seen_charts, 1);
        for (int k = 0; k < 60; k++) {
            const MetricRow *r = &eng.rows[k];
            assert_true(seen_y[0][0][k] == (m == 0 ? r->lr : m == 1 ? r->gnorm : r->tok_s));
        }
    }
    engine_free(&eng);
}

// an eval repeated at one step (a rewind, a second :eval): the depth's curve has one point
// there, the later row's bpb (cmd_plot.c: "the later row stands")
static void test_repeated_eval_one_point(void **state) {
    (void)state;
    fill_train(40);
    int64_t steps[] = {10, 20, 20, 30};
    double bpb[] = {3.0, 2.8, 2.6, 2.4};  // the second eval at step 20 stands
    for (int i = 0; i < 4; i++) {
        MetricRow ev = {0};
        ev.kind = 1; ev.step = steps[i]; ev.tokens = steps[i] * 256; ev.window = 4096; ev.depth = 2; ev.bpb = bpb[i];
        engine_add_row(&eng, &ev);
    }
    plot("bpb");
    assert_int_equal(seen_nseries[0], 1);
    assert_int_equal(seen_n[0][0], 3);
    double wx[] = {10, 20, 30}, wy[] = {3.0, 2.6, 2.4};
    for (int k = 0; k < 3; k++) {
        if (seen_x[0][0][k] != wx[k] || seen_y[0][0][k] != wy[k]) print_error("point %d: (%g, %g)\n", k, seen_x[0][0][k], seen_y[0][0][k]);
        assert_true(seen_x[0][0][k] == wx[k]);
        assert_true(seen_y[0][0][k] == wy[k]);
    }
    engine_free(&eng);
}

// A resume (or :bench, :check) logs steps again: the later rows stand and the earlier rows at or
// after their step go (cmd_plot.c build_timeline). Mutation testing (QA, session 37): keeping
// them drew :plot loss zigzagging back in x, and x=time counted the steps twice.
static void test_rewound_rows_dropped(void **state) {
    (void)state;
    fill_train(60);
    for (int s = 30; s < 60; s++) {  // the same steps again, each loss 1 higher
        MetricRow r = eng.rows[s];
        r.loss += 1;
        engine_add_row(&eng, &r);
    }
    plot("loss");
    assert_int_equal(seen_n[0][0], 60);
    for (int k = 1; k < 60; k++) assert_true(seen_x[0][0][k] > seen_x[0][0][k - 1]);
    for (int k = 0; k < 60; k++) {
        double want = eng.rows[k < 30 ? k : k + 30].loss;  // steps 30..59: the second rows
        if (seen_y[0][0][k] != want) print_error("point %d: %g, want %g\n", k, seen_y[0][0][k], want);
        assert_true(seen_y[0][0][k] == want);
    }
    assert_true(seen_y[0][0][45] == eng.rows[75].loss);
    engine_free(&eng);
}

// x=tokens plots each row's tokens; x=time the seconds at the end of each step (the running sum
// of ms / 1e3), and an eval after step s at the time steps 0..s-1 took. Mutation testing (QA,
// session 37): steps under "tokens (bytes) seen", milliseconds under "training time (s)", and
// evals one step late all passed.
static void test_x_tokens_and_time(void **state) {
    (void)state;
    fill_train(60);
    Rng rng = {.s = 37};
    for (int k = 0; k < 60; k++) {  // uneven steps: each its own time
        eng.rows[k].ms = 5 + 30 * rng_uniform(&rng);
        eng.rows[k].tokens = (int64_t)(k + 1) * 256 + (int64_t)(1000 * rng_uniform(&rng));
    }
    MetricRow ev = {0};
    ev.kind = 1; ev.step = 20; ev.tokens = eng.rows[19].tokens; ev.window = 4096; ev.depth = 2; ev.bpb = 2.5;
    engine_add_row(&eng, &ev);
    plot("loss x=tokens");
    assert_int_equal(seen_n[0][0], 60);
    for (int k = 0; k < 60; k++) {
        if (seen_x[0][0][k] != (double)eng.rows[k].tokens) print_error("x=tokens point %d: %g, want %lld\n", k, seen_x[0][0][k], (long long)eng.rows[k].tokens);
        assert_true(seen_x[0][0][k] == (double)eng.rows[k].tokens);
    }
    plot("loss x=time");
    double t = 0, t20 = 0;
    for (int k = 0; k < 60; k++) {
        t += eng.rows[k].ms / 1e3;
        if (k == 19) t20 = t;
        if (fabs(seen_x[0][0][k] - t) > 1e-9) print_error("x=time point %d: %.12g s, want %.12g s\n", k, seen_x[0][0][k], t);
        assert_true(fabs(seen_x[0][0][k] - t) <= 1e-9);
    }
    plot("bpb x=time");
    assert_int_equal(seen_n[0][0], 1);
    if (fabs(seen_x[0][0][0] - t20) > 1e-9) print_error("eval after step 20 at %.12g s, want %.12g s (steps 0..19)\n", seen_x[0][0][0], t20);
    assert_true(fabs(seen_x[0][0][0] - t20) <= 1e-9);
    engine_free(&eng);
}

// :plot bpb draws the anchors of the eval set: unigram and 5-gram lines, each at its own bpb,
// labelled with it. Mutation testing (QA, session 37): the 5-gram line drawn at the unigram's
// height, under its right label, passed.
static void test_bpb_anchor_heights(void **state) {
    (void)state;
    fill_train(40);
    for (int s = 10; s <= 40; s += 10) {
        MetricRow ev = {0};
        ev.kind = 1; ev.step = s; ev.tokens = s * 256; ev.window = 65536; ev.depth = 2; ev.bpb = 4.0 - 0.03 * s;
        engine_add_row(&eng, &ev);
    }
    eng.has_anchors = 1;
    eng.anchors.unigram_bpb = 4.9; eng.anchors.kn5_bpb = 2.2; eng.anchors.window_bytes = 65536;
    plot("bpb");
    assert_int_equal(seen_nrefs[0], 2);
    assert_string_equal(seen_ref_label[0][0], "unigram 4.900");
    assert_true(seen_ref_y[0][0] == 4.9);
    assert_string_equal(seen_ref_label[0][1], "5-gram 2.200");
    if (seen_ref_y[0][1] != 2.2) print_error("5-gram line at %g, want 2.2\n", seen_ref_y[0][1]);
    assert_true(seen_ref_y[0][1] == 2.2);
    engine_free(&eng);
}

// 100 train rows or more: the loss panel is a light per-step trace under the debiased EMA,
// m_k / (1 - (1-a)^(k+1)) with a = 2 / (span + 1), on a log axis by default. Mutation testing
// (QA, session 37): the EMA not debiased (a line starting near 0) and the loss panel on a linear
// axis both passed (the tests had 60 rows).
static void test_loss_ema_debiased(void **state) {
    (void)state;
    fill_train(200);
    Rng rng = {.s = 2024};
    for (int k = 0; k < 200; k++) eng.rows[k].loss = 3.0 - 0.005 * k + 0.4 * rng_normal(&rng);
    plot("loss");
    assert_int_equal(seen_nseries[0], 2);
    assert_string_equal(seen_label[0][1], "EMA over 5 steps");  // span = 200 / 40
    assert_int_equal(seen_logy[0], 1);
    double a = 2.0 / (5 + 1), m = 0, w = 0;
    for (int k = 0; k < 200; k++) {
        m = (1 - a) * m + a * eng.rows[k].loss;
        w = (1 - a) * w + a;
        double want = m / w;
        if (fabs(seen_y[0][1][k] - want) > 1e-12 * fabs(want)) print_error("EMA point %d: %.15g, want %.15g\n", k, seen_y[0][1][k], want);
        assert_true(fabs(seen_y[0][1][k] - want) <= 1e-12 * fabs(want));
    }
    plot("loss log=off");  // (log= still chooses)
    assert_int_equal(seen_logy[0], 0);
    plot("lr");
    assert_int_equal(seen_logy[0], 0);
    engine_free(&eng);
}

// experts over training: each step's share per expert in % (the axis says "%"), against a
// uniform 100/E % line; experts of the last forward: its loads per iteration, against the mean
// load per expert of one iteration. Mutation testing (QA, session 37): shares drawn as fractions
// and the uniform line L times too high both passed.
static void test_experts_units(void **state) {
    (void)state;
    fill_train(50);
    int E = 4;
    eng.cfg.E = E; eng.cfg.k = 2;
    Rng rng = {.s = 99};
    for (int k = 0; k < 50; k++) {
        float f[4], sum = 0;
        for (int j = 0; j < E; j++) { f[j] = (float)(0.2 + rng_uniform(&rng)); sum += f[j]; }
        for (int j = 0; j < E; j++) eng.rows[k].expert_frac[j] = f[j] / sum;
    }
    plot("experts");
    assert_int_equal(seen_nseries[0], E);
    for (int j = 0; j < E; j++)
        for (int k = 0; k < 50; k++) {
            double want = 100.0 * eng.rows[k].expert_frac[j];
            if (seen_y[0][j][k] != want) print_error("expert %d step %d: %g, want %g %%\n", j, k, seen_y[0][j][k], want);
            assert_true(seen_y[0][j][k] == want);
        }
    assert_true(seen_ref_y[0][0] == 25.0);
    engine_free(&eng);
    // no history: the last forward's [L, E] loads on a faked live model
    engine_init(&eng);
    int L = 3;
    E = 8;
    eng.live = 1; eng.cfg.L = L; eng.cfg.E = E; eng.cfg.k = 2; eng.model.last_depth = L;
    eng.fwd_kind = 1; eng.model.last_on[ARM_MOE] = 1;
    eng.model.expert_load = calloc((size_t)L * E, sizeof(int));
    long total = 0;
    for (int i = 0; i < L * E; i++) total += eng.model.expert_load[i] = 100 + (int)(900 * rng_uniform(&rng));
    plot("experts");
    assert_int_equal(seen_nseries[0], L);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < E; j++) assert_true(seen_y[0][i][j] == eng.model.expert_load[i * E + j]);
    double want = (double)total / L / E;
    if (seen_ref_y[0][0] != want) print_error("uniform line at %g, want %g\n", seen_ref_y[0][0], want);
    assert_true(seen_ref_y[0][0] == want);
    free(eng.model.expert_load);
    eng.model.expert_load = NULL;
    eng.live = 0;
    engine_free(&eng);
}

// :plot depths draws at most 24 :eval-depths, an even subsample that keeps the first and the
// last. Mutation testing (QA, session 37): the first 24 kept (the newest evals gone, under "24 of
// 30 evals shown") passed.
static void test_depths_subsample(void **state) {
    (void)state;
    fill_train(300);
    for (int g = 1; g <= 30; g++)
        for (int d = 1; d <= 3; d++) {
            MetricRow ev = {0};
            ev.kind = 1; ev.step = 10 * g; ev.tokens = 2560 * g; ev.window = 4096; ev.depth = d; ev.bpb = 4.0 - 0.02 * g + 0.3 / d;
            engine_add_row(&eng, &ev);
        }
    plot("depths");
    assert_int_equal(seen_nseries[0], 24);
    assert_string_equal(seen_label[0][0], "step 10");
    if (strcmp(seen_label[0][23], "step 300")) print_error("last series '%s', want 'step 300'\n", seen_label[0][23]);
    assert_string_equal(seen_label[0][23], "step 300");
    for (int d = 0; d < 3; d++) assert_true(seen_y[0][23][d] == 4.0 - 0.02 * 30 + 0.3 / (d + 1));
    engine_free(&eng);
}

// :plot depths when the latest eval set has no :eval-depths but an earlier set has one (the eval
// window changed after it: :set eval_bytes, then :eval): it said "run :eval-depths" right after one
// ran, with no word of the sets (QA, session 41). It names them now; one set keeps the short words.
static void test_depths_in_an_earlier_set(void **state) {
    (void)state;
    fill_train(20);
    MetricRow ev = {0};
    ev.kind = 1; ev.step = 20; ev.tokens = 5120; ev.window = 4096; ev.eval_set = 0x1111;
    for (int d = 1; d <= 2; d++) { ev.depth = d; ev.bpb = 4.0 + 0.1 * d; engine_add_row(&eng, &ev); }
    ev.window = 1024; ev.eval_set = 0x2222; ev.depth = 2; ev.bpb = 4.05;
    engine_add_row(&eng, &ev);
    char buf[200];
    snprintf(buf, sizeof buf, ":plot depths out=%s/p.png", dir);
    Words w = {0};
    for (char *tok = strtok(buf, " "); tok && w.argc < SH_MAX_WORDS; tok = strtok(NULL, " ")) w.argv[w.argc++] = tok;
    FILE *f = tmpfile();
    Shell sh = {.eng = &eng, .out = f, .src = "-e"};
    dm_err err = {0};
    assert_int_equal(cmd_plot(&sh, &w, &err), 1);
    fclose(f);
    assert_string_equal(err.msg, "nothing to plot yet: no eval of the latest of 2 eval sets (the window evals score now) scored several depths; "
                                 ":eval-depths scores it (an earlier set's depths are not drawn with it)");
    engine_free(&eng);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dm_plot_series_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_metrics),
        cmocka_unit_test(test_repeated_eval_one_point),
        cmocka_unit_test(test_rewound_rows_dropped),
        cmocka_unit_test(test_x_tokens_and_time),
        cmocka_unit_test(test_bpb_anchor_heights),
        cmocka_unit_test(test_loss_ema_debiased),
        cmocka_unit_test(test_experts_units),
        cmocka_unit_test(test_depths_subsample),
        cmocka_unit_test(test_depths_in_an_earlier_set),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return rc;
}
