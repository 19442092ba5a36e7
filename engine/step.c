// step.c — the training step as enqueue + report, and the step graph (step.h; SPEC §8, issue 5).
//
// One step, in this order, all enqueued on the backend (enqueue_body):
//   upload_async  StepHyper and the batch's ids/targets, from host staging
//   step_begin    the record's start time
//   forward       model_forward_enqueue: the per-depth CE sums stay in backend memory
//   step_loss     mean CE and objective (CE + aux) -> run.loss, on the backend
//   backward      model_backward
//   optimizer     optim_enqueue: reads the objective and the StepHyper where they live
//   step_end      the record: hyper-parameters, status, losses, end time, expert load
// None of it waits for the host, and none of its host arguments depends on the step: the
// per-step values come in through the two staged uploads. So on a backend with graphs (CUDA)
// the step is captured once, after STEP_GRAPH_WARM eager steps (grow-only workspaces have
// reached their size by then; a capture asserts that nothing allocated inside it), and every
// later step is ONE graph_launch. The graph is re-captured when anything it baked in changes
// (StepGraphKey: config, arm switches, batch shape, buffer addresses, the backend's allocation
// count); a capture that fails is reported once (engine_notice) and the step runs eagerly.
//
// Staging protocol: the uploads (memcpy nodes in the graph) read the staging buffers when they
// RUN, which may be long after the launch. Before writing the staging for step k the host waits
// (upload_wait) until step k-1's uploads have run — step k-1 has started on the device, so the
// host can run at most about one step ahead, which is all it takes to keep the device busy; the
// batch itself is built beforehand in plain host memory, while the device works.
//
// Report: the records of every pending step come down in one copy; each becomes the metric row
// an eager step would have produced (the same doubles: the CPU backend's step_loss is the host
// arithmetic it replaced), then the optimizer's host mirrors, the retraction's orthogonality
// error and the nan_limit stop are applied in step order.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "../kernels/guard.h"

void step_free(StepRunner *r) {
    const Backend *be = r->be;
    if (be) {
        // a launched graph or an upload may still read these: let everything finish first
        if (be->sync) be->sync();
        if (r->graph) be->graph_free(r->graph);
        void *dev[] = {r->loss, r->ring};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
            if (dev[i]) be->free(dev[i]);
        if (r->stage_hp) be->host_free(r->stage_hp);
        if (r->stage_tok) be->host_free(r->stage_tok);
    }
    free(r->tok);
    free(r->ring_host);
    free(r->arms_after);
    char notice[sizeof r->notice];
    int nn = r->notice_new;
    memcpy(notice, r->notice, sizeof notice);
    memset(r, 0, sizeof *r);
    memcpy(r->notice, notice, sizeof notice);  // a pending message survives a rebuild
    r->notice_new = nn;
}

// The runner's buffers for the live model's backend and a batch of N tokens.
static int runner_setup(Engine *e, int N, dm_err *err) {
    StepRunner *r = &e->run;
    const Model *m = &e->model;
    const Backend *be = m->be;
    if (r->be != be) step_free(r);
    r->be = be;
    if (!r->ring) {
        r->ring = be->alloc(sizeof(StepRecord) * STEP_RING);
        r->loss = be->alloc(sizeof(double) * 2);
        r->stage_hp = be->host_alloc(sizeof(StepHyper));
        r->ring_host = malloc(sizeof(StepRecord) * STEP_RING);
        r->arms_after = malloc(sizeof *r->arms_after * STEP_RING);
        if (!r->ring || !r->loss || !r->stage_hp || !r->ring_host || !r->arms_after) {
            step_free(r);
            return dm_fail(err, "cannot allocate the training step's record ring (%d steps) on %s", STEP_RING, be->name);
        }
    }
    if (N > r->ntok) {
        // the old staging may still be read by an upload in flight (or a graph that names it)
        if (be->sync) be->sync();
        if (r->graph) { be->graph_free(r->graph); r->graph = NULL; }
        if (r->stage_tok) be->host_free(r->stage_tok);
        free(r->tok);
        r->stage_tok = be->host_alloc(sizeof(int) * 2 * (size_t)N);
        r->tok = malloc(sizeof(int) * 2 * (size_t)N);
        r->ntok = r->stage_tok && r->tok ? N : 0;
        if (!r->ntok) return dm_fail(err, "cannot allocate staging for a batch of %d tokens", N);
    }
    return 0;
}

