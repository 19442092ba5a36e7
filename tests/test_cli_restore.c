// test_cli_restore.c — dmsh as a process: what a checkpoint restores, seen through -r and :load
// (QA mutation, session 39: each of these lines of engine_ckpt.c could be changed with every test
// still passing). The trained span of the corpus (the held-out note after a :set eval_frac), the
// split the checkpoint was written with (re-made at :load), the count of consecutive skipped steps
// (nan_limit continues across -r) and the anchors (not restored onto other training bytes).
// Each test runs on c.txt, a 200000-byte copy of real text in its scratch directory, so the
// split's byte counts are known and the file can be rewritten in place.
#include "cli_harness.h"

#define CSIZE 200000  // c.txt's bytes: train 180000 / held-out 20000 at the default eval_frac 0.1

// c.txt: the first CSIZE bytes of the corpus (the shared text, else the C headers concatenated)
static void make_corpus(void) {
    char cmd[1200];
    if (!strcmp(corpus, "/usr/include"))
        snprintf(cmd, sizeof cmd, "cat /usr/include/*.h | head -c %d > c.txt", CSIZE);
    else
        snprintf(cmd, sizeof cmd, "head -c %d '%%s' > c.txt", CSIZE);
    assert_int_equal(sh_in_dir(cmd, corpus), 0);
    assert_int_equal(file_size("c.txt"), CSIZE);
}

// dmsh --norc ARGS in the scratch directory, its stdout into out and its stderr into err_;
// returns its exit status
static int dmsh_args(const char *args) {
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "%%s --norc %s > out.txt 2> err.txt", args);
    int rc = sh_in_dir(cmd, dmsh);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    return rc;
}

// The held-out note compares the new split with the bytes the model's steps drew windows from,
// and a resumed model's are its checkpoint's: a -r then a larger eval_frac scored trained bytes
// as held-out with no word (the span not restored), and a smaller one was said to (the span taken
// as the whole corpus)
static void test_resume_knows_the_trained_span(void **s) {
    (void)s;
    make_corpus();
    char script[1000];
    snprintf(script, sizeof script, ":session u\n%s:data c.txt\n:init seed=1\n:step 3\n", SMALL);
    expect_ok(script);
    // 0.05: the held-out split starts at 190000, past the 180000 trained on: nothing to say
    assert_int_equal(dmsh_args("-r runs/u -e ':set eval_frac=0.05'"), 0);
    if (strstr(out, "held-out split now starts")) print_error("%s\n", out);
    assert_null(strstr(out, "note: the held-out split now starts"));
    // 0.2: it starts at 160000, inside the 180000 bytes of the steps at 0.1. This -r resumes the
    // exit save of the last, written at the 0.05 split (190000 training bytes): the span is the
    // steps', not the split's at the save (the note said "the first 190000 bytes" until the
    // checkpoint kept it, section data.trained)
    assert_int_equal(dmsh_args("-r runs/u -e ':set eval_frac=0.2'"), 0);
    assert_non_null(strstr(out, "resumed runs/u at step 3 from ckpt/step-3-b1.ckpt"));
    const char *want = "note: the held-out split now starts at byte 160000, inside the first 180000 bytes of this corpus, which this "
                       "model's steps drew training windows from";
    if (!strstr(out, want)) print_error("%s\n", out);
    assert_non_null(strstr(out, want));
    // the same through :load in a fresh dmsh (the corpus reopened from the checkpoint)
    assert_int_equal(dmsh_args("-e ':load runs/u/ckpt/step-3.ckpt' -e ':set eval_frac=0.2'"), 0);
    assert_non_null(strstr(out, want));
}

// The bpb of "eval step N depth D bpb X" in text from p on (NULL when absent), into v
static const char *eval_bpb(const char *p, const char *head, char *v, size_t n) {
    const char *q = strstr(p, head);
    if (!q) return NULL;
    q += strlen(head);
    size_t k = strcspn(q, " \n");
    snprintf(v, n, "%.*s", (int)k, q);
    return q;
}

