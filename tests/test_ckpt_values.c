// test_ckpt_values.c — a checkpoint whose CRCs are right but whose numbers no run writes is
// refused at load, with one line naming the section (engine/ckpt_values.c; SPEC §6: loading
// verifies everything). Found by a QA pass (session 21): a hand-edited file with a negative row
// count loaded, and its next step wrote NaN into the Engram tables with the firewall blind to it.
// Each case rewrites one value of a real checkpoint and recomputes the CRCs (ckpt_write); the
// same rewrite of an untouched copy loads, so a refusal is the value's doing.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../engine/ckpt.h"
#include "../engine/ckpt_state.h"
#include "../sessions/session.h"
#include <stddef.h>
#include <stdint.h>
#include "ckpt_edit.h"

static char corpus[64] = "", good[64] = "";
static char last_note[900];  // load_bytes: the load's note, and whether a corpus opened
static int last_has_data;

static int setup(void **s) {
    (void)s;
    snprintf(corpus, sizeof corpus, "/tmp/dm_ckv_corpus_XXXXXX");
    int fd = mkstemp(corpus);
    if (fd < 0) return 1;
    FILE *f = fdopen(fd, "w");
    Rng r = {7};
    const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran.\n", "so "};
    for (int i = 0; i < 12000; i++) fputs(words[rng_next(&r) % 10], f);
    fclose(f);
    // a model trained 4 steps, saved
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
    MetricRow row;
    for (int i = 0; i < 4; i++)
        if (engine_step(&e, &row, &err)) return 1;
    snprintf(good, sizeof good, "/tmp/dm_ckv_good_%d.ckpt", (int)getpid());
    if (engine_save(&e, good, &err)) return 1;
    engine_free(&e);
    return 0;
}
static int teardown(void **s) {
    (void)s;
    unlink(corpus);
    unlink(good);
    char keep[80];
    snprintf(keep, sizeof keep, "/tmp/dm_ckv_last_%d.ckpt", (int)getpid());
    unlink(keep);
    return 0;
}

// good's config text with LINE appended (malloc'd; its length in *n)
static char *config_plus(const char *line, size_t *n) {
    CkptFile f;
    dm_err e0 = {0};
    if (ckpt_read(good, &f, &e0)) fail_msg("%s", e0.msg);
    const CkptSection *cs = ckpt_find(&f, "config");
    size_t ln = strlen(line);
    char *text = malloc(cs->size + ln + 1);
    memcpy(text, cs->data, cs->size);
    memcpy(text + cs->size, line, ln + 1);
    *n = cs->size + ln;
    ckpt_close(&f);
    return text;
}

// good with one edit (write_edit), loaded into a fresh engine: its note and corpus kept
static int load_bytes(const char *name, size_t off, const void *bytes, size_t n, dm_err *err) {
    char path[80];
    snprintf(path, sizeof path, "/tmp/dm_ckv_edit_%d.ckpt", (int)getpid());
    write_edit(good, path, name, off, bytes, n);
    Engine b;
    engine_init(&b);
    b.be = backend_cpu();
    int rc = engine_load(&b, path, err);
    char keep[80];  // (the edited file, for a test that gives it to dmsh itself)
    snprintf(keep, sizeof keep, "/tmp/dm_ckv_last_%d.ckpt", (int)getpid());
    if (rename(path, keep)) {}
    const char *nt = engine_notice(&b);
    snprintf(last_note, sizeof last_note, "%s", nt ? nt : "");
    last_has_data = b.has_data;
    engine_free(&b);
    unlink(path);
    return rc;
}

