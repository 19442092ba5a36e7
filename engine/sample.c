// sample.c — see sample.h. The same block as engine/forward.c for a single token, with the KDA
// recurrence stepped instead of chunked.
#include "sample.h"
#include <math.h>
#include <string.h>
#include "../kernels/cpu/ops.h"

#define PT(m, i) ((m)->params + (m)->t[i].offset)

void decoder_init(Decoder *d, Model *m) {
    memset(d, 0, sizeof *d);
    d->m = m;
    const Config *c = &m->cfg;
    int dm = c->d, H = c->H, dh = dm / H, E = c->E, OD = c->n_orders * c->engram_dim;
    d->S = callocCheck(sizeof(real) * c->L * H * dh * dh);
    MoEShape ms = {1, dm, E, c->k, c->r, c->f};
    size_t moe_ws = m->be->moe_ws_size(ms);
    size_t total = 40 * (size_t)dm + OD + 4 * H + E + 256 + moe_ws + 64;
    d->buf = callocCheck(sizeof(real) * total);
    real *p = d->buf;
#define TAKE(x, n) do { d->x = p; p += (n); } while (0)
    TAKE(h, dm); TAKE(u, dm); TAKE(n, dm); TAKE(ctrl, 3); TAKE(z, E); TAKE(qr, dm); TAKE(kr, dm); TAKE(vr, dm);
    TAKE(q, dm); TAKE(k, dm); TAKE(v, dm); TAKE(rn, H); TAKE(bp, H); TAKE(beta, H); TAKE(zf1, dh); TAKE(zf2, dm);
    TAKE(g, dm); TAKE(o, dm); TAKE(on, dm); TAKE(orstd, H); TAKE(gt1, dh); TAKE(gt, dm); TAKE(og, dm); TAKE(a, dm);
    TAKE(nn, dm); TAKE(rstd, 4); TAKE(e, dm); TAKE(gout, dm); TAKE(body, dm); TAKE(y, dm); TAKE(ybar, dm);
    TAKE(yn, dm); TAKE(mm, OD); TAKE(key, dm); TAKE(val, dm); TAKE(kn, dm); TAKE(moe_ws, moe_ws);
#undef TAKE
}

void decoder_free(Decoder *d) {
    free(d->S);
    free(d->buf);
    memset(d, 0, sizeof *d);
}

void decoder_reset(Decoder *d) {
    const Config *c = &d->m->cfg;
    int dh = c->d / c->H;
    memset(d->S, 0, sizeof(real) * c->L * c->H * dh * dh);
    d->nhist = 0;
    d->pos = 0;
}

