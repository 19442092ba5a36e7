// testutil.h — shared helpers for the cmocka tests: seeded random fills and error metrics.
#pragma once
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <cmocka.h>
#include "../engine/rng.h"
#include "../kernels/real.h"

static inline void fill_randn(real *p, size_t n, double std, Rng *r) {
    for (size_t i = 0; i < n; i++) p[i] = (real)(std * rng_normal(r));
}

// The larger of two errors, a NaN counting as the worst possible one: fmax(x, NAN) is x and
// `if (e > worst)` is false for a NaN, so either idiom lets a NaN result pass a check.
static inline double err_max(double a, double b) { return isnan(a) || isnan(b) ? INFINITY : (a > b ? a : b); }

// Gradient-check metric: max over elements of |a - n| / max(|a|, |n|, floor), with
// floor = max(1e-2 * max|n| over the tensor, 1e-5). The FD value of an entry carries the loss's
// round-off (~1e-15 / h, about 1e-11 after the stencil), so an entry far below its tensor's
// scale, or below 1e-5 for an O(1) loss, is judged against that floor instead of dividing
// noise by noise: at the 1e-6 bar that still means an absolute error under 1e-11.
static inline double grad_rel_err(const double *an, const double *num, size_t n) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(num[i]));
    // A tensor with no influence on the loss (an arm that is off): both gradients must vanish;
    // the numeric one is then pure round-off (~1e-13), so compare absolutely.
    if (scale < 1e-9) {
        double amax = 0;
        for (size_t i = 0; i < n; i++) amax = err_max(amax, fabs(an[i]));
        return amax < 1e-9 ? 0 : 1;
    }
    double floor_ = fmax(1e-2 * scale, 1e-5), worst = 0;
    for (size_t i = 0; i < n; i++) {
        double den = fmax(fmax(fabs(an[i]), fabs(num[i])), floor_);
        worst = err_max(worst, fabs(an[i] - num[i]) / den);
    }
    return worst;
}

// Max-abs difference over max-abs value (tensor-wise relative error).
// A non-finite entry in either tensor is an infinite error (fmax alone would skip a NaN).
static inline double tensor_rel_err(const real *a, const real *b, size_t n) {
    double mx = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite((double)a[i]) || !isfinite((double)b[i])) return INFINITY;
        mx = fmax(mx, fabs((double)b[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    return diff / fmax(mx, 1e-30);
}

// The whole file at path, NUL-terminated (malloc'd); its length in *n when n is not NULL. A
// missing or unreadable file fails the test.
static inline char *read_whole_file(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *p = malloc((size_t)sz + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)sz, fp), (size_t)sz);
    fclose(fp);
    p[sz] = 0;
    if (n) *n = (size_t)sz;
    return p;
}

// The lines of a dmsh run's stderr, less the one a script without a session that stopped at an
// error after trained steps adds, saying where it kept that state (repl/main.c; test_cli_stops.c):
// the tests of one-line errors count the error's own lines.
static inline int stderr_error_lines(const char *err) {
    int n = 0;
    for (const char *s = err; *s; s++) n += *s == '\n';
    const char *kept = strstr(err, "\ndmsh: saved dmsh-step-");
    if (!kept) kept = strstr(err, "\ndmsh: kept in dmsh-step-");  // (a file of an earlier run held the state)
    const char *end = kept ? strchr(kept + 1, '\n') : NULL;
    return n - (kept && strstr(kept, "(no session: the state the script's error stopped; :load it to go on)") && end && !end[1]);
}
