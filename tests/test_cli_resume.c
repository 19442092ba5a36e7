// test_cli_resume.c — dmsh as a process: after `dmsh -r`, a replay of the session's transcript
// ends in the state -r resumed. Each checkpoint the session writes leaves a line in the transcript
// that says where it stands among the commands (sessions/transcript_marks.c), and -r turns the
// command lines after the one for the file it loaded into comments (sessions/transcript_cut.c).
#include "cli_harness.h"

static const char *TINY = ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5";

// `dmsh -r NAME -e ':probe head'`, then the transcript replayed with -b (a copy: the replay makes
// no session) and its own `:probe head`: the two lines must be the same (mean, std, min, max of
// every head weight to 6 digits). The -r output stays in out.
static void replay_matches_resume(const char *name) {
    char cmd[600], probe[400];
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/%s -e ':probe head' > out.txt 2> err.txt", name);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    const char *pl = strstr(out, "\nhead ");
    if (!pl) print_error("%s\n", out);
    assert_non_null(pl);
    snprintf(probe, sizeof probe, "%.*s", (int)strcspn(pl + 1, "\n"), pl + 1);
    char saved[sizeof out];
    memcpy(saved, out, sizeof out);
    snprintf(cmd, sizeof cmd, "rm -f dmsh-step-*.ckpt; cp runs/%s/transcript.dm r.dm && %%s --norc -b r.dm > out.txt 2> err.txt", name);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, probe)) print_error("want %s\n%s\n", probe, out);
    assert_non_null(strstr(out, probe));
    // (and every checkpoint line it passed named the step it was at)
    slurp_to("err.txt", err_, sizeof err_);
    if (strstr(err_, "does not rebuild the session's state")) print_error("%s\n", err_);
    assert_null(strstr(err_, "does not rebuild the session's state"));
    memcpy(out, saved, sizeof out);
}

static char *transcript(const char *name) {
    char tp[600];
    snprintf(tp, sizeof tp, "%s/runs/%s/transcript.dm", dir, name);
    char *t = slurp(tp);
    assert_non_null(t);
    return t;
}

// Found by a QA pass (session 27): commands that finished after the last checkpoint, in a process
// killed later, stayed plain lines, so a replay of the transcript ended past the state -r resumed
// (here 7 steps and an lr past it). Now they are comments that say why, and the :train that wrote
// the checkpoint takes the steps it had run with a stop_after line.
static void test_lines_after_the_checkpoint(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "-e ':session aft' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 6 ckpt_every=4 eval_every=0' "
             "-e ':set lr=0.001' -e ':train 5 ckpt_every=0 eval_every=0' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'",
             TINY, corpus);
    run_and_kill(args, "grep -q '^step 14 ' k.out");
    char *t = transcript("aft");
    if (!strstr(t, "\n# checkpoint ckpt/step-4.ckpt at step 4, written by the :train running here (from step 0): :train 6 ckpt_every=4 eval_every=0\n"))
        print_error("%s\n", t);
    assert_non_null(strstr(t, "\n# checkpoint ckpt/step-4.ckpt at step 4, written by the :train running here (from step 0): "));
    assert_non_null(strstr(t, "\n:train 5 ckpt_every=0 eval_every=0\n"));  // (as the killed process left it)
    free(t);
    replay_matches_resume("aft");
    assert_non_null(strstr(out, "resumed runs/aft at step 4 from ckpt/step-4.ckpt"));
    assert_non_null(strstr(out, "the process ended during `:train 1000000 ckpt_every=0 eval_every=0 log_every=1`"));
    assert_non_null(strstr(out, "the transcript's 3 command lines after ckpt/step-4.ckpt was written (its line "));
    assert_non_null(strstr(out, "the transcript takes them with `:train 6 ckpt_every=4 eval_every=0 stop_after=4`"));
    t = transcript("aft");
    static const char ran[] = "\n# after ckpt/step-4.ckpt was written, not in the state -r resumed from it: ";
    char want[600];
    snprintf(want, sizeof want, "%s:train 6 ckpt_every=4 eval_every=0%s:set lr=0.001%s:train 5 ckpt_every=0 eval_every=0\n", ran, ran, ran);
    if (!strstr(t, want)) print_error("%s\n", t);
    assert_non_null(strstr(t, want));
    assert_non_null(strstr(t, "\n:train 6 ckpt_every=4 eval_every=0 stop_after=4\n# dmsh -r: resumed from "));
    free(t);
    // a second -r of the same state (killed again before any checkpoint): the lines of the first
    // -r's process after its resume line go the same way, the first -r's lines stay
    run_and_kill("-r runs/aft -e ':step 3' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'", "grep -q '^step 9 ' k.out");
    replay_matches_resume("aft");
    assert_non_null(strstr(out, "the transcript's 1 command line after ckpt/step-4.ckpt was written (its line "));
    t = transcript("aft");
    assert_non_null(strstr(t, "\n# after ckpt/step-4.ckpt was written, not in the state -r resumed from it: :step 3\n"));
    assert_int_equal(strstr(t, "\n:train 6 ckpt_every=4 eval_every=0 stop_after=4\n") != NULL, 1);
    free(t);
    // a line deleted by hand: the replay says where it stops rebuilding the session (QA, session 28)
    assert_int_equal(sh_in_dir("grep -v 'stop_after=4$' r.dm > cut.dm && %s --norc -b cut.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "cut.dm:")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, ": note: the session was at step "));
    // a clean exit: the exit's save is the last line about a checkpoint, nothing becomes a comment
    assert_int_equal(sh_in_dir("%s --norc -r runs/aft -e ':step 2' > out.txt 2> err.txt", dmsh), 0);
    assert_int_equal(sh_in_dir("grep -q '^# checkpoint ckpt/step-6.ckpt at step 6: the state the lines above rebuild$' runs/aft/transcript.dm%s", ""), 0);
    replay_matches_resume("aft");
    assert_null(strstr(out, "command line"));
    // (the cut :train is behind a clean exit now: this -r has nothing to say it ended during; QA
    // mutation, session 38: a command line after a checkpoint line no longer forgot the cut one)
    if (strstr(out, "the process ended during")) print_error("%s\n", out);
    assert_null(strstr(out, "the process ended during"));
    assert_non_null(strstr(out, "resumed runs/aft at step 6 from ckpt/step-6.ckpt"));
}

// The save before a :load (a state the :load then left) stands before the :load's line, the
// loaded file after it; a :session switch's save goes into the transcript of the session left.
static void test_load_and_session_switch(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "-e ':session ld' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 4 ckpt_every=2 eval_every=0' "
             "-e ':step 1' -e ':load runs/ld/ckpt/step-2.ckpt' -e ':step 2' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'",
             TINY, corpus);
    run_and_kill(args, "grep -q '^step 8 ' k.out");
    char *t = transcript("ld");
    static const char want[] = "\n# checkpoint ckpt/step-5.ckpt at step 5, written by the :load running here (from step 5): "
                               ":load runs/ld/ckpt/step-2.ckpt\n:load runs/ld/ckpt/step-2.ckpt\n"
                               "# checkpoint ckpt/step-2.ckpt at step 2: the state the lines above rebuild\n:step 2\n";
    if (!strstr(t, want)) print_error("%s\n", t);
    assert_non_null(strstr(t, want));
    free(t);
    replay_matches_resume("ld");
    assert_non_null(strstr(out, "resumed runs/ld at step 2 from ckpt/step-2.ckpt"));
    assert_non_null(strstr(out, "the transcript's 1 command line after ckpt/step-2.ckpt was written"));
    // -r from the state the :load left (LATEST names it): the :load and what followed are comments
    assert_int_equal(sh_in_dir("echo step-5.ckpt > runs/ld/ckpt/LATEST%s", ""), 0);
    replay_matches_resume("ld");
    assert_non_null(strstr(out, "resumed runs/ld at step 5 from ckpt/step-5.ckpt"));
    t = transcript("ld");
    assert_non_null(strstr(t, "\n# after ckpt/step-5.ckpt was written, not in the state -r resumed from it: :load runs/ld/ckpt/step-2.ckpt\n"));
    free(t);
    // a :session switch: the state left is saved, and its line is the old transcript's last
    snprintf(args, sizeof args, "%%s --norc -e ':session sw1' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 3' -e ':session sw2' -e ':step 1' "
             "> out.txt 2> err.txt", TINY, corpus);
    assert_int_equal(sh_in_dir(args, dmsh), 0);
    assert_int_equal(sh_in_dir("tail -n 1 runs/sw1/transcript.dm | grep -qx '# checkpoint ckpt/step-3.ckpt at step 3, written by the :session running here "
                               "(from step 3): :session sw2'%s", ""), 0);
    replay_matches_resume("sw1");
    assert_null(strstr(out, "command line"));
    // and the new session's transcript starts from it with a live :load, so it replays alone (its
    // replay failed with "no model": QA, session 28)
    assert_int_equal(sh_in_dir("grep -q '^:load .*/runs/sw1/ckpt/step-3.ckpt$' runs/sw2/transcript.dm%s", ""), 0);
    replay_matches_resume("sw2");
    assert_non_null(strstr(out, "resumed runs/sw2 at step 4"));
}

