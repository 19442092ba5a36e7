// test_ckpt_keep.c — ckpt_keep_after (sessions/ckpt_keep.c) on its own, in a scratch directory:
// which of a :train's checkpoints it removes, what it says, and what it says when a file it
// would remove is no longer where it was written (QA mutation, session 38 K6: that message
// swapped for the bare "No such file or directory" went unnoticed; the end-to-end tests in
// test_cli_runs cannot remove a file between two saves of one :train).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../sessions/session.h"

static char scratch[64], path[8][128];

static int in_scratch(void **s) {
    (void)s;
    snprintf(scratch, sizeof scratch, "/tmp/dmsh_keep_XXXXXX");
    if (!mkdtemp(scratch)) return 1;
    for (int i = 0; i < 8; i++) snprintf(path[i], sizeof path[i], "%s/step-%d.ckpt", scratch, 10 * (i + 1));
    return 0;
}
static int out_of_scratch(void **s) {
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    return system(cmd);
}

static void touch(const char *p) {
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}
static int exists(const char *p) { return access(p, F_OK) == 0; }

// keep=2: the third file written removes the first, and says so by its base name
static void test_keeps_the_newest(void **s) {
    (void)s;
    CkptKeep k = {.keep = 2};
    char said[512];
    for (int i = 0; i < 3; i++) touch(path[i]);
    assert_int_equal(ckpt_keep_after(&k, path[0], 1, said, sizeof said), 0);
    assert_string_equal(said, "");
    assert_int_equal(ckpt_keep_after(&k, path[1], 1, said, sizeof said), 0);
    assert_string_equal(said, "");
    assert_int_equal(ckpt_keep_after(&k, path[2], 1, said, sizeof said), 1);
    assert_string_equal(said, "ckpt_keep=2: removed step-10.ckpt");
    assert_false(exists(path[0]));
    assert_true(exists(path[1]) && exists(path[2]));
    ckpt_keep_free(&k);
    assert_int_equal(k.n, 0);
}

// a save that found the state already in a file (fresh = 0) did not write it: never removed,
// never counted against keep
static void test_not_fresh_is_never_removed(void **s) {
    (void)s;
    CkptKeep k = {.keep = 1};
    char said[512];
    for (int i = 0; i < 3; i++) touch(path[i]);
    assert_int_equal(ckpt_keep_after(&k, path[0], 0, said, sizeof said), 0);
    assert_int_equal(ckpt_keep_after(&k, path[1], 1, said, sizeof said), 0);
    assert_string_equal(said, "");
    assert_int_equal(ckpt_keep_after(&k, path[2], 1, said, sizeof said), 1);
    assert_string_equal(said, "ckpt_keep=1: removed step-20.ckpt");
    assert_true(exists(path[0]) && exists(path[2]));
    ckpt_keep_free(&k);
}

// a kept file removed by hand (or its session moved) before the next save: said as that, not as
// the bare errno text, and the next file is still kept
static void test_file_gone_before_its_removal(void **s) {
    (void)s;
    CkptKeep k = {.keep = 1};
    char said[512];
    touch(path[0]);
    touch(path[1]);
    touch(path[2]);
    assert_int_equal(ckpt_keep_after(&k, path[0], 1, said, sizeof said), 0);
    assert_int_equal(unlink(path[0]), 0);
    assert_int_equal(ckpt_keep_after(&k, path[1], 1, said, sizeof said), 0);
    assert_string_equal(said, "ckpt_keep=1: could not remove step-10.ckpt: not where it was written (the session moved, or it was removed)");
    assert_true(exists(path[1]));
    // (the path is dropped from the list: the next save removes the file after it, not it again)
    assert_int_equal(ckpt_keep_after(&k, path[2], 1, said, sizeof said), 1);
    assert_string_equal(said, "ckpt_keep=1: removed step-20.ckpt");
    assert_true(exists(path[2]));
    ckpt_keep_free(&k);
}

// keep=0 (the default): every checkpoint stays, nothing is said
static void test_keep_zero_keeps_all(void **s) {
    (void)s;
    CkptKeep k = {.keep = 0};
    char said[512] = "stale";
    for (int i = 0; i < 4; i++) {
        touch(path[i]);
        assert_int_equal(ckpt_keep_after(&k, path[i], 1, said, sizeof said), 0);
        assert_string_equal(said, "");
    }
    for (int i = 0; i < 4; i++) assert_true(exists(path[i]));
    ckpt_keep_free(&k);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keeps_the_newest, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_not_fresh_is_never_removed, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_file_gone_before_its_removal, in_scratch, out_of_scratch),
        cmocka_unit_test_setup_teardown(test_keep_zero_keeps_all, in_scratch, out_of_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
