// backward.c — the exact backward pass of model_forward (SPEC §1), iteration by iteration in
// reverse, into the one gradient buffer. Every elementary op's backward accumulates (+=); the
// fused element-wise ops write (=) where the loops they replaced wrote (kernels/backend.h).
// Activations, parameters and gradients are backend memory: they are touched only through the
// backend table, so the same code runs on the CPU and on the device.
#include <math.h>
#include <string.h>
#include "model.h"

#define PT(m, i) ((m)->params + (m)->t[i].offset)
#define GT(m, i) ((m)->grads + (m)->t[i].offset)
// zeroing backend memory is a backend op (a memset on the host would touch device memory)
#define ZERO(p, n) m->be->zero((p), sizeof(real) * (size_t)(n))

// KDA arm backward from da [N, d]: the parameter gradients of everything but the fused
// projection, and the arm's columns of dproj (q, k, v, b, f1, g1), which are written (=).
static void kda_arm_backward(Model *m, IterActs *t, const real *da, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Acts *a = &m->acts;
    int N = B * T, d = c->d, H = c->H, dh = d / H;
    size_t Nd = (size_t)N * d;
    ProjLayout pl = proj_layout(c);
    int P = pl.P;
    real *dproj = a->dproj;
    const real *pr = t->proj;
    // a = W_o og: dog = da W_o (written); dW_o += da^T og
    be->gemm(0, 0, N, d, d, 1, da, d, PT(m, P_WO), d, 0, a->dog, d);
    be->gemm(1, 0, d, d, N, 1, da, d, t->og, d, 1, GT(m, P_WO), d);
    // og = on * gt, gt = sigmoid(W_g2 gt1 + b_g)
    real *don = a->dtmp2, *dgt_pre = a->dgt;
    be->gate_mul_backward(don, dgt_pre, a->dog, t->gt, t->on, Nd);
    be->gemm(0, 0, N, dh, d, 1, dgt_pre, d, PT(m, P_WG2), dh, 0, dproj + pl.g1, P);   // dgt1
    be->gemm(1, 0, d, dh, N, 1, dgt_pre, d, pr + pl.g1, P, 1, GT(m, P_WG2), dh);
    be->bias_backward(GT(m, P_BG), dgt_pre, d, N, d);
    // on = RMSNorm_head(o) * w_on
    ZERO(a->do_, Nd);
    be->rmsnorm_backward(a->do_, GT(m, P_W_ON), don, t->o, PT(m, P_W_ON), t->on_rstd, N * H, dh);
    // the recurrence
    ZERO(a->dq, Nd); ZERO(a->dk, Nd); ZERO(a->dv, Nd); ZERO(a->dbeta, (size_t)N * H); ZERO(a->dg, Nd);
    be->kda_backward(a->dq, a->dk, a->dv, a->dbeta, a->dg, a->do_, t->q, t->k, t->v, t->beta, t->g,
                     t->kda_ws, B, T, H, dh, c->kda_chunk);
    // g = g_min * sigmoid(exp(A_h) (zf2 + dt_bias)); per channel sums in token order
    be->decay_gate_backward(a->dzf2, GT(m, P_A), GT(m, P_DT_BIAS), a->dg, t->gs, t->zf2, PT(m, P_A),
                            PT(m, P_DT_BIAS), (real)c->g_min, N, H, dh);
    be->gemm(0, 0, N, dh, d, 1, a->dzf2, d, PT(m, P_WF2), dh, 0, dproj + pl.f1, P);  // dzf1
    be->gemm(1, 0, d, dh, N, 1, a->dzf2, d, pr + pl.f1, P, 1, GT(m, P_WF2), dh);
    // beta = sigmoid(W_b n)
    be->sigmoid_rows_backward(dproj + pl.b, P, a->dbeta, t->beta, N, H);
    // v = silu(W_v n)
    be->silu_rows_backward(dproj + pl.v, P, a->dv, pr + pl.v, P, t->sv, N, d);
    // k = l2norm(silu(W_k n)), q = l2norm(silu(W_q n)) * dh^-1/2
    be->l2norm_silu_backward(dproj + pl.k, P, a->dk, t->k, t->k_rn, 1, pr + pl.k, P, t->sk, N, H, dh);
    be->l2norm_silu_backward(dproj + pl.q, P, a->dq, t->q, t->q_rn, (real)(1.0 / sqrt(dh)), pr + pl.q, P,
                             t->sq, N, H, dh);
}

