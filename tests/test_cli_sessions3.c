// test_cli_sessions3.c — dmsh as a process: the session files -r reads and rewrites (ckpt/'s temp
// files and LATEST, the transcript's checkpoint lines and :device), the cases a mutation pass of
// sessions/ found unchecked (QA mutation, session 40). See test_cli_resume.c and test_cli_saves.c
// for the rest.
#include "cli_harness.h"

static const char *TINY = ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5";

// A session NAME: the shape, the corpus, `:init seed=1`, then the -e words MORE (shell-quoted by
// the caller); it must end with status 0.
static void make_session(const char *name, const char *more) {
    (void)SMALL;
    char cmd[2000];
    int cl = snprintf(cmd, sizeof cmd, "%%s --norc -e ':session %s' -e '%s' -e ':data %s' -e ':init seed=1' %s > k.out 2>&1", name, TINY,
                      corpus, more);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    int rc = sh_in_dir(cmd, dmsh);
    if (rc) {
        slurp_to("k.out", out, sizeof out);
        print_error("%s\n", out);
    }
    assert_int_equal(rc, 0);
}

// `dmsh -r runs/NAME -e ':quit'`: stdout into out, stderr into err_; its status
static int resume_quit(const char *name) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/%s -e ':quit' > out.txt 2> err.txt", name);
    int rc = sh_in_dir(cmd, dmsh);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    return rc;
}

// (macros: a failure names the test's own line)
#define want_in(hay, needle)                                                                              \
    do {                                                                                                  \
        if (!strstr(hay, needle)) print_error("wanted: %s\nin:\n%s\nstderr:\n%s\n", needle, hay, err_); \
        assert_non_null(strstr(hay, needle));                                                             \
    } while (0)
#define not_in(hay, needle)                                                                 \
    do {                                                                                    \
        if (strstr(hay, needle)) print_error("not wanted: %s\nin:\n%s\n", needle, hay); \
        assert_null(strstr(hay, needle));                                                   \
    } while (0)

// QA mutation, session 40 (C2: ckpt_dirs.c's "<pid> digits only" test dropped): -r takes only
// NAME.ckpt.<pid>.tmp as a save a crash cut short. A user's file in ckpt/ such as
// step-4.ckpt.old.tmp (a whole copy of an older state) or notes.ckpt.bak.tmp was otherwise renamed
// over step-4.ckpt (the older state resumed under the newer name) or deleted. Both stay as they
// are, nothing said of them, and -r resumes step-4.ckpt.
static void test_user_tmp_files_left_alone(void **s) {
    (void)s;
    make_session("c2", "-e ':train 4 ckpt_every=2 eval_every=0'");
    assert_int_equal(sh_in_dir("cd runs/c2/ckpt && cp step-2.ckpt step-4.ckpt.old.tmp && cp step-4.ckpt ../../../s4.keep && "
                               "echo 'my notes 93' > notes.ckpt.bak.tmp%s", ""), 0);
    assert_int_equal(resume_quit("c2"), 0);
    want_in(out, "resumed runs/c2 at step 4 from ckpt/step-4.ckpt");
    not_in(err_, "in place as");
    not_in(err_, "removed");
    assert_int_equal(sh_in_dir("cd runs/c2/ckpt && cmp -s step-2.ckpt step-4.ckpt.old.tmp && cmp -s step-4.ckpt ../../../s4.keep && "
                               "grep -qx 'my notes 93' notes.ckpt.bak.tmp && grep -qx step-4.ckpt LATEST%s", ""), 0);
}

