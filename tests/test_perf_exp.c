// test_perf_exp.c — the fast exp of kernels/cpu/ops.h (dm_exp) and the ops built on it.
// Float build: dm_exp is the vectorisable polynomial; its relative error against double exp
// stays under 2 ulp over [-87, 87], it saturates (never 0 / inf) outside, and NaN stays NaN.
// Double build: dm_exp is libm's exp, bit for bit. Both: silu / sigmoid / softmax-CE agree with
// their libm formulas to a few float ulp, and the 8-lane double reductions match a plain sum.
#include "testutil.h"
#include <stdlib.h>
#include <string.h>
#include "../kernels/cpu/ops.h"

static void test_exp_accuracy(void **s) {
    (void)s;
    double worst = 0;
    for (double v = -87.0; v <= 87.0; v += 1e-3) {
        real x = (real)v;
        double want = exp((double)x), got = dm_exp(x);
        double rel = fabs(got - want) / want;
        worst = err_max(worst, rel);
    }
    print_message("dm_exp max relative error over [-87, 87]: %.3g\n", worst);
#ifdef DM_DOUBLE
    assert_true(worst == 0);
#else
    assert_true(worst < 2 * 5.97e-8);  // 2 ulp of float
    // outside the range: saturated, finite, positive, monotone at the ends
    const float big[] = {88.f, 100.f, 1e30f, INFINITY};
    for (int i = 0; i < 4; i++) {
        float hi = dm_exp(big[i]), lo = dm_exp(-big[i]);
        assert_true(isfinite(hi) && hi > 1e37f);
        assert_true(lo > 0 && lo < 1e-37f);
    }
    assert_true(isnan(dm_exp(NAN)));
    assert_true(isnan(dm_exp(-NAN)));
#endif
    assert_true(dm_exp(0) == 1);
}

static void test_ops_match_libm(void **s) {
    (void)s;
    enum { N = 4096 };
    real *x = malloc(sizeof(real) * N), *y = malloc(sizeof(real) * N), *dx = calloc(N, sizeof(real));
    real *dy = malloc(sizeof(real) * N);
    Rng r = {42};
    fill_randn(x, N, 6.0, &r);
    fill_randn(dy, N, 1.0, &r);
    silu_forward(y, x, N);
    double ws = 0, wg = 0, wb = 0;
    for (int i = 0; i < N; i++) {
        double sg = 1 / (1 + exp(-(double)x[i]));
        ws = fmax(ws, fabs(y[i] - x[i] * sg) / fmax(fabs(x[i] * sg), 1e-30));
    }
    sigmoid_forward(y, x, N);
    for (int i = 0; i < N; i++) {
        double sg = 1 / (1 + exp(-(double)x[i]));
        wg = fmax(wg, fabs(y[i] - sg) / sg);
    }
    silu_backward(dx, dy, x, N);
    for (int i = 0; i < N; i++) {
        double sg = 1 / (1 + exp(-(double)x[i])), want = dy[i] * sg * (1 + x[i] * (1 - sg));
        // silu' = s (1 + x (1 - s)) crosses 0 near x = -1.28 (cancellation in any float
        // evaluation): judge it on the scale of dy, silu' being O(1)
        wb = fmax(wb, fabs(dx[i] - want) / fmax(fabs(want), fabs(dy[i])));
    }
    print_message("silu %.3g sigmoid %.3g silu' %.3g (max rel err vs libm)\n", ws, wg, wb);
    double tol = sizeof(real) == 4 ? 1e-6 : 1e-14;
    assert_true(ws < tol && wg < tol && wb < tol);
    // softmax-CE over rows of 256 (a multiple of 8 and a tail-free case) and 19 (with a tail)
    const int Vs[] = {256, 19};
    for (int vi = 0; vi < 2; vi++) {
        int V = Vs[vi], R = N / V;
        int *tgt = malloc(sizeof(int) * R);
        real *p = malloc(sizeof(real) * R * V), *loss = malloc(sizeof(real) * R);
        for (int n = 0; n < R; n++) tgt[n] = (int)(rng_next(&r) % (uint64_t)V);
        softmax_ce_forward(loss, p, x, tgt, R, V);
        double wl = 0, wp = 0;
        for (int n = 0; n < R; n++) {
            const real *l = x + (size_t)n * V;
            double mx = l[0], sum = 0;
            for (int v = 1; v < V; v++) mx = fmax(mx, l[v]);
            for (int v = 0; v < V; v++) sum += exp(l[v] - mx);
            wl = fmax(wl, fabs(loss[n] - (log(sum) + mx - l[tgt[n]])) / fmax(1.0, fabs(loss[n])));
            // a float l - mx carries ulp(|l - mx|) of absolute error into the exponent: scale by it
            for (int v = 0; v < V; v++) {
                double want = exp(l[v] - mx) / sum;
                wp = fmax(wp, fabs(p[(size_t)n * V + v] - want) / want / (1 + fabs(l[v] - mx)));
            }
        }
        print_message("softmax-CE V=%d: loss %.3g probs %.3g (max rel err vs libm)\n", V, wl, wp);
        assert_true(wl < tol && wp < (sizeof(real) == 4 ? 1e-6 : 1e-13));
        free(tgt); free(p); free(loss);
    }
    free(x); free(y); free(dx); free(dy);
}

static void test_reductions(void **s) {
    (void)s;
    Rng r = {7};
    for (int n = 0; n < 70; n++) {
        real a[70], b[70];
        fill_randn(a, (size_t)n, 1.0, &r);
        fill_randn(b, (size_t)n, 1.0, &r);
        double d = 0, q = 0, sa = 0;
        for (int i = 0; i < n; i++) { d += (double)a[i] * b[i]; q += (double)a[i] * a[i]; sa += fabs((double)a[i] * b[i]); }
        assert_true(fabs(dm_dot_d(a, b, (size_t)n) - d) <= 1e-14 * (sa + 1));
        assert_true(fabs(dm_sumsq_d(a, (size_t)n) - q) <= 1e-14 * (q + 1));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_ops_match_libm),
        cmocka_unit_test(test_reductions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
