// test_cli_stops.c — dmsh as a process: what a script without a session keeps when it stops
// before its end. An exploratory pass (QA, session 41) found that a `-b` script with no
// :session that stopped at an error in a line after a long :train (a typo, found only when that
// line is reached) exited with the trained state in no file and nothing said, and a Ctrl-C said
// "state intact" before the process threw the state away. Such a stop now saves the state where
// session-less checkpoints go (./dmsh-step-N.ckpt), as a SIGTERM's does (test_cli_disk); a
// :quit or the script's end saves nothing, as before (the user chose to leave). And a :train
// whose periodic checkpoint fails (a full disk; here a file-size limit, which fails the write the
// same way) goes on, said, and tries again at the next one (it ended the run).
#include "cli_harness.h"

// the state in FILE loads at step STEP (a fresh dmsh)
static void loads_at(const char *file, int step) {
    char script[600], want[600];
    snprintf(script, sizeof script, ":load %s\n", file);
    expect_ok(script);
    snprintf(want, sizeof want, "loaded %s: step %d, ", file, step);
    expect_out(want);
}

static void test_error_stop_saves(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("rm -f *.ckpt%s", ""), 0);
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:train 6 log_every=6 eval_every=0\n:plto bpb\n:save never.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    const char *want = "s.dm:6: error: unknown command ':plto' (did you mean :plot? see :help)\n"
                       "dmsh: saved dmsh-step-6.ckpt (no session: the state the script's error stopped; :load it to go on)\n";
    if (!strstr(err_, want)) print_error("%s\n", err_);
    assert_non_null(strstr(err_, want));
    assert_int_equal(file_size("never.ckpt"), -1);
    loads_at("dmsh-step-6.ckpt", 6);
    // the same stop again: the file holds that state already, and nothing is said "saved"
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    if (!strstr(err_, "dmsh: kept in dmsh-step-6.ckpt (no session: the state the script's error stopped; :load it to go on), which already held it\n"))
        print_error("%s\n", err_);
    assert_non_null(strstr(err_, "dmsh: kept in dmsh-step-6.ckpt (no session: the state the script's error stopped; :load it to go on), which already held it\n"));
    assert_null(strstr(err_, "saved"));
    // -e lines the same (a second stop at the same step: its own file, the first kept)
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "%%s --norc -e '%s' -e ':data %s' -e ':init seed=2' -e ':step 6' -e ':nosuch' > out.txt 2> err.txt", ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5", corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 1);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "dmsh: saved dmsh-step-6-b1.ckpt (no session: the state the script's error stopped; :load it to go on); "))
        print_error("%s\n", err_);
    assert_non_null(strstr(err_, "dmsh: saved dmsh-step-6-b1.ckpt (no session: the state the script's error stopped; :load it to go on); "));
    assert_true(file_size("dmsh-step-6.ckpt") > 0);
    loads_at("dmsh-step-6-b1.ckpt", 6);
}

// nothing trained, or the state already in a file, or the user's own end: nothing written
static void test_no_save_without_trained_unsaved_steps(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("rm -f *.ckpt%s", ""), 0);
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:plto bpb\n", SMALL, corpus);  // (step 0: its lines rebuild it)
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    assert_null(strstr(err_, "saved"));
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:step 3\n:save mine.ckpt\n:plto bpb\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    assert_null(strstr(err_, "dmsh: saved"));
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:step 3\n:quit\n:plto bpb\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_null(strstr(err_, "saved"));
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:step 3\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_null(strstr(err_, "saved"));
    assert_int_equal(sh_in_dir("ls dmsh-step-* 2> /dev/null | grep -q .%s", ""), 1);
}

