// test_cli_verify.c — dmsh's verifications fail when what they compare differs, and :bench
// leaves the model as it found it: --replay with a value changed in place (the digest's line
// length kept), a :check determinism FAIL failing its script, and the state after :bench (the
// split it trained on, its arm counters, its orthogonality error) the state before it.
// (test_cli.c holds --replay's other cases; its file is near the size limit.)
#include <stdlib.h>
#include <string.h>
#include "cli_harness.h"
#include "../repl/bench.h"

// --replay compares each line's bytes, not its length: the test hooks change one value in the
// second process in place (DMSH_REPLAY_PERTURB=2: a hex digit of the first step's gnorm; 3: one
// bit of the first tensor's Adam first moment, whose hash column is its own, not the weights')
static void test_replay_sees_a_value_changed_in_place(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:set eval_bytes=512\n:data %s\n:init seed=9\n:step 3\n:eval\n", SMALL, corpus);
    write_file("rp.dm", script);
    assert_int_equal(sh_in_dir("DMSH_REPLAY_PERTURB=2 timeout 120 %s --replay rp.dm > out.txt 2> err.txt", dmsh), 1);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(out, "NOT bit-identical across processes at digest line 2:")) print_error("%s\n", out);
    assert_non_null(strstr(out, "replay rp.dm: NOT bit-identical across processes at digest line 2:\n  process 1: train 0 loss "));
    assert_non_null(strstr(out, "\n  process 2: train 0 loss "));
    // the Adam first moment: the same weights, another m
    assert_int_equal(sh_in_dir("DMSH_REPLAY_PERTURB=3 timeout 120 %s --replay rp.dm > out.txt 2> err.txt", dmsh), 1);
    slurp_to("out.txt", out, sizeof out);
    const char *p1 = strstr(out, "  process 1: tensor "), *p2 = strstr(out, "  process 2: tensor ");
    if (!p1 || !p2) print_error("%s\n", out);
    assert_true(p1 && p2);
    char n1[64], n2[64], w1[17], w2[17], m1[17], m2[17];
    assert_int_equal(sscanf(p1, "  process 1: tensor %63s %16s m %16s", n1, w1, m1), 3);
    assert_int_equal(sscanf(p2, "  process 2: tensor %63s %16s m %16s", n2, w2, m2), 3);
    assert_string_equal(n1, n2);
    assert_string_equal(w1, w2);
    assert_string_not_equal(m1, m2);
    // unperturbed, the same script is bit-identical (the hooks, not the script, made them differ)
    assert_int_equal(sh_in_dir("timeout 120 %s --replay rp.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, "replay rp.dm: 2 processes bit-identical: 3 train steps"));
}

// a :check determinism that says FAIL fails its script there (exit 1, the line named), like any
// failed command: a script or CI run never goes on past it (DMSH_DETERMINISM_PERTURB=1 turns the
// verdict to the one a nondeterministic backend gives)
static void test_determinism_fail_fails_the_script(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=4\n:check determinism steps=2\n:step 1\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "determinism: PASS — 2 steps twice from step 0"));
    assert_non_null(strstr(out, "\nstep 2 loss"));
    setenv("DMSH_DETERMINISM_PERTURB", "1", 1);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    unsetenv("DMSH_DETERMINISM_PERTURB");
    if (rc != 1 || !strstr(err_, "s.dm:5: error: determinism check failed: ")) print_error("rc=%d\n%s\n%s\n", rc, out, err_);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "determinism: FAIL — 2 steps twice from step 0"));
    assert_non_null(strstr(err_, "s.dm:5: error: determinism check failed: "));
    assert_null(strstr(out, "\nstep 2 loss"));  // (the :step after it never ran)
}

// :bench's steps are undone: the split the model trained on (a held-out split moved into bytes
// the bench's steps drew from is no cause for "may have trained on"), the arm counters (:show
// arms), and the orthogonality error (a state hash: after a :save, the :bench made the state look
// unsaved, and the exit saved it again)
static void test_bench_leaves_the_state(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=3\n:bench steps=1\n:set eval_frac=0.2\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "bench cpu"));
    if (strstr(out, "may have trained on")) print_error("%s\n", out);
    assert_null(strstr(out, "may have trained on"));
    // (a step the model keeps does say it: the note is there to be missed)
    snprintf(script, sizeof script, "%s:data %s\n:init seed=3\n:step 1\n:set eval_frac=0.2\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "may have trained on"));
    snprintf(script, sizeof script, "%s:data %s\n:session bq\n:init seed=3\n:step 2\n:save\n:show arms\n:bench steps=2\n:show arms\n",
             SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    const char *a1 = strstr(out, "  kda "), *b = strstr(out, "\nbench cpu"), *a2 = b ? strstr(b, "  kda ") : NULL;
    assert_true(a1 && b && a2 && a1 < b);
    size_t n1 = (size_t)(b + 1 - a1);  // the first table, up to the bench line
    assert_non_null(strstr(a1, "  retract  on  forward 2 "));  // (counted: the two steps' retractions)
    if (strncmp(a1, a2, n1)) print_error("before :bench:\n%.*s\nafter:\n%s\n", (int)n1, a1, a2);
    assert_int_equal(strncmp(a1, a2, n1), 0);
    if (strstr(err_, "dmsh: saved")) print_error("%s\n", err_);
    assert_null(strstr(err_, "dmsh: saved"));  // (the :save holds this state: nothing to save at the exit)
    assert_int_equal(file_size("runs/bq/ckpt/step-2.ckpt") > 0, 1);
}

// :bench's median: the middle time, for an even count the mean of the middle two (the upper one
// alone made :bench steps=2 report its slower step)
static void test_bench_median(void **s) {
    (void)s;
    srand(7);
    for (int n = 1; n <= 6; n++)
        for (int rep = 0; rep < 20; rep++) {
            double ms[6], sorted[6];
            for (int i = 0; i < n; i++) ms[i] = sorted[i] = 0.5 + 10.0 * rand() / RAND_MAX;
            for (int i = 1; i < n; i++)  // (a sort of its own: the reference)
                for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                    double t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
                }
            double want = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
            assert_true(bench_median(ms, n) == want);
        }
    double two[] = {9.0, 3.0}, four[] = {8.0, 1.0, 4.0, 2.0};
    assert_true(bench_median(two, 2) == 6.0);
    assert_true(bench_median(four, 4) == 3.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_median),
        cmocka_unit_test(test_replay_sees_a_value_changed_in_place),
        cmocka_unit_test(test_determinism_fail_fails_the_script),
        cmocka_unit_test(test_bench_leaves_the_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
