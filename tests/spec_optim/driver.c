// driver.c — one optimizer step of the C engine (double), dumped for the independent SPEC §4
// check (optim_ref.py): a perturbed tiny dormouse model takes `pre` real training steps (so the
// Adam moments, Muon momentum and per-row table step counts are non-trivial and mixed), then for
// the next step it writes the config, every tensor (name, shape, the engine's optimizer group),
// the parameters, the step's gradients as the backward left them (before any clipping) and the
// optimizer state BEFORE, then everything AFTER optim_step, and the StepInfo the engine reported.
//
// usage: driver OUTFILE [key=value ...] [off=ARM ...] [pre=N] [start=S] [noise_seed=N]
//                 [nan=TENSOR] [nanloss=1] [retract=0|1]
//   pre     training steps before the dumped one (default 3), at steps start .. start+pre-1
//   start   the schedule step index of the first of them (default 0); the dumped step is start+pre
//   nan     put a NaN into TENSOR's gradient of the dumped step (the firewall must skip it)
//   nanloss pass a NaN loss to the dumped step
//   retract 0 (default): the retract arm is off for the dumped step, so AFTER is the optimizer
//           update alone; 1: the step's polar retraction of U, V is part of AFTER
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "tests/spec_common.h"

static void dump_i64(FILE *f, const char *name, const int64_t *p, size_t n) {
    fprintf(f, "%s %zu", name, n);
    for (size_t i = 0; i < n; i++) fprintf(f, " %lld", (long long)p[i]);
    fprintf(f, "\n");
}

static const char *group_name(OptGroup g) {
    switch (g) {
    case GROUP_MUON: return "muon";
    case GROUP_ADAMW: return "adamw";
    case GROUP_ADAMW_1D: return "adamw_1d";
    case GROUP_TABLE: return "table";
    }
    return "?";
}

