// optim.c — the optimizers of SPEC §4 on the CPU, over the model's one contiguous parameter
// buffer: Muon (Nesterov momentum, Newton–Schulz 5, Moonlight scale or muon_colrow), AdamW,
// lazy Adam on the Engram tables; the lr schedule; the global-norm clip; the NaN firewall; the
// retraction cadence.
//
// Layout (llm.c style): every moment is ONE buffer of n_params reals, parallel to m->params,
// so tensor i's moments live at the same offset t[i].offset. Buffers are calloc'd: on Linux a
// large calloc is lazily zero-mapped, so the ranges a group never touches (e.g. `mom` over the
// tables, `m`/`v` over Muon matrices) cost no physical memory.
//
// Determinism: every reduction runs in a fixed order that does not depend on the thread count.
// The global norm is summed over fixed-size chunks of each tensor (each chunk in order, then
// the chunk sums in order, then the tensors in table order); element-wise updates are parallel
// only where each element is written by exactly one iteration. No float atomics anywhere.
#include "optim.h"
#include <math.h>
#include <string.h>
#include "../kernels/cpu/blas.h"
#include "../kernels/cpu/ops.h"

#define GNORM_CHUNK 65536   // reals per norm chunk: fixed, so the sum order never varies
#define MUON_EPS 1e-7       // added to ||G||_F (and to the col/row RMS under muon_colrow)

// Newton–Schulz workspace for one [rows, cols] matrix, s = min(rows, cols):
// A [s, s] Gram, Bm [s, s] polynomial, Y [rows, cols] the next iterate.
static size_t ns_scratch_size(int rows, int cols) {
    size_t s = (size_t)(rows < cols ? rows : cols);
    return 2 * s * s + (size_t)rows * cols;
}

#ifdef DM_DOUBLE
#define SQRT_R sqrt
#else
#define SQRT_R sqrtf
#endif

// ----------------------------------------------------------------------------------------
// create / free

int optim_create(Optim *o, const Model *m, dm_err *err) {
    memset(o, 0, sizeof *o);
    size_t n = m->n_params;
    o->m = calloc(n ? n : 1, sizeof(real));
    o->v = calloc(n ? n : 1, sizeof(real));
    o->mom = calloc(n ? n : 1, sizeof(real));
    // Muon scratch: the largest matrix's update [rows, cols] + its NS workspace
    size_t need = 0;
    for (int i = 0; i < P_COUNT; i++) {
        const ParamTensor *t = &m->t[i];
        if (t->n_mats <= 0 || t->rows <= 0 || t->cols <= 0) continue;
        size_t s = (size_t)t->rows * t->cols + ns_scratch_size(t->rows, t->cols);
        if (s > need) need = s;
    }
    o->n_scratch = need;
    o->scratch = malloc(sizeof(real) * (need ? need : 1));
    size_t nrows = (size_t)m->cfg.n_orders * (size_t)m->cfg.engram_rows;
    o->row_touched = calloc(nrows ? nrows : 1, 1);
    o->row_steps = calloc(nrows ? nrows : 1, sizeof(int64_t));
    if (!o->m || !o->v || !o->mom || !o->scratch || !o->row_touched || !o->row_steps) {
        optim_free(o);
        return dm_fail(err, "cannot allocate optimizer state (3 x %zu reals): try a smaller preset", n);
    }
    return 0;
}

void optim_free(Optim *o) {
    free(o->m); free(o->v); free(o->mom); free(o->scratch);
    free(o->row_touched); free(o->row_steps);
    memset(o, 0, sizeof *o);
}

