// optim.c — the optimizers of SPEC §4 over the model's one contiguous parameter buffer: Muon
// (Nesterov momentum, Newton–Schulz 5, Moonlight scale or muon_colrow), AdamW, lazy Adam on the
// Engram tables; the lr schedule; the global-norm clip; the NaN firewall; the retraction
// cadence. The arithmetic is the backend's optimizer ops (kernels/backend.h; on the CPU
// kernels/cpu/optim_ops.c): this file only orders them and never touches backend memory.
//
// Layout (llm.c style): every moment is ONE buffer of n_params reals, parallel to m->params,
// so tensor i's moments live at the same offset t[i].offset. The CPU backend's alloc is calloc:
// on Linux a large calloc is lazily zero-mapped, so the ranges a group never touches (e.g. `mom`
// over the tables, `m`/`v` over Muon matrices) cost no physical memory.
//
// One step, all on the backend and in this order (the host only enqueues):
//   opt_sumsq    per-tensor gradient sums of squares + non-finite flags (fixed chunk order)
//   opt_decide   -> status: gnorm, skip (NaN firewall, nan_limit halt), clip factor, t, cadence
//   opt_clip     gradients *= clip / gnorm when clipped
//   opt_adamw / opt_muon / opt_adam_rows   per tensor by group; each reads status (skip: no-op)
//   opt_retract  U, V factors, when the status says this step retracts
// Every scalar the ops need is in the StepHyper at o->hp (backend memory) and the loss is a
// backend double, so the enqueued sequence is the same at every step: a CUDA graph of it
// replays correctly. The host learns the outcome from a downloaded status (optim_report): at
// the end of optim_step, or on the engine's report of the step's record (engine/step.c).
#include "optim.h"
#include "../kernels/guard.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// one opt_sumsq segment per tensor (first_bad is a tensor index)
_Static_assert(P_COUNT <= OPT_MAX_SEGS, "the tensor table exceeds OPT_MAX_SEGS segments");

// ----------------------------------------------------------------------------------------
// create / free

void optim_set_counters(Optim *o, int64_t t, int64_t total_skips, int consecutive_skips) {
    o->t = t;
    o->total_skips = total_skips;
    o->consecutive_skips = consecutive_skips;
    OptStatus st;
    memset(&st, 0, sizeof st);
    st.t = t;
    st.total_skips = total_skips;
    st.consecutive_skips = consecutive_skips;
    st.first_bad = -1;
    st.scale = 1;
    st.orth_err = -1;
    o->be->upload(o->status, &st, sizeof st);
}

// Muon runs on groups: a tensor and the ones right after it in the layout (Model.order, rising
// offsets) with the same matrix shape (kda.wq/wk/wv, kda.wf1/wg1, mem.wk/wv, moe.V1/U2) go to the
// backend as one stack of matrices. The walk is in layout order, not the enum's: wf1 and wg1 are
// neighbours only there (in the enum wf2 sits between them). Every matrix's update is its own
// (norm, Newton-Schulz and apply per matrix: Backend.opt_muon): on the CPU the numbers are those
// of one call per tensor, bit for bit; on a GPU a strided-batched product may sum in another order
// than a single one (cuBLAS picks by shape and batch: deterministic, not the same bits). A device
// launches a group's kernels once (some 45 launches per call at the CUDA backend). pos is the
// tensor's place in m->order; returns the place after the group's last tensor and the group's
// matrix count; skip (frozen tensors) ends a group.
static int muon_group(const Model *m, int pos, int (*skip)(const Model *, int), int *n_mats) {
    const ParamTensor *t = &m->t[m->order[pos]];
    int j = pos + 1, n = t->n_mats;
    for (; j < P_COUNT; j++) {
        const ParamTensor *u = &m->t[m->order[j]], *p = &m->t[m->order[j - 1]];
        if (u->group != GROUP_MUON || u->n_mats <= 0 || u->rows != t->rows || u->cols != t->cols ||
            u->offset != p->offset + p->numel || u->numel == 0 || (skip && skip(m, m->order[j])))
            break;
        n += u->n_mats;
    }
    *n_mats = n;
    return j;
}

