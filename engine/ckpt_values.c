// ckpt_values.c — a loaded checkpoint's numbers checked before any of them reaches the model
// (ckpt_values.h).
#include <math.h>
#include <string.h>
#include "ckpt_values.h"

// the first index of x [n] that is not finite (or, with nonneg, below zero); n when none
static size_t first_bad(const real *x, size_t n, int nonneg) {
    for (size_t i = 0; i < n; i++) {
        real a;
        memcpy(&a, x + i, sizeof a);  // (the section's bytes need not be aligned)
        if (!isfinite(a) || (nonneg && a < 0)) return i;
    }
    return n;
}

int ckpt_check_values(const char *path, const real *params, const real *m, const real *v, const real *mom, size_t n,
                      const int64_t *row_steps, size_t nrs, int64_t max_steps, dm_err *err) {
    struct { const char *name; const real *x; int nonneg; } sec[] = {
        {"params", params, 0}, {"optim.m", m, 0}, {"optim.v", v, 1}, {"optim.mom", mom, 0},
    };
    for (size_t s = 0; s < sizeof sec / sizeof sec[0]; s++) {
        size_t i = first_bad(sec[s].x, n, sec[s].nonneg);
        if (i < n) {
            real a;
            memcpy(&a, sec[s].x + i, sizeof a);
            return dm_fail(err, "%s: section '%s' holds %g at index %zu (%s): no run writes that; not loaded", path,
                           sec[s].name, (double)a, i, sec[s].nonneg ? "a second moment must be finite and >= 0" : "not finite");
        }
    }
    for (size_t i = 0; i < nrs; i++) {
        int64_t r;
        memcpy(&r, row_steps + i, sizeof r);
        if (r < 0 || r > max_steps)
            return dm_fail(err, "%s: section 'optim.row_steps' holds %lld at row %zu (a row's update count is 0..%lld, the run's steps): not loaded",
                           path, (long long)r, i, (long long)max_steps);
    }
    return 0;
}