// ----------------------------------------------------------------------------------------
// schedule
//
// mult(s), s the 0-based training step, W = warmup, S = cfg->steps (the horizon), f = lr_min_frac:
//   s < W                         : (s + 1) / W                     (linear warmup, reaches 1 at s = W-1)
//   lr_cosine == 0 or S == 0      : 1                               (constant after warmup)
//   otherwise                     : f + (1 - f) * (1 + cos(pi * p)) / 2,
//                                   p = clamp((s - W) / (S - W), 0, 1)  (p = 1 when S <= W)
// so mult = 1 at s = W, mult = f at s = S, and it stays at f past the horizon.
double lr_schedule_mult(const Config *c, int64_t s) {
    if (s < 0) s = 0;
    if (c->warmup > 0 && s < c->warmup) return (double)(s + 1) / c->warmup;
    if (!c->lr_cosine || c->steps <= 0) return 1.0;
    double span = (double)(c->steps - c->warmup);
    double p = span > 0 ? (double)(s - c->warmup) / span : 1.0;
    if (p < 0) p = 0;
    if (p > 1) p = 1;
    return c->lr_min_frac + (1.0 - c->lr_min_frac) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}

// ----------------------------------------------------------------------------------------
// Muon

// G [rows, cols] in place. X = G / (||G||_F + 1e-7), then 5 times
//   X <- a X + (b A + c A^2) X,  A = X X^T        (rows <= cols: A is [rows, rows])
// When rows > cols, Keller Jordan iterates on X^T so the Gram is the small side; transposing
// that iteration back gives X <- a X + X (b A + c A^2) with A = X^T X [cols, cols] (A and the
// polynomial are symmetric), which is what we do, without materialising the transpose.
// scratch: ns_scratch_size(rows, cols) = 2 min(rows,cols)^2 + rows*cols reals.
// The Gram matrices are symmetric: A = X X^T (or X^T X) and A A = A A^T are formed with syrk
// (the upper triangle only, half the FLOPs of a gemm), then mirrored to the lower triangle.
void cblas_ssyrk(int order, int uplo, int trans, int n, int k, float alpha, const float *a, int lda,
                 float beta, float *c, int ldc);
void cblas_dsyrk(int order, int uplo, int trans, int n, int k, double alpha, const double *a,
                 int lda, double beta, double *c, int ldc);
enum { DmCblasUpper = 121 };
// C[n,n] (upper) = alpha op(A) op(A)^T + beta C, op(A) = A [n,k] (trans 0) or A^T (A [k,n], trans 1)
static void syrk_rm(int trans, int n, int k, real alpha, const real *A, int lda, real beta, real *C, int ldc) {
#ifdef DM_DOUBLE
    cblas_dsyrk(DmCblasRowMajor, DmCblasUpper, trans ? DmCblasTrans : DmCblasNoTrans, n, k, alpha, A, lda, beta, C, ldc);
#else
    dm_ssyrk_upper(trans, n, k, alpha, A, lda, beta, C, ldc);  // kernels/cpu/sgemm.c
#endif
}
static void mirror_upper(real *C, int n) {
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++) C[(size_t)i * n + j] = C[(size_t)j * n + i];
}

void muon_orthogonalize(real *G, int rows, int cols, real *scratch) {
    const real a = (real)3.4445, b = (real)-4.7750, c = (real)2.0315;
    size_t n = (size_t)rows * cols;
    double ss = dm_sumsq_d(G, n);
    real inv = (real)(1.0 / (sqrt(ss) + MUON_EPS));
    for (size_t i = 0; i < n; i++) G[i] *= inv;
    int tall = rows > cols;
    int s = tall ? cols : rows;
    real *A = scratch, *Bm = scratch + (size_t)s * s, *Y = Bm + (size_t)s * s;
    real *X = G;
    for (int it = 0; it < 5; it++) {
        // A = X^T X [cols, cols] (tall) or X X^T [rows, rows]
        syrk_rm(tall, s, tall ? rows : cols, 1, X, cols, 0, A, s);
        mirror_upper(A, s);
        // Bm = b A + c A A  (A symmetric: A A = A A^T)
        for (size_t i = 0; i < (size_t)s * s; i++) Bm[i] = b * A[i];
        syrk_rm(0, s, s, c, A, s, 1, Bm, s);
        mirror_upper(Bm, s);
        // Y = a X + (Bm X | X Bm)
        for (size_t i = 0; i < n; i++) Y[i] = a * X[i];
        if (tall) gemm_rm(0, 0, rows, cols, cols, 1, X, cols, Bm, s, 1, Y, cols);
        else      gemm_rm(0, 0, rows, cols, rows, 1, Bm, s, X, cols, 1, Y, cols);
        memcpy(X, Y, sizeof(real) * n);
    }
}

