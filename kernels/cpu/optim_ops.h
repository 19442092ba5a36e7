// optim_ops.h — the optimizer's backend ops on the CPU (SPEC §4), and the plain types the
// Backend table's "optimizer ops" share with kernels/cuda/optim_cuda.cu.
//
// The step is decided where the buffers live: opt_sumsq reduces the gradient per tensor,
// opt_decide turns that (and the loss) into an OptStatus in backend memory — global norm, NaN
// firewall, clip factor, step count, retraction cadence — and every later op reads the status
// (skip => it changes nothing). So no op of the step waits for the host; the engine downloads
// the status only to report it.
//
// The step's scalars live on the backend too: a StepHyper (lr, lr_muon, wd, the schedule
// multiplier, Adam/Muon constants, clip, nan_limit, the retraction period) that the host
// refreshes before each step with ONE upload, and the loss, which the forward leaves in backend
// memory. An op's host arguments are therefore only shapes, flags and pointers — the same at
// every step — so a captured step (a CUDA graph) replays with the current values (issue 5).
//
// Formulas (t = st->t, the 1-based count of applied steps; b1, b2, eps, lr, wd rounded to real;
// lr = hp->lr for Adam, hp->lr_muon for Muon; wd = hp->wd where the tensor decays, else 0):
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
    int32_t skip;               // 1: the loss or a gradient is non-finite, or the gradient's sum
                                // of squares is past REAL_MAX (too_big) — no update at all
    int32_t first_bad;          // first segment with a non-finite value (too_big: the largest), -1 none
    int32_t loss_bad;           // the loss was non-finite
    int32_t clipped;            // 1: gradients were scaled by `scale`
    int32_t retract;            // 1: this step retracts (cadence on t; never on a skipped step)
    double sumsq, gnorm;        // gradient sum of squares and its root, before clipping
    double scale;               // clip / gnorm when clipped, else 1 (rounded to real when applied)
    double orth_err;            // largest orthogonality error after this step's retraction, -1: none
    int32_t halted;             // 1: consecutive_skips reached nan_limit; every later step is a no-op
                                // (counters included) until the host reports it and resumes the run
    int32_t too_big;            // 1: skipped for a finite gradient whose squares real cannot hold
} OptStatus;

// The step's scalars, in backend memory, refreshed by the host before each step with one
// upload (engine/step.c: from a pinned staging buffer on CUDA, so a captured step reads the
// current values at every replay). The optimizer ops read them here, never by value.
// step, tokens, ntok and slot are carried into the step's StepRecord for the metric row.
typedef struct {
    double lr, lr_muon;         // this step's rates: the base rates times the schedule multiplier
    double mult;                // the schedule multiplier (lr_schedule_mult)
    double wd;                  // decoupled weight decay of the decaying tensors
    double beta1, beta2, eps;   // Adam
    double muon_momentum;       // Muon (Nesterov)
    double clip;                // global gradient-norm clip, 0: off
    int64_t step;               // the 0-based training step
    int64_t tokens;             // bytes trained on after this step
    int64_t ntok;               // bytes in this step's batch (B*T)
    int32_t nan_limit;          // consecutive skipped steps that halt the run, 0: never
    int32_t retract_every;      // retract when t % retract_every == 0; 0: never (arm off)
    int32_t slot;               // this step's entry of the StepRecord ring
    int32_t pad_;
} StepHyper;

// What one step leaves for the host (engine/step.c keeps a ring of them in backend memory and
// downloads all pending ones in one copy when it reports): everything a metric row needs.
#define STEP_REC_E 16           // experts whose routed share is recorded (MetricRow.expert_frac)
typedef struct {
    StepHyper hp;               // the hyper-parameters the step ran with
    OptStatus st;               // the status after the step
    double loss, objective;     // mean CE of the forward; what the NaN firewall judged (CE + aux)
    int64_t t0_ns, t1_ns;       // backend clock when the step started / finished (the row's ms)
    int64_t load[STEP_REC_E];   // routed assignments per expert summed over depth (E <= 16)
} StepRecord;

