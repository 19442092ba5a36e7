// test_run_files.c — what a run writes and reads on disk, on the CPU: metrics.tsv when it cannot
// be written (said once, the rows it missed written later in order, no half row), the
// transcript's mark of a running command, the emulated device's rows marked in metrics.tsv and
// checkpoints, a corpus rewritten in place under a run, and a session directory renamed between a
// checkpoint and its LATEST, a file system without flock, a lock file removed under a run, and
// the locks a session switch lets go of.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "step_fixture.h"
#include "../sessions/session.h"
#include "../sessions/same_state.h"
#include "../engine/ckpt.h"

// The tests that name their files relative (test_step_tsv/...), and some that need a directory, run in a scratch directory of
// their own, removed after the test whether it passed or not: run in the checkout, one failure
// left test_step_tsv/metrics.tsv behind and every later run failed at the wrong place (QA,
// session 36). (The corpus is an absolute path: step_fixture.h.)
static char scratch[64], home_dir[1024];
static int in_scratch(void **s) {
    (void)s;
    snprintf(scratch, sizeof scratch, "/tmp/dmsh_runfiles_XXXXXX");
    if (!getcwd(home_dir, sizeof home_dir) || !mkdtemp(scratch) || chdir(scratch)) return 1;
    return 0;
}
static int out_of_scratch(void **s) {
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    return chdir(home_dir) || system(cmd);
}

