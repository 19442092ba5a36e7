// test_guard.c — kernels/guard.c past the point of no return: once the innermost guard is
// committed (the optimizer writing weights, optim.c), a raise ends the process with exit 1 and a
// line saying why, instead of jumping back, which would report a half-updated model's step as
// refused with its state intact (QA, session 37: only the uncommitted and uncommitted-again
// cases were tested, through the engine). Each case runs in a forked child, since the
// process is meant to end; its stderr comes back through a pipe. And a raise that returned to its
// guard takes that guard off the chain.
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"
#include "../kernels/guard.h"

#define JUMPED_BACK 42  // the child's exit status when a raise returned to its guard

// Runs body() in a child whose stderr goes to a pipe; its exit status (-1: it did not exit) and
// what it wrote to stderr (NUL-terminated, truncated to n - 1 bytes).
static int in_child(void (*body)(void), char *errbuf, size_t n) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        body();        // (no cmocka assertion in there: the child must not return into the runner)
        _exit(43);     // body() never returns
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    while (got < n - 1 && (k = read(fd[0], errbuf + got, n - 1 - got)) > 0) got += (size_t)k;
    errbuf[got] = 0;
    close(fd[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void committed_raise(void) {
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) _exit(JUMPED_BACK);
    dm_guard_commit();
    dm_guard_raise("device workspace could not grow by %d MB", 12);
}

// a committed guard inside an open, uncommitted one: the inner one decides (outer guards are not
// tried: the outer caller's undo knows nothing of the inner caller's half-written weights)
static void committed_inside_open(void) {
    DmGuard outer, inner;
    dm_guard_open(&outer);
    if (setjmp(outer.jb)) _exit(JUMPED_BACK + 1);
    dm_guard_open(&inner);
    if (setjmp(inner.jb)) _exit(JUMPED_BACK);
    dm_guard_commit();
    dm_guard_raise("device workspace could not grow");
}

static void test_raise_after_commit_ends(void **s) {
    (void)s;
    char e[1024];
    int rc = in_child(committed_raise, e, sizeof e);
    if (rc != 1) print_error("child exit %d (%d: it jumped back to its committed guard); stderr: %s\n", rc, JUMPED_BACK, e);
    assert_int_equal(rc, 1);
    assert_string_equal(e, "dmsh: device workspace could not grow by 12 MB (inside the optimizer's update, which cannot be "
                           "undone: the process ends)\n");
    rc = in_child(committed_inside_open, e, sizeof e);
    if (rc != 1) print_error("child exit %d (%d: the inner guard, %d: the outer one); stderr: %s\n", rc, JUMPED_BACK,
                             JUMPED_BACK + 1, e);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(e, "cannot be undone: the process ends"));
    // and dm_guard_can_raise (the raise's own test, in guard.h for callers) says so: 1 in the open
    // guard, 0 once it is committed
    DmGuard g;
    dm_guard_open(&g);
    assert_true(dm_guard_can_raise());
    dm_guard_commit();
    assert_false(dm_guard_can_raise());
    dm_guard_close(&g);
}

// One raise caught by its guard, in a function that returns: the guard's frame is gone after it.
static int handled_raises;  // a static: read correctly even in a frame a dangling jump lands in
static void raise_handled(void) {
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {
        // a second landing here is a raise that jumped to this dead frame (the chain still
        // held the popped guard): say so and stop before the stale frame returns anywhere
        if (++handled_raises > 1) _exit(JUMPED_BACK);
        return;  // g is closed already (guard.h)
    }
    dm_guard_raise("first");
}

static void raise_after_handled(void) {
    raise_handled();
    dm_guard_raise("device workspace could not grow");  // no guard open: exit 1, said
}

// A raise that returned to its guard closes it: the chain is back to what it was before the guard
// opened (QA mutation, session 38: the raise left its guard on the chain, so the next raise with
// no guard open, a second device OOM after a handled one, jumped into the handled one's dead stack
// frame instead of saying why and ending).
static void test_handled_raise_pops(void **s) {
    (void)s;
    char e[1024];
    handled_raises = 0;
    int rc = in_child(raise_after_handled, e, sizeof e);
    if (rc != 1) print_error("child exit %d (%d: it jumped into the handled guard's frame); stderr: %s\n", rc, JUMPED_BACK, e);
    assert_int_equal(rc, 1);
    assert_string_equal(e, "dmsh: device workspace could not grow\n");
    // and here: no guard open before, none after
    assert_false(dm_guard_can_raise());
    raise_handled();
    assert_int_equal(handled_raises, 1);
    assert_false(dm_guard_can_raise());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raise_after_commit_ends),
        cmocka_unit_test(test_handled_raise_pops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
