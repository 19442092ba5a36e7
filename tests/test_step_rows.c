// test_step_rows.c — what engine_report (engine/step.c) writes into a training step's metric row
// and the model's host mirrors, and the step graph's host bookkeeping (tests/graph_backend.h:
// CUDA capture emulated on the fenced CPU backend):
//   * a row's tok_s is the step's own tokens over its own time;
//   * the host mirrors of the MoE statistics (m->expert_load, m->last_aux) are the last step's;
//   * the per-expert shares of the routed assignments: 0 (not NaN) with the MoE off, the shares
//     at E = STEP_REC_E, none above it;
//   * a NaN loss or gnorm is stored without its sign bit;
//   * graphs: a replayed step's depth_loss markers after an eval, the engram_ram notice said once,
//     and a failed capture's eager rerun that cannot grow a workspace refused ("was not run").
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"
#include "graph_backend.h"
#include "../engine/engine.h"
#include "../kernels/guard.h"

#include "step_fixture.h"

// QA mutation, session 40 (S21): tok_s computed from the cumulative token count (hp.tokens)
// instead of the step's (hp.ntok) made every step line, metrics.tsv row and throughput plot grow
// with the step number; no test checked a real row's throughput. Each train row, reported one by
// one or several at once: tok_s * ms / 1000 is the step's batch * seq.
static void test_row_tok_s_is_the_steps(void **s) {
    (void)s;
    Config c = tiny_config();
    Engine e;
    make_engine(&e, backend_cpu(), c);
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(engine_step_enqueue(&e, &err), 0);
    assert_int_equal(engine_report(&e, NULL, &err), 0);
    const double N = (double)c.batch * c.seq;
    int n = 0;
    for (int i = 0; i < e.nrows; i++) {
        const MetricRow *r = &e.rows[i];
        if (r->kind != 0) continue;
        assert_true(r->ms > 0);
        double toks = r->tok_s * r->ms / 1e3;
        if (fabs(toks - N) > 1e-9 * N)
            fail_msg("step %lld: tok_s %.6g over %.6g ms is %.6f tokens, not the step's %g", (long long)r->step, r->tok_s,
                     r->ms, toks, N);
        n++;
    }
    assert_int_equal(n, 6);
    engine_free(&e);
}

// QA mutation, session 40 (S20): without the final model_read_moe in engine_report, the host
// mirrors m->expert_load / m->last_aux kept the last eval's values (or zeros) after training
// steps: :plot experts and the expert-load probe showed stale data. After an eval and two steps
// reported together, the mirrors are those of the second step's forward: each depth routes N*k
// assignments, and both equal a model_forward of that batch by an engine with the same weights.
static void test_moe_mirrors_are_the_last_steps(void **s) {
    (void)s;
    Config c = tiny_config();
    Engine a, b;
    make_engine(&a, backend_cpu(), c);
    make_engine(&b, backend_cpu(), c);
    dm_err err = {0};
    EvalResult er;
    assert_int_equal(engine_eval(&a, 0, &er, &err), 0);  // the mirrors now hold the eval's forward
    assert_int_equal(engine_step_enqueue(&a, &err), 0);
    assert_int_equal(engine_step_enqueue(&a, &err), 0);
    assert_int_equal(engine_report(&a, NULL, &err), 0);
    Model *m = &a.model;
    const int L = c.L, E = c.E, N = c.batch * c.seq;
    for (int i = 0; i < L; i++) {
        long sum = 0;
        for (int x = 0; x < E; x++) sum += m->expert_load[i * E + x];
        if (sum != (long)N * c.k) fail_msg("depth %d: %ld assignments in the load mirror, not N*k = %d", i + 1, sum, N * c.k);
    }
    // b: the first step (bit-identical to a's), then a forward of step 1's batch with the weights
    // a's step 1 ran with
    MetricRow row;
    assert_int_equal(engine_step(&b, &row, &err), 0);
    int *x = malloc(sizeof(int) * N), *y = malloc(sizeof(int) * N);
    assert_int_equal(data_batch_checked(&b.data, b.cfg.seed, 1, c.batch, c.seq, x, y, &err), 0);
    model_forward(&b.model, x, y, c.batch, c.seq, L, FWD_TRAIN);
    assert_true(b.model.last_aux > 0);
    if (m->last_aux != b.model.last_aux) fail_msg("last_aux %.17g after the steps, %.17g in step 1's forward", m->last_aux, b.model.last_aux);
    assert_memory_equal(m->expert_load, b.model.expert_load, sizeof(int) * (size_t)L * E);
    free(x);
    free(y);
    engine_free(&a);
    engine_free(&b);
}