int optim_create(Optim *o, const Model *m, dm_err *err) {
    memset(o, 0, sizeof *o);
    const Backend *be = m->be;
    o->be = be;
    size_t n = m->n_dev;  // engram_ram: the tables' moments are host memory (below)
    o->m = be->alloc(sizeof(real) * n);
    o->v = be->alloc(sizeof(real) * n);
    o->mom = be->alloc(sizeof(real) * n);
    // scratch: the largest Muon matrix's update + Newton–Schulz workspace, or the largest
    // retraction workspace (they are never needed at once)
    size_t need = 0;
    for (int pos = 0; pos < P_COUNT; pos++) {
        int i = m->order[pos];
        const ParamTensor *t = &m->t[i];
        o->segs[i].off = t->offset;
        o->segs[i].n = t->numel;
        if (t->n_mats <= 0 || t->rows <= 0 || t->cols <= 0) continue;
        int gm = t->n_mats;  // the largest Muon group this tensor starts (muon_group)
        if (t->group == GROUP_MUON && t->numel) muon_group(m, pos, NULL, &gm);
        size_t s = be->opt_muon_scratch_size(gm, t->rows, t->cols);
        if (s > need) need = s;
        if (t->orthonormal && (s = be->opt_retract_scratch_size(t->n_mats, t->rows, t->cols)) > need) need = s;
    }
    o->n_scratch = need;
    o->scratch = be->alloc(sizeof(real) * (need ? need : 1));
    size_t nrows = (size_t)m->cfg.n_orders * (size_t)m->cfg.engram_rows;
    if (m->tab) {
        size_t ntab = m->n_params - m->n_dev;
        o->tab_m = calloc(ntab, sizeof(real));
        o->tab_v = calloc(ntab, sizeof(real));
        o->tab_rs = calloc(nrows ? nrows : 1, sizeof(int64_t));
        o->tab_marks = calloc(nrows ? nrows : 1, 1);
        if (!o->tab_m || !o->tab_v || !o->tab_rs || !o->tab_marks) {
            optim_free(o);
            return dm_fail(err, "cannot allocate the Engram tables' Adam state (2 x %zu reals) in host memory", ntab);
        }
        nrows = 0;  // the backend keeps no row counts
    }
    o->row_steps = be->alloc(sizeof(int64_t) * (nrows ? nrows : 1));
    o->status = be->alloc(sizeof(OptStatus));
    o->ss = be->alloc(sizeof(double) * P_COUNT);
    o->bad = be->alloc(sizeof(int32_t) * P_COUNT);
    o->hp = be->alloc(sizeof(StepHyper));
    o->loss_in = be->alloc(sizeof(double));
    if (!o->m || !o->v || !o->mom || !o->scratch || !o->row_steps || !o->status || !o->ss || !o->bad || !o->hp ||
        !o->loss_in) {
        optim_free(o);
        return dm_fail(err, "cannot allocate optimizer state (3 x %zu reals) on %s: try a smaller preset", n, be->name);
    }
    optim_set_counters(o, 0, 0, 0);
    return 0;
}

void optim_free(Optim *o) {
    const Backend *be = o->be;
    if (be) {
        void *bufs[] = {o->m, o->v, o->mom, o->scratch, o->rows_ws, o->row_steps, o->status, o->ss, o->bad,
                        o->hp, o->loss_in};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) be->free(bufs[i]);
    }
    free(o->tab_m); free(o->tab_v); free(o->tab_rs); free(o->tab_marks); free(o->tab_chunks);
    memset(o, 0, sizeof *o);
}