// Two whole temp files (two saves each cut before its rename) and no LATEST: both are put in
// place, and LATEST names the one written LAST, the state the run had reached. Both ages each way
// round, so the newer one is read first in one case and second in the other, whatever order the
// directory lists them in (QA mutation, session 40, C4: the newest-time test turned round named
// the older one, and -r resumed step 2 dropping steps 3-4).
static void test_two_whole_tmps_newest_in_latest(void **s) {
    (void)s;
    make_session("c4", "-e ':train 4 ckpt_every=2 eval_every=0'");
    assert_int_equal(sh_in_dir("cp -a runs/c4 runs/c4b && for d in c4 c4b; do cd runs/$d/ckpt && mv step-2.ckpt step-2.ckpt.11.tmp && "
                               "mv step-4.ckpt step-4.ckpt.12.tmp && rm LATEST && cd ../../..; done && "
                               "touch -d '-1 hour' runs/c4/ckpt/step-2.ckpt.11.tmp && touch -d '-1 hour' runs/c4b/ckpt/step-4.ckpt.12.tmp%s", ""), 0);
    assert_int_equal(resume_quit("c4"), 0);
    want_in(err_, "dmsh: runs/c4/ckpt/LATEST names step-4.ckpt now, as that save would have\n");
    want_in(out, "resumed runs/c4 at step 4 from ckpt/step-4.ckpt");
    want_in(err_, "dmsh: put runs/c4/ckpt/step-2.ckpt.11.tmp in place as runs/c4/ckpt/step-2.ckpt (");
    // step-2's the newer one (made so by hand): LATEST names it
    assert_int_equal(resume_quit("c4b"), 0);
    want_in(err_, "dmsh: runs/c4b/ckpt/LATEST names step-2.ckpt now, as that save would have\n");
    want_in(out, "resumed runs/c4b at step 2 from ckpt/step-2.ckpt");
    want_in(err_, "dmsh: put runs/c4b/ckpt/step-4.ckpt.12.tmp in place as runs/c4b/ckpt/step-4.ckpt (");
}

// A LATEST whose time EQUALS the placed temp file's (a file system of whole seconds, a copy by cp
// -p / touch -r) was not set after the crash: the completed save goes in LATEST, as it would have
// (QA mutation, session 40, E3: equal times read as "LATEST set by hand later" kept step-4).
static void test_latest_of_equal_time_follows_the_placed_save(void **s) {
    (void)s;
    make_session("e3", "-e ':train 6 ckpt_every=2 eval_every=0'");
    assert_int_equal(sh_in_dir("cd runs/e3/ckpt && mv step-6.ckpt step-6.ckpt.4242.tmp && echo step-4.ckpt > LATEST && "
                               "touch -r step-6.ckpt.4242.tmp LATEST && test \"$(stat -c %%y LATEST)\" = \"$(stat -c %%y step-6.ckpt.4242.tmp)\"%s", ""), 0);
    assert_int_equal(resume_quit("e3"), 0);
    want_in(err_, "dmsh: runs/e3/ckpt/LATEST names step-6.ckpt now, as that save would have\n");
    want_in(out, "resumed runs/e3 at step 6 from ckpt/step-6.ckpt");
}

// A :save into another session's ROOT (a directory beside its ckpt/, or one the user made in it)
// is allowed; only its ckpt/ is refused (QA mutation, session 40, C5: with the "/ckpt" suffix test
// dropped, the directory's name less its last 5 characters is taken as the session: runs/a/keep
// (a 4-letter name) read as runs/a's ckpt/ and was refused; runs/a itself, cut to runs/a less
// "uns/a", does not tell the two apart)
static void test_save_into_another_sessions_root(void **s) {
    (void)s;
    make_session("a", "-e ':step 2'");
    assert_int_equal(sh_in_dir("mkdir runs/a/keep%s", ""), 0);
    make_session("b", "-e ':step 3'");
    int rc = sh_in_dir("%s --norc -r runs/b -e ':save runs/a/copy.ckpt' -e ':save runs/a/keep/copy.ckpt' > out.txt 2> err.txt", dmsh);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    not_in(err_, "inside the checkpoints of session");
    assert_int_equal(rc, 0);
    want_in(out, "saved runs/a/copy.ckpt (step 3)");
    want_in(out, "saved runs/a/keep/copy.ckpt (step 3)");
    assert_true(file_size("runs/a/copy.ckpt") > 0);
    assert_true(file_size("runs/a/keep/copy.ckpt") > 0);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/b -e ':save runs/a/ckpt/copy.ckpt' > out.txt 2> err.txt");
    assert_int_equal(sh_in_dir(cmd, dmsh), 1);
    slurp_to("err.txt", err_, sizeof err_);
    want_in(err_, "runs/a/ckpt/copy.ckpt: inside the checkpoints of session ");
    assert_int_equal(file_size("runs/a/ckpt/copy.ckpt"), -1);
}

