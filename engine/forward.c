// forward.c — the forward pass of the looped block (SPEC §1): embedding, Engram lookup, L
// iterations of one weight-shared block, the running average of readouts, head and CE.
#include <math.h>
#include <string.h>
#include "model.h"
#include "../kernels/cpu/ops.h"

#define PT(m, i) ((m)->params + (m)->t[i].offset)

// u[N,d] = h[N,d] + row[d]
static void add_row(real *u, const real *h, const real *row, size_t N, int d) {
    for (size_t n = 0; n < N; n++)
        for (int c = 0; c < d; c++) u[n * d + c] = h[n * d + c] + row[c];
}

// sg[n, :] = sigmoid(x[n, :]), out[n, :] = silu(x[n, :]) = x sg; x rows at stride ldx, the
// others contiguous [N, C]. The sigmoid is kept: backward's silu' needs it.
static void silu_rows(real *out, real *sg, const real *in, int ldx, int N, int C) {
    for (int n = 0; n < N; n++) {
        real *restrict o = out + (size_t)n * C, *restrict sr = sg + (size_t)n * C;
        const real *restrict x = in + (size_t)n * ldx;
        for (int c = 0; c < C; c++) {
            real s = dm_sigmoid(x[c]);
            sr[c] = s;
            o[c] = x[c] * s;
        }
    }
}

// The projections of n that share one gemm (ProjLayout): proj = n [W_q; W_k; W_v; W_b; W_f1;
// W_g1; W_c; W_r]^T, then the controller gates and the router logits out of it.
static void proj_forward(Model *m, IterActs *t, int N) {
    const Config *c = &m->cfg;
    ProjLayout pl = proj_layout(c);
    int P = pl.P, E = c->E;
    m->be->matmul_forward(t->proj, t->n, PT(m, P_WQ), NULL, N, c->d, P);
    const real *cb = PT(m, P_CTRL_B);
    for (size_t n = 0; n < (size_t)N; n++) {
        const real *pr = t->proj + n * P;
        for (int j = 0; j < 3; j++) t->ctrl[n * 3 + j] = dm_sigmoid(pr[pl.c + j] + cb[j]);
        for (int j = 0; j < E; j++) t->z[n * E + j] = pr[pl.z + j];
    }
}

// KDA arm: n [N,d] -> a [N,d]. Activations are kept in `t` for the backward pass.
static void kda_arm_forward(Model *m, IterActs *t, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    int N = B * T, d = c->d, H = c->H, dh = d / H;
    ProjLayout pl = proj_layout(c);
    int P = pl.P;
    const real *pr = t->proj;
    // per-head l2norm over dh of silu(q), silu(k): rows of [N*H, dh]; q also carries the dh^-1/2
    // scale. silu(q), silu(k) pass through a->dtmp (backward scratch, free during forward).
    real *su = m->acts.dtmp;
    silu_rows(su, t->sq, pr + pl.q, P, N, d);
    be->l2norm_forward(t->q, t->q_rn, su, (real)(1.0 / sqrt(dh)), N * H, dh);
    silu_rows(su, t->sk, pr + pl.k, P, N, d);
    be->l2norm_forward(t->k, t->k_rn, su, 1, N * H, dh);
    silu_rows(t->v, t->sv, pr + pl.v, P, N, d);
    for (size_t n = 0; n < (size_t)N; n++)
        for (int h = 0; h < H; h++) t->beta[n * H + h] = dm_sigmoid(pr[n * P + pl.b + h]);
    // decay: g = g_min * sigmoid(exp(A_h) * (W_f2 W_f1 n + dt_bias))
    be->gemm(0, 1, N, d, dh, 1, pr + pl.f1, P, PT(m, P_WF2), dh, 0, t->zf2, d);
    const real *A = PT(m, P_A), *dtb = PT(m, P_DT_BIAS);
    real gmin = (real)c->g_min;
    real ea[H];
    for (int h = 0; h < H; h++) ea[h] = (real)exp(A[h]);
    for (size_t n = 0; n < (size_t)N; n++)
        for (int h = 0; h < H; h++) {
            real eh = ea[h];
            const real *restrict z = t->zf2 + n * d + (size_t)h * dh, *restrict b = dtb + (size_t)h * dh;
            real *restrict gs = t->gs + n * d + (size_t)h * dh, *restrict g = t->g + n * d + (size_t)h * dh;
            for (int x = 0; x < dh; x++) {
                real s = dm_sigmoid(eh * (z[x] + b[x]));
                gs[x] = s;
                g[x] = gmin * s;
            }
        }
    be->kda_forward(t->o, t->kda_ws, t->q, t->k, t->v, t->beta, t->g, B, T, H, dh, c->kda_chunk);
    // gated output norm: RMSNorm per head (gain w_on shared by heads) * sigmoid(W_g2 W_g1 n + b_g)
    be->rmsnorm_forward(t->on, t->on_rstd, t->o, PT(m, P_W_ON), N * H, dh);
    be->gemm(0, 1, N, d, dh, 1, pr + pl.g1, P, PT(m, P_WG2), dh, 0, t->gt, d);
    const real *bg = PT(m, P_BG);
    for (size_t n = 0; n < (size_t)N; n++) {
        real *restrict gt = t->gt + n * d, *restrict og = t->og + n * d;
        const real *restrict on = t->on + n * d;
        for (int ch = 0; ch < d; ch++) {
            real s = dm_sigmoid(gt[ch] + bg[ch]);
            gt[ch] = s;
            og[ch] = on[ch] * s;
        }
    }
    be->matmul_forward(t->a, t->og, PT(m, P_WO), NULL, N, d, d);
}

