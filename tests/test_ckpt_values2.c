// test_ckpt_values2.c — more of engine_load's checks of a checkpoint whose CRCs are right but
// whose numbers or paths no run writes (test_ckpt_values.c's cases, one value each, that a
// mutation pass found untested: QA mutation, session 41), and two of ckpt_write's temp-file and
// replace rules. Each case rewrites one value of a real checkpoint and recomputes the CRCs
// (ckpt_write); a plausible value at the same place loads, so a refusal is the value's doing.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../engine/ckpt.h"
#include "../engine/ckpt_state.h"
#include <stddef.h>
#include <stdint.h>
#include "ckpt_edit.h"

#define COUNT_MAX (1LL << 56)  // engine_ckpt.c's CK_COUNT_MAX: counters no run reaches

static char corpus[64] = "", good[64] = "", good0[64] = "";
static char last_note[1400];  // load_bytes: the load's note, and whether a corpus opened
static int last_has_data;
static CkptState good_st;     // good's state section as written

// test_ckpt_values.c's model (trained 4 steps, saved as good) and the same model at step 0,
// saved before any step (good0)
static int setup(void **s) {
    (void)s;
    snprintf(corpus, sizeof corpus, "/tmp/dm_ckv2_corpus_XXXXXX");
    int fd = mkstemp(corpus);
    if (fd < 0) return 1;
    FILE *f = fdopen(fd, "w");
    Rng r = {7};
    const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran.\n", "so "};
    for (int i = 0; i < 12000; i++) fputs(words[rng_next(&r) % 10], f);
    fclose(f);
    Engine e;
    engine_init(&e);
    config_defaults(&e.cfg);
    Config *c = &e.cfg;
    c->d = 8; c->H = 2; c->L = 2; c->E = 2; c->k = 1; c->r = 2; c->f = 6;
    c->engram_rows = 13; c->engram_dim = 3; c->n_orders = 2; c->engram_orders[0] = 2; c->engram_orders[1] = 3;
    c->seq = 9; c->batch = 2; c->warmup = 2; c->eval_bytes = 64;
    e.be = backend_cpu();
    dm_err err = {0};
    if (engine_build(&e, 5, &err) || engine_open_data(&e, corpus, NULL, &err)) return 1;
    snprintf(good0, sizeof good0, "/tmp/dm_ckv2_good0_%d.ckpt", (int)getpid());
    if (engine_save(&e, good0, &err)) return 1;
    MetricRow row;
    for (int i = 0; i < 4; i++)
        if (engine_step(&e, &row, &err)) return 1;
    snprintf(good, sizeof good, "/tmp/dm_ckv2_good_%d.ckpt", (int)getpid());
    if (engine_save(&e, good, &err)) return 1;
    engine_free(&e);
    CkptFile cf;
    if (ckpt_read(good, &cf, &err)) return 1;
    const CkptSection *ss = ckpt_find(&cf, "state");
    if (!ss || ss->size != sizeof good_st) return 1;
    memcpy(&good_st, ss->data, sizeof good_st);
    ckpt_close(&cf);
    return 0;
}
static int teardown(void **s) {
    (void)s;
    unlink(corpus);
    unlink(good);
    unlink(good0);
    return 0;
}

// good with one edit (write_edit), loaded into a fresh engine: its note and corpus kept
static int load_bytes(const char *name, size_t off, const void *bytes, size_t n, dm_err *err) {
    char path[80];
    snprintf(path, sizeof path, "/tmp/dm_ckv2_edit_%d.ckpt", (int)getpid());
    write_edit(good, path, name, off, bytes, n);
    Engine b;
    engine_init(&b);
    b.be = backend_cpu();
    int rc = engine_load(&b, path, err);
    const char *nt = engine_notice(&b);
    snprintf(last_note, sizeof last_note, "%s", nt ? nt : "");
    last_has_data = b.has_data;
    engine_free(&b);
    unlink(path);
    return rc;
}

