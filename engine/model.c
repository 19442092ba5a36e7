// model.c — the parameter table, initialisation (SPEC §4 "Defaults"), the activation arena,
// retraction, counts.
#include "model.h"
#include "../kernels/guard.h"
#include <math.h>
#include <string.h>
#include "rng.h"

static void add(Model *m, int idx, const char *name, OptGroup g, int ndim, int s0, int s1, int s2) {
    ParamTensor *t = &m->t[idx];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = s0; t->shape[1] = s1; t->shape[2] = s2;
    t->numel = (size_t)s0 * (ndim > 1 ? (size_t)s1 : 1) * (ndim > 2 ? (size_t)s2 : 1);
    t->group = g;
    // matrices for Muon / retraction: the last two dims, n_mats of them
    if (ndim == 2) { t->n_mats = 1; t->rows = s0; t->cols = s1; }
    if (ndim == 3) { t->n_mats = s0; t->rows = s1; t->cols = s2; }
    t->offset = m->n_params;
    m->n_params += t->numel;
    m->order[m->n_order++] = idx;
}

static void build_table(Model *m) {
    const Config *c = &m->cfg;
    int d = c->d, dh = c->d / c->H, OD = c->n_orders * c->engram_dim;
    m->n_params = 0;
    m->n_order = 0;
    add(m, P_EMB, "emb", GROUP_ADAMW, 2, 256, d, 0);
    add(m, P_ITER_EMB, "iter_emb", GROUP_ADAMW, 2, c->L, d, 0);
    add(m, P_BLK_NORM, "blk_norm", GROUP_ADAMW_1D, 1, d, 0, 0);
    // the projections of n, consecutive and in ProjLayout order (one [P, d] matrix at kda.wq)
    add(m, P_WQ, "kda.wq", GROUP_MUON, 2, d, d, 0);
    add(m, P_WK, "kda.wk", GROUP_MUON, 2, d, d, 0);
    add(m, P_WV, "kda.wv", GROUP_MUON, 2, d, d, 0);
    add(m, P_WB, "kda.wb", GROUP_MUON, 2, c->H, d, 0);
    add(m, P_WF1, "kda.wf1", GROUP_MUON, 2, dh, d, 0);
    add(m, P_WG1, "kda.wg1", GROUP_MUON, 2, dh, d, 0);
    add(m, P_CTRL_W, "ctrl.w", GROUP_ADAMW, 2, 3, d, 0);
    add(m, P_ROUTER, "ctrl.router", GROUP_ADAMW, 2, c->E, d, 0);
    add(m, P_CTRL_B, "ctrl.b", GROUP_ADAMW_1D, 1, 3, 0, 0);
    add(m, P_WF2, "kda.wf2", GROUP_MUON, 2, d, dh, 0);
    add(m, P_A, "kda.A", GROUP_ADAMW_1D, 1, c->H, 0, 0);
    add(m, P_DT_BIAS, "kda.dt_bias", GROUP_ADAMW_1D, 1, d, 0, 0);
    add(m, P_W_ON, "kda.w_on", GROUP_ADAMW_1D, 1, dh, 0, 0);
    add(m, P_WG2, "kda.wg2", GROUP_MUON, 2, d, dh, 0);
    add(m, P_BG, "kda.b_g", GROUP_ADAMW_1D, 1, d, 0, 0);
    add(m, P_WO, "kda.wo", GROUP_MUON, 2, d, d, 0);
    add(m, P_MK, "mem.wk", GROUP_MUON, 2, d, OD, 0);
    add(m, P_MV, "mem.wv", GROUP_MUON, 2, d, OD, 0);
    add(m, P_MEM_GN, "mem.norm_n", GROUP_ADAMW_1D, 1, d, 0, 0);
    add(m, P_MEM_GK, "mem.norm_k", GROUP_ADAMW_1D, 1, d, 0, 0);
    add(m, P_U1, "moe.U1", GROUP_MUON, 3, c->E, c->f, c->r);
    add(m, P_S1, "moe.s1", GROUP_ADAMW_1D, 2, c->E, c->r, 0);
    add(m, P_V1, "moe.V1", GROUP_MUON, 3, c->E, d, c->r);
    add(m, P_U2, "moe.U2", GROUP_MUON, 3, c->E, d, c->r);
    add(m, P_S2, "moe.s2", GROUP_ADAMW_1D, 2, c->E, c->r, 0);
    add(m, P_V2, "moe.V2", GROUP_MUON, 3, c->E, c->f, c->r);
    add(m, P_ALPHA, "alpha", GROUP_ADAMW_1D, 1, 1, 0, 0);
    add(m, P_OUTPROJ, "outproj", GROUP_MUON, 3, c->L, d, d);
    add(m, P_OUT_NORM, "out_norm", GROUP_ADAMW_1D, 1, d, 0, 0);
    add(m, P_HEAD, "head", GROUP_ADAMW, 2, 256, d, 0);
    add(m, P_TABLES, "engram.tables", GROUP_TABLE, 3, c->n_orders, (int)c->engram_rows, c->engram_dim);
    // s1/s2 are vectors per expert (1-D parameters in SPEC §4's sense): no Muon matrices
    m->t[P_S1].n_mats = m->t[P_S2].n_mats = 0;
    m->t[P_TABLES].n_mats = 0;
    // the fused projection relies on this layout
    ProjLayout pl = proj_layout(c);
    const int prow[] = {P_WQ, P_WK, P_WV, P_WB, P_WF1, P_WG1, P_CTRL_W, P_ROUTER};
    const int poff[] = {pl.q, pl.k, pl.v, pl.b, pl.f1, pl.g1, pl.c, pl.z};
    for (int i = 0; i < 8; i++)
        if (m->t[prow[i]].offset != m->t[P_WQ].offset + (size_t)poff[i] * d) {
            fprintf(stderr, "%s:%d: internal: projection weights not consecutive\n", __FILE__, __LINE__);
            abort();
        }
    if (m->n_order != P_COUNT) {
        fprintf(stderr, "%s:%d: internal: %d of %d tensors in the layout\n", __FILE__, __LINE__, m->n_order, P_COUNT);
        abort();
    }
    for (int i = P_U1; i <= P_V2; i++) m->t[i].orthonormal = (m->t[i].group == GROUP_MUON);
}

