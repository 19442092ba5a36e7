// ticks.c — see ticks.h.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ticks.h"

double viz_nice_step(double raw) {
    double e = pow(10, floor(log10(raw))), f = raw / e;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e;
}

// decimals that show a step exactly (steps are 1, 2 or 5 x 10^k)
static int decimals_for(double step) {
    int d = (int)ceil(-log10(step) - 1e-9);
    return d < 0 ? 0 : d > 12 ? 12 : d;
}

static void strip_zeros(char *s) {
    if (!strchr(s, '.')) return;
    char *e = s + strlen(s) - 1;
    while (*e == '0') *e-- = 0;
    if (*e == '.') *e = 0;
}

// viz_fmt_compact with `more` significant digits beyond its usual ones (ticks close together)
static void fmt_compact_p(double v, char *buf, int n, int more) {
    double a = fabs(v);
    static const char *si = "kMGTP";
    if (v == 0) { snprintf(buf, n, "0"); return; }
    // (each threshold is where the digits printed would round up to the next unit: "%.3g" of 999.7
    // is "1e+03", so 999.7 is already 1k; with more digits, later: review, session 31)
    double up = 1000 - 0.5 * pow(10, -more);
    if (a >= 1000 - 0.05 * pow(10, -more)) {  // "1k" next to "1M" on a log axis, not "1000" (QA, session 31)
        int k = 0;
        double w = v;
        do { a /= 1e3; w /= 1e3; k++; } while (a >= up && k < 5);
        if (a < up) {
            snprintf(buf, n, "%.*g%c", 3 + more, w, si[k - 1]);
            return;
        }
        a = fabs(v);  // past the SI suffixes: "1e18", "2.5e20" (was "1e+03P", "1e+282P": QA, session 31)
    } else if (a >= 1e-3) {
        snprintf(buf, n, "%.*g", 4 + more, v);
        return;
    }
    // "1e18", and "3e-5", "2.5e-4": a short exponent, no zero padding
    int k = (int)floor(log10(a));
    double m = v / pow(10, k);
    if (fabs(m) >= 10 - 5 * pow(10, -(2 + more))) { m /= 10; k++; }
    snprintf(buf, n, "%.*ge%d", 2 + more, m, k);
}

void viz_fmt_compact(double v, char *buf, int n) { fmt_compact_p(v, buf, n, 0); }

// Log-axis labels: as many digits as keep neighbours apart (ticks 1000, 1005, 1010 were "1k 1k
// 1.01k" once 1000 took the suffix: review, session 31)
static void label_log(VizTicks *t) {
    for (int more = 0; more <= 8; more++) {
        for (int i = 0; i < t->n; i++) fmt_compact_p(t->v[i], t->lab[i], 24, more);
        int same = 0;
        for (int i = 0; i + 1 < t->n && !same; i++) same = !strcmp(t->lab[i], t->lab[i + 1]);
        if (!same) return;
    }
}

// Labels for an evenly spaced set: one format for all ticks
static void label_linear(VizTicks *t, double step) {
    double amax = 0;
    for (int i = 0; i < t->n; i++) amax = fmax(amax, fabs(t->v[i]));
    t->factor[0] = 0;
    if (!isfinite(amax)) {  // (an axis is finite; a label is never written past its end)
        for (int i = 0; i < t->n; i++) snprintf(t->lab[i], 24, "%g", t->v[i]);
    } else if (amax >= 1e18 || (amax > 0 && amax < 1e-2)) {
        // beyond the SI suffixes (a diverging run's gnorm: "%.0f" of 1e37 filled the label and
        // the suffix went past it) and below 1e-2: mantissas and one "×1eK" for the axis
        int k = (int)floor(log10(amax));
        double u = pow(10, k);
        int d = decimals_for(step / u);
        for (int i = 0; i < t->n; i++) snprintf(t->lab[i], 24, "%.*f", d, t->v[i] / u);
        snprintf(t->factor, sizeof t->factor, "\xc3\x97" "1e%d", k);   // "×1e-4"
    } else if (amax >= 1e4) {
        static const char *si = "kMGTP";
        int k = 0;
        double u = 1;
        while (amax / u >= 1e3 && k < 5) { u *= 1e3; k++; }
        int d = decimals_for(step / u);
        for (int i = 0; i < t->n; i++) {
            if (t->v[i] == 0) { snprintf(t->lab[i], 24, "0"); continue; }
            snprintf(t->lab[i], 24, "%.*f", d, t->v[i] / u);
            strip_zeros(t->lab[i]);
            size_t L = strlen(t->lab[i]);
            if (L + 1 < 24) { t->lab[i][L] = si[k - 1]; t->lab[i][L + 1] = 0; }
        }
    } else {
        int d = decimals_for(step);
        for (int i = 0; i < t->n; i++) snprintf(t->lab[i], 24, "%.*f", d, t->v[i]);
    }
}

