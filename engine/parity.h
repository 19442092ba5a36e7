// parity.h — `:check parity` (SPEC §8, issue 5): one training step (forward + backward) from
// identical weights on two backends, the loss and every parameter's gradient compared.
#pragma once
#include "engine.h"

typedef struct {
    char name[32];       // tensor name (model.h table)
    double rel;          // max |a - b| / max |b| over the tensor (b: the reference backend)
    int zero;            // the gradient is exactly 0 on both backends: the row compares nothing
} ParityRow;

typedef struct {
    double loss_ref, loss_dev, loss_rel;
    ParityRow rows[P_COUNT];
    int nrows;
    int nzero;           // rows with zero on both sides (e.g. every arm's tensors while ReZero's alpha is 0)
    long route_moved;    // at least this many token-to-expert assignments differ between the two
                         // forwards (half the L1 distance of the per-iteration expert loads): a
                         // router tie broken differently; past it the two compute different things
    double worst;        // max over the loss and every tensor
    char worst_name[32];
    double bar;          // the tolerance the caller passed
    int ok;              // worst <= bar
} ParityReport;

// Builds two models of e->cfg (batch B, sequence T: 0 = the config's) on `ref` and `dev`,
// gives both the live model's weights (or, without a live model, the seed's initialisation),
// runs one forward + backward on the same batch (the training batch of step e->step when data
// is open, else seeded random bytes) with the live arm switches, and compares. The live model
// is not touched. ref_bf16: the device runs its products on bf16 operands, and the reference
// computes with the same rounding (Backend.emulate_bf16): the comparison is then of the same
// arithmetic, so it checks the device's kernels rather than bf16's distance from fp32.
int engine_check_parity(Engine *e, const Backend *ref, const Backend *dev, int B, int T, double bar, int ref_bf16,
                        ParityReport *rep, dm_err *err);