void decoder_step(Decoder *d, int byte, real *logits) {
    Model *m = d->m;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const Arms *arms = &m->arms;
    int dm = c->d, H = c->H, dh = dm / H, E = c->E, O = c->n_orders, De = c->engram_dim, OD = O * De;
    // history of the last (max order) bytes, for the n-grams ending here
    int maxo = 1;
    for (int i = 0; i < O; i++) if (c->engram_orders[i] > maxo) maxo = c->engram_orders[i];
    if (d->nhist == maxo) { memmove(d->hist, d->hist + 1, sizeof(int) * (maxo - 1)); d->nhist--; }
    d->hist[d->nhist++] = byte;
    d->pos++;
    be->embedding_forward(d->h, &byte, PT(m, P_EMB), 1, dm);
    if (arms->on[ARM_ENGRAM]) {
        int32_t rows[DM_MAX_ORDERS * 16];
        // the window holds every byte an n-gram ending here reads; engram_rows pads with 256
        // exactly where the sequence had no byte yet
        be->engram_rows(rows, d->hist, 1, d->nhist, c->engram_orders, O, c->engram_rows);
        for (int o = 0; o < O; o++) {
            int32_t r = rows[o * d->nhist + d->nhist - 1];
            memcpy(d->mm + o * De, PT(m, P_TABLES) + ((size_t)o * c->engram_rows + r) * De, sizeof(real) * De);
        }
        be->matmul_forward(d->key, d->mm, PT(m, P_MK), NULL, 1, OD, dm);
        be->matmul_forward(d->val, d->mm, PT(m, P_MV), NULL, 1, OD, dm);
        be->rmsnorm_forward(d->kn, d->rstd, d->key, PT(m, P_MEM_GK), 1, dm);
    }
    real alpha = arms->on[ARM_REZERO] ? PT(m, P_ALPHA)[0] : 1, lam = (real)c->lam_max;
    for (int i = 0; i < c->L; i++) {
        for (int j = 0; j < dm; j++) d->u[j] = d->h[j] + PT(m, P_ITER_EMB)[(size_t)i * dm + j];
        be->rmsnorm_forward(d->n, d->rstd, d->u, PT(m, P_BLK_NORM), 1, dm);
        be->matmul_forward(d->ctrl, d->n, PT(m, P_CTRL_W), PT(m, P_CTRL_B), 1, dm, 3);
        be->sigmoid_forward(d->ctrl, d->ctrl, 3);
        memset(d->body, 0, sizeof(real) * dm);
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
            for (int ch = 0; ch < dm; ch++) {
                real ea = (real)exp(PT(m, P_A)[ch / dh]);
                real s = dm_sigmoid(ea * (d->zf2[ch] + PT(m, P_DT_BIAS)[ch]));  // as forward.c
                d->g[ch] = (real)c->g_min * s;
            }
            be->kda_step(d->o, d->S + (size_t)i * H * dh * dh, d->q, d->k, d->v, d->beta, d->g, H, dh);
            be->rmsnorm_forward(d->on, d->orstd, d->o, PT(m, P_W_ON), H, dh);
            be->matmul_forward(d->gt1, d->n, PT(m, P_WG1), NULL, 1, dm, dh);
            be->matmul_forward(d->gt, d->gt1, PT(m, P_WG2), PT(m, P_BG), 1, dh, dm);
            be->sigmoid_forward(d->gt, d->gt, dm);
            for (int j = 0; j < dm; j++) d->og[j] = d->on[j] * d->gt[j];
            be->matmul_forward(d->a, d->og, PT(m, P_WO), NULL, 1, dm, dm);
            for (int j = 0; j < dm; j++) d->body[j] += d->ctrl[0] * d->a[j];
        }
        if (arms->on[ARM_ENGRAM]) {
            be->rmsnorm_forward(d->nn, d->rstd, d->n, PT(m, P_MEM_GN), 1, dm);
            double dot = dm_dot_d(d->nn, d->kn, dm);  // as forward.c
            real gte = (real)(1.0 / (1.0 + exp(-dot / sqrt(dm))));
            real w = d->ctrl[1] < lam ? d->ctrl[1] : lam;
            for (int j = 0; j < dm; j++) d->body[j] += w * gte * d->val[j];
        }
        if (arms->on[ARM_MOE]) {
            be->matmul_forward(d->z, d->n, PT(m, P_ROUTER), NULL, 1, dm, E);
            MoEShape ms = {1, dm, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            real aux;
            be->moe_forward(d->gout, &aux, NULL, d->moe_ws, d->n, d->z, mp, ms);
            for (int j = 0; j < dm; j++) d->body[j] += d->ctrl[2] * d->gout[j];
        }
        for (int j = 0; j < dm; j++) d->h[j] += alpha * d->body[j];
        be->matmul_forward(d->y, d->h, PT(m, P_OUTPROJ) + (size_t)i * dm * dm, NULL, 1, dm, dm);
        real wp = (real)i / (i + 1), wy = (real)1 / (i + 1);
        for (int j = 0; j < dm; j++) d->ybar[j] = i ? wp * d->ybar[j] + wy * d->y[j] : d->y[j];
    }
    be->rmsnorm_forward(d->yn, d->rstd, d->ybar, PT(m, P_OUT_NORM), 1, dm);
    be->matmul_forward(logits, d->yn, PT(m, P_HEAD), NULL, 1, dm, 256);
}

int sample_byte(const real *logits, double temp, int top_k, Rng *r) {
    int idx[256];
    for (int i = 0; i < 256; i++) idx[i] = i;
    if (temp <= 0) {
        int best = 0;
        for (int i = 1; i < 256; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    // sort indices by logit (descending; ties to the lower byte) for top-k
    for (int i = 1; i < 256; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && logits[idx[j]] < logits[v]) { idx[j + 1] = idx[j]; j--; }
        idx[j + 1] = v;
    }
    int K = top_k > 0 && top_k < 256 ? top_k : 256;
    double mx = logits[idx[0]], p[256], s = 0;
    for (int i = 0; i < K; i++) { p[i] = exp((logits[idx[i]] - mx) / temp); s += p[i]; }
    double u = rng_uniform(r) * s;
    for (int i = 0; i < K; i++) { u -= p[i]; if (u <= 0) return idx[i]; }
    return idx[K - 1];
}