int model_find_param(const Model *m, const char *name) {
    for (int i = 0; i < P_COUNT; i++)
        if (strcmp(m->t[i].name, name) == 0) return i;
    return -1;
}

static void fill_normal(real *p, size_t n, double std, Rng *r) {
    for (size_t i = 0; i < n; i++) p[i] = (real)(std * rng_normal(r));
}

// Random orthonormal columns: modified Gram–Schmidt on a Gaussian (the Q of its QR), in double.
// The draws fill X row-major; the sweeps run on a column-major copy, so each column is one
// contiguous run (walking a column of the row-major array strides by cols: ~4x slower at the
// large preset's 3072 x 192, where :init spent most of its time here). Same sums, same order.
static void fill_orthonormal(real *X, int rows, int cols, Rng *r) {
    double *A = mallocCheck(sizeof(double) * rows * cols);  // [cols][rows]
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) A[(size_t)j * rows + i] = rng_normal(r);
    // Four target columns at a time against each finished column p: their dots are four
    // independent chains in one pass (a lone dot waits on its own adds), each summed in the same
    // order as alone, so the result is the plain MGS's bit for bit.
    for (int j0 = 0; j0 < cols; j0 += 4) {
        int nb = cols - j0 < 4 ? cols - j0 : 4;
        double *a0 = A + (size_t)j0 * rows, *a1 = a0 + (nb > 1) * rows, *a2 = a0 + (nb > 2) * 2 * (size_t)rows,
               *a3 = a0 + (nb > 3) * 3 * (size_t)rows;  // (targets past nb alias a0 and are not used)
        for (int p = 0; p < j0; p++) {
            const double *ap = A + (size_t)p * rows;
            double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
            for (int i = 0; i < rows; i++) {
                double x = ap[i];
                d0 += a0[i] * x; d1 += a1[i] * x; d2 += a2[i] * x; d3 += a3[i] * x;
            }
            double dd[4] = {d0, d1, d2, d3};
            for (int t = 0; t < nb; t++) {
                double *at = a0 + (size_t)t * rows, dt = dd[t];
                for (int i = 0; i < rows; i++) at[i] -= dt * ap[i];
            }
        }
        for (int j = j0; j < j0 + nb; j++) {  // inside the block: one column after the other
            double *aj = A + (size_t)j * rows;
            for (int p = j0; p < j; p++) {
                const double *ap = A + (size_t)p * rows;
                double dot = 0;
                for (int i = 0; i < rows; i++) dot += aj[i] * ap[i];
                for (int i = 0; i < rows; i++) aj[i] -= dot * ap[i];
            }
            double nrm = 0;
            for (int i = 0; i < rows; i++) nrm += aj[i] * aj[i];
            nrm = sqrt(nrm);
            for (int i = 0; i < rows; i++) aj[i] /= nrm;
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) X[(size_t)i * cols + j] = (real)A[(size_t)j * rows + i];
    free(A);
}

