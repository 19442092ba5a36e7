// test_cli_input.c — dmsh as a process, on values that used to be taken and should not be:
// integers written with a sign, blanks or hex; an eval window shorter than one sequence. Each
// error is one line, names what would be accepted, and stops the script there. And :gen's
// forwards, which ran without a count.
#include <stdlib.h>
#include <string.h>
#include "cli_harness.h"

// Integer options take decimal digits: strtoll/strtod read "-0", "+5", " 5" as numbers, so
// `:train 4 eval_every=-0` ran with evals off and `:set warmup=-0` showed warmup 0.
static void test_integers_are_digits(void **s) {
    (void)s;
    expect_error(":set warmup=-0\n", "s.dm:1: error: bad value '-0' for warmup: expected an integer in [0, 1073741824] (decimal digits)");
    expect_error(":set batch=+5\n", "s.dm:1: error: bad value '+5' for batch");
    expect_error(":set steps=1e3\n", "s.dm:1: error: bad value '1e3' for steps");
    expect_error(":set warmup=\" 7\"\n", "s.dm:1: error: bad value ' 7' for warmup");
    expect_error(":set lr=-0\n", "s.dm:1: error: bad value '-0' for lr");
    char script[1000];
    snprintf(script, sizeof script, "%s:init\n:train 2 eval_every=-0\n", SMALL);
    expect_error(script, "s.dm:4: error: bad eval_every '-0'");
    snprintf(script, sizeof script, "%s:init\n:step +1\n", SMALL);
    expect_error(script, "s.dm:4: error: bad step count '+1'");
    expect_error(":device cuda:-0\n", "s.dm:1: error: device 'cuda:-0': use cuda or cuda:N");
    // the plain forms still work (test_config.c: a refused value changes nothing)
    assert_int_equal(run(":set warmup=7 batch=08\n:show config\n", out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(out, "  warmup           7 "));
    assert_non_null(strstr(out, "  batch            8 "));
}

// SPEC §5: the eval window holds min(eval_bytes, held-out - 1) / seq sequences. eval_bytes below
// seq holds none: :set took it, :show data printed "0 B (0 x 32)", and the error came only at
// :eval (or at the first eval of a :train, after its steps). Refused where it is set, whichever
// of the two keys changes, on a line of a script file too, and the minimum is named.
static void test_eval_window_holds_a_sequence(void **s) {
    (void)s;
    char script[1200];
    snprintf(script, sizeof script, "%s:set eval_bytes=16\n:data %s\n:eval\n", SMALL, corpus);
    expect_error(script, "s.dm:3: error: eval_bytes=16 is shorter than one sequence (seq=32): the eval window needs eval_bytes >= seq (:set eval_bytes=32 or more)");
    snprintf(script, sizeof script, "%s:set eval_bytes=32\n:set seq=64\n", SMALL);
    expect_error(script, "s.dm:4: error: eval_bytes=32 is shorter than one sequence (seq=64)");
    expect_error(":set eval_bytes=200\n:preset small\n", "s.dm:2: error: preset small not applied (nothing changed): eval_bytes=200 is shorter than one sequence (seq=512)");
    write_file("evalcfg.dm", ":set seq=32\n:set eval_bytes=31\n");
    expect_error(":run evalcfg.dm\n", "s.dm:1: error: evalcfg.dm:2: eval_bytes=31 is shorter than one sequence (seq=32)");
    // eval_bytes = seq is the minimum: one sequence; both keys on one :set are judged together
    snprintf(script, sizeof script, "%s:set eval_bytes=16 seq=16\n:data %s\n:show data\n:set seq=32 eval_bytes=32\n:init seed=1\n:eval\n",
             SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("stderr: %s\n", err_);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "over 32 B (1 x 32)"));
    assert_non_null(strstr(out, "eval window: 16 B (1 x 16)"));
}

// "A fallback that happens without a counter is a defect" (SPEC §5): :gen runs the model one
// byte at a time, and :show arms must count those forwards as it counts training and eval ones.
static void test_gen_counts_its_forwards(void **s) {
    (void)s;
    char script[1000];
    // SMALL: L=2; "ab" and 3 sampled bytes are 5 decoder steps, each a forward of 2 iterations
    snprintf(script, sizeof script, "%s:init seed=1\n:show arms\n:gen \"ab\" n=3 temp=0\n:show arms\n:arm moe off\n:gen \"a\" n=1 temp=0\n:show arms\n",
             SMALL);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("stderr: %s\n", err_);
    assert_int_equal(rc, 0);
    const char *first = strstr(out, "  kda      on  forward 0 backward 0\n");
    assert_non_null(first);
    const char *second = strstr(first + 1, "  kda      on  forward 10 backward 0\n");
    if (!second) print_error("%s\n", out);
    assert_non_null(second);
    assert_non_null(strstr(second, "  moe      on  forward 10 backward 0\n"));
    assert_non_null(strstr(second, "  rezero   on  forward 10 backward 0\n"));
    // an arm switched off counts nothing more; the others go on counting (2 steps x 2 iterations)
    const char *third = strstr(second + 1, "  kda      on  forward 14 backward 0\n");
    assert_non_null(third);
    assert_non_null(strstr(third, "  moe      off forward 10 backward 0\n"));
    assert_non_null(strstr(third, "  engram   on  forward 14 backward 0\n"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers_are_digits),
        cmocka_unit_test(test_eval_window_holds_a_sequence),
        cmocka_unit_test(test_gen_counts_its_forwards),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
