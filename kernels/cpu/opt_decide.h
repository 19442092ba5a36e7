// opt_decide.h — the step decision (SPEC §4: NaN firewall, global norm, clip factor, applied-step
// count, retraction cadence) as one function both backends run: the CPU's opt_decide calls it,
// the CUDA backend's one-thread decide kernel compiles it as device code (OPT_HD = __device__),
// so the two cannot drift apart. A handful of double operations on the per-tensor sums.
#pragma once
#include <math.h>
#include "optim_ops.h"

#ifndef OPT_HD
#define OPT_HD
#endif

// Steps enqueued after the run halted (nan_limit reached) are no-ops, counters included.
static OPT_HD inline void opt_decide_status(OptStatus *st, const double *ss, const int32_t *bad, int nseg,
                                            const double *loss_p, const StepHyper *hp) {
    if (st->halted) {
        st->skip = 1; st->clipped = 0; st->scale = 1; st->retract = 0; st->orth_err = -1; st->too_big = 0;
        return;
    }
    double loss = *loss_p, clip = hp->clip;
    int retract_every = hp->retract_every;
    double total = 0;
    int first_bad = -1, biggest = 0;
    for (int i = 0; i < nseg; i++) {
        total += ss[i];
        if (bad[i] && first_bad < 0) first_bad = i;
        if (ss[i] > ss[biggest]) biggest = i;
    }
    st->sumsq = total;
    st->gnorm = sqrt(total);
    st->first_bad = first_bad;
    st->loss_bad = !isfinite(loss);
    st->skip = st->loss_bad || first_bad >= 0;
    st->too_big = 0;
    st->clipped = 0;
    st->scale = 1;
    st->retract = 0;
    st->orth_err = -1;
    if (!st->skip && clip > 0 && st->gnorm > clip) {
        st->clipped = 1;
        st->scale = clip / st->gnorm;
    }
    // A finite gradient whose sum of squares, as applied (clipped), is past real's range is
    // refused like a non-finite one: the updates square its elements in real (Adam's v), where one
    // past sqrt(REAL_MAX) becomes inf and a later update NaN (QA, session 34: clip=0 beta2=0 let
    // NaN weights past the firewall; the halt's checkpoint did not load). The sum bounds every
    // element's square at no cost; it also refuses a few gradients whose elements would each
    // square in range (four of 1e19 in float), which no healthy run has. SPEC's firewall skips a
    // non-finite norm: this is its intent in the update's arithmetic. (In the double build the
    // sum is inf already; !(x <= max) holds for NaN too.)
    if (!st->skip && !(total * st->scale * st->scale <= (double)REAL_MAX)) {
        st->skip = st->too_big = 1;
        st->first_bad = biggest;  // (the tensor that made it so, as a non-finite one is named)
        st->clipped = 0;
        st->scale = 1;
    }
    if (st->skip) {
        st->consecutive_skips++;
        st->total_skips++;
        if (hp->nan_limit > 0 && st->consecutive_skips >= hp->nan_limit) st->halted = 1;
        return;
    }
    st->t++;
    st->consecutive_skips = 0;
    if (retract_every > 0 && st->t % retract_every == 0) {
        st->retract = 1;
        st->orth_err = 0;
    }
}
