// snapshot.c — see snapshot.h.
#include "snapshot.h"
#include <string.h>

void snapshot_take(Snapshot *s, const Engine *e) {
    s->P = e->model.n_params;
    s->R = (size_t)e->cfg.n_orders * e->cfg.engram_rows;
    size_t b = sizeof(real) * s->P;
    s->p = mallocCheck(b); s->m = mallocCheck(b); s->v = mallocCheck(b); s->mom = mallocCheck(b);
    s->row_steps = mallocCheck(sizeof(int64_t) * s->R);
    e->model.be->download(s->p, e->model.params, b);  // parameters are backend memory
    const Backend *ob = e->opt.be;  // the optimizer state is backend memory too
    ob->download(s->m, e->opt.m, b); ob->download(s->v, e->opt.v, b);
    ob->download(s->mom, e->opt.mom, b); ob->download(s->row_steps, e->opt.row_steps, sizeof(int64_t) * s->R);
    s->step = e->step; s->tokens = e->tokens; s->opt_t = e->opt.t; s->skips = e->opt.total_skips;
    s->consecutive = e->opt.consecutive_skips; s->nrows = e->nrows;
    s->arms = e->model.arms;
}

void snapshot_restore(const Snapshot *s, Engine *e) {
    size_t b = sizeof(real) * s->P;
    e->model.be->upload(e->model.params, s->p, b);
    const Backend *ob = e->opt.be;
    ob->upload(e->opt.m, s->m, b); ob->upload(e->opt.v, s->v, b);
    ob->upload(e->opt.mom, s->mom, b); ob->upload(e->opt.row_steps, s->row_steps, sizeof(int64_t) * s->R);
    optim_set_counters(&e->opt, s->opt_t, s->skips, s->consecutive);  // host mirror and backend status
    e->step = s->step; e->tokens = s->tokens; e->nrows = s->nrows;
    e->model.arms = s->arms;
}

void snapshot_free(Snapshot *s) {
    free(s->p); free(s->m); free(s->v); free(s->mom); free(s->row_steps);
    memset(s, 0, sizeof *s);
}
