// optim_ops.c — the optimizer's backend ops on the CPU (optim_ops.h): per-tensor gradient
// norms, the step decision (NaN firewall, clip, cadence), AdamW, lazy Adam on table rows, Muon
// (Newton–Schulz with ssyrk Gram products), the gated retraction.
//
// Determinism: every reduction runs in a fixed order that does not depend on the thread count
// (the norm over fixed-size chunks, each in order, then the chunk sums in order); element-wise
// updates are parallel only where each element is written by exactly one iteration. No float
// atomics anywhere.
#include "optim_ops.h"
#include "opt_decide.h"
#include "step_record.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "blas.h"
#include "ops.h"
#include "retract.h"

#define MUON_EPS 1e-7  // added to ||G||_F (and to the col/row RMS under muon_colrow)

#ifdef DM_DOUBLE
#define SQRT_R sqrt
#else
#define SQRT_R sqrtf
#endif

// ----------------------------------------------------------------------------------------
// norm, decision, clip

// The loops below run on OpenMP's team only past a size, and serially otherwise through a plain
// `if`: `#pragma omp parallel for if (small)` still builds a one-thread team and wakes it, about
// 1.4 us a region, 57 regions a step: 9-10 % of a tiny config's step (QA, session 34). Both paths
// compute each element (or chunk) alike: the same bits.

// one OPT_SUMSQ_CHUNK of g: its sum of squares and whether a value in it is non-finite
static inline void sumsq_chunk(const real *g, size_t numel, size_t ch, double *part, int *badc) {
    size_t lo = ch * OPT_SUMSQ_CHUNK, hi = lo + OPT_SUMSQ_CHUNK < numel ? lo + OPT_SUMSQ_CHUNK : numel;
    // the sum is finite when every x is (then no element check is needed); inf and NaN
    // propagate into it (in the double build a huge finite x can overflow it too, hence
    // the exact per-element check on that rare path)
    double s = dm_sumsq_d(g + lo, hi - lo);
    int b = 0;
    if (!isfinite(s))
        for (size_t j = lo; j < hi; j++) b |= !isfinite((double)g[j]);
    part[ch] = s; badc[ch] = b;
}

void opt_sumsq(double *ss, int32_t *bad, const real *x, const OptSeg *segs, int nseg) {
    for (int i = 0; i < nseg; i++) {
        const real *g = x + segs[i].off;
        size_t numel = segs[i].n;
        size_t nchunks = (numel + OPT_SUMSQ_CHUNK - 1) / OPT_SUMSQ_CHUNK;
        double part_small[16];
        int bad_small[16];
        double *part = nchunks <= 16 ? part_small : malloc(sizeof(double) * nchunks);
        int *badc = nchunks <= 16 ? bad_small : malloc(sizeof(int) * nchunks);
        if (nchunks > 1) {
            #pragma omp parallel for schedule(static)
            for (size_t ch = 0; ch < nchunks; ch++) sumsq_chunk(g, numel, ch, part, badc);
        } else if (nchunks == 1) {
            sumsq_chunk(g, numel, 0, part, badc);
        }
        double s = 0;
        int b = 0;
        for (size_t ch = 0; ch < nchunks; ch++) { s += part[ch]; b |= badc[ch]; }
        if (part != part_small) free(part);
        if (badc != bad_small) free(badc);
        ss[i] = s;
        bad[i] = b;
    }
}

// The NaN firewall and the global norm: total = sum of ss in segment order; skip when the loss
// or any segment is non-finite (counted, t unchanged; the run halts when the skips in a row
// reach nan_limit); otherwise t advances, the clip factor is clip / gnorm when gnorm > clip > 0,
// and the step retracts when t % retract_every == 0 (retract_every 0: never). A halted status
// makes the step a no-op that changes nothing, counters included: the host may have enqueued
// steps past the one that stopped the run before it reports, and those must not count.
void opt_decide(OptStatus *st, const double *ss, const int32_t *bad, int nseg, const double *loss_p,
                const StepHyper *hp) {
    opt_decide_status(st, ss, bad, nseg, loss_p, hp);  // opt_decide.h: shared with the CUDA kernel
}

void opt_clip(real *g, size_t n, const OptStatus *st) {
    if (!st || st->skip || !st->clipped) return;
    real s = (real)st->scale;
    if (n > 65536) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) g[i] *= s;
    } else {
        for (size_t i = 0; i < n; i++) g[i] *= s;
    }
}

// ----------------------------------------------------------------------------------------
// Adam

