// test_engram_ram.c — host-RAM Engram tables (engram_ram = on, SPEC §3; model.h, optim.c), on
// the CPU: the fenced backend (tests/fenced_backend.h) stands in for a device whose memory the
// host cannot read, so the tables, their gradient and their Adam state must live in host memory
// and only rows [N, O*De] may cross. Training with the tables there must give what training with
// them in backend memory gives, bit for bit: the host side runs the CPU's own ops, and the
// table's norm, clip and lazy Adam are the whole-segment ops restricted to the rows read.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "graph_backend.h"  // (includes fenced_backend.h)
#include "../engine/engine.h"
#include "../engine/probe.h"
#include "../engine/sample.h"

static void make_corpus(char *path, size_t n) {
    snprintf(path, n, "/tmp/dmsh_ram_%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 3000; i++) fprintf(f, "line %d: the memory says %s.\n", i, i % 3 ? "hello" : "goodbye");
    fclose(f);
}

// A small model whose tables collide a lot (97 rows per order): rows read many times per batch.
static void small_engine(Engine *e, const char *corpus, int ram, double clip, const Backend *be) {
    dm_err err = {0};
    engine_init(e);
    assert_int_equal(config_preset(&e->cfg, "nano", &err), 0);
    e->cfg.d = 32; e->cfg.H = 2; e->cfg.f = 64; e->cfg.r = 8; e->cfg.seq = 24; e->cfg.batch = 3;
    e->cfg.kda_chunk = 8; e->cfg.engram_rows = 97; e->cfg.warmup = 2; e->cfg.clip = clip;
    e->cfg.engram_ram = ram;
    assert_int_equal(engine_open_data(e, corpus, NULL, &err), 0);
    assert_int_equal(engine_set_device(e, be, be == backend_cpu() ? "cpu" : "fenced", &err), 0);
    assert_int_equal(engine_build(e, 5, &err), 0);
}

typedef struct { real *p, *m, *v, *mom; int64_t *rs; size_t P, R; } State;
static State state_of(Engine *e) {
    State s;
    s.P = e->model.n_params;
    s.R = (size_t)e->cfg.n_orders * e->cfg.engram_rows;
    s.p = malloc(sizeof(real) * s.P); s.m = malloc(sizeof(real) * s.P); s.v = malloc(sizeof(real) * s.P);
    s.mom = malloc(sizeof(real) * s.P); s.rs = malloc(sizeof(int64_t) * s.R);
    model_params_get(&e->model, s.p);
    optim_state_get(&e->opt, &e->model, s.m, s.v, s.mom, s.rs);
    return s;
}
static void state_free(State *s) { free(s->p); free(s->m); free(s->v); free(s->mom); free(s->rs); }
static void assert_same_state(Engine *a, Engine *b) {
    State x = state_of(a), y = state_of(b);
    assert_int_equal(x.P, y.P);
    assert_memory_equal(x.p, y.p, sizeof(real) * x.P);
    assert_memory_equal(x.m, y.m, sizeof(real) * x.P);
    assert_memory_equal(x.v, y.v, sizeof(real) * x.P);
    assert_memory_equal(x.mom, y.mom, sizeof(real) * x.P);
    assert_memory_equal(x.rs, y.rs, sizeof(int64_t) * x.R);
    state_free(&x);
    state_free(&y);
}

// Tables in backend memory vs in host memory, both on the fenced backend: 8 steps, the losses,
// gradient norms and the whole state (parameters, moments, row counts) bit for bit — once with
// a clip that fires at every step (the rows are scaled on the host) and once with none.
static void ram_matches_backend(double clip) {
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    dm_err err = {0};
    Engine a, b;
    small_engine(&a, corpus, 0, clip, fenced_backend());
    small_engine(&b, corpus, 1, clip, fenced_backend());
    // b's backend holds everything but the tables; the tables are the layout's tail, on the host
    assert_int_equal(a.model.n_dev, a.model.n_params);
    assert_int_equal(b.model.n_dev, b.model.t[P_TABLES].offset);
    assert_true(b.model.n_params - b.model.n_dev == b.model.t[P_TABLES].numel);
    assert_non_null(b.model.tab);
    assert_null(a.model.tab);
    int clipped = 0;
    for (int i = 0; i < 8; i++) {
        MetricRow ra, rb;
        assert_int_equal(engine_step(&a, &ra, &err), 0);
        assert_int_equal(engine_step(&b, &rb, &err), 0);
        assert_memory_equal(&ra.loss, &rb.loss, sizeof(double));
        assert_memory_equal(&ra.gnorm, &rb.gnorm, sizeof(double));
        clipped += ra.gnorm > clip;
    }
    print_message("  clip %g: 8 steps, %d clipped; losses, norms and state bit-identical (last loss %.6f)\n", clip,
                  clipped, a.model.last_loss);
    if (clip < 1) assert_int_equal(clipped, 8);
    assert_same_state(&a, &b);
    assert_true(a.model.arms.bwd[ARM_ENGRAM] > 0 && a.model.arms.bwd[ARM_ENGRAM] == b.model.arms.bwd[ARM_ENGRAM]);
    engine_free(&a);
    engine_free(&b);
    unlink(corpus);
}
static void test_ram_matches_backend_clipped(void **s) { (void)s; ram_matches_backend(0.05); }
static void test_ram_matches_backend_unclipped(void **s) { (void)s; ram_matches_backend(100); }

// Train a (tables placed by ram_a, on be_a) 3 steps, save, load into a fresh b (ram_b, be_b):
// the same state, and 3 more steps on each give the same losses and state, bit for bit.
static void save_load_train_on(const char *corpus, const char *path, int ram_a, const Backend *be_a, int ram_b,
                               const Backend *be_b) {
    dm_err err = {0};
    Engine a, b;
    small_engine(&a, corpus, ram_a, 1.0, be_a);
    MetricRow r;
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step(&a, &r, &err), 0);
    assert_int_equal(engine_save(&a, path, &err), 0);
    small_engine(&b, corpus, ram_b, 1.0, be_b);
    if (engine_load(&b, path, &err)) print_error("%s\n", err.msg);
    assert_int_equal(b.cfg.engram_ram, ram_b);  // the live placement stays
    assert_int_equal(b.model.cfg.engram_ram, ram_b);
    assert_true((b.model.tab != NULL) == ram_b);
    assert_same_state(&a, &b);
    double la[3], lb[3];
    for (int i = 0; i < 3; i++) { assert_int_equal(engine_step(&a, &r, &err), 0); la[i] = r.loss; }
    for (int i = 0; i < 3; i++) { assert_int_equal(engine_step(&b, &r, &err), 0); lb[i] = r.loss; }
    assert_memory_equal(la, lb, sizeof la);
    assert_same_state(&a, &b);
    engine_free(&a);
    engine_free(&b);
    unlink(path);
}