// ----------------------------------------------------------------------------------------
// schedule
//
// mult(s), s the 0-based training step, W = warmup, S = cfg->steps (the horizon), f = lr_min_frac:
//   s < W                         : (s + 1) / W                     (linear warmup, reaches 1 at s = W-1)
//   lr_cosine == 0 or S == 0      : 1                               (constant after warmup)
//   otherwise                     : f + (1 - f) * (1 + cos(pi * p)) / 2,
//                                   p = clamp((s - W) / (S - W), 0, 1)  (p = 1 when S <= W)
// so mult = 1 at s = W, mult = f at s = S, and it stays at f past the horizon.
double lr_schedule_mult(const Config *c, int64_t s) {
    if (s < 0) s = 0;
    // past the horizon: the floor, also when the horizon ends inside the warmup (the ramp used
    // to go on climbing past it, then drop to the floor when the warmup ended)
    if (c->lr_cosine && c->steps > 0 && s >= c->steps) return c->lr_min_frac;
    if (c->warmup > 0 && s < c->warmup) return (double)(s + 1) / c->warmup;
    if (!c->lr_cosine || c->steps <= 0) return 1.0;
    double span = (double)(c->steps - c->warmup);
    double p = span > 0 ? (double)(s - c->warmup) / span : 1.0;
    if (p < 0) p = 0;
    if (p > 1) p = 1;
    return c->lr_min_frac + (1.0 - c->lr_min_frac) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}

// ----------------------------------------------------------------------------------------
// Muon

void muon_orthogonalize(real *G, int rows, int cols, real *scratch) {
    opt_muon_orthogonalize(G, rows, cols, scratch);
}

// One Muon step on tensor t (every matrix it holds), lr = hp->lr_muon:
//   buf = mu buf + g;  u = g + mu buf  (Nesterov);  u = NS5(u / (||u||_F + 1e-7));
//   u *= 0.2 sqrt(max(rows, cols))   (or colrow-normalise and u *= 0.2);
//   p = p (1 - lr wd) - lr u          (decoupled decay)
static void muon_tensor(Optim *o, Model *m, const ParamTensor *t, int n_mats) {
    o->be->opt_muon(m->params + t->offset, m->grads + t->offset, o->mom + t->offset, n_mats, t->rows, t->cols,
                    m->cfg.muon_colrow, o->scratch, o->hp, o->status);
}

// ----------------------------------------------------------------------------------------
// Adam

// AdamW over tensor t (bias correction by the status's applied-step count); decay 0: no wd
static void adamw_tensor(Optim *o, Model *m, const ParamTensor *t, int decay) {
    size_t off = t->offset;
    o->be->opt_adamw(m->params + off, m->grads + off, o->m + off, o->v + off, t->numel, decay, o->hp, o->status);
}

// The controller's gates: row j of ctrl.w / entry j of ctrl.b is arm j's gate (attn, mem, ffn).
// A gate whose arm is off reads nothing, so its gradient is 0, but a full AdamW step would still
// move it (momentum, weight decay): step only the rows of arms that are on, each as its own
// slice (the same element-wise update, so all-on is bit-identical to one call on the tensor).
static const int gate_arm[3] = {ARM_KDA, ARM_ENGRAM, ARM_MOE};
static void ctrl_gates(Optim *o, Model *m, const ParamTensor *t, int decay) {
    size_t w = t->numel / 3;  // one row
    if (m->arms.on[gate_arm[0]] && m->arms.on[gate_arm[1]] && m->arms.on[gate_arm[2]]) {
        adamw_tensor(o, m, t, decay);
        return;
    }
    for (int j = 0; j < 3; j++) {
        if (!m->arms.on[gate_arm[j]]) continue;
        size_t off = t->offset + (size_t)j * w;
        o->be->opt_adamw(m->params + off, m->grads + off, o->m + off, o->v + off, w, decay, o->hp, o->status);
    }
}

// 1 when the last forward read table rows (acts.rows holds them)
static int tables_read(const Model *m) {
    const Acts *a = &m->acts;
    return a->rows && a->B > 0 && a->T > 0 && m->arms.on[ARM_ENGRAM];
}

