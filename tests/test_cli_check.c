// test_cli_check.c — dmsh as a process, on how the float binary's :check grad runs the double
// engine beside it (../double/dmsh): its error once, its other lines passed on, a child that dies
// named; no shell between (descriptors past 9 in the parent); the live config's choices and the
// live model's off arms handed to it; a Ctrl-C stops the child and the check says so. The double
// engine here is a stand-in script.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "cli_harness.h"

// the float binary copied beside a stand-in double engine (fake/float/dmsh, fake/double/dmsh):
// dmsh then names the copy; back with restore_dmsh
static char real_dmsh[sizeof dmsh];
static void fake_double(const char *script) {
    (void)SMALL;
    if (!real_dmsh[0]) snprintf(real_dmsh, sizeof real_dmsh, "%s", dmsh);
    assert_int_equal(sh_in_dir("mkdir -p fake/float fake/double && cp %s fake/float/dmsh", real_dmsh), 0);
    write_file("fake/double/dmsh", script);
    assert_int_equal(sh_in_dir("chmod +x fake/double/dmsh%s", ""), 0);
    snprintf(dmsh, sizeof dmsh, "%s/fake/float/dmsh", dir);
}
static void restore_dmsh(void) { snprintf(dmsh, sizeof dmsh, "%s", real_dmsh); }

// :check grad in the float binary runs the double one beside it (../double/dmsh): the child's
// error is this command's one error line (it printed "-e #2: error: ..." and then this command
// said the same again), its other messages pass through once, and a child that dies is named.
// The double engine here is a stand-in script that fails as the real one does.
static void test_check_grad_child_error_once(void **s) {
    (void)s;
    if (strcmp(REAL_NAME, "float")) return;  // (the double binary checks in-process)
    fake_double("#!/bin/sh\necho '  head  analytic 1 numeric 2 rel 1 FAIL'\n"
                "echo 'dmsh: note: a note of its own' >&2\n"
                "echo '-e #2: error: gradient check failed (see the table above)' >&2\nexit 1\n");
    assert_int_not_equal(run(":check grad\n", out, sizeof out, err_, sizeof err_), 0);
    if (strcmp(err_, "dmsh: note: a note of its own\ns.dm:1: error: gradient check failed (see the table above)\n"))
        print_error("%s", err_);
    assert_string_equal(err_, "dmsh: note: a note of its own\ns.dm:1: error: gradient check failed (see the table above)\n");
    assert_non_null(strstr(out, "head  analytic 1 numeric 2 rel 1 FAIL"));
    // no temp file by name: a TMPDIR that does not exist (or holds a quote) changes nothing
    assert_int_equal(sh_in_dir("TMPDIR=\"/nonexistent/a'b\" fake/float/dmsh --norc -b s.dm > out.txt 2> err.txt; test $? = 1%s", ""), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_string_equal(err_, "dmsh: note: a note of its own\ns.dm:1: error: gradient check failed (see the table above)\n");
    write_file("fake/double/dmsh", "#!/bin/sh\nkill -9 $$\n");
    expect_error(":check grad\n", "s.dm:1: error: :check grad: the double-precision engine ");
    write_file("fake/double/dmsh", "#!/bin/sh\necho 'dmsh: a note' >&2\n");  // success: its lines pass through
    assert_int_equal(run(":check grad\n", out, sizeof out, err_, sizeof err_), 0);
    assert_string_equal(err_, "dmsh: a note\n");
    restore_dmsh();
}

// `2>&N` through /bin/sh: with the messages' file at descriptor 10 or more (a parent that left
// descriptors open) dash refused the line, "Bad fd number" (QA, session 35). No shell now: the
// child gets its words as they are (a value with a blank or a quote needs no quoting).
static void test_check_grad_no_shell(void **s) {
    (void)s;
    if (strcmp(REAL_NAME, "float")) return;
    fake_double("#!/bin/sh\nfor a in \"$@\"; do echo \"arg [$a]\"; done\n");
    // (bash: dash itself takes no descriptor past 9 in a redirection)
    assert_int_equal(sh_in_dir("bash -c 'exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null 7</dev/null 8</dev/null 9</dev/null 10</dev/null "
                               "11</dev/null; %s --norc -e \":check grad off=kda\" > out.txt 2> err.txt'", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(out, "arg [--norc]\narg [--no-tui]\narg [-e]\narg [:set E=")) print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(out, "arg [--norc]\narg [--no-tui]\narg [-e]\narg [:set E="));
    assert_non_null(strstr(out, "arg [-e]\narg [:check grad off=kda]\n"));
    assert_null(strstr(err_, "Bad fd"));
    restore_dmsh();
}

// What the double engine is handed from a live session: the whole :set of the config's choices
// the check takes (E L k loss lam_max g_min moe_aux engram_orders, each not its default here),
// and the live model's arms that are off ahead of off= (QA, session 37: a float binary that
// dropped engram_orders from the :set, or the live `:arm kda off` from off=, passed every test;
// the one above runs without a live model and reads the :set's first word only)
static void test_check_grad_hands_on_the_live_model(void **s) {
    (void)s;
    if (strcmp(REAL_NAME, "float")) return;
    fake_double("#!/bin/sh\nfor a in \"$@\"; do echo \"arg [$a]\"; done\n");
    char script[2400];
    snprintf(script, sizeof script, "%s:set E=3 k=2 loss=final lam_max=0.5 g_min=-4 moe_aux=0.05 engram_orders=2,5\n"
             ":data %s\n:init\n:arm kda off\n:check grad off=moe\n", SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    const char *set = "arg [-e]\narg [:set E=3 L=2 k=2 loss=final lam_max=0.5 g_min=-4 moe_aux=0.05 engram_orders=2,5]\n";
    if (rc || !strstr(out, set) || !strstr(out, "arg [-e]\narg [:check grad off=kda,moe]\n")) print_error("%s\n%s\n", out, err_);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, set));
    assert_non_null(strstr(out, "arg [-e]\narg [:check grad off=kda,moe]\n"));
    restore_dmsh();
}

