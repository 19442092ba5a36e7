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
#include "../viz/axes.h"
#include "../viz/font.h"

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

// The subtitle's counts (QA, session 37: a chart counting its deliberate gaps as "non-finite
// skipped", or not saying that a log axis hid values <= 0, passed every test): what the title
// line says was left out is exactly what was.
static void test_subtitle_counts(void **state) {
    (void)state;
    double x[7] = {1, 2, 3, 4, 5, 6, 7}, y[7] = {0.5, NAN, 2, -1, INFINITY, 0, 3};
    VizSeries s = {.label = "s", .x = x, .y = y, .n = 7, .rgb = 0x1f77b4};
    VizChart c = {.title = "t", .series = &s, .nseries = 1, .subtitle = "seed 1"};
    char sub[400], msg[256] = "";
    // linear: the two non-finite points counted, the values <= 0 drawn
    if (viz_chart_subtitle(&c, sub, sizeof sub, msg, sizeof msg)) fail_msg("%s", msg);
    assert_string_equal(sub, "seed 1; 2 non-finite skipped");
    // one of them a gap the caller explains: one left to count; both: none
    c.gaps = 1;
    assert_int_equal(viz_chart_subtitle(&c, sub, sizeof sub, msg, sizeof msg), 0);
    assert_string_equal(sub, "seed 1; 1 non-finite skipped");
    c.gaps = 2;
    assert_int_equal(viz_chart_subtitle(&c, sub, sizeof sub, msg, sizeof msg), 0);
    assert_string_equal(sub, "seed 1");
    // log: -1 and 0 are not shown, and said so
    c.gaps = 0; c.logy = 1;
    assert_int_equal(viz_chart_subtitle(&c, sub, sizeof sub, msg, sizeof msg), 0);
    assert_string_equal(sub, "seed 1; 2 non-finite skipped; 2 values <= 0 not shown on the log scale");
    // no subtitle of its own: the counts alone, no leading separator
    c.subtitle = NULL; c.gaps = 2;
    assert_int_equal(viz_chart_subtitle(&c, sub, sizeof sub, msg, sizeof msg), 0);
    assert_string_equal(sub, "2 values <= 0 not shown on the log scale");
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
    // the labels show the step's decimals, the same on every tick (QA mutation, session 37: one
    // decimal fewer labelled 0..2 "0 0 1 2 2" and 3.0..3.5 "3 3 3 3 3 4")
    static const char *const half[] = {"0.0", "0.5", "1.0", "1.5", "2.0"};
    viz_ticks(0, 2, 5, 0, 0, &t);
    for (int i = 0; i < 5; i++) assert_string_equal(t.lab[i], half[i]);
    static const double close_[][2] = {{3.0, 3.5}, {0.001, 0.002}, {120, 121}, {-0.3, 0.2}};
    for (size_t i = 0; i < sizeof close_ / sizeof *close_; i++) {
        viz_ticks(close_[i][0], close_[i][1], 5, 0, 0, &t);
        assert_true(t.n >= 3);
        for (int j = 0; j + 1 < t.n; j++) {
            if (!strcmp(t.lab[j], t.lab[j + 1])) print_error("%g..%g: ticks %g and %g both '%s'\n", close_[i][0], close_[i][1], t.v[j], t.v[j + 1], t.lab[j]);
            assert_string_not_equal(t.lab[j], t.lab[j + 1]);
        }
    }
}