typedef struct { real b1, b2, eps, bc1, bc2, lr, wd; } AdamK;
static inline void adamw_one(real *p, const real *g, real *m, real *v, size_t i, const AdamK *k) {
    real gi = g[i];
    real mi = k->b1 * m[i] + (1 - k->b1) * gi;
    real vi = k->b2 * v[i] + (1 - k->b2) * gi * gi;
    m[i] = mi; v[i] = vi;
    real mhat = mi / k->bc1, vhat = vi / k->bc2;
    p[i] -= k->lr * (mhat / (SQRT_R(vhat) + k->eps) + k->wd * p[i]);
}

void opt_adamw(real *p, const real *g, real *m, real *v, size_t n, int decay, const StepHyper *hp,
               const OptStatus *st) {
    if (st->skip) return;
    double t = (double)st->t;
    real b1 = (real)hp->beta1, b2 = (real)hp->beta2, eps = (real)hp->eps;
    // the bias corrections of the betas the moments use (rounded to real): in double they
    // disagreed by up to 1.3 % at beta 0.999999 in the float build (QA, session 34)
    real bc1 = (real)(1.0 - pow((double)b1, t)), bc2 = (real)(1.0 - pow((double)b2, t));
    const AdamK k = {b1, b2, eps, bc1, bc2, (real)hp->lr, (real)(decay ? hp->wd : 0.0)};
    if (n > 65536) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) adamw_one(p, g, m, v, i, &k);
    } else {
        for (size_t i = 0; i < n; i++) adamw_one(p, g, m, v, i, &k);
    }
}

// ws: one mark byte per table row [O * R] (zero between calls)
size_t opt_adam_rows_ws_size(int O, int N, int64_t R) { return (size_t)O * (size_t)R; }

// Tables [O, R, D] at p/g/m/v; rows [O, N]: row rows[q*N + i] of table q was read. Each
// distinct row is updated once, the first time the batch names it (its gradient already sums
// the reads); rows are independent, so the visiting order cannot change any result. Rows out of
// [0, R) are ignored.
void opt_adam_rows(real *p, const real *g, real *m, real *v, int64_t *row_steps, const int32_t *rows,
                   int O, int N, int64_t R, int D, void *ws, const StepHyper *hp, const OptStatus *st) {
    if (st->skip) return;
    uint8_t *touched = ws;
    real b1 = (real)hp->beta1, b2 = (real)hp->beta2, eps = (real)hp->eps, lr_ = (real)hp->lr;
    enum { AHEAD = 8 };  // rows are scattered over tables of MBs: fetch a few reads ahead
    for (int q = 0; q < O; q++)
        for (int i = 0; i < N; i++) {
            if (i + AHEAD < N) {
                int32_t rn = rows[(size_t)q * N + i + AHEAD];
                if (rn >= 0 && rn < R) {
                    size_t on = ((size_t)q * R + rn) * D;
                    __builtin_prefetch(p + on, 1);
                    __builtin_prefetch(g + on, 0);
                    __builtin_prefetch(m + on, 1);
                    __builtin_prefetch(v + on, 1);
                }
            }
            int32_t r = rows[(size_t)q * N + i];
            if (r < 0 || r >= R) continue;
            size_t k = (size_t)q * R + r;
            if (touched[k]) continue;
            touched[k] = 1;
            int64_t cnt = ++row_steps[k];
            real bc1 = (real)(1.0 - pow((double)b1, (double)cnt)), bc2 = (real)(1.0 - pow((double)b2, (double)cnt));
            size_t off = k * D;
            // distinct buffers (restrict: the D loop vectorises; same operations, same order)
            real *restrict pp = p + off, *restrict mm = m + off, *restrict vv = v + off;
            const real *restrict gg = g + off;
            for (int j = 0; j < D; j++) {
                real gi = gg[j];
                real mj = b1 * mm[j] + (1 - b1) * gi;
                real vj = b2 * vv[j] + (1 - b2) * gi * gi;
                mm[j] = mj;
                vv[j] = vj;
                pp[j] -= lr_ * ((mj / bc1) / (SQRT_R(vj / bc2) + eps));
            }
        }
    // clear the marks (O*N writes, not O*R)
    for (int q = 0; q < O; q++)
        for (int i = 0; i < N; i++) {
            int32_t r = rows[(size_t)q * N + i];
            if (r >= 0 && r < R) touched[(size_t)q * R + r] = 0;
        }
}

// ----------------------------------------------------------------------------------------
// host-RAM tables: the table segment's sum of squares and clip from its read rows only