// A Ctrl-C while the double engine runs reached it too (one process group): the child's own
// "interrupted at step 0 ... the script stops here" came out as this command's error, or a check
// it had finished turned into one. The child is stopped, and the check says so.
static void test_check_grad_interrupted(void **s) {
    (void)s;
    if (strcmp(REAL_NAME, "float")) return;
    fake_double("#!/bin/sh\necho $$ > child.pid\ntrap 'echo got INT >> child.sig' INT\nsleep 30 & wait\nsleep 30\n");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "(rm -f child.pid child.sig; %s --norc -e ':check grad' > out.txt 2> err.txt & p=$!; "
             "for i in $(seq 200); do test -s child.pid && break; sleep 0.05; done; kill -INT $p; wait $p; echo $? > rc.txt)", dmsh);
    assert_int_equal(sh_in_dir("%s", cmd), 0);
    slurp_to("err.txt", err_, sizeof err_);
    if (!strstr(err_, "error: :check grad: interrupted: the double-precision engine was stopped, nothing checked (rows above")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, "error: :check grad: interrupted: the double-precision engine was stopped, nothing checked (rows above"));
    // the child's process group was not the terminal's: the SIGINT was this process's alone, and
    // the child is gone (stopped with SIGTERM)
    assert_int_equal(sh_in_dir("test ! -e child.sig && ! kill -0 $(cat child.pid) 2>/dev/null%s", ""), 0);
    restore_dmsh();
}

// The list handed to the double engine had a trailing comma ("off=kda,") or was empty ("off="),
// which the double engine refuses since it takes no empty arm name (session 41): every :check grad
// without an off= of its own then failed, and the stand-in above echoed whatever it got. The
// exact words now, and (where the double build is there, as make test builds it) the real one.
static void test_check_grad_list_without_an_empty_name(void **s) {
    (void)s;
    if (strcmp(REAL_NAME, "float")) return;
    fake_double("#!/bin/sh\nfor a in \"$@\"; do echo \"arg [$a]\"; done\n");
    char script[2400];
    snprintf(script, sizeof script, "%s:data %s\n:init\n:check grad\n:arm kda off\n:check grad\n:check grad off=moe\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    expect_out("arg [-e]\narg [:check grad]\n");
    expect_out("arg [-e]\narg [:check grad off=kda]\n");
    expect_out("arg [-e]\narg [:check grad off=kda,moe]\n");
    restore_dmsh();
    char dbl[700];
    snprintf(dbl, sizeof dbl, "%s", dmsh);
    char *f = strstr(dbl, "/float/dmsh");
    if (!f) return;
    memcpy(f, "/double/dmsh", 13);
    if (access(dbl, X_OK)) { print_message("test_check_grad_list_without_an_empty_name: no %s, the real double engine not run\n", dbl); return; }
    snprintf(script, sizeof script, "%s:data %s\n:init\n:check grad\n:arm kda off\n:check grad\n", SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("%s\n%s\n", out, err_);
    assert_int_equal(rc, 0);
    expect_out("worst ");
    expect_out("arms off: kda\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_grad_child_error_once),
        cmocka_unit_test(test_check_grad_no_shell),
        cmocka_unit_test(test_check_grad_hands_on_the_live_model),
        cmocka_unit_test(test_check_grad_list_without_an_empty_name),
        cmocka_unit_test(test_check_grad_interrupted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
