// test_cli_input.c — dmsh as a process, on values that used to be taken and should not be (or
// that ran with a number that says less than it seems): integers written with a sign, blanks or
// hex. Each error is one line and stops the script there; the session before it stands.
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers_are_digits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
