// gradcheck.c — :check grad: a finite-difference check of every parameter group on a tiny
// model with the live model's arms and choices of computation (k, L, loss, gates, orders), using
// random directions per tensor (the full per-entry check lives in tests/test_model.c). In the double build (make DM_REAL=double) the bar is
// 1e-6; in float, round-off limits what differences can show, so the bar is 1e-2 and the
// output says to use the double build for the real check.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "engine.h"
#include "rng.h"

// Test hook (declared in tests/test_model.c only): the index of a tensor whose analytic gradient
// is scaled by 1.1 before the comparison, so a test can see the check fail; -1: none.
int gradcheck_test_corrupt = -1;

int engine_check_grad(Engine *e, const int *arms_on, FILE *out, int *ok, dm_err *err) {
    // The tiny shape, with the live config's choices of computation (QA, session 24: one fixed
    // model was checked whatever the config, so nano's k = 1 routing and loss=final never were):
    // k (at most E = 3), L (at most 3), loss, lam_max, g_min, moe_aux and the Engram orders.
    const Config *lc = &e->cfg;
    Config c;
    config_defaults(&c);
    c.d = 8; c.H = 2; c.E = 3; c.r = 2; c.f = 6;
    c.engram_rows = 13; c.engram_dim = 3; c.seq = 9; c.batch = 2; c.kda_chunk = 4;
    c.L = lc->L < 3 ? lc->L : 3;
    c.k = lc->k < c.E ? lc->k : c.E;
    c.loss_final = lc->loss_final; c.lam_max = lc->lam_max; c.g_min = lc->g_min; c.moe_aux = lc->moe_aux;
    c.n_orders = lc->n_orders;
    memcpy(c.engram_orders, lc->engram_orders, sizeof c.engram_orders);
    Model m;
    if (model_create(&m, &c, backend_cpu(), 7, err)) return 1;
    for (int a = 0; a < ARM_COUNT; a++) m.arms.on[a] = arms_on[a];
    Rng r = {12345};
    for (size_t j = 0; j < m.n_params; j++) m.params[j] = (real)(0.35 * rng_normal(&r));
    m.params[m.t[P_ALPHA].offset] = (real)0.5;
    int x[18], y[18];
    for (int i = 0; i < 18; i++) { x[i] = (int)(rng_next(&r) % 7) * 37 % 256; y[i] = (int)(rng_next(&r) % 256); }
    char orders[64] = "";
    for (int i = 0, u = 0; i < c.n_orders; i++) u += snprintf(orders + u, sizeof orders - u, "%s%d", i ? "," : "", c.engram_orders[i]);
    fprintf(out, "model: d=8 H=2 L=%d E=3 k=%d r=2 f=6 engram_rows=13 engram_dim=3 seq=9 batch=2 kda_chunk=4, seed 7, "
            "random weights x 0.35; from the live config: L (<= 3), k (<= 3), loss=%s lam_max=%g g_min=%g moe_aux=%g "
            "engram_orders=%s\n", c.L, c.k, c.loss_final ? "final" : "rec", c.lam_max, c.g_min, c.moe_aux, orders);
    model_forward(&m, x, y, 2, 9, c.L, FWD_TRAIN);
    model_backward(&m);
    real *g = mallocCheck(sizeof(real) * m.n_params), *dir = mallocCheck(sizeof(real) * m.n_params);
    memcpy(g, m.grads, sizeof(real) * m.n_params);
    if (gradcheck_test_corrupt >= 0 && gradcheck_test_corrupt < P_COUNT)
        for (size_t j = 0; j < m.t[gradcheck_test_corrupt].numel; j++) g[m.t[gradcheck_test_corrupt].offset + j] *= (real)1.1;
#ifdef DM_DOUBLE
    const double tol = 1e-6, h = 1e-4;
#else
    const double tol = 1e-2, h = 1e-2;
#endif
    double worst = 0, worst_noise = 0;
    int nzero = 0, nkink = 0;
    *ok = 1;
    fprintf(out, "gradient check (%s, one random direction per tensor, 6th-order central differences, rel = |a-n|/max(|a|,|n|,noise/bar), "
            "noise = the differences' round-off), arms off:", REAL_NAME);
    int noff = 0;
    for (int a = 0; a < ARM_COUNT; a++) if (!arms_on[a]) { fprintf(out, " %s", dm_arm_names[a]); noff++; }
    fprintf(out, "%s\n", noff ? "" : " none");
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m.t[i];
        real *p = m.params + t->offset;
        double an = 0;
        for (size_t j = 0; j < t->numel; j++) { dir[j] = (real)rng_normal(&r); an += (double)dir[j] * g[t->offset + j]; }
        real *save = mallocCheck(sizeof(real) * t->numel);
        memcpy(save, p, sizeof(real) * t->numel);
        // The difference at h and at h/2: where they disagree past the bar, the loss is not smooth
        // within the stencil's +-3h (a top-k routing switch, the memory gate's cap): h / 10, then
        // h / 100, and if it is still not smooth the row says so instead of comparing a kink (a
        // right gradient failed at lam_max=0.3 with L=3, and at some k=2 routings: QA, session 24)
        double num = 0, noise = 0, hh = h;
        int smooth = 0;
        for (int tries = 0; tries < 3 && !smooth; tries++, hh /= 10) {
            double est[2], nz[2];
            for (int half = 0; half < 2; half++) {
                double hq = half ? hh / 2 : hh, f[7] = {0}, fmaxabs = 0;
                for (int q = -3; q <= 3; q++) {
                    if (!q) continue;
                    for (size_t j = 0; j < t->numel; j++) p[j] = save[j] + (real)(q * hq) * dir[j];
                    model_forward(&m, x, y, 2, 9, c.L, FWD_TRAIN);
                    f[q + 3] = model_objective(&m);
                    if (fabs(f[q + 3]) > fmaxabs) fmaxabs = fabs(f[q + 3]);
                }
                est[half] = (45 * (f[4] - f[2]) - 9 * (f[5] - f[1]) + (f[6] - f[0])) / (60 * hq);
                // the round-off of that difference: the loss's own (a few ulps of the largest |f|)
                // through the stencil's weights (110/60 over h); a difference below it says nothing,
                // so the relative error is taken against at least noise / bar (a fixed 1e-5 floor
                // failed a small but right directional derivative at 2e-11 apart: QA, session 24)
                nz[half] = 110.0 / 60.0 / hq * 4 * (sizeof(real) == 8 ? 2.2e-16 : 1.2e-7) * fmaxabs;
            }
            num = est[0];
            noise = nz[0];
            smooth = fabs(est[0] - est[1]) <= tol * fmax(fmax(fabs(est[0]), fabs(est[1])), nz[1] / tol);
        }
        memcpy(p, save, sizeof(real) * t->numel);
        free(save);
        if (noise > worst_noise) worst_noise = noise;
        double rel = fabs(an - num) / fmax(fmax(fabs(an), fabs(num)), fmax(noise / tol, 1e-300));
        nkink += !smooth;
        if (!smooth) rel = 0;  // (not compared: said on the row)
        if (rel > worst) worst = rel;
        int pass = rel <= tol, none = an == 0 && num == 0;
        if (!pass) *ok = 0;
        nzero += none;
        // (no gradient either way: an arm that is off, or lam_max=0 for the tables; nothing was
        // compared, so not called "ok")
        char na[64] = "n/a: no gradient";
        int arm = param_arm(i);
        if (arm >= 0 && !arms_on[arm]) snprintf(na, sizeof na, "n/a: its arm (%s) is off", dm_arm_names[arm]);
        fprintf(out, "  %-16s analytic %+.9e numeric %+.9e rel %.2e %s\n", t->name, an, num, rel,
                !smooth ? "n/a: the loss is not smooth here (a routing switch or the gate's cap within the stencil)"
                : !pass ? "FAIL" : none ? na : "ok");
    }
    if (nzero) fprintf(out, "%d tensor%s had no gradient to compare\n", nzero, nzero == 1 ? "" : "s");
    if (nkink) fprintf(out, "%d tensor%s not compared: the loss is not smooth within +-3h of these weights (the per-entry check of "
                       "tests/test_model.c skips such entries the same way)\n", nkink, nkink == 1 ? "" : "s");
    fprintf(out, "worst %.2e (bar %.0e; round-off of a difference at most %.1e)%s\n", worst, tol, worst_noise,
#ifdef DM_DOUBLE
            ""
#else
            " — float build: for the 1e-6 check run the double build (make DM_REAL=double dmsh; build/double/dmsh -e ':check grad')"
#endif
    );
    free(g); free(dir);
    model_free(&m);
    return 0;
}
