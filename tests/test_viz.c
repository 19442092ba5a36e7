// test_viz.c — the chart code's rules that need no PNG: tick labels (viz/ticks.c) and the data
// range a chart is drawn over (viz_chart_range); and the temp files of a PNG write (skipped in a
// build without stb).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"
#include "../viz/plot.h"
#include "../viz/ticks.h"

#include "stb_image_impl.h"

// QA, session 23 (under UBSan): a finite value near 1e37 on a linear axis (a diverging run's
// gnorm) wrote its SI suffix past the 24-byte label. Sessions 31: log-axis labels.
static void test_tick_labels(void **state) {
    (void)state;
    VizTicks t;
    viz_ticks(0, 3e38, 5, 0, 0, &t);
    assert_true(t.n >= 2);
    for (int i = 0; i < t.n; i++) assert_true(strlen(t.lab[i]) < 12);
    assert_non_null(strstr(t.factor, "1e38"));
    viz_ticks(0, 5e6, 5, 0, 0, &t);  // the SI range keeps its suffixes
    assert_non_null(strchr(t.lab[t.n - 1], 'M'));
    // log-axis labels (QA, session 31: "1000" among "1M, 1G", and "1e+03P" ... "1e+282P" past P)
    static const struct { double v; const char *want; } lab[] = {
        {1e3, "1k"}, {2e3, "2k"}, {1.5e3, "1.5k"}, {999, "999"}, {1e6, "1M"}, {1e15, "1P"}, {5e17, "500P"},
        {1e18, "1e18"}, {2.5e20, "2.5e20"}, {1e282, "1e282"}, {-1e21, "-1e21"}, {2e-5, "2e-5"}, {0.5, "0.5"}};
    for (size_t i = 0; i < sizeof lab / sizeof *lab; i++) {
        char b[24];
        viz_fmt_compact(lab[i].v, b, sizeof b);
        if (strcmp(b, lab[i].want)) print_error("viz_fmt_compact(%g) = '%s', want '%s'\n", lab[i].v, b, lab[i].want);
        assert_string_equal(b, lab[i].want);
    }
    // log ticks close together keep apart (review, session 31: "1k 1k 1.01k" for 1000..1012)
    static const double span[][2] = {{1000, 1012}, {5000, 5020}, {1234, 1246}, {0.5, 0.503}, {2e-5, 2.01e-5}, {1e20, 1.001e20}};
    for (size_t i = 0; i < sizeof span / sizeof *span; i++) {
        viz_ticks(span[i][0], span[i][1], 5, 0, 1, &t);
        assert_true(t.n >= 2);
        for (int j = 0; j + 1 < t.n; j++) {
            if (!strcmp(t.lab[j], t.lab[j + 1])) print_error("%g..%g: ticks %g and %g both '%s'\n", span[i][0], span[i][1], t.v[j], t.v[j + 1], t.lab[j]);
            assert_string_not_equal(t.lab[j], t.lab[j + 1]);
        }
    }
    // (and a mantissa stays in [1, 10) with the digits added: "0.995e-3" was printed; review)
    viz_ticks(9.94e-4, 9.99e-4, 5, 0, 1, &t);
    for (int j = 0; j < t.n; j++) {
        if (t.lab[j][0] == '0') print_error("tick %g labelled '%s'\n", t.v[j], t.lab[j]);
        assert_true(t.lab[j][0] != '0');
    }
    viz_ticks(9.9955e5, 9.9985e5, 5, 0, 1, &t);
    for (int j = 0; j < t.n; j++) {
        if (t.lab[j][0] == '0') print_error("tick %g labelled '%s'\n", t.v[j], t.lab[j]);
        assert_true(t.lab[j][0] != '0');
    }
    viz_ticks(1, 1e25, 10, 0, 1, &t);  // decades up to 1e25: no label mixes a suffix and an exponent
    for (int i = 0; i < t.n; i++) assert_true(!strchr(t.lab[i], 'P') || !strchr(t.lab[i], 'e'));
}

static void range_of(const double *x, const double *y, int n, int xint, double r[4]) {
    VizSeries s = {.label = "s", .x = x, .y = y, .n = n, .rgb = 0x1f77b4};
    VizChart c = {.title = "t", .series = &s, .nseries = 1, .xint = xint};
    char msg[256] = "";
    if (viz_chart_range(&c, r, msg, sizeof msg)) fail_msg("%s", msg);
}