// Lazy Adam (no decay) on the Engram tables [O, R, D]: only the rows the last forward read
// (m->acts.rows [O, N], row rows[o*N + t] of table o) are updated, and only their moments move.
// Bias correction is per row: row_steps[o*R + r] counts the updates that row has received, so a
// row read for the first time at global step 1000 is corrected as a first step (1-b^1), exactly
// as if it had its own Adam (the standard "lazy Adam" convention; with a global count the first
// update of a rarely-read row would be scaled down by 1-b1 ~ 0.1 relative to 1-b1^t).
// A row the batch reads several times is updated once (its gradient already sums the reads).
static void adam_tables(Optim *o, Model *m) {
    const Config *c = &m->cfg;
    const ParamTensor *t = &m->t[P_TABLES];
    const Acts *a = &m->acts;
    if (!tables_read(m)) return;  // nothing read
    size_t off = t->offset;
    o->be->opt_adam_rows(m->params + off, m->grads + off, o->m + off, o->v + off, o->row_steps, a->rows,
                         c->n_orders, a->B * a->T, c->engram_rows, c->engram_dim, o->rows_ws, o->hp, o->status);
}
// The lazy-Adam workspace may depend on N (the CUDA sort): grown when the batch grows, before
// the step enqueues anything.
int optim_reserve(Optim *o, const Model *m, dm_err *err) {
    if (!tables_read(m)) return 0;
    if (m->tab) {  // host-RAM tables: host scratch only
        size_t need = opt_rows_chunk_ws_size(m->cfg.n_orders, m->acts.B * m->acts.T);
        if (need <= o->n_tab_chunks) return 0;
        free(o->tab_chunks);
        o->tab_chunks = malloc(sizeof(int64_t) * need);
        o->n_tab_chunks = o->tab_chunks ? need : 0;
        if (!o->tab_chunks) return dm_fail(err, "cannot allocate %zu bytes of table-norm scratch", sizeof(int64_t) * need);
        return 0;
    }
    size_t ws = o->be->opt_adam_rows_ws_size(m->cfg.n_orders, m->acts.B * m->acts.T, m->cfg.engram_rows);
    if (o->rows_ws && ws <= o->n_rows_ws) return 0;
    if (o->rows_ws) o->be->free(o->rows_ws);
    o->rows_ws = o->be->alloc(ws ? ws : 1);
    o->n_rows_ws = o->rows_ws ? ws : 0;
    if (!o->rows_ws) return dm_fail(err, "cannot allocate %zu bytes of lazy-Adam workspace on %s", ws, o->be->name);
    return 0;
}

// ----------------------------------------------------------------------------------------
// the step

// the retraction period the status decides on: 0 when the arm is off
static int retract_period(const Model *m) {
    if (!m->arms.on[ARM_RETRACT] || m->cfg.retract_every <= 0) return 0;
    // nothing to retract when every orthonormal factor belongs to an arm that is off (the MoE's):
    // no retraction step, so the retract counter does not count one
    for (int i = 0; i < P_COUNT; i++) {
        int a = param_arm(i);
        if (m->t[i].orthonormal && m->t[i].numel && (a < 0 || m->arms.on[a])) return m->cfg.retract_every;
    }
    return 0;
}

void optim_hyper(const Optim *o, const Model *m, int64_t step, StepHyper *hp) {
    (void)o;
    const Config *c = &m->cfg;
    memset(hp, 0, sizeof *hp);
    hp->mult = lr_schedule_mult(c, step);
    hp->lr = c->lr * hp->mult;
    hp->lr_muon = c->lr_muon * hp->mult;
    hp->wd = c->wd;
    hp->beta1 = c->beta1; hp->beta2 = c->beta2; hp->eps = c->eps;
    hp->muon_momentum = c->muon_momentum;
    hp->clip = c->clip;
    hp->step = step;
    hp->nan_limit = c->nan_limit;
    hp->retract_every = retract_period(m);
}