// Fills P [n_params], a zeroed HOST buffer (model_create uploads it to the backend).
static void init_params(Model *m, real *P, uint64_t seed) {
    const Config *c = &m->cfg;
    int d = c->d, dh = c->d / c->H, OD = c->n_orders * c->engram_dim;
    Rng r = {splitmix64(seed ^ 0x5EEDULL)};
#define T(i) (P + m->t[i].offset)
#define N_(i) (m->t[i].numel)
    fill_normal(T(P_EMB), N_(P_EMB), 1.0, &r);
    fill_normal(T(P_ITER_EMB), N_(P_ITER_EMB), 0.02, &r);
    fill_normal(T(P_HEAD), N_(P_HEAD), 0.02, &r);
    fill_normal(T(P_TABLES), N_(P_TABLES), 1.0, &r);
    const int fan_d[] = {P_CTRL_W, P_ROUTER, P_WQ, P_WK, P_WV, P_WB, P_WF1, P_WG1, P_WO, P_OUTPROJ};
    for (unsigned i = 0; i < sizeof fan_d / sizeof fan_d[0]; i++) fill_normal(T(fan_d[i]), N_(fan_d[i]), 1.0 / sqrt(d), &r);
    fill_normal(T(P_WF2), N_(P_WF2), 1.0 / sqrt(dh), &r);
    fill_normal(T(P_WG2), N_(P_WG2), 1.0 / sqrt(dh), &r);
    fill_normal(T(P_MK), N_(P_MK), 1.0 / sqrt(OD), &r);
    fill_normal(T(P_MV), N_(P_MV), 1.0 / sqrt(OD), &r);
    const int ones[] = {P_BLK_NORM, P_W_ON, P_MEM_GN, P_MEM_GK, P_OUT_NORM};
    for (unsigned i = 0; i < sizeof ones / sizeof ones[0]; i++)
        for (size_t j = 0; j < N_(ones[i]); j++) T(ones[i])[j] = 1;
    // ctrl.b, kda.A, kda.b_g, alpha stay 0 (calloc)
    // dt_bias = inverse-softplus(dt), dt log-uniform in [1e-3, 1e-1]
    for (int j = 0; j < d; j++) {
        double dt = exp(log(1e-3) + rng_uniform(&r) * (log(1e-1) - log(1e-3)));
        T(P_DT_BIAS)[j] = (real)(dt + log(-expm1(-dt)));
    }
    for (int i = P_U1; i <= P_V2; i++) {
        ParamTensor *t = &m->t[i];
        if (!t->orthonormal) continue;
        for (int e = 0; e < t->n_mats; e++)
            fill_orthonormal(T(i) + (size_t)e * t->rows * t->cols, t->rows, t->cols, &r);
    }
    for (size_t j = 0; j < N_(P_S1); j++) T(P_S1)[j] = (real)sqrt((double)c->f / c->r);
    for (size_t j = 0; j < N_(P_S2); j++) T(P_S2)[j] = (real)sqrt((double)c->d / c->r);
#undef T
#undef N_
}