// QA, session 31: an lr of 0 all along drew a chart from -1.1 to 1.1 (negative ticks under a
// quantity that cannot be negative), and a chart of step 0 alone had a tick at step -1.
static void test_chart_ranges(void **state) {
    (void)state;
    double r[4];
    // all zero: 0..1 with its small margin, nothing near -1
    double x3[3] = {0, 10, 20}, z3[3] = {0, 0, 0};
    range_of(x3, z3, 3, 0, r);
    if (!(r[2] > -0.1 && r[2] < 0 && r[3] >= 1)) print_error("all-zero series: y %g..%g, want about -0.06..1.06\n", r[2], r[3]);
    assert_true(r[2] > -0.1 && r[2] < 0 && r[3] >= 1);
    // a constant non-zero series: 5 % either side, its sign kept
    double c3[3] = {2, 2, 2};
    range_of(x3, c3, 3, 0, r);
    assert_true(r[2] > 1.8 && r[2] < 1.9 && r[3] > 2.1 && r[3] < 2.2);
    // one x at 0: the range does not reach step -1 (its margin alone, a fraction of a step)
    double x1[1] = {0}, y1[1] = {4.2};
    range_of(x1, y1, 1, 0, r);
    if (!(r[0] > -0.1 && r[1] > 0)) print_error("one x at 0: x %g..%g, want about -0.01..0.51\n", r[0], r[1]);
    assert_true(r[0] > -0.1 && r[1] > 0);
    range_of(x1, y1, 1, 1, r);   // an integer axis (depth, expert) likewise
    assert_true(r[0] > -0.5 && r[1] >= 1);
    // one negative x keeps a range around it on both sides
    double xn[1] = {-3};
    range_of(xn, y1, 1, 0, r);
    assert_true(r[0] < -3.1 && r[1] > -2.9);
    // one x far above 0: 5 % around it
    double xb[1] = {1000};
    range_of(xb, y1, 1, 0, r);
    assert_true(r[0] > 900 && r[0] < 1000 && r[1] > 1000 && r[1] < 1100);
    // every x at 0 of several points: the same rule
    double x0[2] = {0, 0}, y2[2] = {1, 3};
    range_of(x0, y2, 2, 0, r);
    assert_true(r[0] > -0.1);
    // nothing finite: refused with its reason
    double nan1[1] = {NAN};
    VizSeries s = {.x = x1, .y = nan1, .n = 1};
    VizChart c = {.title = "gnorm", .series = &s, .nseries = 1};
    char msg[256] = "";
    assert_int_equal(viz_chart_range(&c, r, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "no finite values"));
}

// A PNG writer killed between its write and its rename left NAME.png.PID.tmp for good (QA,
// session 33): the next write of NAME.png removes a dead writer's, if it is empty or a PNG, and
// nothing else.
static void test_dead_png_tmps(void **state) {
    (void)state;
    if (!viz_png_available()) { print_message("no PNG support in this build: skipped\n"); return; }
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    assert_true(dead > 0);
    waitpid(dead, NULL, 0);
    char dir[] = "/tmp/dmsh_viz_XXXXXX", p[300], cmd[600];
    assert_non_null(mkdtemp(dir));
    // a dead writer's PNG, a live process's (this one's parent), a dead writer's file that is no
    // PNG (left), a dead writer's empty one; pids past pid_max (2^22) belong to no process
    const struct { int pid; const char *text; int stays; } f[] = {
        {(int)dead, "\x89PNG\r\n", 0}, {(int)getppid(), "\x89PNG\r\n", 1}, {(1 << 22) + 7, "mine", 1}, {(1 << 22) + 8, "", 0}};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/h.png.%d.tmp", dir, f[i].pid);
        FILE *o = fopen(p, "w");
        assert_non_null(o);
        fputs(f[i].text, o);
        fclose(o);
    }
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = sin(i);
    snprintf(p, sizeof p, "%s/h.png", dir);
    char err[300] = "";
    assert_int_equal(viz_hist_png(p, v, 100, 10, 0, "h", err, sizeof err), 0);
    struct stat st;
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/h.png.%d.tmp", dir, f[i].pid);
        if ((stat(p, &st) == 0) != f[i].stays) print_error("%s: %s\n", p, f[i].stays ? "removed" : "left");
        assert_int_equal(stat(p, &st) == 0, f[i].stays);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

