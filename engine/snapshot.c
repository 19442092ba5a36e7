// snapshot.c — see snapshot.h.
#include "snapshot.h"
#include <string.h>

void snapshot_take(Snapshot *s, const Engine *e) {
    s->P = e->model.n_params;
    s->R = (size_t)e->cfg.n_orders * e->cfg.engram_rows;
    size_t b = sizeof(real) * s->P;
    s->p = mallocCheck(b); s->m = mallocCheck(b); s->v = mallocCheck(b); s->mom = mallocCheck(b);
    s->row_steps = mallocCheck(sizeof(int64_t) * s->R);
    memcpy(s->p, e->model.params, b); memcpy(s->m, e->opt.m, b); memcpy(s->v, e->opt.v, b);
    memcpy(s->mom, e->opt.mom, b); memcpy(s->row_steps, e->opt.row_steps, sizeof(int64_t) * s->R);
    s->step = e->step; s->tokens = e->tokens; s->opt_t = e->opt.t; s->skips = e->opt.total_skips;
    s->consecutive = e->opt.consecutive_skips; s->nrows = e->nrows;
    s->arms = e->model.arms;
}

void snapshot_restore(const Snapshot *s, Engine *e) {
    size_t b = sizeof(real) * s->P;
    memcpy(e->model.params, s->p, b); memcpy(e->opt.m, s->m, b); memcpy(e->opt.v, s->v, b);
    memcpy(e->opt.mom, s->mom, b); memcpy(e->opt.row_steps, s->row_steps, sizeof(int64_t) * s->R);
    e->step = s->step; e->tokens = s->tokens; e->opt.t = s->opt_t; e->opt.total_skips = s->skips;
    e->opt.consecutive_skips = s->consecutive; e->nrows = s->nrows;
    e->model.arms = s->arms;
}

void snapshot_free(Snapshot *s) {
    free(s->p); free(s->m); free(s->v); free(s->mom); free(s->row_steps);
    memset(s, 0, sizeof *s);
}
