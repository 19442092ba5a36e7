// test_save_nomem.c — a host short of memory for a checkpoint's copy of the state, or for the
// snapshot :bench and :check determinism restore from: the command's error, the model as it was.
// Both used mallocCheck, which ends the process: an exit save, a periodic checkpoint or a :bench
// under `ulimit -v` took the trained state with it (QA, session 41). This program links with
// --wrap=malloc (Makefile): an allocation of exactly fail_size bytes fails while fail_on is set.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "step_fixture.h"
#include "../engine/snapshot.h"

static size_t fail_size;
static int fail_on, failed;
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n) {
    if (fail_on && n == fail_size) { failed++; return NULL; }
    return __real_malloc(n);
}

static void test_save_without_memory(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 2; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    char path[64];
    snprintf(path, sizeof path, "/tmp/dmsh_nomem_%d.ckpt", (int)getpid());
    unlink(path);
    fail_size = sizeof(real) * e.model.n_params;
    fail_on = 1;
    failed = 0;
    int rc = engine_save(&e, path, &err);
    fail_on = 0;
    assert_int_equal(rc, 1);
    assert_true(failed >= 1);
    char want[300];
    snprintf(want, sizeof want, "%s: cannot save checkpoint: no host memory for its copy of the state (", path);
    if (strncmp(err.msg, want, strlen(want))) print_error("%s\n", err.msg);
    assert_int_equal(strncmp(err.msg, want, strlen(want)), 0);
    assert_non_null(strstr(err.msg, " MB: the parameters and three optimizer moments); nothing was written (the previous file, if any, is untouched)"));
    assert_int_equal(access(path, F_OK), -1);
    assert_true(engine_unsaved(&e));
    // the model goes on, and saves once the memory is there
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(engine_save(&e, path, &err), 0);
    assert_int_equal(e.step, 3);
    unlink(path);
    engine_free(&e);
}

static void test_snapshot_without_memory(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    MetricRow row;
    assert_int_equal(engine_step(&e, &row, &err), 0);
    real w0;
    e.model.be->download(&w0, e.model.params + 5, sizeof w0);
    fail_size = sizeof(real) * e.model.n_params;
    fail_on = 1;
    failed = 0;
    int ok = 0;
    char msg[600];
    int rc = engine_check_determinism(&e, 2, &ok, msg, sizeof msg, &err);
    fail_on = 0;
    assert_int_equal(rc, 1);
    assert_true(failed >= 1);
    if (!strstr(err.msg, "no host memory for a copy of the state to restore after (")) print_error("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "no host memory for a copy of the state to restore after ("));
    assert_non_null(strstr(err.msg, "nothing ran, the model is as it was"));
    assert_int_equal(e.step, 1);  // (no step of the check ran)
    real w1;
    e.model.be->download(&w1, e.model.params + 5, sizeof w1);
    assert_true(w0 == w1);
    Snapshot sn;
    fail_on = 1;
    assert_int_equal(snapshot_take(&sn, &e, &err), 1);
    fail_on = 0;
    assert_null(sn.p);
    assert_int_equal(engine_step(&e, &row, &err), 0);
    engine_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_without_memory),
        cmocka_unit_test(test_snapshot_without_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
