// test_cli_mut7.c — dmsh as a process: what a mutation pass (QA, session 41, round 7b) found no
// test noticing in :bench, :init, :check, --replay, :set's notes, :help KEY, :save and :stress.
// Each test says the mutant it catches; each holds a case that passes today and one the mutant
// changes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli_harness.h"

// SMALL with the corpus open and a model built with SEED (the script's lines 1..4)
static void small_model(char *buf, size_t n, int seed, const char *rest) {
    snprintf(buf, n, "%s:data %s\n:init seed=%d\n%s", SMALL, corpus, seed, rest);
}

// how many times NEEDLE is in HAY
static int count_of(const char *hay, const char *needle) {
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) k++;
    return k;
}

// QA mutation, session 41 (V6): :bench in a session runs its warm and timed steps with the
// session's directory cleared, so their rows never reach runs/NAME/metrics.tsv (it restores the
// state: rows of steps the model does not keep would be a history it never had). With
// `e->session_dir[0] = 0` dropped, `:step 2 / :bench steps=2` left 7 lines (header, 2 + 4 rows).
static void test_bench_writes_no_rows(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:session bq\n:init seed=3\n:step 2\n:bench steps=2\n", SMALL, corpus);
    expect_ok(script);
    expect_out("\nbench cpu (");
    char tsv[8192];
    slurp_to("runs/bq/metrics.tsv", tsv, sizeof tsv);
    if (count_lines(tsv) != 3) print_error("%s\n", tsv);
    assert_int_equal(count_lines(tsv), 3);
    assert_int_equal(strncmp(tsv, "kind\tstep\t", 10), 0);
    const char *r0 = strchr(tsv, '\n') + 1, *r1 = strchr(r0, '\n') + 1;
    assert_int_equal(strncmp(r0, "train\t0\t", 8), 0);
    assert_int_equal(strncmp(r1, "train\t1\t", 8), 0);
}

// QA mutation, session 41 (S1): a horizon the first :train chose (steps=4) is dropped by the
// next :init, but not one the :init names itself: `:init seed=2 steps=50` keeps 50. With
// `&& !user_steps` dropped, it said "config: steps 4 -> 0" and the model ran with no horizon.
static void test_init_keeps_its_own_steps(void **s) {
    (void)s;
    char script[2000];
    small_model(script, sizeof script, 1, ":train 4 eval_every=0\n:init seed=2 steps=50\n:help steps\n");
    expect_ok(script);
    expect_out("\nconfig: steps 4 -> 50\ninit seed 2: ");
    expect_out("; now 50\n");
    // (without steps=, the :train's horizon is the old model's: dropped to 0, said)
    small_model(script, sizeof script, 1, ":train 4 eval_every=0\n:init seed=2\n:help steps\n");
    expect_ok(script);
    expect_out("; now 0\n");
    assert_null(strstr(out, "config: steps 4 -> 50"));
}

// QA mutation, session 41 (V1): :check determinism runs the live model as it is, so each of the
// options of the other checks is refused by name, floor= (the last of six) among them. With the
// loop cut to five, floor=off was ignored and the check ran.
static void test_determinism_refuses_each_option(void **s) {
    (void)s;
    const char *opts[] = {"off=kda", "batch=4", "seq=32", "precision=fp32", "route=own", "floor=off"};
    for (unsigned i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char script[2000], line[100], want[400];
        snprintf(line, sizeof line, ":check determinism steps=2 %s\n", opts[i]);
        small_model(script, sizeof script, 4, line);
        snprintf(want, sizeof want,
                 "s.dm:5: error: :check determinism takes steps=N only (it runs the live model as it is: %.*s= does not apply; "
                 ":set / :arm change the model)\n",
                 (int)strcspn(opts[i], "="), opts[i]);
        expect_error(script, want);
        assert_string_equal(err_, want);
        assert_null(strstr(out, "determinism: "));
    }
}

// QA mutation, session 41 (V11): :check determinism without steps= runs 3 steps twice, as
// docs/commands.md says (every other test passes steps=; the default cut to 2 went unseen)
static void test_determinism_default_steps(void **s) {
    (void)s;
    char script[2000];
    small_model(script, sizeof script, 4, ":check determinism\n");
    expect_ok(script);
    expect_out("\ndeterminism: PASS — 3 steps twice from step 0: ");
    expect_out("; the model kept the second pass, now at step 3\n");
}