// muon_colrow ("Muon+"): each column, then each row, of U [rows, cols] to unit RMS (+1e-7 so an
// all-zero update stays zero instead of becoming NaN).
static void colrow_normalize(real *U, int rows, int cols) {
    for (int j = 0; j < cols; j++) {
        double ss = 0;
        for (int i = 0; i < rows; i++) ss += (double)U[(size_t)i * cols + j] * U[(size_t)i * cols + j];
        real inv = (real)(1.0 / (sqrt(ss / rows) + MUON_EPS));
        for (int i = 0; i < rows; i++) U[(size_t)i * cols + j] *= inv;
    }
    for (int i = 0; i < rows; i++) {
        real *r = U + (size_t)i * cols;
        double ss = 0;
        for (int j = 0; j < cols; j++) ss += (double)r[j] * r[j];
        real inv = (real)(1.0 / (sqrt(ss / cols) + MUON_EPS));
        for (int j = 0; j < cols; j++) r[j] *= inv;
    }
}

// One Muon step on tensor t: per matrix
//   buf = mu buf + g;  u = g + mu buf  (Nesterov);  u = NS5(u / (||u||_F + 1e-7));
//   u *= 0.2 sqrt(max(rows, cols))   (or colrow-normalise and u *= 0.2);
//   p = p (1 - lr wd) - lr u          (decoupled decay)
static void muon_tensor(Optim *o, Model *m, const ParamTensor *t, double lr, double wd) {
    const Config *c = &m->cfg;
    int rows = t->rows, cols = t->cols;
    size_t n = (size_t)rows * cols;
    real mu = (real)c->muon_momentum;
    real *U = o->scratch, *ws = o->scratch + n;
    double scale = c->muon_colrow ? 0.2 : 0.2 * sqrt((double)(rows > cols ? rows : cols));
    real decay = (real)(1.0 - lr * wd), step = (real)(lr * scale);
    for (int e = 0; e < t->n_mats; e++) {
        size_t off = t->offset + (size_t)e * n;
        real *p = m->params + off, *g = m->grads + off, *buf = o->mom + off;
        for (size_t i = 0; i < n; i++) {
            buf[i] = mu * buf[i] + g[i];
            U[i] = g[i] + mu * buf[i];
        }
        muon_orthogonalize(U, rows, cols, ws);
        if (c->muon_colrow) colrow_normalize(U, rows, cols);
        for (size_t i = 0; i < n; i++) p[i] = p[i] * decay - step * U[i];
    }
}

// ----------------------------------------------------------------------------------------
// Adam

// AdamW over [off, off+n) with bias-correction step count `t` (1-based):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd p)
static void adamw_range(Optim *o, Model *m, size_t off, size_t n, double lr, double wd, int64_t t) {
    const Config *c = &m->cfg;
    real b1 = (real)c->beta1, b2 = (real)c->beta2, eps = (real)c->eps;
    real bc1 = (real)(1.0 - pow(c->beta1, (double)t)), bc2 = (real)(1.0 - pow(c->beta2, (double)t));
    real lr_ = (real)lr, wd_ = (real)wd;
    real *p = m->params + off, *g = m->grads + off, *mm = o->m + off, *vv = o->v + off;
    #pragma omp parallel for if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++) {
        real gi = g[i];
        real mi = b1 * mm[i] + (1 - b1) * gi;
        real vi = b2 * vv[i] + (1 - b2) * gi * gi;
        mm[i] = mi; vv[i] = vi;
        real mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr_ * (mhat / (SQRT_R(vhat) + eps) + wd_ * p[i]);
    }
}