// a Ctrl-C (SIGINT) of a script: "state intact" is kept true
static void test_ctrl_c_stop_saves(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("rm -f *.ckpt%s", ""), 0);
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:train 1000000 log_every=20 eval_every=0\n", SMALL, corpus);
    write_file("long.dm", script);
    assert_int_equal(sh_in_dir("(%s --norc -b long.dm > out.txt 2> err.txt & p=$!; for i in $(seq 1200); do grep -q '^step 39 ' out.txt && break; "
                               "sleep 0.05; done; kill -INT $p; wait $p; echo $? > rc.txt)", dmsh), 0);
    slurp_to("rc.txt", out, sizeof out);
    assert_string_equal(out, "1\n");
    slurp_to("err.txt", err_, sizeof err_);
    long long at = -1;
    const char *l = strstr(err_, "long.dm:5: error: interrupted at step ");
    assert_non_null(l);
    assert_int_equal(sscanf(l, "long.dm:5: error: interrupted at step %lld (state intact)", &at), 1);
    assert_true(at >= 40);
    // (the :train stopped part-way: "stops here", not the words of an interrupt after a finished line)
    assert_non_null(strstr(l, " (state intact): the script stops here\n"));
    assert_null(strstr(err_, "ran to its end"));
    char want[300], file[64];
    snprintf(file, sizeof file, "dmsh-step-%lld.ckpt", at);
    snprintf(want, sizeof want, "dmsh: saved %s (no session: the state the Ctrl-C stopped; :load it to go on)\n", file);
    if (!strstr(err_, want)) print_error("%s\n", err_);
    assert_non_null(strstr(err_, want));
    loads_at(file, (int)at);
}

// every checkpoint fails: the run trains to its end, each failure on its own line, and the :train
// ends in an error that says the steps are in no file (the script stops; its exit save says
// the failure again)
static void test_failed_checkpoints_do_not_end_the_run(void **s) {
    (void)s;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "prlimit --fsize=200000: %%s --norc -e ':session cf' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 6 ckpt_every=2 eval_every=0 log_every=6' -e ':step 1' > out.txt 2> err.txt",
             ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5", corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 1);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    for (int k = 2; k <= 6; k += 2) {
        char want[300];
        snprintf(want, sizeof want, "checkpoint at step %d FAILED: runs/cf/ckpt/step-%d.ckpt: cannot save checkpoint: write runs/cf/ckpt/step-%d.ckpt.", k, k, k);
        if (!strstr(out, want)) print_error("%s\n%s\n", out, err_);
        assert_non_null(strstr(out, want));
    }
    assert_non_null(strstr(out, ".tmp: File too large (the previous file, if any, is untouched); training goes on (the next checkpoint tries again)\n"));
    assert_non_null(strstr(out, "step 5 loss "));  // (all 6 steps ran)
    assert_non_null(strstr(err_, "-e #5: error: 3 of this :train's checkpoints failed, the last at step 6 (runs/cf/ckpt/step-6.ckpt: cannot save "
                                 "checkpoint: write runs/cf/ckpt/step-6.ckpt."));
    assert_non_null(strstr(err_, ": the steps since the last one written are in no file (free space, or :save PATH elsewhere)\n"));
    assert_non_null(strstr(err_, "dmsh: autosave failed: "));
    assert_null(strstr(out, "step 6 loss"));  // (the script stopped: no :step 1)
}

// the cause gone part-way (the limit raised from outside, as space freed): the next checkpoint is
// written, the run ends well, and its note counts the failure; -r resumes the last one
static void test_failed_checkpoint_then_written(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, ":session cw\n%s:data %s\n:init seed=1\n:train 2000 ckpt_every=1000 eval_every=0 log_every=1000\n", SMALL, corpus);
    write_file("cw.dm", script);
    assert_int_equal(sh_in_dir("(prlimit --fsize=400000: %s --norc -b cw.dm > out.txt 2> err.txt & p=$!; for i in $(seq 2400); do "
                               "grep -q 'checkpoint at step 1000 FAILED' out.txt && break; sleep 0.05; done; h=$(prlimit --fsize -o HARD --noheadings); prlimit --pid $p --fsize=$h:; "
                               "wait $p; echo $? > rc.txt)", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("rc.txt", script, sizeof script);
    if (strcmp(script, "0\n")) print_error("%s\n%s\n", out, err_);
    assert_string_equal(script, "0\n");
    assert_non_null(strstr(out, "checkpoint at step 1000 FAILED: "));
    assert_non_null(strstr(out, "\ncheckpoint runs/cw/ckpt/step-2000.ckpt\n"));
    assert_non_null(strstr(out, "note: 1 of this run's checkpoints failed; a later one was written\n"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/cw -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "resumed runs/cw at step 2000 from ckpt/step-2000.ckpt"));
}

// A Ctrl-C during a command that does not stop part-way (:anchors fitting its 5-gram model) is
// acted on after it: the script stops before its next line. It was said as that line's error,
// "interrupted ... the script stops here", and a user ran the finished :anchors again (QA,
// session 41). (A corpus of 4 MB makes each :anchors take a while; the signal lands in one of them.)
static void test_interrupt_after_a_finished_line(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("for i in 1 2 3 4; do cat %s; done | head -c 4000000 > big.txt", corpus), 0);
    char script[2000];
    snprintf(script, sizeof script, "%s:set anchor_fit_bytes=4000000\n:data big.txt\n:init seed=1\n:step 1\n:anchors\n:set eval_bytes=65536\n"
             ":anchors\n:set eval_bytes=32768\n:anchors\n", SMALL);
    write_file("anc.dm", script);
    assert_int_equal(sh_in_dir("(%s --norc -b anc.dm > out.txt 2> err.txt & p=$!; for i in $(seq 2400); do grep -q '^step 0 ' out.txt && break; "
                               "sleep 0.02; done; kill -INT $p; wait $p; echo $? > rc.txt)", dmsh), 0);
    slurp_to("rc.txt", out, sizeof out);
    assert_string_equal(out, "1\n");
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    int line = 0;
    const char *l = strstr(err_, "anc.dm:");
    assert_non_null(l);
    assert_int_equal(sscanf(l, "anc.dm:%d: error: ", &line), 1);
    if (!strstr(err_, ": error: interrupted at step 1 (state intact) after this line ran to its end: the script stops before its next line\n"))
        print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(err_, ": error: interrupted at step 1 (state intact) after this line ran to its end: the script stops before its next line\n"));
    assert_true(line == 7 || line == 9 || line == 11);  // (an :anchors line, which finished: its result is printed)
    int nanchors = 0;
    for (const char *q = out; (q = strstr(q, "\nanchors over ")); q++) nanchors++;
    assert_int_equal(nanchors, (line - 5) / 2);
}

