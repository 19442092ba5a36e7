// graph_step.c — the whole-step CUDA graph on a GPU (issue 5; built and run by tests/gpu/run.sh):
//   1. the captured step equals the un-captured step BIT FOR BIT: 20 steps with cuda_graph=on
//      (2 eager warm-up steps, the capture, 17 replays) against 20 steps with cuda_graph=off,
//      through the warmup/cosine lr schedule, a NaN skip (a poisoned parameter at step 8) and
//      reports every 5 steps: every metric row (but the timings), the parameters, every moment,
//      the table row counts and the counters;
//   2. the same 20 steps in TWO PROCESSES give bit-identical losses and weights (this program
//      runs itself twice with `dump FILE` and compares the files);
//   2b. the same with what a user changes between steps (run_changes): graph = eager, bit for bit;
//   3. a capture with more uploads than staging events is refused, not recorded wrongly, and the
//      next capture is not (`capture`: those rows alone);
//   4. the host really only enqueues: with reports every 10 steps, the enqueue of a replayed step
//      returns before the device has run it (ms per enqueue, printed) — informational; `quick`
//      (the CPU emulation's run, tests/cuemu) leaves it out: its times would say nothing.
// Every arm on, nano's shapes at batch 4 x seq 128, default precision (bf16 operands).
// Exit status 0 when 1 and 2 pass.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../engine/engine.h"
#include "../../engine/sample.h"

static int fails = 0;
static void row(const char *what, int ok, const char *note) {
    printf("  %-58s %s  %s\n", what, ok ? "PASS" : "FAIL", note);
    fails += !ok;
}

// The generated corpus is this process's own file (a second process makes its own): removed at
// exit so that runs of this program do not pile files up in /tmp.
static char gen_path[256];
static void drop_corpus(void) { if (gen_path[0]) unlink(gen_path); }

