// test_cli.c — dmsh as a process: batch-mode errors with line numbers, -e, prefix resolution,
// resume bit-for-bit in a new process, same seed twice, checkpoint refusal, and the CI smoke
// run (nano, 200 steps on real text, must beat the unigram anchor).
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/ckpt.h"
#include "../engine/engine.h"

static char dir[256], dmsh[512], corpus[512];

static int run(const char *script, char *out, size_t nout, char *errbuf, size_t nerr) {
    char sp[400], op[400], ep[400], cmd[2000];
    snprintf(sp, sizeof sp, "%s/s.dm", dir);
    snprintf(op, sizeof op, "%s/out.txt", dir);
    snprintf(ep, sizeof ep, "%s/err.txt", dir);
    FILE *f = fopen(sp, "w");
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 %s -b s.dm > out.txt 2> err.txt", dir, dmsh);
    int st = system(cmd);
    FILE *o = fopen(op, "r");
    size_t n = fread(out, 1, nout - 1, o);
    out[n] = 0;
    fclose(o);
    FILE *e = fopen(ep, "r");
    n = fread(errbuf, 1, nerr - 1, e);
    errbuf[n] = 0;
    fclose(e);
    return WEXITSTATUS(st);
}

static char out[1 << 20], err_[1 << 16];

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void expect_error(const char *script, const char *needle) {
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc == 0 || !strstr(err_, needle)) print_error("script:\n%s\nrc=%d stderr: %s\n", script, rc, err_);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err_, needle));
    assert_int_equal(count_lines(err_), 1);  // one line
}

static void write_file(const char *name, const char *text) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static long file_size(const char *name) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) ? -1 : (long)st.st_size;
}

static const char *SMALL =
    ":preset nano\n:set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5\n";

static void test_errors_with_line_numbers(void **s) {
    (void)s;
    char script[2000];
    // a checkpoint saved first must survive every later error untouched
    snprintf(script, sizeof script, "%s:data %s\n:init\n:step 2\n:save keep.ckpt\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    long sz = file_size("keep.ckpt");
    assert_true(sz > 0);
    expect_error(":help\n:frobnicate\n", "s.dm:2: error: unknown command ':frobnicate'");
    expect_error(":help\n\n:stp 3\n", "s.dm:3: error: unknown command ':stp' (did you mean :step");
    expect_error(":set d=abc\n", "s.dm:1: error: bad value 'abc' for d");
    expect_error(":set lr=-1\n", "s.dm:1: error: bad value '-1' for lr");
    expect_error(":se d=3\n", "s.dm:1: error: ambiguous command ':se': :set, :session");
    snprintf(script, sizeof script, "%s:data %s\n:init\n:set d=64\n", SMALL, corpus);
    expect_error(script, "s.dm:5: error: 'd' is an architecture key and the model is live");
    expect_error(":data /nonexistent/corpus.txt\n", "s.dm:1: error:");
    write_file("empty.txt", "");
    expect_error(":data empty.txt\n", "empty");
    char p[400];
    snprintf(p, sizeof p, "%s/emptydir", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/emptydir/sub", dir);
    mkdir(p, 0755);
    expect_error(":data emptydir\n", "no regular files");
    write_file("short.txt", "too short for one sequence");
    expect_error(":preset nano\n:data short.txt\n", "s.dm:2: error:");
    expect_error(":step 3\n", "s.dm:1: error: no model");
    expect_error(":load nothere.ckpt\n", "s.dm:1: error: nothere.ckpt");
    expect_error(":help\n:set d=\"unterminated\n", "s.dm:2: error: unterminated double quote");
    // architecture mismatch on load names the keys
    snprintf(script, sizeof script, ":preset nano\n:init\n:load keep.ckpt\n");
    expect_error(script, "architecture differs");
    assert_non_null(strstr(err_, "d (128 vs 32)"));
    // a truncated checkpoint: a clear error naming a section, never a crash
    snprintf(p, sizeof p, "%s/keep.ckpt", dir);
    char q[400];
    snprintf(q, sizeof q, "%s/trunc.ckpt", dir);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "head -c %ld %s > %s", sz / 2, p, q);
    assert_int_equal(system(cmd), 0);
    expect_error(":load trunc.ckpt\n", "truncated inside section");
    assert_int_equal(file_size("keep.ckpt"), sz);
}

// The whole file at path, NUL-terminated (malloc'd; NULL when it cannot be read).
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(n + 1);
    b[fread(b, 1, n, f)] = 0;
    fclose(f);
    return b;
}

