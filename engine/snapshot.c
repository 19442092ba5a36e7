// snapshot.c — see snapshot.h.
#include "snapshot.h"
#include <string.h>

int snapshot_take(Snapshot *s, const Engine *e, dm_err *err) {
    s->P = e->model.n_params;
    s->R = (size_t)e->cfg.n_orders * e->cfg.engram_rows;
    size_t b = sizeof(real) * s->P, rb = sizeof(int64_t) * s->R;
    // (a host short of the copy is the command's error: mallocCheck ended the process, and the
    // trained state with it, at a :bench: QA, session 41)
    s->p = malloc(b ? b : 1); s->m = malloc(b ? b : 1); s->v = malloc(b ? b : 1); s->mom = malloc(b ? b : 1);
    s->row_steps = malloc(rb ? rb : 1);
    if (!s->p || !s->m || !s->v || !s->mom || !s->row_steps) {
        snapshot_free(s);
        return dm_fail(err, "no host memory for a copy of the state to restore after (%.0f MB: the parameters and three optimizer "
                       "moments); nothing ran, the model is as it was", (4.0 * b + rb) / 1048576.0);
    }
    model_params_get(&e->model, s->p);  // wherever the parts live (backend, host tables)
    optim_state_get(&e->opt, &e->model, s->m, s->v, s->mom, s->row_steps);
    s->step = e->step; s->tokens = e->tokens; s->opt_t = e->opt.t; s->skips = e->opt.total_skips;
    s->trained_upto = e->trained_upto;
    s->consecutive = e->opt.consecutive_skips; s->nrows = e->nrows;
    s->arms = e->model.arms;
    s->last_orth_err = e->last_orth_err;
    return 0;
}

void snapshot_restore(const Snapshot *s, Engine *e) {
    model_params_put(&e->model, s->p);
    optim_state_put(&e->opt, &e->model, s->m, s->v, s->mom, s->row_steps);
    optim_set_counters(&e->opt, s->opt_t, s->skips, s->consecutive);  // host mirror and backend status
    e->step = s->step; e->tokens = s->tokens; e->nrows = s->nrows;
    e->trained_upto = s->trained_upto;
    e->model.arms = s->arms;
    e->last_orth_err = s->last_orth_err;
    // the activations and expert loads in memory came from steps the restore undid: they
    // describe weights that no longer exist (probes refuse them until the next forward)
    e->fwd_kind = 0;
    e->fwd_undone = e->model.last_depth > 0;
    e->model.last_depth = 0;
}

void snapshot_free(Snapshot *s) {
    free(s->p); free(s->m); free(s->v); free(s->mom); free(s->row_steps);
    memset(s, 0, sizeof *s);
}
