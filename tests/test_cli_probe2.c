// test_cli_probe2.c — dmsh as a process (QA mutation, session 40): what :probe says of the forward
// it reads (an eval's shallower depth, a text's step, a model built after :bench, an unknown name
// with no near one), the eval line's orth_err measured now, a horizon :set by hand that :init
// keeps, and no "held-out" note for a corpus the model never trained on. The SMALL model: seconds.
#include <math.h>
#include <stdio.h>
#include "cli_harness.h"

// SMALL on the shared corpus, a model of seed 1, then BODY
static void script_on(char *buf, size_t n, const char *body) {
    int k = snprintf(buf, n, "%s:data %s\n:init seed=1\n%s", SMALL, corpus, body);
    assert_true(k > 0 && k < (int)n);
}

// QA mutation, session 40 (E06): `:set steps=` stopped clearing steps_auto, so the user's horizon
// was taken for the one the first :train chose, and :init dropped it back to 0 (":show config"
// said steps 0 where the user had set 100). Unmutated the user's steps=100 stays through :init.
static void test_set_steps_survives_init(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":train 2 log_every=2 eval_every=0\n:set steps=100\n:init\n:show config\n");
    expect_ok(script);
    expect_out("\n  steps            100");
    assert_null(strstr(out, "\n  steps            0"));
}

// QA mutation, session 40 (E12): a new model (:init) did not clear the mark a :bench left (its
// steps undone), so :probe h@1 on a model that had run no forward said "the activations in memory
// belong to steps that were undone" — of a model that no longer exists — not "no forward yet".
static void test_probe_after_bench_then_init(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":step\n:bench\n:probe h@1\n");
    expect_error(script, "the activations in memory belong to steps that were undone");  // (the mark :bench leaves)
    script_on(script, sizeof script, ":step\n:bench\n:init seed=2\n:probe h@1\n");
    expect_error(script, "s.dm:8: error: no forward yet for activation 'h@1': ");
    assert_null(strstr(err_, "undone"));
}

// QA mutation, session 40 (E10): the eval line's orth_err printed the last retraction's error (the
// one :init measured, ~1e-8) instead of measuring the factors now: with the retract arm off three
// Muon steps move them off the manifold and the line must say so (test_inspect's eval-counter
// test matched the line only up to "orth_err=").
static void test_eval_orth_err_is_measured(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":eval\n:arm retract off\n:step 3\n:eval\n");
    expect_ok(script);
    const char *first = strstr(out, "orth_err="), *second = first ? strstr(first + 1, "orth_err=") : NULL;
    if (!first || !second) print_error("%s\n", out);
    assert_non_null(first);
    assert_non_null(second);
    assert_null(strstr(second + 1, "orth_err="));  // (two eval lines, no more)
    double o0 = atof(first + 9), o1 = atof(second + 9);
    print_message("orth_err at init %.3e, after 3 unretracted steps %.3e\n", o0, o1);
    assert_true(o0 < 1e-5);   // the init's factors are orthonormal
    if (!(o1 > 1e-5)) print_error("%s\n", out);
    assert_true(o1 > 1e-5);   // ... and the unretracted steps' are not
}

// QA mutation, session 40 (E13): opening another corpus kept the bytes the model had trained on
// (trained_upto) of the first, so a smaller corpus opened after steps on a big one printed "note:
// the held-out split now starts at byte ..., inside the first ... bytes of this corpus, which this
// model's steps drew training windows from" — of a file it never read. A re-split of the corpus it
// did train on says it (once, the control: the test finds the line when it is there).
static void test_no_heldout_note_for_another_corpus(void **s) {
    (void)s;
    char text[24001], script[2000];
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 24000; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        text[i] = i % 61 == 60 ? '\n' : "etaoin shrdlu cmfwyp"[r % 20];
    }
    text[24000] = 0;
    write_file("small.txt", text);
    script_on(script, sizeof script, ":step 2\n:set eval_frac=0.3\n:data small.txt\n:step\n:data small.txt\n");
    expect_ok(script);
    const char *note = strstr(out, "note: the held-out split now starts at byte ");
    if (!note || strstr(note + 1, "note: the held-out")) print_error("%s\n", out);
    assert_non_null(note);                                // the re-split of the corpus it trained on
    assert_null(strstr(note + 1, "note: the held-out"));  // none for small.txt (nor for it again after a step there)
}

// QA mutation, session 40 (P04): after `:eval depth=1` on an L=2 model the forward in memory ran
// one iteration; :probe h@2 showed the earlier step's stale h@2 labelled "eval forward at step 1"
// instead of refusing it.
static void test_probe_past_the_eval_depth(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":step\n:eval depth=1\n:probe h@2\n");
    expect_error(script, "s.dm:7: error: 'h@2': iteration 2 out of range 1..1 (the last forward ran 1)");
    script_on(script, sizeof script, ":step\n:eval depth=1\n:probe h@1\n");  // (iteration 1 did run)
    expect_ok(script);
    expect_out("h@1 [");
}