// a batch for step s: fixed bytes with repeats (so Engram rows repeat), shifted per step so the
// table rows read differ from step to step (mixed per-row update counts)
static void batch_for(int s, int B, int T, int *x, int *y) {
    const unsigned char src[] = "the cat \xff\x80 the cat sat\x00 on\xc3\xa9 the mat, the cat; a dog ran by the cat";
    int srclen = (int)sizeof src - 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int o = (b * 11 + t + 5 * s) % (srclen - 1);
            x[b * T + t] = src[o];
            y[b * T + t] = src[o + 1];
        }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: driver OUTFILE [key=value] [off=ARM]\n"); return 2; }
    const char *out = argv[1];
    Config c; dm_err err = {0};
    // the tiny base config (spec_forward's), and optimizer settings that move the weights visibly
    static const char *const opt_keys[] = {"lr=0.01", "lr_muon=0.05", "warmup=3", "steps=12", NULL};
    if (spec_tiny_config(&c, opt_keys, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    uint64_t noise_seed = 12345;
    int offs[ARM_COUNT] = {0};
    int pre = 3, start = 0, nanloss = 0, retract = 0;
    const char *nan_tensor = NULL;
    for (int i = 2; i < argc; i++) {
        char kv[256]; snprintf(kv, sizeof kv, "%s", argv[i]);
        char *eq = strchr(kv, '=');
        if (!eq) { fprintf(stderr, "bad arg %s\n", argv[i]); return 2; }
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(kv, "off")) {
            int a = arms_find(v);
            if (a < 0) { fprintf(stderr, "unknown arm %s\n", v); return 2; }
            offs[a] = 1;
        } else if (!strcmp(kv, "pre")) pre = atoi(v);
        else if (!strcmp(kv, "start")) start = atoi(v);
        else if (!strcmp(kv, "nan")) nan_tensor = argv[i] + 4;
        else if (!strcmp(kv, "nanloss")) nanloss = atoi(v);
        else if (!strcmp(kv, "retract")) retract = atoi(v);
        else if (!strcmp(kv, "noise_seed")) noise_seed = strtoull(v, NULL, 10);
        else if (config_set(&c, kv, v, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    }
    if (config_validate(&c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    Model m;
    if (model_create(&m, &c, backend_cpu(), 7, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    for (int a = 0; a < ARM_COUNT; a++) if (offs[a]) m.arms.on[a] = 0;

    // perturb every parameter off its special initial value (as spec_forward does)
    size_t n = m.n_params;
    real *P = malloc(sizeof(real) * n);
    model_params_get(&m, P);
    spec_perturb(&m, P, noise_seed);
    P[m.t[P_ALPHA].offset] = (real)0.8;
    model_params_put(&m, P);

    Optim o;
    if (optim_create(&o, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int B = c.batch, T = c.seq, N = B * T;
    int *x = malloc(sizeof(int) * N), *y = malloc(sizeof(int) * N);
    StepInfo info;
    int64_t step = start;
    for (int i = 0; i < pre; i++, step++) {   // real training steps (retraction on, as configured)
        batch_for((int)step, B, T, x, y);
        model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
        model_backward(&m);
        if (optim_step(&o, &m, step, model_objective(&m), &info, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    }

    // the dumped step
    if (!retract) m.arms.on[ARM_RETRACT] = 0;
    batch_for((int)step, B, T, x, y);
    model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
    model_backward(&m);
    double loss = nanloss ? NAN : model_objective(&m);
    if (nan_tensor) {   // CPU backend: the gradients are host memory
        int t = model_find_param(&m, nan_tensor);
        if (t < 0) { fprintf(stderr, "unknown tensor %s\n", nan_tensor); return 2; }
        m.grads[m.t[t].offset + m.t[t].numel / 2] = (real)NAN;
    }
    size_t nrs = (size_t)c.n_orders * (size_t)c.engram_rows;
    real *G = malloc(sizeof(real) * n);
    real *M0 = malloc(sizeof(real) * n), *V0 = malloc(sizeof(real) * n), *U0 = malloc(sizeof(real) * n);
    real *P1 = malloc(sizeof(real) * n), *M1 = malloc(sizeof(real) * n), *V1 = malloc(sizeof(real) * n),
         *U1 = malloc(sizeof(real) * n);
    int64_t *RS0 = malloc(sizeof(int64_t) * nrs), *RS1 = malloc(sizeof(int64_t) * nrs);
    model_params_get(&m, P);
    model_grads_get(&m, G);
    optim_state_get(&o, &m, M0, V0, U0, RS0);
    int64_t t0 = o.t;
    if (optim_step(&o, &m, step, loss, &info, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    model_params_get(&m, P1);
    optim_state_get(&o, &m, M1, V1, U1, RS1);

    FILE *f = fopen(out, "w");
    if (!f) { perror(out); return 1; }
    fprintf(f, "config opt %s muon_colrow %d lr %.17g lr_muon %.17g beta1 %.17g beta2 %.17g eps %.17g wd %.17g"
               " muon_momentum %.17g warmup %d lr_schedule %s lr_min_frac %.17g steps %lld clip %.17g"
               " retract_iters %d retract_every %d\n",
            c.opt_adamw ? "adamw" : "mix", c.muon_colrow, c.lr, c.lr_muon, c.beta1, c.beta2, c.eps, c.wd,
            c.muon_momentum, c.warmup, c.lr_cosine ? "cosine" : "constant", c.lr_min_frac, (long long)c.steps,
            c.clip, c.retract_iters, c.retract_every);
    fprintf(f, "model d %d H %d L %d E %d k %d r %d f %d rows %lld dim %d orders", c.d, c.H, c.L, c.E, c.k, c.r,
            c.f, (long long)c.engram_rows, c.engram_dim);
    for (int i = 0; i < c.n_orders; i++) fprintf(f, " %d", c.engram_orders[i]);
    fprintf(f, "\n");
    fprintf(f, "arms");
    for (int a = 0; a < ARM_COUNT; a++) fprintf(f, " %s %d", dm_arm_names[a], m.arms.on[a]);
    fprintf(f, "\n");
    fprintf(f, "step %lld t_before %lld t_after %lld loss %.17g\n", (long long)step, (long long)t0, (long long)o.t, loss);
    fprintf(f, "info lr %.17g lr_muon %.17g gnorm %.17g skipped %d retracted %d\n", info.lr, info.lr_muon, info.gnorm,
            info.skipped, info.retracted);
    fprintf(f, "input %d %d", B, T);
    for (int i = 0; i < N; i++) fprintf(f, " %d", x[i]);
    fprintf(f, "\n");
    for (int t = 0; t < P_COUNT; t++) {
        ParamTensor *pt = &m.t[t];
        fprintf(f, "tensor %s group %s ndim %d", pt->name, group_name(pt->group), pt->ndim);
        for (int j = 0; j < pt->ndim; j++) fprintf(f, " %d", pt->shape[j]);
        fprintf(f, "\n");
        size_t a = pt->offset, k = pt->numel;
        dump_arr(f, "p0", P + a, k);
        dump_arr(f, "g", G + a, k);
        dump_arr(f, "m0", M0 + a, k);
        dump_arr(f, "v0", V0 + a, k);
        dump_arr(f, "mom0", U0 + a, k);
        dump_arr(f, "p1", P1 + a, k);
        dump_arr(f, "m1", M1 + a, k);
        dump_arr(f, "v1", V1 + a, k);
        dump_arr(f, "mom1", U1 + a, k);
    }
    dump_i64(f, "row_steps0", RS0, nrs);
    dump_i64(f, "row_steps1", RS1, nrs);
    fclose(f);
    optim_free(&o);
    model_free(&m);
    free(P); free(G); free(M0); free(V0); free(U0); free(P1); free(M1); free(V1); free(U1); free(RS0); free(RS1);
    free(x); free(y);
    return 0;
}
