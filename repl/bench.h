// bench.h — :bench's median of its step times (repl/cmd_verify.c), apart from the command so a
// test can give it times of its own (tests/test_cli_verify.c): no step is timed twice alike.
#pragma once

// The median of ms[0..n), n >= 1, sorted in place (ascending): for an even n the mean of the
// middle two (the upper one alone reported :bench steps=2 as its slower step).
static inline double bench_median(double *ms, long long n) {
    for (long long a = 1; a < n; a++) {
        double v = ms[a];
        long long b = a - 1;
        while (b >= 0 && ms[b] > v) { ms[b + 1] = ms[b]; b--; }
        ms[b + 1] = v;
    }
    return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}
