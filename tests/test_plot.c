// test_plot.c — the charts are real PNGs: the requested size, not blank (many colours, the
// series colour, dark text pixels in the title band), NaN skipped, log-y refusing all-<=0
// data in one line, the histogram; and :plot through a Shell over a fake Engine's metric rows
// (bpb with anchors, loss, stacked panels, x=time, depths, experts, the one-line errors).
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../repl/shell.h"
#include "../viz/plot.h"
#include "../viz/png.h"

#include "stb_image_impl.h"

int cmd_plot(Shell *sh, Words *w, dm_err *err);
char **complete_plot(Shell *sh, int argi, const char *prefix);

static char dir[200];

// What :plot hands viz for the first panel of its last chart (the Makefile links this test with
// --wrap=viz_charts_png): the subtitle, and how many series and legend entries it has. Then it
// is drawn as usual.
int __real_viz_charts_png(const char *path, const VizChart *c, int ncharts, int width, int height, char *err, size_t n);
static char seen_subtitle[400];
static int seen_series, seen_labels;
static long seen_nan, seen_gaps;  // NaN points in the first panel's series; what it says are gaps
static long seen_nan_of[8];       // non-finite points in each of its first series (the eighth: the rest)
static int seen_markers_of[8];    // their markers setting
static char seen_ref[120];         // the first panel's first reference line's label, or ""
static char seen_legend[400];      // the first panel's series labels, joined with '|'
int __wrap_viz_charts_png(const char *path, const VizChart *c, int ncharts, int width, int height, char *err, size_t n) {
    snprintf(seen_subtitle, sizeof seen_subtitle, "%s", ncharts > 0 && c[0].subtitle ? c[0].subtitle : "");
    seen_series = ncharts > 0 ? c[0].nseries : 0;
    seen_labels = 0;
    seen_legend[0] = 0;
    seen_nan = 0;
    seen_gaps = ncharts > 0 ? c[0].gaps : 0;
    snprintf(seen_ref, sizeof seen_ref, "%s", ncharts > 0 && c[0].nrefs > 0 && c[0].refs[0].label ? c[0].refs[0].label : "");
    for (int k = 0; k < seen_series; k++) {
        seen_labels += c[0].series[k].label != NULL;
        if (c[0].series[k].label)
            snprintf(seen_legend + strlen(seen_legend), sizeof seen_legend - strlen(seen_legend), "%s|", c[0].series[k].label);
        seen_nan_of[k < 8 ? k : 7] = 0;
        seen_markers_of[k < 8 ? k : 7] = c[0].series[k].markers;
        for (int i = 0; i < c[0].series[k].n; i++) {
            seen_nan += isnan(c[0].series[k].y[i]);
            seen_nan_of[k < 8 ? k : 7] += !isfinite(c[0].series[k].y[i]);
        }
    }
    return __real_viz_charts_png(path, c, ncharts, width, height, err, n);
}

#ifdef DM_HAVE_PNG
static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

typedef struct {
    int w, h, distinct, dark_title;
    unsigned char *px;
} Img;

// Decode and summarise: distinct colours (capped count), dark pixels in the top band (title)
static Img load(const char *path) {
    Img im = {0};
    int ch;
    im.px = stbi_load(path, &im.w, &im.h, &ch, 3);
    if (!im.px) fail_msg("cannot decode %s: %s", path, stbi_failure_reason());
    assert_true(ch == 3 || ch == 4);
    // distinct colours via a small open-addressing set
    enum { SET = 1 << 16 };
    uint32_t *set = calloc(SET, sizeof(uint32_t));
    for (int i = 0; i < im.w * im.h; i++) {
        uint32_t c = (uint32_t)im.px[3 * i] << 16 | im.px[3 * i + 1] << 8 | im.px[3 * i + 2];
        c |= 0x1000000;   // 0 marks an empty slot
        uint32_t k = (c * 2654435761u) & (SET - 1);
        while (set[k] && set[k] != c) k = (k + 1) & (SET - 1);
        if (!set[k] && im.distinct < SET / 2) { set[k] = c; im.distinct++; }
    }
    free(set);
    for (int y = 0; y < im.h / 12; y++)
        for (int x = im.w / 4; x < 3 * im.w / 4; x++) {
            const unsigned char *p = im.px + 3 * ((size_t)y * im.w + x);
            im.dark_title += p[0] + p[1] + p[2] < 3 * 90;
        }
    return im;
}

// pixels of exactly this colour (has_colour: at least one)
static int count_colour(const Img *im, uint32_t rgb) {
    int n = 0;
    for (int i = 0; i < im->w * im->h; i++)
        n += im->px[3 * i] == (rgb >> 16 & 255) && im->px[3 * i + 1] == (rgb >> 8 & 255) && im->px[3 * i + 2] == (rgb & 255);
    return n;
}
#define has_colour(im, rgb) (count_colour(im, rgb) > 0)

static void check_chart(const char *path, int w, int h) {
    Img im = load(path);
    assert_int_equal(im.w, w);
    assert_int_equal(im.h, h);
    if (im.distinct < 50 || im.dark_title < 10) print_error("%s: %d colours, %d dark title pixels\n", path, im.distinct, im.dark_title);
    assert_true(im.distinct >= 50);     // anti-aliased text and lines, grid, fills
    assert_true(im.dark_title >= 10);   // the title's glyphs (the built-in font's 1-px strokes,
                                        // no DejaVu: 19 for "log y"'s title; none drawn: 0)
    stbi_image_free(im.px);
}

