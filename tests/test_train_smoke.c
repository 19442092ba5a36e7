// test_train_smoke.c — the pieces train together: a tiny dormouse model learns a repeating
// byte pattern under plain SGD and under the real optimizer (Muon + AdamW + Adam tables); and
// the model-FLOPs count used by the benchmarks (engine/flops.c).
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../engine/model.h"
#include "../engine/optim.h"

static const char PATTERN[] = "the quick brown fox ";

static Config smoke_config(void) {
    Config c;
    config_defaults(&c);
    c.d = 32; c.H = 2; c.L = 2; c.E = 2; c.k = 1; c.r = 8; c.f = 64;
    c.engram_rows = 257; c.engram_dim = 8;
    c.seq = 32; c.batch = 4;
    return c;
}

// Each row is the pattern cycled from a random phase; targets are the next byte.
static void pattern_batch(int *x, int *y, int B, int T, Rng *r) {
    int P = (int)strlen(PATTERN);
    for (int b = 0; b < B; b++) {
        int ph = (int)(rng_next(r) % (uint64_t)P);
        for (int t = 0; t < T; t++) {
            x[b * T + t] = (unsigned char)PATTERN[(ph + t) % P];
            y[b * T + t] = (unsigned char)PATTERN[(ph + t + 1) % P];
        }
    }
}

// ~1 s per test in either build (float and double) on one core.
#define SMOKE_STEPS 150

// Trains `steps` steps; returns the first step's loss in *l0 and the mean of the last 5 in *l1.
static void train(int use_optim, int steps, double lr, double *l0, double *l1) {
    Config c = smoke_config();
    if (use_optim) { c.warmup = 10; c.lr = 3e-3; c.lr_muon = 0.02; c.steps = steps; }
    Model m;
    dm_err err = {0};
    assert_int_equal(model_create(&m, &c, backend_cpu(), 1234, &err), 0);
    Optim o;
    if (use_optim) assert_int_equal(optim_create(&o, &m, &err), 0);
    int B = c.batch, T = c.seq;
    int *x = malloc(sizeof(int) * B * T), *y = malloc(sizeof(int) * B * T);
    Rng r = {42};
    double tail = 0;
    for (int s = 0; s < steps; s++) {
        pattern_batch(x, y, B, T, &r);
        double loss = model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
        assert_true(isfinite(loss));
        if (s == 0) *l0 = loss;
        if (s >= steps - 5) tail += loss / 5;
        model_backward(&m);
        if (use_optim) {
            StepInfo info;
            assert_int_equal(optim_step(&o, &m, s, model_objective(&m), &info, &err), 0);
            assert_int_equal(info.skipped, 0);
        } else {
            for (size_t i = 0; i < m.n_params; i++) m.params[i] -= (real)lr * m.grads[i];
        }
    }
    *l1 = tail;
    free(x); free(y);
    if (use_optim) optim_free(&o);
    model_free(&m);
}

static void test_sgd_learns_pattern(void **state) {
    (void)state;
    double l0, l1;
    train(0, SMOKE_STEPS, 0.1, &l0, &l1);
    print_message("sgd: loss %.4f -> %.4f over %d steps\n", l0, l1, SMOKE_STEPS);
    assert_true(l0 > 5.0 && l0 < 6.0);   // ~ ln 256 at init
    assert_true(l1 < 0.25 * l0);   // seen: 5.54 -> 0.35
}

static void test_optim_learns_pattern(void **state) {
    (void)state;
    double l0, l1;
    train(1, SMOKE_STEPS, 0, &l0, &l1);
    print_message("optim: loss %.4f -> %.4f over %d steps\n", l0, l1, SMOKE_STEPS);
    assert_true(l0 > 5.0 && l0 < 6.0);
    assert_true(l1 < 0.15 * l0);   // seen: 5.54 -> 0.11
}

// ---- model FLOPs ----------------------------------------------------------------------------