// good with element i of section NAME set to the value (a real, or an int64 for row counts);
// NAME NULL: the file rewritten unchanged
static int load_edited(const char *name, size_t i, double val, dm_err *err) {
    if (!name) {
        uint32_t rs = sizeof(real);  // (the state's first field, as written)
        return load_bytes("state", 0, &rs, sizeof rs, err);
    }
    if (!strcmp(name, "optim.row_steps")) {
        int64_t v = (int64_t)val;
        return load_bytes(name, i * sizeof v, &v, sizeof v, err);
    }
    real v = (real)val;
    return load_bytes(name, i * sizeof v, &v, sizeof v, err);
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

// QA, session 23: counters past what any run reaches loaded, and the next step overflowed them
// (tokens 2^63 - 1, an arm's forward count); arm flags of 7, NaN orth_err and rows of kind 9,
// depth 1e9 or shares of 3e38 loaded raw (the last overflowed :plot's sums, and wrote past a
// tick label); a real size of 0 read as "written by a float build, this dmsh is float"
static void test_counters_and_rows_checked(void **s) {
    (void)s;
    dm_err err = {0};
    int64_t tok = 12345;
    assert_int_equal(load_bytes("state", offsetof(CkptState, tokens), &tok, sizeof tok, &err), 0);  // a plausible one loads
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, tokens), (int64_t)INT64_MAX, "impossible counters in the state section");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, arms_fwd), (int64_t)INT64_MAX, "impossible arm state in the state section (kda");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, arms_on) + 4, (int32_t)7, "on 7");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, last_orth_err), (double)NAN, "impossible orthogonality error nan");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, real_size), (uint32_t)0, "names reals of 0 bytes (4 or 8 are written)");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, total_skips), (int64_t)INT64_MAX, "impossible counters in the state section");
    EXPECT_BYTES_REFUSED("state", offsetof(CkptState, consecutive_skips), (int32_t)INT32_MAX, "impossible counters in the state section");
    // a corpus split past any corpus: its sum overflowed at the load (QA, session 27)
    EXPECT_BYTES_REFUSED("data.split", 0, (int64_t)INT64_MAX, "impossible corpus split in the data.split section");
    EXPECT_BYTES_REFUSED("data.split", 8, (int64_t)-1, "impossible corpus split in the data.split section");
    double neg_ms = -3;  // a clock that stepped back: timings are not checked (never used)
    assert_int_equal(load_bytes("metrics", sizeof(MetricRow) + offsetof(MetricRow, ms), &neg_ms, sizeof neg_ms, &err), 0);
    size_t row1 = sizeof(MetricRow);
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, kind), (int)9, "section 'metrics' row 1 (step 1) has an impossible kind");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, step), (int64_t)99, "row 1 (step 99) has an impossible step");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, expert_frac) + 4, (float)3e38f, "impossible expert_frac");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, emulated), (int)1000000000, "impossible emulated");
    EXPECT_BYTES_REFUSED("metrics", row1 + offsetof(MetricRow, arms_off), (uint16_t)0x8000, "impossible arms_off");
    // a config edited to another shape: refused by its parameter count before a model of it is
    // built (it built a 3 GB model from an 8 MB file first, then blamed an older build)
    size_t tl;
    char *text = config_plus(":set d=8192 H=8 L=1\n", &tl);
    int rc = load_bytes("config", SIZE_MAX, text, tl, &err);
    free(text);
    if (rc != 1 || !strstr(err.msg, "an edited config): not loaded")) print_error("%s\n", err.msg);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err.msg, "its parameter layout is not the one its config makes in this dmsh (a file of an older build, or an edited config)"));
    double nan_loss = NAN;  // a step the firewall skipped records its NaN loss: that loads
    assert_int_equal(load_bytes("metrics", row1 + offsetof(MetricRow, loss), &nan_loss, sizeof nan_loss, &err), 0);
    // an eval row deeper than the model's L = 2 (QA mutation, session 39: the depth > L check
    // dropped, every test still passed; :plot and :sessions index by the depth). Row 1 becomes a
    // whole eval row (kind and depth are not adjacent: the row is written as one copy); the same
    // row at depth 2 loads, so the refusal is the depth's doing
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
    ev.window = 64;
    ev.depth = 2;
    if (load_bytes("metrics", row1, &ev, sizeof ev, &err)) print_error("%s\n", err.msg);
    assert_int_equal(load_bytes("metrics", row1, &ev, sizeof ev, &err), 0);
    ev.depth = 3;
    EXPECT_BYTES_REFUSED("metrics", row1, ev, "section 'metrics' row 1 (step 1) has an impossible depth or window");
}

static void expect_refused(const char *name, size_t i, double val, const char *needle) {
    dm_err err = {0};
    int rc = load_edited(name, i, val, &err);
    if (!rc || !strstr(err.msg, needle)) print_error("%s[%zu] = %g: rc %d, %s\n", name, i, val, rc, err.msg);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err.msg, needle));
}

static void test_values_checked(void **s) {
    (void)s;
    dm_err err = {0};
    if (load_edited(NULL, 0, 0, &err)) print_error("%s\n", err.msg);
    assert_int_equal(load_edited(NULL, 0, 0, &err), 0);  // the rewrite itself loads
    assert_int_equal(load_edited("optim.row_steps", 3, 2, &err), 0);  // a count within the run's steps
    expect_refused("optim.row_steps", 3, -1, "section 'optim.row_steps' holds -1 at row 3");
    expect_refused("optim.row_steps", 0, 5, "section 'optim.row_steps' holds 5 at row 0 (a row's update count is 0..4");
    expect_refused("params", 7, NAN, "section 'params' holds nan at index 7 (not finite)");
    expect_refused("optim.m", 2, INFINITY, "section 'optim.m' holds inf at index 2");
    expect_refused("optim.v", 11, -1e-9, "section 'optim.v' holds -1e-09 at index 11 (a second moment must be finite and >= 0)");
    expect_refused("optim.mom", 0, -INFINITY, "section 'optim.mom' holds -inf at index 0");
}