// ---- the CPU implementations of the Backend entries (see backend.h) ----
// ss[i] = sum of squares of x over segs[i] in double, bad[i] = 1 when it holds a non-finite
// value. Chunks of OPT_SUMSQ_CHUNK reals are summed independently (in parallel), then in chunk
// order: the result does not depend on the thread count.
#define OPT_SUMSQ_CHUNK 65536
void opt_sumsq(double *ss, int32_t *bad, const real *x, const OptSeg *segs, int nseg);
void opt_decide(OptStatus *st, const double *ss, const int32_t *bad, int nseg, const double *loss,
                const StepHyper *hp);
void opt_clip(real *g, size_t n, const OptStatus *st);
void opt_adamw(real *p, const real *g, real *m, real *v, size_t n, int decay, const StepHyper *hp,
               const OptStatus *st);
size_t opt_adam_rows_ws_size(int O, int N, int64_t R);
void opt_adam_rows(real *p, const real *g, real *m, real *v, int64_t *row_steps, const int32_t *rows,
                   int O, int N, int64_t R, int D, void *ws, const StepHyper *hp, const OptStatus *st);
// Host-RAM tables (engine/optim.c, engram_ram): the table segment's part of the step on host
// memory, from the rows [O, N] the batch read, equal bit for bit to the whole-segment ops when the
// gradient is zero outside those rows.
// opt_sumsq_rows: ss / bad of the tables [O, R, D] as opt_sumsq computes them over the whole
// segment — only the OPT_SUMSQ_CHUNK chunks holding a read row are summed, in chunk order (a
// chunk of zeros adds exactly 0). ws: opt_rows_chunk_ws_size(O, N) int64.
size_t opt_rows_chunk_ws_size(int O, int N);
void opt_sumsq_rows(double *ss, int32_t *bad, const real *g, const int32_t *rows, int O, int N, int64_t R,
                    int D, int64_t *ws);
// opt_clip_rows: opt_clip on each distinct read row once (ws: opt_adam_rows_ws_size bytes, zero
// between calls)
void opt_clip_rows(real *g, const int32_t *rows, int O, int N, int64_t R, int D, void *ws, const OptStatus *st);
size_t opt_muon_scratch_size(int n_mats, int rows, int cols);
void opt_muon(real *p, const real *g, real *buf, int n_mats, int rows, int cols, int colrow,
              real *scratch, const StepHyper *hp, const OptStatus *st);
size_t opt_retract_scratch_size(int n_mats, int rows, int r);
void opt_retract(real *X, int n_mats, int rows, int r, int iters, real *scratch, OptStatus *st);

// ---- the step's bookkeeping ops (engine/step.c) ----
// out[0] = mean over the scored depths (bit i of `scored`) of loss_sum[i] / N, in depth order
// (NaN when none is scored); out[1] = out[0] + aux_w * (sum of aux[0..depth)) / depth, or out[0]
// when aux is NULL (the aux term off). The host's arithmetic of model_forward, operation for
// operation, so the CPU's numbers are the ones it always printed.
void step_loss(double *out, const double *loss_sum, const real *aux, int depth, uint64_t scored, int N,
               double aux_w);
// ring[hp->slot]: t0_ns = the backend clock now (the step starts)
void step_begin(StepRecord *ring, const StepHyper *hp);
// ring[hp->slot]: the hyper-parameters, the status, loss[0..1] (CE, objective), t1_ns, and the
// per-expert sums over depth of load [depth, E] (backend int32; NULL: zeros)
void step_end(StepRecord *ring, const StepHyper *hp, const OptStatus *st, const double *loss,
              const int32_t *load, int depth, int E);

// Muon's orthogonalisation of G [rows, cols] in place (host memory; opt_muon's inner step,
// exposed for tests): 5 Newton–Schulz iterations with (3.4445, -4.7750, 2.0315) after dividing
// by ||G||_F + 1e-7. scratch: 2 min(rows, cols)^2 + rows*cols reals.
void opt_muon_orthogonalize(real *G, int rows, int cols, real *scratch);
