// test_cli_show.c — dmsh as a process, on what the inspection commands print: the :help list's
// first sentences and an arm's :help, :show params (the frozen rows, the totals) and :show model,
// an eval's "beaten" words against the anchors, :train's eta words, and :session's refusals of a
// name. (The cases a mutation pass of repl/commands.c found unchecked, QA session 38; the other
// cli test files are near the size limit.)
#include "cli_harness.h"

// steps (of batch 64) of the run whose last line says "eta 0s": long enough (about 2 s here) that
// the time it took, read as the time left, would not print as 0s
enum { ETA_STEPS = 150 };

// :help's list shows each command's first sentence: cut at the first ". ", not at a '.' inside
// "1..L" (QA mutation, session 38: cut at any '.', :eval-depths read "Held-out BPB at every depth 1"),
// and without the full stop of a help that is one sentence (":quit  Leave")
static void test_help_list_first_sentences(void **s) {
    (void)s;
    expect_ok(":help\n");
    expect_out(" Held-out BPB at every depth 1..L from one forward pass\n");
    expect_out(" Apply a preset: nano, mini, small, base, large — the :set lines of configs/NAME.dm (shape, Engram tables, seq, batch) as "
               "one :set; other keys keep their values\n");
    expect_out(" Leave\n");
    expect_out(" Run a script\n");
    assert_null(strstr(out, "Leave."));
}

// :help NAME of every arm says what that arm is (the texts are a table in arm order: one out of
// place gave an arm another's description; QA mutation, session 38)
static void test_help_each_arm(void **s) {
    (void)s;
    static const char *const want[][2] = {
        {"kda", "KDA linear attention"},  {"engram", "Engram hashed n-gram memory"}, {"moe", "the mixture of low-rank spectral experts"},
        {"rezero", "the ReZero scale"},  {"retract", "the polar retraction"},        {"aux", "the auxiliary losses"}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char script[64], line[300];
        snprintf(script, sizeof script, ":help %s\n", want[i][0]);
        expect_ok(script);
        snprintf(line, sizeof line, "arm %s (:arm %s on|off; :help arm for the switch and its counters)\n  %s", want[i][0], want[i][0],
                 want[i][1]);
        expect_out(line);
    }
}

// the numbers of the "params:" line and of :show model's "total" line
static void totals(const char *text, const char *prefix, long long *comp, long long *tab, long long *sum) {
    const char *p = strstr(text, prefix);
    if (!p) print_error("no '%s' in\n%s\n", prefix, text);
    assert_non_null(p);
    *sum = -1;
    int n = sscanf(p + strlen(prefix), " %lld compute + %lld memory-table = %lld total", comp, tab, sum);
    if (n < 2) n = sscanf(p + strlen(prefix), " %lld + %lld table", comp, tab);
    assert_true(n >= 2);
}