// Lazy Adam (no decay) on the Engram tables [O, R, D]: only the rows the last forward read
// (m->acts.rows [O, N], row rows[o*N + t] of table o) are updated, and only their moments move.
// Bias correction is per row: row_steps[o*R + r] counts the updates that row has received, so a
// row read for the first time at global step 1000 is corrected as a first step (1-b^1), exactly
// as if it had its own Adam (the standard "lazy Adam" convention; with a global count the first
// update of a rarely-read row would be scaled down by 1-b1 ~ 0.1 relative to 1-b1^t).
// A row the batch reads several times is updated once (its gradient already sums the reads).
static void adam_tables(Optim *o, Model *m, double lr) {
    const Config *c = &m->cfg;
    const ParamTensor *t = &m->t[P_TABLES];
    const Acts *a = &m->acts;
    if (!a->rows || a->B <= 0 || a->T <= 0 || !m->arms.on[ARM_ENGRAM]) return;  // nothing read
    int O = c->n_orders, D = c->engram_dim;
    int64_t R = c->engram_rows;
    size_t N = (size_t)a->B * a->T;
    real b1 = (real)c->beta1, b2 = (real)c->beta2, eps = (real)c->eps, lr_ = (real)lr;
    // Each distinct row is updated once, the first time the batch names it; rows are
    // independent, so the visiting order cannot change any result.
    for (int q = 0; q < O; q++)
        for (size_t i = 0; i < N; i++) {
            int32_t r = a->rows[(size_t)q * N + i];
            if (r < 0 || r >= R) continue;
            size_t k = (size_t)q * R + r;
            if (o->row_touched[k]) continue;
            o->row_touched[k] = 1;
            int64_t cnt = ++o->row_steps[k];
            real bc1 = (real)(1.0 - pow(c->beta1, (double)cnt)), bc2 = (real)(1.0 - pow(c->beta2, (double)cnt));
            size_t off = t->offset + k * D;
            real *p = m->params + off, *g = m->grads + off, *mm = o->m + off, *vv = o->v + off;
            for (int j = 0; j < D; j++) {
                real gi = g[j];
                mm[j] = b1 * mm[j] + (1 - b1) * gi;
                vv[j] = b2 * vv[j] + (1 - b2) * gi * gi;
                p[j] -= lr_ * ((mm[j] / bc1) / (SQRT_R(vv[j] / bc2) + eps));
            }
        }
    // clear the marks (O*N writes, not O*R)
    for (int q = 0; q < O; q++)
        for (size_t i = 0; i < N; i++) {
            int32_t r = a->rows[(size_t)q * N + i];
            if (r >= 0 && r < R) o->row_touched[(size_t)q * R + r] = 0;
        }
}

// ----------------------------------------------------------------------------------------
// global norm + finiteness, one pass over every tensor (tables included)

// Fills ss[i] (sum of squares of tensor i's gradient, double) and returns the index of the
// first tensor (table order) holding a non-finite value, or -1. Chunks of GNORM_CHUNK reals
// are summed independently (in parallel), then combined in chunk order: the result does not
// depend on the number of threads.
static int grad_norm_check(const Model *m, double *ss) {
    int first_bad = -1;
    for (int i = 0; i < P_COUNT; i++) {
        const ParamTensor *t = &m->t[i];
        const real *g = m->grads + t->offset;
        size_t nchunks = (t->numel + GNORM_CHUNK - 1) / GNORM_CHUNK;
        double part_small[16];
        int bad_small[16];
        double *part = nchunks <= 16 ? part_small : malloc(sizeof(double) * nchunks);
        int *bad = nchunks <= 16 ? bad_small : malloc(sizeof(int) * nchunks);
        #pragma omp parallel for if (nchunks > 1) schedule(static)
        for (size_t ch = 0; ch < nchunks; ch++) {
            size_t lo = ch * GNORM_CHUNK, hi = lo + GNORM_CHUNK < t->numel ? lo + GNORM_CHUNK : t->numel;
            // the sum is finite when every x is (then no element check is needed); inf and NaN
            // propagate into it (in the double build a huge finite x can overflow it too, hence
            // the exact per-element check on that rare path)
            double s = dm_sumsq_d(g + lo, hi - lo);
            int b = 0;
            if (!isfinite(s))
                for (size_t j = lo; j < hi; j++) b |= !isfinite((double)g[j]);
            part[ch] = s; bad[ch] = b;
        }
        double s = 0;
        int b = 0;
        for (size_t ch = 0; ch < nchunks; ch++) { s += part[ch]; b |= bad[ch]; }
        if (part != part_small) free(part);
        if (bad != bad_small) free(bad);
        ss[i] = s;
        if (b && first_bad < 0) first_bad = i;
    }
    return first_bad;
}