// QA mutation, session 40 (P14): the "near:" hint of an unknown probe matched the first 3 letters
// of its name; at 2, "kdx@1" was offered kda.q@1, kda.k@1, ...: no name shares "kdx", so the
// whole line is the refusal alone.
static void test_unknown_probe_no_near(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":step\n:probe kdx@1\n");
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    // (the whole error line; the line after it says where the stop kept the trained state: main.c)
    static const char line[] = "s.dm:6: error: unknown probe 'kdx@1' (:probe lists every name)\ndmsh: ";
    if (rc == 0 || strncmp(err_, line, strlen(line))) print_error("rc=%d stderr: %s\n", rc, err_);
    assert_int_not_equal(rc, 0);
    assert_int_equal(strncmp(err_, line, strlen(line)), 0);
    script_on(script, sizeof script, ":step\n:probe kda.x@1\n");  // (a name that shares 3 letters gets the hint)
    expect_error(script, "unknown probe 'kda.x@1'; near: kda.");
}

// QA mutation, session 40 (P19): a text= forward did not record its step, so after two steps its
// line said "forward of a text at step 1" (the last training forward's) and its plots were tagged
// text1-*; test_inspect's text probe ran at step 0 where both agree.
static void test_text_probe_step(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":eval\n:step\n:step\n:probe h@1 text=\"ab\"\n");
    expect_ok(script);
    expect_out("h@1 [1, 1, 32] ");
    expect_out("(forward of a text at step 2: ");
    assert_null(strstr(out, "at step 1"));
}

// :probe NAME hist of an eval with an arm off wrote the same file as the eval of that step with
// every arm on (hist-NAME-evalN.png), both said "wrote" it: the ablation's chart replaced the other
// in silence (QA, session 41). The arms off are in its name now, and a file written over again
// (another checkpoint of the same step) is said.
static void test_hist_of_an_ablation_is_its_own_file(void **s) {
    (void)s;
#ifdef DM_HAVE_PNG
    char script[2000];
    script_on(script, sizeof script, ":step 2\n:eval\n:probe mem.gate@2 hist\n:arm kda off\n:eval\n:probe mem.gate@2 hist\n:arm kda on\n"
              ":eval\n:probe mem.gate@2 hist\n");
    expect_ok(script);
    expect_out("wrote plots/hist-mem.gate_2-eval2.png\n");
    expect_out("wrote plots/hist-mem.gate_2-eval2-off-kda.png\n");
    expect_out("wrote plots/hist-mem.gate_2-eval2.png (over the earlier file of that name)\n");
    assert_true(file_size("plots/hist-mem.gate_2-eval2-off-kda.png") > 0);
#else
    (void)s;
#endif
}

// An escape the prompt does not know went in as a backslash and a letter, unsaid: `\r` (which a
// user types for a carriage return) and `\q` (QA, session 41). \r is one now; any other is
// refused, naming the escapes, before any forward runs.
static void test_prompt_escapes(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":probe loss@2 text='a\\rb\\tc'\n");
    expect_ok(script);
    expect_out("'\\x0d'");  // (the carriage return, byte by byte)
    script_on(script, sizeof script, ":probe loss@2 text='a\\qb'\n");
    expect_error(script, "s.dm:5: error: :probe: unknown escape '\\q' in text= (\\n \\t \\r \\\\ \\xHH; \\\\ is a backslash)");
    script_on(script, sizeof script, ":gen 'ab\\' n=2\n");
    expect_error(script, "unknown escape '\\' in the prompt");
}

// A later probe of a text= forward reads the same forward (its line says so) but listed nothing:
// seeing depth 2's per-byte loss took the text run again, another forward into the arms'
// counts (QA, session 41). It lists its values byte by byte too; after a step, nothing.
static void test_later_probe_of_a_text_lists_bytes(void **s) {
    (void)s;
    char script[2000];
    script_on(script, sizeof script, ":probe loss@1 text='ROMEO'\n:probe loss@2\n:step 1\n:probe loss@2\n");
    expect_ok(script);
    const char *second = strstr(out, "loss@2 [1, 4] ");
    assert_non_null(second);
    assert_non_null(strstr(second, "\n   pos  byte   next          value\n     0  'R'    'O'   "));
    const char *third = strstr(second + 1, "loss@2 ");
    assert_non_null(third);
    assert_null(strstr(third, "   pos  byte"));  // (the step's forward: no text)
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_steps_survives_init),
        cmocka_unit_test(test_probe_after_bench_then_init),
        cmocka_unit_test(test_eval_orth_err_is_measured),
        cmocka_unit_test(test_no_heldout_note_for_another_corpus),
        cmocka_unit_test(test_probe_past_the_eval_depth),
        cmocka_unit_test(test_unknown_probe_no_near),
        cmocka_unit_test(test_text_probe_step),
        cmocka_unit_test(test_hist_of_an_ablation_is_its_own_file),
        cmocka_unit_test(test_prompt_escapes),
        cmocka_unit_test(test_later_probe_of_a_text_lists_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