// QA mutation, session 40 (S7): without `tot > 0`, a step with the MoE arm off (no routed load:
// tot = 0) wrote 0/0 = NaN expert shares into its row (and the checkpoint's rows). With the arm
// off every share is 0; back on, they sum to 1 again.
static void test_moe_off_shares_are_zero(void **s) {
    (void)s;
    Config c = tiny_config();
    Engine e;
    make_engine(&e, backend_cpu(), c);
    dm_err err = {0};
    MetricRow row;
    assert_int_equal(engine_step(&e, &row, &err), 0);
    double sum = 0;
    for (int x = 0; x < c.E; x++) sum += row.expert_frac[x];
    assert_true(fabs(sum - 1) < 1e-6);
    e.model.arms.on[ARM_MOE] = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(engine_step(&e, &row, &err), 0);
        const MetricRow *r = &e.rows[e.nrows - 1];
        assert_int_equal(r->arms_off, 1u << ARM_MOE);
        for (int x = 0; x < STEP_REC_E; x++)
            if (r->expert_frac[x] != 0 || row.expert_frac[x] != 0)
                fail_msg("step %lld, MoE off: expert %d's share is %g, not 0", (long long)r->step, x, r->expert_frac[x]);
    }
    e.model.arms.on[ARM_MOE] = 1;
    assert_int_equal(engine_step(&e, &row, &err), 0);
    sum = 0;
    for (int x = 0; x < c.E; x++) sum += row.expert_frac[x];
    assert_true(fabs(sum - 1) < 1e-6);
    engine_free(&e);
}

// QA mutation, session 40 (S6): `E < STEP_REC_E` for `<=` recorded no routing shares at E = 16
// (allowed: E is 1..64), so :plot experts was empty there. At E = 16 each row's share of expert x
// is its routed assignments (over every depth: the load mirror after the step) over N*k*L, and
// they sum to 1; at E = 17 no share is recorded.
static void test_expert_shares_at_rec_limit(void **s) {
    (void)s;
    for (int E = STEP_REC_E; E <= STEP_REC_E + 1; E++) {
        Config c = tiny_config();
        c.E = E;
        c.k = 2;
        Engine e;
        make_engine(&e, backend_cpu(), c);
        dm_err err = {0};
        MetricRow row;
        const double tot = (double)c.batch * c.seq * c.k * c.L;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(engine_step(&e, &row, &err), 0);
            const MetricRow *r = &e.rows[e.nrows - 1];
            double sum = 0;
            for (int x = 0; x < STEP_REC_E; x++) {
                float want = 0;
                if (E <= STEP_REC_E) {
                    long n = 0;
                    for (int d = 0; d < c.L; d++) n += e.model.expert_load[d * E + x];
                    want = (float)((double)n / tot);
                }
                if (r->expert_frac[x] != want)
                    fail_msg("E = %d, step %lld: expert %d's share %.9g, want %.9g", E, (long long)r->step, x,
                             r->expert_frac[x], want);
                sum += r->expert_frac[x];
            }
            if (E <= STEP_REC_E) assert_true(fabs(sum - 1) < 1e-6);
            else assert_true(sum == 0);
        }
        engine_free(&e);
    }
}