size_t opt_rows_chunk_ws_size(int O, int N) { return 2 * (size_t)O * (size_t)N; }

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void opt_sumsq_rows(double *ss, int32_t *bad, const real *g, const int32_t *rows, int O, int N, int64_t R,
                    int D, int64_t *ws) {
    // the chunks a read row touches (a row of D <= OPT_SUMSQ_CHUNK reals spans at most two)
    size_t nc = 0;
    for (int q = 0; q < O; q++)
        for (int i = 0; i < N; i++) {
            int32_t r = rows[(size_t)q * N + i];
            if (r < 0 || r >= R) continue;
            size_t lo = ((size_t)q * R + r) * D, hi = lo + D - 1;
            ws[nc++] = (int64_t)(lo / OPT_SUMSQ_CHUNK);
            if (hi / OPT_SUMSQ_CHUNK != lo / OPT_SUMSQ_CHUNK) ws[nc++] = (int64_t)(hi / OPT_SUMSQ_CHUNK);
        }
    qsort(ws, nc, sizeof *ws, cmp_i64);
    size_t numel = (size_t)O * R * D;
    double s = 0;
    int b = 0;
    for (size_t j = 0; j < nc; j++) {
        if (j && ws[j] == ws[j - 1]) continue;
        size_t lo = (size_t)ws[j] * OPT_SUMSQ_CHUNK, hi = lo + OPT_SUMSQ_CHUNK < numel ? lo + OPT_SUMSQ_CHUNK : numel;
        double c = dm_sumsq_d(g + lo, hi - lo);  // opt_sumsq's chunk, the same way
        if (!isfinite(c))
            for (size_t x = lo; x < hi; x++) b |= !isfinite((double)g[x]);
        s += c;
    }
    *ss = s;
    *bad = b;
}

void opt_clip_rows(real *g, const int32_t *rows, int O, int N, int64_t R, int D, void *ws, const OptStatus *st) {
    if (!st || st->skip || !st->clipped) return;
    uint8_t *touched = ws;
    real sc = (real)st->scale;
    for (int pass = 0; pass < 2; pass++)  // scale each distinct row once, then clear the marks
        for (int q = 0; q < O; q++)
            for (int i = 0; i < N; i++) {
                int32_t r = rows[(size_t)q * N + i];
                if (r < 0 || r >= R) continue;
                size_t k = (size_t)q * R + r;
                if (pass) { touched[k] = 0; continue; }
                if (touched[k]) continue;
                touched[k] = 1;
                real *gr = g + k * D;
                for (int j = 0; j < D; j++) gr[j] *= sc;
            }
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
    int blas = dm_blas_enter();
    cblas_dsyrk(DmCblasRowMajor, DmCblasUpper, trans ? DmCblasTrans : DmCblasNoTrans, n, k, alpha, A, lda, beta, C, ldc);
    dm_blas_leave(blas);
#else
    dm_ssyrk_upper(trans, n, k, alpha, A, lda, beta, C, ldc);  // sgemm.c: the computed tiles only
#endif
}
// C [n, n]: lower triangle <- upper, in 16 x 16 tiles so the transposed reads stay in cache lines
static void mirror_upper(real *C, int n) {
    enum { TB = 16 };
    for (int i0 = 0; i0 < n; i0 += TB)
        for (int j0 = 0; j0 <= i0; j0 += TB) {
            int i1 = i0 + TB < n ? i0 + TB : n, j1 = j0 + TB < n ? j0 + TB : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1 && j < i; j++) C[(size_t)i * n + j] = C[(size_t)j * n + i];
        }
}

static size_t ns_scratch_size(int rows, int cols) {
    size_t s = (size_t)(rows < cols ? rows : cols);
    return 2 * s * s + (size_t)rows * cols;
}

