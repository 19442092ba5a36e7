// sample.c — see sample.h. The same block as engine/forward.c for a single token, with the KDA
// recurrence stepped instead of chunked.
#include "sample.h"
#include "../kernels/guard.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PT(m, i) ((m)->params + (m)->t[i].offset)

// Carve the per-token scratch: called with base == NULL to size it, then with the real base.
// Every piece starts on a 16-real boundary, so the int arrays carved from it are aligned.
static size_t carve(Decoder *d, real *base) {
    const Config *c = &d->m->cfg;
    size_t dm = c->d, H = c->H, dh = dm / H, E = c->E, OD = (size_t)c->n_orders * c->engram_dim, used = 0;
    MoEShape ms = {1, (int)dm, (int)E, c->k, c->r, c->f};
    size_t moe_ws = d->m->be->moe_ws_size(ms);
#define TAKE(x, n) do { size_t n_ = (n); d->x = base ? (void *)(base + used) : NULL; used += (n_ + 15) & ~(size_t)15; } while (0)
#define REALS(type, n) (((n) * sizeof(type) + sizeof(real) - 1) / sizeof(real))
    TAKE(h, dm); TAKE(h2, dm); TAKE(u, dm); TAKE(n, dm); TAKE(ctrl, 3); TAKE(z, E); TAKE(qr, dm); TAKE(kr, dm);
    TAKE(vr, dm); TAKE(q, dm); TAKE(k, dm); TAKE(v, dm); TAKE(rn, H); TAKE(bp, H); TAKE(beta, H); TAKE(zf1, dh);
    TAKE(zf2, dm); TAKE(gs, dm); TAKE(g, dm); TAKE(o, dm); TAKE(on, dm); TAKE(orstd, H); TAKE(gt1, dh); TAKE(gt, dm);
    TAKE(og, dm); TAKE(a, dm); TAKE(nn, dm); TAKE(rstd, 4); TAKE(gate, 1); TAKE(e, dm); TAKE(gout, dm);
    TAKE(body, dm); TAKE(y, dm); TAKE(ybar, dm); TAKE(ybar2, dm); TAKE(yn, dm);
    TAKE(mm, 16 * OD);  // the memory rows of the whole history window (<= 16 positions)
    TAKE(key, dm); TAKE(val, dm); TAKE(kn, dm); TAKE(logits, 256); TAKE(moe_ws, moe_ws);
    TAKE(ids, REALS(int, 16)); TAKE(rows, REALS(int32_t, 16 * (size_t)c->n_orders));
#undef REALS
#undef TAKE
    return used;
}

int decoder_init(Decoder *d, Model *m, dm_err *err) {
    memset(d, 0, sizeof *d);
    d->m = m;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    int dh = c->d / c->H;
    d->S = be->alloc(sizeof(real) * c->L * c->H * dh * dh);
    d->buf = be->alloc(sizeof(real) * carve(d, NULL));
    if (!d->S || !d->buf) {
        decoder_free(d);
        return dm_fail(err, "cannot allocate the decoder state on %s", be->name);
    }
    carve(d, d->buf);
    return 0;
}

int decoder_feed(Decoder *d, int byte, real *logits, dm_err *err) {
    Arms arms0 = d->m->arms;  // the byte cut short is not counted (as a refused step's or eval's forward)
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {
        if (d->m->be->sync) d->m->be->sync();
        d->m->arms = arms0;
        return dm_fail(err, "generation stopped: %s", g.msg);
    }
    decoder_step(d, byte, logits);
    dm_guard_close(&g);
    return 0;
}

void decoder_free(Decoder *d) {
    if (d->m) {
        d->m->be->free(d->S);
        d->m->be->free(d->buf);
    }
    memset(d, 0, sizeof *d);
}

void decoder_reset(Decoder *d) {
    const Config *c = &d->m->cfg;
    int dh = c->d / c->H;
    d->m->be->zero(d->S, sizeof(real) * c->L * c->H * dh * dh);
    d->nhist = 0;
    d->pos = 0;
}