#define EXPECT_BYTES_REFUSED(name, off, value, needle)                                    \
    do {                                                                                  \
        __typeof__(value) v_ = (value);                                                   \
        dm_err e_ = {0};                                                                  \
        int rc_ = load_bytes(name, off, &v_, sizeof v_, &e_);                             \
        if (rc_ != 1 || !strstr(e_.msg, needle)) print_error("%s @%zu: rc %d, %s\n", name, (size_t)(off), rc_, e_.msg); \
        assert_int_equal(rc_, 1);                                                         \
        assert_non_null(strstr(e_.msg, needle));                                          \
    } while (0)
#define EXPECT_BYTES_LOAD(name, off, value)                                               \
    do {                                                                                  \
        __typeof__(value) v_ = (value);                                                   \
        dm_err e_ = {0};                                                                  \
        int rc_ = load_bytes(name, off, &v_, sizeof v_, &e_);                             \
        if (rc_) print_error("%s @%zu: %s\n", name, (size_t)(off), e_.msg);               \
        assert_int_equal(rc_, 0);                                                         \
    } while (0)

// QA mutation, session 41: the state's step and optimizer-step bounds (K10, K11) had no test:
// only tokens and skips were edited. A negative opt_t loaded, and the next AdamW step's bias
// correction 1 - beta^(t+1) is 0 at t = -1: a division by zero into every weight. A step or
// opt_t past 2^50 loaded too (and widened the row-count bound, which uses the larger). Each
// bound is tested at its edge: 2^50 loads, 2^50 + 1 does not.
static void test_step_and_opt_t_bounded(void **s) {
    (void)s;
    char want[200];
    EXPECT_BYTES_LOAD("state", offsetof(CkptState, opt_t), (int64_t)3);
    EXPECT_BYTES_LOAD("state", offsetof(CkptState, opt_t), (int64_t)(1LL << 50));
    EXPECT_BYTES_LOAD("state", offsetof(CkptState, step), (int64_t)(1LL << 50));
    snprintf(want, sizeof want, "impossible counters in the state section (step 4, tokens %lld, optimizer steps -1, skips 0): not loaded",
             (long long)good_st.tokens);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, opt_t), (int64_t)-1, want);
    snprintf(want, sizeof want, "impossible counters in the state section (step 4, tokens %lld, optimizer steps 1125899906842625, skips 0)",
             (long long)good_st.tokens);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, opt_t), (int64_t)((1LL << 50) + 1), want);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, opt_t), (int64_t)INT64_MAX, "optimizer steps 9223372036854775807, skips 0)");
    snprintf(want, sizeof want, "impossible counters in the state section (step 1125899906842625, tokens %lld, optimizer steps 4,",
             (long long)good_st.tokens);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, step), (int64_t)((1LL << 50) + 1), want);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, step), (int64_t)INT64_MAX, "impossible counters in the state section (step 9223372036854775807,");
}

// QA mutation, session 41: an arm's backward count (K08) and a negative orthogonality error
// (K09) were unchecked by any test (only arms_fwd INT64_MAX and a NaN orth_err were): a
// hand-made backward count overflows in engine_step as the forward one did. -1 is the "never
// measured" value a run writes, and loads; -0.5 is no value a run writes.
static void test_arm_backward_and_orth_err_bounded(void **s) {
    (void)s;
    char want[200];
    EXPECT_BYTES_LOAD("state", offsetof(CkptState, arms_bwd), (int64_t)2);
    snprintf(want, sizeof want, "impossible arm state in the state section (kda: on %d, forward %lld, backward 9223372036854775807): not loaded",
             good_st.arms_on[0], (long long)good_st.arms_fwd[0]);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, arms_bwd), (int64_t)INT64_MAX, want);
    snprintf(want, sizeof want, "(kda: on %d, forward %lld, backward -1): not loaded", good_st.arms_on[0], (long long)good_st.arms_fwd[0]);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, arms_bwd), (int64_t)-1, want);
    snprintf(want, sizeof want, "(moe: on %d, forward %lld, backward %lld): not loaded", good_st.arms_on[2],
             (long long)good_st.arms_fwd[2], (long long)COUNT_MAX + 1);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, arms_bwd) + 2 * sizeof(int64_t), (int64_t)(COUNT_MAX + 1), want);
    EXPECT_BYTES_LOAD("state", offsetof(CkptState, last_orth_err), (double)-1);
    EXPECT_BYTES_LOAD("state", offsetof(CkptState, last_orth_err), (double)0.375);
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, last_orth_err), (double)-0.5,
                         "impossible orthogonality error -0.5 in the state section: not loaded");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, last_orth_err), (double)INFINITY, "impossible orthogonality error inf");
}

