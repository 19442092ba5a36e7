// test_data_edges.c — corpora (SPEC §5) at their edges: a directory walk that fails beside sibling
// directories, a file replaced by a rename while open, splits of exactly seq bytes, the held-out
// window when the split is a multiple of seq, the held-out span reader after a cut, a span ending at
// a file boundary, and an eval= directory sharing a later file with the training corpus. (QA
// mutation, session 41: each test names the mutant of engine/data.c it fails on.)
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/data.h"

#define DATA_FIXTURE_TAG "dm_test_data_edges"
#include "data_fixture.h"

// data_open must fail naming NEEDLE (the path when NULL), and leave d closed (all zeros)
// (LINE: the caller's, said when it fails)
#define expect_fail(...) expect_fail_at(__LINE__, __VA_ARGS__)
static void expect_fail_at(int line, const char *path, const char *eval_path, double frac, int T, const char *needle) {
    Data d;
    memset(&d, 0x5a, sizeof d);
    dm_err e = {0};
    int rc = data_open(&d, path, eval_path, frac, T, &e);
    if (!rc) print_error("expect_fail at line %d: opened (T=%d)\n", line, T);
    assert_int_not_equal(rc, 0);
    const char *named = needle ? needle : path;
    if (!strstr(e.msg, named)) print_error("expect_fail at line %d: message '%s' lacks '%s'\n", line, e.msg, named);
    assert_non_null(strstr(e.msg, named));
    Data zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&d, &zero, sizeof d);
}

#define expect_open(...) expect_open_at(__LINE__, __VA_ARGS__)
static void expect_open_at(int line, const char *path, const char *eval_path, double frac, int T, int64_t n_train, int64_t n_eval) {
    Data d;
    dm_err e = {0};
    if (data_open(&d, path, eval_path, frac, T, &e)) fail_msg("expect_open at line %d, T=%d: %s", line, T, e.msg);
    assert_int_equal(d.n_train, n_train);
    assert_int_equal(d.n_eval, n_eval);
    data_close(&d);
}

// This program links with --wrap=lstat (Makefile, as test_data): a path under a directory named
// "noexec" fails with EACCES, as it does for a non-root user under a directory of mode r--.
static int lstat_wrapped;
int __real_lstat(const char *path, struct stat *st);
int __wrap_lstat(const char *path, struct stat *st) {
    lstat_wrapped++;
    if (strstr(path, "/noexec/")) {
        errno = EACCES;
        return -1;
    }
    return __real_lstat(path, st);
}

// readdir's position of NAME in DIR among its entries, and whether a directory is listed after it
static int dir_listed_after(const char *dir, const char *name) {
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *de;
    int seen = 0, after = 0;
    while ((de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!strcmp(de->d_name, name)) { seen = 1; continue; }
        char p[768];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (seen && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) after = 1;
    }
    closedir(dp);
    assert_true(seen);
    return after;
}

// QA mutation, session 41 (D02: walk_dir without `if (rc) break;`): an unreadable entry beside
// sibling directories. test_data's noexec/ has no sibling directory, so nothing after the failure
// reassigned rc; without the break, the next directory's walk set rc back to 0 and the corpus
// opened on part of the tree with no word (the session-34 bug). The fixture makes sure readdir
// lists a directory after noexec/ (the mutant's case); the open must still fail.
static void test_unreadable_entry_beside_directories(void **s) {
    (void)s;
    uint8_t b[300];
    char dir[512], rel[64];
    int made = 0;
    for (int round = 0; round < 20 && !made; round++) {  // a fresh tree until noexec/ is not listed last
        snprintf(rel, sizeof rel, "srch%d", round);
        make_dir(rel);
        for (int i = 0; i < 10; i++) {
            snprintf(rel, sizeof rel, "srch%d/d%d", round, i);
            make_dir(rel);
            snprintf(rel, sizeof rel, "srch%d/d%d/f.txt", round, i);
            fill_bytes(b, sizeof b, 300 + (uint64_t)i);
            write_file(rel, b, sizeof b);
        }
        snprintf(rel, sizeof rel, "srch%d/noexec", round);
        make_dir(rel);
        snprintf(rel, sizeof rel, "srch%d/noexec/f.txt", round);
        write_file(rel, b, sizeof b);
        snprintf(rel, sizeof rel, "srch%d", round);
        path_in(dir, sizeof dir, rel);
        made = dir_listed_after(dir, "noexec");
    }
    assert_true(made);
    Data d;
    dm_err e = {0};
    int rc = data_open(&d, dir, NULL, 0.1, 8, &e);
    if (!lstat_wrapped) {  // (lstat is an inline of __lxstat there: --wrap cannot reach it)
        if (!rc) data_close(&d);
        print_message("test_unreadable_entry_beside_directories: skipped (this libc's lstat cannot be wrapped)\n");
        return;
    }
    if (!rc) data_close(&d);
    assert_int_equal(rc, 1);
    expect_fail(dir, NULL, 0.1, 8, "noexec/f.txt': Permission denied (check the permissions of its directory");
}

