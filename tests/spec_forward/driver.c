// driver.c — dump a perturbed tiny dormouse model, fixed inputs, and the C engine's losses.
// usage: driver OUTPREFIX [key=value ...] [off=ARM ...] [noise_seed=N]
//   writes OUTPREFIX.params (tensors), OUTPREFIX.c (results), OUTPREFIX.acts (activations)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/model.h"
#include "engine/rng.h"
#include "tests/spec_common.h"

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: driver OUTPREFIX [key=value] [off=ARM]\n"); return 2; }
    const char *pre = argv[1];
    Config c; dm_err err = {0};
    if (spec_tiny_config(&c, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    uint64_t noise_seed = 12345;
    int offs[ARM_COUNT] = {0};
    const char *zeros[8]; int nzero = 0;   // zero=TENSOR: set a tensor to 0 after the noise (ties)
    double alpha = 0.8;
    for (int i = 2; i < argc; i++) {
        char kv[256]; snprintf(kv, sizeof kv, "%s", argv[i]);
        char *eq = strchr(kv, '=');
        if (!eq) { fprintf(stderr, "bad arg %s\n", argv[i]); return 2; }
        *eq = 0;
        if (!strcmp(kv, "off")) {
            int a = arms_find(eq + 1);
            if (a < 0) { fprintf(stderr, "unknown arm %s\n", eq + 1); return 2; }
            offs[a] = 1;
        } else if (!strcmp(kv, "zero")) {
            if (nzero < 8) zeros[nzero++] = argv[i] + 5;
        } else if (!strcmp(kv, "alpha")) {
            alpha = strtod(eq + 1, NULL);
        } else if (!strcmp(kv, "noise_seed")) {
            noise_seed = strtoull(eq + 1, NULL, 10);
        } else if (config_set(&c, kv, eq + 1, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    }
    if (config_validate(&c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    Model m;
    if (model_create(&m, &c, backend_cpu(), 7, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    for (int a = 0; a < ARM_COUNT; a++) if (offs[a]) m.arms.on[a] = 0;

    // perturb every parameter: noise of half the tensor's rms (at least 0.15), alpha well away from 0
    real *P = malloc(sizeof(real) * m.n_params);
    model_params_get(&m, P);
    spec_perturb(&m, P, noise_seed);
    P[m.t[P_ALPHA].offset] = (real)alpha;
    for (int z = 0; z < nzero; z++) {
        int t = model_find_param(&m, zeros[z]);
        if (t < 0) { fprintf(stderr, "unknown tensor %s\n", zeros[z]); return 2; }
        memset(P + m.t[t].offset, 0, sizeof(real) * m.t[t].numel);
    }
    model_params_put(&m, P);

    FILE *f = NULL;
    char fn[512];
    snprintf(fn, sizeof fn, "%s.params", pre);
    f = fopen(fn, "w");
    fprintf(f, "config d %d H %d L %d E %d k %d r %d f %d rows %lld dim %d n_orders %d orders",
            c.d, c.H, c.L, c.E, c.k, c.r, c.f, (long long)c.engram_rows, c.engram_dim, c.n_orders);
    for (int i = 0; i < c.n_orders; i++) fprintf(f, " %d", c.engram_orders[i]);
    fprintf(f, " loss_final %d lam_max %.17g g_min %.17g moe_aux %.17g kda_chunk %d\n", c.loss_final, c.lam_max,
            c.g_min, c.moe_aux, c.kda_chunk);
    fprintf(f, "arms");
    for (int a = 0; a < ARM_COUNT; a++) fprintf(f, " %s %d", dm_arm_names[a], m.arms.on[a]);
    fprintf(f, "\n");
    for (int t = 0; t < P_COUNT; t++) {
        ParamTensor *pt = &m.t[t];
        fprintf(f, "tensor %s %d", pt->name, pt->ndim);
        for (int j = 0; j < pt->ndim; j++) fprintf(f, " %d", pt->shape[j]);
        fprintf(f, "\n");
        dump_arr(f, "v", P + pt->offset, pt->numel);
    }
    // inputs: fixed bytes, including high bytes and repeats (so engram rows repeat)
    int B = c.batch, T = c.seq, N = B * T;
    const unsigned char src[] = "the cat \xff\x80 the cat sat\x00 on\xc3\xa9 the mat, the cat";
    int *x = malloc(sizeof(int) * N), *y = malloc(sizeof(int) * N);
    int srclen = (int)sizeof src - 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int o = (b * 11 + t) % (srclen - 1);
            x[b * T + t] = src[o];
            y[b * T + t] = src[o + 1];
        }
    fprintf(f, "input %d %d\n", B, T);
    for (int i = 0; i < N; i++) fprintf(f, "%d ", x[i]);
    fprintf(f, "\n");
    for (int i = 0; i < N; i++) fprintf(f, "%d ", y[i]);
    fprintf(f, "\n");
    fclose(f);

    snprintf(fn, sizeof fn, "%s.c", pre);
    f = fopen(fn, "w");
    model_forward(&m, x, y, B, T, c.L, FWD_ALL_DEPTHS);
    for (int i = 0; i < c.L; i++) fprintf(f, "depth_loss %d %.17g\n", i + 1, m.depth_loss[i]);
    // activations of this forward
    {
        char fa[512]; snprintf(fa, sizeof fa, "%s.acts", pre);
        FILE *g = fopen(fa, "w");
        int d = c.d, O = c.n_orders, De = c.engram_dim, E = c.E;
        dump_arr(g, "h0", m.acts.h0, (size_t)N * d);
        dump_arr(g, "m", m.acts.m, (size_t)N * O * De);
        if (m.arms.on[ARM_ENGRAM]) { dump_arr(g, "key", m.acts.key, (size_t)N * d); dump_arr(g, "val", m.acts.val, (size_t)N * d); }
        for (int i = 0; i < c.L; i++) {
            IterActs *t = &m.acts.it[i];
            char nm[64];
#define D(field, cnt) do { snprintf(nm, sizeof nm, "%s.%d", #field, i + 1); dump_arr(g, nm, t->field, (size_t)N * (cnt)); } while (0)
            D(u, d); D(n, d); D(ctrl, 3); D(z, E);
            if (m.arms.on[ARM_KDA]) { D(q, d); D(k, d); D(v, d); D(beta, c.H); D(g, d); D(o, d); D(og, d); D(a, d); }
            if (m.arms.on[ARM_ENGRAM]) { D(mgate, 1); D(e, d); }
            if (m.arms.on[ARM_MOE]) D(gout, d);
            D(body, d); D(h, d); D(y, d); D(ybar, d); D(losses, 1);
#undef D
        }
        fclose(g);
    }
    double l1 = model_forward(&m, x, y, B, T, 1, FWD_LAST);
    fprintf(f, "depth1_last %.17g\n", l1);
    double lt = model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
    fprintf(f, "train_loss %.17g\n", lt);
    fprintf(f, "last_aux %.17g\n", m.last_aux);
    fprintf(f, "objective %.17g\n", model_objective(&m));
    fclose(f);
    model_free(&m);
    free(P); free(x); free(y);
    return 0;
}