// QA mutation, session 41 (R1, R2): --replay shows the first process's output (the second runs
// quiet) and, when one digest is longer, names the process whose digest it is. The test hook
// DMSH_REPLAY_PERTURB=1 adds a line to the second process's digest; with `*a ? 1 : 2` swapped the
// report named process 1. With the quiet flag on the first process (`k == 0`), a replay whose
// first process failed showed none of its output.
static void test_replay_names_and_shows(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:set eval_bytes=512\n:data %s\n:init seed=9\n:step 3\n:eval\n", SMALL, corpus);
    write_file("rp.dm", script);
    assert_int_equal(sh_in_dir("timeout 120 %s --replay rp.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_int_equal(count_of(out, "step 0 loss "), 1);  // one process's lines, not two
    assert_int_equal(count_of(out, "\neval step 3 depth "), 1);
    assert_non_null(strstr(out, "replay rp.dm: 2 processes bit-identical: 3 train steps"));
    assert_int_equal(sh_in_dir("DMSH_REPLAY_PERTURB=1 timeout 120 %s --replay rp.dm > out.txt 2> err.txt", dmsh), 1);
    slurp_to("out.txt", out, sizeof out);
    const char *m = strstr(out, "replay rp.dm: NOT bit-identical: process 2's digest has more lines (from line ");
    if (!m) print_error("%s\n", out);
    assert_non_null(m);
    int line = 0;
    char tail[40] = "";
    assert_int_equal(sscanf(m, "replay rp.dm: NOT bit-identical: process 2's digest has more lines (from line %d: %39[^\n]", &line, tail), 2);
    assert_true(line > 3);  // (after the step line and the 3 train rows)
    assert_string_equal(tail, "perturbed)");
    // the first process fails: its output is shown, and its failure said
    small_model(script, sizeof script, 9, ":step 2\n:bogus\n");
    write_file("rb.dm", script);
    assert_int_equal(sh_in_dir("timeout 120 %s --replay rb.dm > out.txt 2> err.txt", dmsh), 1);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(out, "\nstep 1 loss ")) print_error("stdout:\n%s\nstderr:\n%s\n", out, err_);
    assert_non_null(strstr(out, "\ninit seed 9: "));
    assert_non_null(strstr(out, "\nstep 1 loss "));
    assert_string_equal(err_, "replay rb.dm: process 1 of 2\nrb.dm:6: error: unknown command ':bogus' (see :help)\n"
                              "dmsh: --replay: process 1 of 2 failed (exit 1): the script must run to its end\n");
}

// QA mutation, session 41 (C1): `:set lr=X steps=N` on a trained model moves the lr by the new lr,
// not by a schedule recomputed over the old one: no "lr goes from" note (with `&& cfg.lr ==
// old.lr` dropped, it said "from 9.051e-03", the new lr times the old multiplier: step 9 ran at
// 2.780e-03). A horizon alone does say it (the note is there to be missed).
static void test_set_lr_and_steps_no_schedule_note(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:set warmup=2 steps=40\n:data %s\n:init\n:step 10\n:set lr=0.01 steps=80\n:set steps=120\n",
             SMALL, corpus);
    expect_ok(script);
    expect_out("\nstep 9 loss ");
    assert_int_equal(count_of(out, "lr goes from"), 1);
    const char *n = strstr(out, "note: step 10's lr goes from 9.768e-03 to 9.898e-03 (0.977x to 0.99x of lr): the schedule is a function "
                                "of the step and steps=120");
    if (!n) print_error("%s\n", out);
    assert_non_null(n);
}

// QA mutation, session 41 (S3): with an eval= file open, eval_frac splits nothing, so
// `:init eval_frac=0.2` is taken (the refusal, "`:set eval_frac` first", is for a corpus the split
// comes from). With `&& !eval_path[0]` dropped, it was refused.
static void test_init_eval_frac_with_eval_file(void **s) {
    (void)s;
    srand(41);
    char ev[8001];
    for (int i = 0; i < 8000; i++) ev[i] = rand() % 7 == 0 ? ' ' : (char)('a' + rand() % 26);
    ev[8000] = 0;
    write_file("ev.txt", ev);
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s eval=ev.txt\n:init eval_frac=0.2 seed=6\n", SMALL, corpus);
    expect_ok(script);
    expect_out("; eval ev.txt: 1 file, 8000 B\nconfig: eval_frac 0.1 -> 0.2\ninit seed 6: ");
    // (without eval=, the refusal stands)
    snprintf(script, sizeof script, "%s:data %s\n:init eval_frac=0.2 seed=6\n", SMALL, corpus);
    expect_error(script, "s.dm:4: error: :init: eval_frac splits the open corpus: `:set eval_frac=0.2` first (it re-splits), then :init\n");
}