// metrics.tsv's rows past LATEST's checkpoint: a file of the SAME step written after LATEST (a
// branch file step-3-b1) cannot hold them, and is not named as if it did (QA mutation, session 40,
// E5: `>` turned `>=` sent the user to ":load ckpt/step-3-b1.ckpt" for steps 4-5)
static void test_same_step_file_not_named_for_later_rows(void **s) {
    (void)s;
    make_session("e5", "-e ':step 3' -e ':save' -e ':step 2'");
    assert_int_equal(sh_in_dir("cd runs/e5/ckpt && test -s step-5.ckpt && rm step-5.ckpt && echo step-3.ckpt > LATEST && "
                               "touch -d '-1 min' LATEST step-3.ckpt && cp step-3.ckpt step-3-b1.ckpt%s", ""), 0);
    assert_int_equal(resume_quit("e5"), 0);
    want_in(out, "resumed runs/e5 at step 3 from ckpt/step-3.ckpt");
    want_in(out, "metrics.tsv held 2 rows past this checkpoint's 3 (steps and evals after it, which no checkpoint in ckpt/ holds)");
    not_in(out, "step-3-b1");
}

// A LATEST holding a path is no checkpoint name: refused, said, and -r falls back to the newest
// file; a file below ckpt/ (ckpt/sub/x.ckpt) is not resumed (QA mutation, session 40, E10: the
// '/' test dropped followed the path: "LATEST named /tmp/x.ckpt, which is missing", and
// sub/x.ckpt's older state resumed)
static void test_latest_holding_a_path_refused(void **s) {
    (void)s;
    make_session("e10", "-e ':train 4 ckpt_every=2 eval_every=0'");
    assert_int_equal(sh_in_dir("echo /tmp/x.ckpt > runs/e10/ckpt/LATEST%s", ""), 0);
    assert_int_equal(resume_quit("e10"), 0);
    want_in(err_, "runs/e10/ckpt/LATEST holds '/tmp/x.ckpt', not a checkpoint name");
    want_in(out, "resumed runs/e10 at step 4 from ckpt/step-4.ckpt");
    assert_int_equal(sh_in_dir("cd runs/e10/ckpt && mkdir sub && cp step-2.ckpt sub/x.ckpt && echo sub/x.ckpt > LATEST%s", ""), 0);
    assert_int_equal(resume_quit("e10"), 0);
    want_in(err_, "runs/e10/ckpt/LATEST holds 'sub/x.ckpt', not a checkpoint name");
    want_in(out, "resumed runs/e10 at step 4 from ckpt/step-4.ckpt");
    not_in(out, "sub/x.ckpt");
}

// A session whose transcript's last :device is `:device cpu` (the user went back to the CPU)
// resumes on the CPU with nothing said of devices (QA mutation, session 40, X7: found when
// e->device was "" on the CPU, and -r said "this session last ran on cpu"; engine_init names it
// "cpu" now, so transcript_cut.c's own "cpu" test is a second guard, and this test holds the
// rule, not that line)
static void test_last_device_cpu_said_nothing(void **s) {
    (void)s;
    make_session("x7", "-e ':step 2' -e ':device cpu' -e ':step 1'");
    assert_int_equal(sh_in_dir("grep -qx ':device cpu' runs/x7/transcript.dm%s", ""), 0);
    assert_int_equal(resume_quit("x7"), 0);
    want_in(out, "resumed runs/x7 at step 3 from ckpt/step-3.ckpt");
    not_in(out, "last ran on");
    not_in(err_, "last ran on");
}

// No session: a second :save of an unchanged state rewrites dmsh-step-N.ckpt, the file that holds
// it (QA mutation, session 40, E6: the same-file test dropped wrote dmsh-step-1-b1.ckpt, compared
// it, deleted it and said "already held this exact state: no new file")
static void test_second_save_same_file_no_session(void **s) {
    (void)s;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "mkdir e6 && cd e6 && %%s --norc -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 1' -e ':save' "
             "-e ':save' > ../out.txt 2> ../err.txt", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    const char *first = strstr(out, "saved dmsh-step-1.ckpt (step 1)\n");
    if (!first || !strstr(first + 1, "saved dmsh-step-1.ckpt (step 1)\n")) print_error("%s\n%s\n", out, err_);
    assert_non_null(first);
    assert_non_null(strstr(first + 1, "saved dmsh-step-1.ckpt (step 1)\n"));
    not_in(out, "already held");
    not_in(err_, "already held");
    assert_int_equal(sh_in_dir("ls e6 > e6.ls%s", ""), 0);
    slurp_to("e6.ls", out, sizeof out);
    assert_string_equal(out, "dmsh-step-1.ckpt\n");
}

