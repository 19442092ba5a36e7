// test_probe_cmd.c — :probe's printed numbers (repl/cmd_inspect.c) against the values probe_get
// returns, through a Shell over a live tiny model: the per-byte listing of a text= forward, row
// by row and column by column; the stats line's min, max and nonfinite %; and what a histogram
// is drawn with (bins=, log=, the values), seen by wrapping viz_hist_png (the Makefile links this
// test with --wrap=viz_hist_png; nothing is drawn). QA mutation, session 37: each of these could
// print a neighbour's value (transposed columns, min in the max slot, a fraction for a
// percentage, bins= ignored) with every test passing. And :gen's check of every sampled byte's
// logits, with weights that turn non-finite only past the prompt.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../engine/probe.h"
#include "../repl/shell.h"
#include "../viz/plot.h"

int cmd_probe(Shell *sh, Words *w, dm_err *err);
int cmd_gen(Shell *sh, Words *w, dm_err *err);

// cmd_inspect.o's :device names the CUDA backend; dmsh links a loader or a stub for it, this test
// neither (no :device here)
const Backend *backend_cuda(int device, char *why, size_t n) {
    (void)device;
    snprintf(why, n, "not in this test");
    return NULL;
}

// What :probe hands the histogram writer; nothing is drawn
static struct { int calls, bins, logy; size_t n; double *v; char path[1400]; } seen;
int __wrap_viz_hist_png(const char *path, const double *v, size_t n, int bins, int logy, const char *title, char *err, size_t nerr) {
    (void)title; (void)err; (void)nerr;
    seen.calls++;
    seen.bins = bins;
    seen.logy = logy;
    seen.n = n;
    free(seen.v);
    seen.v = malloc(sizeof(double) * (n ? n : 1));
    memcpy(seen.v, v, sizeof(double) * n);
    snprintf(seen.path, sizeof seen.path, "%s", path);
    return 0;
}

static Engine eng;
static char dir[64];
static char out[1 << 16];

// :probe with the words given (argv[0] is ":probe"; no parsing, so a text= value is taken as is);
// stdout into out
static int probe(int argc, const char **argv, dm_err *err) {
    Words w = {0};
    for (int i = 0; i < argc; i++) w.argv[w.argc++] = (char *)argv[i];
    FILE *f = tmpfile();
    assert_non_null(f);
    Shell sh = {.eng = &eng, .out = f, .src = "-e"};
    memset(err, 0, sizeof *err);
    int rc = cmd_probe(&sh, &w, err);
    rewind(f);
    out[fread(out, 1, sizeof out - 1, f)] = 0;
    fclose(f);
    if (rc) print_error("%s %s: %s\n", argv[0], argc > 1 ? argv[1] : "", err->msg);
    return rc;
}

static double *get(const char *name, ProbeInfo *pi) {
    double *v;
    dm_err err = {0};
    if (probe_get(&eng, name, &v, pi, &err)) fail_msg("probe_get %s: %s", name, err.msg);
    return v;
}

// "min A max Z absmax M nonfinite P%" as the stats line must print them for these values
static void stats_want(const double *v, size_t n, char *buf, size_t nbuf) {
    ProbeStats st;
    probe_stats(v, n, &st);
    snprintf(buf, nbuf, " min %.6g max %.6g absmax %.6g nonfinite %.4g%% (", st.min, st.max, st.absmax, 100.0 * st.nonfinite / n);
}

static char text[48];

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/dmsh_probe_cmd_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    engine_init(&eng);
    config_defaults(&eng.cfg);
    eng.cfg.d = 16; eng.cfg.H = 2; eng.cfg.L = 2; eng.cfg.E = 3; eng.cfg.k = 2; eng.cfg.r = 4; eng.cfg.f = 12;
    eng.cfg.engram_rows = 31; eng.cfg.engram_dim = 4; eng.cfg.seq = 64; eng.cfg.batch = 1; eng.cfg.kda_chunk = 8;
    dm_err err = {0};
    if (engine_build(&eng, 11, &err)) { print_error("%s\n", err.msg); return 1; }
    // random weights, so the columns and the depths differ from one another
    Rng r = {23};
    for (size_t j = 0; j < eng.model.n_params; j++) eng.model.params[j] += (real)(0.3 * rng_normal(&r));
    // (histograms go to DIR/plots: a session's directory)
    snprintf(eng.session_dir, sizeof eng.session_dir, "%s", dir);
    // a random printable text, no backslash (text= reads escapes) or quote
    for (size_t i = 0; i + 1 < sizeof text; i++) {
        char c;
        do c = (char)(32 + rng_next(&r) % 95); while (c == '\\' || c == '"');
        text[i] = c;
    }
    text[sizeof text - 1] = 0;
    return 0;
}