static const char *corpus(void) {
    char *path = gen_path;
    FILE *f = fopen("shared-data/tinyshakespeare.txt", "r");
    if (f) { fclose(f); return "shared-data/tinyshakespeare.txt"; }
    snprintf(path, sizeof gen_path, "/tmp/dmsh_graph_%d.txt", (int)getpid());
    f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    atexit(drop_corpus);
    const char *w[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran.\n", "so "};
    unsigned s = 1;
    for (int i = 0; i < 400000; i++) { s = s * 1103515245u + 12345u; fputs(w[(s >> 16) % 10], f); }
    fclose(f);
    return path;
}

static const Backend *cu;

static int make_bt(Engine *e, int graph, const char *data, int B, int T) {
    dm_err err = {0};
    engine_init(e);
    if (config_preset(&e->cfg, "nano", &err)) { printf("%s\n", err.msg); return 1; }
    e->cfg.batch = B; e->cfg.seq = T; e->cfg.warmup = 5; e->cfg.steps = 20; e->cfg.retract_every = 2;
    e->cfg.cuda_graph = graph;
    if (engine_set_device(e, cu, "cuda:0", &err) || engine_build(e, 7, &err) || engine_open_data(e, data, NULL, &err)) {
        printf("%s\n", err.msg);
        return 1;
    }
    return 0;
}

static int make(Engine *e, int graph, const char *data) { return make_bt(e, graph, data, 4, 128); }

static real saved;
static void poison(Engine *e, int on) {
    real *p = e->model.params + e->model.t[P_WK].offset;
    if (on) { real nan_ = (real)NAN; e->model.be->download(&saved, p, sizeof saved); e->model.be->upload(p, &nan_, sizeof nan_); }
    else e->model.be->upload(p, &saved, sizeof saved);
}

// 20 steps, reports every `every`, the parameter poisoned for step 8
static int run20(Engine *e, int every) {
    dm_err err = {0};
    for (int i = 0; i < 20; i++) {
        if (e->step == 8) poison(e, 1);
        if (engine_step_enqueue(e, &err)) { printf("enqueue: %s\n", err.msg); return 1; }
        if (e->step == 9) poison(e, 0);  // stream-ordered after step 8's ops
        if (e->step % every == 0 && engine_report(e, NULL, &err)) { printf("report: %s\n", err.msg); return 1; }
    }
    if (engine_report(e, NULL, &err)) { printf("report: %s\n", err.msg); return 1; }
    return 0;
}

// What a user does between steps at the prompt, 4 steps apart (2 eager, the capture, a replay:
// STEP_GRAPH_WARM = 2): a live setting (lr, then clip), an arm off and on again, an eval and a
// decode (their own activations and device workspaces), a batch change, reports at odd moments.
// Each must reach the graph (a re-capture, or nothing it baked in changed): a replay of a stale
// graph would run the old lr, the arm that is off, the old batch, without a word. 28 steps at
// batch 2 (then 3) x seq 64. Step 23 follows a replay (22 captured) and an op that grew one of the
// backend's scratch slots (a column sum over 16 384 rows): the graph names the old slot, freed, so
// step 23 must not replay it (the key counts the backend's allocations).
#define CHANGE_STEPS 28
static long grow_allocs, grow_replays = -1, grow_graph;  // step 23: allocations the op made; a graph
                                                         // held before it; replays the step ran
static int run_changes(Engine *e) {
    dm_err err = {0};
    if (engine_set(e, "eval_bytes", "512", &err)) { printf("set: %s\n", err.msg); return 1; }
    const Backend *be = e->model.be;
    const int GC = 1024, GN = 16384;  // 8 row slices x 1024 columns of doubles: 64 KiB of scratch
    real *gsrc = be->alloc(sizeof(real) * GC), *gdst = be->alloc(sizeof(real) * GC);
    if (!gsrc || !gdst) { printf("alloc failed\n"); return 1; }
    {
        real h[1024];
        for (int c = 0; c < GC; c++) h[c] = (real)(c % 7) - 3;
        be->upload(gsrc, h, sizeof h);
        be->upload(gdst, h, sizeof h);
    }
    for (int i = 0; i < CHANGE_STEPS; i++) {
        int rc = 0;
        long a0 = 0, r0 = 0;
        if (i == 23) {  // the same row 16 384 times (ld 0): only the scratch slot is new
            a0 = be->allocs ? be->allocs() : 0;
            r0 = e->run.replays;
            grow_graph = e->run.graph != NULL;
            be->bias_backward(gdst, gsrc, 0, GN, GC);
            grow_allocs = (be->allocs ? be->allocs() : 0) - a0;
        }
        if (i == 4) rc = engine_set(e, "lr", "0.001", &err);
        if (i == 8) e->model.arms.on[ARM_KDA] = 0;
        if (i == 12) { e->model.arms.on[ARM_KDA] = 1; rc = engine_set(e, "clip", "0.5", &err); }
        if (i == 14) { EvalResult r; rc = engine_eval(e, 0, &r, &err); }  // (mid-segment: after the capture)
        if (i == 16) rc = engine_set(e, "batch", "3", &err);
        if (i == 19) {  // a decode between two replays
            Decoder d;
            real lg[256];
            rc = decoder_init(&d, &e->model, &err);
            for (const char *p = "ab\n"; !rc && *p; p++) rc = decoder_feed(&d, *p, lg, &err);
            if (!rc) decoder_free(&d);
        }
        if (i == 20) e->model.arms.on[ARM_MOE] = 0;
        if (i == 24) e->model.arms.on[ARM_MOE] = 1;
        if (rc || engine_step_enqueue(e, &err)) { printf("step %d: %s\n", i, err.msg); return 1; }
        if (i == 23) grow_replays = e->run.replays - r0;
        if (i % 3 == 2 && engine_report(e, NULL, &err)) { printf("report: %s\n", err.msg); return 1; }
    }
    if (engine_report(e, NULL, &err)) { printf("report: %s\n", err.msg); return 1; }
    be->free(gsrc);
    be->free(gdst);
    return 0;
}

typedef struct { real *p, *m, *v, *mom; int64_t *rs; size_t P, R; } State;
static void state_get(const Engine *e, State *s) {
    s->P = e->model.n_params;
    s->R = (size_t)e->cfg.n_orders * e->cfg.engram_rows;
    size_t b = sizeof(real) * s->P;
    s->p = malloc(b); s->m = malloc(b); s->v = malloc(b); s->mom = malloc(b);
    s->rs = malloc(sizeof(int64_t) * s->R);
    e->model.be->download(s->p, e->model.params, b);
    e->opt.be->download(s->m, e->opt.m, b);
    e->opt.be->download(s->v, e->opt.v, b);
    e->opt.be->download(s->mom, e->opt.mom, b);
    e->opt.be->download(s->rs, e->opt.row_steps, sizeof(int64_t) * s->R);
}
static void state_free(State *s) { free(s->p); free(s->m); free(s->v); free(s->mom); free(s->rs); }

static size_t ndiff(const void *a, const void *b, size_t n, size_t w) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp((const char *)a + i * w, (const char *)b + i * w, w) != 0;
    return d;
}