static void test_flops(void **state) {
    (void)state;
    Config c;
    dm_err err = {0};
    assert_int_equal(config_preset(&c, "nano", &err), 0);
    // nano by hand (d=128 H=2 dh=64 L=2 E=2 k=1 r=32 f=512, 3 orders x 16), multiply-adds/token:
    //   per iteration: ctrl 3*128 + outproj 128^2 = 16768
    //     KDA: 4*128^2 + W_b 2*128 + low rank 4*128*64 + core 3*2*64^2 = 123136
    //     MoE: router 2*128 + 1 * 2*32*(128+512) = 41216            -> 181120 x L=2 = 362240
    //   head (loss=rec: both iterations) 2*256*128 = 65536; Engram key/val 2*48*128 = 12288
    //   = 440064 MACs/token; x 2 FLOPs x 3 (fwd+bwd) x B*T = 8*128.
    double hand = 440064.0 * 6 * 8 * 128;
    double f = model_flops_per_step(&c, 8, 128, NULL);
    // exact (a sum of integers far below 2^53): a dropped router E d (0.12 %) or controller 3 d
    // (0.17 %) would hide under a loose tolerance
    assert_true(fabs(f - hand) / hand < 1e-12);
    // linear in B and in T
    assert_true(fabs(model_flops_per_step(&c, 16, 128, NULL) - 2 * f) <= 1e-9 * f);
    assert_true(fabs(model_flops_per_step(&c, 8, 256, NULL) - 2 * f) <= 1e-9 * f);
    // all-on arms = NULL; every arm off that has compute lowers it; the others do not change it
    Arms arms;
    arms_init(&arms);
    assert_true(model_flops_per_step(&c, 8, 128, &arms) == f);
    int costly[] = {ARM_KDA, ARM_ENGRAM, ARM_MOE};
    for (int i = 0; i < 3; i++) {
        arms_init(&arms);
        arms.on[costly[i]] = 0;
        assert_true(model_flops_per_step(&c, 8, 128, &arms) < f);
    }
    arms_init(&arms);
    arms.on[ARM_KDA] = 0;
    // KDA off removes exactly its 123136 MACs x L
    assert_true(fabs(f - model_flops_per_step(&c, 8, 128, &arms) - 123136.0 * 2 * 6 * 1024) <= 1e-9 * f);
    // MoE off removes exactly its 41216 MACs x L (router and experts)
    arms_init(&arms);
    arms.on[ARM_MOE] = 0;
    assert_true(fabs(f - model_flops_per_step(&c, 8, 128, &arms) - 41216.0 * 2 * 6 * 1024) <= 1e-9 * f);
    int free_arms[] = {ARM_REZERO, ARM_RETRACT, ARM_AUX};
    for (int i = 0; i < 3; i++) {
        arms_init(&arms);
        arms.on[free_arms[i]] = 0;
        assert_true(model_flops_per_step(&c, 8, 128, &arms) == f);
    }
    // loss=final scores one head instead of L
    c.loss_final = 1;
    assert_true(fabs(f - model_flops_per_step(&c, 8, 128, NULL) - 256.0 * 128 * 6 * 1024) <= 1e-9 * f);
    // mini by hand too: nano has k=1 and H=2, so a term that drops k or writes 2 for H (or d/2
    // for dh) is exact there; mini has k=2, H=4 (configs/mini.dm: d=256 H=4 dh=64 L=4 E=4 k=2
    // r=64 f=1024, 3 orders x 32), multiply-adds/token:
    //   per iteration: ctrl 3*256 + outproj 256^2 = 66304
    //     KDA: 4*256^2 + W_b 4*256 + low rank 4*256*64 + core 3*4*64^2 = 377856
    //     MoE: router 4*256 + 2 * 2*64*(256+1024) = 328704           -> 772864 x L=4 = 3091456
    //   head (loss=rec: all 4 iterations) 4*256*256 = 262144; Engram key/val 2*96*256 = 49152
    //   = 3402752 MACs/token
    Config mini;
    assert_int_equal(config_preset(&mini, "mini", &err), 0);
    double fm = model_flops_per_step(&mini, 8, 128, NULL), hm = 3402752.0 * 6 * 8 * 128;
    assert_true(fabs(fm - hm) / hm < 1e-12);
    // and its MoE (328704 x 4) and KDA (377856 x 4) terms come off exactly
    arms_init(&arms);
    arms.on[ARM_MOE] = 0;
    assert_true(fabs(fm - model_flops_per_step(&mini, 8, 128, &arms) - 328704.0 * 4 * 6 * 1024) <= 1e-9 * fm);
    arms_init(&arms);
    arms.on[ARM_KDA] = 0;
    assert_true(fabs(fm - model_flops_per_step(&mini, 8, 128, &arms) - 377856.0 * 4 * 6 * 1024) <= 1e-9 * fm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_sgd_learns_pattern),
        cmocka_unit_test(test_optim_learns_pattern),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