// Every op of one step (see the top of the file). Host effects: the arm counters and the
// forward's host bookkeeping (last_depth, depth_loss markers), the same at every step.
static void enqueue_body(Engine *e) {
    StepRunner *r = &e->run;
    Model *m = &e->model;
    Optim *o = &e->opt;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    int B = m->acts.B, T = m->acts.T, N = B * T;
    be->upload_async(o->hp, r->stage_hp, sizeof(StepHyper));
    be->upload_async(m->acts.x, r->stage_tok, sizeof(int) * (size_t)N);
    be->upload_async(m->acts.tgt, r->stage_tok + N, sizeof(int) * (size_t)N);
    be->step_begin(r->ring, o->hp);
    m->acts.host_x = r->tok;  // the ids in host memory (engram_ram hashes them there)
    model_forward_enqueue(m, B, T, c->L, FWD_TRAIN);
    // the MoE's aux values and routed counts stay where moe_forward wrote them (m->moe_aux,
    // m->moe_load: backend memory); the objective and the record read them there
    int moe = m->arms.on[ARM_MOE], aux_on = moe && m->arms.on[ARM_AUX];
    int depth = m->last_depth;
    uint64_t scored = 0;
    for (int i = 0; i < depth; i++)
        if (!isnan(m->depth_loss[i])) scored |= 1ull << i;
    be->step_loss(r->loss, m->acts.loss_sum, aux_on ? m->moe_aux : NULL, depth, scored, N, c->moe_aux);
    model_backward(m);
    optim_enqueue(o, m, r->loss + 1);
    be->step_end(r->ring, o->hp, o->status, r->loss, moe ? m->moe_load : NULL, depth, c->E);
}

static void key_make(const Engine *e, StepGraphKey *k) {
    const StepRunner *r = &e->run;
    const Model *m = &e->model;
    const Optim *o = &e->opt;
    memset(k, 0, sizeof *k);
    memcpy(&k->cfg, &m->cfg, sizeof k->cfg);
    for (int a = 0; a < ARM_COUNT; a++) k->arms_on[a] = m->arms.on[a];
    k->B = m->acts.B;
    k->T = m->acts.T;
    const void *bufs[] = {m->params, m->grads, m->acts.buf, o->m, o->v, o->mom, o->scratch, o->rows_ws,
                          o->row_steps, o->status, o->hp, o->ss, r->ring, r->loss, r->stage_hp, r->stage_tok};
    _Static_assert(sizeof bufs / sizeof bufs[0] <= sizeof k->bufs / sizeof k->bufs[0], "StepGraphKey.bufs too small");
    memcpy(k->bufs, bufs, sizeof bufs);
    k->allocs = r->be->allocs ? r->be->allocs() : 0;
}

static void drop_graph(StepRunner *r) {
    if (r->graph) r->be->graph_free(r->graph);
    r->graph = NULL;
}

static void arms_counters(const Arms *a, int64_t out[2][ARM_COUNT]) {
    memcpy(out[0], a->fwd, sizeof a->fwd);
    memcpy(out[1], a->bwd, sizeof a->bwd);
}

