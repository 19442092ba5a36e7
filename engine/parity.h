// parity.h — `:check parity` (SPEC §8, issue 5): one training step (forward + backward) from
// identical weights on two backends, the loss and every parameter's gradient compared.
#pragma once
#include "engine.h"

typedef struct {
    char name[32];       // tensor name (model.h table)
    double rel;          // max |a - b| / max |b| over the tensor (b: the reference backend)
    int zero;            // the gradient is exactly 0 on both backends: the row compares nothing
    double floor;        // PARITY_FLOOR: the reference against itself from weights 1 ulp away
} ParityRow;

typedef struct {
    double loss_ref, loss_dev, loss_rel;
    ParityRow rows[P_COUNT];
    int nrows;
    int nzero;           // rows with zero on both sides (e.g. every arm's tensors while ReZero's alpha is 0)
    // The routing (MoE arm on). Where a router logit sits within rounding of a tie, the two sides'
    // top-k can pick different experts, and from there they compute different functions: no
    // tolerance separates that from a defect. So by default the reference FOLLOWS the device's
    // routing (Backend.moe_forward_routed), and what is checked about the routing itself is that
    // every device choice the reference would not have made was a near tie in the reference's own
    // softmax (route_gap <= bar); a router that picks a clearly worse expert fails there.
    int route_followed;  // 1: the reference ran the device's routing; 0: each side its own
    long route_total;    // token-expert assignments over the iterations run (N * k * depth)
    long route_moved;    // of them, the device's that the reference's own top-k does not contain
    double route_gap;    // route_followed: max over the moved of (p_k - p_e) / p_k in the
                         // reference's softmax (p_k: its own k-th pick); 0 when none moved
    int route_bad;       // the device's routing was not a routing (an expert out of range or
                         // twice for one token): a defect, the report fails
    double worst;        // max over the loss and every tensor
    char worst_name[32];
    int has_floor;       // PARITY_FLOOR was asked: the floors below (and ParityRow.floor) are set
    double loss_floor;   // the loss's floor
    double worst_floor;  // the floor of the worst row
    double bar;          // the tolerance the caller passed
    int ok;              // worst <= bar, route_gap <= bar, and !route_bad
} ParityReport;

// Builds two models of e->cfg (batch B, sequence T: 0 = the config's) on `ref` and `dev`,
// gives both the live model's weights (or, without a live model, the seed's initialisation),
// runs one forward + backward on the same batch (the training batch of step e->step when data
// is open, else seeded random bytes) with the live arm switches, and compares. The live model
// is not touched. ref_bf16: the device runs its products on bf16 operands, and the reference
// computes with the same rounding (Backend.emulate_bf16): the comparison is then of the same
// arithmetic, so it checks the device's kernels rather than bf16's distance from fp32.
// flags: PARITY_OWN_ROUTE: each side routes by its own top-k (route_moved then counts the
// differences, and the gradients past a moved assignment compare different computations); without
// it, the default of :check parity, the reference follows the device's routing (route_followed).
// PARITY_FLOOR: one more reference step, from the weights each moved by one float ulp (same batch,
// same routing), compared with the first: a per-tensor noise floor (ParityRow.floor) that shows
// which differences are the step's conditioning rather than the device. Diagnostic only: `ok`
// never looks at it.
enum { PARITY_OWN_ROUTE = 1, PARITY_FLOOR = 2 };
int engine_check_parity(Engine *e, const Backend *ref, const Backend *dev, int B, int T, double bar, int ref_bf16,
                        int flags, ParityReport *rep, dm_err *err);