// A :set value longer than lost_settings keeps (224 bytes) after the last checkpoint is not kept
// cut: -r reports no value the user never typed (QA mutation, session 40, L2: a 230-byte
// `:set seed=0...07` kept as 223 zeros read "seed 1 -> 0 ... :set them again")
static void test_long_set_value_not_cut(void **s) {
    (void)s;
    char val[240], args[2400];
    memset(val, '0', 229);
    val[229] = '7';
    val[230] = 0;
    snprintf(args, sizeof args, "-e ':session l2' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 2 ckpt_every=2 eval_every=0' "
             "-e ':set seed=%s' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'", TINY, corpus, val);
    run_and_kill(args, "grep -q '^step 4 ' k.out");
    char grep[400];
    snprintf(grep, sizeof grep, "grep -qx ':set seed=%s' runs/l2/transcript.dm", val);
    assert_int_equal(sh_in_dir("%s", grep), 0);
    assert_int_equal(resume_quit("l2"), 0);
    want_in(out, "resumed runs/l2 at step 2 from ckpt/step-2.ckpt");
    not_in(out, "seed 1 -> 0");
}

// A -r that left its transcript unplaced (a checkpoint written during a command the process ended
// in), then `:session fresh`: the new session's transcript starts from a :load of the state, and
// its checkpoint lines place their files (QA mutation, session 40, E8: the switch kept the old
// transcript's "unplaced", and every line there read "# unplaced checkpoint")
static void test_session_switch_places_again(void **s) {
    (void)s;
    make_session("e8", "-e ':step 2' -e ':save'");
    assert_int_equal(sh_in_dir("printf '%%s\\n' '# started, never finished (:init from step 2; the process ended during it): :init seed=2' "
                               "'# checkpoint ckpt/step-2.ckpt at step 2, written by the :init running here (from step 2): :init seed=2' "
                               ">> runs/e8/transcript.dm%s", ""), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/e8 -e ':session fresh' -e ':step 1' -e ':save' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    want_in(out, "ckpt/step-2.ckpt was written during :init, which the process ended in");  // (the old one: unplaced)
    char t[20000];
    slurp_to("runs/fresh/transcript.dm", t, sizeof t);
    want_in(t, "\n# checkpoint ckpt/step-3.ckpt at step 3");
    not_in(t, "unplaced");
    not_in(t, "may not rebuild");
}

// A checkpoint line of a finished command (the :session switch's save, the old transcript's last
// line) below an older mark that never finished (a :train killed, then resumed with -r): the
// finished command's own mark, blanked to "# (finished)" above its line, closes the open one, so
// a -r from that file places it (QA mutation, session 40, X5: a "# (finished)" line no longer
// closing the mark read it as written during a command the process ended in, and the transcript
// went unplaced from then on)
static void test_finished_mark_below_a_killed_one(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "-e ':session x5' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 ckpt_every=2 eval_every=0 log_every=1'", TINY, corpus);
    run_and_kill(args, "grep -q '^step 5 ' k.out");
    // (:step 1: an odd step, a new file whatever step the kill left)
    assert_int_equal(sh_in_dir("%s --norc -r runs/x5 -e ':step 1' -e ':session x5b' > out.txt 2> err.txt", dmsh), 0);
    char t[40000];
    slurp_to("runs/x5/transcript.dm", t, sizeof t);
    want_in(t, "\n# started, never finished (:train from step 0; ");  // (the killed :train's mark stays)
    want_in(t, "\n# (finished)");
    want_in(t, ", written by the :session running here (from step ");
    assert_int_equal(resume_quit("x5"), 0);
    not_in(out, "which the process ended in");
    not_in(out, "no line of the transcript places");
    slurp_to("runs/x5/transcript.dm", t, sizeof t);
    not_in(t, "unplaced");
    not_in(t, "may not rebuild");
}