void decoder_step(Decoder *d, int byte, real *logits) {
    Model *m = d->m;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Arms *arms = &m->arms;  // counted as forward.c counts them: generation runs the arms too
    int dm = c->d, H = c->H, dh = dm / H, E = c->E, O = c->n_orders, De = c->engram_dim, OD = O * De;
    // history of the last (max order) bytes, for the n-grams ending here
    int maxo = 1;
    for (int i = 0; i < O; i++) if (c->engram_orders[i] > maxo) maxo = c->engram_orders[i];
    if (d->nhist == maxo) { memmove(d->hist, d->hist + 1, sizeof(int) * (maxo - 1)); d->nhist--; }
    d->hist[d->nhist++] = byte;
    d->pos++;
    be->upload(d->ids, d->hist, sizeof(int) * d->nhist);  // the byte is ids[nhist - 1]
    be->embedding_forward(d->h, d->ids + d->nhist - 1, PT(m, P_EMB), 1, dm);
    if (arms->on[ARM_ENGRAM]) {
        // the window holds every byte an n-gram ending here reads; engram_rows pads with 256
        // exactly where the sequence had no byte yet. The rows of the whole window are gathered
        // (nhist <= 16 positions) and the last position's row is the one used.
        int W = d->nhist;
        if (m->tab) {  // engram_ram: hash and gather on the host, upload the rows
            const Backend *host = backend_cpu();
            int32_t *hr = mallocCheck(sizeof(int32_t) * (size_t)W * O);
            real *hm = mallocCheck(sizeof(real) * (size_t)W * OD);
            host->engram_rows(hr, d->hist, 1, W, c->engram_orders, O, c->engram_rows);
            host->engram_gather(hm, m->tab, hr, W, O, c->engram_rows, De);
            be->upload(d->mm, hm, sizeof(real) * (size_t)W * OD);
            free(hr);
            free(hm);
        } else {
            be->engram_rows(d->rows, d->ids, 1, W, c->engram_orders, O, c->engram_rows);
            be->engram_gather(d->mm, PT(m, P_TABLES), d->rows, W, O, c->engram_rows, De);
        }
        const real *mm = d->mm + (size_t)(W - 1) * OD;
        be->matmul_forward(d->key, mm, PT(m, P_MK), NULL, 1, OD, dm);
        be->matmul_forward(d->val, mm, PT(m, P_MV), NULL, 1, OD, dm);
        be->rmsnorm_forward(d->kn, d->rstd, d->key, PT(m, P_MEM_GK), 1, dm);
    }
    const real *alpha = arms->on[ARM_REZERO] ? PT(m, P_ALPHA) : NULL;  // backend scalar; NULL = 1
    real lam = (real)c->lam_max;
    real *h = d->h, *hn = d->h2, *ybar = d->ybar, *ybn = d->ybar2;  // ping-pong: ops do not alias
    for (int i = 0; i < c->L; i++) {
        be->add_row_forward(d->u, h, PT(m, P_ITER_EMB) + (size_t)i * dm, 1, dm);
        be->rmsnorm_forward(d->n, d->rstd, d->u, PT(m, P_BLK_NORM), 1, dm);
        be->matmul_forward(d->ctrl, d->n, PT(m, P_CTRL_W), PT(m, P_CTRL_B), 1, dm, 3);
        be->sigmoid_forward(d->ctrl, d->ctrl, 3);
        if (arms->on[ARM_KDA]) {
            be->matmul_forward(d->qr, d->n, PT(m, P_WQ), NULL, 1, dm, dm);
            be->matmul_forward(d->kr, d->n, PT(m, P_WK), NULL, 1, dm, dm);
            be->matmul_forward(d->vr, d->n, PT(m, P_WV), NULL, 1, dm, dm);
            be->silu_forward(d->qr, d->qr, dm);
            be->silu_forward(d->kr, d->kr, dm);
            be->silu_forward(d->v, d->vr, dm);
            be->l2norm_forward(d->q, d->rn, d->qr, (real)(1.0 / sqrt(dh)), H, dh);
            be->l2norm_forward(d->k, d->rn, d->kr, 1, H, dh);
            be->matmul_forward(d->bp, d->n, PT(m, P_WB), NULL, 1, dm, H);
            be->sigmoid_forward(d->beta, d->bp, H);
            be->matmul_forward(d->zf1, d->n, PT(m, P_WF1), NULL, 1, dm, dh);
            be->matmul_forward(d->zf2, d->zf1, PT(m, P_WF2), NULL, 1, dh, dm);
            be->decay_gate_forward(d->gs, d->g, d->zf2, PT(m, P_A), PT(m, P_DT_BIAS), (real)c->g_min, 1, H, dh);
            be->kda_step(d->o, d->S + (size_t)i * H * dh * dh, d->q, d->k, d->v, d->beta, d->g, H, dh);
            be->rmsnorm_forward(d->on, d->orstd, d->o, PT(m, P_W_ON), H, dh);
            be->matmul_forward(d->gt1, d->n, PT(m, P_WG1), NULL, 1, dm, dh);
            be->matmul_forward(d->gt, d->gt1, PT(m, P_WG2), NULL, 1, dh, dm);
            be->gate_mul_forward(d->gt, d->og, d->on, PT(m, P_BG), 1, dm);  // as forward.c
            be->matmul_forward(d->a, d->og, PT(m, P_WO), NULL, 1, dm, dm);
            arms->fwd[ARM_KDA]++;
        }
        if (arms->on[ARM_ENGRAM]) {
            be->rmsnorm_forward(d->nn, d->rstd, d->n, PT(m, P_MEM_GN), 1, dm);
            be->mem_gate_forward(d->gate, d->e, d->nn, d->kn, d->val, (real)(1.0 / sqrt(dm)), 1, dm);
            arms->fwd[ARM_ENGRAM]++;
        }
        if (arms->on[ARM_MOE]) {
            be->matmul_forward(d->z, d->n, PT(m, P_ROUTER), NULL, 1, dm, E);
            MoEShape ms = {1, dm, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            be->moe_forward(d->gout, NULL, NULL, d->moe_ws, d->n, d->z, mp, ms);  // no aux, no counts
            arms->fwd[ARM_MOE]++;
        }
        be->mix_forward(d->body, hn, h, d->ctrl, arms->on[ARM_KDA] ? d->a : NULL, arms->on[ARM_ENGRAM] ? d->e : NULL,
                        arms->on[ARM_MOE] ? d->gout : NULL, lam, alpha, 1, dm);
        if (arms->on[ARM_REZERO]) arms->fwd[ARM_REZERO]++;
        be->matmul_forward(d->y, hn, PT(m, P_OUTPROJ) + (size_t)i * dm * dm, NULL, 1, dm, dm);
        be->running_mean_forward(ybn, i ? ybar : NULL, d->y, i, dm);
        real *t = h; h = hn; hn = t;
        t = ybar; ybar = ybn; ybn = t;
    }
    be->rmsnorm_forward(d->yn, d->rstd, ybar, PT(m, P_OUT_NORM), 1, dm);
    be->matmul_forward(d->logits, d->yn, PT(m, P_HEAD), NULL, 1, dm, 256);
    be->download(logits, d->logits, sizeof(real) * 256);  // the caller's host array
}

int sample_byte(const real *logits, double temp, int top_k, Rng *r) {
    int idx[256];
    for (int i = 0; i < 256; i++) idx[i] = i;
    if (temp <= 0) {
        int best = 0;
        for (int i = 1; i < 256; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    // sort indices by logit (descending; ties to the lower byte) for top-k: a merge sort, stable
    // (the insertion sort it replaces took ~16k comparisons a byte, 16 % of :gen: QA, session 26;
    // the same order, so the same samples)
    int tmp[256];
    for (int w = 1; w < 256; w *= 2) {
        for (int lo = 0; lo < 256; lo += 2 * w) {
            int mid = lo + w < 256 ? lo + w : 256, hi = lo + 2 * w < 256 ? lo + 2 * w : 256, a = lo, b = mid, o = lo;
            // (b goes first only when strictly larger: equal logits keep their order)
            while (a < mid && b < hi) tmp[o++] = logits[idx[a]] < logits[idx[b]] ? idx[b++] : idx[a++];
            while (a < mid) tmp[o++] = idx[a++];
            while (b < hi) tmp[o++] = idx[b++];
        }
        memcpy(idx, tmp, sizeof idx);
    }
    int K = top_k > 0 && top_k < 256 ? top_k : 256;
    double mx = logits[idx[0]], p[256], s = 0;
    for (int i = 0; i < K; i++) { p[i] = exp((logits[idx[i]] - mx) / temp); s += p[i]; }
    double u = rng_uniform(r) * s;
    for (int i = 0; i < K; i++) { u -= p[i]; if (u <= 0) return idx[i]; }
    return idx[K - 1];
}

size_t sample_byte_text(int b, char out[5]) {
    b &= 0xff;
    // \n and \t raw (sampled text keeps its lines); other C0 controls and DEL escaped, so no byte
    // drives the terminal (ESC sequences, \r over-printing, BEL); >= 0x80 raw: UTF-8 survives
    if (b == '\n' || b == '\t' || (b >= 0x20 && b < 0x7f) || b >= 0x80) { out[0] = (char)b; out[1] = 0; return 1; }
    snprintf(out, 5, "\\x%02x", (unsigned)b);
    return 4;
}