// A checkpoint written with host tables holds them (and their Adam state): save after 3 steps,
// load into a fresh engine, 3 more steps on each == bit for bit. And the layout (hence the
// file) is the one the tables-in-backend model writes.
static void test_ram_checkpoint(void **s) {
    (void)s;
    char corpus[128], path[128];
    make_corpus(corpus, sizeof corpus);
    snprintf(path, sizeof path, "/tmp/dmsh_ram_%d.ckpt", (int)getpid());
    save_load_train_on(corpus, path, 1, fenced_backend(), 1, backend_cpu());
    unlink(corpus);
}

// engram_ram is a placement: a checkpoint written with host tables loads into a live model that
// keeps its tables in backend memory (and the other way round), which keeps its own placement
// and trains on bit for bit as the writer does (:load once refused it as an architecture change).
static void test_ram_load_keeps_the_live_placement(void **s) {
    (void)s;
    char corpus[128], path[128];
    make_corpus(corpus, sizeof corpus);
    snprintf(path, sizeof path, "/tmp/dmsh_ram_place_%d.ckpt", (int)getpid());
    save_load_train_on(corpus, path, 1, fenced_backend(), 0, fenced_backend());
    save_load_train_on(corpus, path, 0, fenced_backend(), 1, fenced_backend());
    unlink(corpus);
}