// Log-axis tick values: every decade over 3 or more decades, 1-2-5 within fewer, and never a
// tick at or below 0 (QA mutation, session 37: a loss falling over 4 decades drew a bare y axis,
// and 1-2-5 became 1, 2, 3, 4, 5)
static void expect_ticks(double lo, double hi, int target, int integer, const char *want) {
    VizTicks t;
    viz_ticks(lo, hi, target, integer, 1, &t);
    char got[400] = "";
    for (int i = 0; i < t.n; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? " " : "", t.lab[i]);
    if (strcmp(got, want)) print_error("log ticks of %g..%g: '%s', want '%s'\n", lo, hi, got, want);
    assert_string_equal(got, want);
    for (int i = 0; i < t.n; i++) assert_true(t.v[i] > 0 && (i == 0 || t.v[i] > t.v[i - 1]));
}
static void test_log_tick_values(void **state) {
    (void)state;
    expect_ticks(1e-3, 10, 6, 0, "0.001 0.01 0.1 1 10");
    expect_ticks(1, 5000, 6, 0, "1 10 100 1k");
    expect_ticks(1, 50, 6, 0, "1 2 5 10 20 50");
    expect_ticks(0.3, 40, 8, 0, "0.5 1 2 5 10 20");
    expect_ticks(2, 30, 6, 0, "2 5 10 20");  // 1-2-5 itself (1..50 falls back to the walk's 1-2-5 too)
    expect_ticks(0.9, 1.3, 5, 0, "0.9 1 1.1 1.2 1.3");
    expect_ticks(1, 1.05, 5, 0, "1 1.01 1.02 1.04");
    // an integer log axis under 1 (the count axis of a histogram on log=on is one): its
    // linear fallback must not put a tick at 0, where log10 is -inf
    expect_ticks(1.1e-10, 1.9e-10, 5, 1, "");
    expect_ticks(0.7, 1.047, 4, 1, "1");
}

// x tick labels are thinned until neighbours keep a clear gap, about two characters' room
// between them (QA mutation, session 37: never thinned, 13 wide labels 14 px apart went unseen)
static void test_x_labels_apart(void **state) {
    (void)state;
    static const double span[][2] = {{1, 1.0000001}, {-1000.001, -1000}, {123456.7, 123457.9}, {1000, 1000.01}};
    for (size_t k = 0; k < sizeof span / sizeof *span; k++) {
        VizAxes a = {.title = "t", .xlabel = "step", .ylabel = "y", .xmin = span[k][0], .xmax = span[k][1], .ymin = 0, .ymax = 1, .s = 1};
        viz_axes_layout(NULL, &a, 0, 0, 960, 540);   // (the canvas is not drawn on)
        assert_true(a.xt.n >= 3);
        for (int i = 0; i + 1 < a.xt.n; i++) {
            double apart = viz_ax_x(&a, a.xt.v[i + 1]) - viz_ax_x(&a, a.xt.v[i]);
            double half = (viz_text_width(a.xt.lab[i], 12.5, VIZ_REGULAR) + viz_text_width(a.xt.lab[i + 1], 12.5, VIZ_REGULAR)) / 2;
            if (apart - half < 25) print_error("'%s' and '%s': %.1f px between them\n", a.xt.lab[i], a.xt.lab[i + 1], apart - half);
            assert_true(apart - half >= 25);
        }
    }
}

// The legend goes in the corner whose box hides the fewest data points (QA mutation, session
// 37: the most crowded corner went unseen)
static void test_legend_corner(void **state) {
    (void)state;
    VizAxes a = {.x0 = 80, .x1 = 900, .y0 = 60, .y1 = 480, .s = 1};
    VizLegendItem it[2] = {{.label = "per step", .rgb = 0x1f77b4}, {.label = "EMA over 5 steps", .rgb = 0xff7f0e}};
    // a curve through the top right quarter and nowhere else, then the same in the top left
    enum { N = 400 };
    double px[N], py[N], box[4];
    Rng r = {.s = 5};
    for (int corner = 0; corner < 2; corner++) {
        for (int i = 0; i < N; i++) {
            double u = rng_uniform(&r), v = rng_uniform(&r);
            px[i] = corner == 0 ? a.x0 + (a.x1 - a.x0) * (0.5 + 0.5 * u) : a.x0 + (a.x1 - a.x0) * 0.5 * u;
            py[i] = a.y0 + (a.y1 - a.y0) * 0.5 * v;
        }
        viz_axes_legend_place(&a, it, 2, px, py, N, NULL, 0, box);
        if (corner == 0 && !(box[2] <= (a.x0 + a.x1) / 2)) print_error("legend at x %g..%g, over the points\n", box[0], box[2]);
        if (corner == 0) assert_true(box[2] <= (a.x0 + a.x1) / 2 && box[1] < (a.y0 + a.y1) / 2);  // top left
        else assert_true(box[0] >= (a.x0 + a.x1) / 2 && box[1] < (a.y0 + a.y1) / 2);   // top right
        assert_true(box[0] >= a.x0 && box[2] <= a.x1 && box[1] >= a.y0 && box[3] <= a.y1);
    }
}