// A corpus path with a NUL in it names another file than the one written (a crafted "/tmp/\0zz"
// opened all of /tmp as the corpus: QA, session 29): no corpus is opened, and the note says why
static void test_corpus_path_with_nul(void **s) {
    (void)s;
    dm_err err = {0};
    assert_int_equal(load_bytes("data", SIZE_MAX, corpus, strlen(corpus), &err), 0);
    assert_int_equal(last_has_data, 1);  // (the path as written opens)
    char bad[80];
    size_t n = (size_t)snprintf(bad, sizeof bad, "%s", corpus);
    bad[n - 2] = 0;  // ".../dm_ckv_corpus_XXXX\0X": as a C string, another path
    assert_int_equal(load_bytes("data", SIZE_MAX, bad, n, &err), 0);
    assert_int_equal(last_has_data, 0);
    if (!strstr(last_note, "corpus path holds a NUL byte")) print_error("%s\n", last_note);
    assert_non_null(strstr(last_note, "corpus path holds a NUL byte"));
}

// A file written before the decay rule, past it (lr_muon x wd = 3): it loads, and only a :set of
// the rule's own keys is held to it (every :set was refused, log_every= included: QA, session 32)
static void test_old_decay_config(void **s) {
    (void)s;
    size_t tl;
    char *text = config_plus(":set lr_muon=0.5 wd=6\n", &tl);
    char path[80];
    snprintf(path, sizeof path, "/tmp/dm_ckv_decay_%d.ckpt", (int)getpid());
    write_edit(good, path, "config", SIZE_MAX, text, tl);   // (an engine of its own: load_bytes frees its)
    free(text);
    Engine b;
    engine_init(&b);
    b.be = backend_cpu();
    dm_err err = {0};
    if (engine_load(&b, path, &err)) fail_msg("%s", err.msg);
    assert_true(b.cfg.lr_muon * b.cfg.wd > 2);
    const char *k1[1] = {"log_every"}, *v1[1] = {"2"};
    if (engine_set_many(&b, 1, k1, v1, &err)) fail_msg("%s", err.msg);
    const char *k2[1] = {"lr"}, *v2[1] = {"0.001"};
    assert_int_equal(engine_set_many(&b, 1, k2, v2, &err), 1);   // a key of the rule: held to it
    assert_non_null(strstr(err.msg, "lr_muon x wd = 0.5 x 6 = 3 > 2"));
    const char *k3[1] = {"wd"}, *v3[1] = {"1"};
    if (engine_set_many(&b, 1, k3, v3, &err)) fail_msg("%s", err.msg);   // back under it
    engine_free(&b);
    unlink(path);
}

