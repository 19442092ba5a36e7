// test_cli_words.c — dmsh as a process, on how the command language reads its words and the
// command line (QA mutation, session 39: repl/parse.c's and main.c's checks, each of which a
// mutant dropped unseen): an option key is matched whole, an extra positional word is refused,
// the one-letter shortcuts name their commands, a CRLF script reads as an LF one, an open single
// quote is refused, a positional word that begins with a key's name is not that key, a number
// with trailing junk is refused, and dmsh refuses -b or -r given twice; a quoted key=value is a
// word, a typo 3 edits away gets a suggestion, --replay takes --no-tui, and a -b replay of an
// edited transcript says once where it stops rebuilding the session.
#include "cli_harness.h"

// A corpus of words drawn from a fixed-seed LCG (hermetic: no ../shared/data needed), about 19 KB
static void write_words(const char *name, unsigned seed) {
    static const char *words[] = {"dormouse", "tea", "hatter", "riddle", "march", "hare", "treacle", "well", "alice", "queen"};
    static char text[20000];
    size_t n = 0;
    while (n + 16 < sizeof text) {
        seed = seed * 1103515245u + 12345u;
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%c", words[(seed >> 16) % 10], (seed >> 8) % 7 ? ' ' : '\n');
    }
    write_file(name, text);
}

// sh_check_keys compares a key=value word's whole key: `eval=1` is not `eval_every=1` (with only
// the prefix compared, :train took it and dropped it without a word), and a positional word past
// the command's count is refused, not lost (`:train 3 7`, meant as 37, trained 3)
static void test_unknown_option_and_extra_word(void **s) {
    (void)s;
    char script[1600];
    write_words("words.txt", 39u);
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=3\n:train 3 eval=1\n", SMALL);
    expect_error(script, "s.dm:5: error: :train: unknown option 'eval' (see :help :train)");
    assert_null(strstr(out, "step 0 loss"));  // refused before any step
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=3\n:check parity prec=1\n", SMALL);
    expect_error(script, "s.dm:5: error: :check: unknown option 'prec' (see :help :check)");
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=3\n:train 3 7\n", SMALL);
    expect_error(script, "s.dm:5: error: :train: unexpected argument '7' (see :help :train)");
    assert_null(strstr(out, "step 0 loss"));
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=3\n:eval 2\n", SMALL);  // :eval takes no positional word
    expect_error(script, "s.dm:5: error: :eval: unexpected argument '2' (see :help :eval)");
    assert_null(strstr(out, "eval step"));
}

// the documented one-letter shortcuts (`dmsh --commands-md`: :s step, :t train, :e eval, :p plot,
// :q quit) each name their command: :e is one eval at the model's depth, not :eval-depths' one per
// depth (a mutant that sent :e there went unseen: only :h was typed by any test)
static void test_shortcuts(void **s) {
    (void)s;
    char script[1600];
    write_words("words.txt", 391u);
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=5\n:e\n", SMALL);
    expect_ok(script);
    const char *ev = strstr(out, "eval step 0 depth 2 bpb ");
    if (!ev) print_error("%s\n", out);
    assert_non_null(ev);
    assert_null(strstr(ev + 1, "eval step"));  // one eval line
    assert_null(strstr(out, "depth 1"));
    // :s and :t reach the step count's check (a model is there: the count is what is refused)
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=5\n:s 0\n", SMALL);
    expect_error(script, "s.dm:5: error: bad step count '0'");
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=5\n:t 0\n", SMALL);
    expect_error(script, "s.dm:5: error: bad step count '0'");
    expect_error(":p\n", "s.dm:1: error: usage: :plot METRIC");
    expect_ok(":help quit\n:q\n:help step\n");  // :q leaves: the line after it does not run
    expect_out("Leave.");
    assert_null(strstr(out, "Take N optimizer steps"));
}

// a script saved with CRLF line ends (an editor on Windows) runs as its LF twin: the '\r' is a
// blank, not an empty word (with it one, each '\r' made a word, "too many words", then a crash)
static void test_crlf_script(void **s) {
    (void)s;
    expect_ok(":help step\r\n:set lr=0.0125 warmup=7\r\n:show config\r\n");
    expect_out("Take N optimizer steps");
    expect_out("\n  lr               0.0125 ");
    expect_out("\n  warmup           7 ");
}

// an unterminated quote is refused for ' as for " (it read past the end of the line)
static void test_unterminated_single_quote(void **s) {
    (void)s;
    expect_error(":help\n:set d='x\n", "s.dm:2: error: unterminated single quote");
    expect_error(":help quit\n:gen 'a b n=3\n", "s.dm:2: error: unterminated single quote");
}

// a positional word that begins with a key's name is a file, not that key given: `:data
// evalcorp.txt eval=evalcorp.txt` (a twice-given check comparing the key without its '=' refused
// it as "option 'eval' given twice")
static void test_positional_that_begins_with_a_key(void **s) {
    (void)s;
    write_words("evalcorp.txt", 3911u);
    expect_ok(":data evalcorp.txt eval=evalcorp.txt\n");
    expect_out("corpus evalcorp.txt: 1 file, ");
    expect_out("(all train); eval evalcorp.txt: 1 file, ");
    expect_out("note: the eval file evalcorp.txt is also in the training corpus");
}