// A state -r resumed that no line of the transcript places (LATEST set by hand to a file whose
// line an earlier -r took out with the commands before it): said, and from then on the
// checkpoint lines place nothing ("unplaced"), so no later -r claims a replay rebuilds it (QA,
// session 28: it did), until a :load. A :save PATH into the session's own ckpt/ is a comment (a
// replay of it was refused: another session's ckpt/).
static void test_unplaced_and_own_save(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "%%s --norc -e ':session up' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 10 ckpt_every=5 eval_every=0' "
             "-e ':save runs/up/ckpt/mine.ckpt' -e ':step 10' > out.txt 2> err.txt", TINY, corpus);
    assert_int_equal(sh_in_dir(args, dmsh), 0);
    assert_int_equal(sh_in_dir("grep -qx '# :save runs/up/ckpt/mine.ckpt' runs/up/transcript.dm%s", ""), 0);
    assert_int_equal(sh_in_dir("echo step-10.ckpt > runs/up/ckpt/LATEST && %s --norc -r runs/up -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    assert_int_equal(sh_in_dir("echo step-20.ckpt > runs/up/ckpt/LATEST && %s --norc -r runs/up -e ':step 1' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "no line of the transcript places step-20.ckpt among its commands")) print_error("%s\n", out);
    assert_non_null(strstr(out, "no line of the transcript places step-20.ckpt among its commands"));
    char *t = transcript("up");
    assert_non_null(strstr(t, "\n# no longer placed (the commands above it that rebuilt it are comments now): # checkpoint ckpt/step-20.ckpt "));
    assert_non_null(strstr(t, "\n# dmsh -r: resumed (a state the lines above may not rebuild) from "));
    // (and says why in the words of its reason: after a -r from a state the lines do not place,
    // they "may not" rebuild it; QA mutation, session 36: the wording swapped went unseen)
    assert_non_null(strstr(t, "\n# unplaced checkpoint ckpt/step-21.ckpt at step 21: the lines above may not rebuild it (steps a cut or failed command took"));
    free(t);
    assert_int_equal(sh_in_dir("%s --norc -r runs/up -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "no line of the transcript places step-21.ckpt"));
    // a :load: its line rebuilds the state, and the lines place again
    assert_int_equal(sh_in_dir("%s --norc -r runs/up -e ':load runs/up/ckpt/mine.ckpt' -e ':step 2' > out.txt 2> err.txt", dmsh), 0);
    replay_matches_resume("up");
    assert_non_null(strstr(out, "resumed runs/up at step 12"));
    assert_null(strstr(out, "no line of the transcript places"));
}

// A LATEST written on Windows (CR LF) names the file before the CR: -r resumes it, not the
// newest file (QA, session 36: the CR's removal was untested)
static void test_latest_crlf(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "%%s --norc -e ':session crlf' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 4 ckpt_every=2 eval_every=0' "
             "> out.txt 2> err.txt", TINY, corpus);
    int rc = sh_in_dir(args, dmsh);
    slurp_to("err.txt", err_, sizeof err_);
    if (rc) print_error("%s\n", err_);
    assert_int_equal(rc, 0);
    assert_int_equal(sh_in_dir("test -s runs/crlf/ckpt/step-4.ckpt && printf 'step-2.ckpt\\r\\n' > runs/crlf/ckpt/LATEST && "
                               "%s --norc -r runs/crlf -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(out, "resumed runs/crlf at step 2 from ckpt/step-2.ckpt")) print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(out, "resumed runs/crlf at step 2 from ckpt/step-2.ckpt"));
    assert_null(strstr(err_, "LATEST"));
    assert_null(strstr(out, "LATEST"));
}

// A transcript from before these lines (none for the file): -r keeps to the command the process
// ended in, as before; a transcript that cannot be rewritten is said, and left as it was.
static void test_old_transcript_and_no_rewrite(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "-e ':session old' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 ckpt_every=2 eval_every=0 log_every=1'", TINY, corpus);
    run_and_kill(args, "grep -q '^step 5 ' k.out");
    assert_int_equal(sh_in_dir("cp -r runs/old runs/nrw && sed -i '/^# checkpoint ckpt/d' runs/old/transcript.dm%s", ""), 0);
    replay_matches_resume("old");
    assert_non_null(strstr(out, "the transcript takes the "));
    assert_null(strstr(out, "command line"));
    // (and claims nothing from then on: its lines were never checked against its checkpoints)
    assert_non_null(strstr(out, "no line of the transcript places a checkpoint (it was written before dmsh placed them)"));
    assert_int_equal(sh_in_dir("grep -q '^# dmsh -r: resumed (a state the lines above may not rebuild) from ' runs/old/transcript.dm%s", ""), 0);
    // transcript.dm.tmp cannot be made (a directory is there): said, the transcript left whole.
    // (the copy's temp files go first: the kill can land in a save, after its temp file is whole
    // and before its rename, and -r then puts that file in place and resumes it, a file whose
    // line the killed process never wrote; with the `:step 2` added after the mark, no rule takes
    // it, "no line places" is said and nothing is rewritten. Without them -r resumes LATEST's file,
    // whose line is always there (written before LATEST), wherever the kill landed: QA, session
    // 37, 1 run in 12 failed below under load)
    assert_int_equal(sh_in_dir("rm -f runs/nrw/ckpt/*.tmp && echo ':step 2' >> runs/nrw/transcript.dm && cp runs/nrw/transcript.dm nrw.before && "
                               "mkdir runs/nrw/transcript.dm.tmp%s", ""), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/nrw -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "could not be made comments (transcript.dm.tmp: ")) print_error("%s\n", out);
    assert_non_null(strstr(out, "could not be made comments (transcript.dm.tmp: "));
    assert_non_null(strstr(out, "a replay of the transcript ends past this state"));
    // (what it held is all still there, first; no stop_after line added to lines still live)
    assert_int_equal(sh_in_dir("head -c $(stat -c %%s nrw.before) runs/nrw/transcript.dm | cmp -s - nrw.before%s", ""), 0);
    assert_int_equal(sh_in_dir("! grep -q 'stop_after' runs/nrw/transcript.dm%s", ""), 0);
}

