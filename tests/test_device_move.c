// test_device_move.c — `:device` and `:check parity` through the engine, on the CPU: the fenced
// CPU backend (tests/fenced_backend.h) stands in for a second device. A live model moved between
// backends mid-run must train on exactly as if it had stayed (bit for bit), and the parity check
// must report 0 between two exact backends and catch a backend with one wrong op.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "fenced_backend.h"
#include "../engine/engine.h"
#include "../engine/parity.h"
#include "../engine/probe.h"
#include "../kernels/cpu/blas.h"

// A small structured corpus in a temp file (tests must not need ../shared)
static void make_corpus(char *path, size_t n) {
    snprintf(path, n, "/tmp/dmsh_move_%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 3000; i++) fprintf(f, "the %d-th line says %s.\n", i, i % 3 ? "hello" : "goodbye");
    fclose(f);
}

static void small_engine(Engine *e, const char *corpus) {
    dm_err err = {0};
    engine_init(e);
    assert_int_equal(config_preset(&e->cfg, "nano", &err), 0);
    e->cfg.d = 32; e->cfg.H = 2; e->cfg.f = 64; e->cfg.r = 8; e->cfg.seq = 24; e->cfg.batch = 3;
    e->cfg.kda_chunk = 8; e->cfg.engram_rows = 97; e->cfg.warmup = 2;
    assert_int_equal(engine_open_data(e, corpus, NULL, &err), 0);
}

static real *params_of(Engine *e) {
    real *h = malloc(sizeof(real) * e->model.n_params);
    e->model.be->download(h, e->model.params, sizeof(real) * e->model.n_params);
    return h;
}

// 2 steps on the CPU, move to the fenced backend, 3 steps, back to the CPU, 1 step == 6 steps
// on the CPU: losses and every parameter bit for bit; the step counter and rows carry over.
static void test_move_live_model(void **s) {
    (void)s;
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    dm_err err = {0};
    Engine a, b;
    small_engine(&a, corpus);
    small_engine(&b, corpus);
    assert_int_equal(engine_build(&a, 11, &err), 0);
    assert_int_equal(engine_build(&b, 11, &err), 0);
    MetricRow ra, rb;
    double la[6], lb[6];
    for (int i = 0; i < 6; i++) { assert_int_equal(engine_step(&a, &ra, &err), 0); la[i] = ra.loss; }
    for (int i = 0; i < 6; i++) {
        if (i == 2) assert_int_equal(engine_set_device(&b, fenced_backend(), "fenced", &err), 0);
        if (i == 5) {
            assert_int_equal(engine_set_device(&b, backend_cpu(), "cpu", &err), 0);
            // the weights moved, the last forward's activations did not: a probe says so
            double *v = NULL;
            ProbeInfo info;
            assert_int_equal(probe_get(&b, "h@1", &v, &info, &err), 1);
            assert_non_null(strstr(err.msg, "did not move with the model"));
            assert_int_equal(probe_get(&b, "emb", &v, &info, &err), 0);  // parameters did
            free(v);
        }
        assert_int_equal(engine_step(&b, &rb, &err), 0);
        lb[i] = rb.loss;
        if (i == 2) assert_string_equal(b.model.be->name, "cpu-fenced");
    }
    assert_memory_equal(la, lb, sizeof la);
    assert_int_equal(a.step, b.step);
    assert_int_equal(a.nrows, b.nrows);
    real *pa = params_of(&a), *pb = params_of(&b);
    assert_memory_equal(pa, pb, sizeof(real) * a.model.n_params);
    free(pa); free(pb);
    engine_free(&a);
    engine_free(&b);
    unlink(corpus);
}

// Before :init the choice is only recorded: :init builds there.
static void test_device_before_init(void **s) {
    (void)s;
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    dm_err err = {0};
    Engine e;
    small_engine(&e, corpus);
    char why[200];
    assert_true(fenced_backend_complete(fenced_backend(), why, sizeof why));  // every entry is wrapped
    assert_int_equal(engine_set_device(&e, fenced_backend(), "fenced", &err), 0);
    assert_int_equal(e.live, 0);
    assert_int_equal(engine_build(&e, 3, &err), 0);
    assert_string_equal(e.model.be->name, "cpu-fenced");
    MetricRow r;
    assert_int_equal(engine_step(&e, &r, &err), 0);
    engine_free(&e);
    unlink(corpus);
}

// A backend whose silu is slightly wrong: parity must fail and name a tensor.
static Backend broken;
static void bad_silu_rows(real *out, real *sg, const real *in, int ldx, int N, int C) {
    backend_cpu()->silu_rows_forward(out, sg, in, ldx, N, C);
    out[0] *= (real)1.01;
}

// ... and one whose gain gradient has a single NaN: parity must fail on it (a max over |a - b|
// with fmax would skip the NaN and call the tensors equal)
static void nan_gain_rmsnorm_backward(real *dinp, real *dgain, const real *dout, const real *inp, const real *gain,
                                      const real *rstd, int N, int C) {
    backend_cpu()->rmsnorm_backward(dinp, dgain, dout, inp, gain, rstd, N, C);
    if (dgain) dgain[0] = (real)NAN;
}

static void test_parity(void **s) {
    (void)s;
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    dm_err err = {0};
    Engine e;
    small_engine(&e, corpus);
    assert_int_equal(engine_build(&e, 5, &err), 0);
    MetricRow r;
    ParityReport rep;
    // at the initialisation ReZero's alpha is 0: the arms' tensors have zero gradients on both
    // sides, and the report counts them (a row of zeros compares nothing); alpha's own does not
    assert_int_equal(engine_check_parity(&e, backend_cpu(), fenced_backend(), 0, 0, 1e-4, 0, &rep, &err), 0);
    print_message("parity at init: %d of %d tensors zero on both sides\n", rep.nzero, rep.nrows);
    assert_true(rep.nzero > 10);
    for (int i = 0; i < rep.nrows; i++)
        if (!strcmp(rep.rows[i].name, "alpha")) assert_false(rep.rows[i].zero);
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step(&e, &r, &err), 0);  // trained weights
    assert_int_equal(engine_check_parity(&e, backend_cpu(), fenced_backend(), 0, 0, 1e-4, 0, &rep, &err), 0);
    print_message("parity cpu vs fenced: worst %.2e (%s), %d tensors\n", rep.worst, rep.worst_name, rep.nrows);
    assert_true(rep.ok);
    assert_true(rep.worst == 0);  // two exact backends: identical
    assert_true(rep.nrows > 20);
    assert_int_equal(rep.nzero, 0);  // trained: every tensor has a gradient to compare
    assert_int_equal(rep.route_moved, 0);  // identical arithmetic: identical routing
    // a bf16 device's reference: the CPU rounds the operands of the products the device rounds
    // (the fenced "device" here computes in fp32 after it, so the two must now differ, by bf16's
    // rounding and no more); a double build has no bf16 emulation and says so
    int rc16 = engine_check_parity(&e, backend_cpu(), fenced_backend(), 0, 0, 3e-2, 1, &rep, &err);
#ifdef DM_DOUBLE
    assert_int_equal(rc16, 1);
    assert_non_null(strstr(err.msg, "precision=fp32"));
#else
    assert_int_equal(rc16, 0);
    print_message("parity bf16-emulating cpu vs fp32: loss rel %.2e, worst %.2e (%s)\n", rep.loss_rel, rep.worst, rep.worst_name);
    assert_true(rep.worst > 1e-5);
    assert_true(rep.loss_rel > 0 && rep.loss_rel < 1e-2);
    assert_int_equal(dm_emulate_bf16, 0);  // off again after the reference ran
#endif
    broken = *backend_cpu();
    broken.silu_rows_forward = bad_silu_rows;
    assert_int_equal(engine_check_parity(&e, backend_cpu(), &broken, 2, 16, 1e-4, 0, &rep, &err), 0);
    print_message("parity cpu vs broken silu: worst %.2e (%s)\n", rep.worst, rep.worst_name);
    assert_false(rep.ok);
    assert_true(rep.worst > 1e-4);
    broken = *backend_cpu();
    broken.rmsnorm_backward = nan_gain_rmsnorm_backward;
    assert_int_equal(engine_check_parity(&e, backend_cpu(), &broken, 2, 16, 1e-4, 0, &rep, &err), 0);
    print_message("parity cpu vs a NaN in a gain gradient: worst %.2e (%s)\n", rep.worst, rep.worst_name);
    assert_false(rep.ok);
    assert_true(isinf(rep.worst));
    engine_free(&e);
    unlink(corpus);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_move_live_model),
        cmocka_unit_test(test_device_before_init),
        cmocka_unit_test(test_parity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