// Run the staged step: eagerly, as a replay of the captured graph, or capture it now.
static void run_step(Engine *e) {
    StepRunner *r = &e->run;
    Model *m = &e->model;
    const Backend *be = r->be;
    if (m->tab && be->graph_begin && m->cfg.cuda_graph && !r->ram_noted) {
        snprintf(r->notice, sizeof r->notice,
                 "engram_ram=on: every step exchanges the batch's Engram rows with host memory (rows up, "
                 "row gradients and the step's decision down), so it runs un-captured, without the step graph");
        r->notice_new = 1;
        r->ram_noted = 1;
    }
    if (!be->graph_begin || !m->cfg.cuda_graph || m->tab) {  // no graphs here, switched off, or host tables
        drop_graph(r);
        enqueue_body(e);
        r->eager++;
        return;
    }
    StepGraphKey k;
    key_make(e, &k);
    if (memcmp(&k, &r->key, sizeof k) != 0) {  // something the graph baked in changed
        drop_graph(r);
        r->key = k;
        r->warm = 0;
        r->failed = 0;
    }
    if (r->graph) {
        be->graph_launch(r->graph);
        // the host half of the captured step: its arm counters, and the forward's bookkeeping
        // (an eval since may have changed it)
        for (int a = 0; a < ARM_COUNT; a++) { m->arms.fwd[a] += r->delta[0][a]; m->arms.bwd[a] += r->delta[1][a]; }
        m->last_depth = r->fwd_depth;
        for (int a = 0; a < ARM_COUNT; a++) m->last_on[a] = (unsigned char)m->arms.on[a];  // the key holds the arms
        m->last_loss = NAN;
        memcpy(m->depth_loss, r->fwd_marks, sizeof r->fwd_marks);
        r->replays++;
        return;
    }
    if (r->failed || r->warm < STEP_GRAPH_WARM) {
        enqueue_body(e);
        r->warm++;
        r->eager++;
        return;
    }
    // capture: the ops are recorded, none runs; the graph is launched for this very step
    Arms before = m->arms;
    long a0 = be->allocs ? be->allocs() : 0;
    char why[256] = "";
    void *g = NULL;
    if (be->graph_begin(why, sizeof why) == 0) {
        enqueue_body(e);
        g = be->graph_end(why, sizeof why);
        long a1 = be->allocs ? be->allocs() : 0;
        if (g && a1 != a0) {
            be->graph_free(g);
            g = NULL;
            snprintf(why, sizeof why, "%ld backend allocation(s) inside the captured step: a workspace grew after warm-up", a1 - a0);
        }
    }
    if (g) {
        r->graph = g;
        int64_t b[2][ARM_COUNT], a[2][ARM_COUNT];
        arms_counters(&before, b);
        arms_counters(&m->arms, a);
        for (int i = 0; i < ARM_COUNT; i++) { r->delta[0][i] = a[0][i] - b[0][i]; r->delta[1][i] = a[1][i] - b[1][i]; }
        r->fwd_depth = m->last_depth;
        memcpy(r->fwd_marks, m->depth_loss, sizeof r->fwd_marks);
        be->graph_launch(g);
        r->captures++;
        return;
    }
    // nothing of the capture ran: undo its host bookkeeping and run the step eagerly — including
    // the commit its optimizer made (optim_enqueue): the eager rerun can still be refused
    m->arms = before;
    dm_guard_uncommit();
    r->failed = 1;
    snprintf(r->notice, sizeof r->notice,
             "step %lld: the training step could not be captured as a graph on %s (%s); it runs un-captured "
             "until the config, arms or batch change (:set cuda_graph=off to stop trying)",
             (long long)e->step, be->name, why[0] ? why : "no reason given");
    r->notice_new = 1;
    enqueue_body(e);
    r->eager++;
}

// A device workspace that cannot grow mid-step (kernels/guard.h) comes back here while only the
// forward and backward have run (the optimizer commits before it writes): they wrote activations
// and gradients, which the next step rewrites (the backward zeroes the gradients first), so
// undoing the step is forgetting its host bookkeeping. The steps enqueued before are whole and
// stay pending.
static int run_step_guarded(Engine *e, dm_err *err) {
    Model *m = &e->model;
    Arms arms0 = m->arms;
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {
        if (e->run.be->sync) e->run.be->sync();  // what was enqueued before the failure still runs
        m->arms = arms0;
        e->fwd_kind = 0;  // the activations are a partial forward's: no probe reads them as the last one's
        m->last_depth = 0;
        e->fwd_cut = 1;
        return dm_fail(err, "step %lld was not run (nothing of it applied): %s: lower batch or seq", (long long)e->step,
                       g.msg);
    }
    run_step(e);
    dm_guard_close(&g);
    return 0;
}