// The file NAME of the test directory into buf (truncated to n - 1 bytes).
static void slurp_to(const char *name, char *buf, size_t n) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *t = slurp(p);
    assert_non_null(t);
    snprintf(buf, n, "%s", t);
    free(t);
}

static void test_e_and_prefixes(void **s) {
    (void)s;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd %s && %s -e ':help step; :h \"eval\" # a comment ; :quit' > out.txt 2>&1", dir, dmsh);
    assert_int_equal(system(cmd), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, ":step [N]"));
    assert_non_null(strstr(out, ":eval [depth=k]"));
    snprintf(cmd, sizeof cmd, "cd %s && %s -e ':eval-d' > out.txt 2> err.txt", dir, dmsh);
    assert_int_not_equal(system(cmd), 0);  // resolves to :eval-depths, which needs a model
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "-e: error: no model"));
    // several -e run in order (none is dropped); the first failing one stops the rest
    snprintf(cmd, sizeof cmd, "cd %s && %s -e ':help step' -e ':h \"eval\"' -e ':nonsense' -e ':help init' > out.txt 2> err.txt",
             dir, dmsh);
    assert_int_not_equal(system(cmd), 0);
    slurp_to("out.txt", out, sizeof out);
    assert_non_null(strstr(out, ":step [N]"));
    assert_non_null(strstr(out, ":eval [depth=k]"));
    assert_null(strstr(out, ":init [seed"));
    slurp_to("err.txt", err_, sizeof err_);
    assert_non_null(strstr(err_, "-e #3: error:"));
}

// params section and the per-step losses of a checkpoint
static void read_ckpt(const char *name, real **params, size_t *np, double *losses, int *nl) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CkptFile f;
    dm_err e = {0};
    assert_int_equal(ckpt_read(p, &f, &e), 0);
    const CkptSection *ps = ckpt_find(&f, "params"), *ms = ckpt_find(&f, "metrics");
    *np = ps->size / sizeof(real);
    *params = malloc(ps->size);
    memcpy(*params, ps->data, ps->size);
    const MetricRow *rows = ms->data;
    *nl = 0;
    for (size_t i = 0; i < ms->size / sizeof(MetricRow); i++)
        if (rows[i].kind == 0) losses[(*nl)++] = rows[i].loss;
    ckpt_close(&f);
}

static void test_resume_and_seed_bit_identical(void **s) {
    (void)s;
    char script[2000];
    const int N = 12, K = 5;
    snprintf(script, sizeof script, "%s:set steps=%d\n:data %s\n:init seed=7\n:step %d\n:save full.ckpt\n", SMALL, N, corpus, N);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(script, sizeof script, "%s:set steps=%d\n:data %s\n:init seed=7\n:step %d\n:save full2.ckpt\n", SMALL, N, corpus, N);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(script, sizeof script, "%s:set steps=%d\n:data %s\n:init seed=7\n:step %d\n:save half.ckpt\n", SMALL, N, corpus, K);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(script, sizeof script, ":data %s\n:load half.ckpt\n:step %d\n:save resumed.ckpt\n", corpus, N - K);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    real *a, *b, *c;
    size_t na, nb, nc;
    double la[64], lb[64], lc[64];
    int ka, kb, kc;
    read_ckpt("full.ckpt", &a, &na, la, &ka);
    read_ckpt("full2.ckpt", &b, &nb, lb, &kb);
    read_ckpt("resumed.ckpt", &c, &nc, lc, &kc);
    assert_int_equal(ka, N); assert_int_equal(kb, N); assert_int_equal(kc, N);
    assert_true(na == nb && na == nc);
    assert_memory_equal(a, b, sizeof(real) * na);   // same seed, two processes
    assert_memory_equal(la, lb, sizeof(double) * N);
    assert_memory_equal(a, c, sizeof(real) * na);   // K steps + save + load + N-K == N
    assert_memory_equal(la, lc, sizeof(double) * N);
    free(a); free(b); free(c);
}