// A command that failed after it took steps (a nan_limit stop) is not left out in silence: the
// transcript says what it did and takes its steps with the next line, and a -b replay goes on past
// that line when it fails there at the same step (session 28: it was a comment only, and the
// replay missed its steps), ending in the session's state; a failure at another step stops it.
static void test_failed_part_way_replays(void **s) {
    (void)s;
    char script[1200];
    for (int train = 0; train < 2; train++) {
        snprintf(script, sizeof script, "%s:data %s\n:session nls%d\n:set warmup=0 clip=0 nan_limit=2 lr=10 lr_muon=10 eps=1e-30 beta2=0 wd=0\n"
                 ":init seed=1\n%s\n", SMALL, corpus, train, train ? ":train 40 ckpt_every=2 eval_every=0" : ":step 40");
        assert_int_not_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
        assert_non_null(strstr(err_, "nan_limit (2)"));
        char name[16];
        snprintf(name, sizeof name, "nls%d", train);
        char *tl = transcript(name);
        // (how many steps it takes to blow up depends on the build: wd=0, so the weights grow
        // without the decay holding them (lr x wd = 1 made each step's weights its update alone, and
        // the double build at -O1 settled at a loss of 1e42, never NaN: QA, session 35))
        static const char head[] = "\n# failed part-way, its steps taken by the next line (it took the run from step 0 to ";
        const char *fp = strstr(tl, head);
        if (!fp) print_error("%s\n", tl);
        assert_non_null(fp);
        int to = -1, at = -1;
        assert_int_equal(sscanf(fp + sizeof head - 1, "%d, then failed: step %d: nan_limit", &to, &at), 2);
        assert_true(to >= 2 && at == to - 1);
        char want[300];
        if (train)
            snprintf(want, sizeof want, "fails there at step %d): :train 40 ckpt_every=2 eval_every=0\n:train 40 ckpt_every=2 eval_every=0 stop_after=%d\n",
                     to, to);
        else
            snprintf(want, sizeof want, "a replay goes on past the next line when it fails there at step %d): :step 40\n:step %d\n", to, to);
        if (!strstr(fp, want)) print_error("%s\n", fp);
        assert_non_null(strstr(fp, want));
        free(tl);
        replay_matches_resume(name);
        assert_int_equal(sh_in_dir("grep -q 'r.dm:[0-9]*: note: failed as the session.s command did, the run at step [0-9]* ' err.txt%s", ""), 0);
    }
    // a failure that started from another step than the session's command did is the replay's
    // own: it stops there (the run reached the same step another way)
    assert_int_equal(sh_in_dir("cp r.dm r2.dm && sed -i 's/(it took the run from step 0 to/(it took the run from step 1 to/' r2.dm && "
                               "! %s --norc -b r2.dm > out.txt 2> err.txt && grep -q 'r2.dm:[0-9]*: error: step [0-9]*: nan_limit' err.txt", dmsh), 0);
    // a failure at another step than the session's is the replay's own: it stops there
    assert_int_equal(sh_in_dir("sed -i 's/(it took the run from step 0 to [0-9]*,/(it took the run from step 0 to 99,/' r.dm && "
                               "! %s --norc -b r.dm > out.txt 2> err.txt && grep -q 'r.dm:[0-9]*: error: step [0-9]*: nan_limit' err.txt && "
                               "! grep -q '^head ' out.txt", dmsh), 0);
}