// A kill between a :train's checkpoint line for step-4 and its LATEST write (session_save writes
// the line first): LATEST names step-2, and -r resumes it. The step-4 line after it, the only line
// there, is no longer placed: it is rewritten as such (QA mutation, session 40, X4: with no
// command line after the resumed file's line the rewrite was skipped, and the plain step-4 line
// stood before the retaking `:train ... stop_after=2`, claiming the lines above it rebuild step 4)
static void test_place_line_alone_after_the_resumed_one(void **s) {
    (void)s;
    make_session("x4", "-e ':train 4 ckpt_every=2 eval_every=0'");
    // (the transcript as that kill leaves it: the :train's mark still open, no :train line)
    assert_int_equal(sh_in_dir("cd runs/x4 && sed -i -e 's/^# (finished).*/# started, never finished (:train from step 0; the process ended "
                               "during it; a -r resumes from its last checkpoint): :train 4 ckpt_every=2 eval_every=0/' -e '/^:train 4/,$d' transcript.dm && "
                               "echo step-2.ckpt > ckpt/LATEST && touch -r ckpt/step-2.ckpt ckpt/LATEST && tail -n 1 transcript.dm | "
                               "grep -q '^# checkpoint ckpt/step-4.ckpt at step 4, written by the :train running here (from step 0): '%s", ""), 0);
    assert_int_equal(resume_quit("x4"), 0);
    want_in(out, "resumed runs/x4 at step 2 from ckpt/step-2.ckpt");
    char t[40000];
    slurp_to("runs/x4/transcript.dm", t, sizeof t);
    want_in(t, "\n# no longer placed (the commands above it that rebuilt it are comments now): # checkpoint ckpt/step-4.ckpt at step 4, "
               "written by the :train running here (from step 0): :train 4 ckpt_every=2 eval_every=0\n");
    not_in(t, "\n# checkpoint ckpt/step-4.ckpt");
    want_in(t, "\n:train 4 ckpt_every=2 eval_every=0 stop_after=2\n");
}

