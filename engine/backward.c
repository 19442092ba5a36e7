// backward.c — the exact backward pass of model_forward (SPEC §1), iteration by iteration in
// reverse, into the one gradient buffer. Every op's backward accumulates (+=).
#include <math.h>
#include <string.h>
#include "model.h"

#define PT(m, i) ((m)->params + (m)->t[i].offset)
#define GT(m, i) ((m)->grads + (m)->t[i].offset)
#define ZERO(p, n) memset((p), 0, sizeof(real) * (size_t)(n))

static void kda_arm_backward(Model *m, IterActs *t, const real *da, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Acts *a = &m->acts;
    int N = B * T, d = c->d, H = c->H, dh = d / H;
    size_t Nd = (size_t)N * d;
    // a = W_o og; og = on * gt
    ZERO(a->dog, Nd);
    be->matmul_backward(a->dog, GT(m, P_WO), NULL, da, t->og, PT(m, P_WO), N, d, d);
    real *don = a->dtmp2, *dgt = a->dgt;
    for (size_t i = 0; i < Nd; i++) { don[i] = a->dog[i] * t->gt[i]; dgt[i] = a->dog[i] * t->on[i]; }
    // gt = sigmoid(W_g2 W_g1 n + b_g)
    real *dgt_pre = a->dog;  // og's gradient is consumed: reuse
    ZERO(dgt_pre, Nd);
    be->sigmoid_backward(dgt_pre, dgt, t->gt, Nd);
    ZERO(a->dgt1, (size_t)N * dh);
    be->matmul_backward(a->dgt1, GT(m, P_WG2), GT(m, P_BG), dgt_pre, t->gt1, PT(m, P_WG2), N, dh, d);
    be->matmul_backward(a->dn, GT(m, P_WG1), NULL, a->dgt1, t->n, PT(m, P_WG1), N, d, dh);
    // on = RMSNorm_head(o) * w_on
    ZERO(a->do_, Nd);
    be->rmsnorm_backward(a->do_, GT(m, P_W_ON), don, t->o, PT(m, P_W_ON), t->on_rstd, N * H, dh);
    // the recurrence
    ZERO(a->dq, Nd); ZERO(a->dk, Nd); ZERO(a->dv, Nd); ZERO(a->dbeta, (size_t)N * H); ZERO(a->dg, Nd);
    be->kda_backward(a->dq, a->dk, a->dv, a->dbeta, a->dg, a->do_, t->q, t->k, t->v, t->beta, t->g,
                     t->kda_ws, B, T, H, dh, c->kda_chunk);
    // g = g_min * sigmoid(exp(A_h) (zf2 + dt_bias))
    const real *A = PT(m, P_A), *dtb = PT(m, P_DT_BIAS);
    real *dA = GT(m, P_A), *ddtb = GT(m, P_DT_BIAS);
    real gmin = (real)c->g_min;
    for (int ch = 0; ch < d; ch++) {
        real ea = (real)exp(A[ch / dh]);
        double sA = 0, sb = 0;
        for (size_t n = 0; n < (size_t)N; n++) {
            size_t j = n * d + ch;
            real gs = t->gs[j];
            real dpre = a->dg[j] * gmin * gs * (1 - gs);
            a->dzf2[j] = dpre * ea;
            sb += dpre * ea;
            sA += dpre * ea * (t->zf2[j] + dtb[ch]);
        }
        ddtb[ch] += (real)sb;
        dA[ch / dh] += (real)sA;
    }
    ZERO(a->dzf1, (size_t)N * dh);
    be->matmul_backward(a->dzf1, GT(m, P_WF2), NULL, a->dzf2, t->zf1, PT(m, P_WF2), N, dh, d);
    be->matmul_backward(a->dn, GT(m, P_WF1), NULL, a->dzf1, t->n, PT(m, P_WF1), N, d, dh);
    // beta = sigmoid(W_b n)
    real *dbp = a->dzf2;  // [N, H] fits in [N, d]
    ZERO(dbp, (size_t)N * H);
    be->sigmoid_backward(dbp, a->dbeta, t->beta, (size_t)N * H);
    be->matmul_backward(a->dn, GT(m, P_WB), NULL, dbp, t->n, PT(m, P_WB), N, d, H);
    // v = silu(W_v n)
    real *dpre = a->dtmp2;
    ZERO(dpre, Nd);
    be->silu_backward(dpre, a->dv, t->vr, Nd);
    be->matmul_backward(a->dn, GT(m, P_WV), NULL, dpre, t->n, PT(m, P_WV), N, d, d);
    // k = l2norm(silu(W_k n)), q = l2norm(silu(W_q n)) * dh^-1/2
    ZERO(a->dks, Nd);
    be->l2norm_backward(a->dks, a->dk, t->k, t->k_rn, 1, N * H, dh);
    ZERO(dpre, Nd);
    be->silu_backward(dpre, a->dks, t->kr, Nd);
    be->matmul_backward(a->dn, GT(m, P_WK), NULL, dpre, t->n, PT(m, P_WK), N, d, d);
    ZERO(a->dqs, Nd);
    be->l2norm_backward(a->dqs, a->dq, t->q, t->q_rn, (real)(1.0 / sqrt(dh)), N * H, dh);
    ZERO(dpre, Nd);
    be->silu_backward(dpre, a->dqs, t->qr, Nd);
    be->matmul_backward(a->dn, GT(m, P_WQ), NULL, dpre, t->n, PT(m, P_WQ), N, d, d);
}