// QA mutation, session 41: check_rows' fields one by one (K01-K07): each check could be dropped
// with every test passing (only step 99, kind 9, expert_frac 3e38, emulated and arms_off were
// edited). :plot draws lr and tokens, sums and indexes by skipped, and :sessions quotes depth.
static void test_each_row_field_checked(void **s) {
    (void)s;
    size_t row1 = sizeof(MetricRow);
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, step), (int64_t)-1, "section 'metrics' row 1 (step -1) has an impossible step: not loaded");
    EXPECT_BYTES_LOAD("metrics", row1 + offsetof(MetricRow, tokens), (int64_t)COUNT_MAX);
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, tokens), (int64_t)-1, "row 1 (step 1) has an impossible tokens: not loaded");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, tokens), (int64_t)(COUNT_MAX + 1), "row 1 (step 1) has an impossible tokens");
    EXPECT_BYTES_LOAD("metrics", row1 + offsetof(MetricRow, lr), (double)0);
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, lr), (double)NAN, "row 1 (step 1) has an impossible lr: not loaded");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, lr), (double)-1, "row 1 (step 1) has an impossible lr");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, lr), (double)INFINITY, "row 1 (step 1) has an impossible lr");
    EXPECT_BYTES_LOAD("metrics", row1 + offsetof(MetricRow, skipped), (int16_t)1);
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, skipped), (int16_t)2, "row 1 (step 1) has an impossible skipped: not loaded");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, skipped), (int16_t)-1, "row 1 (step 1) has an impossible skipped");
    EXPECT_BYTES_LOAD("metrics", row1 + offsetof(MetricRow, expert_frac) + 4, (float)0.625f);
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, expert_frac) + 4, (float)-0.5f, "row 1 (step 1) has an impossible expert_frac");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, expert_frac) + 4, (float)NAN, "row 1 (step 1) has an impossible expert_frac");
    // an eval row (written whole: kind and depth are not adjacent) at depth 1..L, window >= 0
    CkptFile f;
    dm_err e0 = {0};
    if (ckpt_read(good, &f, &e0)) fail_msg("%s", e0.msg);
    const CkptSection *sm = ckpt_find(&f, "metrics");
    assert_true(sm && sm->size >= 2 * sizeof(MetricRow));
    MetricRow ev;
    memcpy(&ev, (const char *)sm->data + row1, sizeof ev);
    ckpt_close(&f);
    ev.kind = 1;
    ev.bpb = 7.25;
    ev.window = 0;
    ev.depth = 1;
    EXPECT_BYTES_LOAD("metrics", row1, ev);
    ev.depth = 0;
    EXPECT_BYTES_REFUSED("metrics", row1, ev, "section 'metrics' row 1 (step 1) has an impossible depth or window: not loaded");
    ev.depth = 2;
    ev.window = -1;
    EXPECT_BYTES_REFUSED("metrics", row1, ev, "section 'metrics' row 1 (step 1) has an impossible depth or window: not loaded");
}

// QA mutation, session 41 (K12): data.split's training bytes below 0 (only INT64_MAX training and
// -1 held-out bytes were tested); and the held-out bytes just past the bound
static void test_split_bounded_both_ways(void **s) {
    (void)s;
    int64_t sp[2] = {-1, 5000};
    dm_err err = {0};
    int rc = load_bytes("data.split", 0, sp, sizeof sp, &err);
    if (rc != 1) print_error("rc %d, %s\n", rc, err.msg);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err.msg, "impossible corpus split in the data.split section (-1 training, 5000 held-out bytes): not loaded"));
    int64_t sp2[2] = {5000, COUNT_MAX + 1};
    assert_int_equal(load_bytes("data.split", 0, sp2, sizeof sp2, &err), 1);
    assert_non_null(strstr(err.msg, "(5000 training, 72057594037927937 held-out bytes)"));
}

