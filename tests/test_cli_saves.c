// test_cli_saves.c — dmsh as a process: nothing already saved is lost or silently replaced
// (checkpoint names, :save paths, settings and models kept across exit, :init and -r), and
// `make demo`'s script runs. Found by a QA pass on training and persistence.
#include "cli_harness.h"

// Found by a QA pass on training and persistence: nothing already saved is lost or silently
// replaced, and what -r resumes is what the user left.
static int same_bytes(const char *a, const char *b) {
    char pa[400], pb[400];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void expect_ok_quiet(const char *script) {
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("script:\n%s\nstderr: %s\n", script, err_);
    assert_int_equal(rc, 0);
}

static void test_saves_keep_what_was_there(void **s) {
    (void)s;
    char script[3000], cmd[600];
    // a user's P.tmp beside :save P is not touched (the temp file is P.<pid>.tmp); empty and
    // directory paths say so
    write_file("notes.tmp", "important\n");
    snprintf(script, sizeof script, "%s:data %s\n:init\n:save notes\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_true(file_size("notes") > 0);
    slurp_to("notes.tmp", out, sizeof out);
    assert_string_equal(out, "important\n");
    snprintf(script, sizeof script, "%s:data %s\n:init\n:save \"\"\n", SMALL, corpus);
    expect_error(script, "the path is empty");
    snprintf(script, sizeof script, "%s:data %s\n:init\n:save nodir/x.ckpt\n", SMALL, corpus);
    expect_error(script, "directory nodir does not exist");
    // without a session, a second run's checkpoints never replace the first one's
    snprintf(script, sizeof script, "%s:data %s\n:init seed=5\n:train 4 ckpt_every=2 eval_every=0\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_int_equal(sh_in_dir("cp dmsh-step-2.ckpt first2.ckpt", ""), 0);
    snprintf(script, sizeof script, "%s:data %s\n:init seed=6\n:train 4 ckpt_every=2 eval_every=0\n:save\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_true(same_bytes("dmsh-step-2.ckpt", "first2.ckpt"));
    assert_non_null(strstr(out, "checkpoint dmsh-step-2-b1.ckpt"));
    assert_non_null(strstr(out, "note: dmsh-step-2.ckpt holds another state of step 2 (kept)"));
    assert_non_null(strstr(out, "saved dmsh-step-4-b1.ckpt (step 4)"));  // :save at the same state: the same file
    // :save PATH over a checkpoint says so; into another session's ckpt/ it is refused
    snprintf(script, sizeof script, "%s:data %s\n:init\n:save a.ckpt\n:save a.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "note: replaced the checkpoint that was at a.ckpt"));
    snprintf(script, sizeof script, ":session K\n%s:data %s\n:init seed=1\n:step 2\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(script, sizeof script, "%s:data %s\n:init seed=77\n:save runs/K/ckpt/step-2.ckpt\n", SMALL, corpus);
    expect_error(script, "inside the checkpoints of session");
    // an empty session name is refused; :sessions lists directories only
    expect_error(":session \"\"\n", "the name is empty");
    write_file("runs/README", "notes\n");
    assert_int_equal(sh_in_dir("mkdir -p runs/zz runs/AA runs/mm", ""), 0);
    assert_int_equal(run(":sessions\n", out, sizeof out, err_, sizeof err_), 0);
    assert_null(strstr(out, "runs/README"));
    assert_non_null(strstr(out, "runs/K"));
    // sorted by name, whatever order the file system keeps them in
    const char *pa = strstr(out, "runs/AA"), *pk = strstr(out, "runs/K "), *pm = strstr(out, "runs/mm"), *pz = strstr(out, "runs/zz");
    assert_true(pa && pk && pm && pz && pa < pk && pk < pm && pm < pz);
    assert_int_equal(sh_in_dir("rmdir runs/zz runs/AA runs/mm", ""), 0);
    expect_error(":plot loss,bpb,loss\n", ":plot: metric 'loss' given twice in 'loss,bpb,loss'");
    // :set and :arm after the last checkpoint are saved on the way out and resumed
    snprintf(script, sizeof script, ":session AR\n%s:data %s\n:init\n:train 2 ckpt_every=2 eval_every=0\n:set lr=0.0123\n:arm moe off\n",
             SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(err_, "saved runs/AR/ckpt/step-2-b1.ckpt"));
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/AR -e ':show arms; :show config' > out.txt 2> err.txt");
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "moe      off"));
    assert_non_null(strstr(out, "0.0123"));
    // a second :init in a session keeps the first model (saved first), and its own horizon
    snprintf(script, sizeof script, ":session II\n%s:data %s\n:init seed=1\n:train 6 eval_every=0\n:init seed=2\n:train 9 eval_every=0\n",
             SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "saved runs/II/ckpt/step-6.ckpt (the model :init replaces)"));
    assert_non_null(strstr(out, "at step 9 (steps=9;"));
    // whose horizon it is travels with the checkpoint (QA, session 23: after -r, :init kept the
    // steps=6 the first :train chose, and the new run's lr sat on the floor from step 6; after a
    // :train and a :load, :init dropped the checkpoint's own steps=40)
    snprintf(script, sizeof script, ":session IR\n%s:data %s\n:init seed=1\n:train 6 eval_every=0\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/IR -e ':init seed=2' -e ':train 9 eval_every=0' > out.txt 2> err.txt");
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "at step 9 (steps=9;"));
    assert_null(strstr(out, "the schedule ends at steps=6"));
    snprintf(script, sizeof script, "%s:data %s\n:set steps=40\n:init seed=1\n:step 1\n:save user40.ckpt\n", SMALL, corpus);
    expect_ok_quiet(script);
    snprintf(script, sizeof script, "%s:data %s\n:init seed=3\n:train 5 eval_every=0\n:load user40.ckpt\n:init seed=7\n:show config\n",
             SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "  steps            40"));
    // :preset is its file's :set lines: other keys keep their values, and on a live model the
    // values :show config shows are the ones the steps use; :set checks the rules between keys
    // on the final values (d=3 H=3 failed in either order)
    snprintf(script, sizeof script, "%s:data %s\n:init\n:set lr=0.0123 warmup=0\n:step 1\n:preset nano\n:step 1\n:show config\n"
             ":set d=3 H=3 r=3\n", ":preset nano\n:set eval_bytes=4096\n", corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);  // d= on the live model
    assert_non_null(strstr(out, "step 1 loss"));
    assert_non_null(strstr(out, "lr 1.230e-02"));
    assert_null(strstr(out, "lr 3.000e-05"));
    assert_non_null(strstr(out, "  lr               0.0123"));
    assert_non_null(strstr(err_, "'d' is an architecture key and the model is live"));
    expect_ok_quiet(":set d=3 H=3 r=3\n:set engram_rows=100\n");
    expect_error(":set engram_rows=10000000000\n", "expected an integer in [1, 2147483647]");
    // :check grad refuses options that do not apply to it (they were ignored)
    expect_error(":check grad steps=abc\n", ":check grad takes off=ARM,... only");
    expect_error(":check determinism route=own\n", ":check determinism takes steps=N only");
    // :check parity's options are checked before it looks for CUDA (any machine gets the error)
    expect_error(":check parity route=sideways\n", "route=sideways: device (the CPU follows CUDA's top-k) or own");
    // a file where a session's ckpt/ goes: refused at :session with one line that says so (QA,
    // session 21: accepted, then every save failed with "directory ... does not exist"), and a
    // :save into it says what is there
    assert_int_equal(sh_in_dir("mkdir -p runs/badck && echo keep > runs/badck/ckpt%s", ""), 0);
    expect_error(":session badck\n", "runs/badck/ckpt exists and is not a directory: move it away, or choose another session");
    expect_error(":preset nano\n:init\n:save runs/badck/ckpt/m.ckpt\n", "runs/badck/ckpt/m.ckpt: cannot save checkpoint: runs/badck/ckpt is not a directory");
    assert_int_equal(sh_in_dir("grep -qx keep runs/badck/ckpt%s", ""), 0);
}

