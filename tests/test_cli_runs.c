// test_cli_keep.c — dmsh as a process, on :train's ckpt_keep=N (sessions/ckpt_keep.c): a file
// the run's save found already holding the state is no file of the run's, and a run keeping more
// than 16 files. (test_cli_input.c holds test_ckpt_keep, the first cases; its file is near the
// size limit. These are the cases a mutation pass found unchecked, QA session 38.)
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_already_holding_the_state_stays),
        cmocka_unit_test(test_keep_more_than_sixteen),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
