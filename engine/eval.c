// eval.c — the held-out eval (:eval, :eval-depths), the eval window and its byte-set hash,
// and the unigram..5-gram anchors drawn beside its bpb. Split from engine.c (one concern a file).
#include "engine.h"
#include "../kernels/guard.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine_internal.h"

// Ctrl-C (SIGINT, SIGTERM in scripts): long commands check it between their units of work
static int interrupted(const Engine *e) { return e->interrupt && *e->interrupt; }

int engine_eval_window(const Engine *e, int64_t *nseq, dm_err *err) {
    if (!e->has_data) return dm_fail(err, "no data: :data PATH opens a corpus");
    const Config *c = &e->cfg;
    *nseq = data_eval_nseq(&e->data, c->eval_bytes, c->seq);
    if (*nseq >= 1) return 0;
    if (c->eval_bytes < e->data.n_eval - 1) return config_validate_eval(c, err);
    return dm_fail(err, "the eval split holds no full sequence of %d bytes (it has %lld): a larger eval split or a smaller seq",
                   c->seq, (long long)e->data.n_eval);
}

// One forward of the eval. A device workspace that cannot grow comes back here (kernels/guard.h)
// as an error: a forward writes nothing but activations, so the model is as it was.
static int eval_forward(Model *m, int *x, int *y, int B, int T, int depth, int mode, dm_err *err) {
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {
        if (m->be->sync) m->be->sync();
        return dm_fail(err, "the eval was not run (no row recorded): %s: lower batch or seq", g.msg);
    }
    model_forward(m, x, y, B, T, depth, mode);
    dm_guard_close(&g);
    return 0;
}

int engine_eval_set_now(const Engine *e, int64_t *window, uint32_t *set, dm_err *err) {
    if (!e->has_data) return dm_fail(err, "no data");
    int64_t nseq = 0;
    int T = e->cfg.seq;
    if (engine_eval_window(e, &nseq, err)) return 1;
    int *x = mallocCheck(sizeof(int) * T), *y = mallocCheck(sizeof(int) * T);
    uint32_t hs = eval_set_begin();
    int bad = 0;
    for (int64_t s0 = 0; s0 < nseq && !bad; s0++) {  // the bytes engine_eval hashes, in its order
        bad = data_eval_seq_checked(&e->data, s0, T, x, y, err);
        if (!bad) hs = eval_set_add(hs, x, T);
        if (!bad && s0 + 1 == nseq) hs = eval_set_add(hs, y + T - 1, 1);
    }
    free(x); free(y);
    if (bad) return 1;
    *window = nseq * T;
    *set = eval_set_end(hs);
    return 0;
}

