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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keeps_every_line),
        cmocka_unit_test(test_newest_few),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