// :device with host tables: the tables stay in host memory while the rest moves, and training
// continues as if nothing moved; a probe of the tables and the decoder read them there.
static void test_ram_move_probe_decode(void **s) {
    (void)s;
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    dm_err err = {0};
    Engine a, b;
    small_engine(&a, corpus, 0, 1.0, backend_cpu());
    small_engine(&b, corpus, 1, 1.0, backend_cpu());
    MetricRow ra, rb;
    for (int i = 0; i < 5; i++) {
        if (i == 2) assert_int_equal(engine_set_device(&b, fenced_backend(), "fenced", &err), 0);
        assert_int_equal(engine_step(&a, &ra, &err), 0);
        assert_int_equal(engine_step(&b, &rb, &err), 0);
        assert_memory_equal(&ra.loss, &rb.loss, sizeof(double));
    }
    assert_string_equal(b.model.be->name, "cpu-fenced");
    assert_non_null(b.model.tab);
    assert_same_state(&a, &b);
    // the tables as a probe sees them
    double *va = NULL, *vb = NULL;
    ProbeInfo ia, ib;
    assert_int_equal(probe_get(&a, "engram.tables", &va, &ia, &err), 0);
    assert_int_equal(probe_get(&b, "engram.tables", &vb, &ib, &err), 0);
    assert_int_equal(ia.n, ib.n);
    assert_memory_equal(va, vb, sizeof(double) * ia.n);
    free(va);
    free(vb);
    // decoding: the same logits byte after byte
    Decoder da, db;
    assert_int_equal(decoder_init(&da, &a.model, &err), 0);
    assert_int_equal(decoder_init(&db, &b.model, &err), 0);
    real la[256], lb[256];  // host logits
    const char *text = "the memory says hello";
    for (const char *c = text; *c; c++) {
        decoder_step(&da, (unsigned char)*c, la);
        decoder_step(&db, (unsigned char)*c, lb);
        assert_memory_equal(la, lb, sizeof la);
    }
    decoder_free(&da);
    decoder_free(&db);
    engine_free(&a);
    engine_free(&b);
    unlink(corpus);
}

// On a backend with graphs (tests/graph_backend.h emulates CUDA capture on the CPU), host tables
// make every step eager — each has host round trips a graph cannot hold — with one notice that
// says why, and the numbers are the tables-in-backend numbers.
static void test_ram_runs_uncaptured(void **s) {
    (void)s;
    char corpus[128];
    make_corpus(corpus, sizeof corpus);
    dm_err err = {0};
    char why[256];
    if (!fenced_backend_complete(fenced_backend(), why, sizeof why)) fail_msg("%s", why);
    if (!graph_backend_complete(graph_backend(), why, sizeof why)) fail_msg("%s", why);
    Engine a, g;
    small_engine(&a, corpus, 0, 1.0, fenced_backend());
    small_engine(&g, corpus, 1, 1.0, graph_backend());
    for (int i = 0; i < 6; i++) {
        MetricRow ra, rg;
        assert_int_equal(engine_step(&a, &ra, &err), 0);
        assert_int_equal(engine_step(&g, &rg, &err), 0);
        assert_memory_equal(&ra.loss, &rg.loss, sizeof(double));
    }
    assert_int_equal(g.run.captures, 0);
    assert_int_equal(g.run.replays, 0);
    assert_int_equal(g.run.eager, 6);
    const char *note = engine_notice(&g);
    assert_non_null(note);
    print_message("  notice: %s\n", note);
    assert_non_null(strstr(note, "engram_ram=on"));
    assert_null(engine_notice(&g));  // once
    assert_same_state(&a, &g);
    engine_free(&a);
    engine_free(&g);
    unlink(corpus);
}

