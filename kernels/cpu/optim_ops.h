// optim_ops.h — the optimizer's backend ops on the CPU (SPEC §4), and the plain types the
// Backend table's "optimizer ops" share with kernels/cuda/optim_cuda.cu.
//
// The step is decided where the buffers live: opt_sumsq reduces the gradient per tensor,
// opt_decide turns that (and the loss) into an OptStatus in backend memory — global norm, NaN
// firewall, clip factor, step count, retraction cadence — and every later op reads the status
// (skip => it changes nothing). So no op of the step waits for the host; the engine downloads
// the status only to report it.
//
// Formulas (t = st->t, the 1-based count of applied steps; b1, b2, eps, lr, wd rounded to real):
//   AdamW : m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//           p -= lr (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd p)
//   lazy Adam on table rows: the same without decay, per DISTINCT row read by the batch, with
//           the row's own count row_steps[k] (incremented first) in place of t
//   Muon  : buf = mu buf + g;  U = g + mu buf (Nesterov);  U = NS5(U / (||U||_F + 1e-7));
//           (colrow: each column, then each row, to unit RMS);  p = p decay - step U
#pragma once
#include <stdint.h>
#include <stddef.h>
#include "../real.h"

#define OPT_MAX_SEGS 64   // segments of one opt_sumsq call (the engine passes its tensor table)

// One range [off, off + n) of a buffer, in reals.
typedef struct { size_t off, n; } OptSeg;

// The step's decision, in backend memory; persistent across steps (t and the skip counters
// carry over). Written by opt_decide (and opt_retract's orth_err), read by every update op.
typedef struct {
    int64_t t;                  // optimizer steps applied, this one included once decided
    int64_t total_skips;        // skipped steps, ever
    int32_t consecutive_skips;  // skipped steps in a row, up to this one
    int32_t skip;               // 1: the loss or a gradient is non-finite — no update at all
    int32_t first_bad;          // first segment with a non-finite value, -1 none
    int32_t loss_bad;           // the loss was non-finite
    int32_t clipped;            // 1: gradients were scaled by `scale`
    int32_t retract;            // 1: this step retracts (cadence on t; never on a skipped step)
    double sumsq, gnorm;        // gradient sum of squares and its root, before clipping
    double scale;               // clip / gnorm when clipped, else 1 (rounded to real when applied)
    double orth_err;            // largest orthogonality error after this step's retraction, -1: none
} OptStatus;

typedef struct { double beta1, beta2, eps, lr, wd; } AdamHyper;
// step = lr * (0.2 sqrt(max(rows, cols)) or 0.2 under colrow), decay = 1 - lr wd (host-rounded)
typedef struct { real mu, decay, step; int colrow; } MuonHyper;

// ---- the CPU implementations of the Backend entries (see backend.h) ----
// ss[i] = sum of squares of x over segs[i] in double, bad[i] = 1 when it holds a non-finite
// value. Chunks of OPT_SUMSQ_CHUNK reals are summed independently (in parallel), then in chunk
// order: the result does not depend on the thread count.
#define OPT_SUMSQ_CHUNK 65536
void opt_sumsq(double *ss, int32_t *bad, const real *x, const OptSeg *segs, int nseg);
void opt_decide(OptStatus *st, const double *ss, const int32_t *bad, int nseg, double loss,
                double clip, int retract_every);
void opt_clip(real *g, size_t n, const OptStatus *st);
void opt_adamw(real *p, const real *g, real *m, real *v, size_t n, AdamHyper h, const OptStatus *st);
size_t opt_adam_rows_ws_size(int O, int N, int64_t R);
void opt_adam_rows(real *p, const real *g, real *m, real *v, int64_t *row_steps, const int32_t *rows,
                   int O, int N, int64_t R, int D, AdamHyper h, void *ws, const OptStatus *st);
size_t opt_muon_scratch_size(int rows, int cols);
void opt_muon(real *p, const real *g, real *buf, int n_mats, int rows, int cols, MuonHyper h,
              real *scratch, const OptStatus *st);
size_t opt_retract_scratch_size(int rows, int r);
void opt_retract(real *X, int rows, int r, int iters, real *scratch, OptStatus *st);

// Muon's orthogonalisation of G [rows, cols] in place (host memory; opt_muon's inner step,
// exposed for tests): 5 Newton–Schulz iterations with (3.4445, -4.7750, 2.0315) after dividing
// by ||G||_F + 1e-7. scratch: 2 min(rows, cols)^2 + rows*cols reals.
void opt_muon_orthogonalize(real *G, int rows, int cols, real *scratch);
