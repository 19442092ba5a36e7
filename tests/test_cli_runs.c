// test_cli_runs.c — dmsh as a process, on what a run leaves and shows: :train's ckpt_keep=N
// (sessions/ckpt_keep.c) with a file the run's save found already holding the state and with more
// than 16 files kept, :save into another session's ckpt/ when only one of its files is there, and
// :show metrics' last five steps. (The cases a mutation pass found unchecked, QA session 38;
// test_cli_input.c, home of test_ckpt_keep, and test_cli_saves.c are near the size limit.)
#include "cli_harness.h"

// Back with :load to step 4, then a :train over the same steps: its step-8 save finds step-8.ckpt
// (from before the :train) already holding the state, writes no file, and that file is not the
// run's to remove: `:help train` promises no file from before the :train goes (QA mutation,
// session 38: with the "already held" note ignored, ckpt_keep=1 removed step-8.ckpt at step 12)
static void test_file_already_holding_the_state_stays(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, ":session kh\n%s:data %s\n:init seed=6\n:train 8 ckpt_every=4 eval_every=0 log_every=4\n"
             ":load runs/kh/ckpt/step-4.ckpt\n:train 8 ckpt_every=4 ckpt_keep=1 eval_every=0 log_every=4\n", SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("rc=%d\n%s\n%s\n", rc, out, err_);
    assert_int_equal(rc, 0);
    // (the premise: step 8 recomputed bit for bit, the save wrote nothing)
    if (!strstr(out, "note: runs/kh/ckpt/step-8.ckpt already held this exact state: no new file\n")) print_error("%s\n", out);
    assert_non_null(strstr(out, "note: runs/kh/ckpt/step-8.ckpt already held this exact state: no new file\n"));
    assert_non_null(strstr(out, "checkpoint runs/kh/ckpt/step-12.ckpt\n"));  // nothing of the run's to remove
    assert_null(strstr(out, "removed step-8.ckpt"));
    assert_true(file_size("runs/kh/ckpt/step-8.ckpt") > 0);
    assert_true(file_size("runs/kh/ckpt/step-4.ckpt") > 0);
    assert_true(file_size("runs/kh/ckpt/step-12.ckpt") > 0);
    // (and the run's own files still go: a fourth save removes step-12)
    snprintf(script, sizeof script, ":session kh2\n%s:data %s\n:init seed=6\n:train 8 ckpt_every=4 eval_every=0 log_every=4\n"
             ":load runs/kh2/ckpt/step-4.ckpt\n:train 12 ckpt_every=4 ckpt_keep=1 eval_every=0 log_every=4\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    if (!strstr(out, "checkpoint runs/kh2/ckpt/step-16.ckpt (ckpt_keep=1: removed step-12.ckpt)\n")) print_error("%s\n", out);
    assert_non_null(strstr(out, "checkpoint runs/kh2/ckpt/step-16.ckpt (ckpt_keep=1: removed step-12.ckpt)\n"));
    assert_true(file_size("runs/kh2/ckpt/step-8.ckpt") > 0);
}

// ckpt_keep=17 with a checkpoint every step: the list of the run's files grows past 16 (QA
// mutation, session 38: grown by one place instead of 16, past the end of its memory; tests with
// keep <= 2 fitted in malloc's slack, keep=6 aborted with a double free)
static void test_keep_more_than_sixteen(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, ":session kg\n%s:data %s\n:init seed=8\n:train 20 ckpt_every=1 ckpt_keep=17 eval_every=0 log_every=20\n",
             SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("rc=%d\n%s\n%s\n", rc, out, err_);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "checkpoint runs/kg/ckpt/step-17.ckpt\n"));  // 17 kept: nothing to remove yet
    assert_non_null(strstr(out, "checkpoint runs/kg/ckpt/step-18.ckpt (ckpt_keep=17: removed step-1.ckpt)\n"));
    assert_non_null(strstr(out, "checkpoint runs/kg/ckpt/step-20.ckpt (ckpt_keep=17: removed step-3.ckpt)\n"));
    // steps 4 to 20 stay, 1 to 3 went
    assert_int_equal(sh_in_dir("test \"$(ls runs/kg/ckpt/step-*.ckpt | wc -l)\" = 17%s", ""), 0);
    for (int k = 1; k <= 20; k++) {
        char name[64];
        snprintf(name, sizeof name, "runs/kg/ckpt/step-%d.ckpt", k);
        if (k <= 3)
            assert_int_equal(file_size(name), -1);
        else
            assert_true(file_size(name) > 0);
    }
}

// :show metrics lists the last five steps' rows, evals between them left out (QA mutation, session
// 38: six were shown, one more than said)
static void test_show_metrics_last_five(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, "%s:set eval_bytes=256\n:data %s\n:init seed=9\n:step 6\n:eval\n:step 3\n:show metrics\n", SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("rc=%d\n%s\n%s\n", rc, out, err_);
    assert_int_equal(rc, 0);
    const char *m = strstr(out, "metric rows, step 9, ");
    if (!m) print_error("%s\n", out);
    assert_non_null(m);
    int n = 0;
    for (const char *p = m; (p = strstr(p, "\n  step ")); p++) n++;
    if (n != 5) print_error("%s\n", m);
    assert_int_equal(n, 5);
    assert_non_null(strstr(m, "\n  step 4 loss "));  // steps 4 to 8, the eval (after step 5) not among them
    assert_non_null(strstr(m, "\n  step 8 loss "));
    assert_null(strstr(m, "\n  step 3 loss "));
    assert_non_null(strstr(m, "\n  last eval: step 6 "));
}

// A directory holding ckpt/ with only one of a session's files (transcript.dm removed by hand, or
// an older layout with config.dm alone) is still another session: :save into its ckpt/ is refused
// (QA mutation, session 38: with both files required, such a save went through)
static void test_save_into_a_session_with_one_file(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, ":session one\n%s:data %s\n:init seed=3\n:step 2\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_int_equal(sh_in_dir("rm runs/one/transcript.dm && test -f runs/one/config.dm%s", ""), 0);
    snprintf(script, sizeof script, "%s:data %s\n:init seed=41\n:save runs/one/ckpt/mine.ckpt\n", SMALL, corpus);
    expect_error(script, "inside the checkpoints of session");
    assert_int_equal(file_size("runs/one/ckpt/mine.ckpt"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_already_holding_the_state_stays),
        cmocka_unit_test(test_keep_more_than_sixteen),
        cmocka_unit_test(test_show_metrics_last_five),
        cmocka_unit_test(test_save_into_a_session_with_one_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