static int model_create_ex(Model *m, const Config *cfg, const Backend *be, uint64_t seed, int init, dm_err *err);
void model_layout(Model *m, const Config *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    build_table(m);
}

int model_create(Model *m, const Config *cfg, const Backend *be, uint64_t seed, dm_err *err) {
    return model_create_ex(m, cfg, be, seed, 1, err);
}
int model_create_blank(Model *m, const Config *cfg, const Backend *be, dm_err *err) {
    return model_create_ex(m, cfg, be, 0, 0, err);
}

static int model_create_ex(Model *m, const Config *cfg, const Backend *be, uint64_t seed, int init, dm_err *err) {
    if (config_validate(cfg, err)) return 1;
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    build_table(m);
    _Static_assert(P_TABLES == P_COUNT - 1, "engram_ram keeps the tables as the layout's tail");
    m->n_dev = cfg->engram_ram ? m->t[P_TABLES].offset : m->n_params;
    m->params = be->alloc(sizeof(real) * (m->n_dev ? m->n_dev : 1));
    m->grads = be->alloc(sizeof(real) * (m->n_dev ? m->n_dev : 1));
    if (!m->params || !m->grads) {
        size_t n = m->n_dev;
        model_free(m);  // (clears m)
        return dm_fail(err, "cannot allocate %zu parameters on %s: try a smaller preset%s", n, be->name,
                       cfg->engram_ram ? "" : " (or :set engram_ram=on to keep the Engram tables in host memory)");
    }
    size_t ntab = m->n_params - m->n_dev;
    if (ntab) {  // calloc: the pages of rows never read stay unmapped
        m->tab = calloc(ntab, sizeof(real));
        m->tab_grad = calloc(ntab, sizeof(real));
        if (!m->tab || !m->tab_grad) {
            model_free(m);
            return dm_fail(err, "cannot allocate the Engram tables (%zu reals) in host memory: lower engram_rows", ntab);
        }
    }
    // initialise on the host (sequential RNG draws, Gram–Schmidt in double), then one upload
    if (init) {
        real *host = callocCheck(sizeof(real) * m->n_params);
        init_params(m, host, seed);
        model_params_put(m, host);
        free(host);
    }
    arms_init(&m->arms);
    m->expert_load = callocCheck(sizeof(int) * cfg->L * cfg->E);
    // the MoE's aux [L] and counts [L, E], written on the backend by moe_forward (model.h)
    m->moe_aux = be->alloc(sizeof(real) * cfg->L + sizeof(int) * (size_t)cfg->L * cfg->E);
    if (!m->moe_aux) return dm_fail(err, "cannot allocate the MoE statistics on %s", be->name);
    m->moe_load = (int *)(m->moe_aux + cfg->L);
    return 0;
}

static void acts_free(Model *m) {
    Acts *a = &m->acts;
    if (a->buf) m->be->free(a->buf);
    free(a->it);  // x, tgt, rows live in the arena
    memset(a, 0, sizeof *a);
    m->acts_B = m->acts_T = m->acts_chunk = 0;
}

void model_free(Model *m) {
    if (!m->be) return;
    acts_free(m);
    if (m->params) m->be->free(m->params);
    if (m->grads) m->be->free(m->grads);
    if (m->moe_aux) m->be->free(m->moe_aux);
    free(m->expert_load);
    free(m->tab);
    free(m->tab_grad);
    if (m->stage_m) m->be->host_free(m->stage_m);
    if (m->host_rows) m->be->host_free(m->host_rows);
    free(m->dirty_rows);
    memset(m, 0, sizeof *m);
}