// QA mutation, session 41 (K30): a NUL inside the eval file's path (data.eval) made it a shorter
// C string naming another file (the "/tmp/\0x" case of session 29, for eval=); only the corpus
// path's NUL was tested. Here the eval path reads, up to its NUL, as the corpus itself, which
// opens: the load must open nothing and say why.
static void test_eval_path_with_nul(void **s) {
    (void)s;
    dm_err err = {0};
    char bad[80];
    size_t n = (size_t)snprintf(bad, sizeof bad, "%s", corpus);
    bad[n] = 0;
    bad[n + 1] = 'x';   // "<corpus>\0x"
    assert_int_equal(load_bytes("data.eval", SIZE_MAX, bad, n + 2, &err), 0);
    if (last_has_data || !strstr(last_note, "eval file path holds a NUL byte")) print_error("has_data %d, note: %s\n", last_has_data, last_note);
    assert_int_equal(last_has_data, 0);
    assert_non_null(strstr(last_note, "the checkpoint's eval file path holds a NUL byte (not a path dmsh writes), so no corpus is open"));
}

// QA mutation, session 41 (K37): an older file with an absolute corpus path and a relative eval=
// path opened whatever file has that name in this process's directory as its held-out split, in
// silence (session 32's bug, for the eval file; only the relative corpus path was tested through
// engine_load). A file of that name is there, so opening it would succeed.
static void test_relative_eval_not_opened(void **s) {
    (void)s;
    char tdir[64] = "/tmp/dm_ckv2_rel_XXXXXX", cwd[1024];
    assert_non_null(mkdtemp(tdir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tdir), 0);
    FILE *f = fopen("c.txt", "w");   // the wrong held-out file, under that name
    assert_non_null(f);
    for (int i = 0; i < 300; i++) fputs("another held-out text. ", f);
    fclose(f);
    dm_err err = {0};
    int rc = load_bytes("data.eval", SIZE_MAX, "c.txt", 5, &err);
    unlink("c.txt");
    assert_int_equal(chdir(cwd), 0);
    rmdir(tdir);
    assert_int_equal(rc, 0);
    if (last_has_data || !strstr(last_note, "names its eval file 'c.txt' relative")) print_error("has_data %d, note: %s\n", last_has_data, last_note);
    assert_int_equal(last_has_data, 0);
    assert_non_null(strstr(last_note, "the checkpoint (an older dmsh's) names its eval file 'c.txt' relative to the directory that run was in"));
}

// QA mutation, session 41 (K38): a corpus path of exactly 1024 bytes (sizeof data_path) must be
// refused by its length: taken, its terminator went one byte past a 1024-byte stack array and
// the path was opened. 1023 bytes is within the limit: it is tried (and does not open).
static void test_corpus_path_at_the_limit(void **s) {
    (void)s;
    char p[1100];
    memcpy(p, "/tmp/", 5);
    Rng r = {41};
    for (int i = 5; i < 1100; i++) p[i] = (char)('a' + rng_next(&r) % 26);
    dm_err err = {0};
    assert_int_equal(load_bytes("data", SIZE_MAX, p, 1024, &err), 0);
    if (!strstr(last_note, "corpus path is 1024 bytes")) print_error("note: %s\n", last_note);
    assert_int_equal(last_has_data, 0);
    assert_non_null(strstr(last_note, "the checkpoint's corpus path is 1024 bytes, longer than this dmsh takes (1023), so no corpus is open"));
    assert_int_equal(load_bytes("data", SIZE_MAX, p, 1023, &err), 0);
    assert_int_equal(last_has_data, 0);
    if (!strstr(last_note, "the checkpoint's corpus did not open")) print_error("note: %s\n", last_note);
    assert_non_null(strstr(last_note, "the checkpoint's corpus did not open, so no corpus is open ("));
}

