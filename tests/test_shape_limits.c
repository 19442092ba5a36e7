// test_shape_limits.c — the shapes the CUDA backend refuses (kernels/cuda/shape_limits.h, its
// Backend.shape_check) and how the engine asks (engine/model.c, model_shape_check), on the CPU:
// the formula at each of its boundaries, then a stand-in device (the CPU's ops with the CUDA
// backend's shape_check, its allocations counted) through the engine: a move, a :set batch=, an
// :init, the activations or :check parity past a limit is one error that names the limit and
// what to lower, nothing is allocated on the device for it, and the session goes on bit for bit
// as if it had not been asked. The CPU backend itself takes any shape.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "engine_fixture.h"
#include "../engine/engine.h"
#include "../engine/parity.h"
#include "../kernels/cuda/shape_limits.h"

static int check(int64_t B, int64_t T, int d, int H, int k, int r, int O, char *why) {
    BackendShape s = {B, T, d, H, 64, k, r, 4096, O};
    why[0] = 0;
    return cuda_shape_check(&s, why, 512);
}

static void test_formula(void **st) {
    (void)st;
    char why[512];
    // tokens x max(H, orders, k) <= 2^31 - 2^26 = 2080374784, the boundary reached through each
    assert_int_equal(check(1, 693458261, 128, 2, 1, 32, 3, why), 0);  // floor(2080374784 / 3): orders
    assert_int_equal(check(1, 693458262, 128, 2, 1, 32, 3, why), 1);
    assert_string_equal(why, "batch x seq = 693458262 tokens is more than the CUDA kernels index (at most 693458261 with "
                             "H=2, 3 engram orders, k=1: tokens x max(H, orders, k) <= 2^31 - 2^26): lower batch or seq");
    assert_int_equal(check(1984, 1024, 1024, 1024, 2, 32, 3, why), 0);  // 2031616 tokens x 1024 heads
    assert_int_equal(check(1985, 1024, 1024, 1024, 2, 32, 3, why), 1);
    assert_non_null(strstr(why, "(at most 2031616 with H=1024, 3 engram orders, k=2:"));
    assert_int_equal(check(65536, 496, 64, 1, 64, 32, 2, why), 0);  // 32505856 tokens x 64 experts each
    assert_int_equal(check(65536, 497, 64, 1, 64, 32, 2, why), 1);
    assert_non_null(strstr(why, "(at most 32505856 with H=1, 2 engram orders, k=64:"));
    // batch x seq in 64 bits: 65536 x 2^20 = 2^36 tokens is 0 in 32
    assert_int_equal(check(65536, 1 << 20, 128, 2, 1, 32, 3, why), 1);
    assert_non_null(strstr(why, "batch x seq = 68719476736 tokens"));
    // the head dim the chunked KDA indexes in 32 bits: dh (dh + 1) < 2^31
    assert_int_equal(check(1, 16, 46340, 1, 1, 32, 3, why), 0);
    assert_int_equal(check(1, 16, 65536, 2, 1, 32, 3, why), 0);
    assert_int_equal(check(1, 16, 46341, 1, 1, 32, 3, why), 1);
    assert_string_equal(why, "head dim d/H = 46341 is more than the CUDA KDA kernels index (at most 46340: a head's state "
                             "is indexed in 32 bits): raise H or lower d");
    // the expert rank: one grid row per column (gridDim.y <= 65535)
    assert_int_equal(check(1, 16, 65536, 2, 1, 65535, 3, why), 0);
    assert_int_equal(check(1, 16, 65536, 2, 1, 65536, 3, why), 1);
    assert_non_null(strstr(why, "expert rank r = 65536 is more than the CUDA kernels launch (at most 65535"));
}


// 32 heads of 2 at seq 2048: the stand-in refuses more than (2^31 - 2^26) / 32 = 65011712 tokens,
// any batch above 31744 (65536 x 2048 = 2^27); the CPU trains at batch 1 in moments
static void small_engine(Engine *e, const char *corpus) {
    dm_err err = {0};
    engine_init(e);
    assert_int_equal(config_preset(&e->cfg, "nano", &err), 0);
    e->cfg.d = 64; e->cfg.H = 32; e->cfg.f = 64; e->cfg.r = 8; e->cfg.seq = 2048; e->cfg.batch = 1;
    e->cfg.kda_chunk = 16; e->cfg.engram_rows = 97; e->cfg.warmup = 2;
    assert_int_equal(engine_open_data(e, corpus, NULL, &err), 0);
    assert_int_equal(engine_build(e, 11, &err), 0);
}


static const Backend *cpu;
static int allocs, refuse;  // allocations asked of the stand-in; refuse: every one fails (none may come)
static void *alloc_counted(size_t bytes) { allocs++; return refuse ? NULL : cpu->alloc(bytes); }
static void *host_alloc_counted(size_t bytes) { allocs++; return refuse ? NULL : cpu->host_alloc(bytes); }