#ifdef DM_HAVE_PNG
// The ink of black text on a white canvas: the box of the pixels at least half dark, [x0, x1) x
// [y0, y1), and the darkness-weighted centre (to a tenth of a pixel: anti-aliased edges count)
typedef struct { int x0, y0, x1, y1; double cx, cy, sum; } Ink;
static Ink ink_of(const VizCanvas *c) {
    Ink k = {c->w, c->h, 0, 0, 0, 0, 0};
    for (int y = 0; y < c->h; y++)
        for (int x = 0; x < c->w; x++) {
            int d = 255 - c->px[3 * ((size_t)y * c->w + x)];
            k.sum += d, k.cx += d * (x + 0.5), k.cy += d * (y + 0.5);
            if (d < 128) continue;
            if (x < k.x0) k.x0 = x;
            if (y < k.y0) k.y0 = y;
            if (x + 1 > k.x1) k.x1 = x + 1;
            if (y + 1 > k.y1) k.y1 = y + 1;
        }
    if (k.sum > 0) k.cx /= k.sum, k.cy /= k.sum;
    return k;
}

// s drawn at (100, 100) on a white 200 x 200 canvas (freed by the caller)
static VizCanvas text_at(const char *s, double px, int face, int halign, int valign, int rot) {
    VizCanvas c;
    assert_int_equal(viz_canvas_init(&c, 200, 200, 0xffffff), 0);
    viz_text(&c, 100, 100, s, px, face, 0x000000, halign, valign, rot);
    return c;
}
#endif