#ifndef DM_DOUBLE  // a training-quality smoke test: the float build only
static void test_smoke_beats_unigram(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, ":preset nano\n:set eval_bytes=32768\n:data %s\n:init seed=1\n:anchors\n:train 200 log_every=50 eval_every=0\n:eval\n", corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("%s\n", err_);
    assert_int_equal(rc, 0);
    const char *ev = strstr(out, "eval step 200 depth 2 bpb ");
    assert_non_null(ev);
    double bpb = atof(ev + strlen("eval step 200 depth 2 bpb "));
    const char *an = strstr(out, "unigram ");
    assert_non_null(an);
    double uni = atof(an + strlen("unigram "));
    print_message("smoke: nano 200 steps on %s: eval %.3f bpb, unigram %.3f\n", corpus, bpb, uni);
    assert_true(bpb < uni);
}
#endif

// A session, left and resumed in a new process (dmsh -r): metrics.tsv holds every step once,
// in order; config.dm and transcript.dm exist; leaving saved a checkpoint.
static void test_session_resume(void **s) {
    (void)s;
    char script[2000], cmd[1500], p[600];
    snprintf(script, sizeof script, ":session s1\n%s:data %s\n:init seed=3\n:train 6 log_every=3 eval_every=3\n", SMALL, corpus);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    assert_non_null(strstr(err_, "saved runs/s1/ckpt/step-6.ckpt"));
    write_file("s2.dm", ":step 4\n");
    snprintf(cmd, sizeof cmd, "cd %s && OPENBLAS_NUM_THREADS=1 %s -r runs/s1 -b s2.dm > out.txt 2> err.txt", dir, dmsh);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/runs/s1/metrics.tsv", dir);
    char *tsv = slurp(p);
    assert_non_null(tsv);
    int expect = 0, evals = 0;
    for (char *line = strtok(tsv, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "train\t", 6)) {
            int st = atoi(line + 6);
            if (st != expect) print_error("metrics.tsv: step %d where %d was expected\n", st, expect);
            assert_int_equal(st, expect);
            expect++;
        } else if (!strncmp(line, "eval\t", 5)) evals++;
    }
    assert_int_equal(expect, 10);
    assert_int_equal(evals, 2);
    free(tsv);
    snprintf(p, sizeof p, "%s/runs/s1/config.dm", dir);
    char *cfg = slurp(p);
    assert_non_null(cfg);
    assert_non_null(strstr(cfg, ":set d=32"));
    free(cfg);
    snprintf(p, sizeof p, "%s/runs/s1/transcript.dm", dir);
    char *tr = slurp(p);
    assert_non_null(tr);
    assert_non_null(strstr(tr, ":train 6 log_every=3 eval_every=3"));
    assert_non_null(strstr(tr, ":step 4"));
    free(tr);
    assert_true(file_size("runs/s1/ckpt/step-10.ckpt") > 0);
    // a new run in s1's directory is refused (it would overwrite step-N.ckpt and append to
    // metrics.tsv); s1's files are untouched
    long before = file_size("runs/s1/ckpt/step-10.ckpt");
    snprintf(script, sizeof script, "%s:data %s\n:init seed=4\n:session s1\n:step 10\n", SMALL, corpus);
    expect_error(script, "runs/s1 already holds a run");
    assert_int_equal(file_size("runs/s1/ckpt/step-10.ckpt"), before);
    // lines typed before :session head its transcript (replayable: :init is in it)
    snprintf(script, sizeof script, "%s:data %s\n:init seed=4\n:session s3\n:step 2\n:set lr=0.002\n%s", SMALL, corpus,
#ifdef DM_HAVE_PNG
             ":probe emb hist\n"  // (it once said "built without PNG support" in a build with it)
#else
             ""
#endif
    );
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
#ifdef DM_HAVE_PNG
    assert_true(file_size("runs/s3/plots/hist-emb-step2.png") > 0);