static void mem_arm_backward(Model *m, IterActs *t, const real *de, int N) {
    Acts *a = &m->acts;
    int d = m->cfg.d;
    real *dnn = a->dtmp2;
    m->be->mem_gate_backward(dnn, a->dkn, a->dval, de, t->mgate, t->nn, a->kn, a->val, (real)(1.0 / sqrt(d)), N, d);
    m->be->rmsnorm_backward(a->dn, GT(m, P_MEM_GN), dnn, t->n, PT(m, P_MEM_GN), t->nn_rstd, N, d);
}

void model_backward(Model *m) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Arms *arms = &m->arms;
    Acts *a = &m->acts;
    int B = a->B, T = a->T, N = B * T, d = c->d, E = c->E, depth = m->last_depth;
    size_t Nd = (size_t)N * d;
    be->zero(m->grads, sizeof(real) * m->n_dev);
    if (m->tab_grad) {  // host tables: clear only the rows the previous backward wrote
        size_t De = (size_t)c->engram_dim, R = (size_t)c->engram_rows;
        for (int q = 0; q < c->n_orders; q++)
            for (int j = 0; j < m->dirty_n; j++)
                memset(m->tab_grad + ((size_t)q * R + m->dirty_rows[(size_t)q * m->dirty_n + j]) * De, 0, sizeof(real) * De);
        m->dirty_n = 0;
    }
    int n_scored = 0;
    for (int i = 0; i < depth; i++) n_scored += !isnan(m->depth_loss[i]);
    real ce_scale = (real)(1.0 / ((double)n_scored * N));
    int aux_on = arms->on[ARM_AUX] && arms->on[ARM_MOE];
    real daux = aux_on ? (real)(c->moe_aux / depth) : 0;
    // alpha is read where it lives (NULL: the rezero arm is off, alpha = 1)
    int rz = arms->on[ARM_REZERO];
    const real *alpha = rz ? PT(m, P_ALPHA) : NULL;
    real lam = (real)c->lam_max;
    ZERO(a->dybar, Nd);
    ZERO(a->dh, Nd);
    if (arms->on[ARM_ENGRAM]) { ZERO(a->dkey, Nd); ZERO(a->dval, Nd); ZERO(a->dkn, Nd); }
    for (int i = depth - 1; i >= 0; i--) {
        IterActs *t = &a->it[i];
        if (!isnan(m->depth_loss[i])) {  // this depth's CE is part of the loss
            be->ce_logits_backward(a->dlogits, t->probs, a->tgt, ce_scale, N, 256);
            be->gemm(0, 0, N, d, 256, 1, a->dlogits, 256, PT(m, P_HEAD), d, 0, a->dtmp, d);
            be->gemm(1, 0, 256, d, N, 1, a->dlogits, 256, t->yn, d, 1, GT(m, P_HEAD), d);
            be->rmsnorm_backward(a->dybar, GT(m, P_OUT_NORM), a->dtmp, t->ybar, PT(m, P_OUT_NORM), t->yn_rstd, N, d);
        }
        // ybar_i = (i ybar_{i-1} + y_i) / (i + 1): dy_i = dybar / (i + 1) into dtmp
        be->running_mean_backward(a->dtmp, a->dybar, i, Nd);
        be->matmul_backward(a->dh, GT(m, P_OUTPROJ) + (size_t)i * d * d, NULL, a->dtmp, t->h,
                            PT(m, P_OUTPROJ) + (size_t)i * d * d, N, d, d);
        // h_i = h_{i-1} + alpha body: d alpha += dh . body, dbody = alpha dh (one pass)
        be->rezero_backward(a->dbody, rz ? GT(m, P_ALPHA) : NULL, a->dh, t->body, alpha, Nd);
        if (rz) arms->bwd[ARM_REZERO]++;
        ZERO(a->dn, Nd);
        ZERO(a->dctrl, (size_t)N * 3);
        ProjLayout pl = proj_layout(c);
        int P = pl.P;
        if (!arms->on[ARM_KDA] || !arms->on[ARM_MOE]) ZERO(a->dproj, (size_t)N * P);  // off arms' columns
        real *darm = a->dtmp;
        // body = w_attn a + min(w_mem, lam) e + w_ffn gout: per arm, darm = w dbody and the gate's
        // gradient dctrl[:, j] = dbody . arm (min(w, lam) passes none when capped)
        if (arms->on[ARM_KDA]) {
            be->mix_arm_backward(darm, a->dctrl, a->dbody, t->a, t->ctrl, 0, 0, 0, N, d);
            kda_arm_backward(m, t, darm, B, T);
            arms->bwd[ARM_KDA]++;
        }
        if (arms->on[ARM_ENGRAM]) {
            be->mix_arm_backward(darm, a->dctrl, a->dbody, t->e, t->ctrl, 1, 1, lam, N, d);
            mem_arm_backward(m, t, darm, N);
            arms->bwd[ARM_ENGRAM]++;
        }
        if (arms->on[ARM_MOE]) {
            be->mix_arm_backward(darm, a->dctrl, a->dbody, t->gout, t->ctrl, 2, 0, 0, N, d);
            MoEShape ms = {N, d, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            MoEGrads mg = {GT(m, P_U1), GT(m, P_S1), GT(m, P_V1), GT(m, P_U2), GT(m, P_S2), GT(m, P_V2)};
            ZERO(a->dz, (size_t)N * E);
            be->moe_backward(a->dn, a->dz, mg, darm, daux, t->moe_ws, t->n, t->z, mp, ms);
            be->copy_rows(a->dproj + pl.z, P, a->dz, E, N, E);  // the router's columns of dproj
            arms->bwd[ARM_MOE]++;
        }
        // controller: ctrl = sigmoid(W_c n + b_c)
        be->sigmoid_rows_backward(a->dproj + pl.c, P, a->dctrl, t->ctrl, N, 3);
        be->bias_backward(GT(m, P_CTRL_B), a->dproj + pl.c, P, N, 3);
        // the fused projection: dn += dproj W, dW += dproj^T n (W: the [P, d] rows at kda.wq);
        // with kda off over the columns the forward computed, [c0, P) (the KDA rows' gradient
        // stays 0, as their product's would)
        int c0 = arms->on[ARM_KDA] ? 0 : pl.c;
        be->gemm(0, 0, N, d, P - c0, 1, a->dproj + c0, P, PT(m, P_WQ) + (size_t)c0 * d, d, 1, a->dn, d);
        be->gemm(1, 0, P - c0, d, N, 1, a->dproj + c0, P, t->n, d, 1, GT(m, P_WQ) + (size_t)c0 * d, d);
        // n = RMSNorm_blk(u), u = h_{i-1} + IterEmb[i]
        ZERO(a->dtmp, Nd);
        be->rmsnorm_backward(a->dtmp, GT(m, P_BLK_NORM), a->dn, t->u, PT(m, P_BLK_NORM), t->n_rstd, N, d);
        be->bias_backward(GT(m, P_ITER_EMB) + (size_t)i * d, a->dtmp, d, N, d);
        be->add_inplace(a->dh, a->dtmp, Nd);  // now d loss / d h_{i-1}
    }
    be->embedding_backward(GT(m, P_EMB), a->dh, a->x, N, d);
    if (arms->on[ARM_ENGRAM]) {
        int O = c->n_orders, De = c->engram_dim, OD = O * De;
        be->rmsnorm_backward(a->dkey, GT(m, P_MEM_GK), a->dkn, a->key, PT(m, P_MEM_GK), a->kn_rstd, N, d);
        ZERO(a->dm, (size_t)N * OD);
        be->matmul_backward(a->dm, GT(m, P_MK), NULL, a->dkey, a->m, PT(m, P_MK), N, OD, d);
        be->matmul_backward(a->dm, GT(m, P_MV), NULL, a->dval, a->m, PT(m, P_MV), N, OD, d);
        if (m->tab) {
            // host-RAM tables: dm comes down (this waits for the backward) and is scattered into
            // the host gradient by the CPU's own op — the same sums in the same order
            be->download(m->stage_m, a->dm, sizeof(real) * (size_t)N * OD);
            backend_cpu()->engram_scatter(m->tab_grad, m->stage_m, m->host_rows, N, O, c->engram_rows, De);
            memcpy(m->dirty_rows, m->host_rows, sizeof(int32_t) * (size_t)N * O);
            m->dirty_n = N;
        } else {
            be->engram_scatter(GT(m, P_TABLES), a->dm, a->rows, N, O, c->engram_rows, De);
        }
    }
}
