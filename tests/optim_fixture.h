// optim_fixture.h — what the optimizer tests share: a tiny config with a flat schedule and no
// clip, a model on the CPU backend, copies of buffers, and the relative error against a double
// reference. (test_optim.c: the updates; test_optim_step.c: the step around them.)
#pragma once
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../engine/optim.h"

#ifdef DM_DOUBLE
#define TOL 1e-10     // hand computation vs engine, relative
#else
#define TOL 2e-5
#endif

static inline Config tiny_config(void) {
    Config c;
    config_defaults(&c);
    c.d = 8; c.H = 2; c.L = 2; c.E = 2; c.k = 1; c.r = 2; c.f = 4;
    c.engram_rows = 11; c.engram_dim = 2; c.seq = 5; c.batch = 2;
    // a flat schedule and no clip unless a test wants them: mult = 1, grads untouched
    c.warmup = 0; c.lr_cosine = 0; c.clip = 0;
    return c;
}

static inline void make_model(Model *m, const Config *c) {
    dm_err err = {0};
    assert_int_equal(model_create(m, c, backend_cpu(), 7, &err), 0);
}

static inline real *snapshot(const real *p, size_t n) {
    real *s = malloc(sizeof(real) * n);
    memcpy(s, p, sizeof(real) * n);
    return s;
}

static inline double *to_double(const real *p, size_t n) {
    double *s = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) s[i] = p[i];
    return s;
}

// max |a - b| / max |b|, a in real, b in double
static inline double rel_err_d(const real *a, const double *b, size_t n) {
    double mx = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        diff = err_max(diff, fabs((double)a[i] - b[i]));
    }
    return diff / fmax(mx, 1e-30);
}
