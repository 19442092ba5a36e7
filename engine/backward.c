// backward.c — the exact backward pass of model_forward (SPEC §1), iteration by iteration in
// reverse, into the one gradient buffer. Every op's backward accumulates (+=).
#include <math.h>
#include <string.h>
#include "model.h"
#include "../kernels/cpu/ops.h"

#define PT(m, i) ((m)->params + (m)->t[i].offset)
#define GT(m, i) ((m)->grads + (m)->t[i].offset)
#define ZERO(p, n) memset((p), 0, sizeof(real) * (size_t)(n))

// dst[n, :] = dy[n, :] * silu'(x[n, :]), silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x) kept
// by forward; x and dst rows at strides ldx, ldd, dy and s contiguous [N, C].
static void silu_bwd_rows(real *dst, int ldd, const real *dy, const real *x, int ldx, const real *sg,
                          int N, int C) {
    for (int n = 0; n < N; n++) {
        real *restrict o = dst + (size_t)n * ldd;
        const real *restrict g = dy + (size_t)n * C, *restrict xr = x + (size_t)n * ldx;
        const real *restrict sr = sg + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            real s = sr[c];
            o[c] = g[c] * s * (1 + xr[c] * (1 - s));
        }
    }
}

// y = l2norm(silu(x)) * scale per head (rows of dh): dst = d/dx from dy, with y, rn and the
// sigmoid s kept by forward (l2norm_backward's formula, then silu'), x and dst at strides ldx, ldd.
static void l2norm_silu_bwd_rows(real *dst, int ldd, const real *dy, const real *y, const real *rn,
                                 real scale, const real *x, int ldx, const real *sg, int N, int H,
                                 int dh) {
    int d = H * dh;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t j = (size_t)n * d + (size_t)h * dh;
            const real *restrict g = dy + j, *restrict yr = y + j, *restrict sr = sg + j;
            const real *restrict xr = x + (size_t)n * ldx + (size_t)h * dh;
            real *restrict o = dst + (size_t)n * ldd + (size_t)h * dh;
            real r = rn[(size_t)n * H + h];
            real k = (real)(dm_dot_d(g, yr, dh) / scale);
            for (int c = 0; c < dh; c++) {
                real du = r * (scale * g[c] - yr[c] * k), s = sr[c];
                o[c] = du * s * (1 + xr[c] * (1 - s));
            }
        }
}