static void mem_arm_backward(Model *m, IterActs *t, const real *de, int N) {
    Acts *a = &m->acts;
    int d = m->cfg.d;
    real inv = (real)(1.0 / sqrt(d));
    real *dnn = a->dtmp2;
    for (size_t n = 0; n < (size_t)N; n++) {
        double dgate = 0;
        for (int c = 0; c < d; c++) {
            dgate += (double)de[n * d + c] * a->val[n * d + c];
            a->dval[n * d + c] += t->mgate[n] * de[n * d + c];
        }
        real g = t->mgate[n];
        real dp = (real)dgate * g * (1 - g) * inv;
        for (int c = 0; c < d; c++) {
            dnn[n * d + c] = dp * a->kn[n * d + c];
            a->dkn[n * d + c] += dp * t->nn[n * d + c];
        }
    }
    m->be->rmsnorm_backward(a->dn, GT(m, P_MEM_GN), dnn, t->n, PT(m, P_MEM_GN), t->nn_rstd, N, d);
}

void model_backward(Model *m) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Arms *arms = &m->arms;
    Acts *a = &m->acts;
    int B = a->B, T = a->T, N = B * T, d = c->d, E = c->E, depth = m->last_depth;
    size_t Nd = (size_t)N * d;
    be->zero(m->grads, sizeof(real) * m->n_params);
    int n_scored = 0;
    for (int i = 0; i < depth; i++) n_scored += !isnan(m->depth_loss[i]);
    real ce_scale = (real)(1.0 / ((double)n_scored * N));
    int aux_on = arms->on[ARM_AUX] && arms->on[ARM_MOE];
    real daux = aux_on ? (real)(c->moe_aux / depth) : 0;
    real alpha = arms->on[ARM_REZERO] ? PT(m, P_ALPHA)[0] : 1;
    real lam = (real)c->lam_max;
    ZERO(a->dybar, Nd);
    ZERO(a->dh, Nd);
    if (arms->on[ARM_ENGRAM]) { ZERO(a->dkey, Nd); ZERO(a->dval, Nd); ZERO(a->dkn, Nd); }
    for (int i = depth - 1; i >= 0; i--) {
        IterActs *t = &a->it[i];
        const real *hprev = i ? a->it[i - 1].h : a->h0;
        if (!isnan(m->depth_loss[i])) {  // this depth's CE is part of the loss
            ZERO(a->dlogits, (size_t)N * 256);
            be->softmax_ce_backward(a->dlogits, t->probs, a->tgt, ce_scale, N, 256);
            ZERO(a->dtmp, Nd);
            be->matmul_backward(a->dtmp, GT(m, P_HEAD), NULL, a->dlogits, t->yn, PT(m, P_HEAD), N, d, 256);
            be->rmsnorm_backward(a->dybar, GT(m, P_OUT_NORM), a->dtmp, t->ybar, PT(m, P_OUT_NORM), t->yn_rstd, N, d);
        }
        // ybar_i = (i ybar_{i-1} + y_i) / (i + 1)
        real wy = (real)1 / (i + 1), wp = (real)i / (i + 1);
        for (size_t j = 0; j < Nd; j++) { a->dtmp[j] = a->dybar[j] * wy; a->dybar[j] *= wp; }
        be->matmul_backward(a->dh, GT(m, P_OUTPROJ) + (size_t)i * d * d, NULL, a->dtmp, t->h,
                            PT(m, P_OUTPROJ) + (size_t)i * d * d, N, d, d);
        // h_i = h_{i-1} + alpha body
        if (arms->on[ARM_REZERO]) {
            double s = 0;
            for (size_t j = 0; j < Nd; j++) s += (double)a->dh[j] * t->body[j];
            GT(m, P_ALPHA)[0] += (real)s;
            arms->bwd[ARM_REZERO]++;
        }
        for (size_t j = 0; j < Nd; j++) a->dbody[j] = alpha * a->dh[j];
        ZERO(a->dn, Nd);
        ZERO(a->dctrl, (size_t)N * 3);
        real *darm = a->dtmp;
        if (arms->on[ARM_KDA]) {
            for (size_t n = 0; n < (size_t)N; n++) {
                double s = 0;
                for (int ch = 0; ch < d; ch++) {
                    s += (double)a->dbody[n * d + ch] * t->a[n * d + ch];
                    darm[n * d + ch] = t->ctrl[n * 3 + 0] * a->dbody[n * d + ch];
                }
                a->dctrl[n * 3 + 0] = (real)s;
            }
            kda_arm_backward(m, t, darm, B, T);
            arms->bwd[ARM_KDA]++;
        }
        if (arms->on[ARM_ENGRAM]) {
            for (size_t n = 0; n < (size_t)N; n++) {
                real w = t->ctrl[n * 3 + 1];
                int capped = !(w < lam);
                double s = 0;
                for (int ch = 0; ch < d; ch++) {
                    s += (double)a->dbody[n * d + ch] * t->e[n * d + ch];
                    darm[n * d + ch] = (capped ? lam : w) * a->dbody[n * d + ch];
                }
                a->dctrl[n * 3 + 1] = capped ? 0 : (real)s;  // min(w, lam) passes no gradient when capped
            }
            mem_arm_backward(m, t, darm, N);
            arms->bwd[ARM_ENGRAM]++;
        }
        if (arms->on[ARM_MOE]) {
            for (size_t n = 0; n < (size_t)N; n++) {
                double s = 0;
                for (int ch = 0; ch < d; ch++) {
                    s += (double)a->dbody[n * d + ch] * t->gout[n * d + ch];
                    darm[n * d + ch] = t->ctrl[n * 3 + 2] * a->dbody[n * d + ch];
                }
                a->dctrl[n * 3 + 2] = (real)s;
            }
            MoEShape ms = {N, d, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            MoEGrads mg = {GT(m, P_U1), GT(m, P_S1), GT(m, P_V1), GT(m, P_U2), GT(m, P_S2), GT(m, P_V2)};
            ZERO(a->dz, (size_t)N * E);
            be->moe_backward(a->dn, a->dz, mg, darm, daux, t->moe_ws, t->n, t->z, mp, ms);
            be->matmul_backward(a->dn, GT(m, P_ROUTER), NULL, a->dz, t->n, PT(m, P_ROUTER), N, d, E);
            arms->bwd[ARM_MOE]++;
        }
        // controller: ctrl = sigmoid(W_c n + b_c)
        real *dcp = a->dz;  // [N, 3] scratch (dz consumed)
        ZERO(dcp, (size_t)N * 3);
        be->sigmoid_backward(dcp, a->dctrl, t->ctrl, (size_t)N * 3);
        be->matmul_backward(a->dn, GT(m, P_CTRL_W), GT(m, P_CTRL_B), dcp, t->n, PT(m, P_CTRL_W), N, d, 3);
        // n = RMSNorm_blk(u), u = h_{i-1} + IterEmb[i]
        ZERO(a->dtmp, Nd);
        be->rmsnorm_backward(a->dtmp, GT(m, P_BLK_NORM), a->dn, t->u, PT(m, P_BLK_NORM), t->n_rstd, N, d);
        real *die = GT(m, P_ITER_EMB) + (size_t)i * d;
        for (int ch = 0; ch < d; ch++) {
            double s = 0;
            for (size_t n = 0; n < (size_t)N; n++) s += a->dtmp[n * d + ch];
            die[ch] += (real)s;
        }
        for (size_t j = 0; j < Nd; j++) a->dh[j] += a->dtmp[j];  // now d loss / d h_{i-1}
        (void)hprev;
    }
    be->embedding_backward(GT(m, P_EMB), a->dh, a->x, N, d);
    if (arms->on[ARM_ENGRAM]) {
        int O = c->n_orders, De = c->engram_dim, OD = O * De;
        be->rmsnorm_backward(a->dkey, GT(m, P_MEM_GK), a->dkn, a->key, PT(m, P_MEM_GK), a->kn_rstd, N, d);
        ZERO(a->dm, (size_t)N * OD);
        be->matmul_backward(a->dm, GT(m, P_MK), NULL, a->dkey, a->m, PT(m, P_MK), N, OD, d);
        be->matmul_backward(a->dm, GT(m, P_MV), NULL, a->dval, a->m, PT(m, P_MV), N, OD, d);
        be->engram_scatter(GT(m, P_TABLES), a->dm, a->rows, N, O, c->engram_rows, De);
    }
}