static void test_chart_two_series_ref(void **state) {
    (void)state;
    enum { N = 300 };
    double x[N], a[N], b[N];
    for (int i = 0; i < N; i++) { x[i] = i; a[i] = 3 + 2 * exp(-i / 50.0); b[i] = 2.5 + 2 * exp(-i / 80.0); }
    a[17] = NAN; b[40] = INFINITY; x[41] = NAN;   // skipped, counted, no crash
    VizSeries s[2] = {{.label = "depth 4", .x = x, .y = a, .n = N, .rgb = 0x1f77b4},
                      {.label = "depth 8", .x = x, .y = b, .n = N, .rgb = 0xff7f0e}};
    VizRef r[1] = {{"5-gram 2.900", 2.9, 0xc0392b}};
    VizChart c = {.title = "held-out BPB over 65536 B", .xlabel = "step", .ylabel = "bits per byte",
                  .width = 800, .height = 450, .series = s, .nseries = 2, .refs = r, .nrefs = 1};
    char path[400], msg[256] = "";
    tmp_path(path, sizeof path, "two.png");
    if (viz_chart_png(path, &c, msg, sizeof msg)) fail_msg("%s", msg);
    check_chart(path, 800, 450);
    Img im = load(path);
    // each line in its own colour, about as much of each (~550 and ~520 full-colour pixels): a
    // mask left uncleared after the first line repainted it in the second's colour (71 and 995)
    int blue = count_colour(&im, 0x1f77b4), orange = count_colour(&im, 0xff7f0e);
    print_message("full-colour pixels: depth 4 %d, depth 8 %d\n", blue, orange);
    assert_true(blue >= 200 && orange >= 200 && blue < 2 * orange && orange < 2 * blue);
    stbi_image_free(im.px);
}

static void test_log_y(void **state) {
    (void)state;
    double x[50], y[50], neg[50];
    for (int i = 0; i < 50; i++) { x[i] = i * 100; y[i] = 5 * exp(-i / 10.0) + 1e-3; neg[i] = -i; }
    y[3] = -1;   // a single non-positive value is skipped on the log axis
    VizSeries s = {.label = "loss", .x = x, .y = y, .n = 50, .rgb = 0x2ca02c};
    VizChart c = {.title = "loss", .xlabel = "step", .ylabel = "nats", .width = 640, .height = 400, .logy = 1,
                  .series = &s, .nseries = 1};
    char path[400], msg[256] = "";
    tmp_path(path, sizeof path, "log.png");
    if (viz_chart_png(path, &c, msg, sizeof msg)) fail_msg("%s", msg);
    check_chart(path, 640, 400);
    s.y = neg;
    assert_int_equal(viz_chart_png(path, &c, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "log"));
    assert_null(strchr(msg, '\n'));
    // all non-finite: an error, not a blank chart
    double nan[3] = {NAN, NAN, NAN};
    s.y = nan; s.n = 3; c.logy = 0;
    assert_int_equal(viz_chart_png(path, &c, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "no finite values"));
}

// QA, session 23 (under UBSan): a chart of one point passed NULL to memcpy (the tick labels of
// such values: tests/test_viz.c).
static void test_huge_values_and_one_point(void **state) {
    (void)state;
    double x[1] = {3}, y[1] = {1e37};
    VizSeries s = {.label = "gnorm", .x = x, .y = y, .n = 1, .rgb = 0x1f77b4};
    VizChart c = {.title = "gnorm", .xlabel = "step", .ylabel = "norm", .width = 640, .height = 400, .series = &s, .nseries = 1};
    char path[400], msg[256] = "";
    tmp_path(path, sizeof path, "one.png");
    if (viz_chart_png(path, &c, msg, sizeof msg)) fail_msg("%s", msg);
    check_chart(path, 640, 400);
    // QA, session 27 (a hand-made checkpoint's rows under UBSan): on a log axis the top decade's
    // margin made ymax inf near 1e308 (ticks and pixels overflowed), and a subnormal bottom 0
    double xs[3] = {0, 1, 2}, big[3] = {1, 1e308, 1.7e308}, tiny[3] = {4.9e-324, 1e-310, 1};
    s.x = xs; s.y = big; s.n = 3; c.logy = 1;
    if (viz_chart_png(path, &c, msg, sizeof msg)) fail_msg("%s", msg);
    check_chart(path, 640, 400);
    s.y = tiny;
    if (viz_chart_png(path, &c, msg, sizeof msg)) fail_msg("%s", msg);
    check_chart(path, 640, 400);
    double both[3] = {-1.7e308, 0, 1.7e308};  // linear: a span no double holds is said, not drawn
    s.y = both; c.logy = 0;
    assert_int_equal(viz_chart_png(path, &c, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "spans more than a chart's scale can hold"));
}