// From a second QA pass (session 28): (1) a checkpoint written during a command the process ended
// in (the save before an :init, whose name ckpt_keep had freed) holds the state before the
// command or after it: -r cannot tell, says so, and claims no rebuild (it took an older line for
// the same name, of another state, and said the replay rebuilt it); (2) steps no line retakes (a
// nan_limit stop of a :step with a quoted count) leave the checkpoint lines after them unplaced.
static void test_open_command_and_steps_no_line_takes(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "%%s --norc -e ':session oc' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 2' -e ':save' "
             "> out.txt 2> err.txt", TINY, corpus);
    assert_int_equal(sh_in_dir(args, dmsh), 0);
    // the transcript as a kill during `:init seed=2` leaves it, after the save of the state it replaces
    assert_int_equal(sh_in_dir("printf '%%s\\n' '# started, never finished (:init from step 2; the process ended during it): :init seed=2' "
                               "'# checkpoint ckpt/step-2.ckpt at step 2, written by the :init running here (from step 2): :init seed=2' "
                               ">> runs/oc/transcript.dm%s", ""), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/oc -e ':step 1' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "ckpt/step-2.ckpt was written during :init, which the process ended in")) print_error("%s\n", out);
    assert_non_null(strstr(out, "ckpt/step-2.ckpt was written during :init, which the process ended in"));
    assert_null(strstr(out, "rebuilds this state"));
    char *t = transcript("oc");
    assert_non_null(strstr(t, "\n# dmsh -r: resumed (a state the lines above may not rebuild) from "));
    assert_non_null(strstr(t, "\n# unplaced checkpoint ckpt/step-3.ckpt at step 3: "));
    free(t);
    // a nan_limit stop of `:step "40"` (no line retakes a quoted count): the exit's line is unplaced
    snprintf(args, sizeof args, "%%s --norc -e ':session nq' -e '%s' -e ':data %s' -e ':set warmup=0 clip=0 nan_limit=2 lr=10 lr_muon=10 wd=0 "
             "eps=1e-30 beta2=0' -e ':init seed=1' -e ':step \"40\"' > out.txt 2> err.txt", TINY, corpus);
    assert_int_not_equal(sh_in_dir(args, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    int skips = 0;  // the steps the run skipped, each said on its line
    for (const char *q = out; (q = strstr(q, " skipped 1\n")); q++) skips++;
    assert_true(skips >= 2);
    t = transcript("nq");
    if (!strstr(t, "\n# failed part-way during the command below (")) print_error("%s\n", t);
    assert_non_null(strstr(t, "\n# failed part-way during the command below ("));
    assert_non_null(strstr(t, "\n# unplaced checkpoint ckpt/step-"));
    free(t);
    assert_int_equal(sh_in_dir("%s --norc -r runs/nq -e ':show metrics' -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "no line of the transcript places step-"));
    // the skipped steps come back with the checkpoint (QA, session 36: a load that zeroed them passed)
    char want[64];
    snprintf(want, sizeof want, " tokens, %d skipped steps, session runs/nq", skips);
    if (!strstr(out, want)) print_error("want '%s' in\n%s\n", want, out);
    assert_non_null(strstr(out, want));
}

// A save of the same state with another corpus is a new file: the exit after a :data rewrote the
// checkpoint -r had loaded in place, and another session's transcript that :load's it by its path
// then replayed with another corpus, in silence (QA, session 28)
static void test_other_corpus_is_a_new_file(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "%%s --norc -e ':session oa' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 3' > out.txt 2> err.txt",
             TINY, corpus);
    assert_int_equal(sh_in_dir(args, dmsh), 0);
    assert_int_equal(sh_in_dir("cp runs/oa/ckpt/step-3.ckpt s3.keep && yes 'the quick brown fox jumps' | head -c 200000 > other.txt && "
                               "%s --norc -r runs/oa -e ':data other.txt' > out.txt 2> err.txt", dmsh), 0);
    assert_int_equal(sh_in_dir("cmp -s s3.keep runs/oa/ckpt/step-3.ckpt && test -s runs/oa/ckpt/step-3-b1.ckpt && "
                               "grep -qx step-3-b1.ckpt runs/oa/ckpt/LATEST%s", ""), 0);
}

// The corpus on disk since a checkpoint (QA, session 34): a -r on a changed corpus, then a save at
// the loaded step, rewrote the only record of what the steps trained on (now a new file); only the
// eval= file changed was told as the corpus changed and the batches not the original run's (now:
// which split, and the sizes); a :data of the file a model trained on with eval=, opened without
// it, and eval= naming a training file, are said.
static void test_corpus_changes_said(void **s) {
    (void)s;
    char args[2000];
    // (the system headers when the corpus is their directory: head of a directory failed here)
    assert_int_equal(sh_in_dir("if test -d '%s'; then cat /usr/include/*.h; else cat '%s'; fi | head -c 120000 > cc.txt && "
                               "head -c 30000 cc.txt > ev.txt", corpus), 0);
    snprintf(args, sizeof args, "%%s --norc -e '%s' -e ':data cc.txt eval=ev.txt' -e ':init seed=1' -e ':step 5' -e ':data cc.txt' "
             "-e ':data cc.txt eval=cc.txt' > out.txt 2> err.txt", TINY);
    assert_int_equal(sh_in_dir(args, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "note: the held-out split now starts at byte 108000, inside the first 120000 bytes")) print_error("%s\n", out);
    assert_non_null(strstr(out, "note: the held-out split now starts at byte 108000, inside the first 120000 bytes"));
    assert_non_null(strstr(out, "note: the eval file cc.txt is also in the training corpus"));
    // only the eval file changed
    snprintf(args, sizeof args, "%%s --norc -e ':session ce' -e '%s' -e ':data cc.txt eval=ev.txt' -e ':init seed=1' -e ':step 3' "
             "> out.txt 2> err.txt && echo more >> ev.txt && %%s --norc -r runs/ce -e ':quit' > out.txt 2>&1", TINY);
    char full[2600];
    snprintf(full, sizeof full, args, dmsh, dmsh);
    assert_int_equal(sh_in_dir("%s", full), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "ev.txt) changed since this checkpoint was written (30000 B then, 30005 B now): the eval window from here is not the "
                     "original run's; the training batches are"))
        print_error("%s\n", out);
    assert_non_null(strstr(out, "ev.txt) changed since this checkpoint was written (30000 B then, 30005 B now): the eval window from here is "
                                "not the original run's; the training batches are"));
    // the training corpus changed: said with its sizes, and the loaded checkpoint is kept whole
    snprintf(args, sizeof args, "%%s --norc -e ':session cr' -e '%s' -e ':data cc.txt' -e ':init seed=1' -e ':step 3' -e ':eval' > out.txt 2>&1 "
             "&& cp runs/cr/ckpt/step-3.ckpt s3.keep && head -c 60000 ev.txt > cc.txt && %%s --norc -r runs/cr -e ':eval' > out.txt 2>&1", TINY);
    snprintf(full, sizeof full, args, dmsh, dmsh);
    assert_int_equal(sh_in_dir("%s", full), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "cc.txt changed since this checkpoint was written (120000 B then, 30005 B now)")) print_error("%s\n", out);
    assert_non_null(strstr(out, "cc.txt changed since this checkpoint was written (120000 B then, 30005 B now)"));
    assert_int_equal(sh_in_dir("cmp -s s3.keep runs/cr/ckpt/step-3.ckpt && test -s runs/cr/ckpt/step-3-b1.ckpt%s", ""), 0);
    // the corpus missing at the resume: a save at the loaded step (a :gen leaves the state
    // unsaved-looking) keeps the file that records it whole, too (review, session 34)
    assert_int_equal(sh_in_dir("cp runs/cr/ckpt/step-3-b1.ckpt s3.keep && mv cc.txt cc.away && %s --norc -r runs/cr -e ':gen \"ab\" n=5' "
                               "> out.txt 2>&1; mv cc.away cc.txt; cmp -s s3.keep runs/cr/ckpt/step-3-b1.ckpt && test -s runs/cr/ckpt/step-3-b2.ckpt",
                               dmsh), 0);
    // a corpus path that resolves to a name with a line break (config.dm's :data line broke in two)
    assert_int_equal(sh_in_dir("d=$(printf 'nl\\ndir') && mkdir -p \"$d\" && cp cc.txt \"$d\"/a.txt && ln -sfn \"$d\" nlink && "
                               "%s --norc -e ':data nlink' > out.txt 2>&1; test $? = 1", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "error: the corpus path nlink resolves to a name with a line break"));
    // (a tab is written quoted: such a name opens — review, session 34)
    assert_int_equal(sh_in_dir("d=$(printf 'tab\\tdir') && mkdir -p \"$d\" && cp cc.txt \"$d\"/a.txt && ln -sfn \"$d\" tlink && "
                               "%s --norc -e ':data tlink' > out.txt 2>&1", dmsh), 0);
    // a name whose only odd character is a quote (written bare, "it's.txt" made config.dm fail
    // on an unterminated single quote): config.dm replays from another directory
    snprintf(args, sizeof args, ":session ap\n%s\n:data \"it's.txt\"\n:init seed=1\n", TINY);
    write_file("ap.dm", args);
    assert_int_equal(sh_in_dir("cat /usr/include/*.h | head -c 60000 > \"it's.txt\" && %s --norc -b ap.dm > out.txt 2>&1 && d=$PWD && "
                               "cd / && %s --norc -b \"$d/runs/ap/config.dm\" > \"$d/out.txt\" 2>&1", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "/it's.txt: 1 file")) print_error("%s\n", out);
    assert_non_null(strstr(out, "/it's.txt: 1 file"));
}

