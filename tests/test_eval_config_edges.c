// test_eval_config_edges.c — the eval (SPEC §5) and the config (SPEC §1) at their edges: a held-out
// split of one sequence, anchors kept across a held-out change made in place, the tokens an eval row
// carries; a config line of exactly the buffer's size, order 0, the decay bound at exactly 2, a
// real key just past its maximum. (QA mutation, session 41: each test names the mutant of
// engine/eval.c or engine/config.c it fails on.)
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include "step_fixture.h"
#include "../engine/ngram.h"

// a copy of the fixture's corpus that a test may change (unlinked by the caller)
static void copy_corpus(char *out, size_t n, const char *tag) {
    snprintf(out, n, "/tmp/dm_evcfg_%s_%d.txt", tag, (int)getpid());
    FILE *in = fopen(corpus, "rb"), *o = fopen(out, "wb");
    assert_non_null(in);
    assert_non_null(o);
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, k, o), k);
    fclose(in);
    fclose(o);
}

static void engine_on(Engine *e, Config c, const char *path, const char *eval_path) {
    dm_err err = {0};
    engine_init(e);
    e->cfg = c;
    e->be = backend_cpu();
    if (engine_build(e, 17, &err)) fail_msg("engine_build: %s", err.msg);
    if (engine_open_data(e, path, eval_path, &err)) fail_msg("engine_open_data: %s", err.msg);
}