// An older dmsh stored the corpus path as typed (relative) with no fingerprint; opened from this
// process's directory it named another file, and a resumed run trained on it in silence (QA,
// session 32). Not opened, and the note says why; an absolute path still opens.
static void test_relative_corpus_not_opened(void **s) {
    (void)s;
    // (in a directory of its own: a failed assert must not leave the file where the tests run)
    char tdir[64] = "/tmp/dm_ckv_rel_XXXXXX", cwd[1024];
    assert_non_null(mkdtemp(tdir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tdir), 0);
    const char *rel = "c.txt";
    FILE *f = fopen(rel, "w");  // a file that is there under that name: the wrong one
    assert_non_null(f);
    for (int i = 0; i < 3000; i++) fputs("another corpus altogether. ", f);
    fclose(f);
    dm_err err = {0};
    int rc = load_bytes("data", SIZE_MAX, rel, strlen(rel), &err);
    // and a session's config.dm does not make it a :data command a replay would run from here
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp /tmp/dm_ckv_last_%d.ckpt rel.ckpt && %s/build/" REAL_NAME "/dmsh --norc -e ':load rel.ckpt' "
             "-e ':session s' -e ':quit' > out.txt 2>&1 && grep -q '^# not open (an older dmsh' runs/s/config.dm && "
             "! grep -q '^:data' runs/s/config.dm", (int)getpid(), cwd);
    int rc2 = system(cmd);
    if (rc2) { char c2[200]; snprintf(c2, sizeof c2, "cat out.txt runs/s/config.dm >&2"); if (system(c2)) {} }
    unlink(rel);
    assert_int_equal(chdir(cwd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s /tmp/dm_ckv_last_%d.ckpt", tdir, (int)getpid());
    if (system(cmd)) {}
    assert_int_equal(rc, 0);
    assert_int_equal(rc2, 0);
    if (last_has_data || !strstr(last_note, "relative to the directory that run was in")) print_error("has_data %d, note: %s\n", last_has_data, last_note);
    assert_int_equal(last_has_data, 0);
    assert_non_null(strstr(last_note, "no corpus is opened; :data PATH opens the one it trained on"));
    assert_int_equal(load_bytes("data", SIZE_MAX, corpus, strlen(corpus), &err), 0);
    assert_int_equal(last_has_data, 1);
}

// The :data line of config.dm (session_put_config_lines) for a corpus that did not open: either
// path relative (an older dmsh's, as typed) is a comment, since a replay elsewhere would open
// whatever file has that name there; the eval= path counts as much as PATH (QA37: only an
// absolute PATH with a relative eval= was written as a command). Both absolute: a command.
static void config_data_line(const char *data, const char *eval, char *out, size_t n) {
    Engine e;
    engine_init(&e);
    snprintf(e.data_path, sizeof e.data_path, "%s", data);
    snprintf(e.eval_path, sizeof e.eval_path, "%s", eval);
    e.has_data = 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    session_put_config_lines(f, &e);
    fclose(f);
    const char *nl = strchr(buf, '\n');  // (line 1 is the :set)
    assert_non_null(nl);
    snprintf(out, n, "%s", nl + 1);
    free(buf);
    engine_free(&e);
}
static void test_config_relative_eval_not_a_command(void **s) {
    (void)s;
    char line[2400];
    config_data_line("/abs/corpus.txt", "held/out.txt", line, sizeof line);
    if (strncmp(line, "# not open (an older dmsh", 25)) print_error("config.dm's data line: %s", line);
    assert_int_equal(strncmp(line, "# not open (an older dmsh", 25), 0);
    assert_non_null(strstr(line, ":data /abs/corpus.txt eval=held/out.txt\n"));
    config_data_line("corpus.txt", "/abs/out.txt", line, sizeof line);
    assert_int_equal(strncmp(line, "# not open (an older dmsh", 25), 0);
    config_data_line("/abs/corpus.txt", "/abs/out.txt", line, sizeof line);   // both absolute: a command
    assert_string_equal(line, ":data /abs/corpus.txt eval=/abs/out.txt\n");
    config_data_line("/abs/corpus.txt", "", line, sizeof line);
    assert_string_equal(line, ":data /abs/corpus.txt\n");
}

// A refused load must leave the backend in the live session's precision. The trial build of a
// precision=fp32 file switched the (device-wide) mode, and a refusal after it left a bf16 session's
// products in fp32 while :show config said bf16 (QA, session 32). A CPU backend that records the
// mode stands in for the device.
static int rec_fp32 = -1;
static void rec_set_precision(int fp32) { rec_fp32 = fp32; }
static void test_refused_load_keeps_precision(void **s) {
    (void)s;
    char path[80];
    snprintf(path, sizeof path, "/tmp/dm_ckv_prec_%d.ckpt", (int)getpid());
    size_t tl;
    char *text = config_plus(":set precision=fp32\n", &tl);   // the file's config says fp32
    write_edit(good, path, "config", SIZE_MAX, text, tl);
    free(text);
    real bad = (real)NAN;   // and a value refused after the trial build
    write_edit(path, path, "params", 3 * sizeof(real), &bad, sizeof bad);
    static Backend rec;
    rec = *backend_cpu();
    rec.set_precision = rec_set_precision;
    Engine b;
    engine_init(&b);
    b.be = &rec;
    b.cfg.precision_fp32 = 0;
    dm_err err = {0};
    rec_fp32 = -1;
    assert_int_equal(engine_load(&b, path, &err), 1);
    assert_non_null(strstr(err.msg, "section 'params' holds nan at index 3"));
    if (rec_fp32 != 0) print_error("after the refused load the backend's precision is %s\n", rec_fp32 == 1 ? "fp32" : "untouched");
    assert_int_equal(rec_fp32, 0);
    engine_free(&b);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_checked),
        cmocka_unit_test(test_counters_and_rows_checked),
        cmocka_unit_test(test_corpus_path_with_nul),
        cmocka_unit_test(test_refused_load_keeps_precision),
        cmocka_unit_test(test_relative_corpus_not_opened),
        cmocka_unit_test(test_config_relative_eval_not_a_command),
        cmocka_unit_test(test_old_decay_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
