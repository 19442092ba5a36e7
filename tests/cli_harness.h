// cli_harness.h — dmsh as a process, for the tests that drive the binary (test_cli.c,
// test_cli_saves.c): a scratch directory, scripts run with -b in it, their stdout/stderr, and
// the files they leave. Static helpers: each test program includes it once.
#pragma once
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"
#include "../kernels/real.h"

static char dir[256], dmsh[512], corpus[512];

static inline int run(const char *script, char *out, size_t nout, char *errbuf, size_t nerr) {
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

// a script that must succeed (its stderr shown when it does not), and text its stdout must hold
static inline void expect_ok(const char *script) {
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc) print_error("script:\n%s\nrc=%d stderr: %s\n", script, rc, err_);
    assert_int_equal(rc, 0);
}

static inline void expect_out(const char *needle) {
    if (!strstr(out, needle)) print_error("wanted: %s\nstdout:\n%s\n", needle, out);
    assert_non_null(strstr(out, needle));
}

static inline int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static inline void expect_error(const char *script, const char *needle) {
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc == 0 || !strstr(err_, needle)) print_error("script:\n%s\nrc=%d stderr: %s\n", script, rc, err_);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err_, needle));
    assert_int_equal(stderr_error_lines(err_), 1);  // one line (testutil.h: less the kept-state line)
}

static inline void write_file(const char *name, const char *text) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static inline long file_size(const char *name) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) ? -1 : (long)st.st_size;
}

static const char *SMALL =
    ":preset nano\n:set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5\n";

// The whole file at path, NUL-terminated (malloc'd; NULL when it cannot be read).
static inline char *slurp(const char *path) {
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
static inline void slurp_to(const char *name, char *buf, size_t n) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *t = slurp(p);
    assert_non_null(t);
    snprintf(buf, n, "%s", t ? t : "");
    free(t);
}

static inline int sh_in_dir(const char *fmt, const char *arg) {
    char c[4000], cmd[4400];
    snprintf(c, sizeof c, fmt, arg, arg, arg);
    snprintf(cmd, sizeof cmd, "cd %s && export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 && %s", dir, c);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int setup(void **s) {
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

static inline int teardown(void **s) {
    (void)s;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

// dmsh --norc ARGS (the -e / -r words, shell-quoted by the caller) run in the test directory and
// killed with SIGKILL once the shell test UNTIL holds (polled every 50 ms, 60 s at most)
static inline void run_and_kill(const char *args, const char *until) {
    char cmd[2400];
    // (rm first: the background shell truncates k.out only when it gets to run, and an `until`
    // reading the previous run's k.out — its "step 6" — killed this one before it began)
    int cl = snprintf(cmd, sizeof cmd, "(rm -f k.out; %s --norc %s > k.out 2>&1 & p=$!; for i in $(seq 1200); do %s && break; sleep 0.05; done; "
                      "kill -9 $p; wait $p; true)", dmsh, args, until);
    assert_true(cl > 0 && cl < (int)sizeof cmd);
    assert_int_equal(sh_in_dir("%s", cmd), 0);
}