// ----------------------------------------------------------------------------------------
// the step

int optim_step(Optim *o, Model *m, int64_t step, double loss, StepInfo *info, dm_err *err) {
    const Config *c = &m->cfg;
    StepInfo local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    double mult = lr_schedule_mult(c, step);
    info->lr = c->lr * mult;
    info->lr_muon = c->lr_muon * mult;
    info->orth_err = -1;

    // (1) NaN firewall + (2) global norm, one pass
    double ss[P_COUNT];
    int bad = grad_norm_check(m, ss);
    double total = 0;
    for (int i = 0; i < P_COUNT; i++) total += ss[i];
    info->gnorm = sqrt(total);
    if (!isfinite(loss) || bad >= 0) {
        info->skipped = 1;
        snprintf(info->first_bad, sizeof info->first_bad, "%s", !isfinite(loss) ? "loss" : m->t[bad].name);
        o->consecutive_skips++;
        o->total_skips++;
        if (o->consecutive_skips >= c->nan_limit)
            return dm_fail(err, "step %lld: nan_limit (%d) consecutive non-finite steps; first non-finite tensor: %s (hint: lower lr or raise clip)",
                           (long long)step, c->nan_limit, info->first_bad);
        return 0;
    }
    if (c->clip > 0 && info->gnorm > c->clip) {
        real s = (real)(c->clip / info->gnorm);
        real *g = m->grads;
        size_t n = m->n_params;
        #pragma omp parallel for if (n > 65536) schedule(static)
        for (size_t i = 0; i < n; i++) g[i] *= s;
    }

    // (3) updates per group. Every non-table tensor steps, even with an all-zero gradient (its
    // Adam moments decay, Muon's momentum keeps moving it): one rule, no per-arm special cases.
    int64_t t_adam = o->t + 1;   // bias-correction count: applied steps, skipped ones excluded
    for (int i = 0; i < P_COUNT; i++) {
        const ParamTensor *t = &m->t[i];
        if (t->numel == 0) continue;
        switch (t->group) {
        case GROUP_TABLE:
            adam_tables(o, m, info->lr);
            break;
        case GROUP_MUON:
            if (!c->opt_adamw && t->n_mats > 0) muon_tensor(o, m, t, info->lr_muon, c->wd);
            else adamw_range(o, m, t->offset, t->numel, info->lr, c->wd, t_adam);
            break;
        case GROUP_ADAMW:
            adamw_range(o, m, t->offset, t->numel, info->lr, c->wd, t_adam);
            break;
        case GROUP_ADAMW_1D:
            adamw_range(o, m, t->offset, t->numel, info->lr, 0.0, t_adam);
            break;
        }
    }

    // (4) retraction cadence. The orthogonality error is only measured when we retract (it
    // costs a Gram per factor); otherwise it is reported as -1 ("not measured").
    if (m->arms.on[ARM_RETRACT] && c->retract_every > 0 && (o->t + 1) % c->retract_every == 0) {
        info->orth_err = model_retract(m);
        info->retracted = 1;
    }

    // (5)
    o->t++;
    o->consecutive_skips = 0;
    return 0;
}