// An old transcript (no checkpoint lines) with a `:set lr=0.01` after the checkpoint, killed: the
// first -r says the lr is lost (right), and resumes at the checkpoint's lr; the state it saves is
// at that lr, and a second -r says nothing of settings: the "resumed" line starts the count again
// (QA mutation, session 40, L1: the reset at that line dropped, every later -r said
// "lr 0.003 -> 0.01 ... :set them again")
static void test_lost_settings_counted_from_the_resume(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "-e ':session l1' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 2 ckpt_every=2 eval_every=0' "
             "-e ':set lr=0.01' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'", TINY, corpus);
    run_and_kill(args, "grep -q '^step 4 ' k.out");
    assert_int_equal(sh_in_dir("sed -i '/^# checkpoint ckpt/d' runs/l1/transcript.dm && %s --norc -r runs/l1 -e ':step 1' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    want_in(out, "settings the transcript made after this checkpoint are not in it (the process ended before they were saved): lr 0.003 -> 0.01");
    assert_int_equal(resume_quit("l1"), 0);
    want_in(out, "resumed runs/l1 at step 3 from ckpt/step-3.ckpt");
    not_in(out, "settings the transcript made after this checkpoint");
    not_in(out, "lr 0.003 -> 0.01");
}

// QA mutation, session 40 (X10: transcript_cut.c's `!fell_back` dropped before a cut command's
// retake): a run killed inside `:train 6 ckpt_every=2`, in a transcript without checkpoint lines
// (an older dmsh's), whose newest checkpoint does not load. -r falls back to the newest file that
// does, and nothing says which command wrote it: here a step-4 state copied in from another
// session (seed 2). The transcript must not claim that the cut :train's first 4 steps rebuild it
// (`stop_after=4` would: a replay then ends in seed 1's state, not the one resumed); it says a
// replay does not rebuild what the command did, and adds no retake line.
static void test_cut_retake_not_after_a_fallback(void **s) {
    (void)s;
    make_session("x10", "-e ':train 6 ckpt_every=2 eval_every=0'");
    make_session("x10b", "-e ':set seed=2' -e ':init' -e ':train 4 ckpt_every=4 eval_every=0'");
    assert_int_equal(sh_in_dir("cd runs/x10 && cp ../x10b/ckpt/step-4.ckpt ckpt/step-4-b1.ckpt && touch -d '-1 min' ckpt/step-2.ckpt ckpt/step-4.ckpt && "
                               "truncate -s 3000 ckpt/step-6.ckpt && "
                               "sed -i -e '/^# checkpoint/d' -e '/^:train/d' -e 's/^# (finished).*/# started, never finished (:train from step 0; the process "
                               "ended during it; a -r resumes from its last checkpoint): :train 6 ckpt_every=2 eval_every=0/' transcript.dm%s", ""), 0);
    assert_int_equal(resume_quit("x10"), 0);
    want_in(err_, "runs/x10/ckpt/step-6.ckpt did not load (");
    want_in(err_, "resumed from runs/x10/ckpt/step-4-b1.ckpt instead");
    want_in(out, "resumed runs/x10 at step 4 from ckpt/step-4-b1.ckpt");
    want_in(out, "the process ended during `:train 6 ckpt_every=2 eval_every=0` (its transcript's last command): resumed from its last "
                 "checkpoint, step 4; a replay of the transcript does not rebuild what it did");
    not_in(out, "stop_after");
    char t[8192];
    slurp_to("runs/x10/transcript.dm", t, sizeof t);
    not_in(t, "stop_after");
    not_in(t, "# cut short:");
}

// A session whose ckpt/ was deleted (to free disk) or whose checkpoints were: -r said "the run
// stopped before its first save ... remove runs/X", and removing it deletes transcript.dm, which
// replays the run (QA, session 41). -r names the checkpoint the transcript placed and the replay,
// and the replay it names rebuilds the run's last step.
static void test_no_ckpt_names_the_replay(void **s) {
    (void)s;
    make_session("nk", "-e ':train 4 ckpt_every=2 eval_every=0'");
    assert_int_equal(sh_in_dir("cp -a runs/nk runs/nk2 && rm -r runs/nk/ckpt && rm runs/nk2/ckpt/*.ckpt%s", ""), 0);
    assert_int_equal(resume_quit("nk"), 1);
    want_in(err_, "dmsh: -r: error: runs/nk: no checkpoint in runs/nk/ckpt, though its transcript names ckpt/step-4.ckpt (deleted?): nothing to "
                  "resume; `dmsh -e ':session NEW' -b runs/nk/transcript.dm` replays its commands in a new session\n");
    not_in(err_, "remove runs/nk");
    assert_int_equal(resume_quit("nk2"), 1);
    want_in(err_, "dmsh: -r: error: runs/nk2/ckpt/LATEST named step-4.ckpt, which is missing, and no checkpoint is in runs/nk2/ckpt: nothing to "
                  "resume (`dmsh -e ':session NEW' -b runs/nk2/transcript.dm` replays its commands in a new session)\n");
    // the advice works: the replay's last train row is the run's (kind step tokens loss lr gnorm)
    assert_int_equal(sh_in_dir("%s --norc -e ':session nk3' -b runs/nk/transcript.dm > r.out 2>&1 && tail -1 runs/nk/metrics.tsv | cut -f1-6 > a.txt && "
                               "tail -1 runs/nk3/metrics.tsv | cut -f1-6 > b.txt && grep -q '^train\t3\t' a.txt && cmp a.txt b.txt", dmsh), 0);
}

// A :load of a file outside ckpt/ whose state a session checkpoint already holds: the transcript
// said that checkpoint was "written by the :load running here", though an earlier :save had
// written it and the :load wrote nothing (QA, session 41). Only the line after the :load places
// it now; the save of the state the :load left is the :load's own line, as before.
static void test_load_found_file_not_said_written(void **s) {
    (void)s;
    make_session("lf", "-e ':train 4 eval_every=0' -e ':save' -e ':save lf_mid.ckpt' -e ':step 2' -e ':load lf_mid.ckpt'");
    char t[16384];
    slurp_to("runs/lf/transcript.dm", t, sizeof t);
    want_in(t, "# checkpoint ckpt/step-6.ckpt at step 6, written by the :load running here (from step 6): :load lf_mid.ckpt\n"
               ":load lf_mid.ckpt\n# checkpoint ckpt/step-4.ckpt at step 4: the state the lines above rebuild\n");
    not_in(t, "ckpt/step-4.ckpt at step 4, written by the :load");
    assert_int_equal(resume_quit("lf"), 0);
    want_in(out, "resumed runs/lf at step 4 from ckpt/step-4.ckpt");
}

// transcript.dm saved over by an editor (a copy renamed over the name) or deleted during a :train
// (QA, session 41). Replaced: the :train's line went into the file renamed away and the copy kept
// its mark, which -r then read as "the process ended during it"; now the mark is found in the new
// file and takes the line, said. Deleted: the new file held only the later checkpoint lines, one
// of them "the state the lines above rebuild"; now it says the lines before are gone, and its
// checkpoint lines are unplaced.
static void transcript_swapped_during_a_train(const char *name, const char *how, int ckpts) {
    char cmd[3000];
    // (without checkpoints nothing follows the mark: it is the file's last line when found)
    int cl = snprintf(cmd, sizeof cmd, "(%%s --norc -e ':session %s' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 1500%s "
                      "eval_every=0 log_every=500' > k.out 2> k.err & p=$!; for i in $(seq 3000); do grep -q '%s' k.out && break; "
                      "sleep 0.02; done; cd runs/%s && %s; cd ../..; wait $p)", name, TINY, corpus, ckpts ? " ckpt_every=500" : "",
                      ckpts ? "ckpt/step-500.ckpt" : "^step 499 ", name, how);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("k.out", out, sizeof out);
    slurp_to("k.err", err_, sizeof err_);
    want_in(out, "step 1499 ");  // (the run went on to its end)
}
static void test_transcript_replaced_or_deleted_mid_run(void **s) {
    (void)s;
    transcript_swapped_during_a_train("tv", "cp transcript.dm t && mv t transcript.dm", 1);
    want_in(err_, "dmsh: note: runs/tv/transcript.dm is another file than the one this run wrote (replaced: an editor's save?): the lines "
                  "from here on go into it\n");
    char t[16384];
    slurp_to("runs/tv/transcript.dm", t, sizeof t);
    not_in(t, "# started, never finished");
    want_in(t, "\n:train 1500 ckpt_every=500 eval_every=0 log_every=500\n");
    want_in(t, "\n# checkpoint ckpt/step-1500.ckpt at step 1500: the state the lines above rebuild\n");
    assert_int_equal(resume_quit("tv"), 0);
    want_in(out, "resumed runs/tv at step 1500 from ckpt/step-1500.ckpt");
    not_in(out, "the process ended during");
    transcript_swapped_during_a_train("td", "rm transcript.dm metrics.tsv", 1);
    want_in(err_, "dmsh: note: runs/td/transcript.dm was deleted during the run: a new one holds the lines from here on, and does not rebuild "
                  "the session\n");
    slurp_to("runs/td/transcript.dm", t, sizeof t);
    want_in(t, "# transcript.dm was deleted while this run wrote it: the lines it held are not here, so the lines below do not rebuild the "
               "session\n");
    want_in(t, "\n# unplaced checkpoint ckpt/step-1000.ckpt at step 1000, written by the :train running here");
    want_in(t, "\n:train 1500 ckpt_every=500 eval_every=0 log_every=500\n");
    not_in(t, "# checkpoint ckpt/");  // (none placed: every one unplaced)
    // metrics.tsv deleted with it: written again whole from the rows in memory, said (it went on
    // with the later rows alone)
    want_in(out, "note: runs/td/metrics.tsv was empty (deleted or emptied during the run?): written again with all ");
    // the mark the file's last line (no checkpoint after it): found there too (QA mutation, session 41)
    transcript_swapped_during_a_train("tn", "cp transcript.dm t && mv t transcript.dm", 0);
    slurp_to("runs/tn/transcript.dm", t, sizeof t);
    not_in(t, "# started, never finished");
    want_in(t, "\n:train 1500 eval_every=0 log_every=500\n");
    static char tsv[1 << 20];
    slurp_to("runs/td/metrics.tsv", tsv, sizeof tsv);
    assert_int_equal(count_lines(tsv), 1501);
    assert_int_equal(strncmp(strchr(tsv, '\n') + 1, "train\t0\t", 8), 0);
}

// :sessions marked the eval of an ablated run "[off: kda]" but not its loss, whose step ran with
// the arm off too: set beside an un-ablated run's loss it read as comparable (QA, session 41)
static void test_sessions_loss_says_its_arms(void **s) {
    (void)s;
    make_session("ab", "-e ':arm kda off' -e ':step 3' -e ':arm kda on'");
    assert_int_equal(sh_in_dir("%s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    const char *ss = strstr(out, "  runs/ab  (latest checkpoint: ");
    assert_non_null(ss);
    ss = strchr(ss, '\n') + 1;
    double loss = 0;
    int tail = 0;  // (sscanf counts conversions only: the words after the number are checked by %n)
    if (sscanf(ss, "    loss %lf [off: kda] (step 2); no eval; %n", &loss, &tail) != 1 || !tail) print_error("%s\n", out);
    assert_int_equal(sscanf(ss, "    loss %lf [off: kda] (step 2); no eval; %n", &loss, &tail), 1);
    assert_true(tail > 0);
    assert_true(loss > 1 && loss < 10);
}

// A transcript replayed without its :init and :step lines (edited, or a transcript started again after a
// deletion) ran to its end with status 0 and no word, while one missing a :train line is said
// (QA, session 41): a placing line met with no model says so too.
static void test_replay_without_a_model_said(void **s) {
    (void)s;
    make_session("nm", "-e ':step 3'");
    assert_int_equal(sh_in_dir("grep -v '^:init\\|^:step' runs/nm/transcript.dm > nm.dm && %s --norc -b nm.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    want_in(err_, ": note: the session had a model at step 3 here, this replay has none: it does not rebuild the session's state (its :init "
                  "or :load line edited or missing?)\n");
}

// A deleted transcript first met by an ordinary line (a piped script's next command), not a
// checkpoint line: the new file says the lines before are gone, and the checkpoint line after it
// is unplaced too (QA mutation, session 41: the precheck saw a file that the line had made non-empty)
static void test_deleted_transcript_met_by_a_command(void **s) {
    (void)s;
    char cmd[3000];
    int cl = snprintf(cmd, sizeof cmd, "({ printf '%%%%s\\n' ':session dl' '%s' ':data %s' ':init seed=1' ':step 2' ':save'; for i in $(seq 1200); do "
                      "grep -q '^saved ' k.out 2> /dev/null && break; sleep 0.05; done; rm runs/dl/transcript.dm; printf ':step 1\\n:save\\n'; } | "
                      "%%s --norc > k.out 2> k.err)", TINY, corpus);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    char t[16384];
    slurp_to("runs/dl/transcript.dm", t, sizeof t);
    want_in(t, "# transcript.dm was deleted while this run wrote it");
    want_in(t, "\n:step 1\n");
    want_in(t, "# unplaced checkpoint ckpt/step-3.ckpt");
    not_in(t, "# checkpoint ckpt/");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_tmp_files_left_alone),
        cmocka_unit_test(test_two_whole_tmps_newest_in_latest),
        cmocka_unit_test(test_latest_of_equal_time_follows_the_placed_save),
        cmocka_unit_test(test_save_into_another_sessions_root),
        cmocka_unit_test(test_same_step_file_not_named_for_later_rows),
        cmocka_unit_test(test_latest_holding_a_path_refused),
        cmocka_unit_test(test_last_device_cpu_said_nothing),
        cmocka_unit_test(test_second_save_same_file_no_session),
        cmocka_unit_test(test_long_set_value_not_cut),
        cmocka_unit_test(test_session_switch_places_again),
        cmocka_unit_test(test_finished_mark_below_a_killed_one),
        cmocka_unit_test(test_place_line_alone_after_the_resumed_one),
        cmocka_unit_test(test_lost_settings_counted_from_the_resume),
        cmocka_unit_test(test_cut_retake_not_after_a_fallback),
        cmocka_unit_test(test_no_ckpt_names_the_replay),
        cmocka_unit_test(test_load_found_file_not_said_written),
        cmocka_unit_test(test_transcript_replaced_or_deleted_mid_run),
        cmocka_unit_test(test_sessions_loss_says_its_arms),
        cmocka_unit_test(test_replay_without_a_model_said),
        cmocka_unit_test(test_deleted_transcript_met_by_a_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