// metrics.tsv that cannot be written: counted and said once (the rows stay in memory), never
// silent; the step itself goes on
static void test_tsv_failure_is_loud(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    assert_int_equal(mkdir("test_step_tsv", 0755) == 0 || errno == EEXIST, 1);
    assert_int_equal(mkdir("test_step_tsv/metrics.tsv", 0755) == 0 || errno == EEXIST, 1);  // a directory: fopen fails
    snprintf(e.session_dir, sizeof e.session_dir, "test_step_tsv");
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(e.tsv_failed, 3);
    assert_int_equal(e.nrows, 3);
    const char *n = engine_notice(&e);
    assert_non_null(n);
    assert_non_null(strstr(n, "cannot write test_step_tsv/metrics.tsv"));
    assert_null(engine_notice(&e));  // once
    // writable again: the rows it missed go in with the next one, in order (session 22: they
    // were lost for good)
    rmdir("test_step_tsv/metrics.tsv");
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(e.tsv_failed, 0);
    n = engine_notice(&e);
    assert_non_null(n);
    assert_non_null(strstr(n, "the 3 rows it had missed are in it now"));
    size_t len = 0;
    char *t = read_whole_file("test_step_tsv/metrics.tsv", &len);
    assert_non_null(t);
    int lines = 0;
    for (size_t k = 0; k < len; k++) lines += t[k] == '\n';
    assert_int_equal(lines, 5);  // the header and steps 0..3
    for (int k = 0; k < 4; k++) {
        char want[32];
        snprintf(want, sizeof want, "\ntrain\t%d\t", k);
        assert_non_null(strstr(t, want));
    }
    free(t);
    // a write cut short (a file-size limit here, a full disk in life) leaves no half row: the file
    // is cut back to its last whole row, and the row goes in later with the rest
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    struct stat st;
    assert_int_equal(stat("test_step_tsv/metrics.tsv", &st), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size + 20;  // room for part of one row
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(e.tsv_failed, 2);
    struct stat st2;
    assert_int_equal(stat("test_step_tsv/metrics.tsv", &st2), 0);
    assert_int_equal(st2.st_size, st.st_size);  // not a byte of a half row
    engine_notice(&e);
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(e.tsv_failed, 0);
    t = read_whole_file("test_step_tsv/metrics.tsv", &len);
    lines = 0;
    for (size_t k = 0; k < len; k++) lines += t[k] == '\n';
    assert_int_equal(lines, 8);  // steps 0..6, each once
    assert_non_null(strstr(t, "\ntrain\t6\t"));
    free(t);
    unlink("test_step_tsv/metrics.tsv");
    rmdir("test_step_tsv");
    e.session_dir[0] = 0;
    engine_free(&e);
}


// A command's transcript mark (sessions/session.h): taken out when the command returns, so the
// transcript holds only what ran; when the command wrote lines of its own after the mark, the
// mark is blanked in place (still a comment, the same length) and those lines stay as they were
static void test_transcript_mark(void **s) {
    (void)s;
    Engine e;
    memset(&e, 0, sizeof e);
    assert_int_equal(mkdir("test_step_mark", 0755) == 0 || errno == EEXIST, 1);
    unlink("test_step_mark/transcript.dm");
    snprintf(e.session_dir, sizeof e.session_dir, "test_step_mark");
    session_transcript(&e, ":set seed=2");
    TranscriptMark m;
    session_transcript_begin(&e, "# started, never finished: :step 3", ":step", 0, ":step 3", &m);
    char *t = read_whole_file("test_step_mark/transcript.dm", NULL);
    assert_non_null(strstr(t, "\n# started, never finished: :step 3\n"));  // a kill now leaves it
    free(t);
    // its lines take the mark's place in one write (session 28): until then the mark stays, so
    // a process killed at any moment leaves the mark or the line, never neither
    session_transcript_finishing(&m);
    session_transcript(&e, ":step 3");
    session_transcript_ckpt_after(&e, &m);
    t = read_whole_file("test_step_mark/transcript.dm", NULL);
    assert_non_null(strstr(t, "\n# started, never finished: :step 3\n"));
    assert_null(strstr(t, "\n:step 3\n"));
    free(t);
    session_transcript_end(&m);
    t = read_whole_file("test_step_mark/transcript.dm", NULL);
    assert_null(strstr(t, "started"));
    assert_non_null(strstr(t, "\n:set seed=2\n:step 3\n"));
    assert_int_equal(t[strlen(t) - 1], '\n');
    assert_null(strstr(t, "\n:step 3\n#"));  // (the rest of the mark truncated)
    free(t);
    // lines longer than the mark: they cover it and go on
    session_transcript_begin(&e, "# started: :a", ":a", 0, ":a", &m);
    session_transcript_finishing(&m);
    session_transcript(&e, ":a with a line longer than its mark");
    session_transcript(&e, "# and a second line");
    session_transcript_end(&m);
    session_transcript_ckpt_after(&e, &m);
    t = read_whole_file("test_step_mark/transcript.dm", NULL);
    if (!strstr(t, "\n:step 3\n:a with a line longer than its mark\n# and a second line\n")) print_error("%s\n", t);
    assert_non_null(strstr(t, "\n:step 3\n:a with a line longer than its mark\n# and a second line\n"));
    assert_null(strstr(t, "started"));
    free(t);
    assert_int_equal(truncate("test_step_mark/transcript.dm", 0), 0);
    session_transcript(&e, ":set seed=2");
    session_transcript(&e, ":step 3");
    // lines written during the command: the mark becomes a blank comment, they stay
    session_transcript_begin(&e, "# started, never finished: :x", ":x", 0, ":x", &m);
    session_transcript(&e, "# a line of its own");
    session_transcript_finishing(&m);
    session_transcript_end(&m);
    session_transcript_ckpt_after(&e, &m);
    t = read_whole_file("test_step_mark/transcript.dm", NULL);
    assert_null(strstr(t, "started"));
    assert_non_null(strstr(t, "\n:step 3\n# (finished)                 \n# a line of its own\n"));
    free(t);
    // no session: no mark, nothing written
    e.session_dir[0] = 0;
    session_transcript_begin(&e, "# started, never finished: :y", ":y", 0, ":y", &m);
    assert_int_equal(m.len, 0);
    session_transcript_end(&m);
    session_transcript_ckpt_after(&e, &m);
    unlink("test_step_mark/transcript.dm");
    unlink("test_step_mark/config.dm");
    rmdir("test_step_mark");
}

// A command's held lines that a full disk refused (a file-size limit here) are counted as the
// lines they are, not as one: the transcript's next line says how many could not be written
// (QA, session 36: a count of 1 for a held multi-line command passed test_cli_disk)
static void test_lost_held_lines_counted(void **s) {
    (void)s;
    Engine e;
    memset(&e, 0, sizeof e);
    assert_int_equal(mkdir("test_step_lost", 0755), 0);
    snprintf(e.session_dir, sizeof e.session_dir, "test_step_lost");
    session_transcript(&e, ":set seed=2");
    TranscriptMark m;
    session_transcript_begin(&e, "# started: :x", ":x", 0, ":x", &m);
    assert_true(m.len > 0);
    session_transcript_finishing(&m);
    session_transcript(&e, ":x with a line longer than its mark");
    session_transcript(&e, "# a second line");
    session_transcript(&e, "# and a third");
    struct stat st;
    assert_int_equal(stat("test_step_lost/transcript.dm", &st), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size;  // the held lines, longer than the mark, do not fit
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    session_transcript_end(&m);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    session_transcript_ckpt_after(&e, &m);
    session_transcript(&e, ":step 1");
    char *t = read_whole_file("test_step_lost/transcript.dm", NULL);
    assert_non_null(t);
    if (!strstr(t, "\n:set seed=2\n# 3 lines could not be written here (")) print_error("%s\n", t);
    assert_non_null(strstr(t, "\n:set seed=2\n# 3 lines could not be written here ("));
    assert_non_null(strstr(t, "the lines below do not rebuild the session's state\n:step 1\n"));
    assert_null(strstr(t, "second line"));
    free(t);
    e.session_dir[0] = 0;
}

// Steps timed on the emulated device (tests/cuemu: the CUDA code on the CPU) are marked, so no
// log line or metrics.tsv row passes the CPU's times off as a GPU's (they carried no word of it):
// the row engine_step returns, its metrics.tsv line (a last column, timing), and the row a
// checkpoint brings back. The CPU engine stands in for cuemu (engine_set_device sets the mark
// from the device's name; tests/cuemu/dmsh_device.sh checks that on cuemu itself).
static void test_emulated_rows_are_marked(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    assert_int_equal(e.emulated, 0);  // the CPU is no emulation
    assert_int_equal(mkdir("test_step_emu", 0755) == 0 || errno == EEXIST, 1);
    unlink("test_step_emu/metrics.tsv");
    snprintf(e.session_dir, sizeof e.session_dir, "test_step_emu");
    dm_err err = {0};
    MetricRow row;
    e.emulated = 1;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(engine_step(&e, &row, &err), 0);
        assert_int_equal(row.emulated, 1);
    }
    e.emulated = 0;  // moved to a real device
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(row.emulated, 0);
    EvalResult ev;
    assert_int_equal(engine_eval(&e, 2, &ev, &err), 0);
    char *t = NULL;
    {
        FILE *f = fopen("test_step_emu/metrics.tsv", "r");
        assert_non_null(f);
        t = calloc(1, 1 << 16);
        t[fread(t, 1, (1 << 16) - 1, f)] = 0;
        fclose(f);
    }
    assert_non_null(strstr(t, "\teval_set\ttiming\tarms_off\n"));
    int lines = 0;
    for (char *l = t; *l; lines++) {  // every line 15 fields: the columns before timing where they were
        char *end = strchr(l, '\n');
        assert_non_null(end);
        int tabs = 0;
        for (char *c = l; c < end; c++) tabs += *c == '\t';
        assert_int_equal(tabs, 14);
        if (lines == 1 || lines == 2) assert_true(!strncmp(end - 10, "\temulated\t", 10));
        if (lines == 3) assert_true(!strncmp(l, "train\t2\t", 8) && end[-1] == '\t');
        if (lines == 4) assert_true(!strncmp(l, "eval\t3\t", 7) && end[-1] == '\t');
        l = end + 1;
    }
    assert_int_equal(lines, 5);
    free(t);
    // a checkpoint keeps the mark (the rows are stored raw: it is their depth slot, 0 in older
    // files), and the eval row's depth is still its depth
    const char *ck = "test_step_emu/e.ckpt";
    assert_int_equal(engine_save(&e, ck, &err), 0);
    Engine b;
    make_engine(&b, backend_cpu(), tiny_config());
    assert_int_equal(engine_load(&b, ck, &err), 0);
    assert_int_equal(b.nrows, 4);
    assert_int_equal(b.rows[0].emulated, 1);
    assert_int_equal(b.rows[1].emulated, 1);
    assert_int_equal(b.rows[2].emulated, 0);
    assert_int_equal(b.rows[3].kind, 1);
    assert_int_equal(b.rows[3].depth, 2);
    engine_free(&b);
    unlink(ck);
    unlink("test_step_emu/metrics.tsv");
    rmdir("test_step_emu");
    e.session_dir[0] = 0;
    engine_free(&e);
}

// Found by a QA pass (session 22): a corpus rewritten in place with the same size (dd
// conv=notrunc) fed the run other bytes without a word (only a shrink was noticed). An eval or a
// save compares the sampled bytes with the fingerprint taken at :data, and says so once.
static void test_corpus_rewritten_in_place(void **s) {
    (void)s;
    char path[64];
    snprintf(path, sizeof path, "/tmp/dm_step_drift_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = 0;
    char *text = read_whole_file(corpus, &len);
    assert_true(write(fd, text, len) == (ssize_t)len);
    close(fd);
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    assert_int_equal(engine_open_data(&e, path, NULL, &err), 0);
    engine_corpus_check(&e);
    assert_null(engine_notice(&e));  // unchanged: nothing to say
    FILE *f = fopen(path, "r+");
    for (size_t k = 0; k < len; k += 97) text[k] = (char)('A' + k % 26);
    fwrite(text, 1, len, f);  // the same size, other bytes
    fclose(f);
    EvalResult r;
    assert_int_equal(engine_eval(&e, 0, &r, &err), 0);
    const char *n = engine_notice(&e);
    assert_non_null(n);
    assert_non_null(strstr(n, "changed on disk since :data opened it"));
    assert_true(e.data_fp == data_fingerprint(&e.data, &err));  // a checkpoint from here records the new bytes
    assert_int_equal(engine_eval(&e, 0, &r, &err), 0);
    assert_null(engine_notice(&e));  // once
    engine_free(&e);
    free(text);
    unlink(path);
}

// A session directory renamed between a checkpoint's write and LATEST's (a CI run hit the window:
// "LATEST could not be written (No such file or directory)"): LATEST goes where the directory is
// now and names the checkpoint there. The rename happens inside session_transcript_ckpt, which
// session_save calls between the two (this program links with --wrap for it: Makefile).
static char mv_from[300], mv_to[300];
void __real_session_transcript_ckpt(Engine *e, const char *path, int written);
void __wrap_session_transcript_ckpt(Engine *e, const char *path, int written) {
    if (mv_from[0]) {
        assert_int_equal(rename(mv_from, mv_to), 0);
        mv_from[0] = 0;
    }
    __real_session_transcript_ckpt(e, path, written);
}

static void test_renamed_between_ckpt_and_latest(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    char dir[] = "/tmp/dmsh_mv_XXXXXX", sd[300], want[400];
    assert_non_null(mkdtemp(dir));
    snprintf(sd, sizeof sd, "%s/run", dir);
    dm_err err = {0};
    assert_int_equal(session_open(&e, sd, &err), 0);
    MetricRow row;
    for (int i = 0; i < 2; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    snprintf(mv_from, sizeof mv_from, "%s", sd);
    snprintf(mv_to, sizeof mv_to, "%s/run-old", dir);
    char path[1400], note[2000] = "";
    int rc = session_save(&e, path, sizeof path, note, sizeof note, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(mv_from[0], 0);  // (the rename did happen in the window)
    snprintf(want, sizeof want, "%s/run-old/ckpt/step-2.ckpt", dir);
    assert_string_equal(path, want);
    snprintf(want, sizeof want, "%s/run-old/ckpt/LATEST", dir);
    char *t = read_whole_file(want, NULL);
    assert_non_null(t);
    assert_string_equal(t, "step-2.ckpt\n");
    free(t);
    engine_free(&e);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

// A file system without flock (ENOSYS, ENOLCK): the session opens, unguarded and said, and is not
// called "in use by another dmsh" (it was, with the pid of a long-gone holder: QA, session 34).
// Only EWOULDBLOCK is another holder. (This program links with --wrap=flock: Makefile.)
static int flock_errno;
int __real_flock(int fd, int op);
int __wrap_flock(int fd, int op) {
    if (flock_errno) {
        errno = flock_errno;
        return -1;
    }
    return __real_flock(fd, op);
}

static void test_no_flock(void **s) {
    (void)s;
    char dir[] = "/tmp/dmsh_nolock_XXXXXX", sd[300], p[400];
    assert_non_null(mkdtemp(dir));
    int errs[] = {EWOULDBLOCK, ENOSYS, ENOLCK};
    for (int i = 0; i < 3; i++) {
        snprintf(sd, sizeof sd, "%s/run%d", dir, i);  // (one each: an opened one stays held)
        assert_int_equal(mkdir(sd, 0755), 0);
        snprintf(p, sizeof p, "%s/.lock", sd);
        FILE *f = fopen(p, "w");
        fputs("999999\n", f);  // (a holder long gone)
        fclose(f);
        flock_errno = errs[i];
        dm_err err = {0};
        int busy = session_in_use(sd, &err);
        assert_int_equal(busy, errs[i] == EWOULDBLOCK);
        Engine e;
        make_engine(&e, backend_cpu(), tiny_config());
        memset(&err, 0, sizeof err);
        int rc = session_open(&e, sd, &err);
        assert_int_equal(rc, errs[i] == EWOULDBLOCK);
        if (rc) assert_non_null(strstr(err.msg, "in use by another dmsh (pid 999999)"));
        engine_free(&e);
    }
    flock_errno = 0;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

// The lock file removed under a run: a second dmsh could take the session and both wrote it
// (QA, session 34). The next checkpoint makes the lock again, or says that another dmsh holds it.
static void test_lock_removed(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    char dir[] = "/tmp/dmsh_rmlock_XXXXXX", sd[300], p[400], path[1400], note[2000];
    assert_non_null(mkdtemp(dir));
    snprintf(sd, sizeof sd, "%s/run", dir);
    snprintf(p, sizeof p, "%s/.lock", sd);
    dm_err err = {0};
    assert_int_equal(session_open(&e, sd, &err), 0);
    MetricRow row;
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(session_in_use(sd, &err), 0);  // (the gap: anyone could take it)
    assert_int_equal(session_save(&e, path, sizeof path, note, sizeof note, &err), 0);
    if (!strstr(note, "/run/.lock was removed under this run: made again")) print_error("%s\n", note);
    assert_non_null(strstr(note, "/run/.lock was removed under this run: made again"));
    int fd = open(p, O_RDONLY);  // taken again: another open file cannot lock it
    assert_true(fd >= 0);
    assert_int_not_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    close(fd);
    // removed, and another dmsh (here another open file) took the new one first: said
    assert_int_equal(unlink(p), 0);
    fd = open(p, O_RDWR | O_CREAT, 0644);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(write(fd, "4242\n", 5), 5);
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(session_save(&e, path, sizeof path, note, sizeof note, &err), 0);
    if (!strstr(note, "another dmsh (pid 4242) has opened this session since")) print_error("%s\n", note);
    assert_non_null(strstr(note, "another dmsh (pid 4242) has opened this session since: both write its checkpoints and metrics now"));
    close(fd);
    engine_free(&e);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

// whether another open file (a second dmsh) can take DIR/.lock now
static int lock_free(const char *sd) {
    char p[400];
    snprintf(p, sizeof p, "%s/.lock", sd);
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    int ok = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);  // (and its lock with it)
    return ok;
}

// A :session switch lets go of the session it leaves, and a switch that failed lets go of the
// one it tried: a second dmsh can open either (mutation testing, QA session 39: either lock kept
// held passed every test, and a second dmsh was told a session left long ago was in use)
static void test_switch_drops_locks(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    char dir[] = "/tmp/dmsh_switch_XXXXXX", a[300], b[300], bad[300], p[400];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    dm_err err = {0};
    assert_int_equal(session_open(&e, a, &err), 0);
    assert_false(lock_free(a));
    assert_int_equal(session_open(&e, b, &err), 0);
    if (!lock_free(a)) print_error("%s is still locked after the switch to %s\n", a, b);
    assert_true(lock_free(a));
    assert_false(lock_free(b));
    // a session the switch cannot use (its ckpt/ is a file): refused, its lock dropped, b's kept
    assert_int_equal(mkdir(bad, 0755), 0);
    snprintf(p, sizeof p, "%s/ckpt", bad);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    memset(&err, 0, sizeof err);
    assert_int_not_equal(session_open(&e, bad, &err), 0);
    if (!lock_free(bad)) print_error("%s is still locked after its switch failed (%s)\n", bad, err.msg);
    assert_true(lock_free(bad));
    assert_false(lock_free(b));
    assert_true(lock_free(a));
    engine_free(&e);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

// An eval of every depth adds one row per depth, each with its own depth's bpb: the rows are
// metrics.tsv's, :plot's and the checkpoints' (QA, session 36: every row carrying the deepest
// depth's bpb passed every test)
static void test_eval_rows_per_depth(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 2; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    EvalResult r;
    int n0 = e.nrows, L = e.cfg.L;
    assert_int_equal(engine_eval(&e, 0, &r, &err), 0);
    assert_int_equal(r.depth_lo, 1);
    assert_int_equal(r.depth_hi, L);
    assert_int_equal(e.nrows, n0 + L);
    for (int d = 1; d <= L; d++) {
        const MetricRow *ev = &e.rows[n0 + d - 1];
        assert_int_equal(ev->kind, 1);
        assert_int_equal(ev->depth, d);
        assert_int_equal(ev->step, 2);
        if (ev->bpb != r.bpb[d - 1]) print_error("depth %d: row bpb %.6f, eval said %.6f\n", d, ev->bpb, r.bpb[d - 1]);
        assert_true(ev->bpb == r.bpb[d - 1]);
        if (d > 1) assert_true(r.bpb[d - 1] != r.bpb[d - 2]);  // (depths that differ: a mix-up shows)
    }
    engine_free(&e);
}

// config.dm.<pid>.tmp files a killed process left are removed when the session opens; names
// that are not a pid's temp file stay (QA, session 36: the removal was untested)
static void test_stale_config_tmps(void **s) {
    (void)s;
    char *dir = scratch, sd[300], p[400];
    snprintf(sd, sizeof sd, "%s/run", dir);
    assert_int_equal(mkdir(sd, 0755), 0);
    const char *names[] = {"config.dm.4242.tmp", "config.dm.tmp", "config.dm.abc.tmp", "config.dm.42x.tmp"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", sd, names[i]);
        FILE *f = fopen(p, "w");
        fputs(":set d=8\n", f);
        fclose(f);
    }
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    assert_int_equal(session_open(&e, sd, &err), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", sd, names[i]);
        if ((access(p, F_OK) == 0) != (i > 0)) print_error("%s: %s\n", names[i], i ? "removed" : "still there");
        assert_int_equal(access(p, F_OK) == 0, i > 0);
    }
    engine_free(&e);
}

// LATEST's temp file (and metrics.tsv's) is synced before the rename that puts it in place
// (session.c: after a power loss LATEST is the old name or the new one, never empty). No functional test sees a missing
// fsync (QA, session 36): this program links with --wrap=fsync,rename and records them.
#include "sync_recorder.h"

static void test_latest_synced_before_rename(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    char *dir = scratch, sd[300], want[700], path[1400], note[2000] = "";
    snprintf(sd, sizeof sd, "%s/run", dir);
    dm_err err = {0};
    assert_int_equal(session_open(&e, sd, &err), 0);
    MetricRow row;
    assert_int_equal(engine_step(&e, &row, &err), 0);
    rec_on = 1;
    nrec = 0;
    int rc = session_save(&e, path, sizeof path, note, sizeof note, &err);
    rec_on = 0;
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    int f = -1, r = -1;
    snprintf(want, sizeof want, "fsync %s/ckpt/LATEST.tmp", sd);
    f = rec_find(want);
    snprintf(want, sizeof want, "rename %s/ckpt/LATEST.tmp %s/ckpt/LATEST", sd, sd);
    r = rec_find(want);
    if (f < 0 || r < 0 || f > r) for (int i = 0; i < nrec; i++) print_error("call %d: %s\n", i, rec[i]);
    assert_true(f >= 0 && r >= 0);
    assert_true(f < r);
    // and metrics.tsv's rewrite (a :load, an :init, a -r) the same way
    rec_on = 1;
    nrec = 0;
    assert_int_equal(session_rewrite_metrics(&e, &err), 0);
    rec_on = 0;
    f = r = -1;
    snprintf(want, sizeof want, "fsync %s/metrics.tsv.tmp", sd);
    f = rec_find(want);
    snprintf(want, sizeof want, "rename %s/metrics.tsv.tmp %s/metrics.tsv", sd, sd);
    r = rec_find(want);
    if (f < 0 || r < 0 || f > r) for (int i = 0; i < nrec; i++) print_error("call %d: %s\n", i, rec[i]);
    assert_true(f >= 0 && r >= 0 && f < r);
    engine_free(&e);
}

// A checkpoint older than its section data.fingerprint.splits (removed here), trained with eval=,
// whose eval file changed at the same size: the resume cannot tell which file changed, and says so
// (it blamed the training corpus and said the batches differ: review, session 34)
static void test_old_ckpt_eval_changed(void **s) {
    (void)s;
    char dir[] = "/tmp/dmsh_oldfp_XXXXXX", ev[300], ck[300];
    assert_non_null(mkdtemp(dir));
    snprintf(ev, sizeof ev, "%s/ev.txt", dir);
    snprintf(ck, sizeof ck, "%s/a.ckpt", dir);
    FILE *f = fopen(ev, "w");
    for (int i = 0; i < 3000; i++) fputc("the dormouse sleeps "[i % 20], f);
    fclose(f);
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    assert_int_equal(engine_open_data(&e, corpus, ev, &err), 0);
    MetricRow row;
    for (int i = 0; i < 2; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(engine_save(&e, ck, &err), 0);
    engine_free(&e);
    CkptFile cf;
    assert_int_equal(ckpt_read(ck, &cf, &err), 0);
    CkptSection keep[64];
    int n = 0;
    for (int i = 0; i < cf.nsec && n < 64; i++)
        if (strcmp(cf.sec[i].name, "data.fingerprint.splits")) keep[n++] = cf.sec[i];
    assert_int_equal(n, cf.nsec - 1);
    assert_int_equal(ckpt_write(ck, keep, n, &err), 0);
    ckpt_close(&cf);
    f = fopen(ev, "r+");  // one byte of the eval file, its size the same
    fseek(f, 100, SEEK_SET);
    fputc('X', f);
    fclose(f);
    Engine e2;
    engine_init(&e2);
    e2.be = backend_cpu();
    assert_int_equal(engine_load(&e2, ck, &err), 0);
    const char *note = engine_notice(&e2);
    if (!note || !strstr(note, "cannot tell which")) print_error("%s\n", note ? note : "(no note)");
    assert_non_null(note);
    assert_non_null(strstr(note, "or the eval file"));
    assert_non_null(strstr(note, "(an older checkpoint: it cannot tell which; their sizes are the same)"));
    engine_free(&e2);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

// The lines that retake a cut command's steps (QA, session 35): :check determinism cut in its
// second pass keeps its steps (as :step k), and a word with capitals (lr_mult=2E0) is a plain word.
static void test_steps_line(void **s) {
    (void)s;
    const char *det[] = {"determinism", "steps=300"}, *stress[] = {"lr_mult=2E0", "steps=3000"}, *grad[] = {"grad"};
    char *t = session_steps_line(":check", 2, det, 36);
    assert_non_null(t);
    assert_string_equal(t, ":step 36");
    free(t);
    assert_null(session_steps_line(":check", 2, det, 0));  // (a first-pass cut: back where it started)
    assert_null(session_steps_line(":check", 1, grad, 3));
    t = session_steps_line(":stress", 2, stress, 789);
    assert_non_null(t);
    assert_string_equal(t, ":stress lr_mult=2E0 steps=789");
    free(t);
    const char *quoted[] = {"lr_mult=\"2\"", "steps=3000"};
    assert_null(session_steps_line(":stress", 2, quoted, 789));
    // a :train typed with stop_after= and cut short: the new count replaces the old word (a
    // second stop_after= is refused as "given twice", so the transcript no longer replayed: QA
    // mutation, session 38), wherever the word stood
    const char *stop[] = {"20", "ckpt_every=2", "stop_after=16"}, *stop0[] = {"stop_after=13", "20", "eval_every=5"};
    t = session_steps_line(":train", 3, stop, 6);
    assert_non_null(t);
    assert_string_equal(t, ":train 20 ckpt_every=2 stop_after=6");
    free(t);
    t = session_steps_line(":train", 3, stop0, 11);
    assert_non_null(t);
    assert_string_equal(t, ":train 20 eval_every=5 stop_after=11");
    free(t);
}

// Two saves of one state whose rows differ in their step times only are the same state, by the
// sectioned comparison and by the block-wise one a checkpoint past 512 MiB takes (QA mutation,
// session 36: the block path compared the times too, so a redone step at a large preset got a
// branch file of the same state); a changed loss or weight is another state by both
static void test_same_state_both_paths(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    for (int i = 0; i < 1200; i++) {  // rows over several 64 KiB blocks: the skipped range crosses block edges
        MetricRow x = row;
        x.step = 3 + i;
        x.loss = 5 + 1e-3 * i;
        engine_add_row(&e, &x);
    }
    assert_int_equal(engine_save(&e, "a.ckpt", &err), 0);
    e.rows[1].ms += 7;
    e.rows[2].tok_s *= 2;
    for (int i = 400; i < e.nrows; i += 431) e.rows[i].ms += i;  // (431 rows: one block's worth)
    assert_int_equal(engine_save(&e, "b.ckpt", &err), 0);
    assert_true(session_same_state("a.ckpt", "b.ckpt"));
    assert_true(session_same_state_blocks("a.ckpt", "b.ckpt"));
    e.rows[1].loss += 1e-3;
    assert_int_equal(engine_save(&e, "c.ckpt", &err), 0);
    assert_false(session_same_state("a.ckpt", "c.ckpt"));
    assert_false(session_same_state_blocks("a.ckpt", "c.ckpt"));
    e.rows[1].loss -= 1e-3;
    e.rows[e.nrows - 1].loss += 1e-3;  // the last row, blocks after the first
    assert_int_equal(engine_save(&e, "c.ckpt", &err), 0);
    assert_false(session_same_state_blocks("a.ckpt", "c.ckpt"));
    e.rows[e.nrows - 1].loss -= 1e-3;
    real w;
    e.model.be->download(&w, e.model.params + 3, sizeof w);
    w += (real)0.5;
    e.model.be->upload(e.model.params + 3, &w, sizeof w);
    assert_int_equal(engine_save(&e, "d.ckpt", &err), 0);
    assert_false(session_same_state("a.ckpt", "d.ckpt"));
    assert_false(session_same_state_blocks("a.ckpt", "d.ckpt"));
    assert_false(session_same_state_blocks("a.ckpt", "nosuch.ckpt"));
    engine_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_line),
        cmocka_unit_test_setup_teardown(test_tsv_failure_is_loud, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_transcript_mark, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_lost_held_lines_counted, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_emulated_rows_are_marked, in_scratch, out_of_scratch),
        cmocka_unit_test(test_corpus_rewritten_in_place),
        cmocka_unit_test(test_renamed_between_ckpt_and_latest),
        cmocka_unit_test(test_no_flock),
        cmocka_unit_test(test_lock_removed),
        cmocka_unit_test(test_switch_drops_locks),
        cmocka_unit_test(test_old_ckpt_eval_changed),
        cmocka_unit_test(test_eval_rows_per_depth),
        cmocka_unit_test_setup_teardown(test_stale_config_tmps, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_latest_synced_before_rename, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_same_state_both_paths, in_scratch, out_of_scratch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
