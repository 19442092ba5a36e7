// forward.c — the forward pass of the looped block (SPEC §1): embedding, Engram lookup, L
// iterations of one weight-shared block, the running average of readouts, head and CE.
#include <math.h>
#include <string.h>
#include "model.h"

#define PT(m, i) ((m)->params + (m)->t[i].offset)

// The projections of n that share one gemm (ProjLayout): proj = n [W_q; W_k; W_v; W_b; W_f1;
// W_g1; W_c; W_r]^T, then the controller gates and the router logits out of it.
// With the kda arm off only the controller's and router's columns [c, P) are computed (SPEC §1:
// an arm that is off costs nothing; the product over every column spent 514 of nano's 519
// columns on an arm that did not run); the KDA columns are then left as they were, unread.
static void proj_forward(Model *m, IterActs *t, int N) {
    const Config *c = &m->cfg;
    ProjLayout pl = proj_layout(c);
    int P = pl.P;
    if (m->arms.on[ARM_KDA]) m->be->matmul_forward(t->proj, t->n, PT(m, P_WQ), NULL, N, c->d, P);
    else m->be->gemm(0, 1, N, P - pl.c, c->d, 1, t->n, c->d, PT(m, P_WQ) + (size_t)pl.c * c->d, c->d, 0, t->proj + pl.c, P);
    // ctrl [N,3] = sigmoid(proj[:, c:c+3] + b_c), z [N,E] = proj[:, z:z+E] (z follows c)
    m->be->sigmoid_split_forward(t->ctrl, t->z, t->proj + pl.c, P, PT(m, P_CTRL_B), N, 3, c->E);
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
    be->silu_rows_forward(su, t->sq, pr + pl.q, P, N, d);
    be->l2norm_forward(t->q, t->q_rn, su, (real)(1.0 / sqrt(dh)), N * H, dh);
    be->silu_rows_forward(su, t->sk, pr + pl.k, P, N, d);
    be->l2norm_forward(t->k, t->k_rn, su, 1, N * H, dh);
    be->silu_rows_forward(t->v, t->sv, pr + pl.v, P, N, d);
    be->sigmoid_split_forward(t->beta, NULL, pr + pl.b, P, NULL, N, H, 0);  // beta [N,H]
    // decay: g = g_min * sigmoid(exp(A_h) * (W_f2 W_f1 n + dt_bias))
    be->gemm(0, 1, N, d, dh, 1, pr + pl.f1, P, PT(m, P_WF2), dh, 0, t->zf2, d);
    be->decay_gate_forward(t->gs, t->g, t->zf2, PT(m, P_A), PT(m, P_DT_BIAS), (real)c->g_min, N, H, dh);
    be->kda_forward(t->o, t->kda_ws, t->q, t->k, t->v, t->beta, t->g, B, T, H, dh, c->kda_chunk);
    // gated output norm: RMSNorm per head (gain w_on shared by heads) * sigmoid(W_g2 W_g1 n + b_g)
    be->rmsnorm_forward(t->on, t->on_rstd, t->o, PT(m, P_W_ON), N * H, dh);
    be->gemm(0, 1, N, d, dh, 1, pr + pl.g1, P, PT(m, P_WG2), dh, 0, t->gt, d);
    be->gate_mul_forward(t->gt, t->og, t->on, PT(m, P_BG), N, d);
    be->matmul_forward(t->a, t->og, PT(m, P_WO), NULL, N, d, d);
}

// Memory arm: e[t] = sigmoid(RMSNorm(n_t) . kn_t / sqrt d) * val_t
static void mem_arm_forward(Model *m, IterActs *t, int N) {
    const Acts *a = &m->acts;
    int d = m->cfg.d;
    m->be->rmsnorm_forward(t->nn, t->nn_rstd, t->n, PT(m, P_MEM_GN), N, d);
    m->be->mem_gate_forward(t->mgate, t->e, t->nn, a->kn, a->val, (real)(1.0 / sqrt(d)), N, d);
}

