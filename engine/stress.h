// stress.h — the stability stress protocol (SPEC §7, :stress): N training steps of the live model
// at a constant LR of X times the base (no warm-up, no cosine), then the config as it was.
#pragma once
#include "engine.h"

typedef struct {
    long long done;        // steps that ran (an interrupt or a refused step ends the run early)
    long long judged;      // steps with >= 10 earlier finite losses (a spike needs a median)
    long long spikes;      // judged steps whose loss > the median of the last <= 201 finite + 0.1
    long long nonfinite;   // steps whose loss was not finite (never counted as spikes)
    long long gnorm_bad;   // non-finite pre-clip gradient norms (left out of the percentile)
    long long skipped;     // steps of this run the NaN firewall skipped
    double gnorm_p999;     // nearest-rank 99.9th percentile of the finite pre-clip norms (NaN: none)
    double final_loss;     // the last step's loss (NaN when none ran)
    double noise;          // the loss's step-to-step scatter: 1.4826 x median |loss[i] - loss[i-1]| / sqrt 2 over
                           // consecutive finite losses (NaN: fewer than 9 such pairs)
    double amax[3];        // max |output| of the kda, engram, moe arms over the run (0: off)
    int interrupted;       // an interrupt stopped it (counted in e->intr_honored)
} StressReport;

// Runs the protocol; 0 with *rep filled, or 1 with err set when a step failed (rep still says
// what ran before it). The config (lr, lr_muon, lr_cosine, warmup) is restored either way.
int engine_stress(Engine *e, double mult, long long n, StressReport *rep, dm_err *err);
// Whether loss[i] is judged (1: at least 10 finite losses among loss[i-201 .. i-1]) and, if so,
// whether it is a spike: above their median + 0.1 (an even count: the mean of the middle two).
int stress_judge(const double *loss, long long i, int *spike);
// The nearest-rank q-quantile of x[0 .. n) (0 < q <= 1): the ceil(q n)-th smallest, at least the
// first; sorts x ascending in place. NaN when n is 0. :stress reports q = 0.999 of the norms.
double stress_nearest_rank(double *x, long long n, double q);
