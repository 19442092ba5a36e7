// test_panel_text.c — the :train panel's text and layout (repl/panel_text.h), without a terminal.
// QA, session 31: the panel kept only its last 256 lines and printed those on close (a run with
// ckpt_every=1 lost its first checkpoints' lines from the screen, unsaid), and a small terminal
// showed the OLDEST of its log lines and dropped the chart as soon as one line came in.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../repl/panel_text.h"
#include "../repl/shell.h"

// Every line is kept for the scrollback, drawable or not, in order, far past the old 256.
static void test_keeps_every_line(void **s) {
    (void)s;
    PanelText t = {0};
    char line[64];
    for (int i = 0; i < 5000; i++) {
        snprintf(line, sizeof line, "%s %d", i % 3 ? "checkpoint" : "step", i);
        assert_int_equal(panel_text_add(&t, line, i % 3 != 0), 0);
    }
    // the scrollback: 5000 lines, oldest first
    int n = 0;
    const char *p = t.all, *end = t.all + t.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', end - p);
        assert_non_null(nl);
        snprintf(line, sizeof line, "%s %d", n % 3 ? "checkpoint" : "step", n);
        assert_int_equal((int)(nl - p), (int)strlen(line));
        assert_memory_equal(p, line, strlen(line));
        n++;
        p = nl + 1;
    }
    assert_int_equal(n, 5000);
    // drawable: only the "checkpoint" lines; the newest first
    assert_int_equal(t.nshown, 5000 - 1667);
    assert_string_equal(panel_text_newest(&t, 0), "checkpoint 4999");
    assert_string_equal(panel_text_newest(&t, 1), "checkpoint 4997");
    assert_string_equal(panel_text_newest(&t, 2), "checkpoint 4996");
    assert_non_null(panel_text_newest(&t, PANEL_SHOWN - 1));
    assert_null(panel_text_newest(&t, PANEL_SHOWN));
    assert_null(panel_text_newest(&t, -1));
    panel_text_free(&t);
    assert_null(panel_text_newest(&t, 0));
}

// Fewer lines than the ring: newest() stops at what there is.
static void test_newest_few(void **s) {
    (void)s;
    PanelText t = {0};
    panel_text_add(&t, "a", 1);
    panel_text_add(&t, "hidden", 0);
    panel_text_add(&t, "b", 1);
    assert_string_equal(panel_text_newest(&t, 0), "b");
    assert_string_equal(panel_text_newest(&t, 1), "a");
    assert_null(panel_text_newest(&t, 2));
    assert_int_equal((int)t.len, (int)strlen("a\nhidden\nb\n"));
    assert_memory_equal(t.all, "a\nhidden\nb\n", t.len);
    panel_text_free(&t);
}

static void layout(int avail, long long nshown, int want_h, int want_logs) {
    int h = -1, logs = -1;
    panel_layout(avail, nshown, &h, &logs);
    if (h != want_h || logs != want_logs)
        print_error("avail %d, %lld lines: chart %d rows and %d log lines (want %d and %d)\n", avail, nshown, h, logs, want_h,
                    want_logs);
    assert_int_equal(h, want_h);
    assert_int_equal(logs, want_logs);
    // never more rows than there are: title + chart, a blank row, the lines
    int used = (h ? 1 + h : 0) + (h && logs ? 1 : 0) + logs;
    assert_true(used <= (avail > 0 ? avail : 0));
}

static void test_layout(void **s) {
    (void)s;
    layout(30, 0, 12, 0);   // a tall terminal: the chart at its cap
    layout(30, 100, 12, 6); // ... and the 6 newest lines
    layout(15, 2, 11, 2);   // title, 11 rows, blank, 2 lines
    layout(10, 6, 2, 6);    // exactly title + 2 + blank + 6
    layout(9, 6, 2, 5);     // short by one: the chart keeps 2 rows, 5 newest lines
    layout(5, 6, 2, 1);     // the smallest with a chart and a line (QA: the chart went)
    layout(4, 6, 0, 4);     // no room for both: the newest lines
    layout(4, 0, 3, 0);     // no lines: the chart
    layout(2, 0, 0, 0);     // a title with one row is no chart
    layout(1, 3, 0, 1);
    layout(0, 3, 0, 0);
    layout(-2, 3, 0, 0);
}