static void linear_ticks(double lo, double hi, int target, int integer, int positive, VizTicks *t) {
    if (target < 2) target = 2;
    double step = viz_nice_step((hi - lo) / target);
    if (integer && step < 1) step = 1;
    t->n = 0;
    for (double k = ceil(lo / step - 1e-9); t->n < VIZ_MAX_TICKS; k++) {
        double v = k * step;
        if (v > hi + step * 1e-9) break;
        if (fabs(v) < step * 1e-9) v = 0;   // no "-0.00"
        if (positive && v <= 0) continue;
        t->v[t->n++] = v;
    }
    label_linear(t, step);
}

void viz_ticks(double lo, double hi, int target, int integer, int logy, VizTicks *t) {
    memset(t, 0, sizeof *t);
    if (!logy) { linear_ticks(lo, hi, target, integer, 0, t); return; }
    int e0 = (int)floor(log10(lo)), e1 = (int)ceil(log10(hi));
    // 1) decades, strided when there are many
    int nd = 0;
    for (int e = e0; e <= e1; e++) { double v = pow(10, e); nd += v >= lo && v <= hi; }
    if (nd >= 3) {
        int stride = (nd + target - 1) / (target < 2 ? 2 : target);
        if (stride < 1) stride = 1;
        for (int e = e0; e <= e1 && t->n < VIZ_MAX_TICKS; e++) {
            double v = pow(10, e);
            if (v < lo || v > hi) continue;
            if (((e % stride) + stride) % stride == 0) t->v[t->n++] = v;
            if (stride == 1 && e1 - e0 <= 8)
                for (int m = 2; m <= 9 && t->nminor < VIZ_MAX_TICKS * 2; m++)
                    if (m * v <= hi) t->minor[t->nminor++] = m * v;
        }
        // minor ticks below the first decade
        if (stride == 1 && e1 - e0 <= 8)
            for (int m = 2; m <= 9; m++) {
                double v = m * pow(10, e0);
                if (v >= lo && v < pow(10, e0 + 1) && v < t->v[0] && t->nminor < VIZ_MAX_TICKS * 2) t->minor[t->nminor++] = v;
            }
        label_log(t);
        return;
    }
    // 2) 1-2-5 within decades
    int n125 = 0;
    double c[VIZ_MAX_TICKS];
    for (int e = e0 - 1; e <= e1; e++)
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {   // 1, 2, 5
            double v = m * pow(10, e);
            if (v >= lo && v <= hi && n125 < VIZ_MAX_TICKS) c[n125++] = v;
        }
    if (n125 >= 3 && n125 <= target + 2) {
        t->n = n125;
        memcpy(t->v, c, sizeof(double) * n125);
        label_log(t);
        return;
    }
    // 3) under a decade or so: walk up from lo with the finest 1-2-5 step whose log-space gap
    // stays at least an even share of the axis (0.2 apart near 1, 1 apart near 5, ...), so
    // the bottom of the axis is not left bare as with one linear step
    double g = pow(10, (log10(hi) - log10(lo)) / (target < 2 ? 2 : target)) - 1;
    double v = lo;
    t->n = 0;
    for (int guard = 0; guard < 4 * VIZ_MAX_TICKS && t->n < VIZ_MAX_TICKS; guard++) {
        double st = viz_nice_step(v * g);
        if (integer && st < 1) st = 1;
        double next = ceil(v / st - 1e-9) * st;
        if (t->n && next <= t->v[t->n - 1] * (1 + 1e-12)) next = (floor(t->v[t->n - 1] / st + 1e-9) + 1) * st;
        if (next > hi * (1 + 1e-12)) break;
        t->v[t->n++] = next;
        v = next * (1 + g);
    }
    if (t->n < 2) { linear_ticks(lo, hi, target, integer, 1, t); return; }
    label_log(t);
}
