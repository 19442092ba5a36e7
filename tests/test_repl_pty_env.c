// test_repl_pty_env.c — the :train panel (repl/panel.c) through a pseudo-terminal
// (tests/pty_harness.h) where the environment or the terminal is out of the ordinary: a
// DMSH_NO_TUI that does not ask for plain lines, a terminal too short for the panel's status
// rows. (QA mutation, session 41, round 7b.) Needs the readline build of dmsh and a panel
// (ncursesw); without them it skips.
#include "pty_harness.h"

// a wrapper that runs dmsh with DMSH_NO_TUI=VALUE (spawn itself unsets the variable for a panel
// run, or sets it to 1), in the test directory; dmsh[] names it until restore_dmsh()
static char real_dmsh[512];
static void dmsh_with_no_tui(const char *value) {
    char p[400];
    snprintf(p, sizeof p, "%s/nt.sh", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\nDMSH_NO_TUI='%s' exec '%s' \"$@\"\n", value, real_dmsh);
    fclose(f);
    assert_int_equal(chmod(p, 0755), 0);
    snprintf(dmsh, sizeof dmsh, "%s", p);
}
static void restore_dmsh(void) { snprintf(dmsh, sizeof dmsh, "%s", real_dmsh); }

// :train 100000 on the tiny model; 1 when the panel came up (its first frame drawn)
static int train_in_panel(void) {
    small_model(1);
    command(":train 100000 log_every=1");
    if (!panel_up()) return 0;
    expect_out(SMCUP, 1);
    return 1;
}

static void stop_and_quit(int drawn) {
    type("\x03");
    if (drawn) expect_out("\x1b[?1049l", 30);
    expect_out("interrupted at step ", 60);
    expect_out("dmsh> ", 20);
    type("\x04");
    int st = wait_exit(20);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// does this dmsh open a panel at all (ncursesw)? (DMSH_NO_TUI unset)
static int have_panel(void) {
    spawn(1, 1);
    int drawn = train_in_panel();
    stop_and_quit(drawn);
    return drawn;
}

// QA mutation, session 41 (P1): DMSH_NO_TUI=0 (or empty) does not turn the panel off: only a
// value that says yes does. The harness only ever unset the variable or set it to 1, so a
// panel_open() that took any non-empty value as "off" (the `strcmp(off, "0")` dropped) went
// unseen: DMSH_NO_TUI=0 then gave plain step lines.
static void test_no_tui_zero_keeps_the_panel(void **s) {
    (void)s;
    if (!have_panel()) {
        print_message("no panel in this build (ncursesw): skipped\n");
        return;
    }
    const char *values[] = {"0", ""};
    for (int i = 0; i < 2; i++) {
        dmsh_with_no_tui(values[i]);
        spawn(1, 1);
        restore_dmsh();
        int drawn = train_in_panel();
        if (!drawn) print_error("DMSH_NO_TUI='%s': plain lines, no panel\n", values[i]), show_tail();
        assert_true(drawn);
        expect_out("loss, ", 30);  // (the chart's title: a frame drawn)
        stop_and_quit(drawn);
    }
}

// QA mutation, session 41 (P5): on a terminal so short that the status fields take every row,
// the hint ("Ctrl-C: stop at the next step") is not drawn over the last status row: a tiny
// terminal keeps the numbers. test_panel_narrow (10 rows) always had a free last row, so the
// `top - 2 < rows - 1` check could be dropped unseen (the hint then covered the last field).
// The same 22 columns with 10 rows show the hint (the text is one the screen would hold).
static void test_short_terminal_keeps_the_status(void **s) {
    (void)s;
    spawn_rows = 10;
    spawn_cols = 22;
    spawn(1, 1);
    int drawn = train_in_panel();
    if (!drawn) {
        spawn_rows = 40;
        spawn_cols = 200;
        print_message("no panel in this build (ncursesw): skipped\n");
        stop_and_quit(0);
        return;
    }
    expect_out("Ctrl-C: stop at", 30);
    stop_and_quit(drawn);
    spawn_rows = 4;
    spawn(1, 1);
    spawn_rows = 40;
    spawn_cols = 200;
    assert_true(train_in_panel());
    size_t from = seen;
    settle(2.0);  // (frames at most every 0.1 s)
    char *end = strstr(tty + from, "\x1b[?1049l");
    if (end) *end = 0;  // (only what the panel drew)
    // (the fields take all 4 rows: the title, the step, the loss, and the lr on the last one)
    const char *hint = strstr(tty + from, "Ctrl-C: stop at"), *lr = strstr(tty + from, "lr ");
    if (hint || !lr) show_tail();
    if (end) *end = '\x1b';
    assert_null(hint);
    assert_non_null(lr);
    stop_and_quit(drawn);
}

// the harness's setup, and the real dmsh kept for restore_dmsh()
static int setup_env(void **s) {
    int rc = setup(s);
    snprintf(real_dmsh, sizeof real_dmsh, "%s", dmsh);
    return rc;
}

int main(void) {
#ifndef DM_HAVE_READLINE
    printf("test_repl_pty_env: skipped (dmsh built without readline: no interactive prompt to drive)\n");
    return 0;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_no_tui_zero_keeps_the_panel, teardown_one),
        cmocka_unit_test_teardown(test_short_terminal_keeps_the_status, teardown_one),
    };
    return cmocka_run_group_tests(tests, setup_env, teardown);
}
