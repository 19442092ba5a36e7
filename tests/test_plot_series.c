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

// the panels of the last chart :plot drew: each series' points, copied
enum { PANELS = 8, SERIES = 16, POINTS = 512 };
static int seen_charts, seen_nseries[PANELS], seen_n[PANELS][SERIES];
static char seen_title[PANELS][120];
static double seen_x[PANELS][SERIES][POINTS], seen_y[PANELS][SERIES][POINTS];
int __wrap_viz_charts_png(const char *path, const VizChart *c, int ncharts, int width, int height, char *err, size_t n) {
    (void)path; (void)width; (void)height; (void)err; (void)n;
    seen_charts = ncharts;
    for (int p = 0; p < ncharts && p < PANELS; p++) {
        snprintf(seen_title[p], sizeof seen_title[p], "%s", c[p].title ? c[p].title : "");
        seen_nseries[p] = c[p].nseries;
        for (int k = 0; k < c[p].nseries && k < SERIES; k++) {
            seen_n[p][k] = c[p].series[k].n;
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

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dm_plot_series_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_metrics),
        cmocka_unit_test(test_repeated_eval_one_point),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return rc;
}
