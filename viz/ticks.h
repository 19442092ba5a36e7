// ticks.h — axis tick selection and labels: 1-2-5 steps on linear axes, decades (then 1-2-5
// within decades, then linear steps) on log axes, labels formatted for the whole set at once
// (same decimals on every tick; SI suffixes for big values; a shared x1e-k factor for tiny ones).
#pragma once

#define VIZ_MAX_TICKS 48

typedef struct {
    int n;
    double v[VIZ_MAX_TICKS];         // data values of the labelled ticks
    char lab[VIZ_MAX_TICKS][24];
    int nminor;
    double minor[VIZ_MAX_TICKS * 2]; // unlabelled ticks (log axes: 2..9 x 10^k)
    char factor[24];                 // "x1e-4" to append to the axis label, or ""
} VizTicks;

// the 1-2-5 step nearest above raw (> 0)
double viz_nice_step(double raw);
// Ticks inside [lo, hi] (data units, lo < hi), about `target` of them; integer = steps of at
// least 1 (indices, depths, counts); logy: lo > 0 and a log axis.
void viz_ticks(double lo, double hi, int target, int integer, int logy, VizTicks *t);
// One value, compact ("0.001", "250k", "1.5M", "3e-05"): for legends and reference labels.
void viz_fmt_compact(double v, char *buf, int n);