// Engram lookup and the iteration-independent key / value (computed once per forward)
static void engram_forward(Model *m, int B, int T) {
    const Config *c = &m->cfg;
    Acts *a = &m->acts;
    int N = B * T, O = c->n_orders, De = c->engram_dim, OD = O * De;
    if (m->tab) {
        // host-RAM tables: hash and gather on the host (the CPU's own ops), one upload of the
        // rows [N, OD] (and of the row ids, for probes); the device never holds a table
        const Backend *host = backend_cpu();
        host->engram_rows(m->host_rows, a->host_x, B, T, c->engram_orders, O, c->engram_rows);
        host->engram_gather(m->stage_m, m->tab, m->host_rows, N, O, c->engram_rows, De);
        // (async: stage_m is next written after a download that waits for this copy — backward's
        // dm, or model_forward's statistics)
        m->be->upload_async(a->m, m->stage_m, sizeof(real) * (size_t)N * OD);
        m->be->upload_async(a->rows, m->host_rows, sizeof(int32_t) * (size_t)N * O);
    } else {
        m->be->engram_rows(a->rows, a->x, B, T, c->engram_orders, O, c->engram_rows);
        m->be->engram_gather(a->m, PT(m, P_TABLES), a->rows, N, O, c->engram_rows, De);
    }
    m->be->matmul_forward(a->key, a->m, PT(m, P_MK), NULL, N, OD, c->d);
    m->be->matmul_forward(a->val, a->m, PT(m, P_MV), NULL, N, OD, c->d);
    m->be->rmsnorm_forward(a->kn, a->kn_rstd, a->key, PT(m, P_MEM_GK), N, c->d);
}

static int scored(const Model *m, FwdMode mode, int i, int depth) {
    if (mode == FWD_ALL_DEPTHS) return 1;
    if (mode == FWD_LAST) return i == depth - 1;
    return m->cfg.loss_final ? i == depth - 1 : 1;
}

// The forward over the token ids already in a->x (and targets in a->tgt when has_tgt), every op
// enqueued, nothing read back: the per-depth CE sums stay in a->loss_sum, m->depth_loss[i] is 0
// where depth i is scored and NAN where not. Returns the depth run.
static int forward_body(Model *m, int has_tgt, int B, int T, int depth, FwdMode mode) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Arms *arms = &m->arms;
    Acts *a = &m->acts;
    int N = B * T, d = c->d, E = c->E;
    if (depth < 1 || depth > c->L) depth = c->L;
    be->embedding_forward(a->h0, a->x, PT(m, P_EMB), N, d);
    if (arms->on[ARM_ENGRAM]) engram_forward(m, B, T);
    // alpha stays where it lives (a backend scalar); NULL: the rezero arm is off, alpha = 1
    const real *alpha = arms->on[ARM_REZERO] ? PT(m, P_ALPHA) : NULL;
    real lam = (real)c->lam_max;
    for (int i = 0; i < depth; i++) {
        IterActs *t = &a->it[i];
        const real *hprev = i ? a->it[i - 1].h : a->h0;
        be->add_row_forward(t->u, hprev, PT(m, P_ITER_EMB) + (size_t)i * d, N, d);
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
        if (arms->on[ARM_MOE]) {
            MoEShape ms = {N, d, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            // aux and the routed counts stay on the backend (no host round trip inside the
            // forward); model_read_moe brings them to the host when they are reported
            if (m->route_force)  // parity reference: another backend's routing (model.h)
                be->moe_forward_routed(t->gout, m->moe_aux + i, m->moe_load + (size_t)i * E, t->moe_ws, t->n, t->z,
                                       mp, ms, m->route_force + (size_t)i * N * c->k, &m->route_diff);
            else
                be->moe_forward(t->gout, m->moe_aux + i, m->moe_load + (size_t)i * E, t->moe_ws, t->n, t->z, mp, ms);
            arms->fwd[ARM_MOE]++;
        }
        // body = w_attn a + min(w_mem, lam) e + w_ffn gout (in that order); h = h_{i-1} + alpha body
        be->mix_forward(t->body, t->h, hprev, t->ctrl, arms->on[ARM_KDA] ? t->a : NULL,
                        arms->on[ARM_ENGRAM] ? t->e : NULL, arms->on[ARM_MOE] ? t->gout : NULL, lam, alpha, N, d);
        if (arms->on[ARM_REZERO]) arms->fwd[ARM_REZERO]++;
        // readout: y_i = OutProj_i(h_i); ybar_i = mean(y_1..y_i)
        be->matmul_forward(t->y, t->h, PT(m, P_OUTPROJ) + (size_t)i * d * d, NULL, N, d, d);
        be->running_mean_forward(t->ybar, i ? a->it[i - 1].ybar : NULL, t->y, i, (size_t)N * d);
        m->depth_loss[i] = NAN;
        if (has_tgt && scored(m, mode, i, depth)) {
            be->rmsnorm_forward(t->yn, t->yn_rstd, t->ybar, PT(m, P_OUT_NORM), N, d);
            be->matmul_forward(a->logits, t->yn, PT(m, P_HEAD), NULL, N, d, 256);
            be->softmax_ce_forward(t->losses, t->probs, a->logits, a->tgt, N, 256);
            be->sum_forward(a->loss_sum + i, t->losses, N);  // on the backend; read once below
            m->depth_loss[i] = 0;  // scored (the value arrives with the download)
        }
    }
    m->last_depth = depth;
    for (int k = 0; k < ARM_COUNT; k++) m->last_on[k] = (unsigned char)arms->on[k];
    return depth;
}

