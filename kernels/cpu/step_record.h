// step_record.h — the per-step arithmetic of the training step's record (engine/step.c) as
// functions both backends run: the CPU's step_loss / step_end call them, the CUDA backend's
// one-thread kernels compile them as device code (OPT_HD = __device__), like opt_decide.h, so
// the loss a graph-replayed step reports is the same double the CPU computes.
#pragma once
#include <math.h>
#include "optim_ops.h"

#ifndef OPT_HD
#define OPT_HD
#endif

// out[0] = mean over the scored depths (bit i of `scored`) of loss_sum[i] / N (NAN if none);
// out[1] = out[0] + aux_w * mean(aux[0..depth)) (aux NULL: the aux arm is off, out[1] = out[0]).
static OPT_HD inline void step_loss_combine(double *out, const double *loss_sum, const real *aux, int depth,
                                            uint64_t scored, int N, double aux_w) {
    double ce = 0;
    int n_scored = 0;
    for (int i = 0; i < depth; i++) {
        if (!((scored >> i) & 1)) continue;
        ce += loss_sum[i] / N;
        n_scored++;
    }
    ce = n_scored ? ce / n_scored : NAN;
    out[0] = ce;
    if (!aux) { out[1] = ce; return; }
    double aux_sum = 0;
    for (int i = 0; i < depth; i++) aux_sum += aux[i];
    out[1] = ce + aux_w * (aux_sum / depth);
}

// The record of the step in slot hp->slot (all but its end time): hyper-parameters, the
// optimizer's status, the losses, and the routed load per expert summed over the depth.
static OPT_HD inline void step_record_fill(StepRecord *r, const StepHyper *hp, const OptStatus *st,
                                           const double *loss, const int32_t *load, int depth, int E) {
    r->hp = *hp;
    r->st = *st;
    r->loss = loss[0];
    r->objective = loss[1];
    for (int x = 0; x < STEP_REC_E; x++) {
        int64_t s = 0;
        for (int i = 0; load && x < E && i < depth; i++) s += load[(size_t)i * E + x];
        r->load[x] = s;
    }
}