int engine_step_enqueue(Engine *e, dm_err *err) {
    if (!e->live) return dm_fail(err, "no model: :init builds one (after :preset / :set)");
    if (!e->has_data) return dm_fail(err, "no data: :data PATH opens a corpus");
    StepRunner *r = &e->run;
    if (r->be == e->model.be && r->pending == STEP_RING && engine_report(e, NULL, err)) return 1;
    const Config *c = &e->cfg;
    Model *m = &e->model;
    int B = c->batch, T = c->seq, N = B * T;
    m->cfg.batch = B;
    if (data_fits(&e->data, T, err)) return 1;
    if (runner_setup(e, N, err)) return 1;
    if (model_reserve_try(m, B, T, err)) return 1;
    if (optim_reserve(&e->opt, m, err)) return 1;
    // the batch and the scalars, built on the host while the device may still be busy
    if (data_batch_checked(&e->data, c->seed, e->step, B, T, r->tok, r->tok + N, err)) return 1;
    StepHyper h;
    optim_hyper(&e->opt, m, e->step, &h);
    h.tokens = e->tokens + N;
    h.ntok = N;
    h.slot = r->pending;
    // stage them once the previous step's uploads have read the staging
    if (r->be->upload_wait) r->be->upload_wait();
    *r->stage_hp = h;
    memcpy(r->stage_tok, r->tok, sizeof(int) * 2 * (size_t)N);
    if (run_step_guarded(e, err)) return 1;
    if (m->arms.on[ARM_AUX] && m->arms.on[ARM_MOE]) { m->arms.fwd[ARM_AUX]++; m->arms.bwd[ARM_AUX]++; }
    arms_counters(&m->arms, r->arms_after[r->pending]);
    r->off_mask[r->pending] = arms_off_mask(&m->arms);
    r->pending++;
    e->fwd_kind = 1;  // the activations in memory are this step's forward
    e->fwd_pad = 0;
    e->fwd_step = e->step;
    e->fwd_undone = e->fwd_moved = e->fwd_cut = 0;
    e->step++;
    e->tokens += N;
    if (e->data.n_train > e->trained_upto) e->trained_upto = e->data.n_train;  // (its windows came from there)
    return 0;
}

int engine_report(Engine *e, MetricRow *last, dm_err *err) {
    StepRunner *r = &e->run;
    if (!r->pending || !r->be) return 0;
    Model *m = &e->model;
    int n = r->pending;
    r->pending = 0;
    r->be->download(r->ring_host, r->ring, sizeof(StepRecord) * (size_t)n);  // the one copy (waits)
    for (int k = 0; k < n; k++) {
        const StepRecord *rec = &r->ring_host[k];
        StepInfo info;
        int stop = optim_report(&e->opt, m, &rec->st, &rec->hp, &info, err);
        if (info.retracted) { e->last_orth_err = info.orth_err; m->arms.fwd[ARM_RETRACT]++; }
        MetricRow row;
        memset(&row, 0, sizeof row);
        row.step = rec->hp.step;
        row.tokens = rec->hp.tokens;
        row.loss = rec->loss;
        row.lr = info.lr;
        row.gnorm = info.gnorm;
        row.ms = (double)(rec->t1_ns - rec->t0_ns) / 1e6;
        row.tok_s = (double)rec->hp.ntok / (row.ms / 1e3);
        row.skipped = (int16_t)info.skipped;
        row.arms_off = r->off_mask[k];
        // a NaN is a NaN: printf writes "-nan" for one with its sign bit set, and lines mixed
        // "loss nan ... gnorm -nan" (the sign of a NaN means nothing)
        if (isnan(row.loss)) row.loss = fabs(row.loss);
        if (isnan(row.gnorm)) row.gnorm = fabs(row.gnorm);
        // the routing history behind `:plot experts`: share of this step's assignments per expert
        if (m->cfg.E <= STEP_REC_E) {
            double tot = 0;
            for (int x = 0; x < m->cfg.E; x++) tot += (double)rec->load[x];
            for (int x = 0; x < m->cfg.E && tot > 0; x++) row.expert_frac[x] = (float)((double)rec->load[x] / tot);
        }
        engine_add_row(e, &row);
        if (last) *last = row;
        m->last_loss = rec->loss;
        if (stop) {
            // the run stopped at this step; the ones enqueued after it ran as no-ops on the halted
            // backend: drop them (their rows, their arm counts) and continue from here
            for (int a = 0; a < ARM_COUNT; a++) {
                m->arms.fwd[a] -= r->arms_after[n - 1][0][a] - r->arms_after[k][0][a];
                m->arms.bwd[a] -= r->arms_after[n - 1][1][a] - r->arms_after[k][1][a];
            }
            e->step = rec->hp.step + 1;
            e->tokens = rec->hp.tokens;
            model_read_moe(m);
            return 1;
        }
    }
    // the host mirrors of the last forward's MoE statistics (probes, :plot experts), which the
    // device has by now: the download above waited for every pending step
    model_read_moe(m);
    return 0;
}

int engine_pending(const Engine *e) { return e->run.pending; }

const char *engine_notice(Engine *e) {
    if (e->run.notice_new) {
        e->run.notice_new = 0;
        return e->run.notice;
    }
    if (e->note_new) {
        e->note_new = 0;
        return e->note;
    }
    return NULL;
}