// QA mutation, session 40 (S5): without fabs, a NaN loss with its sign bit set was stored as is,
// and printf writes "-nan" for it (lines mixed "loss nan ... -nan"). Which sign the loss's NaN
// gets depends on the poison and on the ops it went through (here +NAN in kda.wk comes out of the
// cross-entropy as -nan and -NAN as +nan), so kda.wk is poisoned in turn with NAN, -NAN and
// +INFINITY (inf - inf: the default NaN, sign set on x86): each step is skipped, and its row's
// loss and gnorm are NaN with the sign bit clear.
static void test_nan_row_has_no_sign(void **s) {
    (void)s;
    Config c = tiny_config();
    Engine e;
    make_engine(&e, backend_cpu(), c);
    dm_err err = {0};
    MetricRow row;
    assert_int_equal(engine_step(&e, &row, &err), 0);
    real *p = e.model.params + e.model.t[P_WK].offset, keep;
    e.model.be->download(&keep, p, sizeof keep);
    const real poisons[3] = {(real)NAN, (real)copysign(NAN, -1.0), (real)INFINITY};
    const char *names[3] = {"NAN", "-NAN", "INFINITY"};
    assert_true(!signbit(poisons[0]) && signbit(poisons[1]));
    for (int i = 0; i < 3; i++) {
        e.model.be->upload(p, &poisons[i], sizeof(real));
        assert_int_equal(engine_step(&e, &row, &err), 0);
        e.model.be->upload(p, &keep, sizeof keep);
        const MetricRow *r = &e.rows[e.nrows - 1];
        assert_true(r->skipped);
        assert_true(isnan(r->loss) && isnan(r->gnorm));
        if (signbit(r->loss)) fail_msg("kda.wk = %s: the NaN loss kept its sign bit (printed \"-nan\")", names[i]);
        if (signbit(r->gnorm)) fail_msg("kda.wk = %s: the NaN gnorm kept its sign bit (printed \"-nan\")", names[i]);
        assert_true(isnan(row.loss) && !signbit(row.loss) && !signbit(row.gnorm));
    }
    assert_int_equal(engine_step(&e, &row, &err), 0);  // restored: it trains again
    assert_true(isfinite(row.loss) && !row.skipped);
    engine_free(&e);
}

// ---- graphs ------------------------------------------------------------------------------

// QA mutation, session 40 (S16b): a replayed step must restore the forward's depth_loss markers
// (NaN: not scored, 0: scored). Without the memcpy, an eval between replays left its own markers
// as "the last forward's", so a probe of depth 1 after a loss=final step answered for the eval's
// forward instead of saying "depth 1 was not scored in the last forward". loss=final: after the
// replayed step, only the last depth is scored, as after the eager engine's step.
static void test_graph_replay_restores_depth_marks(void **s) {
    (void)s;
    char why[200];
    if (!fenced_backend_complete(fenced_backend(), why, sizeof why)) fail_msg("%s", why);
    if (!graph_backend_complete(graph_backend(), why, sizeof why)) fail_msg("%s", why);
    Config c = tiny_config();
    c.loss_final = 1;
    Engine ep, eg;
    make_engine(&ep, backend_cpu(), c);
    make_engine(&eg, graph_backend(), c);
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < STEP_GRAPH_WARM + 2; i++) {  // warm-up, the capture, a replay
        assert_int_equal(engine_step(&ep, &row, &err), 0);
        assert_int_equal(engine_step(&eg, &row, &err), 0);
    }
    assert_int_equal(eg.run.captures, 1);
    EvalResult er;
    assert_int_equal(engine_eval(&ep, 0, &er, &err), 0);  // every depth scored
    assert_int_equal(engine_eval(&eg, 0, &er, &err), 0);
    for (int i = 0; i < c.L; i++) assert_false(isnan(eg.model.depth_loss[i]));
    long r0 = eg.run.replays;
    assert_int_equal(engine_step(&ep, &row, &err), 0);
    assert_int_equal(engine_step(&eg, &row, &err), 0);
    assert_int_equal(eg.run.replays, r0 + 1);
    assert_int_equal(eg.model.last_depth, ep.model.last_depth);
    for (int i = 0; i < c.L; i++) {
        int want = i < c.L - 1;  // loss=final: only the last depth scored
        assert_int_equal(isnan(ep.model.depth_loss[i]) != 0, want);
        if ((isnan(eg.model.depth_loss[i]) != 0) != want)
            fail_msg("replayed step: depth %d %s in depth_loss (%g), the eager step's says %s", i + 1,
                     want ? "scored" : "not scored", eg.model.depth_loss[i], want ? "not scored" : "scored");
    }
    engine_free(&ep);
    engine_free(&eg);
}