// dbias[o] += sum_n dout[n, o] (rows at stride ld), summed in row order in double
static void colsum_add(real *dbias, const real *dout, int ld, int N, int C) {
    double acc[C > 0 ? C : 1];
    for (int c = 0; c < C; c++) acc[c] = 0;
    for (int n = 0; n < N; n++) {
        const real *r = dout + (size_t)n * ld;
        for (int c = 0; c < C; c++) acc[c] += r[c];
    }
    for (int c = 0; c < C; c++) dbias[c] += (real)acc[c];
}

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
    for (size_t i = 0; i < Nd; i++) {
        real gt = t->gt[i], dog = a->dog[i];
        don[i] = dog * gt;
        dgt_pre[i] = dog * t->on[i] * gt * (1 - gt);
    }
    be->gemm(0, 0, N, dh, d, 1, dgt_pre, d, PT(m, P_WG2), dh, 0, dproj + pl.g1, P);   // dgt1
    be->gemm(1, 0, d, dh, N, 1, dgt_pre, d, pr + pl.g1, P, 1, GT(m, P_WG2), dh);
    colsum_add(GT(m, P_BG), dgt_pre, d, N, d);
    // on = RMSNorm_head(o) * w_on
    ZERO(a->do_, Nd);
    be->rmsnorm_backward(a->do_, GT(m, P_W_ON), don, t->o, PT(m, P_W_ON), t->on_rstd, N * H, dh);
    // the recurrence
    ZERO(a->dq, Nd); ZERO(a->dk, Nd); ZERO(a->dv, Nd); ZERO(a->dbeta, (size_t)N * H); ZERO(a->dg, Nd);
    be->kda_backward(a->dq, a->dk, a->dv, a->dbeta, a->dg, a->do_, t->q, t->k, t->v, t->beta, t->g,
                     t->kda_ws, B, T, H, dh, c->kda_chunk);
    // g = g_min * sigmoid(exp(A_h) (zf2 + dt_bias)); per channel sums in token order
    const real *A = PT(m, P_A), *dtb = PT(m, P_DT_BIAS);
    real *dA = GT(m, P_A), *ddtb = GT(m, P_DT_BIAS);
    real gmin = (real)c->g_min;
    real ea[H];
    for (int h = 0; h < H; h++) ea[h] = (real)exp(A[h]);
    double sA[d], sb[d];
    for (int ch = 0; ch < d; ch++) sA[ch] = sb[ch] = 0;
    for (size_t n = 0; n < (size_t)N; n++)
        for (int h = 0; h < H; h++) {
            real eh = ea[h];
            size_t j0 = n * d + (size_t)h * dh;
            const real *restrict gs = t->gs + j0, *restrict dg = a->dg + j0, *restrict z = t->zf2 + j0;
            const real *restrict b = dtb + (size_t)h * dh;
            real *restrict dz = a->dzf2 + j0;
            double *restrict sa = sA + (size_t)h * dh, *restrict sbb = sb + (size_t)h * dh;
            for (int x = 0; x < dh; x++) {
                real dpre = dg[x] * gmin * gs[x] * (1 - gs[x]);
                real v = dpre * eh;
                dz[x] = v;
                sbb[x] += v;
                sa[x] += v * (z[x] + b[x]);
            }
        }
    for (int ch = 0; ch < d; ch++) {
        ddtb[ch] += (real)sb[ch];
        dA[ch / dh] += (real)sA[ch];
    }
    be->gemm(0, 0, N, dh, d, 1, a->dzf2, d, PT(m, P_WF2), dh, 0, dproj + pl.f1, P);  // dzf1
    be->gemm(1, 0, d, dh, N, 1, a->dzf2, d, pr + pl.f1, P, 1, GT(m, P_WF2), dh);
    // beta = sigmoid(W_b n)
    for (size_t n = 0; n < (size_t)N; n++)
        for (int h = 0; h < H; h++) {
            real bt = t->beta[n * H + h];
            dproj[n * P + pl.b + h] = a->dbeta[n * H + h] * bt * (1 - bt);
        }
    // v = silu(W_v n)
    silu_bwd_rows(dproj + pl.v, P, a->dv, pr + pl.v, P, t->sv, N, d);
    // k = l2norm(silu(W_k n)), q = l2norm(silu(W_q n)) * dh^-1/2
    l2norm_silu_bwd_rows(dproj + pl.k, P, a->dk, t->k, t->k_rn, 1, pr + pl.k, P, t->sk, N, H, dh);
    l2norm_silu_bwd_rows(dproj + pl.q, P, a->dq, t->q, t->q_rn, (real)(1.0 / sqrt(dh)), pr + pl.q, P,
                         t->sq, N, H, dh);
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
            for (size_t j = 0; j < (size_t)N * 256; j++) a->dlogits[j] = ce_scale * t->probs[j];
            for (int n = 0; n < N; n++) a->dlogits[(size_t)n * 256 + a->tgt[n]] -= ce_scale;
            be->gemm(0, 0, N, d, 256, 1, a->dlogits, 256, PT(m, P_HEAD), d, 0, a->dtmp, d);
            be->gemm(1, 0, 256, d, N, 1, a->dlogits, 256, t->yn, d, 1, GT(m, P_HEAD), d);
            be->rmsnorm_backward(a->dybar, GT(m, P_OUT_NORM), a->dtmp, t->ybar, PT(m, P_OUT_NORM), t->yn_rstd, N, d);
        }
        // ybar_i = (i ybar_{i-1} + y_i) / (i + 1)
        real wy = (real)1 / (i + 1), wp = (real)i / (i + 1);
        for (size_t j = 0; j < Nd; j++) { a->dtmp[j] = a->dybar[j] * wy; a->dybar[j] *= wp; }
        be->matmul_backward(a->dh, GT(m, P_OUTPROJ) + (size_t)i * d * d, NULL, a->dtmp, t->h,
                            PT(m, P_OUTPROJ) + (size_t)i * d * d, N, d, d);
        // h_i = h_{i-1} + alpha body
        if (arms->on[ARM_REZERO]) {
            GT(m, P_ALPHA)[0] += (real)dm_dot_d(a->dh, t->body, Nd);
            arms->bwd[ARM_REZERO]++;
        }
        for (size_t j = 0; j < Nd; j++) a->dbody[j] = alpha * a->dh[j];
        ZERO(a->dn, Nd);
        ZERO(a->dctrl, (size_t)N * 3);
        ProjLayout pl = proj_layout(c);
        int P = pl.P;
        if (!arms->on[ARM_KDA] || !arms->on[ARM_MOE]) ZERO(a->dproj, (size_t)N * P);  // off arms' columns
        real *darm = a->dtmp;
        if (arms->on[ARM_KDA]) {
            for (size_t n = 0; n < (size_t)N; n++) {
                a->dctrl[n * 3 + 0] = (real)dm_dot_d(a->dbody + n * d, t->a + n * d, d);
                for (int ch = 0; ch < d; ch++) darm[n * d + ch] = t->ctrl[n * 3 + 0] * a->dbody[n * d + ch];
            }
            kda_arm_backward(m, t, darm, B, T);
            arms->bwd[ARM_KDA]++;
        }
        if (arms->on[ARM_ENGRAM]) {
            for (size_t n = 0; n < (size_t)N; n++) {
                real w = t->ctrl[n * 3 + 1];
                int capped = !(w < lam);
                real wc = capped ? lam : w;
                for (int ch = 0; ch < d; ch++) darm[n * d + ch] = wc * a->dbody[n * d + ch];
                a->dctrl[n * 3 + 1] = capped ? 0 : (real)dm_dot_d(a->dbody + n * d, t->e + n * d, d);  // min(w, lam) passes no gradient when capped
            }
            mem_arm_backward(m, t, darm, N);
            arms->bwd[ARM_ENGRAM]++;
        }
        if (arms->on[ARM_MOE]) {
            for (size_t n = 0; n < (size_t)N; n++) {
                a->dctrl[n * 3 + 2] = (real)dm_dot_d(a->dbody + n * d, t->gout + n * d, d);
                for (int ch = 0; ch < d; ch++) darm[n * d + ch] = t->ctrl[n * 3 + 2] * a->dbody[n * d + ch];
            }
            MoEShape ms = {N, d, E, c->k, c->r, c->f};
            MoEParams mp = {PT(m, P_U1), PT(m, P_S1), PT(m, P_V1), PT(m, P_U2), PT(m, P_S2), PT(m, P_V2)};
            MoEGrads mg = {GT(m, P_U1), GT(m, P_S1), GT(m, P_V1), GT(m, P_U2), GT(m, P_S2), GT(m, P_V2)};
            ZERO(a->dz, (size_t)N * E);
            be->moe_backward(a->dn, a->dz, mg, darm, daux, t->moe_ws, t->n, t->z, mp, ms);
            for (size_t n = 0; n < (size_t)N; n++)
                for (int e = 0; e < E; e++) a->dproj[n * P + pl.z + e] = a->dz[n * E + e];
            arms->bwd[ARM_MOE]++;
        }
        // controller: ctrl = sigmoid(W_c n + b_c)
        for (size_t n = 0; n < (size_t)N; n++)
            for (int j = 0; j < 3; j++) {
                real g = t->ctrl[n * 3 + j];
                a->dproj[n * P + pl.c + j] = a->dctrl[n * 3 + j] * g * (1 - g);
            }
        colsum_add(GT(m, P_CTRL_B), a->dproj + pl.c, P, N, 3);
        // the fused projection: dn += dproj W, dW += dproj^T n (W: the [P, d] rows at kda.wq)
        be->gemm(0, 0, N, d, P, 1, a->dproj, P, PT(m, P_WQ), d, 1, a->dn, d);
        be->gemm(1, 0, P, d, N, 1, a->dproj, P, t->n, d, 1, GT(m, P_WQ), d);
        // n = RMSNorm_blk(u), u = h_{i-1} + IterEmb[i]
        ZERO(a->dtmp, Nd);
        be->rmsnorm_backward(a->dtmp, GT(m, P_BLK_NORM), a->dn, t->u, PT(m, P_BLK_NORM), t->n_rstd, N, d);
        colsum_add(GT(m, P_ITER_EMB) + (size_t)i * d, a->dtmp, d, N, d);
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