// QA mutation, session 41 (S4, S5): in the session's own ckpt/, :save refuses a hidden name (and a
// .tmp: test_cli_saves), names -r passes over; anywhere else both are the user's to choose.
// With `bn[0] == '.' ||` dropped the hidden one was written; with `&& session_own_ckpt()`
// dropped, model.tmp and .m.ckpt were refused everywhere.
static void test_save_name_rule_only_in_own_ckpt(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:session gx\n:init seed=5\n:step 2\n:save runs/gx/ckpt/.hidden.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    const char *want = "s.dm:7: error: runs/gx/ckpt/.hidden.ckpt: in this session's ckpt/ a checkpoint needs a name dmsh -r reads "
                       "(not hidden, not .tmp: those are temp files): choose another\n";
    if (strncmp(err_, want, strlen(want))) print_error("%s\n", err_);
    assert_int_equal(strncmp(err_, want, strlen(want)), 0);
    assert_int_equal(file_size("runs/gx/ckpt/.hidden.ckpt"), -1);
    // no session
    small_model(script, sizeof script, 5, ":step 2\n:save model.tmp\n:save .m.ckpt\n");
    expect_ok(script);
    expect_out("\nsaved model.tmp (step 2)\nsaved .m.ckpt (step 2)\n");
    assert_true(file_size("model.tmp") > 0 && file_size(".m.ckpt") > 0);
    // a session, outside its ckpt/
    snprintf(script, sizeof script, "%s:data %s\n:session gy\n:init seed=5\n:step 2\n:save gy.tmp\n:save runs/gy/.gy.ckpt\n", SMALL, corpus);
    expect_ok(script);
    expect_out("\nsaved gy.tmp (step 2)\nsaved runs/gy/.gy.ckpt (step 2)\n");
    assert_true(file_size("gy.tmp") > 0 && file_size("runs/gy/.gy.ckpt") > 0);
}

// QA mutation, session 41 (V4): a :stress that stops at an error (here nan_limit) says
// "stopped after N steps"; "interrupted" is a Ctrl-C's or a signal's (test_cli_resume). The
// mutant said "interrupted" for both.
static void test_stress_stopped_not_interrupted(void **s) {
    (void)s;
    char script[2000];
    small_model(script, sizeof script, 1, ":step 2\n:set clip=0 nan_limit=2 eps=1e-30 beta2=0 wd=0\n:stress lr_mult=3000 steps=200\n");
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    if (!strstr(out, "\nstress lr_mult=3000 steps=200, stopped after ")) print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(out, "\nstress lr_mult=3000 steps=200, stopped after "));
    assert_null(strstr(out, "interrupted"));
    assert_non_null(strstr(err_, "s.dm:7: error: step "));
    assert_non_null(strstr(err_, ": nan_limit (2) consecutive non-finite steps"));
}

// QA mutation, session 41 (C3): :help KEY says when each live key is first used; the keys read by
// a command, not by a step, say which (the table cut to its first two said "from the next step"
// for eval_frac, eval_every, ckpt_every and log_every)
static void test_help_says_when_a_key_applies(void **s) {
    (void)s;
    const struct { const char *key, *when; } k[] = {
        {"eval_bytes", "at the next eval and :anchors (the eval window)"},
        {"anchor_fit_bytes", "at the next :anchors"},
        {"eval_frac", "at once (the open corpus is split again) or at the next :data"},
        {"eval_every", "from the next :train"},
        {"ckpt_every", "from the next :train"},
        {"log_every", "from the next :train"},
        {"lr", "from the next step"},
    };
    for (unsigned i = 0; i < sizeof k / sizeof k[0]; i++) {
        char script[100], want[300];
        snprintf(script, sizeof script, ":help %s\n", k[i].key);
        expect_ok(script);
        snprintf(want, sizeof want, "\n  live: :set %s=VALUE on a live model takes effect %s (kept in the session's transcript and checkpoints)\n",
                 k[i].key, k[i].when);
        expect_out(want);
    }
}

// QA mutation, session 41 (V2): :check parity takes precision=fp32|bf16, route=device|own and
// floor=on|off, each checked before CUDA is looked for; on a machine without CUDA every valid
// value reaches "CUDA ... not available" (with bf16 dropped from the check it was refused as
// "precision=bf16: fp32 or bf16"). A machine with CUDA would run the comparisons: skipped there.
static void test_parity_options_valid_without_cuda(void **s) {
    (void)s;
    const char *na = "s.dm:1: error: :check parity compares the CPU with CUDA, which is not available: ";
    assert_int_not_equal(run(":check parity\n", out, sizeof out, err_, sizeof err_), 0);
    if (!strstr(err_, na)) { skip(); return; }
    const char *ok[] = {"precision=bf16", "precision=fp32", "route=device", "route=own", "floor=on", "floor=off",
                        "batch=2 seq=16 precision=bf16 route=own floor=off"};
    for (unsigned i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char script[200];
        snprintf(script, sizeof script, ":check parity %s\n", ok[i]);
        expect_error(script, na);
        assert_int_equal(strncmp(err_, na, strlen(na)), 0);
    }
    expect_error(":check parity precision=fp16\n", "s.dm:1: error: precision=fp16: fp32 or bf16\n");
}

