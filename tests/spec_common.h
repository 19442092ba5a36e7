// spec_common.h — what the two SPEC drivers (tests/spec_forward, tests/spec_optim) share: the
// tiny base config, the perturbation that moves every parameter off its special initial value,
// and the dump format of an array. Both build against the double engine library.
#pragma once
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "engine/model.h"
#include "engine/rng.h"

static void dump_arr(FILE *f, const char *name, const real *p, size_t n) {
    fprintf(f, "%s %zu", name, n);
    for (size_t i = 0; i < n; i++) fprintf(f, " %.17g", (double)p[i]);
    fprintf(f, "\n");
}

// nano's config with the tiny shapes (d=8, H=2, L=2, E=3, k=2, two Engram orders, two KDA chunks
// of 4 in a seq of 7), then the driver's own base keys (NULL-terminated "key=value" list, or NULL)
static int spec_tiny_config(Config *c, const char *const *more, dm_err *err) {
    if (config_preset(c, "nano", err)) return 1;
    static const char *const base[] = {"d=8", "H=2", "L=2", "E=3", "k=2", "r=2", "f=6", "engram_rows=31", "engram_dim=4",
                                       "engram_orders=2,3", "seq=7", "batch=2", "kda_chunk=4", NULL};
    for (int pass = 0; pass < 2; pass++) {
        const char *const *list = pass ? more : base;
        for (int i = 0; list && list[i]; i++) {
            char kv[128];
            snprintf(kv, sizeof kv, "%s", list[i]);
            char *eq = strchr(kv, '=');
            *eq = 0;
            if (config_set(c, kv, eq + 1, err)) return 1;
        }
    }
    return 0;
}

// every parameter of P (m's layout) plus noise of half its tensor's rms (at least 0.15)
static void spec_perturb(const Model *m, real *P, uint64_t noise_seed) {
    Rng r = {splitmix64(noise_seed)};
    for (int t = 0; t < P_COUNT; t++) {
        real *p = P + m->t[t].offset;
        size_t n = m->t[t].numel;
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (double)p[i] * p[i];
        double rms = sqrt(ss / n), sd = 0.5 * rms;
        if (sd < 0.15) sd = 0.15;
        for (size_t i = 0; i < n; i++) p[i] += (real)(sd * rng_normal(&r));
    }
}
