// gradcheck.c — :check grad: a finite-difference check of every parameter group on a tiny
// model with the live model's arms, using random directions per tensor (the full per-entry
// check lives in tests/test_model.c). In the double build (make DM_REAL=double) the bar is
// 1e-6; in float, round-off limits what differences can show, so the bar is 1e-2 and the
// output says to use the double build for the real check.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "engine.h"
#include "rng.h"

int engine_check_grad(Engine *e, const int *arms_on, FILE *out, int *ok, dm_err *err) {
    (void)e;
    Config c;
    config_defaults(&c);
    c.d = 8; c.H = 2; c.L = 3; c.E = 3; c.k = 2; c.r = 2; c.f = 6;
    c.engram_rows = 13; c.engram_dim = 3; c.seq = 9; c.batch = 2; c.kda_chunk = 4; c.moe_aux = 0.3;
    Model m;
    if (model_create(&m, &c, backend_cpu(), 7, err)) return 1;
    for (int a = 0; a < ARM_COUNT; a++) m.arms.on[a] = arms_on[a];
    Rng r = {12345};
    for (size_t j = 0; j < m.n_params; j++) m.params[j] = (real)(0.35 * rng_normal(&r));
    m.params[m.t[P_ALPHA].offset] = (real)0.5;
    int x[18], y[18];
    for (int i = 0; i < 18; i++) { x[i] = (int)(rng_next(&r) % 7) * 37 % 256; y[i] = (int)(rng_next(&r) % 256); }
    model_forward(&m, x, y, 2, 9, c.L, FWD_TRAIN);
    model_backward(&m);
    real *g = mallocCheck(sizeof(real) * m.n_params), *dir = mallocCheck(sizeof(real) * m.n_params);
    memcpy(g, m.grads, sizeof(real) * m.n_params);
#ifdef DM_DOUBLE
    const double tol = 1e-6, h = 1e-4;
#else
    const double tol = 1e-2, h = 1e-2;
#endif
    double worst = 0;
    *ok = 1;
    fprintf(out, "gradient check (%s, one random direction per tensor, 6th-order central differences, rel = |a-n|/max(|a|,|n|,1e-5)), arms off:", REAL_NAME);
    int noff = 0;
    for (int a = 0; a < ARM_COUNT; a++) if (!arms_on[a]) { fprintf(out, " %s", dm_arm_names[a]); noff++; }
    fprintf(out, "%s\n", noff ? "" : " none");
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m.t[i];
        real *p = m.params + t->offset;
        double an = 0;
        for (size_t j = 0; j < t->numel; j++) { dir[j] = (real)rng_normal(&r); an += (double)dir[j] * g[t->offset + j]; }
        double f[7];
        real *save = mallocCheck(sizeof(real) * t->numel);
        memcpy(save, p, sizeof(real) * t->numel);
        for (int q = -3; q <= 3; q++) {
            if (!q) continue;
            for (size_t j = 0; j < t->numel; j++) p[j] = save[j] + (real)(q * h) * dir[j];
            model_forward(&m, x, y, 2, 9, c.L, FWD_TRAIN);
            f[q + 3] = model_objective(&m);
        }
        memcpy(p, save, sizeof(real) * t->numel);
        free(save);
        double num = (45 * (f[4] - f[2]) - 9 * (f[5] - f[1]) + (f[6] - f[0])) / (60 * h);
        double rel = fabs(an - num) / fmax(fmax(fabs(an), fabs(num)), 1e-5);
        if (rel > worst) worst = rel;
        int pass = rel <= tol;
        if (!pass) *ok = 0;
        fprintf(out, "  %-16s analytic %+.9e numeric %+.9e rel %.2e %s\n", t->name, an, num, rel, pass ? "ok" : "FAIL");
    }
    fprintf(out, "worst %.2e (bar %.0e)%s\n", worst, tol,
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