#endif
    snprintf(p, sizeof p, "%s/runs/s3/transcript.dm", dir);
    tr = slurp(p);
    assert_non_null(tr);
    char *init = strstr(tr, ":init seed=4"), *sess = strstr(tr, ":session s3");
    assert_true(init && sess && init < sess && strstr(tr, ":preset nano") < init);
    free(tr);
    snprintf(p, sizeof p, "%s/runs/s3/config.dm", dir);
    cfg = slurp(p);
    assert_non_null(strstr(cfg, ":set lr=0.002"));
    free(cfg);
    // config.dm names the corpus by its absolute path, quoted when it holds a blank, ';' or '#':
    // replayed from another directory it opens the same file
    snprintf(cmd, sizeof cmd, "cd %s && cp '%s' 'my corpus;#1.txt'", dir, corpus);
    assert_int_equal(system(cmd), 0);
    snprintf(script, sizeof script, "%s:data \"my corpus;#1.txt\"\n:session s4\n:init seed=5\n", SMALL);
    assert_int_equal(run(script, out, sizeof out, err_, sizeof err_), 0);
    snprintf(cmd, sizeof cmd, "cd / && %s -b '%s/runs/s4/config.dm' > '%s/out.txt' 2> '%s/err.txt'", dmsh, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/out.txt", dir);
    char *o4 = slurp(p);
    assert_non_null(o4);
    if (!strstr(o4, "/my corpus;#1.txt: 1 file")) print_error("replayed config.dm said: %s\n", o4);
    assert_non_null(strstr(o4, "/my corpus;#1.txt: 1 file"));
    free(o4);
    // resuming a directory without checkpoints is a clear error
    snprintf(cmd, sizeof cmd, "cd %s && mkdir -p runs/empty && %s -r runs/empty -e ':help' > out.txt 2> err.txt", dir, dmsh);
    assert_int_not_equal(system(cmd), 0);
}

// docs/commands.md is generated from the command table: it must equal the table's output
static void test_commands_md_current(void **s) {
    (void)s;
    char cmd[1200], p[600];
    snprintf(cmd, sizeof cmd, "%s --commands-md > %s/commands.md", dmsh, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/commands.md", dir);
    char *gen = slurp(p), *doc = slurp("docs/commands.md");
    assert_non_null(gen);
    assert_non_null(doc);
    if (strcmp(gen, doc)) print_error("docs/commands.md is stale: run make docs/commands.md\n");
    assert_string_equal(gen, doc);
    free(gen); free(doc);
}

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/dmsh_cli_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char cwd[300];
    if (!getcwd(cwd, sizeof cwd)) return 1;
    snprintf(dmsh, sizeof dmsh, "%s/build/" REAL_NAME "/dmsh", cwd);
    // real text: the shared corpus when present, else the C headers (every machine has them)
    if (access("../shared/data/tinyshakespeare.txt", R_OK) == 0)
        snprintf(corpus, sizeof corpus, "%s/../shared/data/tinyshakespeare.txt", cwd);
    else
        snprintf(corpus, sizeof corpus, "/usr/include");
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors_with_line_numbers),
        cmocka_unit_test(test_e_and_prefixes),
        cmocka_unit_test(test_resume_and_seed_bit_identical),
        cmocka_unit_test(test_session_resume),
        cmocka_unit_test(test_commands_md_current),
#ifndef DM_DOUBLE
        cmocka_unit_test(test_smoke_beats_unigram),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