// The host-side table ops against the whole-segment ops on a dense table that is zero outside
// the rows read (repeats, and ids out of range that every op ignores): bit for bit, and a NaN in
// a read row is found.
static void test_rows_ops_match_segment_ops(void **s) {
    (void)s;
    enum { O = 3, N = 700, D = 24 };
    const int64_t R = 5000;  // O*R*D = 360 000 reals: several OPT_SUMSQ_CHUNK chunks, rows across borders
    size_t numel = (size_t)O * R * D;
    real *g = calloc(numel, sizeof(real)), *g2 = calloc(numel, sizeof(real));
    int32_t *rows = malloc(sizeof(int32_t) * O * N);
    Rng r = {77};
    for (int q = 0; q < O; q++)
        for (int i = 0; i < N; i++) {
            int32_t x = (int32_t)(rng_next(&r) % (uint64_t)R);
            if (i % 97 == 5) x = -1;                    // ignored
            if (i % 101 == 7) x = (int32_t)R + 3;        // ignored
            if (i % 5 == 0 && i) x = rows[q * N + i - 1];  // repeats
            if (i == 11) x = (int32_t)(OPT_SUMSQ_CHUNK / D);  // straddles a chunk border when D does not divide it
            rows[q * N + i] = x;
            if (x >= 0 && x < R)
                for (int c = 0; c < D; c++) g[((size_t)q * R + x) * D + c] = (real)rng_normal(&r);
        }
    memcpy(g2, g, sizeof(real) * numel);
    OptSeg seg = {0, numel};
    double ss_seg, ss_rows;
    int32_t bad_seg, bad_rows;
    int64_t *ws = malloc(sizeof(int64_t) * opt_rows_chunk_ws_size(O, N));
    opt_sumsq(&ss_seg, &bad_seg, g, &seg, 1);
    opt_sumsq_rows(&ss_rows, &bad_rows, g, rows, O, N, R, D, ws);
    print_message("  sum of squares: segment %.17g, rows %.17g\n", ss_seg, ss_rows);
    assert_memory_equal(&ss_seg, &ss_rows, sizeof(double));
    assert_int_equal(bad_seg, 0);
    assert_int_equal(bad_rows, 0);
    // clip: every read row scaled once, like opt_clip over the whole segment
    OptStatus st;
    memset(&st, 0, sizeof st);
    st.clipped = 1;
    st.scale = 0.37;
    uint8_t *marks = calloc((size_t)O * R, 1);
    opt_clip(g, numel, &st);
    opt_clip_rows(g2, rows, O, N, R, D, marks, &st);
    assert_memory_equal(g, g2, sizeof(real) * numel);
    for (size_t k = 0; k < (size_t)O * R; k++) assert_int_equal(marks[k], 0);  // marks cleared
    // a NaN in a read row
    int32_t x = rows[N + 3];
    assert_true(x >= 0 && x < R);
    g[((size_t)R + x) * D + 2] = NAN;
    opt_sumsq_rows(&ss_rows, &bad_rows, g, rows, O, N, R, D, ws);
    assert_int_equal(bad_rows, 1);
    free(g); free(g2); free(rows); free(ws); free(marks);
}

// QA mutation, session 40 (O04): a row that straddles a chunk border and is the ONLY reader of
// the chunk past the border: opt_sumsq_rows must list that chunk too. One read row, 2730 of
// one table at D = 24 (reals 65520..65543: chunks 0 and 1), the whole table random (it is those
// two chunks): the rows' sum is the segment's bit for bit. Without the row's second chunk it was
// chunk 0 alone. (test_rows_ops_match_segment_ops has a straddling row too, but other rows read
// its second chunk, so the dedup hid the loss.)
static void test_rows_sumsq_single_straddling_row(void **s) {
    (void)s;
    enum { O = 1, N = 1, D = 24 };
    const int64_t R = 5000;  // 120 000 reals: chunk 0 whole, chunk 1 in part
    size_t numel = (size_t)O * R * D;
    real *g = malloc(sizeof(real) * numel);
    Rng r = {91};
    fill_randn(g, numel, 1.0, &r);
    const int32_t rows[N] = {(int32_t)(OPT_SUMSQ_CHUNK / D)};
    size_t lo = (size_t)rows[0] * D;
    assert_true(lo < OPT_SUMSQ_CHUNK && lo + D > OPT_SUMSQ_CHUNK);  // (it does straddle)
    OptSeg seg = {0, numel};
    double ss_seg, ss_rows, ss_chunk0;
    int32_t bad_seg, bad_rows;
    int64_t ws[2 * O * N];
    opt_sumsq(&ss_seg, &bad_seg, g, &seg, 1);
    OptSeg seg0 = {0, OPT_SUMSQ_CHUNK};
    opt_sumsq(&ss_chunk0, &bad_seg, g, &seg0, 1);
    opt_sumsq_rows(&ss_rows, &bad_rows, g, rows, O, N, R, D, ws);
    print_message("  one straddling row: segment %.17g, rows %.17g (chunk 0 alone %.17g)\n", ss_seg, ss_rows, ss_chunk0);
    assert_true(ss_seg > ss_chunk0 * 1.5);  // (chunk 1 holds 54 464 of the 120 000 squares)
    assert_memory_equal(&ss_seg, &ss_rows, sizeof(double));
    assert_int_equal(bad_rows, 0);
    // a NaN in the row's part past the border: flagged
    g[OPT_SUMSQ_CHUNK + 3] = NAN;
    opt_sumsq_rows(&ss_rows, &bad_rows, g, rows, O, N, R, D, ws);
    assert_int_equal(bad_rows, 1);
    free(g);
}

