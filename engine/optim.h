// optim.h — the optimizers of SPEC §4: Muon (Nesterov, Newton–Schulz 5, Moonlight scale,
// optional muon_colrow), AdamW, Adam without decay on Engram tables updating only touched rows;
// warmup + cosine/constant schedule; global-norm clip (pre-clip norm reported); the NaN
// firewall; the retraction cadence. One contiguous buffer per moment, parallel to the
// parameter buffer (llm.c style).
//
// Device-clean: every buffer below marked "backend memory" is touched only through the
// backend's optimizer ops (kernels/backend.h), so the step runs unchanged where those buffers
// are device memory. The step's decision (NaN firewall, clip factor, applied-step count,
// retraction cadence) is made by the backend into `status`; the host fields t,
// consecutive_skips and total_skips mirror it, refreshed when a downloaded status is reported
// (optim_report). Code that sets them (checkpoint load, snapshot restore) calls optim_set_counters.
//
// Two ways to run a step. optim_step: the host API (tests, bench) — the loss is a host value,
// the status is downloaded at the end. optim_enqueue: the engine's step (engine/step.c) — the
// loss is the objective the forward left in backend memory, the scalars are the StepHyper at
// `hp` that the engine uploaded, nothing is downloaded: the whole update is enqueued and the
// status reaches the host later, in the step's record. (Under engram_ram the host needs the
// decision for the table rows: the status comes down once it is made, see optim.c.)
#pragma once
#include <stdint.h>
#include "model.h"

typedef struct {
    const Backend *be;
    real *m, *v;        // [n_params] Adam first / second moments (also used for tables), backend memory
    real *mom;          // [n_params] Muon momentum (only Muon tensors' ranges are used), backend memory
    real *scratch;      // Muon / retraction workspace, backend memory
    size_t n_scratch;
    void *rows_ws;      // lazy-Adam workspace (opt_adam_rows_ws_size bytes), backend memory
    size_t n_rows_ws;
    int64_t *row_steps; // [n_orders * engram_rows] Adam step count per table row (lazy bias correction), backend memory
    OptStatus *status;  // the step's decision, backend memory
    double *ss;         // [P_COUNT] per-tensor gradient sums of squares, backend memory
    int32_t *bad;       // [P_COUNT] per-tensor non-finite flags, backend memory
    StepHyper *hp;      // this step's scalars (lr, wd, clip, ...), backend memory: every op reads them here
    double *loss_in;    // optim_step's host loss, uploaded, backend memory
    OptSeg segs[P_COUNT];   // the tensor table as (offset, numel), host
    // engram_ram (m->tab != NULL): the tables' Adam state in host memory, updated on the host
    // while the device runs the rest of the update; m / v / mom above then cover [0, n_dev)
    real *tab_m, *tab_v;    // [O, R, De] host
    int64_t *tab_rs;        // [O, R] per-row step counts, host (row_steps is then unused)
    uint8_t *tab_marks;     // [O, R] scratch marks, zero between calls, host
    int64_t *tab_chunks;    // opt_rows_chunk_ws_size scratch, host
    size_t n_tab_chunks;
    int64_t t;              // optimizer steps applied (skipped steps not counted) — host mirror
    int consecutive_skips;  // host mirror
    int64_t total_skips;    // host mirror
} Optim;

typedef struct {
    double lr, lr_muon;     // the rates used this step
    double gnorm;           // global gradient norm before clipping
    int skipped;            // 1: non-finite loss or gradient (or too_big), no update applied
    int too_big;            // skipped for a finite gradient whose sum of squares is past REAL_MAX
    char first_bad[48];     // name of the first tensor with a non-finite gradient ("loss" if the
                            // loss; too_big: the tensor with the largest sum of squares)
    double orth_err;        // after retraction (or the current value when not retracted this step)
    int retracted;
} StepInfo;

int optim_create(Optim *o, const Model *m, dm_err *err);
void optim_free(Optim *o);
// Set the step counters (host mirror and the backend status), e.g. after loading a checkpoint.
void optim_set_counters(Optim *o, int64_t t, int64_t total_skips, int consecutive_skips);
// Learning-rate multiplier schedule for step s (0-based): warmup lr*(s+1)/warmup, then cosine
// to lr_min_frac at cfg->steps (or constant); with cosine, lr_min_frac from cfg->steps on, even
// when the horizon ends inside the warmup.
double lr_schedule_mult(const Config *c, int64_t s);
// Apply one update from m->grads at training step `step` (0-based), with `loss` the objective
// of the forward that produced the grads. Uses m->acts.rows / m->acts.B,T for the touched
// Engram rows. Returns 0, or 1 when nan_limit consecutive skips were reached (err names the
// step and the first non-finite tensor).
int optim_step(Optim *o, Model *m, int64_t step, double loss, StepInfo *info, dm_err *err);

// ---- the step in parts (engine/step.c) ----
// The scalars of training step `step` (0-based) from m->cfg and the arm switches: the scheduled
// rates, wd, Adam/Muon constants, clip, nan_limit, the retraction period (tokens/ntok/slot: 0).
void optim_hyper(const Optim *o, const Model *m, int64_t step, StepHyper *hp);
// Grow the workspaces the update needs at the current batch shape. Before a capture: nothing
// may allocate inside one.
int optim_reserve(Optim *o, const Model *m, dm_err *err);
// Enqueue the whole update: reads the objective at `loss` and the scalars at o->hp (both
// backend memory, filled by the caller). No host round trip; the decision lands in o->status.
void optim_enqueue(Optim *o, Model *m, const double *loss);
// The optimizer state as whole logical buffers in host memory (checkpoints, snapshots):
// mm, vv, mom [n_params] and rs [n_orders * engram_rows], wherever each part lives.
void optim_state_get(const Optim *o, const Model *m, real *mm, real *vv, real *mom, int64_t *rs);
void optim_state_put(Optim *o, const Model *m, const real *mm, const real *vv, const real *mom, const int64_t *rs);
// Report a status downloaded after the step that ran with `hp`: StepInfo, the host mirrors, and
// 1 with err when the step halted the run (nan_limit; the backend's halt is cleared so the run
// can be resumed).
int optim_report(Optim *o, const Model *m, const OptStatus *st, const StepHyper *hp, StepInfo *info,
                 dm_err *err);
// Muon's orthogonalisation on HOST memory (exposed for tests; the CPU backend's opt_muon uses
// it): G [rows, cols] -> in place, 5 NS iterations with (3.4445, -4.7750, 2.0315) after
// dividing by ||G||_F + 1e-7. scratch: 2 min(rows, cols)^2 + rows*cols reals.
void muon_orthogonalize(real *G, int rows, int cols, real *scratch);