void model_params_get(const Model *m, real *dst) {
    m->be->download(dst, m->params, sizeof(real) * m->n_dev);
    if (m->tab) memcpy(dst + m->n_dev, m->tab, sizeof(real) * (m->n_params - m->n_dev));
}

void model_params_put(Model *m, const real *src) {
    m->be->upload(m->params, src, sizeof(real) * m->n_dev);
    if (m->tab) memcpy(m->tab, src + m->n_dev, sizeof(real) * (m->n_params - m->n_dev));
}

void model_grads_get(const Model *m, real *dst) {
    m->be->download(dst, m->grads, sizeof(real) * m->n_dev);
    if (m->tab_grad) memcpy(dst + m->n_dev, m->tab_grad, sizeof(real) * (m->n_params - m->n_dev));
}

int model_ram_reserve(Model *m, int N) {
    if (!m->tab || N <= m->stage_n) return 0;
    size_t OD = (size_t)m->cfg.n_orders * m->cfg.engram_dim;
    if (m->stage_m) m->be->host_free(m->stage_m);
    m->stage_m = m->be->host_alloc(sizeof(real) * (size_t)N * OD);
    size_t nr = (size_t)N * m->cfg.n_orders;
    // pinned, as stage_m: an upload from pageable memory makes CUDA wait for the stream first,
    // so the host could not run ahead of the device in the forward (its contents are rewritten
    // by the next forward; the waits that keep stage_m keep it too)
    if (m->host_rows) m->be->host_free(m->host_rows);
    m->host_rows = m->be->host_alloc(sizeof(int32_t) * nr);
    // (realloc keeps the dirty list, [O, dirty_n] at the front: those rows are still to be cleared)
    m->dirty_rows = realloc(m->dirty_rows, sizeof(int32_t) * nr);
    m->stage_n = m->stage_m && m->host_rows && m->dirty_rows ? N : 0;
    return m->stage_n ? 0 : 1;
}