// `dump FILE`: the 20 steps with the graph, every row's loss and gnorm and the parameters, raw
static int dump(const char *path, const char *data) {
    Engine e;
    if (make(&e, 1, data) || run20(&e, 5)) return 1;
    State s;
    state_get(&e, &s);
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    for (int i = 0; i < e.nrows; i++) {
        fwrite(&e.rows[i].loss, sizeof(double), 1, f);
        fwrite(&e.rows[i].gnorm, sizeof(double), 1, f);
    }
    fwrite(s.p, sizeof(real), s.P, f);
    fclose(f);
    state_free(&s);
    engine_free(&e);
    return 0;
}

// run_changes with the graph and without: every row and state value bit for bit
static int changes_row(const char *data) {
    Engine cg, ce;
    if (make_bt(&cg, 1, data, 2, 64) || make_bt(&ce, 0, data, 2, 64)) return 1;
    if (run_changes(&cg)) return 1;
    long galloc = grow_allocs, grepl = grow_replays, gheld = grow_graph;
    if (run_changes(&ce)) return 1;
    size_t rdiff = 0;
    for (int i = 0; i < cg.nrows && i < ce.nrows; i++) {
        MetricRow a = cg.rows[i], b = ce.rows[i];
        a.ms = b.ms = a.tok_s = b.tok_s = 0;
        rdiff += memcmp(&a, &b, sizeof a) != 0;
    }
    State a, b;
    state_get(&cg, &a);
    state_get(&ce, &b);
    size_t d = ndiff(a.p, b.p, a.P, sizeof(real)) + ndiff(a.m, b.m, a.P, sizeof(real)) + ndiff(a.v, b.v, a.P, sizeof(real)) +
               ndiff(a.mom, b.mom, a.P, sizeof(real)) + ndiff(a.rs, b.rs, a.R, sizeof(int64_t));
    char buf[300];
    int rows = CHANGE_STEPS + cg.cfg.L;  // (the eval: one row per depth)
    snprintf(buf, sizeof buf, "%d rows, %zu differ; state values differing %zu; captures %ld, replays %ld, eager %ld",
             cg.nrows, rdiff, d, cg.run.captures, cg.run.replays, cg.run.eager);
    row("lr, clip, arms, eval, decode, batch between steps", cg.nrows == rows && ce.nrows == rows && rdiff == 0 && d == 0 &&
        cg.run.captures >= 5 && cg.run.replays >= 5 && memcmp(cg.model.arms.fwd, ce.model.arms.fwd, sizeof cg.model.arms.fwd) == 0,
        buf);
    snprintf(buf, sizeof buf, "graph held %ld; the op allocated %ld time(s); step 23 replays %ld", gheld, galloc, grepl);
    row("a scratch slot grown between replays: not replayed", gheld && galloc >= 1 && grepl == 0, buf);
    state_free(&a);
    state_free(&b);
    engine_free(&cg);
    engine_free(&ce);
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// the capture guard: a step with more uploads before a wait than staging events (8) cannot be
// captured (two record nodes for one event); graph_end says why and nothing of it ran, so the
// engine runs that step eagerly. No step has that many today: this proves the refusal itself.
// Then a clean capture (QA, session 38): a refused capture's reason must not outlive it — kept,
// every later capture of the process failed with that stale reason and the step graph never came
// back (one refused capture put the GPU at eager speed for good).
static void capture_rows(void) {
    float host_src[16];
    for (int i = 0; i < 16; i++) host_src[i] = (float)i + 1;
    float *hs = cu->host_alloc(sizeof host_src), *d = cu->alloc(sizeof host_src);
    memcpy(hs, host_src, sizeof host_src);
    char w1[300] = "", w2[300] = "";
    int began = cu->graph_begin(w1, sizeof w1) == 0;
    for (int i = 0; i < 9 && began; i++) cu->upload_async(d, hs, sizeof host_src);
    void *g = began ? cu->graph_end(w2, sizeof w2) : NULL;
    row("a capture of 9 uploads before a wait is refused (8 events)", began && !g && strstr(w2, "more than 8 uploads"),
        began ? w2 : w1);
    if (g) cu->graph_free(g);
    cu->upload_async(d, hs, sizeof host_src);  // and eager uploads go on after it
    cu->upload_wait();
    cu->sync();
    // the next capture, of one upload, gives a graph; its replay copies the staging as it is then
    w1[0] = w2[0] = 0;
    began = cu->graph_begin(w1, sizeof w1) == 0;
    if (began) cu->upload_async(d, hs, sizeof host_src);
    g = began ? cu->graph_end(w2, sizeof w2) : NULL;
    float back[16] = {0};
    if (g) {
        for (int i = 0; i < 16; i++) hs[i] = 100.0f + (float)i;
        cu->zero(d, sizeof back);
        cu->graph_launch(g);
        cu->upload_wait();
        cu->sync();
        cu->download(back, d, sizeof back);
        cu->graph_free(g);
    }
    char buf[400];
    snprintf(buf, sizeof buf, "%s%s; replayed: %g .. %g", began ? "" : w1, g ? "a graph" : w2, back[0], back[15]);
    row("a clean capture after a refused one: a graph, replayed", g && back[0] == 100.0f && back[15] == 115.0f, buf);
    cu->free(d);
    cu->host_free(hs);
}

// Every other way a captured step can fail (QA, session 40: none of these ran off a GPU before;
// the engine's captures never hit them, which is the point of refusing them loudly): inside a
// capture an allocation, a free, pinned host memory taken or given back, a synchronous upload, a
// download, a stream synchronisation and a scratch slot that would grow each fail the capture
// with their own reason, and nothing of the capture runs — neither the op refused nor the zero
// captured before it (d keeps 1..16); a refused free or host_free keeps its buffer, a refused
// alloc or host_alloc hands back NULL and counts no allocation, a refused download leaves zeros
// (not garbage) in the host's buffer, and of two failures the first is said.
enum { RF_ALLOC, RF_FREE, RF_HOST_ALLOC, RF_HOST_FREE, RF_UPLOAD, RF_DOWNLOAD, RF_SYNC, RF_SCRATCH, RF_TWO, RF_N };
static void refusal_rows(void) {
    static const char *name[RF_N] = {"alloc", "free", "host_alloc", "host_free", "synchronous upload", "download",
                                     "stream synchronise", "scratch growth", "alloc, then a download"};
    static const char *want[RF_N] = {"alloc inside the captured step", "free inside the captured step",
                                     "host_alloc (cudaHostAlloc) inside the captured step",
                                     "host_free (cudaFreeHost) inside the captured step",
                                     "a synchronous upload (host round trip) inside the captured step",
                                     "a download (host round trip) inside the captured step", "cudaStreamSynchronize",
                                     "would grow from", "alloc inside the captured step"};
    // (C_BIG: past what any earlier step of this process grew the column-sum slot to — nano's
    // steps before these rows leave it at kilobytes; 4096 columns did not need to grow after them)
    enum { C_BIG = 1 << 20, NB = 2 };
    float one[16], big[16], back[16];
    for (int i = 0; i < 16; i++) one[i] = (float)i + 1, big[i] = 1000.0f + (float)i;
    float *dout_h = (float *)malloc(sizeof(float) * NB * C_BIG), *db_h = (float *)malloc(sizeof(float) * C_BIG);
    for (int i = 0; i < NB * C_BIG; i++) dout_h[i] = (float)((i * 7) % 13) - 6.0f;
    float *dout = cu->alloc(sizeof(float) * NB * C_BIG), *dbias = cu->alloc(sizeof(float) * C_BIG);
    cu->upload(dout, dout_h, sizeof(float) * NB * C_BIG);
    cu->bias_backward(dbias, dout, 4, NB, 4);  // the column-sum scratch sized for 4 columns
    cu->zero(dbias, sizeof(float) * C_BIG);
    for (int k = 0; k < RF_N; k++) {
        float *d = cu->alloc(sizeof one), *d2 = cu->alloc(sizeof one), *hs2 = cu->host_alloc(sizeof one);
        cu->upload(d, one, sizeof one);
        cu->upload(d2, big, sizeof big);
        memcpy(hs2, big, sizeof big);
        cu->sync();
        long allocs0 = cu->allocs();
        char w1[300] = "", w2[300] = "";
        float got[16];
        for (int i = 0; i < 16; i++) got[i] = 7.0f;
        void *p = NULL;
        int began = cu->graph_begin(w1, sizeof w1) == 0;
        if (began) {
            cu->zero(d, sizeof one);  // captured first: must not run either
            switch (k) {
            case RF_ALLOC: p = cu->alloc(64); break;
            case RF_FREE: cu->free(d2); break;
            case RF_HOST_ALLOC: p = cu->host_alloc(64); break;
            case RF_HOST_FREE: cu->host_free(hs2); break;
            case RF_UPLOAD: cu->upload(d, big, sizeof big); break;
            case RF_DOWNLOAD: cu->download(got, d, sizeof got); break;
            case RF_SYNC: cu->sync(); break;
            case RF_SCRATCH: cu->bias_backward(dbias, dout, C_BIG, NB, C_BIG); break;
            case RF_TWO: p = cu->alloc(64); cu->download(got, d, sizeof got); break;
            }
        }
        void *g = began ? cu->graph_end(w2, sizeof w2) : NULL;
        long allocs1 = cu->allocs();
        cu->sync();
        cu->download(back, d, sizeof back);
        int ok = began && !g && strstr(w2, want[k]) && !p && back[0] == 1.0f && back[15] == 16.0f;
        if (k == RF_TWO) ok = ok && !strstr(w2, "download");
        if (k == RF_ALLOC || k == RF_HOST_ALLOC || k == RF_SCRATCH) ok = ok && allocs1 == allocs0;
        if (k == RF_DOWNLOAD || k == RF_TWO) ok = ok && got[0] == 0.0f && got[15] == 0.0f;
        char extra[120] = "";
        if (k == RF_FREE) {  // d2 still allocated and holding its bytes
            float b2[16] = {0};
            cu->download(b2, d2, sizeof b2);
            ok = ok && b2[0] == 1000.0f && b2[15] == 1015.0f;
            snprintf(extra, sizeof extra, "; the buffer kept: %g .. %g", b2[0], b2[15]);
        }
        if (k == RF_HOST_FREE) {
            ok = ok && hs2[0] == 1000.0f && hs2[15] == 1015.0f;
            snprintf(extra, sizeof extra, "; the pinned buffer kept: %g .. %g", hs2[0], hs2[15]);
        }
        if (k == RF_SCRATCH) {  // nothing summed; eagerly the slot grows and the sums are right
            cu->download(db_h, dbias, sizeof(float) * C_BIG);
            int untouched = db_h[0] == 0.0f && db_h[C_BIG - 1] == 0.0f;
            cu->bias_backward(dbias, dout, C_BIG, NB, C_BIG);
            cu->sync();
            cu->download(db_h, dbias, sizeof(float) * C_BIG);
            int right = 1;
            for (int c = 0; c < C_BIG; c++) {
                float s = 0;
                for (int n = 0; n < NB; n++) s += dout_h[(size_t)n * C_BIG + c];
                right &= db_h[c] == s;
            }
            ok = ok && untouched && right && cu->allocs() == allocs1 + 1;
            snprintf(extra, sizeof extra, "; dbias untouched %s, eager sums %s", untouched ? "yes" : "NO",
                     right ? "right" : "WRONG");
        }
        char buf[600], row_name[80];
        snprintf(buf, sizeof buf, "%s; d %g .. %g; allocs %+ld%s", began ? w2 : w1, back[0], back[15], allocs1 - allocs0,
                 extra);
        snprintf(row_name, sizeof row_name, "capture refused: %s", name[k]);
        row(row_name, ok, buf);
        if (g) cu->graph_free(g);
        cu->free(d);
        if (k != RF_FREE || ok) cu->free(d2);  // (a free the capture let through is not done twice)
        if (k != RF_HOST_FREE || ok) cu->host_free(hs2);
    }
    cu->free(dout);
    cu->free(dbias);
    free(dout_h);
    free(db_h);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // a log that ends in a hang or crash still names its last row
    char why[300];
    cu = backend_cuda(0, why, sizeof why);
    if (!cu) { fprintf(stderr, "graph_step: %s\n", why); return 2; }
    const char *data = corpus();
    if (argc == 3 && !strcmp(argv[1], "dump")) return dump(argv[2], data);
    if (argc == 2 && !strcmp(argv[1], "changes")) {  // that row alone
        if (changes_row(data)) return 1;
        return fails ? 1 : 0;
    }
    if (argc == 2 && !strcmp(argv[1], "capture")) {  // those rows alone
        capture_rows();
        refusal_rows();
        return fails ? 1 : 0;
    }

    printf("== graph_step: the captured step vs the un-captured step (nano, B=4, T=128, every arm on)\n");
    Engine eg, ee;
    if (make(&eg, 1, data) || make(&ee, 0, data)) return 1;
    if (run20(&eg, 5) || run20(&ee, 5)) return 1;
    const char *note = engine_notice(&eg);
    char buf[400];
    snprintf(buf, sizeof buf, "captures %ld, replays %ld, eager %ld%s%s", eg.run.captures, eg.run.replays, eg.run.eager,
             note ? "; " : "", note ? note : "");
    // a workspace that grows in the first steps changes the graph key (allocation count) and
    // restarts the warm-up, so the eager count is not fixed; one capture, and replays from then on
    row("the step is captured once and replayed", eg.run.captures == 1 && eg.run.eager >= STEP_GRAPH_WARM &&
        eg.run.eager + eg.run.captures + eg.run.replays == 20 && eg.run.replays >= 20 - 3 * STEP_GRAPH_WARM - 1, buf);
    size_t rd = 0;
    for (int i = 0; i < eg.nrows && i < ee.nrows; i++) {
        MetricRow a = eg.rows[i], b = ee.rows[i];
        a.ms = b.ms = a.tok_s = b.tok_s = 0;
        rd += memcmp(&a, &b, sizeof a) != 0;
    }
    snprintf(buf, sizeof buf, "%d rows, %zu differ; skipped %lld (step 8)", eg.nrows, rd, (long long)eg.opt.total_skips);
    row("metric rows (loss, gnorm, lr, skipped, expert shares)", eg.nrows == 20 && ee.nrows == 20 && rd == 0 &&
        eg.opt.total_skips == 1 && eg.rows[8].skipped, buf);
    State sg, se;
    state_get(&eg, &sg);
    state_get(&ee, &se);
    size_t dp = ndiff(sg.p, se.p, sg.P, sizeof(real)), dm = ndiff(sg.m, se.m, sg.P, sizeof(real));
    size_t dv = ndiff(sg.v, se.v, sg.P, sizeof(real)), dmo = ndiff(sg.mom, se.mom, sg.P, sizeof(real));
    size_t dr = ndiff(sg.rs, se.rs, sg.R, sizeof(int64_t));
    snprintf(buf, sizeof buf, "differ: params %zu, m %zu, v %zu, mom %zu, row counts %zu (of %zu)", dp, dm, dv, dmo, dr, sg.P);
    row("parameters, moments, table row counts bit-identical", dp + dm + dv + dmo + dr == 0, buf);
    row("optimizer counters, orthogonality error", eg.opt.t == ee.opt.t && eg.opt.total_skips == ee.opt.total_skips &&
        memcmp(&eg.last_orth_err, &ee.last_orth_err, sizeof(double)) == 0 && eg.step == ee.step, "");
    state_free(&sg);
    state_free(&se);
    if (changes_row(data)) return 1;

    // the host only enqueues: 30 more replayed steps, reported every 10
    dm_err err = {0};
    double t0 = now_ms(), enq = 0;
    int quick = argc == 2 && !strcmp(argv[1], "quick");
    for (int i = 0; i < 30 && !quick; i++) {
        double a = now_ms();
        engine_step_enqueue(&eg, &err);
        enq += now_ms() - a;
        if (eg.step % 10 == 0) engine_report(&eg, NULL, &err);
    }
    double wall = now_ms() - t0, dev = 0;
    for (int i = eg.nrows - 30; i < eg.nrows; i++) dev += eg.rows[i].ms;
    snprintf(buf, sizeof buf, "%.3f ms host per enqueue; %.3f ms device per step; %.3f ms wall per step", enq / 30,
             dev / 30, wall / 30);
    if (!quick) printf("  %-58s info  %s\n", "enqueue vs device time (30 replayed steps)", buf);
    engine_free(&eg);
    engine_free(&ee);

    capture_rows();
    refusal_rows();

    // two processes: the same 20 steps
    char f1[64], f2[64], cmd[600];
    snprintf(f1, sizeof f1, "/tmp/dmsh_graph_a_%d.bin", (int)getpid());
    snprintf(f2, sizeof f2, "/tmp/dmsh_graph_b_%d.bin", (int)getpid());
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++) {
        snprintf(cmd, sizeof cmd, "'%s' dump '%s'", argv[0], k ? f2 : f1);
        ok = system(cmd) == 0;
    }
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", f1, f2);
    int same = ok && system(cmd) == 0;
    row("two processes, 20 steps: losses, gnorms, weights bit-identical", same, ok ? "" : "a child run failed");
    unlink(f1);
    unlink(f2);
    printf("graph_step: %s\n", fails ? "FAIL" : "all rows pass");
    return fails ? 1 : 0;
}