// Host-RAM tables, part 1: the tables' sum of squares and non-finite flag from the rows the
// batch read (bit for bit opt_sumsq's value over the whole segment), into the backend's
// per-tensor arrays at P_TABLES (the last segment: opt_sumsq skipped it).
// The rows that hold gradient are the ones the last backward wrote (dirty_rows [O, dirty_n]);
// none when the engram arm was off.
static void ram_tables_norm(Optim *o, Model *m) {
    const Config *c = &m->cfg;
    double ss = 0;
    int32_t bad = 0;
    if (m->dirty_n > 0) {
        if (o->n_tab_chunks < opt_rows_chunk_ws_size(c->n_orders, m->dirty_n)) {  // optim_reserve grows it
            fprintf(stderr, "%s:%d: internal: the table-norm scratch was not reserved for %d tokens\n", __FILE__,
                    __LINE__, m->dirty_n);
            abort();
        }
        opt_sumsq_rows(&ss, &bad, m->tab_grad, m->dirty_rows, c->n_orders, m->dirty_n, c->engram_rows,
                       c->engram_dim, o->tab_chunks);
    }
    o->be->upload(o->ss + P_TABLES, &ss, sizeof ss);
    o->be->upload(o->bad + P_TABLES, &bad, sizeof bad);
}
// Host-RAM tables, part 2: clip and lazy Adam on the rows read, with the backend's decision
// (st) and scalars (hp) — the CPU's own ops on host memory, so the numbers are the ones the
// tables would get in backend memory.
static void ram_tables_update(Optim *o, Model *m, const OptStatus *st, const StepHyper *hp) {
    const Config *c = &m->cfg;
    if (m->dirty_n <= 0) return;  // nothing read (the engram arm was off)
    int O = c->n_orders, N = m->dirty_n, D = c->engram_dim;
    opt_clip_rows(m->tab_grad, m->dirty_rows, O, N, c->engram_rows, D, o->tab_marks, st);
    opt_adam_rows(m->tab, m->tab_grad, o->tab_m, o->tab_v, o->tab_rs, m->dirty_rows, O, N, c->engram_rows, D,
                  o->tab_marks, hp, st);
}

// Enqueue the whole step on the backend (no host round trip; see the top of the file). Under
// engram_ram there are two: the tables' norm goes up before the decision, and the decision
// comes down after it; the host then updates the table rows while the backend runs the rest.
static int frozen(const Model *m, int i) {
    int a = param_arm(i);
    return a >= 0 && !m->arms.on[a];
}

