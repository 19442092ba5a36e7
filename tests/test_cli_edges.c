// test_cli_edges.c — dmsh as a process, on refusals a user reaches with ordinary input that no
// test ran (QA, session 39: a gcov pass over `make test-float` listed them as never executed):
// :plot's out= and repeated options, :gen with two prompts, :device on the device it is on or
// one that does not exist, :sessions with no runs/, :data on a device file, :save to a
// directory, a directory run as a script and scripts nested past the limit, :check's unknown
// names and keys, :arm's usage, a LATEST that names no checkpoint, and a checkpoint of the other
// real type. Each asserts the exact words and what is left (no file written, nothing run after).
#include "cli_harness.h"

// :plot refuses before it draws: a repeated option (one of the two would be dropped), an out=
// longer than its path buffer (it was cut to fit, .png and all), a name not ending in .png
static void test_plot_out_refusals(void **s) {
    (void)s;
    expect_error(":plot loss out=a.png out=b.png\n", "s.dm:1: error: :plot: option 'out' given twice\n");
    assert_int_equal(file_size("a.png"), -1);
    assert_int_equal(file_size("b.png"), -1);
    char script[2000], name[1500];
    memset(name, 'p', 1396);
    memcpy(name + 1396, ".png", 5);  // 1400 bytes: one past the most
    snprintf(script, sizeof script, ":plot loss out=%s\n", name);
    expect_error(script, "s.dm:1: error: :plot: out= is 1400 bytes long, at most 1399: not written\n");
    expect_error(":plot loss out=chart.jpg\n", "s.dm:1: error: :plot: out=chart.jpg: the chart is a PNG: give a name ending in .png\n");
    assert_int_equal(file_size("chart.jpg"), -1);
    assert_int_equal(file_size("chart.jpg.png"), -1);
}

// two prompts to :gen, the second a bare word or one with an = that is no option's (X=1): the
// second is not silently a second prompt (nor dropped)
static void test_gen_two_prompts(void **s) {
    (void)s;
    expect_error(":gen \"a\" \"b\"\n", "s.dm:1: error: usage: :gen \"prompt\" [n=256 temp=0.8 top_k=0 seed=N]\n");
    expect_error(":gen \"a\" X=1\n", "s.dm:1: error: usage: :gen \"prompt\" [n=256 temp=0.8 top_k=0 seed=N]\n");
}

// :device cpu on the CPU says nothing moved (with and without a model); an unknown name is
// refused, naming the ones there are, and no move is said
static void test_device_cpu_and_unknown(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, ":device cpu\n%s:init seed=3\n:device cpu\n", SMALL);
    expect_ok(script);
    const char *a = strstr(out, "device cpu (already: nothing moved)\n");
    assert_non_null(a);
    assert_non_null(strstr(a + 1, "device cpu (already: nothing moved)\n"));  // the live model's too
    snprintf(script, sizeof script, "%s:init seed=3\n:device nosuch\n:show model\n", SMALL);
    expect_error(script, "s.dm:4: error: unknown device 'nosuch' (cpu, cuda, cuda:N)\n");
    assert_null(strstr(out, "\ndevice "));  // no move was said (the :init line ends "device cpu (float)")
}

