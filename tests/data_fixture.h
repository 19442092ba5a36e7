// data_fixture.h — a scratch directory for the corpus tests (test_data.c, test_data_edges.c):
// files and directories made in it by relative name, deterministic bytes to fill them. A program
// defines DATA_FIXTURE_TAG (its scratch directory's name) before including it.
#pragma once
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "testutil.h"

static char tmpdir[256];

static void path_in(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", tmpdir, rel); }

static void write_file(const char *rel, const uint8_t *b, size_t n) {
    char p[512];
    path_in(p, sizeof p, rel);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void make_dir(const char *rel) {
    char p[512];
    path_in(p, sizeof p, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

// deterministic pseudo-random bytes, distinct per seed so a misordering shows
static void fill_bytes(uint8_t *b, size_t n, uint64_t seed) {
    Rng r = {seed};
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(rng_next(&r) >> 56);
}

static int setup(void **s) {
    (void)s;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/" DATA_FIXTURE_TAG "_XXXXXX", base);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **s) {
    (void)s;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}