static void test_hist(void **state) {
    (void)state;
    enum { N = 20000 };
    double *v = malloc(sizeof(double) * N);
    Rng r;
    r.s = 7;
    for (int i = 0; i < N; i++) v[i] = rng_normal(&r);
    v[5] = NAN; v[6] = -INFINITY;
    char path[400], msg[256] = "";
    tmp_path(path, sizeof path, "hist.png");
    if (viz_hist_png(path, v, N, 0, 0, "h.0 activations", msg, sizeof msg)) fail_msg("%s", msg);
    check_chart(path, 960, 540);
    Img im = load(path);
    assert_true(has_colour(&im, 0xffffff));
    stbi_image_free(im.px);
    free(v);
}

// a bar's pixels (the fill 0x1f77b4 at 0.9 over white is clearly blue) in columns x0..x1
static long blue_pixels(const Img *im, int x0, int x1) {
    long k = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = x0; x < x1; x++) {
            const unsigned char *p = im->px + 3 * ((size_t)y * im->w + x);
            k += p[2] > p[0] + 80 && p[1] > p[0] + 40;
        }
    return k;
}

// log=on (:probe NAME hist log=on): three outliers among 100 000 values are a bar a linear count
// axis draws under a pixel; on a log axis they stand a decade tall (session 32)
static void test_hist_log(void **state) {
    (void)state;
    enum { N = 100000 };
    double *v = malloc(sizeof(double) * (N + 3));
    Rng r;
    r.s = 11;
    for (int i = 0; i < N; i++) { v[i] = rng_normal(&r); v[i] = fmax(-4, fmin(4, v[i])); }
    v[N] = v[N + 1] = v[N + 2] = 12;
    char path[400], msg[256] = "";
    long blue[2];
    for (int logy = 0; logy < 2; logy++) {
        tmp_path(path, sizeof path, logy ? "hist-log.png" : "hist-lin.png");
        if (viz_hist_png(path, v, N + 3, 60, logy, "outliers", msg, sizeof msg)) fail_msg("%s", msg);
        check_chart(path, 960, 540);
        Img im = load(path);
        blue[logy] = blue_pixels(&im, 960 * 3 / 4, 960);   // values above ~8: the outliers' bin alone
        if (logy) assert_true(blue_pixels(&im, 0, 960 / 2) > 20000);   // the bulk is drawn too
        stbi_image_free(im.px);
    }
    if (!(blue[0] < 20 && blue[1] > 200)) print_error("outlier bar: %ld blue pixels linear, %ld log\n", blue[0], blue[1]);
    assert_true(blue[0] < 20 && blue[1] > 200);
    free(v);
}

static void test_bad_path(void **state) {
    (void)state;
    double x[2] = {0, 1}, y[2] = {1, 2};
    VizSeries s = {.label = "a", .x = x, .y = y, .n = 2, .rgb = 0x1f77b4};
    VizChart c = {.title = "t", .series = &s, .nseries = 1};
    char msg[256] = "";
    assert_int_equal(viz_chart_png("/nonexistent-dir/x.png", &c, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "cannot write /nonexistent-dir/x.png"));
#ifdef DM_HAVE_PNG
    // QA, session 31: a full disk cut the PNG (or left it empty) where the earlier plot was, and
    // the write said it succeeded. A file-size limit refuses the writes as a full disk does.
    char path[400];
    tmp_path(path, sizeof path, "full.png");
    assert_int_equal(viz_chart_png(path, &c, msg, sizeof msg), 0);
    struct stat st0;
    assert_int_equal(stat(path, &st0), 0);
    char *before = malloc((size_t)st0.st_size);
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(before, 1, (size_t)st0.st_size, f), (size_t)st0.st_size);
    fclose(f);
    s.n = 1;  // another chart, the same name
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)st0.st_size / 2;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = viz_chart_png(path, &c, msg, sizeof msg);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, was);
    if (rc != 1) print_error("a write past the limit succeeded: '%s'\n", msg);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(msg, "File too large (the previous file, if any, is untouched)"));
    struct stat st1;
    assert_int_equal(stat(path, &st1), 0);
    assert_int_equal(st1.st_size, st0.st_size);
    char *after = malloc((size_t)st1.st_size);
    f = fopen(path, "rb");
    assert_int_equal(fread(after, 1, (size_t)st1.st_size, f), (size_t)st1.st_size);
    fclose(f);
    assert_memory_equal(before, after, (size_t)st0.st_size);
    free(before);
    free(after);
    char ls[600];
    snprintf(ls, sizeof ls, "ls %s | grep -c tmp > /dev/null", dir);
    assert_int_not_equal(system(ls), 0);  // (no temp file left)
    // a symbolic link (to a file not there yet): the file it names is written, the link stays
    char link[400], target[400];
    tmp_path(link, sizeof link, "link.png");
    tmp_path(target, sizeof target, "target.png");
    assert_int_equal(symlink("target.png", link), 0);
    for (int twice = 0; twice < 2; twice++) assert_int_equal(viz_chart_png(link, &c, msg, sizeof msg), 0);
    struct stat lst;
    assert_int_equal(lstat(link, &lst), 0);
    assert_true(S_ISLNK(lst.st_mode));
    assert_int_equal(stat(target, &st1), 0);
    assert_true(st1.st_size > 0);
#endif
}

// ---- :plot through a Shell ------------------------------------------------------------------

static Engine eng;
static char outbuf[8192];