// Carve the arena: called once with base == NULL to size it, then with the real base.
static size_t carve(Model *m, real *base) {
    const Config *c = &m->cfg;
    Acts *a = &m->acts;
    size_t N = (size_t)a->B * a->T, d = c->d, H = c->H, dh = d / H, E = c->E;
    size_t OD = (size_t)c->n_orders * c->engram_dim, V = 256, used = 0;
    size_t P = (size_t)proj_layout(c).P;
#define TAKE(ptr, n) do { size_t n_ = (n); (ptr) = base ? base + used : NULL; used += (n_ + 15) & ~(size_t)15; } while (0)
    // non-real arrays (ids, row indices, double sums) take whole reals: every piece starts on a
    // 16-real boundary, so any of these types is aligned
#define TAKE_AS(ptr, type, n) do { real *p_; TAKE(p_, ((n) * sizeof(type) + sizeof(real) - 1) / sizeof(real)); (ptr) = (type *)p_; } while (0)
    TAKE_AS(a->x, int, N); TAKE_AS(a->tgt, int, N); TAKE_AS(a->rows, int32_t, N * c->n_orders);
    TAKE_AS(a->loss_sum, double, (size_t)c->L);
    TAKE(a->h0, N * d); TAKE(a->m, N * OD); TAKE(a->key, N * d); TAKE(a->val, N * d);
    TAKE(a->kn, N * d); TAKE(a->kn_rstd, N); TAKE(a->logits, N * V);
    size_t kda_ws = m->be->kda_ws_size(a->B, a->T, (int)H, (int)dh, c->kda_chunk);
    MoEShape ms = {(int)N, (int)d, (int)E, c->k, c->r, c->f};
    size_t moe_ws = m->be->moe_ws_size(ms);
    for (int i = 0; i < c->L; i++) {
        IterActs *t = &a->it[i];
        TAKE(t->u, N * d); TAKE(t->n, N * d); TAKE(t->n_rstd, N);
        TAKE(t->proj, N * P); TAKE(t->ctrl, N * 3); TAKE(t->z, N * E);
        TAKE(t->sq, N * d); TAKE(t->sk, N * d); TAKE(t->sv, N * d);
        TAKE(t->q, N * d); TAKE(t->k, N * d); TAKE(t->v, N * d); TAKE(t->q_rn, N * H); TAKE(t->k_rn, N * H);
        TAKE(t->beta, N * H); TAKE(t->zf2, N * d);
        TAKE(t->gs, N * d); TAKE(t->g, N * d); TAKE(t->o, N * d); TAKE(t->on, N * d); TAKE(t->on_rstd, N * H);
        TAKE(t->gt, N * d); TAKE(t->og, N * d); TAKE(t->a, N * d);
        TAKE(t->kda_ws, kda_ws);
        TAKE(t->nn, N * d); TAKE(t->nn_rstd, N); TAKE(t->mgate, N); TAKE(t->e, N * d);
        TAKE(t->gout, N * d); TAKE(t->moe_ws, moe_ws);
        TAKE(t->body, N * d); TAKE(t->h, N * d); TAKE(t->y, N * d); TAKE(t->ybar, N * d);
        TAKE(t->yn, N * d); TAKE(t->yn_rstd, N); TAKE(t->probs, N * V); TAKE(t->losses, N);
    }
    TAKE(a->dh, N * d); TAKE(a->dh_prev, N * d); TAKE(a->dn, N * d); TAKE(a->dbody, N * d);
    TAKE(a->dtmp, N * d); TAKE(a->dtmp2, N * d); TAKE(a->dybar, N * d); TAKE(a->dlogits, N * V);
    TAKE(a->dq, N * d); TAKE(a->dk, N * d); TAKE(a->dv, N * d);
    TAKE(a->dbeta, N * H); TAKE(a->dg, N * d); TAKE(a->do_, N * d); TAKE(a->dog, N * d); TAKE(a->dgt, N * d);
    TAKE(a->dzf1, N * dh); TAKE(a->dzf2, N * d); TAKE(a->dgt1, N * dh);
    TAKE(a->dkey, N * d); TAKE(a->dval, N * d); TAKE(a->dkn, N * d); TAKE(a->dm, N * OD);
    TAKE(a->dz, N * E); TAKE(a->dctrl, N * 3); TAKE(a->dproj, N * P);
#undef TAKE_AS
#undef TAKE
    return used;
}

int model_shape_check(const Backend *be, const Config *cfg, int64_t B, int64_t T, dm_err *err) {
    if (!be || !be->shape_check) return 0;
    BackendShape s = {B, T, cfg->d, cfg->H, cfg->E, cfg->k, cfg->r, cfg->f, cfg->n_orders};
    char why[512];
    if (be->shape_check(&s, why, sizeof why) == 0) return 0;
    return dm_fail(err, "%s", why);
}

int model_reserve_try(Model *m, int B, int T, dm_err *err) {
    // kda_chunk can change on a live model (:set), and the KDA workspace's size depends on it
    // (a smaller chunk needs more: the CPU's chunked KDA once wrote past it and crashed)
    if (m->acts_B == B && m->acts_T == T && m->acts_chunk == m->cfg.kda_chunk && m->acts.buf) return 0;
    // a shape the backend cannot index is refused before the arena it has goes
    if (model_shape_check(m->be, &m->cfg, B, T, err)) return 1;
    acts_free(m);
    Acts *a = &m->acts;
    a->B = B; a->T = T;
    a->it = callocCheck(sizeof(IterActs) * m->cfg.L);
    a->nbuf = carve(m, NULL);
    a->buf = m->be->alloc(sizeof(real) * a->nbuf);
    if (!a->buf) {
        size_t n = a->nbuf;
        double bytes = (double)n * sizeof(real);
        acts_free(m);  // the parameters and the optimizer are untouched: the next call retries
        // (which device: :check parity holds a model on each; MB below a GB, not "0.0 GB")
        return dm_fail(err, "cannot allocate the activations for batch=%d seq=%d on %s (%zu reals, %.1f %s): lower batch or seq",
                       B, T, m->be->name, n, bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6, bytes >= 1e9 ? "GB" : "MB");
    }
    carve(m, a->buf);
    if (model_ram_reserve(m, B * T)) {
        acts_free(m);
        return dm_fail(err, "cannot allocate the Engram row staging for %d tokens: lower batch or seq", B * T);
    }
    m->acts_B = B; m->acts_T = T; m->acts_chunk = m->cfg.kda_chunk;
    return 0;
}