void optim_enqueue(Optim *o, Model *m, const double *loss) {
    const Config *c = &m->cfg;
    const Backend *be = o->be;
    int retract_every = retract_period(m);
    int ram = m->tab != NULL;
    // (1) NaN firewall + (2) global norm and clip factor, decided on the backend
    be->opt_sumsq(o->ss, o->bad, m->grads, o->segs, ram ? P_COUNT - 1 : P_COUNT);
    if (ram) ram_tables_norm(o, m);
    be->opt_decide(o->status, o->ss, o->bad, P_COUNT, loss, o->hp);
    // the point of no return: from here the step writes weights and moments, which a failed
    // allocation could not undo (the updates below allocate nothing: their workspaces were
    // reserved with the optimizer; a raise after this ends the process instead of lying)
    dm_guard_commit();
    OptStatus st;
    StepHyper hp;
    if (ram) {
        be->download(&st, o->status, sizeof st);
        be->download(&hp, o->hp, sizeof hp);
    }
    be->opt_clip(m->grads, m->n_dev, o->status);
    // (3) updates per group. A tensor of an arm that is off is not touched (param_arm): no
    // momentum step, no decay, no retraction — the arm comes back as it was switched off (and
    // so does its gate row of the controller, ctrl_gates). Every
    // other tensor steps, even with an all-zero gradient (its moments decay). In layout order
    // (muon_group); each tensor's update reads and writes only its own slices.
    for (int pos = 0; pos < P_COUNT; pos++) {
        int i = m->order[pos];
        const ParamTensor *t = &m->t[i];
        if (t->numel == 0 || frozen(m, i)) continue;
        switch (t->group) {
        case GROUP_TABLE:
            if (!ram) adam_tables(o, m);
            break;
        case GROUP_MUON:
            if (!c->opt_adamw && t->n_mats > 0) {
                int n, next = muon_group(m, pos, frozen, &n);
                muon_tensor(o, m, t, n);
                pos = next - 1;  // the group's other tensors are done
            } else {
                adamw_tensor(o, m, t, 1);
            }
            break;
        case GROUP_ADAMW:
            if (i == P_CTRL_W) ctrl_gates(o, m, t, 1);
            else adamw_tensor(o, m, t, 1);
            break;
        case GROUP_ADAMW_1D:
            if (i == P_CTRL_B) ctrl_gates(o, m, t, 0);
            else adamw_tensor(o, m, t, 0);
            break;
        }
    }
    // (4) retraction of every orthonormal factor, on the steps the status marks (t % every)
    if (retract_every)
        for (int i = 0; i < P_COUNT; i++) {
            const ParamTensor *t = &m->t[i];
            if (!t->orthonormal || frozen(m, i)) continue;
            be->opt_retract(m->params + t->offset, t->n_mats, t->rows, t->cols, c->retract_iters, o->scratch,
                            o->status);
        }
    if (ram) ram_tables_update(o, m, &st, &hp);  // host work, while the backend runs the above
}

void optim_state_get(const Optim *o, const Model *m, real *mm, real *vv, real *mom, int64_t *rs) {
    const Backend *be = o->be;
    size_t nd = m->n_dev, nt = m->n_params - m->n_dev;
    size_t R = (size_t)m->cfg.n_orders * (size_t)m->cfg.engram_rows;
    be->download(mm, o->m, sizeof(real) * nd);
    be->download(vv, o->v, sizeof(real) * nd);
    be->download(mom, o->mom, sizeof(real) * nd);
    if (o->tab_m) {
        memcpy(mm + nd, o->tab_m, sizeof(real) * nt);
        memcpy(vv + nd, o->tab_v, sizeof(real) * nt);
        memset(mom + nd, 0, sizeof(real) * nt);  // Muon momentum never covers the tables
        memcpy(rs, o->tab_rs, sizeof(int64_t) * R);
    } else {
        be->download(rs, o->row_steps, sizeof(int64_t) * R);
    }
}

void optim_state_put(Optim *o, const Model *m, const real *mm, const real *vv, const real *mom, const int64_t *rs) {
    const Backend *be = o->be;
    size_t nd = m->n_dev, nt = m->n_params - m->n_dev;
    size_t R = (size_t)m->cfg.n_orders * (size_t)m->cfg.engram_rows;
    be->upload(o->m, mm, sizeof(real) * nd);
    be->upload(o->v, vv, sizeof(real) * nd);
    be->upload(o->mom, mom, sizeof(real) * nd);
    if (o->tab_m) {
        memcpy(o->tab_m, mm + nd, sizeof(real) * nt);
        memcpy(o->tab_v, vv + nd, sizeof(real) * nt);
        memcpy(o->tab_rs, rs, sizeof(int64_t) * R);
    } else {
        be->upload(o->row_steps, rs, sizeof(int64_t) * R);
    }
}