// Text lands where its anchor says (QA mutation, session 38: centred labels drawn right-aligned,
// middle-aligned ones half a cap height low, the descent's sign flipped, rotated text a row off,
// "×" decoded as "w", kerning measured but not drawn, the bold face never used: every chart
// still drew, and no test looked where its text went). Holds for DejaVu and for the stb_easy_font
// fallback (DMSH_FONT=/nonexistent), whichever this machine has.
static void test_text_anchors(void **state) {
    (void)state;
#ifdef DM_HAVE_PNG
    const double px = 20;
    const double w = viz_text_width("H", px, VIZ_REGULAR), desc = viz_text_descent(px, VIZ_REGULAR);
    print_message("%s: 'H' %.2f px wide, ascent %.2f, descent %.2f\n", viz_font_is_ttf() ? "TTF" : "stb_easy_font",
                  w, viz_text_ascent(px, VIZ_REGULAR), desc);
    assert_true(desc > 0.1 * px && desc < 0.4 * px);  // below the baseline: positive
    // across: the centre of a centred 'H' on x, the left- and right-aligned ones half its width off
    Ink h[3];
    for (int ha = -1; ha <= 1; ha++) {
        VizCanvas c = text_at("H", px, VIZ_REGULAR, ha, 0, 0);
        h[ha + 1] = ink_of(&c);
        viz_canvas_free(&c);
        print_message("halign %d: ink x %d..%d, centre (%.2f, %.2f)\n", ha, h[ha + 1].x0, h[ha + 1].x1, h[ha + 1].cx, h[ha + 1].cy);
        assert_true(h[ha + 1].sum > 0);
    }
    // (the fallback's glyphs start at the pen and keep their gap after them, in its measured
    // width too: its ink sits up to one of its units, px / 11, left of where DejaVu's would)
    const double slack = viz_font_is_ttf() ? 1 : 1 + px / 11;
    assert_true(fabs(h[1].cx - 100) < slack);
    assert_true(fabs(h[0].cx - (100 + w / 2)) < slack);
    assert_true(fabs(h[2].cx - (100 - w / 2)) < slack);
    assert_true(fabs(h[0].cx - h[1].cx - w / 2) < 0.5 && fabs(h[1].cx - h[2].cx - w / 2) < 0.5);
    // down: middle (valign 0) centres the capital on y; the baseline (2) is y: the last inked
    // row is y - 1; top (-1) puts it an ascent below y, bottom (1) a descent above
    assert_true(fabs(h[1].cy - 100) < 1);
    int base[4];
    for (int va = -1; va <= 2; va++) {
        VizCanvas c = text_at("H", px, VIZ_REGULAR, 0, va, 0);
        Ink k = ink_of(&c);
        viz_canvas_free(&c);
        base[va + 1] = k.y1;
        print_message("valign %d: ink y %d..%d\n", va, k.y0, k.y1);
    }
    assert_int_equal(base[3], 100);
    assert_true(abs(base[0] - (100 + (int)lround(viz_text_ascent(px, VIZ_REGULAR)))) <= 1);
    assert_true(abs(base[2] - (100 - (int)lround(desc))) <= 1);
    // rotated (reads bottom to top): the same pixels turned a quarter counter-clockwise about the
    // canvas, for every anchor: pixel (x, y) of the rotated text is pixel (199 - y, x) of the flat one
    for (int ha = -1; ha <= 1; ha++)
        for (int va = -1; va <= 2; va++) {
            VizCanvas f = text_at("Hg7", px, VIZ_REGULAR, ha, va, 0), r = text_at("Hg7", px, VIZ_REGULAR, ha, va, 1);
            int off = 0;
            for (int y = 0; y < 200; y++)
                for (int x = 0; x < 200; x++)
                    off += abs(r.px[3 * (y * 200 + x)] - f.px[3 * (x * 200 + 199 - y)]) > 1;
            if (off) print_error("halign %d valign %d: %d pixels of the rotated text are not the flat one's turned\n", ha, va, off);
            assert_int_equal(off, 0);
            viz_canvas_free(&f);
            viz_canvas_free(&r);
        }
    // UTF-8: the axis factor's "×" is not drawn as "w" (its code point, U+00D7, read 5 bits a byte)
    VizCanvas x = text_at("\xc3\x97", px, VIZ_REGULAR, 0, 0, 0), wv = text_at("w", px, VIZ_REGULAR, 0, 0, 0);
    int differ = 0;
    for (int i = 0; i < 200 * 200; i++) differ += x.px[3 * i] != wv.px[3 * i];
    assert_true(ink_of(&x).sum > 0);
    assert_true(differ > 10);
    viz_canvas_free(&x);
    viz_canvas_free(&wv);
    // kerning: the ink of "AVAWAY" (pairs kerned closer) is no wider than its measured width
    VizCanvas k = text_at("AVAWAY", px, VIZ_REGULAR, 0, 0, 0);
    Ink kk = ink_of(&k);
    viz_canvas_free(&k);
    double kw = viz_text_width("AVAWAY", px, VIZ_REGULAR);
    print_message("AVAWAY: %.2f px wide, inked %d..%d\n", kw, kk.x0, kk.x1);
    assert_true(kk.x1 - kk.x0 <= kw + 1);
    // the bold face (titles) is bolder: more ink than the regular face (the fallback has no bold)
    if (viz_font_is_ttf()) {
        VizCanvas b = text_at("HHHH", px, VIZ_BOLD, 0, 0, 0), g = text_at("HHHH", px, VIZ_REGULAR, 0, 0, 0);
        double inb = ink_of(&b).sum, ing = ink_of(&g).sum;
        print_message("HHHH: ink bold %.0f, regular %.0f\n", inb, ing);
        assert_true(inb > 1.3 * ing);
        viz_canvas_free(&b);
        viz_canvas_free(&g);
    }
#else
    print_message("no PNG support in this build: skipped\n");
#endif
}

// A polyline's coverage is the max over its segments (canvas.h): where two segments meet, a
// pixel is as dark as the darker of the two drawn alone, and never painted twice (QA, session
// 38: the mask overwritten by the later segment drew the joints lighter and passed).
static void test_polyline_joint_is_max(void **state) {
    (void)state;
    double x[3] = {20.3, 100.6, 30.2}, y[3] = {40.4, 100.2, 160.7};   // a sharp V at (100.6, 100.2)
    VizCanvas a, b, p;
    assert_int_equal(viz_canvas_init(&a, 200, 200, 0xffffff), 0);
    assert_int_equal(viz_canvas_init(&b, 200, 200, 0xffffff), 0);
    assert_int_equal(viz_canvas_init(&p, 200, 200, 0xffffff), 0);
    viz_polyline(&a, x, y, 2, 5, 0x000000, 1);
    viz_polyline(&b, x + 1, y + 1, 2, 5, 0x000000, 1);
    viz_polyline(&p, x, y, 3, 5, 0x000000, 1);
    int lighter = 0, darker = 0, both = 0;
    for (int i = 0; i < 200 * 200; i++) {
        int va = a.px[3 * i], vb = b.px[3 * i], vp = p.px[3 * i], m = va < vb ? va : vb;
        both += va < 255 && vb < 255;
        lighter += vp > m + 1;   // (one level of rounding either way)
        darker += vp < m - 1;    // (painted twice: a dark bead)
    }
    if (lighter || darker) print_error("%d joint pixels lighter, %d darker than the darker segment alone\n", lighter, darker);
    assert_true(both > 10);   // the segments do overlap at the joint (else nothing is tested)
    assert_int_equal(lighter, 0);
    assert_int_equal(darker, 0);
    viz_canvas_free(&a); viz_canvas_free(&b); viz_canvas_free(&p);
}

