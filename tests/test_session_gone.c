// test_session_gone.c — a session directory deleted in the middle of a save (an `rm -rf` of the
// run, or a cleanup job): the save says the directory is gone, as a save that starts after the
// deletion does, not the error the deletion caused below it (a rename's ENOENT), and never
// "PATH was written" of a checkpoint that went with the directory. This program links with
// --wrap=fsync and --wrap=session_transcript_ckpt (Makefile) to delete the directory at the two
// points of a save where it can go: before the checkpoint's rename, and between the checkpoint
// and its LATEST.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "step_fixture.h"
#include "../sessions/session.h"

static char rm_at_rename[300], rm_at_transcript[300];
static int removed;
static void rm_rf(char *dir) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    dir[0] = 0;
    removed++;
}
int __real_fsync(int fd);
int __wrap_fsync(int fd) {
    // (the checkpoint's temp file only, ckpt/step-N.ckpt.PID.tmp: the directory goes after its
    // data is synced, before it is put in place)
    char l[64], p[600];
    snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(l, p, sizeof p - 1);
    p[n > 0 ? n : 0] = 0;
    int rc = __real_fsync(fd);
    if (rm_at_rename[0] && strstr(p, "/ckpt/step-") && strstr(p, ".tmp")) rm_rf(rm_at_rename);
    return rc;
}
void __real_session_transcript_ckpt(Engine *e, const char *path, int written);
void __wrap_session_transcript_ckpt(Engine *e, const char *path, int written) {
    if (rm_at_transcript[0]) rm_rf(rm_at_transcript);
    __real_session_transcript_ckpt(e, path, written);
}

// a session of 2 steps in a fresh temp directory; the session is DIR/run
static void open_session(Engine *e, char *dir, char *sd, size_t n) {
    make_engine(e, backend_cpu(), tiny_config());
    strcpy(dir, "/tmp/dmsh_gone_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sd, n, "%s/run", dir);
    dm_err err = {0};
    assert_int_equal(session_open(e, sd, &err), 0);
    MetricRow row;
    for (int i = 0; i < 2; i++) assert_int_equal(engine_step(e, &row, &err), 0);
}

static void check_gone_message(const dm_err *err, const char *sd) {
    char want[600];
    snprintf(want, sizeof want, "the session directory %s was deleted while this run held it: nothing is written there "
             "(:save PATH keeps this state, :session NAME opens another session)", sd);
    if (strcmp(err->msg, want)) print_error("%s\n", err->msg);
    assert_string_equal(err->msg, want);
}

// deleted before the checkpoint's rename: said as gone (it was "cannot save checkpoint: rename
// .../step-2.ckpt.PID.tmp: No such file or directory")
static void test_deleted_before_the_rename(void **s) {
    (void)s;
    Engine e;
    char dir[64], sd[300], path[1400], note[2000] = "";
    open_session(&e, dir, sd, sizeof sd);
    snprintf(rm_at_rename, sizeof rm_at_rename, "%s", sd);
    removed = 0;
    dm_err err = {0};
    assert_int_equal(session_save(&e, path, sizeof path, note, sizeof note, &err), 1);
    assert_int_equal(removed, 1);  // (the deletion did happen in the window)
    check_gone_message(&err, sd);
    struct stat st;
    assert_int_equal(stat(sd, &st), -1);  // nothing made again under the name
    assert_true(engine_unsaved(&e));       // the state is not said saved anywhere
    engine_free(&e);
    rmdir(dir);
}

// deleted between the checkpoint and its LATEST: the checkpoint went with the directory, so the
// save fails saying so (it said "DIR/run/ckpt/step-2.ckpt was written, but ... LATEST could not be
// written (No such file or directory)", naming a file that is not there)
static void test_deleted_before_latest(void **s) {
    (void)s;
    Engine e;
    char dir[64], sd[300], path[1400], note[2000] = "";
    open_session(&e, dir, sd, sizeof sd);
    snprintf(rm_at_transcript, sizeof rm_at_transcript, "%s", sd);
    removed = 0;
    dm_err err = {0};
    assert_int_equal(session_save(&e, path, sizeof path, note, sizeof note, &err), 1);
    assert_int_equal(removed, 1);
    check_gone_message(&err, sd);
    assert_null(strstr(err.msg, "was written"));
    struct stat st;
    assert_int_equal(stat(sd, &st), -1);
    // and the exit's save after it says the same, and makes nothing again under the name
    char p2[1400];
    dm_err e2 = {0};
    assert_int_equal(session_autosave(&e, p2, sizeof p2, &e2), 1);
    check_gone_message(&e2, sd);
    assert_int_equal(stat(sd, &st), -1);
    engine_free(&e);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deleted_before_the_rename),
        cmocka_unit_test(test_deleted_before_latest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