int optim_report(Optim *o, const Model *m, const OptStatus *st, const StepHyper *hp, StepInfo *info,
                 dm_err *err) {
    memset(info, 0, sizeof *info);
    info->lr = hp->lr;
    info->lr_muon = hp->lr_muon;
    info->orth_err = -1;
    o->t = st->t;
    o->consecutive_skips = st->consecutive_skips;
    o->total_skips = st->total_skips;
    info->gnorm = st->gnorm;
    if (st->skip) {
        info->skipped = 1;
        info->too_big = st->too_big;
        snprintf(info->first_bad, sizeof info->first_bad, "%s",
                 st->loss_bad || st->first_bad < 0 || st->first_bad >= P_COUNT ? "loss" : m->t[st->first_bad].name);
        if (st->halted) {
            // the backend makes every step after this one a no-op until the halt is cleared:
            // clear it (same counters), so the run can be resumed from here
            optim_set_counters(o, st->t, st->total_skips, st->consecutive_skips);
            // a non-finite loss usually means the weights already are: name the first such
            // tensor (one download, on this path only) rather than "loss"
            if (st->loss_bad || st->first_bad < 0) {
                real *p = malloc(sizeof(real) * m->n_dev);
                int bad = -1;
                if (p) {
                    o->be->download(p, m->params, sizeof(real) * m->n_dev);
                    for (int i = 0; i < P_COUNT && bad < 0; i++) {
                        const ParamTensor *t = &m->t[i];
                        if (t->offset + t->numel > m->n_dev) continue;  // host-RAM tables
                        for (size_t j = 0; j < t->numel; j++)
                            if (!isfinite(p[t->offset + j])) { bad = i; break; }
                    }
                    free(p);
                }
                if (bad >= 0)
                    return dm_fail(err, "step %lld: nan_limit (%d) consecutive non-finite steps; the parameters are non-finite (first: %s): an earlier update broke them — :load a checkpoint and lower lr / lr_muon",
                                   (long long)hp->step, hp->nan_limit, m->t[bad].name);
            }
            if (st->too_big)  // (finite, but the updates would square it into inf: SPEC's non-finite norm in real)
                return dm_fail(err, "step %lld: nan_limit (%d) consecutive skipped steps; the last one's gradient norm %.3g is past "
                               REAL_NAME "'s range when squared (largest in %s) (hint: :load an earlier checkpoint if there is one, then "
                               "lower lr / lr_muon%s)", (long long)hp->step, hp->nan_limit, st->gnorm, info->first_bad,
                               // (clipped, it is past range only in the double build, where no clip brings an inf norm back)
                               hp->clip > 0 ? "" : ", or turn clipping on, e.g. clip=1 (it is off)");
            // the loss and a gradient: both named (the tensor was left out: QA, session 34)
            int also = st->loss_bad && st->first_bad >= 0 && st->first_bad < P_COUNT;
            // (skipped steps leave the weights as they are, and they met nan_limit batches in a row:
            // a checkpoint from before, if there is one, is the state to go on from)
            return dm_fail(err, "step %lld: nan_limit (%d) consecutive non-finite steps; first non-finite tensor: %s%s%s (hint: :load an "
                           "earlier checkpoint if there is one, then lower lr or %s)",
                           (long long)hp->step, hp->nan_limit, info->first_bad, also ? ", and the gradient of " : "",
                           also ? m->t[st->first_bad].name : "", hp->clip > 0 ? "lower clip" : "turn clipping on, e.g. clip=1 (it is off)");
        }
        return 0;
    }
    // the orthogonality error is only measured when we retract (it costs a Gram per factor);
    // otherwise it is reported as -1 ("not measured")
    info->retracted = st->retract;
    info->orth_err = st->retract ? st->orth_err : -1;
    return 0;
}

int optim_step(Optim *o, Model *m, int64_t step, double loss, StepInfo *info, dm_err *err) {
    StepInfo local;
    if (!info) info = &local;
    StepHyper h;
    optim_hyper(o, m, step, &h);
    if (optim_reserve(o, m, err)) return 1;
    o->be->upload(o->hp, &h, sizeof h);
    o->be->upload(o->loss_in, &loss, sizeof loss);
    optim_enqueue(o, m, o->loss_in);
    OptStatus st;
    o->be->download(&st, o->status, sizeof st);
    return optim_report(o, m, &st, &h, info, err);
}