// QA mutation, session 41 (D09: corpus_check_span without its device/inode test): a corpus
// regenerated by writing a new file and moving it over the old one leaves the mapping whole (the
// old inode lives on), so the reads are the mapped bytes and no error. Without the identity test
// the shorter file now at the path read as "shrank from 65536 B to 100 B" at every step.
static void test_file_replaced_by_rename_reads_on(void **s) {
    (void)s;
    enum { N = 1 << 16, T = 32, B = 4 };
    uint8_t *b = malloc(N);
    fill_bytes(b, N, 41);
    write_file("ren.txt", b, N);
    char p[512], q[512];
    path_in(p, sizeof p, "ren.txt");
    path_in(q, sizeof q, "ren.txt.new");
    Data d;
    dm_err err = {0};
    if (data_open(&d, p, NULL, 0.1, T, &err)) fail_msg("%s", err.msg);
    int x0[B * T], y0[B * T], x[B * T], y[B * T];
    assert_int_equal(data_batch_checked(&d, 7, 3, B, T, x0, y0, &err), 0);
    uint8_t nb[100];
    fill_bytes(nb, sizeof nb, 42);
    write_file("ren.txt.new", nb, sizeof nb);
    assert_int_equal(rename(q, p), 0);
    int rc = data_batch_checked(&d, 7, 3, B, T, x, y, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_memory_equal(x, x0, sizeof x);
    assert_memory_equal(y, y0, sizeof y);
    int64_t off = data_window_offset(7, 3, 1, d.n_train, T);
    for (int t = 0; t < T; t++) assert_int_equal(x[T + t], b[off + t]);  // the old file's bytes
    int ev[16];
    assert_int_equal(data_read_checked(&d, 1, d.n_eval - 16, 16, ev, &err), 0);
    for (int i = 0; i < 16; i++) assert_int_equal(ev[i], b[N - 16 + i]);
    data_close(&d);
    free(b);
}

// QA mutation, session 41 (D04, D05, D06: the split bounds `n < T + 1` of data_open as `n < T`):
// each split of exactly seq bytes must be refused (a window needs seq + 1 bytes: its target), and
// seq - 1 opens. test_data tested these bounds only far from their edge. D04: an eval= file of seq
// bytes opened, and every :eval then said "holds no full sequence". D05: a shared training split of
// seq bytes opened; the first step was refused. D06: the eval= branch's "training corpus" error was
// never reached by a test.
static void test_splits_of_exactly_seq_bytes(void **s) {
    (void)s;
    uint8_t b[200];
    fill_bytes(b, sizeof b, 43);
    write_file("e200.txt", b, 200);
    write_file("e100.txt", b, 100);
    write_file("e5.txt", b + 50, 5);
    write_file("e102.txt", b + 10, 102);
    char p[512], q[512];
    // D05: 200 B, eval_frac 0.6: train 80 B, held-out 120 B
    path_in(p, sizeof p, "e200.txt");
    expect_fail(p, NULL, 0.6, 80, "training split of '");
    expect_fail(p, NULL, 0.6, 80, "is 80 B, shorter than one sequence (seq+1 = 81 B)");
    expect_open(p, NULL, 0.6, 79, 80, 120);
    // D04: an eval= file of 5 B: seq 5 refused, seq 4 opens
    path_in(p, sizeof p, "e100.txt");
    path_in(q, sizeof q, "e5.txt");
    expect_fail(p, q, 0.1, 5, "data: eval corpus '");
    expect_fail(p, q, 0.1, 5, "is 5 B, shorter than one sequence (seq+1 = 6 B)");
    expect_open(p, q, 0.1, 4, 100, 5);
    // D06: a training corpus of 100 B with eval=: seq 100 refused, seq 99 opens
    path_in(q, sizeof q, "e102.txt");
    expect_fail(p, q, 0.1, 100, "data: training corpus '");
    expect_fail(p, q, 0.1, 100, "is 100 B, shorter than one sequence (seq+1 = 101 B)");
    expect_open(p, q, 0.1, 99, 100, 102);
}

// QA mutation, session 41 (D01: data_eval_nseq's `n_eval - 1` as `n_eval`): SPEC §5's window is
// min(eval_bytes, n_heldout - 1) / seq sequences: the last one's target byte must lie inside the
// split. No test had a held-out split that is a multiple of seq; the mutant gave it one more
// sequence, whose last target is the byte past the split (shared: past the corpus's end).
static void test_eval_window_when_split_is_a_multiple_of_seq(void **s) {
    (void)s;
    enum { N = 10000 };
    uint8_t b[N];
    fill_bytes(b, N, 44);
    write_file("mult.txt", b, N);
    char p[512];
    path_in(p, sizeof p, "mult.txt");
    Data d;
    dm_err err = {0};
    if (data_open(&d, p, NULL, 0.1, 8, &err)) fail_msg("%s", err.msg);
    assert_int_equal(d.n_eval, 1000);
    assert_int_equal(data_eval_nseq(&d, 262144, 8), 124);   // 999 / 8
    assert_int_equal(data_eval_nseq(&d, 1000, 8), 124);     // eval_bytes = the split: still 999
    assert_int_equal(data_eval_nseq(&d, 999, 8), 124);
    assert_int_equal(data_eval_nseq(&d, 262144, 10), 99);   // 999 / 10 (not 100)
    assert_int_equal(data_eval_nseq(&d, 262144, 999), 1);
    assert_int_equal(data_eval_nseq(&d, 262144, 1000), 0);
    // the last sequence of the window reads its target inside the split
    int x[8], y[8];
    assert_int_equal(data_eval_seq_checked(&d, 123, 8, x, y, &err), 0);
    for (int t = 0; t < 8; t++) assert_int_equal(y[t], b[d.n_train + 123 * 8 + t + 1]);
    data_close(&d);
}

// QA mutation, session 41 (D07: guarded()'s held-out span checked at `at` instead of
// `eval_off + at`): the held-out span reader (the anchors' held-out pass, the held-out fingerprint)
// was tested only whole. With a shared split the mutant stat'ed the training files at the span's
// split offset, so a held-out file cut inside its last page read zeros unsaid.
static void test_heldout_span_after_a_cut(void **s) {
    (void)s;
    enum { N = 1 << 16 };
    uint8_t *b = malloc(N);
    fill_bytes(b, N, 45);
    make_dir("hcut");
    write_file("hcut/a.txt", b, N);
    fill_bytes(b, N, 46);
    write_file("hcut/b.txt", b, N);
    char p[512], bp[512];
    path_in(p, sizeof p, "hcut");
    path_in(bp, sizeof bp, "hcut/b.txt");
    Data d;
    dm_err err = {0};
    if (data_open(&d, p, NULL, 0.5, 32, &err)) fail_msg("%s", err.msg);  // train a.txt, held-out b.txt
    int x[16];
    assert_int_equal(data_read_checked(&d, 1, d.n_eval - 16, 16, x, &err), 0);
    for (int i = 0; i < 16; i++) assert_int_equal(x[i], b[N - 16 + i]);
    assert_int_equal(truncate(bp, N - 10), 0);  // within the last page: zeros, no SIGBUS
    assert_int_equal(data_read_checked(&d, 1, d.n_eval - 16, 16, x, &err), 1);
    if (!strstr(err.msg, "b.txt changed on disk while open: it shrank from 65536 B to 65526 B")) print_error("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "b.txt changed on disk while open: it shrank from 65536 B to 65526 B"));
    memset(&err, 0, sizeof err);
    assert_int_equal(data_read_checked(&d, 0, d.n_train - 16, 16, x, &err), 0);  // a.txt is whole
    data_close(&d);
    free(b);
}

// QA mutation, session 41 (D08: corpus_check_span's `starts[k] < off + len` as `<=`): a span that
// ends exactly at a file boundary reads nothing of the next file, so a cut in that file is not this
// read's: the mutant stat'ed one file too many and failed the read (a false alarm). A span that
// reaches one byte into the next file is checked against it.
static void test_span_ending_at_a_file_boundary(void **s) {
    (void)s;
    uint8_t a[4096], b[8192];
    fill_bytes(a, sizeof a, 47);
    fill_bytes(b, sizeof b, 48);
    make_dir("bnd");
    write_file("bnd/a.txt", a, sizeof a);
    write_file("bnd/b.txt", b, sizeof b);
    char p[512], bp[512];
    path_in(p, sizeof p, "bnd");
    path_in(bp, sizeof bp, "bnd/b.txt");
    Data d;
    dm_err err = {0};
    if (data_open(&d, p, NULL, 0.1, 16, &err)) fail_msg("%s", err.msg);
    assert_int_equal(d.train.starts[1], 4096);
    assert_int_equal(truncate(bp, sizeof b - 10), 0);
    static int x[4096];
    int rc = data_read_checked(&d, 0, 0, 4096, x, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 4096; i++) assert_int_equal(x[i], a[i]);
    assert_int_equal(data_read_checked(&d, 0, 4000, 96, x, &err), 0);
    assert_int_equal(data_read_checked(&d, 0, 4000, 97, x, &err), 1);  // one byte of b.txt
    assert_non_null(strstr(err.msg, "b.txt changed on disk while open: it shrank from 8192 B to 8182 B"));
    data_close(&d);
}

// QA mutation, session 41 (D17: data_eval_in_train looking at the eval corpus's first file only):
// an eval= directory whose second file (path order) is also a file of the training corpus (a hard
// link) must be named; the tests of the note used one eval file.
static void test_eval_dir_second_file_in_train(void **s) {
    (void)s;
    uint8_t b[500];
    make_dir("tr");
    make_dir("ev");
    fill_bytes(b, sizeof b, 49);
    write_file("tr/x.txt", b, sizeof b);
    fill_bytes(b, sizeof b, 50);
    write_file("tr/y.txt", b, sizeof b);
    fill_bytes(b, sizeof b, 51);
    write_file("ev/a.txt", b, sizeof b);
    char t[512], ev[512], lk[512];
    path_in(t, sizeof t, "tr/y.txt");
    path_in(lk, sizeof lk, "ev/b.txt");
    assert_int_equal(link(t, lk), 0);
    path_in(t, sizeof t, "tr");
    path_in(ev, sizeof ev, "ev");
    Data d;
    dm_err err = {0};
    if (data_open(&d, t, ev, 0.1, 16, &err)) fail_msg("%s", err.msg);
    assert_int_equal(d.eval.nfiles, 2);
    const char *hit = data_eval_in_train(&d);
    assert_non_null(hit);
    assert_string_equal(hit, lk);
    data_close(&d);
    // the eval directory without the link: no file shared
    assert_int_equal(unlink(lk), 0);
    if (data_open(&d, t, ev, 0.1, 16, &err)) fail_msg("%s", err.msg);
    assert_null(data_eval_in_train(&d));
    data_close(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unreadable_entry_beside_directories),
        cmocka_unit_test(test_file_replaced_by_rename_reads_on),
        cmocka_unit_test(test_splits_of_exactly_seq_bytes),
        cmocka_unit_test(test_eval_window_when_split_is_a_multiple_of_seq),
        cmocka_unit_test(test_heldout_span_after_a_cut),
        cmocka_unit_test(test_span_ending_at_a_file_boundary),
        cmocka_unit_test(test_eval_dir_second_file_in_train),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