// Found by a QA pass (session 29): an interrupted :stress kept its steps in the run, but the
// transcript held it as a comment only, so the replay ended where the stress began and every later
// checkpoint line blamed a -r that never ran; and its report read as a finished protocol of the
// steps that ran. Now the line that takes them (:stress ... steps=K: its lr is constant) follows.
static void test_interrupted_stress_replays(void **s) {
    (void)s;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "(rm -f k.out; %%s --norc -e ':session str' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 2' "
             "-e ':stress lr_mult=2 steps=1000000' > k.out 2>&1 & p=$!; for i in $(seq 1200); do "
             "test $(grep -c '^train' runs/str/metrics.tsv 2> /dev/null || echo 0) -ge 7 && break; sleep 0.05; done; "
             "kill -TERM $p; wait $p; test $? = 143)", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("k.out", out, sizeof out);
    if (!strstr(out, "stress lr_mult=2 steps=1000000, interrupted after ")) print_error("%s\n", out);
    assert_non_null(strstr(out, "stress lr_mult=2 steps=1000000, interrupted after "));
    char *t = transcript("str");
    const char *cut = strstr(t, "\n# cut short at step ");
    long long at = 0;
    if (!cut) print_error("%s\n", t);
    assert_non_null(cut);
    assert_int_equal(sscanf(cut, "\n# cut short at step %lld", &at), 1);
    char want[200];
    snprintf(want, sizeof want, "\n:stress lr_mult=2 steps=%lld\n", at - 2);
    if (!strstr(t, want)) print_error("want %s in\n%s\n", want, t);
    assert_non_null(strstr(t, want));
    assert_null(strstr(t, "unplaced"));
    free(t);
    replay_matches_resume("str");
    // stopped by nan_limit part-way: the retake fails where the session's did, and the replay goes on
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session sn' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 2' "
             "-e ':set clip=0 nan_limit=2 eps=1e-30 beta2=0 wd=0' -e ':stress lr_mult=3000 steps=200' > k.out 2>&1; test $? = 1", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    t = transcript("sn");
    if (!strstr(t, "\n# failed part-way, its steps taken by the next line (it took the run from step 2 to ")) print_error("%s\n", t);
    assert_non_null(strstr(t, "\n# failed part-way, its steps taken by the next line (it took the run from step 2 to "));
    assert_non_null(strstr(t, "\n:stress lr_mult=3000 steps="));
    free(t);
    replay_matches_resume("sn");
    // the same stress with N = the steps it took there: it fails at its last step, and its line
    // is the one typed (it was left out as no cut of itself, and a replay missed its steps)
    long long from = 0, to = 0;
    const char *fp = strstr(t = transcript("sn"), "(it took the run from step ");
    assert_non_null(fp);
    assert_int_equal(sscanf(fp, "(it took the run from step %lld to %lld", &from, &to), 2);
    free(t);
    assert_true(to - from >= 2);
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session sl' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 2' "
             "-e ':set clip=0 nan_limit=2 eps=1e-30 beta2=0 wd=0' -e ':stress lr_mult=3000 steps=%lld' > k.out 2>&1; test $? = 1", TINY,
             corpus, to - from);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    t = transcript("sl");
    char took[200], line[120];
    snprintf(took, sizeof took, "(it took the run from step %lld to %lld, then failed", from, to);
    snprintf(line, sizeof line, "\n:stress lr_mult=3000 steps=%lld\n", to - from);
    if (!strstr(t, took) || !strstr(t, line)) print_error("want '%s' and '%s' in\n%s\n", took, line, t);
    assert_non_null(strstr(t, took));
    assert_non_null(strstr(t, line));
    free(t);
    replay_matches_resume("sl");
}