// A rectangle's fractional edges are covered by their fraction, in both directions (bars and
// ticks stay exact), and a dashed line has its gaps (QA mutation, session 38: a fractional top
// row filled whole, and the reference line drawn solid, went unseen)
static void test_rect_edges_and_dashes(void **state) {
    (void)state;
    VizCanvas c;
    assert_int_equal(viz_canvas_init(&c, 200, 200, 0xffffff), 0);
    viz_fill_rect(&c, 10.5, 60.25, 30.75, 70.5, 0x00ff00, 1);
    // (x, y, the red left of 255 by the coverage: 255 (1 - cx cy))
    static const struct { int x, y, red; } px[] = {{15, 65, 0}, {15, 60, 64}, {15, 70, 128}, {10, 65, 128},
                                                   {30, 65, 64}, {10, 60, 159}, {30, 70, 159}, {15, 71, 255}, {31, 65, 255}};
    for (size_t i = 0; i < sizeof px / sizeof *px; i++) {
        const uint8_t *q = c.px + 3 * (px[i].y * 200 + px[i].x);
        if (abs(q[0] - px[i].red) > 1 || q[1] != 255) print_error("(%d, %d) is %02x%02x%02x, want red %d\n", px[i].x, px[i].y, q[0], q[1], q[2], px[i].red);
        assert_true(abs(q[0] - px[i].red) <= 1 && q[1] == 255);
    }
    // a dashed line as the reference line is drawn (7 on, 4 off, 1.6 wide), on row 150: pixels
    // left nearly white between the dashes, about one gap every 11 px over 180 px
    viz_dashed_hline(&c, 10, 190, 150.5, 1.6, 7, 4, 0x000000, 1);
    int gaps = 0, inked = 0;
    for (int x = 10, in_gap = 0; x < 190; x++) {
        int light = c.px[3 * (150 * 200 + x)] > 200;
        gaps += light && !in_gap;
        inked += !light;
        in_gap = light;
    }
    print_message("dashed line: %d gaps, %d inked pixels\n", gaps, inked);
    assert_true(gaps >= 14 && gaps <= 17);
    assert_true(inked > 90);
    viz_canvas_free(&c);
}

// The same with the stb_easy_font fallback (a machine without DejaVu): the faces load once per
// process, so this program runs itself again with DMSH_FONT naming no file, that test alone.
// (Its capitals sat 2 units above their anchor, and a byte outside ASCII, each of "×"'s, read
// outside its glyph table: QA, session 38.)
static void test_text_anchors_fallback(void **state) {
    (void)state;
#ifdef DM_HAVE_PNG
    if (getenv("DM_TEST_VIZ_FALLBACK")) return;  // (the run it starts)
    char cmd[200];
    snprintf(cmd, sizeof cmd, "DMSH_FONT=/nonexistent/none.ttf DM_TEST_VIZ_FALLBACK=1 /proc/%d/exe", (int)getpid());
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
#endif
}

int main(void) {
    if (getenv("DM_TEST_VIZ_FALLBACK")) cmocka_set_test_filter("test_text_anchors");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tick_labels),
        cmocka_unit_test(test_linear_tick_values),
        cmocka_unit_test(test_log_tick_values),
        cmocka_unit_test(test_legend_corner),
        cmocka_unit_test(test_x_labels_apart),
        cmocka_unit_test(test_chart_ranges),
        cmocka_unit_test(test_subtitle_counts),
        cmocka_unit_test(test_dead_png_tmps),
        cmocka_unit_test(test_hollow_dots),
        cmocka_unit_test(test_text_anchors),
        cmocka_unit_test(test_text_anchors_fallback),
        cmocka_unit_test(test_rect_edges_and_dashes),
        cmocka_unit_test(test_polyline_joint_is_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