// QA mutation, session 40 (O03): opt_adam_rows ignores a row == R (out of [0, R), as the header
// says): with the bound at r > R, table 0's row R was table 1's row 0 (updated, its count
// raised) and the last table's row R was past the buffer. The tests named -1 and R + 3, never R.
// Tables [2, 7, 4] plus a guard row past the end, every buffer random: only the two valid reads
// (table 0 row 3, table 1 row 5) move, every other real and count is bit-identical.
static void test_adam_rows_ignore_row_R(void **s) {
    (void)s;
    enum { O = 2, N = 2, R = 7, D = 4 };
    size_t n = ((size_t)O * R + 1) * D;  // + the guard row
    real *p = malloc(sizeof(real) * n), *g = malloc(sizeof(real) * n), *m = malloc(sizeof(real) * n),
         *v = malloc(sizeof(real) * n);
    Rng r = {93};
    fill_randn(p, n, 1.0, &r);
    fill_randn(g, n, 1.0, &r);
    fill_randn(m, n, 0.1, &r);
    for (size_t i = 0; i < n; i++) v[i] = (real)(0.01 + fabs(rng_normal(&r)) * 0.01);
    int64_t rs[O * R + 1];
    for (int k = 0; k < O * R + 1; k++) rs[k] = 5 + k;
    real *p0 = malloc(sizeof(real) * n), *m0 = malloc(sizeof(real) * n), *v0 = malloc(sizeof(real) * n);
    memcpy(p0, p, sizeof(real) * n); memcpy(m0, m, sizeof(real) * n); memcpy(v0, v, sizeof(real) * n);
    const int32_t rows[O * N] = {R, 3, 5, R};  // table 0: R, 3; table 1: 5, R
    uint8_t marks[O * R + 1];
    memset(marks, 0, sizeof marks);
    StepHyper hp;
    memset(&hp, 0, sizeof hp);
    hp.lr = 1e-2; hp.beta1 = 0.9; hp.beta2 = 0.95; hp.eps = 1e-8;
    OptStatus st;
    memset(&st, 0, sizeof st);
    st.t = 1;
    opt_adam_rows(p, g, m, v, rs, rows, O, N, R, D, marks, &hp, &st);
    for (int k = 0; k < O * R + 1; k++) {
        int read = k == 3 || k == R + 5;
        size_t off = (size_t)k * D;
        assert_int_equal(rs[k], 5 + k + read);
        int same = !memcmp(p + off, p0 + off, sizeof(real) * D) && !memcmp(m + off, m0 + off, sizeof(real) * D) &&
                   !memcmp(v + off, v0 + off, sizeof(real) * D);
        if (same == read) fail_msg("row %d of [O*R + guard]: %s", k, read ? "read, but did not move" : "not read, but moved");
        assert_int_equal(marks[k], 0);  // cleared
    }
    free(p); free(g); free(m); free(v); free(p0); free(m0); free(v0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_ops_match_segment_ops),
        cmocka_unit_test(test_rows_sumsq_single_straddling_row),
        cmocka_unit_test(test_adam_rows_ignore_row_R),
        cmocka_unit_test(test_ram_matches_backend_clipped),
        cmocka_unit_test(test_ram_matches_backend_unclipped),
        cmocka_unit_test(test_ram_checkpoint),
        cmocka_unit_test(test_ram_load_keeps_the_live_placement),
        cmocka_unit_test(test_ram_move_probe_decode),
        cmocka_unit_test(test_ram_runs_uncaptured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