// Memory arm: e[t] = sigmoid(RMSNorm(n_t) . kn_t / sqrt d) * val_t
static void mem_arm_forward(Model *m, IterActs *t, int N) {
    const Acts *a = &m->acts;
    int d = m->cfg.d;
    m->be->rmsnorm_forward(t->nn, t->nn_rstd, t->n, PT(m, P_MEM_GN), N, d);
    real inv = (real)(1.0 / sqrt(d));
    for (size_t n = 0; n < (size_t)N; n++) {
        double dot = dm_dot_d(t->nn + n * d, a->kn + n * d, d);
        real gte = (real)(1.0 / (1.0 + exp(-dot * inv)));
        t->mgate[n] = gte;
        for (int c = 0; c < d; c++) t->e[n * d + c] = gte * a->val[n * d + c];
    }
}

// Engram lookup and the iteration-independent key / value (computed once per forward)
static void engram_forward(Model *m, int B, int T) {
    const Config *c = &m->cfg;
    Acts *a = &m->acts;
    int N = B * T, O = c->n_orders, De = c->engram_dim, OD = O * De;
    m->be->engram_rows(a->rows, a->x, B, T, c->engram_orders, O, c->engram_rows);
    m->be->engram_gather(a->m, PT(m, P_TABLES), a->rows, N, O, c->engram_rows, De);
    m->be->matmul_forward(a->key, a->m, PT(m, P_MK), NULL, N, OD, c->d);
    m->be->matmul_forward(a->val, a->m, PT(m, P_MV), NULL, N, OD, c->d);
    m->be->rmsnorm_forward(a->kn, a->kn_rstd, a->key, PT(m, P_MEM_GK), N, c->d);
}

static int scored(const Model *m, FwdMode mode, int i, int depth) {
    if (mode == FWD_ALL_DEPTHS) return 1;
    if (mode == FWD_LAST) return i == depth - 1;
    return m->cfg.loss_final ? i == depth - 1 : 1;
}