void opt_muon_orthogonalize(real *G, int rows, int cols, real *scratch) {
    const real a = (real)3.4445, b = (real)-4.7750, c = (real)2.0315;
    size_t n = (size_t)rows * cols;
    double ss = dm_sumsq_d(G, n);
    real inv = (real)(1.0 / (sqrt(ss) + MUON_EPS));
    for (size_t i = 0; i < n; i++) G[i] *= inv;
    int tall = rows > cols;
    int s = tall ? cols : rows;
    real *A = scratch, *Bm = scratch + (size_t)s * s;
    // the iterate ping-pongs between G and Y (no copy per iteration); an odd count ends in Y
    real *X = G, *Y = Bm + (size_t)s * s;
    // A parity check of a bf16 device (blas.h dm_emulate_bf16): the device runs these three
    // products with bf16 operands, so the reference does too — as full gemm_lp products (syrk
    // has no rounded form; the result is the same symmetric matrix). Never on in training.
#ifndef DM_DOUBLE
    const int lp = dm_emulate_bf16;
#else
    const int lp = 0;
#endif
    for (int it = 0; it < 5; it++) {
        // A = X^T X [cols, cols] (tall) or X X^T [rows, rows]
        if (lp) gemm_lp(tall, !tall, s, s, tall ? rows : cols, 1, X, cols, X, cols, 0, A, s);
        else { syrk_rm(tall, s, tall ? rows : cols, 1, X, cols, 0, A, s); mirror_upper(A, s); }
        // Bm = b A + c A A  (A symmetric: A A = A A^T)
        for (size_t i = 0; i < (size_t)s * s; i++) Bm[i] = b * A[i];
        if (lp) gemm_lp(0, 0, s, s, s, c, A, s, A, s, 1, Bm, s);
        else { syrk_rm(0, s, s, c, A, s, 1, Bm, s); mirror_upper(Bm, s); }
        // Y = a X + (Bm X | X Bm)
        for (size_t i = 0; i < n; i++) Y[i] = a * X[i];
        if (tall) gemm_lp(0, 0, rows, cols, cols, 1, X, cols, Bm, s, 1, Y, cols);
        else      gemm_lp(0, 0, rows, cols, rows, 1, Bm, s, X, cols, 1, Y, cols);
        real *tmp = X; X = Y; Y = tmp;
    }
    if (X != G) memcpy(G, X, sizeof(real) * n);
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

// scratch: U [rows, cols] + the Newton–Schulz workspace (the matrices of a tensor are done one
// after another in it: n_mats does not change the size here)
size_t opt_muon_scratch_size(int n_mats, int rows, int cols) {
    (void)n_mats;
    return (size_t)rows * cols + ns_scratch_size(rows, cols);
}

// n_mats matrices [rows, cols] one after the other at p / g / buf. lr = hp->lr_muon:
// step = lr * (0.2 sqrt(max(rows, cols)), or 0.2 under colrow), decay = 1 - lr wd, both rounded
// to real once (the same double expressions the engine evaluated on the host before).
void opt_muon(real *p, const real *g, real *buf, int n_mats, int rows, int cols, int colrow,
              real *scratch, const StepHyper *hp, const OptStatus *st) {
    if (st->skip) return;
    size_t n = (size_t)rows * cols;
    real *U = scratch, *ws = scratch + n;
    double lr = hp->lr_muon, scale = colrow ? 0.2 : 0.2 * sqrt((double)(rows > cols ? rows : cols));
    real mu = (real)hp->muon_momentum, decay = (real)(1.0 - lr * hp->wd), step = (real)(lr * scale);
    for (int e = 0; e < n_mats; e++) {
        real *pe = p + (size_t)e * n, *be = buf + (size_t)e * n;
        const real *ge = g + (size_t)e * n;
        for (size_t i = 0; i < n; i++) {
            be[i] = mu * be[i] + ge[i];
            U[i] = ge[i] + mu * be[i];
        }
        opt_muon_orthogonalize(U, rows, cols, ws);
        if (colrow) colrow_normalize(U, rows, cols);
        for (size_t i = 0; i < n; i++) pe[i] = pe[i] * decay - step * U[i];
    }
}

// ----------------------------------------------------------------------------------------
// retraction, gated by the status

// one factor's scratch: the factors of a tensor are retracted one after another in it
size_t opt_retract_scratch_size(int n_mats, int rows, int r) { (void)n_mats; return retract_scratch_size(rows, r); }

// When the status says this step retracts: retract each X_e [rows, r] of X [n_mats, rows, r] and
// fold its orthogonality error into st->orth_err (the largest over the step's matrices).
void opt_retract(real *X, int n_mats, int rows, int r, int iters, real *scratch, OptStatus *st) {
    if (!st->retract) return;
    for (int e = 0; e < n_mats; e++) {
        real *Xe = X + (size_t)e * rows * r;
        retract(Xe, rows, r, iters, scratch);
        double err = orth_error(Xe, rows, r);
        // a NaN (non-finite entries) is the worst error there is: it must reach the report
        if (isnan(err) || isnan(st->orth_err)) st->orth_err = NAN;
        else if (err > st->orth_err) st->orth_err = err;
    }
}

// ----------------------------------------------------------------------------------------
// the step's bookkeeping (engine/step.c)

void step_loss(double *out, const double *loss_sum, const real *aux, int depth, uint64_t scored, int N,
               double aux_w) {
    step_loss_combine(out, loss_sum, aux, depth, scored, N, aux_w);  // step_record.h, shared with CUDA
}

// The CPU backend's clock: the process's monotonic clock (the step's ops run as they are called)
static int64_t clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void step_begin(StepRecord *ring, const StepHyper *hp) { ring[hp->slot].t0_ns = clock_ns(); }

void step_end(StepRecord *ring, const StepHyper *hp, const OptStatus *st, const double *loss,
              const int32_t *load, int depth, int E) {
    StepRecord *r = &ring[hp->slot];
    step_record_fill(r, hp, st, loss, load, depth, E);
    r->t1_ns = clock_ns();
}
