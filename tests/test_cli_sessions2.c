// test_cli_sessions2.c — dmsh as a process: what a run reports about its evals. :sessions quotes
// the deepest depth of an :eval-depths; an eval's "ran:" counts are its own forwards, not every
// forward since :init; anchors fit on fewer bytes than anchor_fit_bytes now asks are not quoted;
// and an eval window whose last batch holds several sequences keeps its anchors.
#include <math.h>
#include "cli_harness.h"

static const char *TINY = ":preset nano; :set d=32 H=2 L=3 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5 "
                          "eval_bytes=4096";

// the bpb of the line "eval step STEP depth DEPTH bpb X over ..." in text; -1 when there is none
static double eval_line_bpb(const char *text, int step, int depth) {
    char want[64];
    snprintf(want, sizeof want, "eval step %d depth %d bpb ", step, depth);
    const char *p = strstr(text, want);
    double v = -1;
    if (p) assert_int_equal(sscanf(p + strlen(want), "%lf", &v), 1);
    return v;
}

// After :eval-depths (one row per depth), :sessions quotes the deepest depth's bpb, the model's
// own output, as a plain :eval would (mutation testing, QA session 39: the shallowest depth's
// row was quoted, labelled depth 1, and the table that sets runs side by side compared the
// wrong numbers)
static void test_sessions_quotes_the_deepest(void **s) {
    (void)s;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session ed' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 3' -e ':eval-depths' "
             "> k.out 2>&1", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("k.out", out, sizeof out);
    double d1 = eval_line_bpb(out, 3, 1), d3 = eval_line_bpb(out, 3, 3);
    if (d1 < 0 || d3 < 0) print_error("%s\n", out);
    assert_true(d1 > 0 && d3 > 0);
    assert_true(fabs(d1 - d3) > 2e-4);  // (the two depths tell the rows apart)
    assert_int_equal(sh_in_dir("%s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    const char *ss = strstr(out, "  runs/ed  (latest checkpoint: ");
    if (!ss) print_error("%s\n", out);
    assert_non_null(ss);
    ss = strchr(ss, '\n') + 1;
    const char *h = strstr(ss, "; held-out bpb ");
    double shown = -1;
    if (!h || !strstr(h, " (depth 3, step 3, over 4096 B)")) print_error("%s\n", out);
    assert_non_null(h);
    assert_non_null(strstr(h, " (depth 3, step 3, over 4096 B)"));
    assert_int_equal(sscanf(h, "; held-out bpb %lf", &shown), 1);
    if (fabs(shown - d3) > 6e-5) fail_msg(":sessions bpb %.4f, the eval's depth 3: %.4f (depth 1: %.4f)", shown, d3, d1);
}

// One dmsh run, seq 32, batch 5, 4096 B: 128 sequences, 26 batches, the last holding 3 and 2
// padding copies.
// * The eval after :step 3 ran 26 x L=2 = 52 KDA and MoE forwards; the 3 steps' forwards before
//   it are not its own (mutation testing, QA session 39: the running total, 58, passed, since
//   the only test of the count evaluated at step 0).
// * Its line shows the anchors fit before the steps: the window's id is the anchors' when the
//   last batch holds several sequences (the same session: the batch's first sequence's last
//   target hashed, the anchors were dropped from every such eval line).
// * anchor_fit_bytes raised past the fit: the anchors are not quoted, and the line says why (the
//   same session: only a lowered anchor_fit_bytes was tested, a raised one quoted the old fit).
static void test_eval_line_is_this_evals(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:set batch=5 eval_bytes=4096 anchor_fit_bytes=65536\n:data %s\n:init seed=1\n:anchors\n"
             ":step 3\n:eval\n:set anchor_fit_bytes=131072\n:eval\n", SMALL, corpus);
    expect_ok(script);
    const char *e1 = strstr(out, "\neval step 3 depth 2 bpb ");
    assert_non_null(e1);
    const char *e2 = strstr(e1 + 1, "\neval step 3 depth 2 bpb ");
    assert_non_null(e2);
    char first[600];
    snprintf(first, sizeof first, "%.*s", (int)(e2 - e1), e1);  // the first eval's two lines
    if (!strstr(first, " over 4096 B (128 x 32) | unigram ") || !strstr(first, "\n  ran: kda=52 moe=52 forward iterations"))
        print_error("%s\n", first);
    assert_non_null(strstr(first, " over 4096 B (128 x 32) | unigram "));
    assert_non_null(strstr(first, "\n  ran: kda=52 moe=52 forward iterations, engram=12288 table rows (+192 for 2 padding copies"));
    expect_out(" over 4096 B (128 x 32) | anchors fit on 65536 training bytes, not anchor_fit_bytes=131072: :anchors refits them\n");
    assert_null(strstr(e2, " | unigram "));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sessions_quotes_the_deepest),
        cmocka_unit_test(test_eval_line_is_this_evals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