static int plot(const char *line, dm_err *err) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", line);
    Words w = {0};
    for (char *tok = strtok(buf, " "); tok && w.argc < SH_MAX_WORDS; tok = strtok(NULL, " ")) w.argv[w.argc++] = tok;
    FILE *f = tmpfile();
    Shell sh = {.eng = &eng, .out = f, .src = "-e"};
    memset(err, 0, sizeof *err);
    int rc = cmd_plot(&sh, &w, err);
    rewind(f);
    size_t n = fread(outbuf, 1, sizeof outbuf - 1, f);
    outbuf[n] = 0;
    fclose(f);
    return rc;
}

static void expect_plot_error(const char *line, const char *needle) {
    dm_err err;
    struct stat st;
    int had = stat("plots", &st) == 0;  // a refused :plot leaves no plots/ behind (QA, session 33)
    int rc = plot(line, &err);
    assert_true(had || stat("plots", &st) != 0);
    if (!rc || !strstr(err.msg, needle)) print_error("%s -> rc %d '%s'\n", line, rc, err.msg);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err.msg, needle));
    assert_null(strchr(err.msg, '\n'));
}

static void fill_engine(void) {
    engine_init(&eng);
    expect_plot_error(":plot loss", "nothing to plot yet: train first");
    expect_plot_error(":plot bpb", "nothing to plot yet");
    expect_plot_error(":plot loss,bpb", "nothing to plot yet");  // every metric of the list empty
    // ... each one's reason (QA, session 31: only the last one's)
    expect_plot_error(":plot bpb,loss", "nothing to plot yet: bpb: no evals (run :eval, or :train with eval_every=N); loss: train first");
    for (int s = 0; s < 400; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 2048;
        r.loss = 1.2 + 4.3 * exp(-s / 60.0) + 0.05 * sin(s * 1.3);
        r.lr = 3e-3 * fmin(1.0, (s + 1) / 50.0);
        r.gnorm = 0.8 + 2 * exp(-s / 30.0); r.ms = 20 + (s % 7); r.tok_s = 2048 / (r.ms / 1e3);
        if (s == 123) r.loss = NAN;
        engine_add_row(&eng, &r);
        if ((s + 1) % 50 == 0) {
            // an :eval-depths at each eval: all 4 depths over the 65536-byte window
            for (int d = 1; d <= 4; d++) {
                MetricRow ev = {0};
                ev.kind = 1; ev.step = s + 1; ev.tokens = r.tokens; ev.window = 65536; ev.depth = d;
                ev.bpb = 1.6 + 3.0 * exp(-s / 90.0) + 0.35 / d;
                engine_add_row(&eng, &ev);
            }
        }
    }
    eng.step = 400; eng.tokens = 400 * 2048;
    eng.has_anchors = 1;
    eng.anchors.unigram_bpb = 4.9; eng.anchors.kn5_bpb = 2.2; eng.anchors.window_bytes = 65536;
}

static void check_written(const char *path, int w, int h) {
    char want[600];
    snprintf(want, sizeof want, "wrote %s\n", path);
    if (strcmp(outbuf, want)) print_error("printed '%s', want '%s'\n", outbuf, want);
    assert_string_equal(outbuf, want);
    check_chart(path, w, h);
}

// ":plot ARGS out=DIR/FILE" must succeed; the file is checked as a chart of w x h (w = 0: not checked)
static void plot_ok(const char *args, const char *file, int w, int h) {
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, file);
    snprintf(line, sizeof line, ":plot %s out=%s", args, path);
    if (plot(line, &err)) fail_msg("%s: %s", line, err.msg);
    if (w) check_written(path, w, h);
}

