// snapshot.h — an in-memory copy of the trainable state (parameters, optimizer moments, step
// counters), for commands that must run steps and then put everything back (:bench, the first
// pass of :check determinism).
#pragma once
#include "engine.h"

typedef struct {
    real *p, *m, *v, *mom;
    int64_t *row_steps;
    size_t P, R;
    int64_t step, tokens, opt_t, skips, trained_upto;
    int consecutive, nrows;
    Arms arms;
    double last_orth_err;
} Snapshot;

// 0, or 1 with err filled when the host has no memory for the copy (nothing taken)
int snapshot_take(Snapshot *s, const Engine *e, dm_err *err);
void snapshot_restore(const Snapshot *s, Engine *e);
void snapshot_free(Snapshot *s);