// A :gen (or :eval) cut by SIGINT keeps the forwards it ran in the arms' counts, which the exit
// save writes and no replayed line adds (QA, session 33: replays ended with other counters,
// unsaid): the transcript's comment on the cut line says so.
static void test_cut_gen_counts_said(void **s) {
    (void)s;
    char script[1200], cmd[1600];
    snprintf(script, sizeof script, "%s:data %s\n:session gi\n:init seed=1\n:step 2\n:gen \"th\" n=1000000\n", SMALL, corpus);
    write_file("gi.dm", script);
    snprintf(cmd, sizeof cmd,
             // (the kill waits for :gen's own mark in the transcript: a fixed second after a step
             // line could land in :step 2 on a loaded host)
             "(timeout 300 %%s -b gi.dm > gi.out 2> gi.err & p=$!; for i in $(seq 1200); do "
             "grep -q '^# started, never finished.*: :gen' runs/gi/transcript.dm 2>/dev/null && break; "
             "sleep 0.1; done; sleep 1; kill -INT $p; wait $p; true)");
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    char t[8000];
    slurp_to("runs/gi/transcript.dm", t, sizeof t);
    if (!strstr(t, "the forwards it ran stay in the arms' counts, which a replay of these lines does not add):\n# :gen")) print_error("%s\n", t);
    assert_non_null(strstr(t, "the forwards it ran stay in the arms' counts, which a replay of these lines does not add):\n# :gen"));
    // and a replay of the transcript says it passes the cut line, not in silence (QA mutation,
    // session 39: the "interrupted" mark left out of the marks a replay names, unseen)
    assert_int_equal(sh_in_dir("cp runs/gi/transcript.dm gr.dm && %s --norc -b gr.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, ": note: this line is not run: interrupted during the command below (at step 2; it took no step")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, ": note: this line is not run: interrupted during the command below (at step 2; it took no step"));
    assert_non_null(strstr(err_, "gr.dm:"));
}

// A live session's transcript read from a second terminal (dmsh -b, --replay): the running
// command's mark says the process ended during it, and the replay said so too (QA, session 34).
// The replay says the command is still running, naming the dmsh that holds the session.
static void test_live_transcript_mark(void **s) {
    (void)s;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "(%%s --norc -e ':session live' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 1000000 eval_every=0' "
             "> k.out 2>&1 & p=$!; for i in $(seq 1200); do grep -q '^# started, never finished' runs/live/transcript.dm 2> /dev/null && break; "
             "sleep 0.05; done; %%s --norc -b runs/live/transcript.dm > r.out 2>&1; kill -TERM $p; wait $p; test $? = 143)", TINY, corpus);
    char full[2600];
    snprintf(full, sizeof full, cmd, dmsh, dmsh);
    assert_int_equal(sh_in_dir("%s", full), 0);
    slurp_to("r.out", out, sizeof out);
    if (!strstr(out, "note: this line is not run: the command it marks is still running (runs/live is in use by another dmsh (pid "))
        print_error("%s\n", out);
    assert_non_null(strstr(out, "note: this line is not run: the command it marks is still running (runs/live is in use by another dmsh (pid "));
    assert_null(strstr(out, "the process ended during it"));
}

// A kill in a save's fsync or before its rename (the slowest part of a big save) left a whole
// ckpt/NAME.ckpt.<pid>.tmp, which -r removed as "cut short": a new session's only state was lost
// (QA, session 35). It is put in place; a cut-short one is still removed. And the transcript of a
// new session killed between its first save and its line was said "written before dmsh placed
// them", every later checkpoint line "unplaced": the mark's steps place it now. Made here as the
// kill leaves it: the file under its temp name, no LATEST, the :train's mark the last line.
static void test_whole_tmp_put_in_place(void **s) {
    (void)s;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session wt' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 2 ckpt_every=2 eval_every=0' > k.out 2>&1 && "
             "cd runs/wt && mv ckpt/step-2.ckpt ckpt/step-2.ckpt.4242.tmp && head -c 3000 ckpt/step-2.ckpt.4242.tmp > ckpt/step-4.ckpt.4243.tmp && "
             "rm ckpt/LATEST && sed -i '/^# (finished)/,$d' transcript.dm && echo '# started, never finished (:train from step 0; the process ended "
             "during it; a -r resumes from its last checkpoint): :train 2 ckpt_every=2 eval_every=0' >> transcript.dm && cd ../.. && cp -r runs/wt runs/nc && "
             "rm runs/nc/ckpt/*.tmp && mkdir -p runs/em", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/wt -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    const char *want[] = {"dmsh: put runs/wt/ckpt/step-2.ckpt.4242.tmp in place as runs/wt/ckpt/step-2.ckpt (its write was complete; a crash came before its rename)\n",
                          "dmsh: removed runs/wt/ckpt/step-4.ckpt.4243.tmp (a checkpoint write cut short by a crash)\n"};
    for (int i = 0; i < 2; i++) {
        if (!strstr(err_, want[i])) print_error("want %s in\n%s\n", want[i], err_);
        assert_non_null(strstr(err_, want[i]));
    }
    assert_non_null(strstr(out, "resumed runs/wt at step 2 from ckpt/step-2.ckpt"));
    assert_non_null(strstr(out, "the transcript takes the 2 steps it ran to there with `:train 2 ckpt_every=2 eval_every=0 stop_after=2`"));
    assert_null(strstr(out, "written before dmsh placed them"));
    char *t = transcript("wt");
    if (strstr(t, "unplaced")) print_error("%s\n", t);
    assert_null(strstr(t, "unplaced"));
    free(t);
    replay_matches_resume("wt");
    // a session with checkpoints before: LATEST named the older one, and -r resumed that, the
    // finished save's file beside it unused and its rows dropped (review, session 35). LATEST names
    // it now, and the mark's steps place it as above.
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session lt' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 6 ckpt_every=2 eval_every=0' > k.out 2>&1 && "
             "cd runs/lt && mv ckpt/step-6.ckpt ckpt/step-6.ckpt.4242.tmp && echo step-4.ckpt > ckpt/LATEST && touch -r ckpt/step-4.ckpt ckpt/LATEST && "
             "sed -i -e '/step-6/d' -e '/^:train/d' -e 's/^# (finished).*/# started, never finished (:train from step 0; the process ended during it; "
             "a -r resumes from its last checkpoint): :train 6 ckpt_every=2 eval_every=0/' transcript.dm", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/lt -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "dmsh: runs/lt/ckpt/LATEST names step-6.ckpt now, as that save would have\n")) print_error("%s\n%s\n", err_, out);
    assert_non_null(strstr(err_, "dmsh: runs/lt/ckpt/LATEST names step-6.ckpt now, as that save would have\n"));
    assert_non_null(strstr(out, "resumed runs/lt at step 6 from ckpt/step-6.ckpt (6 metric rows)"));
    assert_non_null(strstr(out, "with `:train 6 ckpt_every=2 eval_every=0 stop_after=6`"));
    t = transcript("lt");
    assert_null(strstr(t, "unplaced"));
    free(t);
    replay_matches_resume("lt");
    // a LATEST set by hand after the crash (newer than the temp file) is the user's choice: kept
    assert_int_equal(sh_in_dir("cd runs/lt && cp ckpt/step-6.ckpt ckpt/step-6.ckpt.4244.tmp && touch -d '-1 hour' ckpt/step-6.ckpt.4244.tmp && "
                               "echo step-4.ckpt > ckpt/LATEST && cd ../.. && %s --norc -r runs/lt -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    assert_null(strstr(err_, "LATEST names step-6.ckpt now"));
    assert_non_null(strstr(out, "resumed runs/lt at step 4 from ckpt/step-4.ckpt"));
    assert_int_equal(sh_in_dir("echo step-6.ckpt > runs/lt/ckpt/LATEST%s", ""), 0);
    // a temp name left as a second link of the file (a save's link() made, its unlink() not):
    // removed, once (a rename onto the same file does nothing: it was "put in place" every -r)
    assert_int_equal(sh_in_dir("ln runs/lt/ckpt/step-6.ckpt runs/lt/ckpt/step-6.ckpt.4243.tmp && %s --norc -r runs/lt -e ':quit' > out.txt 2> err.txt && "
                               "test ! -e runs/lt/ckpt/step-6.ckpt.4243.tmp && test -s runs/lt/ckpt/step-6.ckpt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "dmsh: removed runs/lt/ckpt/step-6.ckpt.4243.tmp (a second name of runs/lt/ckpt/step-6.ckpt, which its save had put in place)\n"));
    // no checkpoint: -r's advice is what works (":save writes one" did not: -r opens no session)
    assert_int_not_equal(sh_in_dir("%s --norc -r runs/nc > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    // (and the replay of its transcript's commands, which "remove" would delete: QA, session 41)
    const char *nc = "runs/nc: no checkpoint in runs/nc/ckpt: the run stopped before its first save, so it cannot be resumed (metrics.tsv holds its rows; "
                     "`dmsh -e ':session NEW' -b runs/nc/transcript.dm` replays its commands in a new session): remove runs/nc or choose a new name";
    if (!strstr(err_, nc)) print_error("%s\n", err_);
    assert_non_null(strstr(err_, nc));
    assert_int_not_equal(sh_in_dir("%s --norc -r runs/em > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "runs/em: no checkpoint in runs/em/ckpt: nothing to resume (`:session runs/em` starts a run in it)"));
}

// An arm switched off for an eval and left off is the state the exit save keeps: -r went on from
// it with nothing said where one comes back to a session, config.dm read as the baseline's, and
// a :load with no model said nothing either (QA, session 35)
static void test_arms_off_said(void **s) {
    (void)s;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session ao' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 2' -e ':arm engram off' "
             "-e ':eval' > k.out 2>&1", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("runs/ao/config.dm", out, sizeof out);
    assert_non_null(strstr(out, "\n# arms off in the model now: engram (:arm NAME off after :init; a model built from these lines has every arm on)\n"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/ao -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "\nnote: arms off in the resumed state: engram (steps go on without them; :arm NAME on switches one back)\n"))
        print_error("%s\n", out);
    assert_non_null(strstr(out, "\nnote: arms off in the resumed state: engram (steps go on without them; :arm NAME on switches one back)\n"));
    // :sessions sets runs side by side: the last loss, the last eval (its arms), shape, arms off
    assert_int_equal(sh_in_dir("%s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    const char *ss = strstr(out, "  runs/ao  (latest checkpoint: ");
    assert_non_null(ss);
    ss = strchr(ss, '\n') + 1;
    if (strncmp(ss, "    loss ", 9) || !strstr(ss, " (step 1); held-out bpb ") || !strstr(ss, " [off: engram] (depth 2, step 2, over ") ||
        !strstr(ss, " B); d=32 L=2 E=2 k=1; arms off: engram\n"))
        print_error("%s\n", out);
    assert_int_equal(strncmp(ss, "    loss ", 9), 0);
    assert_non_null(strstr(ss, " [off: engram] (depth 2, step 2, over "));
    assert_non_null(strstr(ss, " B); d=32 L=2 E=2 k=1; arms off: engram\n"));
    // the loss is the last train row's, the step it names (QA mutation, session 36: the first
    // row's loss labelled "(step 1)" went unseen): metrics.tsv's row of step 1, to 4 places
    double shown = 0, row1 = 0, row0 = 0;
    assert_int_equal(sscanf(ss, "    loss %lf (step 1)", &shown), 1);
    assert_int_equal(sh_in_dir("awk -F'\t' '$1==\"train\" {print $4}' runs/ao/metrics.tsv > rows.txt%s", ""), 0);
    slurp_to("rows.txt", err_, sizeof err_);
    assert_int_equal(sscanf(err_, "%lf %lf", &row0, &row1), 2);
    if (fabs(shown - row1) > 6e-5) fail_msg(":sessions loss %.4f (step 1), metrics.tsv's step 1: %.6f (step 0: %.6f)", shown, row1, row0);
    assert_true(fabs(row0 - row1) > 2e-4);  // (the two rows tell the two apart)
    assert_int_equal(sh_in_dir("%s --norc -e \":load runs/ao/ckpt/$(cat runs/ao/ckpt/LATEST)\" > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "\nnote: arms off in the checkpoint (it keeps its own): engram (:arm NAME on switches one back)\n"));
    // every arm on: nothing said, nothing written
    assert_int_equal(sh_in_dir("%s --norc -r runs/ao -e ':arm engram on' -e ':quit' > out.txt 2> err.txt && grep -c '^# arms off' runs/ao/config.dm; test $? = 1", dmsh), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/ao -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_null(strstr(out, "arms off"));
}

// :load in a session rewrites metrics.tsv to the loaded state's rows, which an analysis after a
// :load to compare checkpoints read as half a run: said, with the file that keeps the rest (QA,
// session 35)
static void test_load_rows_said(void **s) {
    (void)s;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%%s --norc -e ':session lr' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 6 ckpt_every=3 eval_every=0' "
             "-e ':load runs/lr/ckpt/step-3.ckpt' -e ':load runs/lr/ckpt/step-3.ckpt' > out.txt 2>&1", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    const char *n = strstr(out, "note: metrics.tsv now holds the loaded state's 3 rows (it held 6; the state left behind keeps its rows in /");
    if (!n) print_error("%s\n", out);
    assert_non_null(n);
    assert_non_null(strstr(n, "/runs/lr/ckpt/step-6.ckpt, :load it to have them back)\n"));
    assert_null(strstr(n + 1, "note: metrics.tsv now holds"));  // (the same rows again: nothing to say)
}

// A :check determinism cut in its second pass keeps the steps it took, and ends in an error
// ("nothing checked"): the transcript kept it as a comment alone, and a replay ended those steps
// short (QA, session 35). `:step K` after it takes them; SIGINT once the second pass's rows are
// in metrics.tsv (the first pass writes none).
static void test_cut_determinism_retaken(void **s) {
    (void)s;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "(%%s --norc -e ':session cdt' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 3' -e ':check determinism steps=3000' "
             "> k.out 2>&1 & p=$!; for i in $(seq 2400); do test $(cat runs/cdt/metrics.tsv 2>/dev/null | wc -l) -gt 40 && break; sleep 0.05; done; "
             "kill -INT $p; wait $p; true)", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("k.out", out, sizeof out);
    if (!strstr(out, "interrupted in the second pass: nothing checked; the model keeps the steps it took")) print_error("%s\n", out);
    assert_non_null(strstr(out, "interrupted in the second pass: nothing checked; the model keeps the steps it took"));
    char *t = transcript("cdt");
    const char *cut = strstr(t, "# cut short at step ");
    if (!cut) print_error("%s\n", t);
    assert_non_null(cut);
    assert_non_null(strstr(cut, "the next line takes the "));
    assert_non_null(strstr(cut, ": :check determinism steps=3000\n:step "));
    assert_null(strstr(t, "unplaced"));
    free(t);
    replay_matches_resume("cdt");
}

// A :train typed with stop_after= and killed: the line that takes its steps replaces the
// stop_after= word with its own count, and the transcript replays (QA mutation, session 38: the old
// word kept, `:train … stop_after=500000 stop_after=16` failed the replay, "given twice")
static void test_cut_stop_after_replays(void **s) {
    (void)s;
    char args[1600];
    snprintf(args, sizeof args, "-e ':session sa' -e '%s' -e ':data %s' -e ':init seed=7' "
             "-e ':train 1000000 ckpt_every=4 eval_every=0 log_every=1 stop_after=500000'", TINY, corpus);
    run_and_kill(args, "grep -q '^step 7 ' k.out");
    assert_int_equal(sh_in_dir("%s --norc -r runs/sa -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    // ("takes them with", or "takes the N steps it ran to there with" when the kill came before any
    // row past the checkpoint)
    static const char said[] = " with `:train 1000000 ckpt_every=4 eval_every=0 log_every=1 stop_after=";
    if (!strstr(out, said)) print_error("%s\n", out);
    assert_non_null(strstr(out, said));
    char *t = transcript("sa");
    static const char take[] = "\n:train 1000000 ckpt_every=4 eval_every=0 log_every=1 stop_after=";
    const char *tl = strstr(t, take);
    if (!tl) print_error("%s\n", t);
    assert_non_null(tl);
    int k = -1, n = -1;
    assert_int_equal(sscanf(tl + sizeof take - 1, "%d%n", &k, &n), 1);
    if (tl[sizeof take - 1 + n] != '\n') print_error("%s\n", t);
    assert_int_equal(tl[sizeof take - 1 + n], '\n');  // one stop_after= word, the count it ran
    assert_true(k >= 4 && k % 4 == 0);
    free(t);
    replay_matches_resume("sa");
}

// A :train with a quoted count cut by SIGINT: no line retakes a quoted count, so its steps stay
// in a comment, and the exit's checkpoint line says the lines above do not rebuild it (QA
// mutation, session 39: without the mark the line claimed "the state the lines above rebuild")
static void test_cut_quoted_count_unplaced(void **s) {
    (void)s;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "(%%s --norc -e ':session cq' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train \"1000000\" eval_every=0 ckpt_every=0 log_every=1' > k.out 2>&1 & p=$!; "
             "for i in $(seq 1200); do grep -q '^step 7 ' k.out && break; sleep 0.05; done; kill -INT $p; wait $p; true)", TINY, corpus);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    char *t = transcript("cq");
    const char *cut = strstr(t, "\n# interrupted during the command below (at step ");
    if (!cut || !strstr(cut, "\n# unplaced checkpoint ckpt/step-")) print_error("%s\n", t);
    assert_non_null(cut);
    assert_non_null(strstr(cut, "a stepping command stops at a step boundary):\n# :train \"1000000\" eval_every=0"));
    assert_non_null(strstr(cut, "\n# unplaced checkpoint ckpt/step-"));
    assert_null(strstr(cut, "the state the lines above rebuild"));
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_after_the_checkpoint),
        cmocka_unit_test(test_load_and_session_switch),
        cmocka_unit_test(test_old_transcript_and_no_rewrite),
        cmocka_unit_test(test_failed_part_way_replays),
        cmocka_unit_test(test_unplaced_and_own_save),
        cmocka_unit_test(test_open_command_and_steps_no_line_takes),
        cmocka_unit_test(test_other_corpus_is_a_new_file),
        cmocka_unit_test(test_corpus_changes_said),
        cmocka_unit_test(test_interrupted_stress_replays),
        cmocka_unit_test(test_cut_gen_counts_said),
        cmocka_unit_test(test_live_transcript_mark),
        cmocka_unit_test(test_whole_tmp_put_in_place),
        cmocka_unit_test(test_arms_off_said),
        cmocka_unit_test(test_load_rows_said),
        cmocka_unit_test(test_cut_determinism_retaken),
        cmocka_unit_test(test_latest_crlf),
        cmocka_unit_test(test_cut_stop_after_replays),
        cmocka_unit_test(test_cut_quoted_count_unplaced),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