// load SRC without its data.trained section (a file older than it, session 39): the loaded
// model's trained_upto and the corpus's training bytes
static int64_t trained_upto_of_legacy(const char *src, int64_t *n_train) {
    char path[80];
    snprintf(path, sizeof path, "/tmp/dm_ckv2_legacy_%d.ckpt", (int)getpid());
    write_edit(src, path, "data.trained", SIZE_MAX, NULL, 0);
    Engine b;
    engine_init(&b);
    b.be = backend_cpu();
    dm_err err = {0};
    int rc = engine_load(&b, path, &err);
    unlink(path);
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(b.has_data, 1);
    int64_t t = b.trained_upto;
    *n_train = b.data.n_train;
    engine_free(&b);
    return t;
}

// QA mutation, session 41 (K15): a file older than data.trained says its steps drew from its
// split's training bytes; one saved at step 0 drew from none. trained_upto = n_train there made a
// later smaller :set eval_frac say the held-out split "starts inside the first N bytes" the
// model trained on, of a model that never trained.
static void test_legacy_step0_trained_nothing(void **s) {
    (void)s;
    int64_t n_train = 0;
    assert_int_equal(trained_upto_of_legacy(good0, &n_train), 0);
    assert_true(n_train > 1000);
    int64_t t4 = trained_upto_of_legacy(good, &n_train);   // at step 4: the split's training bytes
    assert_int_equal(t4, n_train);
}

static void spit_file(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

// QA mutation, session 41 (P01, P11): a writer killed between its temp file's create and its
// header leaves an empty PATH.<pid>.tmp: a later save removes it (only a "DMSHCKPT partial" one
// was tested; an empty one stayed forever under the mutant). And an existing empty file at PATH
// (`touch m.ckpt`, a file a crash left empty) is replaced, not refused as "not a dmsh checkpoint".
static void test_empty_files_are_ours(void **s) {
    (void)s;
    char dir[64] = "/tmp/dm_ckv2_tmp_XXXXXX", path[128], dead[160], kept[160];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.ckpt", dir);
    // 99999999 is above Linux's pid_max: kill() says ESRCH, a dead writer
    assert_int_not_equal(kill((pid_t)99999999, 0), 0);
    snprintf(dead, sizeof dead, "%s.99999999.tmp", path);
    snprintf(kept, sizeof kept, "%s.99999998.tmp", path);
    spit_file(dead, "", 0);
    spit_file(kept, "notes", 5);   // a dead pid's file that is no checkpoint: kept
    spit_file(path, "", 0);        // touch m.ckpt
    dm_err e = {0};
    CkptSection v = {.name = "params", .data = "q7Zr", .size = 4};
    int rc = ckpt_write(path, &v, 1, &e);   // (everything checked after the directory is removed)
    if (rc) print_error("%s\n", e.msg);
    CkptFile cf;
    int rrc = rc ? -1 : ckpt_read(path, &cf, &e), nsec = 0;
    char back[4] = "";
    if (!rrc) {
        nsec = cf.nsec;
        if (cf.sec[0].size == 4) memcpy(back, cf.sec[0].data, 4);
        ckpt_close(&cf);
    }
    int dead_left = access(dead, F_OK) == 0, kept_left = access(kept, F_OK) == 0;
    unlink(dead);
    unlink(kept);
    unlink(path);
    rmdir(dir);
    assert_int_equal(rc, 0);
    assert_int_equal(rrc, 0);
    assert_int_equal(nsec, 1);
    assert_memory_equal(back, "q7Zr", 4);
    assert_int_equal(dead_left, 0);
    assert_int_equal(kept_left, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_and_opt_t_bounded),
        cmocka_unit_test(test_arm_backward_and_orth_err_bounded),
        cmocka_unit_test(test_each_row_field_checked),
        cmocka_unit_test(test_split_bounded_both_ways),
        cmocka_unit_test(test_eval_path_with_nul),
        cmocka_unit_test(test_relative_eval_not_opened),
        cmocka_unit_test(test_corpus_path_at_the_limit),
        cmocka_unit_test(test_legacy_step0_trained_nothing),
        cmocka_unit_test(test_empty_files_are_ours),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