// the numbers of the step, eval and panel lines: fixed-point below 1e6, an exponent past it
// (a blown-up run printed "loss 614568751127530109835518410752.0000": QA, session 34)
static void test_numbers(void **s) {
    (void)s;
    char b[32];
    assert_string_equal(sh_num(b, 5.36384, 4), "5.3638");
    assert_string_equal(sh_num(b, 999999.5, 3), "999999.500");
    assert_string_equal(sh_num(b, 6.1456875e29, 4), "6.1457e+29");
    assert_string_equal(sh_num(b, -2.5e7, 3), "-2.500e+07");
    assert_string_equal(sh_num(b, INFINITY, 3), "inf");
    assert_string_equal(sh_num(b, NAN, 4), "nan");
}

// ---- the numbers the panel draws (QA mutation, session 37: an ETA of 3725 s shown as
// "1h62m05s", the bar at 50 % saying "0.5%", both chart scale labels the top value, the chart
// upside down, each column its first loss, and the gnorm field showing the loss all passed) --

static void test_eta(void **s) {
    (void)s;
    static const struct { double s; const char *want; } eta[] = {
        {3725, "1h02m05s"}, {59.6, "1m00s"}, {59.4, "59s"}, {0, "0s"}, {247, "4m07s"}, {7322.4, "2h02m02s"},
        {3599.5, "1h00m00s"}, {90061, "25h01m01s"}, {-1, "--"}, {NAN, "--"}, {INFINITY, "--"}};
    char b[32];
    for (size_t i = 0; i < sizeof eta / sizeof *eta; i++) {
        panel_fmt_eta(b, sizeof b, eta[i].s);
        if (strcmp(b, eta[i].want)) print_error("ETA of %g s: '%s', want '%s'\n", eta[i].s, b, eta[i].want);
        assert_string_equal(b, eta[i].want);
    }
    // any time read back: hours, minutes under 60, seconds under 60, summing to the rounded time
    unsigned r = 12345;
    for (int i = 0; i < 2000; i++) {
        r = r * 1103515245u + 12345u;
        double t = (r >> 8) % 400000 + (r & 255) / 256.0;
        panel_fmt_eta(b, sizeof b, t);
        long h = 0, m = 0, sec = 0;
        if (strchr(b, 'h')) assert_int_equal(sscanf(b, "%ldh%ldm%lds", &h, &m, &sec), 3);
        else if (strchr(b, 'm')) assert_int_equal(sscanf(b, "%ldm%lds", &m, &sec), 2);
        else assert_int_equal(sscanf(b, "%lds", &sec), 1);
        if (m >= 60 || sec >= 60 || h * 3600 + m * 60 + sec != (long)(t + 0.5)) print_error("ETA of %.3f s: '%s'\n", t, b);
        assert_true(m < 60 && sec < 60);
        assert_int_equal(h * 3600 + m * 60 + sec, (long)(t + 0.5));
    }
}

static void test_bar_percent(void **s) {
    (void)s;
    static const struct { double f; const char *want; } pct[] = {{0.5, " 50.0%"}, {0, "  0.0%"}, {1, "100.0%"}, {0.1234, " 12.3%"}, {0.999, " 99.9%"}};
    char b[16];
    for (size_t i = 0; i < sizeof pct / sizeof *pct; i++) {
        panel_fmt_pct(b, sizeof b, pct[i].f);
        if (strcmp(b, pct[i].want)) print_error("bar at %g: '%s', want '%s'\n", pct[i].f, b, pct[i].want);
        assert_string_equal(b, pct[i].want);
    }
}