double model_forward(Model *m, const int *x, const int *tgt, int B, int T, int depth, FwdMode mode) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Arms *arms = &m->arms;
    model_reserve(m, B, T);
    Acts *a = &m->acts;
    int N = B * T, d = c->d, E = c->E;
    if (depth < 1 || depth > c->L) depth = c->L;
    memcpy(a->x, x, sizeof(int) * N);
    if (tgt) memcpy(a->tgt, tgt, sizeof(int) * N);
    be->embedding_forward(a->h0, a->x, PT(m, P_EMB), N, d);
    if (arms->on[ARM_ENGRAM]) engram_forward(m, B, T);
    real alpha = arms->on[ARM_REZERO] ? PT(m, P_ALPHA)[0] : 1;
    real lam = (real)c->lam_max;
    double loss_sum = 0, aux_sum = 0;
    int n_scored = 0;
    memset(m->expert_load, 0, sizeof(int) * c->L * E);
    for (int i = 0; i < depth; i++) {
        IterActs *t = &a->it[i];
        const real *hprev = i ? a->it[i - 1].h : a->h0;
        add_row(t->u, hprev, PT(m, P_ITER_EMB) + (size_t)i * d, N, d);
        be->rmsnorm_forward(t->n, t->n_rstd, t->u, PT(m, P_BLK_NORM), N, d);
        proj_forward(m, t, N);
        if (arms->on[ARM_KDA]) {
            kda_arm_forward(m, t, B, T);
            arms->fwd[ARM_KDA]++;
        }
        if (arms->on[ARM_ENGRAM]) {
            mem_arm_forward(m, t, N);
            arms->fwd[ARM_ENGRAM]++;
        }
        t->aux = 0;
        if (arms->on[ARM_MOE]) {
            MoEShape ms = {N, d, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            be->moe_forward(t->gout, &t->aux, m->expert_load + i * E, t->moe_ws, t->n, t->z, mp, ms);
            aux_sum += t->aux;
            arms->fwd[ARM_MOE]++;
        }
        // body = w_attn a + min(w_mem, lam) e + w_ffn gout (in that order); h = h_{i-1} + alpha body
        {
            int on_k = arms->on[ARM_KDA], on_e = arms->on[ARM_ENGRAM], on_m = arms->on[ARM_MOE];
            for (size_t n = 0; n < (size_t)N; n++) {
                real *restrict body = t->body + n * d, *restrict h = t->h + n * d;
                const real *restrict hp = hprev + n * d;
                const real *ct = t->ctrl + n * 3;
                real wm = ct[1] < lam ? ct[1] : lam;
                for (int ch = 0; ch < d; ch++) body[ch] = 0;
                if (on_k) {
                    const real *restrict ar = t->a + n * d;
                    for (int ch = 0; ch < d; ch++) body[ch] += ct[0] * ar[ch];
                }
                if (on_e) {
                    const real *restrict er = t->e + n * d;
                    for (int ch = 0; ch < d; ch++) body[ch] += wm * er[ch];
                }
                if (on_m) {
                    const real *restrict gr = t->gout + n * d;
                    for (int ch = 0; ch < d; ch++) body[ch] += ct[2] * gr[ch];
                }
                for (int ch = 0; ch < d; ch++) h[ch] = hp[ch] + alpha * body[ch];
            }
        }
        if (arms->on[ARM_REZERO]) arms->fwd[ARM_REZERO]++;
        // readout: y_i = OutProj_i(h_i); ybar_i = mean(y_1..y_i)
        be->matmul_forward(t->y, t->h, PT(m, P_OUTPROJ) + (size_t)i * d * d, NULL, N, d, d);
        if (i == 0) memcpy(t->ybar, t->y, sizeof(real) * N * d);
        else {
            const real *prev = a->it[i - 1].ybar;
            real wp = (real)i / (i + 1), wy = (real)1 / (i + 1);
            for (size_t j = 0; j < (size_t)N * d; j++) t->ybar[j] = wp * prev[j] + wy * t->y[j];
        }
        m->depth_loss[i] = NAN;
        if (tgt && scored(m, mode, i, depth)) {
            be->rmsnorm_forward(t->yn, t->yn_rstd, t->ybar, PT(m, P_OUT_NORM), N, d);
            be->matmul_forward(a->logits, t->yn, PT(m, P_HEAD), NULL, N, d, 256);
            be->softmax_ce_forward(t->losses, t->probs, a->logits, a->tgt, N, 256);
            double s = 0;
            for (int n = 0; n < N; n++) s += t->losses[n];
            m->depth_loss[i] = s / N;
            loss_sum += s / N;
            n_scored++;
        }
    }
    m->last_depth = depth;
    m->last_mode = mode;
    m->last_loss = n_scored ? loss_sum / n_scored : NAN;
    m->last_aux = arms->on[ARM_MOE] ? aux_sum / depth : 0;
    return m->last_loss;
}

double model_objective(const Model *m) {
    double obj = m->last_loss;
    if (m->arms.on[ARM_AUX] && m->arms.on[ARM_MOE]) obj += m->cfg.moe_aux * m->last_aux;
    return obj;
}