static void test_cmd_plot(void **state) {
    (void)state;
    fill_engine();
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, "bpb.png");
    snprintf(line, sizeof line, ":plot bpb out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    check_written(path, 960, 540);

    tmp_path(path, sizeof path, "loss.png");
    snprintf(line, sizeof line, ":plot loss out=%s x=tokens", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    check_written(path, 960, 540);
    Img im = load(path);
    assert_true(has_colour(&im, 0x1f77b4));   // the EMA line over the light raw trace
    stbi_image_free(im.px);

    tmp_path(path, sizeof path, "stack.png");
    snprintf(line, sizeof line, ":plot loss,lr,gnorm,tok_s out=%s x=time size=900x1000 log=off", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    check_written(path, 900, 1000);

    tmp_path(path, sizeof path, "depths.png");
    snprintf(line, sizeof line, ":plot depths out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    check_written(path, 960, 540);

    // default path: SESSION/plots/METRIC.png
    snprintf(eng.session_dir, sizeof eng.session_dir, "%s/run1", dir);
    if (plot(":plot bpb,loss", &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/run1/plots/bpb-loss.png", dir);
    check_written(path, 960, 720);
    eng.session_dir[0] = 0;

    expect_plot_error(":plot nope", "unknown metric 'nope'; valid: bpb, loss, lr, gnorm, tok_s, depths, experts");
    expect_plot_error(":plot loss x=furlongs", "expected step, tokens or time");
    expect_plot_error(":plot loss size=10x10", "size=10x10");
    expect_plot_error(":plot loss size=200x8192", "320..8192 x 160..8192");  // (QA, session 31: drawn, a plot 27 px wide)
    expect_plot_error(":plot loss,bpb,lr size=960x360", "at least 320 x 160 per panel");
    expect_plot_error(":plot loss colour=red", "unknown option 'colour'");
    expect_plot_error(":plot", "usage: :plot");
    expect_plot_error(":plot experts", "nothing to plot yet");
    // in a list, a metric with nothing to plot yet is left out and said; the others are drawn,
    // and the default file name is theirs
    snprintf(eng.session_dir, sizeof eng.session_dir, "%s/run2", dir);
    if (plot(":plot experts,loss,bpb", &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/run2/plots/loss-bpb.png", dir);
    char want[900];
    snprintf(want, sizeof want, "wrote %s\nnote: experts not drawn: nothing to plot yet", path);
    if (strncmp(outbuf, want, strlen(want))) print_error("printed '%s', want '%s...'\n", outbuf, want);
    assert_memory_equal(outbuf, want, strlen(want));
    check_chart(path, 960, 720);  // two panels
    eng.session_dir[0] = 0;
    expect_plot_error(":plot loss out=/nonexistent-dir/a.png", "cannot write /nonexistent-dir/a.png");
    engine_free(&eng);
}

// experts: the last forward's [L, E] loads on a faked live model (no training needed)
// Evals of two corpora with the same window size are two eval sets (MetricRow.eval_set): the
// curve is the latest set's alone, and :plot says so (it used to join them into one line).
static void test_cmd_plot_eval_sets(void **state) {
    (void)state;
    engine_init(&eng);  // (the experts test freed it)
    for (int s = 0; s < 60; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 512; r.loss = 3 - s / 60.0; r.ms = 10; r.tok_s = 5e4;
        engine_add_row(&eng, &r);
        if ((s + 1) % 10 == 0) {
            MetricRow ev = {0};
            ev.kind = 1; ev.step = s + 1; ev.tokens = r.tokens; ev.window = 4096; ev.depth = 1;
            ev.eval_set = s < 30 ? 0xA11CEu : 0xB0Bu;  // corpus A for three evals, then corpus B
            ev.bpb = s < 30 ? 2.0 : 4.0;
            engine_add_row(&eng, &ev);
        }
    }
    eng.step = 60; eng.tokens = 60 * 512;
    eng.has_anchors = 1;  // scored on corpus A: not drawn on B's curve
    eng.anchors.unigram_bpb = 4.9; eng.anchors.kn5_bpb = 2.2; eng.anchors.window_bytes = 4096;
    eng.anchors.eval_set = 0xA11CEu;
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, "sets.png");
    snprintf(line, sizeof line, ":plot bpb out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    if (!strstr(outbuf, "latest of 2 eval sets (3 evals)")) print_error("printed '%s'\n", outbuf);
    assert_non_null(strstr(outbuf, "latest of 2 eval sets (3 evals)"));
    // rows from an older checkpoint (eval_set 0) join the set of their window size
    for (int i = 0; i < eng.nrows; i++)
        if (eng.rows[i].kind == 1 && eng.rows[i].step <= 30) eng.rows[i].eval_set = 0;
    if (plot(line, &err)) fail_msg("%s", err.msg);
    assert_null(strstr(outbuf, "note:"));
    check_written(path, 960, 540);
    // a latest set of one eval: "(1 eval)", not "(1 evals)"
    for (int i = 0; i < eng.nrows; i++)
        if (eng.rows[i].kind == 1) eng.rows[i].eval_set = eng.rows[i].step == 60 ? 0xB0Bu : 0xA11CEu;
    if (plot(line, &err)) fail_msg("%s", err.msg);
    if (!strstr(outbuf, "latest of 2 eval sets (1 eval);")) print_error("printed '%s'\n", outbuf);
    assert_non_null(strstr(outbuf, "latest of 2 eval sets (1 eval);"));
    engine_free(&eng);
    engine_init(&eng);
}

// depths with a single :eval-depths: one blue line and no legend (viz draws none for a single
// entry), and the subtitle named a colour ramp ("early (dark) to late (yellow)") there was
// nothing to tell apart with; it names the eval's step instead. Two evals keep the colour key.
static void test_cmd_plot_depths_one_eval(void **state) {
    (void)state;
    engine_init(&eng);
    for (int s = 0; s < 60; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 512; r.loss = 3 - s / 60.0; r.ms = 10; r.tok_s = 5e4;
        engine_add_row(&eng, &r);
        if (s + 1 == 30 || s + 1 == 60)
            for (int d = 1; d <= 3; d++) {
                MetricRow ev = {0};
                ev.kind = 1; ev.step = s + 1; ev.tokens = r.tokens; ev.window = 4096; ev.depth = d;
                ev.bpb = 3.0 - s / 60.0 + 0.3 / d;
                engine_add_row(&eng, &ev);
            }
        if (s + 1 == 30) {
            plot_ok("depths", "depths1.png", 960, 540);
            if (strstr(seen_subtitle, "colour")) print_error("subtitle: '%s'\n", seen_subtitle);
            assert_null(strstr(seen_subtitle, "colour"));
            assert_string_equal(seen_subtitle, "one eval, at step 30");
            assert_int_equal(seen_series, 1);
        }
    }
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, "depths2.png");
    snprintf(line, sizeof line, ":plot depths out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    check_written(path, 960, 540);
    assert_string_equal(seen_subtitle, "colour: early (dark) to late (yellow)");
    assert_int_equal(seen_series, 2);
    assert_int_equal(seen_labels, 2);  // "step 30", "step 60": the legend
    engine_free(&eng);
    engine_init(&eng);
}

static void test_cmd_plot_experts(void **state) {
    (void)state;
    int L = 3, E = 8;
    eng.live = 1; eng.cfg.L = L; eng.cfg.E = E; eng.cfg.k = 2; eng.model.last_depth = L;
    eng.fwd_kind = 1; eng.model.last_on[ARM_MOE] = 1;  // a forward that routed
    eng.model.expert_load = calloc((size_t)L * E, sizeof(int));
    for (int i = 0; i < L; i++)
        for (int j = 0; j < E; j++) eng.model.expert_load[i * E + j] = 500 + 40 * (i + 1) * ((j * 5) % 7 - 3);
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, "experts.png");
    snprintf(line, sizeof line, ":plot experts out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    check_written(path, 960, 540);
    // loads of a forward that ran with moe off, or that :bench undid: refused, not drawn
    eng.model.last_on[ARM_MOE] = 0;
    expect_plot_error(line, "the last forward ran with the moe arm off");
    eng.model.last_on[ARM_MOE] = 1;
    eng.model.last_depth = 0;  // what a :bench restore leaves
    expect_plot_error(line, "no expert loads in memory");
    free(eng.model.expert_load);
    eng.model.expert_load = NULL;
    eng.live = 0;
    engine_free(&eng);
}

// Found by a QA pass (session 30): :plot depths grouped evals by step alone, so an :eval-depths
// with every arm on and an :eval depth=2 with kda off at the same step were one curve (the
// second iteration looked harmful), and an :eval-depths with an arm off was an ordinary curve.
// Each arm set is its own group now, labelled and said in the subtitle.
static void add_eval(int64_t step, int depth, double bpb, uint16_t off) {
    MetricRow ev = {0};
    ev.kind = 1; ev.step = step; ev.tokens = step * 512; ev.window = 4096; ev.depth = depth; ev.bpb = bpb; ev.arms_off = off;
    engine_add_row(&eng, &ev);
}
static void test_cmd_plot_depths_arms_apart(void **state) {
    (void)state;
    engine_init(&eng);
    for (int s = 0; s < 40; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 512; r.loss = 3 - s / 60.0; r.ms = 10; r.tok_s = 5e4;
        r.arms_off = s >= 10 && s < 20 ? 1u << ARM_MOE : 0;
        engine_add_row(&eng, &r);
        if (s + 1 == 20) { add_eval(20, 1, 4.0, 1u << ARM_MOE); add_eval(20, 2, 3.9, 1u << ARM_MOE); }
    }
    add_eval(40, 1, 3.5, 0); add_eval(40, 2, 3.4, 0);
    add_eval(40, 2, 3.45, 1u << ARM_KDA);   // :arm kda off; :eval depth=2: one depth, not a curve
    plot_ok("depths", "depths_arms.png", 960, 540);
    if (strcmp(seen_legend, "step 20, moe off|step 40|")) print_error("legend '%s'\n", seen_legend);
    assert_string_equal(seen_legend, "step 20, moe off|step 40|");
    assert_int_equal(seen_series, 2);
    if (strcmp(seen_subtitle, "1 eval with arms off drawn apart")) print_error("subtitle '%s'\n", seen_subtitle);
    assert_string_equal(seen_subtitle, "1 eval with arms off drawn apart");
    // the step-40 curve holds the every-arm rows only: 3.5, 3.4 (the kda-off 3.45 is no point of it)
    assert_int_equal(seen_nan, 0);
    engine_free(&eng);
    // the kda-off eval alone at step 40 with every-arm rows of one depth: the only curve is the ablation's
    engine_init(&eng);
    add_eval(40, 1, 3.5, 1u << ARM_KDA); add_eval(40, 2, 3.45, 1u << ARM_KDA); add_eval(40, 2, 3.4, 0);
    plot_ok("depths", "depths_arms.png", 0, 0);
    assert_int_equal(seen_series, 1);
    assert_string_equal(seen_subtitle, "1 eval with arms off drawn apart; one eval, at step 40, kda off");
    engine_free(&eng);
}

// Found by a QA pass (session 29): the lr panel's Muon ratio and the gnorm panel's clip line are
// the settings at the time of the :plot, not the run's history; the labels say so, with the
// numbers a :set changed
static void test_cmd_plot_settings_now(void **state) {
    (void)state;
    fill_engine();
    eng.cfg.lr = 1e-3; eng.cfg.lr_muon = 0.02; eng.cfg.clip = 0.5;
    plot_ok("lr", "lr_now.png", 0, 0);
    const char *want = "lr_muon/lr x this curve (20 x with the settings now: lr_muon 0.02, lr 0.001)";
    if (!strstr(seen_subtitle, want)) print_error("subtitle '%s'\n", seen_subtitle);
    assert_non_null(strstr(seen_subtitle, want));
    eng.cfg.lr = 0;  // (QA, session 31: "0 x with the settings now", as if Muon's were 0 too)
    plot_ok("lr", "lr_now.png", 0, 0);
    if (strstr(seen_subtitle, "0 x")) print_error("subtitle '%s'\n", seen_subtitle);
    assert_null(strstr(seen_subtitle, "0 x"));
    assert_non_null(strstr(seen_subtitle, "Muon on the same schedule from lr_muon (the settings now: lr_muon 0.02, lr 0)"));
    plot_ok("gnorm", "gnorm_now.png", 0, 0);
    assert_string_equal(seen_ref, "clip 0.5 (the setting now)");
    eng.cfg.clip = 0;   // no clipping: no line
    plot_ok("gnorm", "gnorm_now.png", 0, 0);
    assert_string_equal(seen_ref, "");
    engine_free(&eng);
}

// Found by a QA pass (session 22): steps that routed nothing (moe arm off) were drawn as 0 % for
// every expert, shares that sum to 0 %; they are gaps now, said in the subtitle
static void test_cmd_plot_expert_gaps(void **state) {
    (void)state;
    engine_init(&eng);
    eng.cfg.E = 2; eng.cfg.k = 1;
    for (int s = 0; s < 60; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 256; r.loss = 3.0; r.lr = 1e-3; r.gnorm = 1; r.ms = 5; r.tok_s = 5e4;
        if (s < 20 || s >= 30) { r.expert_frac[0] = 0.4f + 0.001f * s; r.expert_frac[1] = 1 - r.expert_frac[0]; }
        engine_add_row(&eng, &r);
    }
    eng.step = 60;
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, "expert_gaps.png");
    snprintf(line, sizeof line, ":plot experts out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    if (!strstr(seen_subtitle, "; 10 steps routed nothing (moe off or skipped): gaps")) print_error("'%s'\n", seen_subtitle);
    assert_non_null(strstr(seen_subtitle, "; 10 steps routed nothing (moe off or skipped): gaps"));
    assert_int_equal(seen_nan, 20);  // 10 steps x 2 experts
    assert_int_equal(seen_gaps, 20);
    engine_free(&eng);
}

// Found by a QA pass (session 22): an eval taken with an arm off (:arm kda off; :eval) was a
// point of the depth's curve (a spike), and an ablation's steps looked like the run's. The rows
// keep the arms that were off; :plot draws such evals as their own series and marks the steps.
static void test_cmd_plot_ablations_apart(void **state) {
    (void)state;
    engine_init(&eng);
    for (int s = 0; s < 60; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 256; r.loss = 3.0 - 0.01 * s; r.lr = 1e-3; r.gnorm = 1; r.ms = 5; r.tok_s = 5e4;
        if (s >= 30 && s < 35) r.arms_off = 1u << ARM_KDA;
        engine_add_row(&eng, &r);
        if (s % 10 == 9 || s == 34) {
            MetricRow ev = {0};
            ev.kind = 1; ev.step = s + 1; ev.tokens = r.tokens; ev.window = 4096; ev.depth = 2; ev.bpb = 3.0 - 0.01 * s;
            ev.arms_off = s == 34 ? (uint16_t)(1u << ARM_KDA) : 0;
            if (s == 34) ev.bpb = 3.9;
            engine_add_row(&eng, &ev);
        }
    }
    eng.step = 60;
    dm_err err;
    char path[400], line[600];
    tmp_path(path, sizeof path, "ablation.png");
    snprintf(line, sizeof line, ":plot bpb out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    if (strcmp(seen_subtitle, "1 eval with arms off drawn apart")) print_error("'%s'\n", seen_subtitle);
    assert_string_equal(seen_subtitle, "1 eval with arms off drawn apart");
    assert_int_equal(seen_series, 2);  // depth 2, and depth 2 with kda off
    snprintf(line, sizeof line, ":plot loss out=%s", path);
    if (plot(line, &err)) fail_msg("%s", err.msg);
    assert_string_equal(seen_subtitle, "5 steps with arms off (kda) marked");
    assert_int_equal(seen_gaps, 55);
    assert_string_equal(seen_legend, "loss|kda off|");
    // moe off at steps 40..42 as well: a series of its own (QA, session 30: one "kda,moe off"
    // series marked all 8 steps as if both arms were off in each)
    for (int i = 0; i < eng.nrows; i++)
        if (eng.rows[i].kind == 0 && eng.rows[i].step >= 40 && eng.rows[i].step < 43) eng.rows[i].arms_off = 1u << ARM_MOE;
    if (plot(line, &err)) fail_msg("%s", err.msg);
    if (strcmp(seen_legend, "loss|kda off|moe off|")) print_error("legend '%s'\n", seen_legend);
    assert_string_equal(seen_legend, "loss|kda off|moe off|");
    assert_string_equal(seen_subtitle, "8 steps with arms off (kda; moe) marked");
    assert_int_equal(seen_gaps, 55 + 57);
    engine_free(&eng);
}

// QA, session 31: the loss chart's moving average was carried over skipped (non-finite) steps,
// so a run of them drew a flat stretch at a value no step had, where the per-step trace broke.
// Now the average breaks where the trace does, and carries on after it.
static void test_cmd_plot_ema_gaps(void **state) {
    (void)state;
    engine_init(&eng);
    for (int s = 0; s < 200; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 256; r.lr = 1e-3; r.gnorm = 1; r.ms = 5; r.tok_s = 5e4;
        r.loss = s >= 141 && s < 180 ? (s % 2 ? NAN : INFINITY) : 4.0 - 0.01 * s;
        engine_add_row(&eng, &r);
    }
    eng.step = 200;
    plot_ok("loss", "ema_gaps.png", 960, 540);
    assert_string_equal(seen_legend, "per step|EMA over 5 steps|");
    assert_int_equal(seen_nan_of[0], 39);  // the trace: the 39 skipped steps
    assert_int_equal(seen_nan_of[1], 39);  // the average: the same 39, and finite after them
    engine_free(&eng);
}

// QA, session 31: depths scored only now and then (:eval-depths at a few steps, :train's evals
// at depth L) were lines straight through the evals they missed, read as "the shallow depths
// lag"; an :eval-depths with an arm off was counted as L evals on :plot bpb, one on :plot depths;
// and its series were all one red.
static void test_cmd_plot_sparse_depths(void **state) {
    (void)state;
    engine_init(&eng);
    for (int s = 0; s < 300; s++) {
        MetricRow r = {0};
        r.step = s; r.tokens = (int64_t)(s + 1) * 256; r.loss = 3.0 - 0.001 * s; r.lr = 1e-3; r.gnorm = 1; r.ms = 5; r.tok_s = 5e4;
        engine_add_row(&eng, &r);
        int full = s + 1 == 100 || s + 1 == 300;
        if ((s + 1) % 50 == 0)
            for (int d = full ? 1 : 3; d <= 3; d++) {
                MetricRow ev = {0};
                ev.kind = 1; ev.step = s + 1; ev.tokens = r.tokens; ev.window = 4096; ev.depth = d; ev.bpb = 4.0 - 0.002 * s + 0.3 / d;
                engine_add_row(&eng, &ev);
            }
        if (s + 1 == 200)  // an :eval-depths with moe off: one eval of three rows
            for (int d = 1; d <= 3; d++) {
                MetricRow ev = {0};
                ev.kind = 1; ev.step = s + 1; ev.tokens = r.tokens; ev.window = 4096; ev.depth = d; ev.bpb = 4.5;
                ev.arms_off = 1u << ARM_MOE;
                engine_add_row(&eng, &ev);
            }
    }
    eng.step = 300;
    plot_ok("bpb", "sparse.png", 960, 540);
    if (strcmp(seen_subtitle, "1 eval with arms off drawn apart; 2 depths scored at fewer evals: points, not lines"))
        print_error("subtitle '%s'\n", seen_subtitle);
    assert_string_equal(seen_subtitle, "1 eval with arms off drawn apart; 2 depths scored at fewer evals: points, not lines");
    assert_string_equal(seen_legend, "depth 1|depth 2|depth 3|depth 1, moe off|depth 2, moe off|depth 3, moe off|");
    assert_int_equal(seen_markers_of[0], 2);  // depths 1 and 2: 2 evals, points only
    assert_int_equal(seen_markers_of[1], 2);
    assert_int_equal(seen_markers_of[2], 0);  // depth 3: every eval, a line
    assert_int_equal(seen_markers_of[3], 1);
    engine_free(&eng);
}

static void test_complete(void **state) {
    (void)state;
    char **v = complete_plot(NULL, 1, "loss,d");
    assert_non_null(v);
    assert_string_equal(v[0], "loss,depths");
    assert_null(v[1]);
    for (int i = 0; v[i]; i++) free(v[i]);
    free(v);
    v = complete_plot(NULL, 2, "x=t");
    assert_non_null(v);
    assert_string_equal(v[0], "x=tokens");
    assert_string_equal(v[1], "x=time");
    for (int i = 0; v[i]; i++) free(v[i]);
    free(v);
}
#endif

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dm_test_plot_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd)) return 1;
#ifdef DM_HAVE_PNG
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chart_two_series_ref),
        cmocka_unit_test(test_log_y),
        cmocka_unit_test(test_huge_values_and_one_point),
        cmocka_unit_test(test_hist),
        cmocka_unit_test(test_hist_log),
        cmocka_unit_test(test_bad_path),
        cmocka_unit_test(test_cmd_plot),
        cmocka_unit_test(test_cmd_plot_settings_now),
        cmocka_unit_test(test_cmd_plot_experts),
        cmocka_unit_test(test_cmd_plot_expert_gaps),
        cmocka_unit_test(test_cmd_plot_ablations_apart),
        cmocka_unit_test(test_cmd_plot_ema_gaps),
        cmocka_unit_test(test_cmd_plot_sparse_depths),
        cmocka_unit_test(test_cmd_plot_eval_sets),
        cmocka_unit_test(test_cmd_plot_depths_one_eval),
        cmocka_unit_test(test_cmd_plot_depths_arms_apart),
        cmocka_unit_test(test_complete),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
#else
    // a build without libstb-dev: the functions exist and refuse in one line
    char msg[256] = "";
    VizChart c = {0};
    int rc = viz_chart_png("/tmp/x.png", &c, msg, sizeof msg) != 1 || strcmp(msg, DM_NO_PNG_WHY) != 0;
    printf("test_plot: built without PNG support; checked the refusal only (%s)\n", rc ? "FAILED" : "ok");
#endif
    if (!getenv("DM_KEEP_PLOTS")) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) {}
    } else {
        printf("plots kept in %s\n", dir);
    }
    return rc;
}