// the chart's columns are the means of consecutive slices of the losses (every loss in one
// slice, the slices within one of each other in size), NaN skipped; a taller column is a higher
// mean; the scale says the top value on the top row and the bottom value on the bottom row
static void test_chart_numbers(void **s) {
    (void)s;
    enum { N = 503, W = 70 };
    double loss[N], v[W], lo, hi;
    unsigned r = 777;
    for (int i = 0; i < N; i++) {
        r = r * 1103515245u + 12345u;
        loss[i] = 5.0 * exp(-i / 150.0) + 1.0 + ((r >> 8) % 1000) / 2000.0;
    }
    loss[40] = NAN; loss[41] = INFINITY;
    assert_int_equal(panel_chart_columns(loss, N, W, v, &lo, &hi), W);
    int first = 0;
    double vlo = INFINITY, vhi = -INFINITY;
    for (int c = 0; c < W; c++) {
        int last = (int)((long long)(c + 1) * N / W);  // the slice [first, last)
        assert_true(last - first == N / W || last - first == N / W + 1);
        double sum = 0;
        int m = 0;
        for (int i = first; i < last; i++)
            if (isfinite(loss[i])) { sum += loss[i]; m++; }
        if (fabs(v[c] - sum / m) > 1e-12) print_error("column %d (losses %d..%d): %.15g, want the mean %.15g\n", c, first, last - 1, v[c], sum / m);
        assert_true(fabs(v[c] - sum / m) <= 1e-12);
        vlo = fmin(vlo, v[c]); vhi = fmax(vhi, v[c]);
        first = last;
    }
    assert_int_equal(first, N);
    assert_true(lo == vlo && hi == vhi);
    // more columns than losses: one loss each
    assert_int_equal(panel_chart_columns(loss, 10, W, v, &lo, &hi), 10);
    for (int c = 0; c < 10; c++) assert_true(v[c] == loss[c]);
    // levels: 1 at the bottom value, every eighth of h rows at the top, rising with the value;
    // a column fills its rows from the bottom, the eighths summing to its level
    int h = 6, prev = 0;
    assert_int_equal(panel_chart_level(lo, lo, hi, h), 1);
    assert_int_equal(panel_chart_level(hi, lo, hi, h), h * 8);
    for (int k = 0; k <= 100; k++) {
        int lev = panel_chart_level(lo + (hi - lo) * k / 100, lo, hi, h);
        assert_true(lev >= prev && lev >= 1 && lev <= h * 8);
        prev = lev;
        int sum = 0;
        for (int row = 0; row < h; row++) {
            int f = panel_chart_fill(lev, row, h);
            assert_true(f >= 0 && f <= 8);
            if (row + 1 < h && f) assert_int_equal(panel_chart_fill(lev, row + 1, h), 8);  // nothing floats
            sum += f;
        }
        assert_int_equal(sum, lev);
    }
    assert_int_equal(panel_chart_fill(1, h - 1, h), 1);  // the lowest loss: a sliver on the bottom row
    assert_int_equal(panel_chart_fill(1, 0, h), 0);
    char b[32];
    panel_chart_scale(b, sizeof b, 0, h, 1.25, 4.5);
    assert_string_equal(b, "  4.5000 ");
    panel_chart_scale(b, sizeof b, h - 1, h, 1.25, 4.5);
    assert_string_equal(b, "  1.2500 ");
    panel_chart_scale(b, sizeof b, 2, h, 1.25, 4.5);
    assert_string_equal(b, "         ");
}

static void test_status_fields(void **s) {
    (void)s;
    PanelInfo in = {.step = 1234, .start_step = 1000, .end_step = 5000, .loss_last = 4.5, .bpb = NAN, .tok_s = 51234.4,
                    .eta_s = 3725, .eta_more = " + 2 evals not yet timed", .skipped = 3, .lr = 3e-4, .gnorm = 0.123,
                    .off = "kda engram", .busy = "evaluating..."};
    char f[12][96];
    panel_fields(f, &in, 123.45);
    static const char *const want[12] = {"dmsh :train", "step 1234 / 5000", "loss 4.5000", "bpb --", "lr 3.000e-04", "gnorm 0.123",
                                         "tok/s 51234", "ETA 1h02m05s + 2 evals not yet timed", "RSS 123.5 MiB", "skipped 3",
                                         "OFF: kda engram", "evaluating..."};
    for (int i = 0; i < 12; i++) {
        if (strcmp(f[i], want[i])) print_error("field %d: '%s', want '%s'\n", i, f[i], want[i]);
        assert_string_equal(f[i], want[i]);
    }
    in.bpb = 1.23456; in.off = NULL; in.busy = NULL; in.eta_s = -1; in.eta_more = NULL; in.emulated = 1;
    panel_fields(f, &in, 1);
    assert_string_equal(f[3], "bpb 1.2346");
    assert_string_equal(f[10], "");
    assert_string_equal(f[11], "");
    assert_string_equal(f[7], "ETA --");
    assert_string_equal(f[6], "tok/s 51234 (cuemu: emulated on the CPU)");
    // on a GPU, the device memory the backend holds beside the host's RSS (session 40)
    in.device = "cuda:0"; in.dev_mib = 2048.25;
    panel_fields(f, &in, 99.96);
    assert_string_equal(f[8], "RSS 100.0 MiB, cuda:0 2048.2 MiB");
    in.device = "cpu";
    panel_fields(f, &in, 99.96);
    assert_string_equal(f[8], "RSS 100.0 MiB");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keeps_every_line),
        cmocka_unit_test(test_newest_few),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_eta),
        cmocka_unit_test(test_bar_percent),
        cmocka_unit_test(test_chart_numbers),
        cmocka_unit_test(test_status_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