// a real number is all of its word: `lr_mult=3x` is refused, not taken as 3 (sh_parse_real; its
// caller is :stress), and so is an empty value; neither takes a step
static void test_real_with_trailing_junk(void **s) {
    (void)s;
    char script[1600];
    write_words("words.txt", 39113u);
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=7\n:stress lr_mult=3x steps=2\n", SMALL);
    expect_error(script, "s.dm:5: error: bad lr_mult '3x': expected a number in [1e-06, 1e+06]");
    assert_null(strstr(out, "stress lr_mult"));
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=7\n:stress lr_mult= steps=2\n", SMALL);
    expect_error(script, "s.dm:5: error: bad lr_mult '': expected a number in [1e-06, 1e+06]");
    assert_null(strstr(out, "stress lr_mult"));
}

// one script and one session per run: `-b a.dm -b b.dm` ran only b.dm, in silence; refused with
// status 2 before either runs, and -r the same
static void test_b_or_r_twice(void **s) {
    (void)s;
    write_file("a.dm", ":help step\n");
    write_file("b.dm", ":help quit\n");
    assert_int_equal(sh_in_dir("%s --norc -b a.dm -b b.dm > out.txt 2> err.txt", dmsh), 2);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    if (!strstr(err_, "dmsh: -b given twice (one script per run)\n")) print_error("%s\n", err_);
    assert_non_null(strstr(err_, "dmsh: -b given twice (one script per run)\n"));
    assert_string_equal(out, "");  // neither script ran
    assert_int_equal(sh_in_dir("%s --norc -r runs/x -r runs/y -e ':help quit' > out.txt 2> err.txt", dmsh), 2);
    slurp_to("err.txt", err_, sizeof err_);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(err_, "dmsh: -r given twice (one session per run)\n"));
    assert_string_equal(out, "");
}

// a quoted word is literal: quoted whole, `key=value` is a word, not an option (`:set 'lr=0.5'` is
// refused, with the way to quote; a corpus file named eval=a.txt stays the corpus, not an eval
// file a.txt), for '...' as for "..."
static void test_quoted_word_is_not_an_option(void **s) {
    (void)s;
    expect_error(":set 'lr=0.5'\n", "s.dm:1: error: expected key=value, got 'lr=0.5' (quote only the value: key=\"...\")");
    write_words("eval=a.txt", 3u);
    write_words("a.txt", 5u);
    expect_ok(":data \"eval=a.txt\"\n");
    expect_out("corpus eval=a.txt: 1 file, ");
    expect_out(" (last 10%)");
    assert_null(strstr(out, "; eval "));
}

// a typo is answered with the commands nearest to it, up to 3 edits away (":xyz" is 3 from :set)
static void test_suggestion_three_edits(void **s) {
    (void)s;
    expect_error(":xyz\n", "s.dm:1: error: unknown command ':xyz' (did you mean :set or :arm or :gen or :run? see :help)");
}

// --replay's documented companion --no-tui is accepted (the replay's children run without a
// panel anyway); anything else beside it is refused
static void test_replay_with_no_tui(void **s) {
    (void)s;
    char script[1600];
    write_words("words.txt", 1391u);
    snprintf(script, sizeof script, "%s:data words.txt\n:init seed=9\n:step 2\n", SMALL);
    write_file("rp.dm", script);
    int rc = sh_in_dir("%s --replay rp.dm --no-tui > out.txt 2> err.txt", dmsh);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (rc) print_error("rc=%d\n%s\n", rc, err_);
    assert_int_equal(rc, 0);
    expect_out("replay rp.dm: 2 processes bit-identical: 2 train steps");
    assert_int_equal(sh_in_dir("%s --replay rp.dm --no-tui -e ':help' > out.txt 2> err.txt", dmsh), 2);
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "dmsh: --replay takes one script (and at most --norc, --no-tui)"));
}

// a -b replay of a transcript with a line taken out says once where it stops rebuilding the
// session, at the first checkpoint line whose step differs, not at every later one (QA mutation,
// session 39: with the once dropped, each of the 3 checkpoint lines below said it)
static void test_replay_step_note_once(void **s) {
    (void)s;
    char script[1600];
    write_words("words.txt", 39391u);
    snprintf(script, sizeof script, ":session h3\n%s:data words.txt\n:init seed=11\n:train 2 eval_every=0\n:save\n:step 2\n:save\n:step 1\n", SMALL);
    expect_ok(script);
    assert_int_equal(sh_in_dir("grep -c '^# checkpoint ckpt/step-[245].ckpt at step [245]: the state the lines above rebuild$' "
                               "runs/h3/transcript.dm | grep -qx 3%s", ""), 0);
    assert_int_equal(sh_in_dir("grep -v '^:train 2 ' runs/h3/transcript.dm > cut.dm && %s --norc -b cut.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("err.txt", err_, sizeof err_);
    const char *n = strstr(err_, "cut.dm:8: note: the session was at step 2 here, this replay is at step 0: it does not rebuild");
    const char *eol = n ? strchr(n, '\n') : NULL;
    if (!eol || strstr(eol, "the session was at step")) print_error("%s\n", err_);
    assert_non_null(eol);
    assert_null(strstr(eol, "the session was at step"));  // once
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_option_and_extra_word),
        cmocka_unit_test(test_shortcuts),
        cmocka_unit_test(test_crlf_script),
        cmocka_unit_test(test_unterminated_single_quote),
        cmocka_unit_test(test_positional_that_begins_with_a_key),
        cmocka_unit_test(test_real_with_trailing_junk),
        cmocka_unit_test(test_b_or_r_twice),
        cmocka_unit_test(test_quoted_word_is_not_an_option),
        cmocka_unit_test(test_suggestion_three_edits),
        cmocka_unit_test(test_replay_with_no_tui),
        cmocka_unit_test(test_replay_step_note_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