// An :init whose model cannot be allocated (here past a 400 MB address-space limit: Engram tables
// of 58M reals) after the live one was let go said only "cannot allocate ...", a refusal that
// read as "nothing happened" (QA, session 41). It says the model it replaced is gone from memory,
// and where it is: a session's checkpoint to :load, or nowhere. (A host whose memory the
// pre-check finds too small refuses before anything is let go: then nothing to see here.)
static void test_failed_init_says_the_model_is_gone(void **s) {
    (void)s;
    char script[2000];
    for (int sess = 0; sess < 3; sess++) {
        // (2: no session, saved, then a step more: the file holds step 2, not the model replaced)
        snprintf(script, sizeof script, "%s%s:data %s\n:init seed=1\n:step 2\n%s:init engram_rows=300000 engram_dim=64\n",
                 sess == 1 ? ":session gi\n" : "", SMALL, corpus, sess == 2 ? ":save a.ckpt\n:step 1\n" : "");
        write_file("oi.dm", script);
        assert_int_equal(sh_in_dir("prlimit --as=400000000: %s --norc -b oi.dm > out.txt 2> err.txt; test $? = 1", dmsh), 0);
        slurp_to("err.txt", err_, sizeof err_);
        if (strstr(err_, "error: this model needs about")) {
            print_message("test_failed_init_says_the_model_is_gone: the memory pre-check refused first here: %s", err_);
            return;
        }
        char at[32];
        snprintf(at, sizeof at, "oi.dm:%d: error: ", sess == 0 ? 6 : sess == 1 ? 7 : 8);
        const char *want = sess == 1 ? "; the model it replaced (step 2) is no longer in memory: :load "
                         : sess == 0 ? "; the model it replaced (step 2) is no longer in memory, and was in no file (:save before an :init "
                                       "that may not fit, or work in a :session, which saves it first)\n"
                                     : "; the model it replaced (step 3) is no longer in memory, and was in no file (";
        if (!strstr(err_, at) || !strstr(err_, want)) print_error("%s\n", err_);
        assert_non_null(strstr(err_, at));
        assert_non_null(strstr(err_, want));
        if (sess == 1) assert_non_null(strstr(err_, "runs/gi/ckpt/step-2.ckpt brings it back\n"));
        if (sess == 2) assert_null(strstr(err_, "a.ckpt"));  // (it holds step 2: not the model replaced)
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_stop_saves),
        cmocka_unit_test(test_no_save_without_trained_unsaved_steps),
        cmocka_unit_test(test_ctrl_c_stop_saves),
        cmocka_unit_test(test_failed_checkpoints_do_not_end_the_run),
        cmocka_unit_test(test_failed_checkpoint_then_written),
        cmocka_unit_test(test_interrupt_after_a_finished_line),
        cmocka_unit_test(test_failed_init_says_the_model_is_gone),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