// :sessions where there is no runs/ at all (a fresh directory): said, not an empty list
static void test_sessions_no_runs(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("rm -rf fresh && mkdir fresh && cd fresh && %s --norc -e ':sessions' > ../out.txt 2> ../err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_string_equal(out, "no sessions (runs/ does not exist here)\n");
    assert_int_equal(file_size("fresh/runs"), -1);  // (:sessions made none)
}

// :data on something that is neither a file nor a directory (a device): refused by name
static void test_data_device_file(void **s) {
    (void)s;
    expect_error(":data /dev/null\n",
                 "s.dm:1: error: data: '/dev/null' is neither a regular file nor a directory (point :data at a file or a directory)\n");
}

// :save to a directory: refused with a file name to use (no doubled slash when it ends in one),
// and nothing written into it
static void test_save_to_directory(void **s) {
    (void)s;
    char script[2000];
    assert_int_equal(sh_in_dir("rm -rf sd && mkdir sd%s", ""), 0);
    snprintf(script, sizeof script, "%s:init seed=1\n:save sd\n", SMALL);
    expect_error(script, "s.dm:4: error: sd: cannot save checkpoint: a directory; give a file name (e.g. sd/model.ckpt)\n");
    snprintf(script, sizeof script, "%s:init seed=1\n:save sd/\n", SMALL);
    expect_error(script, "s.dm:4: error: sd/: cannot save checkpoint: a directory; give a file name (e.g. sd/model.ckpt)\n");
    assert_int_equal(sh_in_dir("test -z \"$(ls -A sd)\" && test ! -e sd.tmp%s", ""), 0);  // empty: no temp file left either
}

// a directory given as a script (:run and -b): fopen opens one, and reading it failed with EISDIR
// mid-way; refused up front. Scripts that :run one another 33 deep: refused at the 33rd (s.dm is the
// first), and the commands past it never ran
static void test_script_directory_and_depth(void **s) {
    (void)s;
    assert_int_equal(sh_in_dir("rm -rf dd && mkdir dd%s", ""), 0);
    expect_error(":run dd\n", "s.dm:1: error: dd: cannot run a directory as a script\n");
    assert_int_equal(sh_in_dir("%s --norc -b dd > out.txt 2> err.txt; test $? -eq 1", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_string_equal(err_, "dd: error: cannot run a directory as a script\n");
    for (int i = 0; i < 40; i++) {
        char name[32], text[64];
        snprintf(name, sizeof name, "n%d.dm", i);
        snprintf(text, sizeof text, ":run n%d.dm\n", i + 1);
        write_file(name, text);
    }
    write_file("n40.dm", ":help set\n");
    expect_error(":run n0.dm\n", "n30.dm:1: n31.dm: scripts nested too deeply (at most 32)\n");
    assert_null(strstr(out, ":help KEY"));  // (n32.dm on did not run)
}

// :check with a name it does not know, and :check parity with a key of another check: refused
// naming what it takes (parity is refused on its keys before it looks for a GPU)
static void test_check_refusals(void **s) {
    (void)s;
    expect_error(":check nosuch\n", "s.dm:1: error: unknown check 'nosuch' (determinism, grad, parity)\n");
    expect_error(":check parity steps=3\n",
                 "s.dm:1: error: :check parity takes batch= seq= precision= route= floor= (steps= does not apply: it runs one step of the "
                 "live model's arms)\n");
    expect_error(":check parity off=kda\n", "(off= does not apply: it runs one step of the live model's arms)\n");
    expect_error(":arm moe\n", "s.dm:1: error: usage: :arm NAME on|off (arms: kda engram moe rezero retract aux)\n");
}

// a LATEST that holds no checkpoint name (a path) or names one that is gone: :sessions says so
// beside the checkpoint -r takes, -r resumes from that one with the same words, and rewrites
// LATEST to name it
static void test_latest_not_a_name(void **s) {
    (void)s;
    char script[2000];
    assert_int_equal(sh_in_dir("rm -rf runs%s", ""), 0);
    snprintf(script, sizeof script, "%s:data %s\n:session g\n:init seed=1\n:step 2\n:save\n", SMALL, corpus);
    expect_ok(script);
    write_file("runs/g/ckpt/LATEST", "../elsewhere/x.ckpt\n");
    assert_int_equal(sh_in_dir("%s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    expect_out("  runs/g  (latest checkpoint: step-2.ckpt, step 2)\n"
               "    note: runs/g/ckpt/LATEST holds '../elsewhere/x.ckpt', not a checkpoint name (dmsh -r resumes from step-2.ckpt)\n");
    assert_int_equal(sh_in_dir("%s --norc -r runs/g -e ':show config' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "dmsh: -r: note: runs/g/ckpt/LATEST holds '../elsewhere/x.ckpt', not a checkpoint name; resuming from "
                                 "runs/g/ckpt/step-2.ckpt"));
    slurp_to("out.txt", out, sizeof out);
    expect_out("resumed runs/g at step 2 ");
    write_file("runs/g/ckpt/LATEST", "step-99.ckpt\n");
    assert_int_equal(sh_in_dir("%s --norc -e ':sessions' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    expect_out("    note: runs/g/ckpt/LATEST named step-99.ckpt, which is missing (dmsh -r resumes from step-2.ckpt)\n");
}

// a checkpoint of the other build (float vs double) is refused by name with the make line that
// builds the one that reads it. It needs the other binary: `make test` builds and tests float
// first, so the double run of this test finds build/float/dmsh (skipped, said, without it)
static void test_other_build_checkpoint(void **s) {
    (void)s;
    const char *other = strcmp(REAL_NAME, "float") ? "float" : "double";
    char od[600], script[2000], want[300];
    snprintf(od, sizeof od, "%.*sbuild/%s/dmsh", (int)(strstr(dmsh, "build/" REAL_NAME "/dmsh") - dmsh), dmsh, other);
    if (access(od, X_OK)) {
        fprintf(stderr, "note: %s not built: the cross-build checkpoint refusal is not checked here\n", od);
        return;
    }
    snprintf(script, sizeof script, "%s:init seed=1\n:save other.ckpt\n", SMALL);
    write_file("o.dm", script);
    assert_int_equal(sh_in_dir("rm -f other.ckpt && %s --norc -b o.dm > /dev/null 2>&1", od), 0);
    snprintf(script, sizeof script, "%s:init seed=2\n:load other.ckpt\n", SMALL);
    snprintf(want, sizeof want, "s.dm:4: error: other.ckpt: written by a %s build, this dmsh is %s (make DM_REAL=%s)\n", other, REAL_NAME,
             other);
    expect_error(script, want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plot_out_refusals),
        cmocka_unit_test(test_gen_two_prompts),
        cmocka_unit_test(test_device_cpu_and_unknown),
        cmocka_unit_test(test_sessions_no_runs),
        cmocka_unit_test(test_data_device_file),
        cmocka_unit_test(test_save_to_directory),
        cmocka_unit_test(test_script_directory_and_depth),
        cmocka_unit_test(test_check_refusals),
        cmocka_unit_test(test_latest_not_a_name),
        cmocka_unit_test(test_other_build_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