// A checkpoint holds no device: `dmsh -r` loads on the CPU, then goes back to the device the
// session's transcript last chose (session 40; tests/cuemu/dmsh_device.sh check 8 on the emulated
// GPU). Where that device cannot be used, as in this build, the resume says why and stays on the
// CPU (it once resumed there silently: only :show device told).
static void test_resume_names_the_device(void **s) {
    (void)s;
    char script[2000], path[600];
    snprintf(script, sizeof script, ":session gpurun\n%s:data %s\n:init seed=1\n:step 2\n:save\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    // as if the run had gone to the GPU (a CPU build cannot: :device cuda fails here)
    snprintf(path, sizeof path, "%s/runs/gpurun/transcript.dm", dir);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs(":device cuda:0\n:step 1\n", f);
    fclose(f);
    assert_int_equal(sh_in_dir("%s --norc -r runs/gpurun -e ':show device' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    // (the lines after the checkpoint are comments now: they ran, their effect is not in it)
    if (!strstr(out, "this session last ran on cuda:0")) print_error("%s\n", out);
    assert_non_null(strstr(out, "this session last ran on cuda:0"));
    assert_non_null(strstr(out, "`:device cuda:0` to go back"));
    assert_non_null(strstr(out, "this session last ran on cuda:0, which this dmsh cannot use ("));
    assert_non_null(strstr(out, "): resumed on cpu; `:device cuda:0` to go back\ndevice cpu (")); // (and :show device says so)
}

// Found by a QA pass (session 21): a process killed during a :train (SIGKILL, the OOM killer)
// left that :train out of the transcript, whose checkpoints -r then resumed from: the transcript
// said nothing of the steps it lacked, and its replay trained a different run without a word.
// Now the command's mark stays in the transcript, -r names the command, and a replay names the
// line it does not run. A command that returns takes its mark out again.
static void test_killed_command_is_named(void **s) {
    (void)s;
    char args[1400];
    snprintf(args, sizeof args, "-e ':session kil' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 ckpt_every=2 eval_every=0 log_every=100000'",
             ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5", corpus);
    run_and_kill(args, "ls runs/kil/ckpt/step-*.ckpt > /dev/null 2>&1");
    char tp[600];
    snprintf(tp, sizeof tp, "%s/runs/kil/transcript.dm", dir);
    char *t = slurp(tp);
    assert_non_null(t);
    if (!strstr(t, "# started, never finished")) print_error("%s\n", t);
    assert_non_null(strstr(t, "): :train 1000000 ckpt_every=2 eval_every=0 log_every=100000\n"));
    assert_non_null(strstr(t, "\n:init seed=1\n"));  // the commands that returned: no mark left
    free(t);
    assert_int_equal(sh_in_dir("%s --norc -r runs/kil -e ':probe head' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "note: the process ended during `:train 1000000")) print_error("%s\n", out);
    assert_non_null(strstr(out, "note: the process ended during `:train 1000000 ckpt_every=2 eval_every=0 log_every=100000`"));
    // the steps it took to the checkpoint -r resumed from are in the transcript (session 26: the
    // cut line was a comment only, and a replay trained a different run): the replay rebuilds
    // the resumed state, every weight of it (one :probe: mean, std, min, max to 6 digits)
    long long at = -1;
    const char *r = strstr(out, "resumed runs/kil at step ");
    assert_true(r && sscanf(r, "resumed runs/kil at step %lld", &at) == 1 && at >= 2);
    char want[200], probe[400];
    snprintf(want, sizeof want, "\n:train 1000000 ckpt_every=2 eval_every=0 log_every=100000 stop_after=%lld\n", at);
    t = slurp(tp);
    if (!strstr(t, want)) print_error("%s\n", t);
    assert_non_null(strstr(t, want));
    free(t);
    const char *pl = strstr(out, "\nhead ");
    assert_non_null(pl);
    snprintf(probe, sizeof probe, "%.*s", (int)strcspn(pl + 1, "\n"), pl + 1);
    assert_int_equal(sh_in_dir("cp runs/kil/transcript.dm kil.dm && %s --norc -b kil.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "note: this line is not run: started, never finished"));
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, probe)) print_error("want %s\n%s\n", probe, out);
    assert_non_null(strstr(out, probe));
    // an interrupt (SIGTERM in a script) the same way: the cut :train's steps are in the
    // transcript, and its replay ends where the session did (the wait is for step-6.ckpt: from
    // step 3 with ckpt_every=2 there never is a step-5.ckpt, and the test waited out its 60 s,
    // then replayed the thousands of steps run meanwhile — 2 of CI's minutes a precision)
    char sig[3000];
    snprintf(sig, sizeof sig, "(%s --norc -e ':session sig' -e '%s' -e ':data %s' -e ':init seed=1' -e ':step 3' "
             "-e ':t 1000000 ckpt_every=2 log_every=100000' > k.out 2>&1 & p=$!; for i in $(seq 1200); do "
             "ls runs/sig/ckpt/step-6.ckpt > /dev/null 2>&1 && break; sleep 0.05; done; kill -TERM $p; wait $p; test $? = 143)", dmsh,
             ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5 eval_every=4", corpus);
    assert_int_equal(sh_in_dir("%s", sig), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/sig -e ':probe head' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_true((r = strstr(out, "resumed runs/sig at step ")) && sscanf(r, "resumed runs/sig at step %lld", &at) == 1 && at >= 5);
    snprintf(want, sizeof want, "\n:train 1000000 ckpt_every=2 log_every=100000 stop_after=%lld\n", at - 3);
    snprintf(tp, sizeof tp, "%s/runs/sig/transcript.dm", dir);
    t = slurp(tp);
    if (!strstr(t, want) || !strstr(t, "\n# cut short at step ")) print_error("%s\n", t);
    assert_non_null(strstr(t, want));
    free(t);
    assert_non_null(pl = strstr(out, "\nhead "));
    snprintf(probe, sizeof probe, "%.*s", (int)strcspn(pl + 1, "\n"), pl + 1);
    assert_int_equal(sh_in_dir("cp runs/sig/transcript.dm sig.dm && %s --norc -b sig.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, probe)) print_error("want %s\n%s\n", probe, out);
    assert_non_null(strstr(out, probe));
}

// Found by a QA pass (session 23), each a process killed (SIGKILL) and resumed with -r: after a
// :load it resumed the branch the user had left, after an :init the model it replaced (both "from
// its last checkpoint"); settings made after the last checkpoint were dropped without a word (the
// transcript still showing them), and the metrics.tsv rows past it too.
static void test_killed_after_load_init_or_settings(void **s) {
    (void)s;
    char args[1400];
    const char *tiny = ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5";
    // after a :load: LATEST names the loaded state at the :load, not only at a clean exit
    snprintf(args, sizeof args, "-e ':session ld2' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 4 ckpt_every=2 eval_every=0'",
             tiny, corpus);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%%s --norc %s > out.txt 2> err.txt", args);
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    run_and_kill("-r runs/ld2 -e ':load runs/ld2/ckpt/step-2.ckpt' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=100000'",
                 "grep -q '^loaded' k.out && grep -q 'step-2[.]ckpt' runs/ld2/ckpt/LATEST");  // (:load says "loaded" before it writes LATEST)
    assert_int_equal(sh_in_dir("%s --norc -r runs/ld2 -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "resumed runs/ld2 at step 2 from ckpt/step-2.ckpt")) print_error("%s\n", out);
    assert_non_null(strstr(out, "resumed runs/ld2 at step 2 from ckpt/step-2.ckpt"));
    // settings made after the last checkpoint (an :arm typed as a prefix among them): -r says
    // which, and counts the rows past the checkpoint; after a clean exit they were saved
    snprintf(args, sizeof args,
             "-e ':session ak' -e '%s' -e ':data %s' -e ':init seed=1' -e ':train 4 ckpt_every=2 eval_every=0' "
             "-e ':ar kda off' -e ':set lr=0.001 clip=0.5' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'", tiny, corpus);
    run_and_kill(args, "grep -q '^:set lr' runs/ak/transcript.dm 2>/dev/null && grep -q '^step 6 ' k.out");
    assert_int_equal(sh_in_dir("%s --norc -r runs/ak -e ':set lr=0.002' -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "not in it (the process ended before they were saved): lr 0.003 -> 0.001, clip 1 -> 0.5, kda on -> off"))
        print_error("%s\n", out);
    assert_non_null(strstr(out, "not in it (the process ended before they were saved): lr 0.003 -> 0.001, clip 1 -> 0.5, kda on -> off"));
    assert_non_null(strstr(out, " rows past this checkpoint's 4 (steps and evals after it, which no checkpoint in ckpt/ holds): they leave it; the run from here writes its own"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/ak -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_null(strstr(out, "not in it"));
    // any number of :set lines: the last value of each key counts (the first 64 lines were kept,
    // and a clean exit after 70 was said to have lost lr)
    assert_int_equal(sh_in_dir("(for i in $(seq 70); do echo \":set lr=0.00$((i %% 9 + 1))\"; done; echo ':set lr=0.0005') | "
                               "%s --norc -r runs/ak > out.txt 2> err.txt", dmsh), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/ak -e ':show config' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_null(strstr(out, "not in it"));
    assert_non_null(strstr(out, "  lr               0.0005 "));
    // after an :init: the new model (its step 0) resumes, not the one it replaced
    run_and_kill("-r runs/ak -e ':init d=16 seed=2' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'", "grep -q '^step 6 ' k.out");
    assert_int_equal(sh_in_dir("%s --norc -r runs/ak -e ':show config' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "resumed runs/ak at step 0 from ckpt/step-0.ckpt")) print_error("%s\n", out);
    assert_non_null(strstr(out, "resumed runs/ak at step 0 from ckpt/step-0.ckpt"));
    assert_non_null(strstr(out, "\n  d                16 "));
    // after a :save PATH into the session's own ckpt/ under a name of the user's: -r resumes it
    // at once (LATEST was written at the exit only, and -r refused the name LATEST then held,
    // resuming an older step-N file as "the checkpoint written most recently")
    run_and_kill("-r runs/ak -e ':step 3' -e ':save runs/ak/ckpt/mine.ckpt' -e ':train 1000000 ckpt_every=0 eval_every=0 log_every=1'",
                 "grep -q '^step 6 ' k.out");
    assert_int_equal(sh_in_dir("%s --norc -r runs/ak -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "resumed runs/ak at step 3 from ckpt/mine.ckpt")) print_error("%s\n", out);
    assert_non_null(strstr(out, "resumed runs/ak at step 3 from ckpt/mine.ckpt"));
    slurp_to("err.txt", err_, sizeof err_);
    assert_null(strstr(err_, "note"));
    assert_int_equal(sh_in_dir("%s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    // its step is read from the file (the name has none); a file cut short says so
    assert_non_null(strstr(out, "runs/ak  (latest checkpoint: mine.ckpt, step 3)\n"));
    assert_int_equal(sh_in_dir("truncate -s 100 runs/ak/ckpt/mine.ckpt && %s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "runs/ak  (latest checkpoint: mine.ckpt: unreadable, section 'state': truncated inside a section")) print_error("%s\n", out);
    assert_non_null(strstr(out, "runs/ak  (latest checkpoint: mine.ckpt: unreadable, section 'state': truncated inside a section"));
}

// Found by a QA pass (session 22): a reader of stdout that went away (`dmsh -b run.dm | head`)
// killed dmsh at its next write (SIGPIPE's default), with nothing saved and the running command
// in no transcript; a file-size limit (ulimit -f, SIGXFSZ) killed it in the middle of a save. Now
// the first stops the run at a step boundary, saves it and exits 141; the second is a failed
// write like a full disk, said in one line, with no partial file left.
static void test_output_and_size_limits(void **s) {
    (void)s;
    char cmd[1400];
    int cl = snprintf(cmd, sizeof cmd,
             "bash -c \"%s --norc -e ':session pip' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 log_every=1 eval_every=0' 2> pip.err | grep -m 1 '^step 2 ' > /dev/null; exit \\${PIPESTATUS[0]}\"", dmsh,
             ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5", corpus);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    int rc = sh_in_dir("%s", cmd);
    slurp_to("pip.err", err_, sizeof err_);
    if (rc != 141) print_error("rc %d, stderr: %s\n", rc, err_);
    assert_int_equal(rc, 141);
    assert_non_null(strstr(err_, "dmsh: saved runs/pip/ckpt/step-"));
    char tp[600];
    snprintf(tp, sizeof tp, "%s/runs/pip/transcript.dm", dir);
    char *t = slurp(tp);
    assert_non_null(t);
    // (its steps stay in the run: the transcript takes them, session 26)
    assert_non_null(strstr(t, "\n# cut short at step "));
    assert_non_null(strstr(t, "steps it ran: :train 1000000 log_every=1 eval_every=0\n:train 1000000 log_every=1 eval_every=0 stop_after="));
    free(t);
    // -r resumes the saved state
    assert_int_equal(sh_in_dir("%s --norc -r runs/pip -e ':quit' > out.txt 2> err.txt", dmsh), 0);
    // without a session the state goes where session-less checkpoints go (it was lost, while the
    // script's last line said "state intact")
    cl = snprintf(cmd, sizeof cmd,
             "mkdir -p nosess && cd nosess && bash -c \"%s --norc -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 log_every=1 eval_every=0' 2> ../nos.err | grep -m 1 '^step 2 ' > /dev/null; exit \\${PIPESTATUS[0]}\"", dmsh,
             ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5", corpus);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    rc = sh_in_dir("%s", cmd);
    slurp_to("nos.err", err_, sizeof err_);
    if (rc != 141 || !strstr(err_, "(no session: the state the signal stopped; :load it to go on)")) print_error("rc %d, stderr: %s\n", rc, err_);
    assert_int_equal(rc, 141);
    assert_non_null(strstr(err_, "the reader of standard output went away (SIGPIPE)"));
    assert_non_null(strstr(err_, "dmsh: saved dmsh-step-"));
    assert_int_equal(sh_in_dir("ls nosess/dmsh-step-*.ckpt > /dev/null%s", ""), 0);

    char script[2000];
    snprintf(script, sizeof script, ":session fsz\n%s:data %s\n:init seed=1\n:train 2\n:save\n", SMALL, corpus);
    write_file("fsz.dm", script);
    rc = sh_in_dir("bash -c 'ulimit -f 64; %s --norc -b fsz.dm > out.txt 2> err.txt'", dmsh);
    slurp_to("err.txt", err_, sizeof err_);
    if (rc != 1 || !strstr(err_, "fsz.dm:7: error: ")) print_error("rc %d, stderr: %s\n", rc, err_);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err_, "File too large (the previous file, if any, is untouched)"));
    assert_int_equal(sh_in_dir("ls runs/fsz/ckpt | grep -c tmp%s", ""), 1);  // (grep -c found none: status 1)
}

// Found by a QA pass (session 22): the session lock is held on the directory, but every write
// went by its name. A session directory renamed while a run trained (mv runs/X runs/X-old) let a
// second dmsh open a new runs/X, and the first run's checkpoints, metrics rows and LATEST then
// went into it: two runs mixed in one session, and -r resumed one under the other's transcript.
// Now a renamed directory is followed (said in a note), and a deleted one is written to no more.
static void test_session_moved_or_deleted(void **s) {
    (void)s;
    const char *shape = ":preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5";
    char cmd[1800];
    int cl = snprintf(cmd, sizeof cmd,
             "(%s --norc -e ':session mv' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 ckpt_every=5 eval_every=0 log_every=100000' > mv1.out 2> mv1.err & p=$!; "
             "for i in $(seq 1200); do ls runs/mv/ckpt/step-*.ckpt > /dev/null 2>&1 && break; sleep 0.05; done; "
             "mv runs/mv runs/mv-old; "
             "%s --norc -e ':session mv' -e '%s' -e ':data %s' -e ':init seed=2' -e ':train 3' > mv2.out 2>&1; "
             "sleep 0.3; kill -TERM $p; wait $p; echo $? > mv1.rc)", dmsh, shape, corpus, dmsh, shape, corpus);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    assert_int_equal(sh_in_dir("%s", cmd), 0);
    slurp_to("mv1.out", out, sizeof out);
    if (!strstr(out, "note: the session directory runs/mv no longer leads to this run's directory")) print_error("%s\n", out);
    assert_non_null(strstr(out, "note: the session directory runs/mv no longer leads to this run's directory"));
    slurp_to("mv1.rc", err_, sizeof err_);
    int rc1 = atoi(err_);
    slurp_to("mv1.err", err_, sizeof err_);
    if (rc1 != 143) print_error("rc %d: %s\n", rc1, err_);
    assert_int_equal(rc1, 143);
    // the second run's session holds only its own: 3 rows, step-3, and LATEST names it
    slurp_to("runs/mv/metrics.tsv", out, sizeof out);
    assert_int_equal(count_lines(out), 4);
    slurp_to("runs/mv/ckpt/LATEST", out, sizeof out);
    assert_string_equal(out, "step-3.ckpt\n");
    assert_int_equal(sh_in_dir("ls runs/mv/ckpt | grep -c '^step-' | grep -qx 1%s", ""), 0);
    // the first run's files followed it, its transcript without the running command's mark
    slurp_to("runs/mv-old/transcript.dm", out, sizeof out);
    assert_null(strstr(out, "started, never finished"));
    assert_non_null(strstr(out, "steps it ran: :train 1000000 ckpt_every=5"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/mv-old -e ':quit' > out.txt 2> err.txt", dmsh), 0);

    cl = snprintf(cmd, sizeof cmd,
             "(%s --norc -e ':session rm' -e '%s' -e ':data %s' -e ':init seed=1' "
             "-e ':train 1000000 ckpt_every=5 eval_every=0 log_every=100000' > rm1.out 2> rm1.err & p=$!; "
             "for i in $(seq 1200); do ls runs/rm/ckpt/step-*.ckpt > /dev/null 2>&1 && break; sleep 0.05; done; "
             "for i in $(seq 100); do rm -rf runs/rm 2> /dev/null; [ -e runs/rm ] || break; done; sleep 0.3; kill -TERM $p 2> /dev/null; wait $p; echo $? > rm1.rc)", dmsh, shape, corpus);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    assert_int_equal(sh_in_dir("%s", cmd), 0);
    slurp_to("rm1.out", out, sizeof out);
    slurp_to("rm1.err", err_, sizeof err_);
    // (rm -rf takes the files first: a save in between finds ckpt/ gone, which says so too. Or
    // the rm takes a save's temp file before its rename: that save fails, saying so, which ends
    // the script, and the exit's save can land before the rm reaches ckpt/ — and is deleted with
    // it. A timing of the rm, seen once in a CI run: either way nothing is said saved that was not.
    // Or the rm takes ckpt/ between a periodic checkpoint's file and its LATEST (session.c
    // session_save): the file was written, LATEST's temp file cannot be made in a directory that
    // is gone (ENOENT), and that error ends the script the same way (QA, session 39: seen under a
    // load of 5 on 2 cores). Only ENOENT: another errno would be a real failure to write LATEST.)
    int exit_failed = strstr(err_, "dmsh: autosave failed: ") != NULL;
    int tmp_taken = strstr(err_, "cannot save checkpoint: rename runs/rm/ckpt/") && strstr(err_, ".tmp: No such file or directory");
    int latest_lost = strstr(err_, "-e #5: error: runs/rm/ckpt/step-") &&
                      strstr(err_, ".ckpt was written, but runs/rm/ckpt/LATEST could not be written (No such file or directory): ");
    if (!exit_failed && !tmp_taken && !latest_lost) print_error("%s\n%s\n", out, err_);
    assert_true(exit_failed || tmp_taken || latest_lost);
    // (or the exit's save, mid-rm, loses its temp file so: that line alone, whole; 1 in 120 runs: QA, session 40)
    const char *al = strstr(err_, "dmsh: autosave failed: ");
    long long st = -1;
    int pid = -1, taken = al && sscanf(al, "dmsh: autosave failed: runs/rm/ckpt/step-%lld.ckpt: cannot save checkpoint: rename runs/rm/ckpt/step-%*d.ckpt.%d", &st, &pid) == 2;
    char want[300];
    snprintf(want, sizeof want, "dmsh: autosave failed: runs/rm/ckpt/step-%lld.ckpt: cannot save checkpoint: rename runs/rm/ckpt/step-%lld.ckpt.%d.tmp: "
             "No such file or directory (the previous file, if any, is untouched)\n", st, st, pid);
    if (exit_failed && !(taken && !strncmp(al, want, strlen(want))))
        assert_true(strstr(err_, "was deleted while this run held it") || strstr(err_, "runs/rm/ckpt does not exist"));
    assert_int_equal(file_size("runs/rm"), -1);  // nothing made again under the name
}

// Found by a QA pass (session 22): a :load with no model live took the checkpoint's config over
// the keys set before it without a word (the note named them only with a live model).
static void test_load_names_replaced_settings(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=3\n:save base.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_int_equal(run(":set d=64 lr=0.01\n:load base.ckpt\n", out, sizeof out, err_, sizeof err_), 0);
    if (!strstr(out, "note: the checkpoint's config replaces the settings before it: d 64 -> 32")) print_error("%s\n", out);
    assert_non_null(strstr(out, "note: the checkpoint's config replaces the settings before it: d 64 -> 32"));
    assert_non_null(strstr(out, "lr 0.01 -> 0.003"));
    // a key set to its default value is named too (a QA check of the first fix: it was not)
    snprintf(script, sizeof script, "%s:set seed=3 warmup=100\n:load base.ckpt\n", SMALL);  // (100: the default)
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    if (!strstr(out, "note: the checkpoint's config replaces the settings before it: warmup 100 -> 5\n")) print_error("%s\n", out);
    assert_non_null(strstr(out, "note: the checkpoint's config replaces the settings before it: warmup 100 -> 5\n"));
    snprintf(script, sizeof script, "%s:set seed=3\n:load base.ckpt\n", SMALL);  // the same settings: nothing said
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_null(strstr(out, "replaces the settings"));
}

// Found by a QA pass (session 22): a :load whose open corpus was split another way (eval_frac,
// eval=) said the corpus "changed since this checkpoint was written (its size or bytes
// differ)" of a file nobody touched; and after `:set eval_frac=0.2` then `:load`, the config said
// the checkpoint's 0.1 while the corpus stayed split at 0.2.
static void test_load_names_a_split_not_a_change(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=3\n:save split.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(script, sizeof script, ":data %s\n:set eval_frac=0.2\n:load split.ckpt\n:show data\n", corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    if (strstr(out, "changed since") || !strstr(out, "(last 10%)")) print_error("%s\n", out);
    assert_null(strstr(out, "changed since"));
    assert_non_null(strstr(out, "(last 10%)"));  // split as the checkpoint's eval_frac says
    write_file("heldout.txt", "a held-out file of its own, long enough for a window or two of thirty-two bytes each.\n");
    snprintf(script, sizeof script, ":set seq=32\n:data %s eval=heldout.txt\n:load split.ckpt\n:show data\n", corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "x 32) from the start of the eval file\n"));
    if (!strstr(out, "this checkpoint's run held out the last eval_frac of the corpus; now eval=")) print_error("%s\n", out);
    assert_non_null(strstr(out, "this checkpoint's run held out the last eval_frac of the corpus; now eval="));
    assert_null(strstr(out, "changed since"));
}

// Found by a QA pass (session 21): the anchors (:anchors) were not in the checkpoint, so after
// -r the evals lost their "| unigram ... 5-gram ..." comparison and :plot bpb its anchor lines.
// They come back when the corpus is the same bytes.
static void test_resume_keeps_anchors(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, ":session anc\n%s:data %s\n:init seed=1\n:anchors\n:train 4 eval_every=4 log_every=4\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, " | unigram "));
    assert_int_equal(sh_in_dir("%s --norc -r runs/anc -e ':eval' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    const char *ev = strstr(out, "eval step 4 ");
    if (!ev || !strstr(ev, " | unigram ")) print_error("%s\n", out);
    assert_non_null(ev);
    assert_non_null(strstr(ev, " | unigram "));
    // anchors fit under another anchor_fit_bytes are another reference: not quoted (QA, session 29)
    assert_int_equal(sh_in_dir("%s --norc -r runs/anc -e ':set anchor_fit_bytes=100' -e ':eval' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    ev = strstr(out, "eval step 4 ");
    assert_non_null(ev);
    assert_null(strstr(ev, " | unigram "));
    assert_non_null(strstr(ev, " | anchors fit on "));
}

// Noticed in session 23: a :gen or an :anchors after the last checkpoint changed what a
// checkpoint holds (the arms' forward counts, the anchors) without making the state unsaved, so
// leaving dmsh dropped them; now the exit saves them, into the same file (the same state: no
// step-N-bK), and a session left unchanged is still not saved again.
static void test_exit_saves_gen_counts_and_anchors(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, ":session gx\n%s:data %s\n:init seed=1\n:step 1\n:save\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/gx -e ':show arms' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_null(strstr(err_, "saved"));  // nothing changed: nothing written
    slurp_to("out.txt", out, sizeof out);
    const char *k = strstr(out, "kda ");
    assert_non_null(k);
    long before = strtol(strstr(k, "forward ") + 8, NULL, 10);
    assert_int_equal(sh_in_dir("%s --norc -r runs/gx -e ':gen \"ab\" n=3' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "saved runs/gx/ckpt/step-1.ckpt")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, "saved runs/gx/ckpt/step-1.ckpt"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/gx -e ':show arms; :anchors' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    k = strstr(out, "kda ");
    assert_non_null(k);
    // the :gen's 2 + 3 - 1 forwards, each of L = 2 iterations
    assert_int_equal(strtol(strstr(k, "forward ") + 8, NULL, 10), before + 4 * 2);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "saved runs/gx/ckpt/step-1.ckpt"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/gx -e ':eval' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, " | unigram "));  // the anchors came back with the state
    assert_int_equal(sh_in_dir("ls runs/gx/ckpt | grep -c -- -b > out.txt", dmsh), 1);  // (grep: none)
    // the same after a :save into ckpt/ under the user's name: that file again, not step-1-b1
    // (QA, session 24); a hidden or .tmp name there is refused (-r passes over them)
    assert_int_equal(sh_in_dir("%s --norc -r runs/gx -e ':save runs/gx/ckpt/mine.ckpt' -e ':gen \"ab\" n=3' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "saved runs/gx/ckpt/mine.ckpt")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, "saved runs/gx/ckpt/mine.ckpt"));
    assert_int_equal(sh_in_dir("ls runs/gx/ckpt | grep -c -- -b > out.txt", dmsh), 1);
    assert_int_equal(sh_in_dir("grep -qx mine.ckpt runs/gx/ckpt/LATEST", dmsh), 0);
    assert_int_not_equal(sh_in_dir("%s --norc -r runs/gx -e ':save runs/gx/ckpt/x.tmp' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "a checkpoint needs a name dmsh -r reads (not hidden, not .tmp"));
}

// Found by QA (session 17): a :load in a session dropped the steps since the last save (in no
// file, and their rows left metrics.tsv) and put back the checkpoint's settings without a word;
// a resumed run whose settings went back to the saved ones wrote the same bytes again as a new
// step-N-bK file "holding another state".
static void test_load_keeps_the_replaced_state(void **s) {
    (void)s;
    char script[2000], cmd[600];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=2\n:step 5\n:save other.ckpt\n", SMALL, corpus);
    expect_ok_quiet(script);
    snprintf(script, sizeof script, ":session LD\n%s:data %s\n:init seed=5\n:set lr=0.01 batch=2\n:step 7\n:load other.ckpt\n",
             SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "saved runs/LD/ckpt/step-7.ckpt (the state before this :load)"));
    assert_true(file_size("runs/LD/ckpt/step-7.ckpt") > 0);
    assert_non_null(strstr(out, "note: settings set by the checkpoint (it keeps its own): batch 2 -> 4, lr 0.01 -> "));
    // a path that is no checkpoint writes nothing before it is refused
    snprintf(script, sizeof script, ":session LE\n%s:data %s\n:init seed=5\n:step 2\n:load nofile.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 1);
    assert_non_null(strstr(err_, "nofile.ckpt: cannot open checkpoint"));
    assert_null(strstr(out, "before this :load"));
    // the same state saved again is the file that holds it, not a new branch
    snprintf(script, sizeof script, ":session DUP\n%s:data %s\n:init seed=1\n:step 3\n", SMALL, corpus);
    expect_ok_quiet(script);
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/DUP -e ':set lr=0.01' > out.txt 2> err.txt");
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    assert_true(file_size("runs/DUP/ckpt/step-3-b1.ckpt") > 0);  // another state: its own file
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/DUP -e ':show config' -e ':set lr=0.003' > out.txt 2> err.txt");
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "step-3.ckpt already held this exact state: no new file")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, "step-3.ckpt already held this exact state: no new file"));
    assert_null(strstr(err_, "dmsh: saved "));  // nothing was written: no "saved" line after it
    assert_int_equal(file_size("runs/DUP/ckpt/step-3-b2.ckpt"), -1);
    slurp_to("runs/DUP/ckpt/LATEST", out, sizeof out);
    assert_string_equal(out, "step-3.ckpt\n");
    // steps redone from an earlier checkpoint reach the same state in other wall-clock times: the
    // same state, not "another state of step 4" in a duplicate file (QA, session 23)
    snprintf(script, sizeof script, ":session RD\n%s:data %s\n:init seed=1\n:train 4 ckpt_every=2 eval_every=0\n", SMALL, corpus);
    expect_ok_quiet(script);
    snprintf(cmd, sizeof cmd, "%%s --norc -r runs/RD -e ':load runs/RD/ckpt/step-2.ckpt' -e ':train 2 ckpt_every=2 eval_every=0' > out.txt 2> err.txt");
    assert_int_equal(sh_in_dir(cmd, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "runs/RD/ckpt/step-4.ckpt already held this exact state: no new file"));
    assert_int_equal(file_size("runs/RD/ckpt/step-4-b1.ckpt"), -1);
}

// ckpt/LATEST naming a checkpoint that is gone (deleted or moved by hand) was replaced without a
// word: -r resumed from the largest step as if it were the latest, and the next save rewrote it.
// Now -r says what LATEST named and where it resumes from (or that it cannot), the next save
// says what it replaces, and leaving a state whose file was deleted saves it again.
static void test_latest_names_a_missing_file(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, ":session LM\n%s:data %s\n:init seed=1\n:train 4 ckpt_every=2 eval_every=0\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    slurp_to("runs/LM/ckpt/LATEST", out, sizeof out);
    assert_string_equal(out, "step-4.ckpt\n");
    // -r: the fallback is said, on stderr and in the resume line; LATEST names it from then on
    assert_int_equal(sh_in_dir("rm runs/LM/ckpt/step-4.ckpt && %s --norc -r runs/LM -e ':show metrics' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(err_, "LATEST named step-4.ckpt, which is missing")) print_error("stderr: %s\nstdout: %s\n", err_, out);
    assert_non_null(strstr(err_, "dmsh: -r: note: runs/LM/ckpt/LATEST named step-4.ckpt, which is missing; resuming from runs/LM/ckpt/step-2.ckpt"));
    assert_non_null(strstr(out, "resumed runs/LM at step 2 from ckpt/step-2.ckpt"));
    slurp_to("runs/LM/ckpt/LATEST", out, sizeof out);
    assert_string_equal(out, "step-2.ckpt\n");
    // a save after LATEST's file was deleted during the run says what LATEST named; a state
    // whose file was deleted is saved again on the way out (it once stayed in no file)
    const char *wait_latest = "for i in $(seq 600); do grep -q %s runs/LM/ckpt/LATEST && break; sleep 0.05; done; ";
    char piped[1600], w3[200], w5[200];
    snprintf(w3, sizeof w3, wait_latest, "step-3.ckpt");
    snprintf(w5, sizeof w5, wait_latest, "step-5.ckpt");
    snprintf(piped, sizeof piped,
             "(echo ':step 1'; echo ':save'; %s rm runs/LM/ckpt/step-3.ckpt; echo ':step 1'; echo ':save'; echo ':step 1'; echo ':save'; "
             "%s rm runs/LM/ckpt/step-5.ckpt) | %%s --norc -r runs/LM > out.txt 2> err.txt", w3, w5);
    assert_int_equal(sh_in_dir(piped, dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(out, "note: runs/LM/ckpt/LATEST named step-3.ckpt, which is missing; it names step-4.ckpt now"))
        print_error("stdout: %s\nstderr: %s\n", out, err_);
    assert_non_null(strstr(out, "saved runs/LM/ckpt/step-4.ckpt (step 4)\nnote: runs/LM/ckpt/LATEST named step-3.ckpt, which is missing; it names step-4.ckpt now"));
    assert_non_null(strstr(err_, "dmsh: note: runs/LM/ckpt/step-5.ckpt, where this state was saved, is gone: saving it again"));
    assert_non_null(strstr(err_, "dmsh: saved runs/LM/ckpt/step-5.ckpt"));
    assert_true(file_size("runs/LM/ckpt/step-5.ckpt") > 0);
    // LATEST naming nothing that is there: -r cannot resume and says why; :session and
    // :sessions say what LATEST named too
    write_file("runs/LM/ckpt/LATEST", "step-9.ckpt\n");
    assert_int_equal(run(":sessions\n", out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "runs/LM  (latest checkpoint: step-5.ckpt, step 5)\n    note: runs/LM/ckpt/LATEST named step-9.ckpt, which is missing (dmsh -r resumes from step-5.ckpt)"));
    expect_error(":session LM\n", "runs/LM already holds a run (runs/LM/ckpt/step-5.ckpt; runs/LM/ckpt/LATEST named step-9.ckpt, which is missing)");
    assert_int_equal(sh_in_dir("mkdir -p runs/LZ/ckpt && echo step-9.ckpt > runs/LZ/ckpt/LATEST && %s --norc -r runs/LZ -e ':help' > out.txt 2> err.txt", dmsh), 1);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "dmsh: -r: error: runs/LZ/ckpt/LATEST named step-9.ckpt, which is missing, and no checkpoint is in runs/LZ/ckpt: nothing to resume"));
    expect_error(":session LZ\n", "runs/LZ already holds a run (runs/LZ/ckpt/LATEST named step-9.ckpt, which is missing, and no checkpoint is there");
    // a fifo as LATEST (or as metrics.tsv, transcript.dm): a blocking open hung -r and every
    // :sessions until SIGKILL (QA, session 23); now it is said and passed over. (timeout: the
    // old binary would hang here)
    assert_int_equal(sh_in_dir("rm runs/LM/ckpt/LATEST && mkfifo runs/LM/ckpt/LATEST && timeout 60 %s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "runs/LM/ckpt/LATEST is a fifo, not a file naming a checkpoint"));
    assert_int_equal(sh_in_dir("rm runs/LM/transcript.dm runs/LM/metrics.tsv runs/LM/config.dm && "
                               "mkfifo runs/LM/transcript.dm runs/LM/metrics.tsv runs/LM/config.dm && "
                               "timeout 60 %s --norc -r runs/LM -e ':step 1' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "runs/LM/transcript.dm is not a regular file (a fifo): it is not read, and no command is recorded in it"))
        print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(out, "runs/LM/transcript.dm is not a regular file (a fifo): it is not read, and no command is recorded in it"));
    if (!strstr(err_, "runs/LM/ckpt/LATEST is a fifo, not a file naming a checkpoint; resuming from")) print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(err_, "runs/LM/ckpt/LATEST is a fifo, not a file naming a checkpoint; resuming from"));
    assert_non_null(strstr(out, "step 5 loss"));
}

// The two fallbacks of -r chose differently (QA): a LATEST naming a missing file took the
// largest step-N.ckpt, an unreadable checkpoint the one written most recently. On a run that
// went back with :load they part: the largest step is the branch the user left. Both now take
// the checkpoint written most recently that loads, and say which and why; :sessions names it.
static void test_resume_fallbacks_agree(void **s) {
    (void)s;
    char script[2000];
    // steps 0..5: step-2, step-4, step-6; then back to step 2 with another lr, on to 5 saving
    // each step: step-3, step-4-b1 (step-4 holds the first branch's state), step-5 (LATEST)
    snprintf(script, sizeof script, ":session FB\n%s:data %s\n:init seed=1\n:train 6 ckpt_every=2 eval_every=0\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_int_equal(sh_in_dir("%s --norc -r runs/FB -e ':load runs/FB/ckpt/step-2.ckpt' -e ':set lr=0.001' "
                               "-e ':train 3 ckpt_every=1 eval_every=0' > out.txt 2> err.txt", dmsh), 0);
    assert_true(file_size("runs/FB/ckpt/step-4-b1.ckpt") > 0);
    slurp_to("runs/FB/ckpt/LATEST", out, sizeof out);
    assert_string_equal(out, "step-5.ckpt\n");
    // the first run's files an hour older, as they are on a file system that keeps whole
    // seconds too (both runs can fall in one second there); FC: the same session, its files' times kept
    assert_int_equal(sh_in_dir("cd runs/FB/ckpt && for f in step-2 step-4 step-6; do touch -d @$(($(stat -c %%Y $f.ckpt) - 3600)) $f.ckpt; done && "
                               "cd ../.. && cp -a FB FC", dmsh), 0);
    // LATEST naming a file that is gone: :sessions and -r name the newest of the second branch
    assert_int_equal(sh_in_dir("rm runs/FB/ckpt/step-5.ckpt", dmsh), 0);
    assert_int_equal(run(":sessions\n", out, sizeof out, err_, sizeof err_), 0);
    if (!strstr(out, "runs/FB  (latest checkpoint: step-4-b1.ckpt, step 4)")) print_error("%s\n", out);
    assert_non_null(strstr(out, "runs/FB  (latest checkpoint: step-4-b1.ckpt, step 4)\n    note: runs/FB/ckpt/LATEST named step-5.ckpt, which is missing (dmsh -r resumes from step-4-b1.ckpt)"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/FB -e ':show metrics' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "from ckpt/step-4-b1.ckpt")) print_error("stderr: %s\nstdout: %s\n", err_, out);
    assert_non_null(strstr(err_, "dmsh: -r: note: runs/FB/ckpt/LATEST named step-5.ckpt, which is missing; resuming from runs/FB/ckpt/step-4-b1.ckpt, "
                                 "the newest checkpoint by file time (a copy that kept no file times, cp -r, has lost that order: :load "
                                 "another of runs/FB/ckpt if that is not the state you want)\n"));
    assert_non_null(strstr(out, "resumed runs/FB at step 4 from ckpt/step-4-b1.ckpt"));
    // the same session with step-5 there but unreadable: the same file, said the same way
    assert_int_equal(sh_in_dir("truncate -s 1000 runs/FC/ckpt/step-5.ckpt && %s --norc -r runs/FC -e ':show metrics' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "from ckpt/step-4-b1.ckpt")) print_error("stderr: %s\nstdout: %s\n", err_, out);
    assert_non_null(strstr(err_, "dmsh: -r: runs/FC/ckpt/step-5.ckpt did not load ("));
    assert_non_null(strstr(err_, "); resumed from runs/FC/ckpt/step-4-b1.ckpt instead, the newest by file time that loads (a copy that did "
                                 "not keep file times, cp -r, has lost that order)\n"));
    assert_non_null(strstr(out, "resumed runs/FC at step 4 from ckpt/step-4-b1.ckpt"));
    // (a fallback names no later checkpoint to :load: step-6 is the branch left, step-5 did not
    // load: review, session 31)
    assert_null(strstr(out, "is not the file LATEST names"));
    // files of one time (whole seconds, or a copy that set them all): the larger step, then the
    // later branch, whatever order the directory lists them in
    assert_int_equal(sh_in_dir("cp -a runs/FC runs/FD && echo step-9.ckpt > runs/FD/ckpt/LATEST && touch -d @1600000000 runs/FD/ckpt/*.ckpt && "
                               "cp -a runs/FD runs/FE && rm runs/FE/ckpt/step-5.ckpt runs/FE/ckpt/step-6.ckpt", dmsh), 0);
    assert_int_equal(run(":sessions\n", out, sizeof out, err_, sizeof err_), 0);
    if (!strstr(out, "runs/FD  (latest checkpoint: step-6.ckpt, step 6)")) print_error("%s\n", out);
    assert_non_null(strstr(out, "runs/FD  (latest checkpoint: step-6.ckpt, step 6)"));
    assert_non_null(strstr(out, "runs/FE  (latest checkpoint: step-4-b1.ckpt, step 4)"));
}

#ifndef DM_DOUBLE  // (float only: the demo is a float run, and the double build is slow)
// `make demo` (README) runs configs/runs/demo.dm: the file is in the checkout (it once was not:
// a "runs/" ignore rule kept it out of every clone) and its commands run, shortened to 20 steps.
static void test_demo_script(void **s) {
    (void)s;
    char *demo = slurp("configs/runs/demo.dm");
    if (!demo) print_error("configs/runs/demo.dm is missing: make demo has nothing to run\n");
    assert_non_null(demo);
    char script[4000] = "", *line = demo;
    int trained = 0;
    while (*line) {
        size_t n = strcspn(line, "\n");
        if (!strncmp(line, ":train ", 7)) {
            strcat(script, ":train 20 log_every=10 eval_every=10 ckpt_every=10\n");
            trained = 1;
        } else {
            strncat(script, line, n);
            strcat(script, "\n");
        }
        line += n + (line[n] == '\n');
    }
    free(demo);
    assert_true(trained);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("%s\n%s\n", script, err_);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "eval step 20 depth 1 bpb "));
    assert_non_null(strstr(out, "anchors over "));
    assert_non_null(strstr(err_, "saved runs/demo/ckpt/step-20.ckpt"));
#ifdef DM_HAVE_PNG
    assert_true(file_size("runs/demo/plots/bpb.png") > 0);
#endif
}
#endif

// A :train or :stress whose first step is refused (here: activations the process cannot
// allocate, under ulimit -v) ran nothing and leaves nothing behind: the schedule horizon the
// :train chose (steps was 0) is not kept (it bound the next :train and went into the checkpoint
// -r resumes), and :stress reports no step that did not run (it said "steps=1 ... final loss 0.0000").
static void test_refused_first_step_leaves_nothing(void **s) {
    (void)s;
    char script[1000];
    snprintf(script, sizeof script, "%s:data %s\n:session hz\n:init seed=1\n:set batch=65536\n:train 5 eval_every=0\n", SMALL, corpus);
    write_file("hz.dm", script);
    assert_int_equal(sh_in_dir("(ulimit -v 3000000; timeout 60 %s --norc -b hz.dm > out.txt 2> err.txt; test $? = 1) && "
                               "grep -q 'cannot allocate the activations' err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);  // the schedule it announced is taken back, in so many words
    if (!strstr(out, "schedule: this run (steps 0..4)") || !strstr(out, "\nschedule: withdrawn (no step of this run ran)")) print_error("%s\n", out);
    assert_non_null(strstr(out, "schedule: this run (steps 0..4)"));
    assert_non_null(strstr(out, "\nschedule: withdrawn (no step of this run ran)"));
    assert_int_equal(sh_in_dir("timeout 60 %s -r runs/hz -e ':show config' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "\n  steps            0 ")) print_error("%s\n", out);
    assert_non_null(strstr(out, "\n  steps            0 "));
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:set batch=65536\n:stress lr_mult=1 steps=3\n", SMALL, corpus);
    write_file("st.dm", script);
    assert_int_equal(sh_in_dir("(ulimit -v 3000000; timeout 60 %s --norc -b st.dm > out.txt 2> err.txt; test $? = 1) && "
                               "grep -q 'cannot allocate the activations' err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    if (strstr(out, "stress lr_mult")) print_error("%s\n", out);
    assert_null(strstr(out, "stress lr_mult"));
    // a record of more steps than the memory holds: refused in one line (it ended the process)
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:stress lr_mult=1 steps=1000000000\n", SMALL, corpus);
    write_file("st.dm", script);
    assert_int_equal(sh_in_dir("(ulimit -v 3000000; timeout 60 %s --norc -b st.dm > out.txt 2> err.txt; test $? = 1) && "
                               "grep -q 'st.dm:5: error: stress: cannot allocate the record of 1000000000 steps' err.txt", dmsh), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saves_keep_what_was_there),
        cmocka_unit_test(test_resume_names_the_device),
        cmocka_unit_test(test_killed_command_is_named),
        cmocka_unit_test(test_killed_after_load_init_or_settings),
        cmocka_unit_test(test_resume_keeps_anchors),
        cmocka_unit_test(test_exit_saves_gen_counts_and_anchors),
        cmocka_unit_test(test_output_and_size_limits),
        cmocka_unit_test(test_session_moved_or_deleted),
        cmocka_unit_test(test_load_names_replaced_settings),
        cmocka_unit_test(test_load_names_a_split_not_a_change),
        cmocka_unit_test(test_load_keeps_the_replaced_state),
        cmocka_unit_test(test_latest_names_a_missing_file),
        cmocka_unit_test(test_resume_fallbacks_agree),
        cmocka_unit_test(test_refused_first_step_leaves_nothing),
#ifndef DM_DOUBLE
        cmocka_unit_test(test_demo_script),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