void model_reserve(Model *m, int B, int T) {
    dm_err e = {0};
    if (model_reserve_try(m, B, T, &e)) {
        fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, e.msg);
        exit(1);
    }
}

void model_param_counts(const Model *m, size_t *compute, size_t *table) {
    *table = m->t[P_TABLES].numel;
    *compute = m->n_params - *table;
}

double model_retract(Model *m) {
    double worst = 0;
    int maxr = 0, maxrows = 0;
    for (int i = 0; i < P_COUNT; i++)
        if (m->t[i].orthonormal) {
            if (m->t[i].cols > maxr) maxr = m->t[i].cols;
            if (m->t[i].rows > maxrows) maxrows = m->t[i].rows;
        }
    real *scratch = m->be->alloc(sizeof(real) * m->be->retract_scratch_size(maxrows, maxr));  // backend workspace
    if (!scratch) { fprintf(stderr, "%s:%d: cannot allocate the retraction workspace\n", __FILE__, __LINE__); exit(1); }
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m->t[i];
        if (!t->orthonormal) continue;
        for (int e = 0; e < t->n_mats; e++) {
            real *X = m->params + t->offset + (size_t)e * t->rows * t->cols;
            m->be->retract(X, t->rows, t->cols, m->cfg.retract_iters, scratch);
            double err = m->be->orth_error(X, t->rows, t->cols);
            if (err > worst) worst = err;
        }
    }
    m->be->free(scratch);
    return worst;
}

int param_arm(int i) {
    switch (i) {
    case P_WQ: case P_WK: case P_WV: case P_WB: case P_WF1: case P_WG1: case P_WF2: case P_A:
    case P_DT_BIAS: case P_W_ON: case P_WG2: case P_BG: case P_WO:
        return ARM_KDA;
    case P_MK: case P_MV: case P_MEM_GN: case P_MEM_GK: case P_TABLES:
        return ARM_ENGRAM;
    case P_U1: case P_S1: case P_V1: case P_U2: case P_S2: case P_V2: case P_ROUTER:  // z feeds only the MoE
        return ARM_MOE;
    case P_ALPHA:
        return ARM_REZERO;
    default:
        return -1;
    }
}

static double orth_worst(const Model *m) {
    double worst = 0;
    for (int i = 0; i < P_COUNT; i++) {
        const ParamTensor *t = &m->t[i];
        if (!t->orthonormal) continue;
        for (int e = 0; e < t->n_mats; e++) {
            double err = m->be->orth_error(m->params + t->offset + (size_t)e * t->rows * t->cols, t->rows, t->cols);
            if (isnan(err) || isnan(worst)) worst = NAN;  // non-finite factors: said, never skipped
            else if (err > worst) worst = err;
        }
    }
    return worst;
}
// -1 when the device cannot hold the measurement's workspace (kernels/guard.h): a diagnostic
// that does not fit is "n/a", not the end of the session
double model_orth_error(const Model *m) {
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {
        if (m->be->sync) m->be->sync();
        return -1;
    }
    double worst = orth_worst(m);
    dm_guard_close(&g);
    return worst;
}