// QA mutation, session 40 (S19): without r->ram_noted = 1, engram_ram=on on a backend with graphs
// raised its "runs un-captured" notice at every step (the existing test reads the notice once,
// after all its steps, and sees one either way). Read after each step: said at the first only.
static void test_graph_ram_notice_once(void **s) {
    (void)s;
    Config c = tiny_config();
    c.engram_ram = 1;
    Engine e;
    make_engine(&e, graph_backend(), c);
    assert_non_null(e.model.tab);
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(engine_step(&e, &row, &err), 0);
        const char *note = engine_notice(&e);
        if (i == 0) {
            assert_non_null(note);
            assert_non_null(strstr(note, "engram_ram=on: every step exchanges the batch's Engram rows"));
        } else if (note) {
            fail_msg("step %d: the notice again: \"%.60s...\"", i, note);
        }
    }
    assert_int_equal(e.run.eager, 3);
    assert_int_equal(e.run.captures, 0);
    engine_free(&e);
}

// QA mutation, session 40 (S18): a capture that fails leaves the guard committed by its recorded
// optimizer; without dm_guard_uncommit, a workspace that cannot grow in the eager rerun's forward
// is a raise past the point of no return — the process exits ("dmsh: ...") — instead of the
// step refused with "step N was not run ... lower batch or seq". A backend whose capture fails and
// whose next forward op outside a capture raises; the step runs in a child (the mutant exits).
static int ws_capture_fail, ws_raise_armed;
static void *(*ws_end_real)(char *, size_t);
static void (*ws_matmul_real)(real *, const real *, const real *, const real *, int, int, int);
static void *ws_end(char *why, size_t n) {
    if (ws_capture_fail) {
        ws_capture_fail = 0;
        gr_fail("a download (forced by the test)");
        ws_raise_armed = 1;  // the eager rerun's forward cannot grow its workspace
    }
    return ws_end_real(why, n);
}
static void ws_matmul(real *out, const real *inp, const real *W, const real *bias, int N, int C, int OC) {
    if (ws_raise_armed && !gr_cur) {
        ws_raise_armed = 0;
        dm_guard_raise("a workspace cannot grow to 1.0 GB (forced by the test)");
    }
    ws_matmul_real(out, inp, W, bias, N, C, OC);
}
static void test_graph_failed_capture_rerun_refused(void **s) {
    (void)s;
    static Backend b;
    b = *graph_backend();
    ws_end_real = b.graph_end; b.graph_end = ws_end;
    ws_matmul_real = b.matmul_forward; b.matmul_forward = ws_matmul;
    Config c = tiny_config();
    Engine e;
    make_engine(&e, &b, c);
    dm_err err = {0};
    MetricRow row;
    for (int i = 0; i < STEP_GRAPH_WARM; i++) assert_int_equal(engine_step(&e, &row, &err), 0);
    ws_capture_fail = 1;  // the capture at the next step fails; its rerun raises
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {  // no cmocka assertion in here
        close(fd[0]);
        dup2(fd[1], 2);
        int rc = engine_step_enqueue(&e, &err);
        fprintf(stderr, "rc %d: %s", rc, err.msg);
        _exit(rc == 1 ? 0 : 3);
    }
    close(fd[1]);
    char out[1024];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof out - 1 && (k = read(fd[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)k;
    out[got] = 0;
    close(fd[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("the refused rerun ended the process: \"%s\"", out);
    const char *want = "rc 1: step 2 was not run (nothing of it applied): a workspace cannot grow to 1.0 GB "
                       "(forced by the test): lower batch or seq";
    if (strcmp(out, want)) fail_msg("the child said \"%s\"", out);
    ws_capture_fail = ws_raise_armed = 0;
    engine_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_tok_s_is_the_steps),
        cmocka_unit_test(test_moe_mirrors_are_the_last_steps),
        cmocka_unit_test(test_moe_off_shares_are_zero),
        cmocka_unit_test(test_expert_shares_at_rec_limit),
        cmocka_unit_test(test_nan_row_has_no_sign),
        cmocka_unit_test(test_graph_replay_restores_depth_marks),
        cmocka_unit_test(test_graph_ram_notice_once),
        cmocka_unit_test(test_graph_failed_capture_rerun_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