// :show params: an arm that is off marks its tensors frozen, and ctrl.w/ctrl.b the rows of its
// gate (row j = arm j: 0 kda, 1 engram, 2 moe); the tensors' counts add up to the total the line
// below gives, compute + table. :show model's parts add up to the same compute count. (QA
// mutation, session 38: the frozen marks inverted, the row numbers one off, the total without
// the table, the block's norm and gates counted nowhere; no test looked)
static void test_show_params_and_model(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, "%s:init seed=5\n:show params\n", SMALL);
    expect_ok(script);
    assert_null(strstr(out, "frozen"));  // every arm on
    snprintf(script, sizeof script, "%s:init seed=5\n:arm kda off\n:arm moe off\n:show params\n", SMALL);
    expect_ok(script);
    expect_out("\n  ctrl.w           [3, 32]                    96  adamw (rows 0,2 frozen: kda,moe off)\n");
    expect_out("\n  ctrl.b           [3]                         3  adamw-1d (rows 0,2 frozen: kda,moe off)\n");
    expect_out("\n  kda.wq           [32, 32]                 1024  muon (frozen: kda off)\n");
    expect_out("\n  moe.U1           [2, 64, 8]               1024  muon (orthonormal) (frozen: moe off)\n");
    expect_out("\n  mem.wk           [32, 24]                  768  muon\n");  // engram is on
    expect_out("\n  engram.tables    [3, 257, 8]              6168  adam-table\n");
    snprintf(script, sizeof script, "%s:init seed=5\n:arm engram off\n:show params\n", SMALL);
    expect_ok(script);
    expect_out("\n  ctrl.w           [3, 32]                    96  adamw (row 1 frozen: engram off)\n");
    expect_out("\n  mem.wk           [32, 24]                  768  muon (frozen: engram off)\n");
    // the counts: every tensor's, summed, is the line's total, and the total is compute + table
    long long comp, tab, sum, numel_sum = 0;
    totals(out, "params:", &comp, &tab, &sum);
    for (const char *l = strstr(out, "\n  "); l && l < strstr(out, "params:"); l = strstr(l + 1, "\n  ")) {
        long long n;
        // "  NAME  [shape]  numel  optimizer": the shape holds spaces, the count follows its ']'
        const char *rb = strchr(l + 1, ']');
        assert_non_null(rb);
        assert_int_equal(sscanf(rb + 1, " %lld", &n), 1);
        numel_sum += n;
    }
    if (numel_sum != comp + tab || sum != comp + tab)
        print_error("tensors %lld, compute %lld + table %lld, total %lld\n%s\n", numel_sum, comp, tab, sum, out);
    assert_int_equal(tab, 6168);  // 3 orders x 257 rows x 8
    assert_int_equal(numel_sum, comp + tab);
    assert_int_equal(sum, comp + tab);
    // :show model: its parts add up to the compute count and the table (the block's norm and the
    // controller's tensors are the "block:" part's)
    snprintf(script, sizeof script, "%s:set loss=final\n:init seed=5\n:show model\n", SMALL);
    expect_ok(script);
    expect_out("dormouse: d=32, one block iterated L=2 times (weights shared), loss=final\n");
    expect_out("E=2 top-1, rank 8, hidden 64\n");
    expect_out("3 orders x 257 rows x 8\n");
    long long mcomp, mtab, msum;
    totals(out, "  total", &mcomp, &mtab, &msum);
    assert_int_equal(mcomp, comp);
    assert_int_equal(mtab, tab);
    long long parts = 0;
    const char *end = strstr(out, "  total");
    for (const char *l = strchr(out, '\n'); l && l + 1 < end; l = strchr(l + 1, '\n')) {
        // "  PART (52 wide)  COUNT  DETAIL": the count starts at column 2 + 52 + 1
        if (strncmp(l + 1, "  ", 2)) continue;
        parts += atoll(l + 1 + 2 + 52 + 1);
    }
    if (parts != comp + tab) print_error("parts %lld, compute %lld + table %lld\n%s\n", parts, comp, tab, out);
    assert_int_equal(parts, comp + tab);
    // (the block part: blk_norm 32 + ctrl.w 96 + ctrl.b 3 + ctrl.router 64 + iter_emb 64)
    expect_out("  block: IterEmb, RMSNorm, controller                         259  ");
    snprintf(script, sizeof script, "%s:init seed=5\n:show model\n", SMALL);
    expect_ok(script);
    expect_out("(weights shared), loss=rec\n");
}