// QA mutation, session 41 (R5): --replay sweeps a dead replay's temp files only when they are this
// user's (on a shared /tmp another user's are theirs; root's replay could remove them). Tests run
// as root here, so files chowned to nobody (65534) stand for the other user's; with the owner
// check dropped they were removed.
static void test_replay_sweep_spares_others(void **s) {
    (void)s;
    if (getuid() != 0) { skip(); return; }  // (chown needs root)
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    assert_true(dead > 0);
    waitpid(dead, NULL, 0);
    char cmd[1600], script[1200];
    snprintf(cmd, sizeof cmd,
             "rm -rf td && mkdir td && touch td/dmsh-replay-%d-pLmKoJ td/dmsh-replay-%d-aAbBcC && mkdir td/dmsh-replay-save-%d-pLmKoJ",
             (int)dead, (int)dead, (int)dead);
    assert_int_equal(sh_in_dir("%s", cmd), 0);
    snprintf(cmd, sizeof cmd, "chown 65534 td/dmsh-replay-%d-pLmKoJ td/dmsh-replay-save-%d-pLmKoJ 2> /dev/null", (int)dead, (int)dead);
    if (sh_in_dir("%s", cmd)) { skip(); return; }  // (a root that cannot give files away: a user namespace)
    small_model(script, sizeof script, 3, ":step 2\n");
    write_file("rp.dm", script);
    assert_int_equal(sh_in_dir("TMPDIR=$PWD/td %s --norc --replay rp.dm > out.txt 2> err.txt", dmsh), 0);
    char name[120];
    snprintf(name, sizeof name, "td/dmsh-replay-%d-aAbBcC", (int)dead);
    assert_int_equal(file_size(name), -1);  // this user's: swept
    snprintf(name, sizeof name, "td/dmsh-replay-%d-pLmKoJ", (int)dead);
    assert_true(file_size(name) >= 0);
    snprintf(name, sizeof name, "td/dmsh-replay-save-%d-pLmKoJ", (int)dead);
    assert_true(file_size(name) >= 0);
    assert_int_equal(sh_in_dir("%s", "test $(ls td | wc -l) = 2"), 0);
}

// QA mutation, session 41 (R6): `--replay DIR` is refused as a directory (without the check, the
// copy meant for a pipe failed and said "cannot copy DIR into a temp file ...: Is a directory")
static void test_replay_of_a_directory(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("rm -rf td dd && mkdir td dd && TMPDIR=$PWD/td %s --norc --replay dd > out.txt 2> err.txt", dmsh), 2);
    slurp_to("err.txt", err_, sizeof err_);
    assert_string_equal(err_, "dmsh: --replay: dd is a directory, not a script\n");
    slurp_to("out.txt", out, sizeof out);
    assert_string_equal(out, "");
    assert_int_equal(sh_in_dir("%s", "test -z \"$(ls -A td)\""), 0);
}

// QA mutation, session 41 (V10): `:check grad off=kda,,moe`, `off=,` and `off=` ran the check, an
// empty item taken as "no arm" (a typo checked the arm with it on). An empty name is refused,
// before anything runs (no model needed).
static void test_check_grad_empty_arm_name(void **s) {
    (void)s;
    const char *bad[] = {"off=kda,,moe", "off=,", "off=", "off=,kda", "off=kda,"};
    for (int i = 0; i < 5; i++) {
        char script[200], want[300];
        snprintf(script, sizeof script, ":check grad %s\n", bad[i]);
        snprintf(want, sizeof want, "s.dm:1: error: %s: an empty arm name (off=ARM,ARM...: kda, engram, moe, rezero, retract, aux)\n", bad[i]);
        expect_error(script, want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_writes_no_rows),
        cmocka_unit_test(test_init_keeps_its_own_steps),
        cmocka_unit_test(test_determinism_refuses_each_option),
        cmocka_unit_test(test_determinism_default_steps),
        cmocka_unit_test(test_replay_names_and_shows),
        cmocka_unit_test(test_set_lr_and_steps_no_schedule_note),
        cmocka_unit_test(test_init_eval_frac_with_eval_file),
        cmocka_unit_test(test_save_name_rule_only_in_own_ckpt),
        cmocka_unit_test(test_stress_stopped_not_interrupted),
        cmocka_unit_test(test_help_says_when_a_key_applies),
        cmocka_unit_test(test_parity_options_valid_without_cuda),
        cmocka_unit_test(test_replay_sweep_spares_others),
        cmocka_unit_test(test_replay_of_a_directory),
        cmocka_unit_test(test_check_grad_empty_arm_name),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