static int teardown(void **s) {
    (void)s;
    engine_free(&eng);
    free(seen.v);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

// The rows of a per-byte listing after its header line: row t's C values (as printed, %12.6g)
// into cols[t][c]; returns the rows read
static int listing(const char *header, int C, char cols[][4][16], int maxrows) {
    const char *p = strstr(out, header);
    if (!p) print_error("no header '%s' in:\n%s\n", header, out);
    assert_non_null(p);
    p = strchr(p, '\n') + 1;
    int t = 0;
    for (; t < maxrows && *p == ' '; t++) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        // "  %4d  %-6s %-6s" then C x " %12s": the values are the last C fields of 13 characters
        assert_true(nl - p >= 13 * C);
        for (int c = 0; c < C; c++) {
            const char *f = nl - 13 * (C - c);
            assert_true(*f == ' ');
            snprintf(cols[t][c], sizeof cols[t][c], "%.12s", f + 1);
        }
        assert_int_equal(atoi(p), t);  // (the position column)
        p = nl + 1;
    }
    return t;
}

// The per-byte listing of a text= forward: row t, column c is value [t, c] of the activation, as
// probe_get returns it: ctrl@1's columns are attn, mem, ffn in that order (not transposed), and
// each equals the value column of that gate's own listing
static void test_per_byte_listing(void **s) {
    (void)s;
    char textarg[64], want[16];
    snprintf(textarg, sizeof textarg, "text=%s", text);
    int T = (int)strlen(text) - 1;
    static char ctrl[64][4][16], gate[64][4][16];
    dm_err err;
    assert_int_equal(probe(3, (const char *[]){":probe", "ctrl@1", textarg}, &err), 0);
    assert_int_equal(listing("   pos  byte   next      ctrl.attn     ctrl.mem     ctrl.ffn\n", 3, ctrl, 64), T);
    ProbeInfo pi;
    double *v = get("ctrl@1", &pi);  // (the same forward: the text's)
    assert_int_equal((int)pi.n, T * 3);
    int differ = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < 3; c++) {
            snprintf(want, sizeof want, "%12.6g", v[t * 3 + c]);
            if (strcmp(ctrl[t][c], want)) {
                if (!differ++) print_error("ctrl@1 row %d column %d printed '%s', the value is '%s'\n", t, c, ctrl[t][c], want);
            }
        }
    assert_int_equal(differ, 0);
    // the columns differ (else a transposition could not show)
    assert_true(v[0] != v[1] && v[1] != v[2]);
    free(v);
    static const char *gates[3] = {"ctrl.attn@1", "ctrl.mem@1", "ctrl.ffn@1"};
    for (int g = 0; g < 3; g++) {
        assert_int_equal(probe(3, (const char *[]){":probe", gates[g], textarg}, &err), 0);
        assert_int_equal(listing("   pos  byte   next          value\n", 1, gate, 64), T);
        for (int t = 0; t < T; t++) {
            if (strcmp(gate[t][0], ctrl[t][g])) print_error("%s row %d: '%s', ctrl@1's column: '%s'\n", gates[g], t, gate[t][0], ctrl[t][g]);
            assert_string_equal(gate[t][0], ctrl[t][g]);
        }
    }
    // numbered columns (z@1: the router's E=3 logits a byte) in order too
    assert_int_equal(probe(3, (const char *[]){":probe", "z@1", textarg}, &err), 0);
    assert_int_equal(listing("   pos  byte   next            [0]          [1]          [2]\n", 3, ctrl, 64), T);
    v = get("z@1", &pi);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < 3; c++) {
            snprintf(want, sizeof want, "%12.6g", v[t * 3 + c]);
            assert_string_equal(ctrl[t][c], want);
        }
    free(v);
}

// The stats line's min, max, absmax and nonfinite % are the values' own: for an activation
// (no non-finite value) and for a parameter with one NaN in it, whose nonfinite % is 100/numel
static void test_stats_line(void **s) {
    (void)s;
    char textarg[64], want[200];
    snprintf(textarg, sizeof textarg, "text=%s", text);
    dm_err err;
    ProbeInfo pi;
    assert_int_equal(probe(3, (const char *[]){":probe", "h@2", textarg}, &err), 0);
    double *v = get("h@2", &pi);
    stats_want(v, pi.n, want, sizeof want);
    if (!strstr(out, want)) print_error("want '%s' in: %s\n", want, out);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, " nonfinite 0% ("));
    free(v);
    // the smallest tensor of more than 2 values: one NaN in it, the others as they were
    int best = -1;
    for (int i = 0; i < P_COUNT; i++)
        if (eng.model.t[i].numel > 2 && (best < 0 || eng.model.t[i].numel < eng.model.t[best].numel)) best = i;
    assert_true(best >= 0);
    ParamTensor *t = &eng.model.t[best];
    real keep = eng.model.params[t->offset + 1];
    eng.model.params[t->offset + 1] = (real)NAN;
    int rc = probe(2, (const char *[]){":probe", t->name}, &err);
    v = get(t->name, &pi);
    eng.model.params[t->offset + 1] = keep;
    assert_int_equal(rc, 0);
    assert_int_equal((int)pi.n, (int)t->numel);
    stats_want(v, pi.n, want, sizeof want);
    char pct[64];
    snprintf(pct, sizeof pct, " nonfinite %.4g%% (", 100.0 / (double)t->numel);
    print_message("%s (%zu values, one NaN): %s", t->name, t->numel, out);
    if (!strstr(out, want) || !strstr(out, pct)) print_error("want '%s' and '%s' in: %s\n", want, pct, out);
    assert_non_null(strstr(out, pct));
    assert_non_null(strstr(out, want));
    free(v);
}

