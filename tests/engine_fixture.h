// engine_fixture.h — what the engine-level tests share: a small structured corpus in a temp file
// (tests must not need ../shared) and a host copy of a model's parameters.
#pragma once
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"

// /tmp/dmsh_PROGRAM_PID.txt: one file per test program and process
static inline void make_corpus(char *path, size_t n) {
    snprintf(path, n, "/tmp/dmsh_%s_%d.txt", program_invocation_short_name, (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 3000; i++) fprintf(f, "the %d-th line says %s.\n", i, i % 3 ? "hello" : "goodbye");
    fclose(f);
}

// the model's parameters, downloaded into a fresh host buffer (the caller frees it)
static inline real *params_of(Engine *e) {
    real *h = malloc(sizeof(real) * e->model.n_params);
    e->model.be->download(h, e->model.params, sizeof(real) * e->model.n_params);
    return h;
}