// :session's refusals of a name: a dot first (".", "..", a hidden directory) or DEL, as a '/'
// and the other control bytes are; the name of a session opened and left with nothing run is
// taken again; one whose metrics.tsv has rows and no checkpoint is refused with that said; a
// --replay child (DMSH_DIGEST) opens none (QA mutation, session 38: each could go unnoticed)
static void test_session_names(void **s) {
    (void)s;
    expect_error(":session .hid\n", "s.dm:1: error: session name '.hid': use a plain name (it becomes runs/NAME)");
    expect_error(":session ..\n", "s.dm:1: error: session name '..': use a plain name");
    expect_error(":session a\x7f" "b\n", "s.dm:1: error: session name with a control byte (0x7f): use a plain name");
    assert_int_equal(sh_in_dir("test ! -e runs/.hid && test ! -e 'runs/a\177b'%s", ""), 0);
    // opened, nothing run, left: the name is free again
    expect_ok(":session e1\n");
    expect_ok(":session e1\n");
    expect_out("session runs/e1\n");
    // rows and no checkpoint: refused, and why
    char script[1600];
    snprintf(script, sizeof script, ":session e2\n%s:data %s\n:init seed=2\n:step 2\n", SMALL, corpus);
    expect_ok(script);
    assert_int_equal(sh_in_dir("rm -f runs/e2/ckpt/*.ckpt runs/e2/ckpt/LATEST && test -s runs/e2/metrics.tsv%s", ""), 0);
    expect_error(":session e2\n", "runs/e2 already holds a run with no checkpoint (metrics.tsv; it stopped before its first save, so it "
                 "cannot be resumed): remove runs/e2 or choose a new name");
    // a --replay child leaves sessions alone
    write_file("rs.dm", ":session rs\n");
    assert_int_equal(sh_in_dir("DMSH_DIGEST=rs.dig %s --norc -b rs.dm > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    expect_out("session runs/rs not opened: a --replay run leaves sessions alone\n");
    assert_int_equal(file_size("runs/rs"), -1);
}

// The eta's words: a checkpoint already timed is in the estimate, not named; the ones before are
// counted right (QA mutation, session 38: a timed checkpoint was still named "not yet timed").
// The last line of a run with neither evals nor checkpoints has nothing left: "eta 0s" (its steps
// part is the steps left, 0, whatever the clock said; taken over the run's steps instead it was
// the run's own time).
static void test_eta_words(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=4\n:train 40 log_every=10 ckpt_every=10 eval_every=0\n", SMALL, corpus);
    expect_ok(script);
    static const char *const want[] = {"step 9 loss", " + 4 checkpoints not yet timed\n", "checkpoint ", "step 19 loss", "s\ncheckpoint ",
                                       "step 29 loss", "s\ncheckpoint ", "step 39 loss", "s\ncheckpoint "};
    const char *p = out;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const char *q = strstr(p, want[i]);
        if (!q) print_error("'%s' not found after:\n%s\n", want[i], p);
        assert_non_null(q);
        if (want[i][0] != 's' && want[i][0] != 'c') assert_null(memchr(p, '\n', (size_t)(q - p)));  // on that step's line
        p = q + strlen(want[i]);
    }
    int named = 0;  // (only before the first checkpoint)
    for (const char *q = out; (q = strstr(q, "not yet timed")); q++) named++;
    assert_int_equal(named, 1);
    snprintf(script, sizeof script, "%s:set batch=64\n:data %s\n:init seed=4\n:train %d log_every=%d eval_every=0 ckpt_every=0\n", SMALL,
             corpus, ETA_STEPS, ETA_STEPS);
    expect_ok(script);
    char last[64];
    snprintf(last, sizeof last, "step %d loss ", ETA_STEPS - 1);
    const char *l = strstr(out, last);
    assert_non_null(l);
    const char *eol = strchr(l, '\n');
    assert_non_null(eol);
    if (!memmem(l, (size_t)(eol - l), " eta 0s", 7)) print_error("%s\n", out);
    assert_non_null(memmem(l, (size_t)(eol - l), " eta 0s", 7));
}

// An eval's words against the anchors follow its numbers: "beaten" when its BPB is below the
// anchor's, for each anchor apart. The untrained model (about 8 bits a byte) beats neither; after
// 150 steps it is below the unigram and above the 5-gram on any real text (QA mutation, session
// 38: the unigram's comparison flipped, or the 5-gram's word taken from the unigram's, went
// unnoticed: no test read the words)
static void test_eval_beaten_words(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=3\n:anchors\n:eval\n:train 150 eval_every=150 log_every=150\n", SMALL, corpus);
    expect_ok(script);
    int lines = 0, between = 0;
    for (const char *l = out; (l = strstr(l, "eval step ")); l++) {
        double b, u, k;
        char wu[16], wk[16];
        const char *at = strstr(l, " bpb "), *bar = strstr(l, " | unigram ");
        assert_non_null(at);
        assert_non_null(bar);
        assert_int_equal(sscanf(at, " bpb %lf", &b), 1);
        if (sscanf(bar, " | unigram %lf %15[^ ,]", &u, wu) != 2) fail();
        const char *g = strstr(bar, ", 5-gram ");
        assert_non_null(g);
        if (sscanf(g, ", 5-gram %lf %15s", &k, wk) != 2) fail();
        // ("NOT beaten" against the unigram, "not beaten" against the 5-gram: the first word)
        const char *wu_want = b < u ? "beaten" : "NOT", *wk_want = b < k ? "beaten" : "not";
        if (strcmp(wu, wu_want) || strcmp(wk, wk_want)) print_error("bpb %g unigram %g '%s', 5-gram %g '%s'\n%.*s\n", b, u, wu, k, wk, 200, l);
        assert_string_equal(wu, wu_want);
        assert_string_equal(wk, wk_want);
        between += k < b - 0.01 && b < u - 0.01;
        lines++;
    }
    assert_int_equal(lines, 2);
    expect_out(" NOT beaten, 5-gram ");  // (step 0: above both)
    assert_int_equal(between, 1);         // (step 150: between them, the case that tells the two words apart)
}

// A :train that an interrupt stopped inside its eval: the transcript's cut line says so (its
// replay runs that eval); one stopped between steps does not (QA mutation, session 38: with the
// mark never set, the transcript said nothing of the eval). The signal lands where it lands: the
// run is retried until one stop was inside an eval (with eval_every=1 and an eval of hundreds of
// batches, nearly every one is).
static void test_cut_in_eval_in_transcript(void **s) {
    (void)s;
    int in_eval = 0;
    char name[32] = "", cmd[2400];
    for (int t = 0; t < 5 && !in_eval; t++) {
        snprintf(name, sizeof name, "ce%d", t);
        snprintf(cmd, sizeof cmd, "(%s --norc -e ':preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 "
                 "batch=4' -e ':data %s' -e ':session %s' -e ':init seed=1' -e ':train 1000000 eval_every=1 log_every=1000000' > k.out 2>&1 & "
                 "p=$!; for i in $(seq 1200); do [ $(cat runs/%s/metrics.tsv 2>/dev/null | wc -l) -gt 4 ] && break; sleep 0.05; "
                 "done; kill -INT $p; wait $p; true)", dmsh, corpus, name, name);
        assert_int_equal(sh_in_dir("%s", cmd), 0);
        slurp_to("k.out", out, sizeof out);
        in_eval = strstr(out, ", in its eval (state intact;") != NULL;
    }
    if (!in_eval) print_error("no stop inside an eval in 5 tries:\n%s\n", out);
    assert_true(in_eval);
    char path[64], tr[1 << 14];
    snprintf(path, sizeof path, "runs/%s/transcript.dm", name);
    slurp_to(path, tr, sizeof tr);
    if (!strstr(tr, " by an interrupt, inside its eval (the replay runs that eval")) print_error("%s\n", tr);
    assert_non_null(strstr(tr, " by an interrupt, inside its eval (the replay runs that eval"));
    // between steps: no eval named
    snprintf(cmd, sizeof cmd, "(%s --norc -e ':preset nano; :set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 "
             "batch=4' -e ':data %s' -e ':session cb' -e ':init seed=1' -e ':train 1000000 eval_every=0 log_every=1000000' > k.out 2>&1 & "
             "p=$!; for i in $(seq 1200); do [ $(cat runs/cb/metrics.tsv 2>/dev/null | wc -l) -gt 12 ] && break; sleep 0.05; "
             "done; kill -INT $p; wait $p; true)", dmsh, corpus);
    assert_int_equal(sh_in_dir("%s", cmd), 0);
    slurp_to("runs/cb/transcript.dm", tr, sizeof tr);
    if (!strstr(tr, " by an interrupt; the next line takes ")) print_error("%s\n", tr);
    assert_non_null(strstr(tr, " by an interrupt; the next line takes "));
    assert_null(strstr(tr, "inside its eval"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_list_first_sentences),
        cmocka_unit_test(test_help_each_arm),
        cmocka_unit_test(test_show_params_and_model),
        cmocka_unit_test(test_session_names),
        cmocka_unit_test(test_eta_words),
        cmocka_unit_test(test_eval_beaten_words),
        cmocka_unit_test(test_cut_in_eval_in_transcript),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
