// test_inspect.c — :probe and :gen (repl/cmd_inspect.c) as dmsh runs them, on a tiny model and a
// generated corpus (seconds each): empty option values.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"

static char dir[256], dmsh[512];
static char out[1 << 20], err_[1 << 16];

static const char *TINY =
    ":set d=64 H=2 L=2 E=2 k=1 r=16 f=128 seq=64 batch=4\n:data corpus.txt\n:init\n";

// Run SCRIPT (after TINY) with dmsh -b in the test directory; stdout and stderr into out, err_.
static int run(const char *script) {
    char p[400], cmd[1200];
    snprintf(p, sizeof p, "%s/s.dm", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "%s%s", TINY, script);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 %s -b s.dm > out.txt 2> err.txt", dir, dmsh);
    int st = system(cmd);
    const char *names[2] = {"out.txt", "err.txt"};
    char *bufs[2] = {out, err_};
    size_t sizes[2] = {sizeof out, sizeof err_};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *g = fopen(p, "r");
        assert_non_null(g);
        bufs[i][fread(bufs[i], 1, sizes[i] - 1, g)] = 0;
        fclose(g);
    }
    return WEXITSTATUS(st);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// SCRIPT fails with one line on stderr that holds NEEDLE.
static void expect_error(const char *script, const char *needle) {
    int rc = run(script);
    if (rc == 0 || !strstr(err_, needle) || count_lines(err_) != 1)
        print_error("script:\n%s\nrc=%d stderr: %s\nwanted: %s\n", script, rc, err_, needle);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err_, needle));
    assert_int_equal(count_lines(err_), 1);
}

static void expect_ok(const char *script) {
    int rc = run(script);
    if (rc != 0) print_error("script:\n%s\nrc=%d stderr: %s\n", script, rc, err_);
    assert_int_equal(rc, 0);
}

// Defect 1: `temp=` ran greedy (strtod read "" as 0) and `top_k=` as top_k=0.
static void test_gen_empty_values(void **s) {
    (void)s;
    expect_error(":gen \"QZ\" n=5 temp=\n", "s.dm:4: error: :gen: temp= needs a value");
    assert_null(strstr(out, "QZ"));  // nothing was sampled
    expect_error(":gen \"ab\" n=5 top_k=\n", "s.dm:4: error: :gen: top_k= needs a value");
    expect_error(":gen \"ab\" n=\n", "s.dm:4: error: :gen: n= needs a value");
    expect_error(":gen \"ab\" seed=\n", "for seed");
    // blanks and signs strtod/strtoll would skip are not numbers either
    expect_error(":gen \"ab\" temp=\" 0.5\"\n", "bad temp ' 0.5'");
    expect_error(":gen \"ab\" top_k=+3\n", "bad top_k '+3'");
    expect_ok(":gen \"ab\" n=5 temp=.5 top_k=3\n");
}

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/dmsh_inspect_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char cwd[300], p[400];
    if (!getcwd(cwd, sizeof cwd)) return 1;
    snprintf(dmsh, sizeof dmsh, "%s/build/" REAL_NAME "/dmsh", cwd);
    // 20 kB of plain English: enough for a train/held-out split at seq=64
    snprintf(p, sizeof p, "%s/corpus.txt", dir);
    FILE *f = fopen(p, "w");
    if (!f) return 1;
    const char *line = "The quick brown fox jumps over the lazy dog, and the dog sleeps on in the sun.\n";
    for (size_t n = 0; n < 20000; n += strlen(line)) fputs(line, f);
    fclose(f);
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
        cmocka_unit_test(test_gen_empty_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