// A lone dot of an eval with an arm off looked like the arms-on dot of its depth (the same
// colour, and one point draws no line to tell them apart: QA, session 35): a hollow series' dots
// are rings. One red point, filled and then hollow: the centre of its red pixels is red, then white.
static void test_hollow_dots(void **state) {
    (void)state;
#ifdef DM_HAVE_PNG
    char dir[] = "/tmp/dmsh_viz_XXXXXX", p[300];
    assert_non_null(mkdtemp(dir));
    double x[1] = {3}, y[1] = {2};
    long red[2] = {0, 0};
    int centre_red[2] = {0, 0};
    for (int hollow = 0; hollow < 2; hollow++) {
        VizSeries sr = {.x = x, .y = y, .n = 1, .rgb = 0xd62728, .markers = 1, .hollow = hollow};
        VizChart c = {.title = "t", .series = &sr, .nseries = 1};
        snprintf(p, sizeof p, "%s/d%d.png", dir, hollow);
        char err[300] = "";
        assert_int_equal(viz_chart_png(p, &c, err, sizeof err), 0);
        int w, h, ch;
        unsigned char *px = stbi_load(p, &w, &h, &ch, 3);
        assert_non_null(px);
        double sx = 0, sy = 0;
        for (int i = 0; i < w * h; i++)
            if (px[3 * i] > 180 && px[3 * i + 1] < 90 && px[3 * i + 2] < 90) { red[hollow]++; sx += i % w; sy += i / w; }
        assert_true(red[hollow] > 0);
        int cx = (int)lround(sx / red[hollow]), cy = (int)lround(sy / red[hollow]);
        const unsigned char *q = px + 3 * (cy * w + cx);
        centre_red[hollow] = q[0] > 180 && q[1] < 90 && q[2] < 90;
        if (hollow) assert_true(q[0] > 230 && q[1] > 230 && q[2] > 230);  // white
        stbi_image_free(px);
    }
    assert_int_equal(centre_red[0], 1);
    assert_int_equal(centre_red[1], 0);
    assert_true(red[1] < red[0]);
    snprintf(p, sizeof p, "rm -rf %s", dir);
    assert_int_equal(system(p), 0);
#else
    print_message("no PNG support in this build: skipped\n");
#endif
}

// Linear tick values: the 1-2-5 step's every rung (10 too: (5, 10] x 10^k rounds up to 10, not
// past it), and an integer axis (steps, depths) never steps by less than 1 (QA mutation, session
// 36: ticks at 0.5 on a step axis, and half the ticks for spans of 6..10 x 10^k, went unseen)
static void test_linear_tick_values(void **state) {
    (void)state;
    static const double nice[][2] = {{0.7, 1}, {1, 1}, {1.5, 2}, {2, 2}, {3, 5}, {5, 5}, {6, 10}, {7, 10}, {10, 10}, {0.07, 0.1}, {700, 1000}};
    for (size_t i = 0; i < sizeof nice / sizeof *nice; i++)
        if (fabs(viz_nice_step(nice[i][0]) - nice[i][1]) > 1e-12 * nice[i][1])
            fail_msg("viz_nice_step(%g) = %g, want %g", nice[i][0], viz_nice_step(nice[i][0]), nice[i][1]);
    VizTicks t;
    viz_ticks(0, 30, 5, 0, 0, &t);  // raw step 6: 0, 10, 20, 30
    assert_int_equal(t.n, 4);
    for (int i = 0; i < 4; i++) assert_true(fabs(t.v[i] - 10 * i) < 1e-9);
    viz_ticks(0, 2, 5, 0, 0, &t);  // raw 0.4: steps of 0.5 on a real axis
    assert_int_equal(t.n, 5);
    assert_true(fabs(t.v[1] - 0.5) < 1e-12);
    viz_ticks(0, 2, 5, 1, 0, &t);  // on an integer one: 0, 1, 2
    assert_int_equal(t.n, 3);
    for (int i = 0; i < t.n; i++) {
        assert_true(t.v[i] == i);
        assert_null(strchr(t.lab[i], '.'));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tick_labels),
        cmocka_unit_test(test_linear_tick_values),
        cmocka_unit_test(test_chart_ranges),
        cmocka_unit_test(test_dead_png_tmps),
        cmocka_unit_test(test_hollow_dots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
