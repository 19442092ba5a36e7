// test_plot_pixels.c — where things land in the PNG, read back from its pixels: bars rise from the
// x axis to heights in proportion to their counts, a lone outlier stands on a log count axis, the
// mean line is at the mean, a rising series rises, points drawn as points are not joined, a
// legend is drawn for two entries, stacked panels share their x range, and the grid has its
// vertical lines. test_plot.c checks that charts are drawn at all (size, colours, title);
// mutation testing (QA, session 37) found each of these drawn wrong with every test passing:
// every chart upside down among them.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../viz/plot.h"

#include "stb_image_impl.h"

static char dir[64];

#ifdef DM_HAVE_PNG
typedef struct {
    int w, h;
    unsigned char *px;
} Img;

static Img draw_hist(const char *name, const double *v, size_t n, int bins, int logy) {
    char path[200], msg[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (viz_hist_png(path, v, n, bins, logy, "bars", msg, sizeof msg)) fail_msg("%s", msg);
    Img im;
    int ch;
    im.px = stbi_load(path, &im.w, &im.h, &ch, 3);
    if (!im.px) fail_msg("cannot decode %s: %s", path, stbi_failure_reason());
    return im;
}

static Img draw_charts(const char *name, const VizChart *c, int nc, int w, int h) {
    char path[200], msg[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (viz_charts_png(path, c, nc, w, h, msg, sizeof msg)) fail_msg("%s", msg);
    Img im;
    int ch;
    im.px = stbi_load(path, &im.w, &im.h, &ch, 3);
    if (!im.px) fail_msg("cannot decode %s: %s", path, stbi_failure_reason());
    return im;
}

static const unsigned char *at(const Img *im, int x, int y) { return im->px + 3 * ((size_t)y * im->w + x); }
// the bars' fill (0x1f77b4 at 0.9 over white), the mean line (0xd62728), a green series (0x2ca02c)
static int blue(const unsigned char *p) { return p[2] > p[0] + 80 && p[1] > p[0] + 40; }
static int red(const unsigned char *p) { return p[0] > p[1] + 100 && p[0] > p[2] + 100; }
static int green(const unsigned char *p) { return p[1] > p[0] + 60 && p[1] > p[2] + 60; }

// Histogram of 10 bins over 0..10 whose counts are k+1, 2k, 3k, ..., 9k, 10k+1 (random values
// inside each bin; 0 and 10 set the range), with non-finite values that count for nothing.
static void test_hist_bars(void **state) {
    (void)state;
    enum { K = 20 };
    double v[60 * K], sum = 0;
    size_t n = 0, good = 0;
    Rng r = {.s = 3737};
    long want[10];
    for (int i = 0; i < 10; i++) {
        for (int j = 0; j < (i + 1) * K; j++) v[n++] = i + 0.1 + 0.8 * rng_uniform(&r);
        want[i] = (i + 1) * K;
    }
    v[n++] = 0; v[n++] = 10;
    want[0]++; want[9]++;
    for (size_t i = 0; i < n; i++) { sum += v[i]; good++; }
    for (int i = 0; i < 3 * K; i++) v[n++] = i % 3 ? NAN : -INFINITY;  // (the mean is over the finite values)
    Img im = draw_hist("bars.png", v, n, 10, 0);
    // the bars span the blue columns: bin i's centre is (i + 0.5) / 10 of the way across
    int L = im.w, R = -1;
    for (int x = 0; x < im.w; x++)
        for (int y = 0; y < im.h; y++)
            if (blue(at(&im, x, y))) { L = x < L ? x : L; R = x; break; }
    assert_true(R - L > 400);
    int top[10], bottom[10];
    double hgt[10];
    for (int i = 0; i < 10; i++) {
        // (a column either side of the centre without the dashed mean line across it)
        int cx = (int)lround(L + (i + 0.5) * (R - L + 1) / 10.0) - 10, redk = 0;
        for (int y = 0; y < im.h; y++) redk += red(at(&im, cx, y));
        if (redk) cx += 20;
        top[i] = -1; bottom[i] = -1;
        int k = 0;
        for (int y = 0; y < im.h; y++)
            if (blue(at(&im, cx, y))) { if (top[i] < 0) top[i] = y; bottom[i] = y; k++; }
        hgt[i] = k;
        assert_true(k > 0);
    }
    // heights in proportion to the counts (the tallest bar inside the frame, its top below the
    // title lines)
    for (int i = 0; i < 10; i++) {
        double got = hgt[i] / hgt[9], exp_ = (double)want[i] / want[9];
        if (fabs(got - exp_) > 0.02) print_error("bar %d: %.0f px, %.3f of the tallest; want %.3f (counts %ld / %ld)\n", i, hgt[i], got, exp_, want[i], want[9]);
        assert_true(fabs(got - exp_) <= 0.02);
    }
    // the bars stand on the x axis (the bottom of the plot), not hanging from its top: the short
    // first bar lies wholly in the lower half of the image, the tall last one reaches the upper
    if (!(top[0] > im.h / 2 && bottom[0] > im.h * 3 / 4 && top[9] < im.h / 2))
        print_error("bar 0 rows %d..%d, bar 9 rows %d..%d, image %d rows: drawn upside down?\n", top[0], bottom[0], top[9], bottom[9], im.h);
    assert_true(top[0] > im.h / 2 && bottom[0] > im.h * 3 / 4);
    assert_true(top[9] < im.h / 2);
    for (int i = 0; i < 10; i++) {
        assert_true(abs(bottom[i] - bottom[9]) <= 1);         // one baseline
        assert_int_equal(hgt[i], bottom[i] - top[i] + 1);     // each bar solid
    }
    assert_true(top[9] > im.h / 10);
    // the dashed mean line: the column with the most red pixels, at the finite values' mean
    int best = -1, bestk = 0;
    for (int x = L; x <= R; x++) {
        int k = 0;
        for (int y = top[9]; y < bottom[9]; y++) k += red(at(&im, x, y));
        if (k > bestk) { bestk = k; best = x; }
    }
    double mean = sum / good, mx = L + mean / 10 * (R - L + 1);
    if (fabs(best - mx) > 3) print_error("mean line at column %d, want %.1f (mean %g)\n", best, mx, mean);
    assert_true(bestk > 50);
    assert_true(fabs(best - mx) <= 3);
    stbi_image_free(im.px);
}

// log=on: one value among hundreds, in a bin of its own, stands as a bar (a count of 1 sits a
// bit above the axis's bottom at 0.7); session 32's outliers were three, so a baseline of 1 that
// drew a count of 1 as nothing went unseen
static void test_hist_lone_outlier(void **state) {
    (void)state;
    enum { N = 300 };
    double v[N + 1];
    Rng r = {.s = 42};
    for (int i = 0; i < N; i++) v[i] = 5 * rng_uniform(&r);
    v[N] = 100;  // bins of 10 over 0..100: bin 9 holds this one alone
    long right[2];
    for (int logy = 0; logy < 2; logy++) {
        Img im = draw_hist(logy ? "lone-log.png" : "lone-lin.png", v, N + 1, 10, logy);
        right[logy] = 0;
        for (int y = 0; y < im.h; y++)
            for (int x = im.w * 3 / 4; x < im.w; x++) right[logy] += blue(at(&im, x, y));
        stbi_image_free(im.px);
    }
    if (!(right[1] > 200 && right[1] > 5 * right[0])) print_error("the lone value's bar: %ld blue pixels linear, %ld log\n", right[0], right[1]);
    assert_true(right[1] > 200 && right[1] > 5 * right[0]);
}

// the centre of the green pixels in columns x0..x1, and how many there are
static int green_centre(const Img *im, int x0, int x1, double *cx, double *cy) {
    double sx = 0, sy = 0;
    int k = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = x0; x < x1; x++)
            if (green(at(im, x, y))) { sx += x; sy += y; k++; }
    if (k) { *cx = sx / k; *cy = sy / k; }
    return k;
}

// markers = 2 (session 31: depths scored at a few evals, "points, not lines"): two dots far
// apart, nothing between them; the same two points as a line (markers = 1) have it. And y rises
// upward: the right point, the higher value, is drawn higher.
static void test_points_not_joined(void **state) {
    (void)state;
    double x[2] = {0, 1}, y[2] = {0.3, 0.9};
    for (int markers = 2; markers >= 1; markers--) {
        VizSeries s = {.label = "depth 1", .x = x, .y = y, .n = 2, .rgb = 0x2ca02c, .markers = markers};
        VizChart c = {.title = "points", .xlabel = "step", .ylabel = "bpb", .series = &s, .nseries = 1};
        Img im = draw_charts(markers == 2 ? "points.png" : "joined.png", &c, 1, 960, 540);
        double lx = 0, ly = 0, rx = 0, ry = 0;
        assert_true(green_centre(&im, 0, im.w / 2, &lx, &ly) > 0);
        assert_true(green_centre(&im, im.w / 2, im.w, &rx, &ry) > 0);
        // two points: their centres, ~835 px apart and ~390 px apart in rows; a joined line: the
        // centroids of its halves, at about 1/4 and 3/4 of it (~420 and ~200 px: half-bars, so
        // another font's layout moving the plot area by a pixel does not decide it)
        double bx = markers == 2 ? 400 : 200, by = markers == 2 ? 200 : 100;
        assert_true(rx - lx > bx);
        if (!(ly - ry > by)) print_error("left point at row %.0f, right (higher) point at row %.0f\n", ly, ry);
        assert_true(ly - ry > by);
        int mx = (int)lround((lx + rx) / 2), my = (int)lround((ly + ry) / 2), k = 0;
        for (int yy = my - 3; yy <= my + 3; yy++)
            for (int xx = mx - 3; xx <= mx + 3; xx++) k += green(at(&im, xx, yy));
        if ((markers == 2) != (k == 0)) print_error("markers=%d: %d green pixels midway between the points\n", markers, k);
        if (markers == 2) assert_int_equal(k, 0);
        else assert_true(k > 0);
        stbi_image_free(im.px);
    }
}

// how many pixels two images of the same size differ in
static long differ(const Img *a, const Img *b) {
    assert_int_equal(a->w, b->w);
    assert_int_equal(a->h, b->h);
    long k = 0;
    for (int i = 0; i < a->w * a->h; i++) k += memcmp(a->px + 3 * i, b->px + 3 * i, 3) != 0;
    return k;
}

// Two labelled series get a legend (one does not: the title names it). Drawn with and without
// labels, only the legend tells the images apart. And the grid: vertical lines as well as
// horizontal, columns of the grid's grey down the plot.
static void test_legend_and_grid(void **state) {
    (void)state;
    enum { N = 200 };
    double x[N], a[N], b[N];
    Rng r = {.s = 8};
    for (int i = 0; i < N; i++) { x[i] = i; a[i] = 3 + exp(-i / 40.0) + 0.05 * rng_normal(&r); b[i] = 2.6 + exp(-i / 60.0) + 0.05 * rng_normal(&r); }
    VizSeries s[2] = {{.label = "depth 4", .x = x, .y = a, .n = N, .rgb = 0x1f77b4}, {.label = "depth 8", .x = x, .y = b, .n = N, .rgb = 0xff7f0e}};
    VizChart c = {.title = "two", .xlabel = "step", .ylabel = "bpb", .series = s, .nseries = 2};
    Img with = draw_charts("legend.png", &c, 1, 960, 540);
    s[0].label = s[1].label = NULL;
    Img without = draw_charts("nolegend.png", &c, 1, 960, 540);
    long d2 = differ(&with, &without);
    if (d2 < 300) print_error("two labelled series: %ld pixels differ from the unlabelled chart (no legend?)\n", d2);
    assert_true(d2 >= 300);
    s[0].label = "depth 4";
    c.nseries = 1;
    Img one = draw_charts("one.png", &c, 1, 960, 540);
    s[0].label = NULL;
    Img one_bare = draw_charts("one-bare.png", &c, 1, 960, 540);
    assert_int_equal(differ(&one, &one_bare), 0);
    // vertical grid lines: columns of 0xe8e8e8 at least a third of the image tall
    int cols = 0;
    for (int xx = 0; xx < with.w; xx++) {
        int k = 0;
        for (int yy = 0; yy < with.h; yy++) {
            const unsigned char *p = at(&with, xx, yy);
            k += p[0] == 0xe8 && p[1] == 0xe8 && p[2] == 0xe8;
        }
        cols += k > with.h / 3;
    }
    if (cols < 3) print_error("%d grid columns\n", cols);
    assert_true(cols >= 3);
    stbi_image_free(with.px); stbi_image_free(without.px); stbi_image_free(one.px); stbi_image_free(one_bare.px);
}

// the right-most column with pixels of the series colour in rows y0..y1
static int right_edge(const Img *im, int y0, int y1, int (*is)(const unsigned char *)) {
    for (int x = im->w - 1; x >= 0; x--)
        for (int y = y0; y < y1; y++)
            if (is(at(im, x, y))) return x;
    return -1;
}

// Stacked panels with share_x (:plot loss,lr) get one x range, the union of theirs: a panel
// whose data stop at half the other's x ends half way across (QA mutation, session 37: panels
// each on their own range, misaligned, went unseen)
static void test_stacked_share_x(void **state) {
    (void)state;
    enum { N = 100 };
    double xa[N], xb[N], ya[N], yb[N];
    Rng r = {.s = 77};
    for (int i = 0; i < N; i++) {
        xa[i] = 2 * i; xb[i] = i;  // panel 1: x 0..198, panel 2: 0..99
        ya[i] = 1 + rng_uniform(&r); yb[i] = 1 + rng_uniform(&r);
    }
    VizSeries sa = {.x = xa, .y = ya, .n = N, .rgb = 0x2ca02c, .markers = -1}, sb = {.x = xb, .y = yb, .n = N, .rgb = 0xd62728, .markers = -1};
    VizChart c[2] = {{.title = "a", .xlabel = "step", .series = &sa, .nseries = 1, .share_x = 1},
                     {.title = "b", .xlabel = "step", .series = &sb, .nseries = 1, .share_x = 1}};
    Img im = draw_charts("stack.png", c, 2, 960, 720);
    int ra = right_edge(&im, 0, im.h / 2, green), rb = right_edge(&im, im.h / 2, im.h, red);
    // the left edges: where the first points are
    int la = -1, lb = -1;
    for (int x = 0; x < im.w && (la < 0 || lb < 0); x++)
        for (int y = 0; y < im.h; y++) {
            if (la < 0 && y < im.h / 2 && green(at(&im, x, y))) la = x;
            if (lb < 0 && y >= im.h / 2 && red(at(&im, x, y))) lb = x;
        }
    if (!(abs(la - lb) <= 2 && fabs((rb - lb) - 0.5 * (ra - la)) <= 6))
        print_error("panel a x %d..%d, panel b x %d..%d: want b to end half way\n", la, ra, lb, rb);
    assert_true(abs(la - lb) <= 2);
    assert_true(fabs((rb - lb) - 0.5 * (ra - la)) <= 6);
    stbi_image_free(im.px);
}
#endif

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dm_plot_pixels_XXXXXX");
    if (!mkdtemp(dir)) return 1;
#ifdef DM_HAVE_PNG
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_bars),
        cmocka_unit_test(test_hist_lone_outlier),
        cmocka_unit_test(test_points_not_joined),
        cmocka_unit_test(test_legend_and_grid),
        cmocka_unit_test(test_stacked_share_x),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
#else
    int rc = 0;
    printf("test_plot_pixels: built without PNG support; nothing to read back\n");
#endif
    char cmd[128];
    if (!getenv("DM_KEEP_PLOTS")) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) {}
    } else {
        printf("plots kept in %s\n", dir);
    }
    return rc;
}