// :probe NAME hist draws the probe's own values, in bins= bins (60 unless given), with log=on's
// log counts
static void test_hist_options(void **s) {
    (void)s;
    char textarg[64];
    snprintf(textarg, sizeof textarg, "text=%s", text);
    dm_err err;
    ProbeInfo pi;
    assert_int_equal(probe(6, (const char *[]){":probe", "h@1", textarg, "hist", "bins=20", "log=on"}, &err), 0);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.bins, 20);
    assert_int_equal(seen.logy, 1);
    double *v = get("h@1", &pi);
    assert_int_equal((int)seen.n, (int)pi.n);
    assert_memory_equal(seen.v, v, sizeof(double) * pi.n);
    free(v);
    assert_non_null(strstr(seen.path, dir));  // (the session's plots/, not the working directory's)
    assert_non_null(strstr(seen.path, "-log.png"));
    assert_int_equal(probe(4, (const char *[]){":probe", "ctrl.ffn@2", "hist", "bins=7"}, &err), 0);
    assert_int_equal(seen.calls, 2);
    assert_int_equal(seen.bins, 7);
    assert_int_equal(seen.logy, 0);
    v = get("ctrl.ffn@2", &pi);
    assert_int_equal((int)seen.n, (int)pi.n);
    assert_memory_equal(seen.v, v, sizeof(double) * pi.n);
    free(v);
    assert_int_equal(probe(3, (const char *[]){":probe", "h@1", "hist"}, &err), 0);
    assert_int_equal(seen.bins, 60);
    assert_int_equal(seen.logy, 0);
}

// A model whose logits turn non-finite only after the prompt: every byte's embedding row NaN but
// the prompt's ('a'). The prompt's logits are finite, the first sample (greedy, not 'a') is
// printed, and feeding it makes the logits NaN: :gen stops there with its error. Without the
// per-byte check it printed 4 more made-up bytes (sample_byte on NaN logits gives byte 0 or
// the top-k's last) and succeeded (a mutation pass, session 39).
static void test_gen_nonfinite_midway(void **s) {
    (void)s;
    const ParamTensor *t = &eng.model.t[P_EMB];
    size_t d = t->numel / 256;
    real *emb = eng.model.params + t->offset, *keep = malloc(sizeof(real) * t->numel);
    memcpy(keep, emb, sizeof(real) * t->numel);
    for (int b = 0; b < 256; b++)
        if (b != 'a')
            for (size_t j = 0; j < d; j++) emb[(size_t)b * d + j] = (real)NAN;
    const char *argv[] = {":gen", "a", "n=5", "temp=0"};
    Words w = {0};
    for (int i = 0; i < 4; i++) w.argv[w.argc++] = (char *)argv[i];
    FILE *f = tmpfile();
    assert_non_null(f);
    Shell sh = {.eng = &eng, .out = f, .src = "-e"};
    dm_err err = {0};
    int rc = cmd_gen(&sh, &w, &err);
    rewind(f);
    out[fread(out, 1, sizeof out - 1, f)] = 0;
    fclose(f);
    memcpy(emb, keep, sizeof(real) * t->numel);
    free(keep);
    if (rc != 1 || !strstr(err.msg, "became non-finite after 1 sampled bytes")) print_error("rc=%d out '%s' err '%s'\n", rc, out, err.msg);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err.msg, ":gen: the model's logits became non-finite after 1 sampled bytes"));
    // the prompt and the one sample, a byte other than 'a' (else no NaN row was read), then the line's end
    assert_int_equal((int)strlen(out), 3);
    assert_true(out[0] == 'a' && out[1] != 'a' && out[2] == '\n');
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_byte_listing),
        cmocka_unit_test(test_stats_line),
        cmocka_unit_test(test_hist_options),
        cmocka_unit_test(test_gen_nonfinite_midway),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