int engine_eval(Engine *e, int depth, EvalResult *r, dm_err *err) {
    if (engine_need(e, 1, err)) return 1;
    if (engine_report(e, NULL, err)) return 1;  // the train rows before the eval rows
    engine_corpus_check(e);
    const Config *c = &e->cfg;
    if (depth < 0 || depth > c->L) return dm_fail(err, "depth=%d out of range: 1..%d (L), or :eval-depths for all", depth, c->L);
    int T = c->seq, B = c->batch;
    int64_t nseq = 0;
    if (engine_eval_window(e, &nseq, err)) return 1;
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 64; i++) r->bpb[i] = NAN;
    r->nseq = nseq; r->T = T; r->window = nseq * T;
    r->depth_lo = depth ? depth : 1;
    r->depth_hi = depth ? depth : c->L;
    Model *m = &e->model;
    Arms before = m->arms;
    double sum[64] = {0};
    if (model_reserve_try(&e->model, B, T, err)) return 1;
    int *x = mallocCheck(sizeof(int) * B * T), *y = mallocCheck(sizeof(int) * B * T);
    uint32_t hs = eval_set_begin();
    for (int64_t s0 = 0; s0 < nseq; s0 += B) {
        if (interrupted(e)) {
            free(x); free(y);
            e->intr_honored++;
            return dm_fail(err, "interrupted: the eval stopped before the end of its window (no row recorded)");
        }
        int valid = (int)(nseq - s0 < B ? nseq - s0 : B);
        int bad = 0;
        for (int b = 0; b < B && !bad; b++)  // pad a short last batch with copies: same shape, no realloc
            bad = data_eval_seq_checked(&e->data, s0 + (b < valid ? b : valid - 1), T, x + (size_t)b * T,
                                        y + (size_t)b * T, err);
        if (bad) {
            free(x); free(y);
            return 1;
        }
        // the window's bytes in order: each sequence's inputs, then the very last target
        hs = eval_set_add(hs, x, (int64_t)valid * T);
        if (s0 + valid == nseq) hs = eval_set_add(hs, y + (size_t)(valid - 1) * T + T - 1, 1);
        Arms pre = m->arms;
        if (eval_forward(m, x, y, B, T, depth ? depth : c->L, depth ? FWD_LAST : FWD_ALL_DEPTHS, err)) {
            free(x); free(y);
            // the forward cut short is not counted; the eval's whole forwards before it ran and
            // stay counted, as when Ctrl-C stops an eval
            m->arms = pre;
            e->fwd_kind = 0;   // the activations are a partial forward's: no probe reads them
            m->last_depth = 0;
            e->fwd_cut = 1;
            return 1;
        }
        r->pad_seqs += B - valid;
        if (m->last_on[ARM_ENGRAM]) {
            r->engram_rows += (int64_t)valid * T * c->n_orders;
            r->engram_pad_rows += (int64_t)(B - valid) * T * c->n_orders;
        }
        e->fwd_kind = 2;
        e->fwd_step = e->step;
        e->fwd_undone = e->fwd_moved = e->fwd_cut = 0;
        e->fwd_pad = B - valid;
        // the CE of the valid rows of each depth, summed on the backend (padding rows excluded),
        // then one download of the per-depth sums
        double *ls = m->acts.loss_sum;  // [L] backend doubles, free again after the forward
        for (int d = r->depth_lo; d <= r->depth_hi; d++)
            m->be->sum_forward(ls + d - 1, m->acts.it[d - 1].losses, (size_t)valid * T);
        double s[64];
        m->be->download(s + r->depth_lo - 1, ls + r->depth_lo - 1, sizeof(double) * (r->depth_hi - r->depth_lo + 1));
        for (int d = r->depth_lo; d <= r->depth_hi; d++) sum[d - 1] += s[d - 1];
    }
    free(x); free(y);
    r->eval_set = eval_set_end(hs);
    for (int d = r->depth_lo; d <= r->depth_hi; d++) r->bpb[d - 1] = sum[d - 1] / (double)(nseq * T) / log(2.0);
    for (int a = 0; a < ARM_COUNT; a++) r->arm_fwd[a] = m->arms.fwd[a] - before.fwd[a];
    for (int d = r->depth_lo; d <= r->depth_hi; d++) {
        MetricRow row = {0};
        row.kind = 1; row.step = e->step; row.tokens = e->tokens;
        row.bpb = r->bpb[d - 1]; row.window = r->window; row.depth = d; row.eval_set = r->eval_set;
        row.arms_off = arms_off_mask(&m->arms);
        engine_add_row(e, &row);
    }
    return 0;
}

int engine_anchors(Engine *e, dm_err *err) {
    int64_t nseq;
    if (engine_eval_window(e, &nseq, err)) return 1;  // the same words as :eval's
    if (anchors_compute(&e->data, e->cfg.anchor_fit_bytes, e->cfg.eval_bytes, e->cfg.seq, &e->anchors, err)) return 1;
    e->has_anchors = 1;
    return 0;
}

const Anchors *engine_anchors_for(const Engine *e, int64_t window, uint32_t set) {
    if (!e->has_anchors || e->anchors.window_bytes != window) return NULL;
    if (set && e->anchors.eval_set && set != e->anchors.eval_set) return NULL;
    // fit bytes as anchors_compute takes them (anchors_fit_size: its 2^31 cap too, or anchors fit
    // on a corpus past it were never shown, and every eval line asked for an :anchors that fit
    // the same bytes again: QA, session 33); without a corpus (a checkpoint's anchors drawn on a
    // plot) the training split is not here to ask
    int64_t fit = anchors_fit_size(e->cfg.anchor_fit_bytes, e->has_data ? e->data.n_train : -1);
    if (e->has_data ? e->anchors.fit_bytes != fit : e->anchors.fit_bytes > fit) return NULL;
    return &e->anchors;
}