static void test_engine_asks_first(void **st) {
    (void)st;
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    cpu = backend_cpu();
    static Backend limited;
    limited = *cpu;
    limited.name = "limited";
    limited.alloc = alloc_counted;
    limited.host_alloc = host_alloc_counted;
    limited.shape_check = cuda_shape_check;
    const char *past = "batch x seq = 134217728 tokens is more than the CUDA kernels index (at most 65011712 with H=32, "
                       "3 engram orders, k=1: tokens x max(H, orders, k) <= 2^31 - 2^26): lower batch or seq";
    dm_err err = {0};
    MetricRow ra, rb;
    double la[3], lb[3];
    Engine a, b;  // a stays on the CPU; b is asked for every shape past the limit on the way
    small_engine(&a, corpus);
    small_engine(&b, corpus);
    // the CPU takes the batch; a move to the stand-in is refused before it allocates anything
    assert_int_equal(engine_set(&b, "batch", "65536", &err), 0);
    allocs = 0, refuse = 1;
    assert_int_equal(engine_set_device(&b, &limited, "limited", &err), 1);
    char want[1024];
    snprintf(want, sizeof want, "moving the model to limited failed (%s); it stays on cpu", past);
    assert_string_equal(err.msg, want);
    assert_int_equal(allocs, 0);
    assert_ptr_equal(b.be, cpu);
    assert_true(b.live);
    refuse = 0;
    // within the limit it moves; there a :set batch= past it is refused and changes nothing
    assert_int_equal(engine_set(&b, "batch", "1", &err), 0);
    assert_int_equal(engine_set_device(&b, &limited, "limited", &err), 0);
    assert_int_equal(engine_step(&a, &ra, &err), 0);
    la[0] = ra.loss;
    assert_int_equal(engine_step(&b, &rb, &err), 0);
    lb[0] = rb.loss;
    allocs = 0, refuse = 1;
    assert_int_equal(engine_set(&b, "batch", "65536", &err), 1);
    assert_string_equal(err.msg, past);
    assert_int_equal(b.cfg.batch, 1);
    assert_int_equal(b.model.cfg.batch, 1);
    // nor are the activations given up for such a batch (model_reserve_try: :check parity's path)
    real *buf = b.model.acts.buf;
    assert_int_equal(model_reserve_try(&b.model, 65536, 2048, &err), 1);
    assert_string_equal(err.msg, past);
    assert_ptr_equal(b.model.acts.buf, buf);
    assert_int_equal(b.model.acts_B, 1);
    // nor does :check parity at such a batch build its two models first
    ParityReport rep;
    assert_int_equal(engine_check_parity(&b, cpu, &limited, 65536, 0, 1e-4, 0, 0, &rep, &err), 1);
    char want_parity[1024];
    snprintf(want_parity, sizeof want_parity, "check parity: %s", past);
    assert_string_equal(err.msg, want_parity);
    assert_int_equal(allocs, 0);
    refuse = 0;
    for (int i = 1; i < 3; i++) {
        assert_int_equal(engine_step(&a, &ra, &err), 0);
        la[i] = ra.loss;
        assert_int_equal(engine_step(&b, &rb, &err), 0);
        lb[i] = rb.loss;
    }
    assert_memory_equal(la, lb, sizeof la);
    real *pa = params_of(&a), *pb = params_of(&b);
    assert_memory_equal(pa, pb, sizeof(real) * a.model.n_params);
    free(pa);
    free(pb);
    assert_int_equal(a.step, b.step);
    engine_free(&a);
    engine_free(&b);
    // :init on the stand-in with a head dim past the KDA's 32-bit index: refused before the
    // model (86 GB of parameters at d=46342, H=1) is allocated
    Engine c;
    engine_init(&c);
    assert_int_equal(config_preset(&c.cfg, "nano", &err), 0);
    c.cfg.d = 46342; c.cfg.H = 1;
    assert_int_equal(engine_set_device(&c, &limited, "limited", &err), 0);  // not live: the choice only
    allocs = 0, refuse = 1;
    assert_int_equal(engine_build(&c, 1, &err), 1);
    assert_string_equal(err.msg, "head dim d/H = 46342 is more than the CUDA KDA kernels index (at most 46340: a head's "
                                 "state is indexed in 32 bits): raise H or lower d");
    assert_int_equal(allocs, 0);
    assert_false(c.live);
    refuse = 0;
    // the CPU backend has no such limit
    assert_int_equal(model_shape_check(cpu, &c.cfg, 65536, 1 << 20, &err), 0);
    assert_int_equal(model_shape_check(NULL, &c.cfg, 65536, 1 << 20, &err), 0);
    engine_free(&c);
    unlink(corpus);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
        cmocka_unit_test(test_engine_asks_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