// QA mutation, session 41 (E01: engine_eval_window's `*nseq >= 1` as `> 1`): a held-out split of
// one sequence (n_eval - 1 in [seq, 2 seq)) with eval_bytes larger is a window of one sequence.
// The one-sequence window tested before came from eval_bytes = seq, where the mutant fell through
// to config_validate_eval and passed; here it said "holds no full sequence" for a split that holds one.
static void test_heldout_split_of_one_sequence(void **s) {
    (void)s;
    char ev[128];
    snprintf(ev, sizeof ev, "/tmp/dm_evcfg_one_%d.txt", (int)getpid());
    FILE *f = fopen(ev, "wb");
    assert_non_null(f);
    Rng r = {4141};
    uint8_t b[40];
    for (int i = 0; i < 40; i++) b[i] = (uint8_t)('a' + rng_next(&r) % 26);
    assert_int_equal(fwrite(b, 1, sizeof b, f), sizeof b);
    fclose(f);
    Config c = tiny_config();
    c.seq = 32;
    c.eval_bytes = 262144;
    Engine e;
    engine_on(&e, c, corpus, ev);
    dm_err err = {0};
    int64_t nseq = -1;
    int rc = engine_eval_window(&e, &nseq, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(nseq, 1);
    EvalResult er;
    rc = engine_eval(&e, 0, &er, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(er.nseq, 1);
    assert_int_equal(er.window, 32);
    // the set id hashes the 32 inputs and the one target byte: b[0..32]
    int bytes[33];
    for (int i = 0; i < 33; i++) bytes[i] = b[i];
    assert_int_equal(er.eval_set, eval_set_end(eval_set_add(eval_set_begin(), bytes, 33)));
    engine_free(&e);
    unlink(ev);
}

// QA mutation, session 41 (E05: engine_anchors_for without the eval-set comparison): the set id
// is the only guard when the held-out bytes change in place (same size, same window, same fit):
// engine_corpus_check takes the new fingerprints and keeps the anchors. Every anchors test
// changed the window, the fit or the corpus, each dropping the anchors by another guard; the
// mutant gave eval lines anchors scored on the old held-out bytes.
static void test_anchors_dropped_when_heldout_changes_in_place(void **s) {
    (void)s;
    char p[128];
    copy_corpus(p, sizeof p, "anch");
    Config c = tiny_config();
    Engine e;
    engine_on(&e, c, p, NULL);
    dm_err err = {0};
    assert_int_equal(engine_anchors(&e, &err), 0);
    EvalResult r1, r2;
    assert_int_equal(engine_eval(&e, 0, &r1, &err), 0);
    assert_int_equal(r1.window, 63);  // 64 / 9 = 7 sequences of 9
    const Anchors *a = engine_anchors_for(&e, r1.window, r1.eval_set);
    assert_non_null(a);  // the anchors are this eval's
    assert_int_equal(a->eval_set, r1.eval_set);
    // the first 40 bytes of the held-out split rewritten in place (random letters: same size)
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    Rng rg = {4242};
    char nb[40];
    for (int i = 0; i < 40; i++) nb[i] = (char)('A' + rng_next(&rg) % 26);
    assert_int_equal(pwrite(fd, nb, sizeof nb, (off_t)e.data.eval_off), (ssize_t)sizeof nb);
    close(fd);
    assert_int_equal(engine_eval(&e, 0, &r2, &err), 0);
    assert_int_equal(r2.window, r1.window);
    assert_int_not_equal(r2.eval_set, r1.eval_set);  // (the fixture: the window's bytes changed)
    assert_int_equal(e.has_anchors, 1);               // (kept: only the set id tells them apart)
    assert_null(engine_anchors_for(&e, r2.window, r2.eval_set));
    assert_non_null(engine_anchors_for(&e, r1.window, r1.eval_set));  // (the guard, not a drop)
    // anchors fit again are this eval's
    assert_int_equal(engine_anchors(&e, &err), 0);
    assert_non_null(engine_anchors_for(&e, r2.window, r2.eval_set));
    engine_free(&e);
    unlink(p);
}

// QA mutation, session 41 (E10: eval rows without `row.tokens = e->tokens`): an eval row carries
// the tokens trained on before it (:plot bpb x=tokens, metrics.tsv); only train rows' tokens were
// read by a test, and the mutant drew every eval at x = 0.
static void test_eval_rows_carry_tokens(void **s) {
    (void)s;
    Engine e;
    make_engine(&e, backend_cpu(), tiny_config());
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(e.tokens, 3 * 2 * 9);  // 3 steps of batch 2 x seq 9
    EvalResult er;
    int before = e.nrows;
    assert_int_equal(engine_eval(&e, 0, &er, &err), 0);
    assert_int_equal(e.nrows, before + 3);  // one row per depth (L 3)
    for (int i = before; i < e.nrows; i++) {
        assert_int_equal(e.rows[i].kind, 1);
        assert_int_equal(e.rows[i].step, 3);
        assert_int_equal(e.rows[i].tokens, 54);
    }
    assert_int_equal(engine_step(&e, &row, &err), 0);
    assert_int_equal(engine_eval(&e, 2, &er, &err), 0);
    assert_int_equal(e.rows[e.nrows - 1].depth, 2);
    assert_int_equal(e.rows[e.nrows - 1].tokens, 72);
    engine_free(&e);
}

// QA mutation, session 41 (G04: config_apply_text's `len >= sizeof buf` as `>`): a line of exactly
// 1024 bytes (the buffer's size) must be refused: the mutant took it and wrote its terminator one
// byte past the stack buffer (a checkpoint's config section, a preset, config.dm). 1023 is taken.
static void test_config_line_of_buffer_size(void **s) {
    (void)s;
    char text[1100];
    const char *set = ":set d=256 H=4";
    for (int len = 1023; len <= 1025; len++) {
        memset(text, ' ', sizeof text);
        memcpy(text, set, strlen(set));
        text[len - 1] = '7';  // the line ends in a word, so trailing blanks do not matter
        text[len - 2] = '=';
        text[len - 3] = 'r';
        text[len] = 0;
        assert_int_equal(strlen(text), (size_t)len);
        Config c;
        config_defaults(&c);
        dm_err err = {0};
        int rc = config_apply_text(&c, text, "x.dm", &err);
        if (len == 1023) {
            if (rc) print_error("len %d: %s\n", len, err.msg);
            assert_int_equal(rc, 0);
            assert_int_equal(c.d, 256);
            assert_int_equal(c.r, 7);
        } else {
            if (!rc) print_error("a line of %d bytes was taken\n", len);
            assert_int_equal(rc, 1);
            assert_string_equal(err.msg, "x.dm:1: line too long");
        }
    }
    // on a later line, after a newline: named by its number
    char two[1100];
    snprintf(two, sizeof two, ":set d=256\n");
    size_t o = strlen(two);
    memset(two + o, ' ', 1024);
    memcpy(two + o, "r=7", 3);
    two[o + 1024] = 0;
    Config c;
    config_defaults(&c);
    dm_err err = {0};
    assert_int_equal(config_apply_text(&c, two, "y.dm", &err), 1);
    assert_string_equal(err.msg, "y.dm:2: line too long");
}

// expect a refusal naming NEEDLE, the Config unchanged
static void expect_err(Config *c, const char *k, const char *v, const char *needle) {
    dm_err e = {0};
    Config before = *c;
    int rc = config_set(c, k, v, &e);
    if (rc == 0) print_error("%s=%s was taken\n", k, v);
    assert_int_not_equal(rc, 0);
    if (!strstr(e.msg, needle)) print_error("message '%s' lacks '%s'\n", e.msg, needle);
    assert_non_null(strstr(e.msg, needle));
    assert_memory_equal(&before, c, sizeof before);
}

// QA mutation, session 41 (G07: engram_orders without `v < k->min`): order 0, an n-gram of no
// bytes (every position hashes to one row per table), is outside SPEC §3's 1..16. The tests had 17
// and "-3" (refused by the digit test, not by the minimum). G09 (real keys without `v > k->max`):
// test_config had no real key above its maximum; beta1 = 1 would divide by 1 - beta1^t = 0.
static void test_key_minimum_and_maximum(void **s) {
    (void)s;
    Config c;
    config_defaults(&c);
    expect_err(&c, "engram_orders", "0", "bad value '0' for engram_orders: expected 1..8 distinct orders in 1..16");
    expect_err(&c, "engram_orders", "2,0", "bad value '2,0' for engram_orders: expected 1..8 distinct orders in 1..16");
    expect_err(&c, "engram_orders", "0,3", "1..8 distinct orders in 1..16");
    dm_err e = {0};
    assert_int_equal(config_set(&c, "engram_orders", "1,16", &e), 0);
    assert_int_equal(c.n_orders, 2);
    assert_int_equal(c.engram_orders[0], 1);
    assert_int_equal(c.engram_orders[1], 16);
    expect_err(&c, "beta1", "1", "bad value '1' for beta1: expected a number in [0, 0.999999]");
    expect_err(&c, "beta1", "0.9999991", "beta1");
    expect_err(&c, "lr", "10.5", "bad value '10.5' for lr: expected a number in [0, 10]");
    assert_int_equal(config_set(&c, "beta1", "0.999999", &e), 0);
    assert_true(c.beta1 == 0.999999);
    assert_int_equal(config_set(&c, "lr", "10", &e), 0);
    assert_true(c.lr == 10);
}

// QA mutation, session 41 (G01: config_validate_decay's `p > 2` as `>=`): SPEC's refusal is above
// lr x wd = 2 (the factor 1 - 2 = -1 flips the sign but does not grow the weights); the tests used
// 2.5, 2.7, 2.2 and 1, never 2. 0.25 x 8 is exactly 2.0 in binary: taken, with the > 1 note. The
// :stress multiplier's bound the same: lr_mult = 2 on lr 0.125 x wd 8.
static void test_decay_bound_at_exactly_two(void **s) {
    (void)s;
    Config c;
    config_defaults(&c);
    dm_err e = {0};
    assert_int_equal(config_set(&c, "lr", "0.25", &e), 0);
    assert_int_equal(config_set(&c, "wd", "8", &e), 0);
    assert_true(c.lr * c.wd == 2.0 && c.lr_muon * c.wd < 2.0);
    int rc = config_validate_decay(&c, 1, &e);
    if (rc) print_error("%s\n", e.msg);
    assert_int_equal(rc, 0);
    char note[256];
    assert_int_equal(config_decay_note(&c, note, sizeof note), 1);
    assert_non_null(strstr(note, "lr x wd = 2 > 1: the decoupled decay multiplies the weights by -1 each step"));
    assert_int_equal(config_set(&c, "wd", "8.5", &e), 0);
    assert_int_equal(config_validate_decay(&c, 1, &e), 1);
    assert_non_null(strstr(e.msg, "lr x wd = 0.25 x 8.5 = 2.125 > 2"));
    // the multiplier: 0.125 x 2 x 8 = 2 taken, x 2.5 refused
    assert_int_equal(config_set(&c, "lr", "0.125", &e), 0);
    assert_int_equal(config_set(&c, "wd", "8", &e), 0);
    rc = config_validate_decay(&c, 2, &e);
    if (rc) print_error("%s\n", e.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(config_validate_decay(&c, 2.5, &e), 1);
    assert_non_null(strstr(e.msg, "lr_mult=2.5 makes lr x wd = 0.3125 x 8 = 2.5 > 2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heldout_split_of_one_sequence),
        cmocka_unit_test(test_anchors_dropped_when_heldout_changes_in_place),
        cmocka_unit_test(test_eval_rows_carry_tokens),
        cmocka_unit_test(test_config_line_of_buffer_size),
        cmocka_unit_test(test_key_minimum_and_maximum),
        cmocka_unit_test(test_decay_bound_at_exactly_two),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