void model_read_moe(Model *m) {
    const Config *c = &m->cfg;
    int L = c->L, E = c->E, depth = m->last_depth;
    memset(m->expert_load, 0, sizeof(int) * L * E);
    m->last_aux = 0;
    if (!m->arms.on[ARM_MOE] || depth < 1) return;
    // one copy: the aux values [L] and the first `depth` rows of the counts [L, E] behind them
    size_t bytes = sizeof(real) * L + sizeof(int) * (size_t)depth * E;
    real *st = mallocCheck(bytes);
    m->be->download(st, m->moe_aux, bytes);
    double aux_sum = 0;  // in iteration order, as the forward always summed it
    for (int i = 0; i < depth; i++) aux_sum += st[i];
    m->last_aux = aux_sum / depth;
    memcpy(m->expert_load, st + L, sizeof(int) * (size_t)depth * E);
    free(st);
}

void model_forward_enqueue(Model *m, int B, int T, int depth, FwdMode mode) {
    model_reserve(m, B, T);
    forward_body(m, 1, B, T, depth, mode);
    m->last_loss = NAN;  // on the backend (a->loss_sum); the training step reduces it there
}

double model_forward(Model *m, const int *x, const int *tgt, int B, int T, int depth, FwdMode mode) {
    const Backend *be = m->be;
    model_reserve(m, B, T);
    Acts *a = &m->acts;
    int N = B * T;
    // token ids live on the backend (the ops index with them there)
    be->upload(a->x, x, sizeof(int) * N);
    a->host_x = x;  // engram_ram hashes on the host
    if (tgt) be->upload(a->tgt, tgt, sizeof(int) * N);
    depth = forward_body(m, tgt != NULL, B, T, depth, mode);
    // the per-depth CE sums: one download of `depth` doubles for the whole forward
    double ls[64], loss_sum = 0;
    int n_scored = 0;
    if (tgt) be->download(ls, a->loss_sum, sizeof(double) * depth);
    for (int i = 0; i < depth; i++) {
        if (isnan(m->depth_loss[i])) continue;
        m->depth_loss[i] = ls[i] / N;
        loss_sum += ls[i] / N;
        n_scored++;
    }
    m->last_loss = n_scored ? loss_sum / n_scored : NAN;
    model_read_moe(m);
    return m->last_loss;
}

double model_objective(const Model *m) {
    double obj = m->last_loss;
    if (m->arms.on[ARM_AUX] && m->arms.on[ARM_MOE]) obj += m->cfg.moe_aux * m->last_aux;
    return obj;
}