// :load makes the corpus open split as the checkpoint's eval_frac says: after :set eval_frac=0.3
// a :load said eval_frac 0.1 while the batches and the eval came from the 0.3 split (the eval of
// the same model came out another number, and the next step's loss too)
static void test_load_resplits_the_corpus(void **s) {
    (void)s;
    make_corpus();
    char script[1000];
    snprintf(script, sizeof script, "%s:set eval_bytes=4096\n:data c.txt\n:init seed=1\n:step 2\n:save x.ckpt\n:eval\n:step 1\n"
             ":set eval_frac=0.3\n:load x.ckpt\n:show config\n:eval\n:step 1\n", SMALL);
    expect_ok(script);
    char a[64], b[64], la[64], lb[64];
    const char *h = "eval step 2 depth 2 bpb ";
    const char *p = eval_bpb(out, h, a, sizeof a);
    assert_non_null(p);
    if (!eval_bpb(p, h, b, sizeof b)) print_error("%s\n", out);
    assert_non_null(eval_bpb(p, h, b, sizeof b));
    if (strcmp(a, b)) print_error("the loaded model's eval %s, the saved one's %s\n%s\n", b, a, out);
    assert_string_equal(a, b);  // the same model on the same window
    // the step after the load draws the batch the step after the save drew
    p = eval_bpb(out, "\nstep 2 loss ", la, sizeof la);
    assert_non_null(p);
    assert_non_null(eval_bpb(p, "\nstep 2 loss ", lb, sizeof lb));
    if (strcmp(la, lb)) print_error("step 2 after the load: loss %s, after the save %s\n%s\n", lb, la, out);
    assert_string_equal(la, lb);
    expect_out("eval_frac        0.1");
    assert_null(strstr(out, "split differently"));
}

// nan_limit counts consecutive skipped steps, and a -r continues the count: a run halted after 4
// in a row halts at once when resumed on the same non-finite steps (the count restarted at 0 ran
// 3 more skipped steps into metrics.tsv and the checkpoints)
static void test_resume_keeps_the_skip_count(void **s) {
    (void)s;
    make_corpus();
    char script[1000];
    snprintf(script, sizeof script, ":session n\n%s:data c.txt\n:set warmup=0 clip=0 nan_limit=4 lr=10 lr_muon=10 eps=1e-30 beta2=0 wd=0\n"
             ":init seed=1\n:step 40\n", SMALL);
    assert_int_not_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    const char *e = strstr(err_, ": nan_limit (4) consecutive non-finite steps");
    if (!e) print_error("%s\n", err_);
    assert_non_null(e);
    const char *st = e;
    while (st > err_ && st[-1] != ' ') st--;  // "step K"
    assert_true(st - err_ >= 5 && !strncmp(st - 5, "step ", 5));
    long k = strtol(st, NULL, 10);
    assert_true(k >= 3 && k < 39);
    // the resumed run's first step is its 4 + 1st skip in a row
    assert_int_not_equal(dmsh_args("-r runs/n -e ':step 10'"), 0);
    char want[96];
    snprintf(want, sizeof want, "step %ld: nan_limit (4) consecutive non-finite steps", k + 1);
    if (!strstr(err_, want)) print_error("wanted '%s' in\n%s\n", want, err_);
    assert_non_null(strstr(err_, want));
}

// Anchors come back from a checkpoint only onto the bytes they were fit on: with the corpus's
// first 50000 bytes upper-cased (its size, held-out tail and eval window unchanged) the resumed
// eval quoted the old unigram and 5-gram lines as if fit on this text
static void test_resume_drops_anchors_of_other_bytes(void **s) {
    (void)s;
    make_corpus();
    char script[1000];
    snprintf(script, sizeof script, ":session a\n%s:set eval_bytes=4096 anchor_fit_bytes=65536\n:data c.txt\n:init seed=1\n:anchors\n:step 2\n"
             ":eval\n", SMALL);
    expect_ok(script);
    assert_non_null(strstr(out, " | unigram "));
    // the same bytes: they come back
    assert_int_equal(dmsh_args("-r runs/a -e ':eval'"), 0);
    assert_non_null(strstr(out, " | unigram "));
    assert_int_equal(sh_in_dir("{ head -c 50000 c.txt | tr a-z A-Z; tail -c +50001 c.txt; } > c2.txt && mv c2.txt c.txt", ""), 0);
    assert_int_equal(file_size("c.txt"), CSIZE);
    assert_int_equal(dmsh_args("-r runs/a -e ':eval'"), 0);
    const char *all = strstr(err_, "changed since this checkpoint was written") ? err_ : out;
    if (!strstr(all, "the corpus ") || !strstr(all, "changed since this checkpoint was written")) print_error("%s\n%s\n", out, err_);
    assert_non_null(strstr(all, "changed since this checkpoint was written"));
    const char *ev = strstr(out, "eval step 2 ");
    if (!ev || strstr(ev, " | unigram ")) print_error("%s\n", out);
    assert_non_null(ev);
    assert_null(strstr(ev, " | unigram "));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resume_knows_the_trained_span, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_resplits_the_corpus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_keeps_the_skip_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_drops_anchors_of_other_bytes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
