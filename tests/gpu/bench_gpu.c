// bench_gpu.c — the GPU benchmark of issue 5 / SPEC §8 (built and run by tests/gpu/run.sh bench,
// `make gpu-bench`). For small (batch 8 and 32, seq 512) and base (batch 16, seq 1024) on cuda:0:
//   ms/step     K warm steps enqueued back to back (after warm-up each is one graph replay) and
//               reported once: wall time / K, the way :train runs (their indices printed)
//   sync ms     the median of K more steps, each followed by a device synchronisation (what
//               one step costs when the host waits for it: launch latency included)
//   dev ms      the median of the steps' own device time (the record's start/end clock)
//   tok/s       B*T / (ms/step)
//   TFLOP/s     model FLOPs (engine/flops.c: 3 x forward matrix products) / ms/step (the pipelined
//               time, as tok/s; the footer says so too)
//   MFU         TFLOP/s / the bf16 cuBLAS peak measured in the same run (device_cuda.cu)
//   busy        the time in which a kernel, memcpy or memset ran / wall time, over K
//               back-to-back steps traced by CUPTI (before the untraced ones) (tests/gpu/busy_cupti.h: the union of the
//               activity intervals); "n/a" with the reason when CUPTI is not there or refuses
//   memory      peak bytes held by the backend (its allocations, the scratch slots, cuBLAS's
//               workspace; the scratch slots persist across cases, so a later case's figure
//               includes what an earlier one grew them to), and the device's used memory at peak
//   graph       under each row: how the timed steps ran (replays, captures, eager): a capture or
//               an eager step inside a timed window is said, since its time is in the row
//   phases      under each row: forward, backward and the rest of a step timed apart, eager
//               (phase_probe), and what the graph saves
//   kernels     with CUPTI, the top kernels by device time, then every kernel's time summed by
//               the part of the model it works for (busy_part: cuBLAS, bf16 packing, KDA, MoE, ...)
// Data: shared-data/tinyshakespeare.txt if present (copy it there yourself: a device run sends the
// checkout, not ../shared), else generated text.
// Usage: bench_gpu [K [PRESET:B:T ...]] (K = 20 and the three cases above by default).
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../engine/engine.h"
#include "../../engine/model.h"

#include "busy_cupti.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The generated corpus is this process's own file (a second process makes its own): removed at
// exit so that runs of this program do not pile files up in /tmp.
static char gen_path[256];
static void drop_corpus(void) { if (gen_path[0]) unlink(gen_path); }

static const char *corpus(void) {
    char *path = gen_path;
    FILE *f = fopen("shared-data/tinyshakespeare.txt", "r");
    if (f) { fclose(f); return "shared-data/tinyshakespeare.txt"; }
    snprintf(path, sizeof gen_path, "/tmp/dmsh_bench_%d.txt", (int)getpid());
    f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    atexit(drop_corpus);
    for (int i = 0; i < 60000; i++) fprintf(f, "line %d of the generated corpus: %s\n", i, i % 7 ? "to be" : "or not");
    fclose(f);
    return path;
}

typedef struct { const char *preset; int B, T; } Case;

void cuda_set_precision(int fp32);                                // kernels/cuda/backend_cuda.cu

// The MFU column divides by the bf16 peak measured at start-up: a peak counted wrong (half the
// FLOPs of its product) would double every MFU and pass unseen. A bf16 product through the
// backend's own gemm (the packing to bf16 included) cannot run faster than that peak: time one,
// 4096^3, and fail (`error:`) if it beats the peak by more than the noise (15 %).
static int peak_bounds_a_product(const Backend *cu, double peak) {
    const int n = 4096, reps = 20;
    size_t nn = (size_t)n * n;
    float *h = malloc(sizeof(float) * nn);
    real *A = cu->alloc(sizeof(real) * nn), *B = cu->alloc(sizeof(real) * nn), *C = cu->alloc(sizeof(real) * nn);
    if (!h || !A || !B || !C) {
        printf("peak check: n/a (no room for three %d^2 matrices)\n", n);
        free(h); if (A) cu->free(A); if (B) cu->free(B); if (C) cu->free(C);
        return 0;
    }
    unsigned s = 12345;
    for (size_t i = 0; i < nn; i++) { s = s * 1103515245u + 12345u; h[i] = (float)((s >> 9) & 0xffff) / 32768.0f - 1; }
    cu->upload(A, h, sizeof(float) * nn);
    cu->upload(B, h, sizeof(float) * nn);
    cuda_set_precision(0);
    for (int i = 0; i < 3; i++) cu->gemm(0, 0, n, n, n, 1, A, n, B, n, 0, C, n);
    cudaDeviceSynchronize();
    double t0 = now_s();
    for (int i = 0; i < reps; i++) cu->gemm(0, 0, n, n, n, 1, A, n, B, n, 0, C, n);
    cudaDeviceSynchronize();
    double tf = 2.0 * n * n * (double)n * reps / (now_s() - t0) / 1e12;
    free(h); cu->free(A); cu->free(B); cu->free(C);
    int bad = !(peak > 0) || tf > 1.15 * peak;
    printf("%speak check: a %d^3 bf16 product through the backend's gemm ran at %.1f TFLOP/s = %.2f of the "
           "measured peak %.1f (at most 1.15)\n", bad ? "error: " : "", n, tf, peak > 0 ? tf / peak : 0.0, peak);
    return bad;
}

// The block's fused projection (engine/model.h ProjLayout) is one product [N, d] x [d, P] with
// P = 3d + H + 2 dh + 3 + E: 1679 at small, 2455 at base. Not a multiple of 8: the forward's fp32
// output and the backward's bf16 dproj operand have rows that are not 16-byte aligned, and cuBLAS
// may pick slower kernels than for P rounded up. Its forward and two backward products are the
// largest of a step (~40% of the GEMM FLOPs at small, tools/cuemu_census.py). Timed here at P and
// at P rounded up to 8 and 64, the three products summed, so a device run says whether padding
// the layout (a checkpoint format change) is worth it.
double cuda_gemm_bf16_ms(int tA, int tB, int M, int N, int K);  // kernels/cuda/device_cuda.cu
void cuda_kda_report(int D, char *buf, size_t n);                 // kernels/cuda/kda_chunk_cuda.cu
static void proj_align_probe(const char *preset, int B, int T) {
    Config c;
    dm_err err = {0};
    config_defaults(&c);
    if (config_preset(&c, preset, &err)) return;
    ProjLayout pl = proj_layout(&c);
    int N = B * T, d = c.d, Ps[3] = {pl.P, (pl.P + 7) / 8 * 8, (pl.P + 63) / 64 * 64};
    printf("       fused projection, fwd + dX + dW (N %d, d %d), bf16, median of 10 after 200 ms warm-up each:", N, d);
    for (int v = 0; v < 3; v++) {
        int P = Ps[v];
        double f = cuda_gemm_bf16_ms(0, 1, N, P, d), dx = cuda_gemm_bf16_ms(0, 0, N, d, P),
               dw = cuda_gemm_bf16_ms(1, 0, P, d, N);
        if (f < 0 || dx < 0 || dw < 0) printf("  P=%d: no memory", P);
        else printf("  P=%d %.3f ms (%.0f TFLOP/s)", P, f + dx + dw, 6.0 * N * d * P / ((f + dx + dw) * 1e-3) / 1e12);
    }
    printf("\n");
}

// Where a step's time goes, for the first device run to read before anyone changes a kernel:
// with cuda_graph=off every op is launched from the host and each phase is waited for, so the
// forward, the backward and the whole step can be timed apart (the median of K each); the step
// minus both is the optimizer and the step's bookkeeping. Launch costs are inside these eager
// times; the graph step's time (the row above) minus the eager step's is what the graph saves.
static void phase_probe(Engine *e, const Backend *cu, int B, int T, int K, double graph_ms) {
    dm_err err = {0};
    double *f = malloc(sizeof(double) * K), *b = malloc(sizeof(double) * K), *st = malloc(sizeof(double) * K);
    int bad = engine_set(e, "cuda_graph", "off", &err);
    MetricRow r;
    // the activations hold the last step's batch (acts.x / acts.tgt on the device)
    for (int i = 0; i < K && !bad; i++) {
        double t0 = now_s();
        model_forward_enqueue(&e->model, B, T, e->cfg.L, FWD_TRAIN);
        cu->sync();
        double t1 = now_s();
        model_backward(&e->model);
        cu->sync();
        f[i] = 1e3 * (t1 - t0);
        b[i] = 1e3 * (now_s() - t1);
    }
    for (int i = 0; i < K && !bad; i++) {
        double t0 = now_s();
        bad = engine_step(e, &r, &err);
        cu->sync();
        st[i] = 1e3 * (now_s() - t0);
    }
    if (bad) printf("       phases: %s\n", err.msg);
    else {
        qsort(f, K, sizeof(double), cmp_d);
        qsort(b, K, sizeof(double), cmp_d);
        qsort(st, K, sizeof(double), cmp_d);
        double fm = f[K / 2], bm = b[K / 2], sm = st[K / 2];
        printf("       phases, eager (cuda_graph=off, each waited for, median of %d): forward %.2f ms, backward %.2f ms, "
               "step %.2f ms -> optimizer and bookkeeping %.2f ms (%.0f%%); the graph step above saves %.2f ms of it\n",
               K, fm, bm, sm, sm - fm - bm, 100 * (sm - fm - bm) / sm, sm - graph_ms);
    }
    free(f);
    free(b);
    free(st);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // a log that ends in a hang or crash still names its last row
    int K = argc > 1 ? atoi(argv[1]) : 20, warm = 5;
    if (K < 1) { fprintf(stderr, "bench_gpu: K must be a positive number of steps, not '%s'\n", argv[1]); return 2; }
    char why[300];
    const Backend *cu = backend_cuda(0, why, sizeof why);
    if (!cu) { fprintf(stderr, "bench_gpu: %s\n", why); return 2; }
    char desc[512];
    cu->describe(desc, sizeof desc);
    double peak = cu->peak_tflops();
    printf("%s\n", desc);
    char kda[400];
    cuda_kda_report(64, kda, sizeof kda);  // the head size of every preset
    printf("%s\n", kda);
    int rc = 0;
    if (strstr(desc, "cuemu")) printf("peak check: n/a (the emulator's times)\n");
    else rc |= peak_bounds_a_product(cu, peak);
    const char *data = corpus();
    // which text the numbers are of (generated text loads the Engram rows and the routing
    // otherwise: a table measured on it must not pass for tinyshakespeare's: QA, session 35)
    struct stat cst;
    printf("data: %s (%lld B)%s\n", data, stat(data, &cst) == 0 ? (long long)cst.st_size : -1LL,
           gen_path[0] ? ": GENERATED text, shared-data/tinyshakespeare.txt was not carried (not tinyshakespeare's numbers)" : "");
    // the cases, or the ones named after K as PRESET:B:T (e.g. the emulator's smoke run,
    // `bench_gpu 2 nano:2:64`)
    Case cases[8] = {{"small", 8, 512}, {"small", 32, 512}, {"base", 16, 1024}};
    unsigned ncases = 3;
    static char names[8][32];
    if (argc > 2) {
        if (argc - 2 > 8) { fprintf(stderr, "bench_gpu: at most 8 cases\n"); return 2; }
        ncases = 0;
        for (int a = 2; a < argc; a++) {
            int B, T, n = 0;
            if (sscanf(argv[a], "%31[a-z]:%d:%d%n", names[ncases], &B, &T, &n) != 3 || argv[a][n] || B < 1 || T < 1) {
                fprintf(stderr, "bench_gpu: '%s' is not PRESET:B:T (e.g. small:32:512)\n", argv[a]);
                return 2;
            }
            cases[ncases] = (Case){names[ncases], B, T};
            ncases++;
        }
    }
    printf("\n%-6s %3s %5s  %-9s %9s %8s %8s %10s %8s %6s %6s %10s %10s\n", "preset", "B", "T", "steps", "ms/step",
           "sync ms", "dev ms", "tok/s", "TFLOP/s", "MFU", "busy", "held MiB", "used MiB");
    for (unsigned c = 0; c < ncases; c++) {
        Engine e;
        dm_err err = {0};
        engine_init(&e);
        if (config_preset(&e.cfg, cases[c].preset, &err) || engine_set_device(&e, cu, "cuda:0", &err) ||
            engine_open_data(&e, data, NULL, &err)) { printf("error: %s: %s\n", cases[c].preset, err.msg); rc = 1; continue; }
        e.cfg.batch = cases[c].B;
        e.cfg.seq = cases[c].T;
        size_t free0 = 0, total = 0, free_min;
        cu->mem_peak_set(0);  // "held MiB": this case's peak, not the largest of the cases before it
        cudaMemGetInfo(&free0, &total);
        free_min = free0;
        if (engine_build(&e, 1, &err)) { printf("error: %s: %s\n", cases[c].preset, err.msg); rc = 1; continue; }
        MetricRow r;
        double *ms = malloc(sizeof(double) * K), *dev = malloc(sizeof(double) * K);
        int bad = 0;
        // (c) first: busy, K back-to-back steps traced by CUPTI, switched on before the warm-up
        // so the step graph is instantiated under tracing; then tracing is off for (a) and (b)
        char bwhy[200] = "";
        double busy = -1, traced_ms = 0;
        int tracing = busy_start(bwhy, sizeof bwhy) == 0;
        for (int i = 0; i < warm && !bad; i++) bad = engine_step(&e, &r, &err);
        if (tracing) {
            cudaDeviceSynchronize();
            busy_mark();
            double tb0 = now_s();
            for (int i = 0; i < K && !bad; i++) bad = engine_step_enqueue(&e, &err);
            if (!bad) bad = engine_report(&e, &r, &err);
            cudaDeviceSynchronize();
            traced_ms = 1e3 * (now_s() - tb0);
            double on = busy_stop();
            if (on < 0) busy_why(bwhy, sizeof bwhy);
            else busy = on / traced_ms;
        }
        // (a) pipelined: K steps enqueued, one report (the host never waits inside the loop)
        long first = (long)e.step;
        long rp0 = e.run.replays, cp0 = e.run.captures, eg0 = e.run.eager;
        cudaDeviceSynchronize();
        double tp0 = now_s();
        for (int i = 0; i < K && !bad; i++) bad = engine_step_enqueue(&e, &err);
        if (!bad) bad = engine_report(&e, &r, &err);
        cudaDeviceSynchronize();
        double pipe_ms = 1e3 * (now_s() - tp0) / K;
        if (!bad && e.nrows >= K)
            for (int i = 0; i < K; i++) dev[i] = e.rows[e.nrows - K + i].ms;
        // (b) synchronised: each step waited for
        for (int i = 0; i < K && !bad; i++) {
            double t0 = now_s();
            bad = engine_step(&e, &r, &err);
            cudaDeviceSynchronize();
            ms[i] = 1e3 * (now_s() - t0);
            size_t fr, tt;
            cudaMemGetInfo(&fr, &tt);
            if (fr < free_min) free_min = fr;
        }
        if (bad) { printf("error: %s: %s\n", cases[c].preset, err.msg); rc = 1; free(ms); free(dev); engine_free(&e); continue; }
        qsort(ms, K, sizeof(double), cmp_d);
        qsort(dev, K, sizeof(double), cmp_d);
        double med = ms[K / 2], dev_med = dev[K / 2];
        double fl = model_flops_per_step(&e.cfg, cases[c].B, cases[c].T, &e.model.arms);
        size_t cur = 0, held = 0;
        cu->mem_stats(&cur, &held);
        char steps[32];
        snprintf(steps, sizeof steps, "%ld..%ld", first, first + K - 1);
        char bcol[16];
        if (busy >= 0) snprintf(bcol, sizeof bcol, "%5.1f%%", 100 * busy);
        else snprintf(bcol, sizeof bcol, "%6s", "n/a");
        char mcol[16];  // (a peak that could not be measured: device memory short)
        if (peak > 0) snprintf(mcol, sizeof mcol, "%5.1f%%", 100 * fl / (pipe_ms / 1e3) / (peak * 1e12));
        else snprintf(mcol, sizeof mcol, "%6s", "n/a");
        printf("%-6s %3d %5d  %-9s %9.2f %8.2f %8.2f %10.0f %8.1f %6s %6s %10.0f %10.0f\n", cases[c].preset,
               cases[c].B, cases[c].T, steps, pipe_ms, med, dev_med, cases[c].B * cases[c].T / (pipe_ms / 1e3),
               fl / (pipe_ms / 1e3) / 1e12, mcol, bcol,
               held / 1048576.0, (total - free_min) / 1048576.0);
        {   // (a) and (b) are 2K steps: every one should have been a replay of the captured step
            long rp = e.run.replays - rp0, cp = e.run.captures - cp0, eg = e.run.eager - eg0;
            if (rp == 2L * K && !cp && !eg) printf("       graph: all %d timed steps were replays of one captured step\n", 2 * K);
            else printf("       graph: NOT all replays: of the %d timed steps %ld replays, %ld captures, %ld eager "
                        "(their time is in the row; a workspace that grew makes the step capture again)\n", 2 * K, rp, cp, eg);
        }
        if (busy >= 0) {
            printf("       (busy over %d traced steps before the timed ones, %.2f ms/step while traced)\n", K, traced_ms / K);
            busy_print_top(K, 15);
        }
        else printf("       (busy: %s)\n", bwhy);
        phase_probe(&e, cu, cases[c].B, cases[c].T, K, med);
        proj_align_probe(cases[c].preset, cases[c].B, cases[c].T);
        fflush(stdout);
        free(ms);
        free(dev);
        engine_free(&e);
    }
    printf("\nms/step = wall time of K back-to-back enqueued steps / K (tok/s, TFLOP/s and MFU use it); busy = "
           "time in which a kernel or copy ran / wall time over K steps traced by CUPTI; MFU against the "
           "bf16 GEMM peak measured above. Targets (issue 5): small b32 s512 >= 600000 tok/s, base b16 s1024 >= "
           "300000 tok/s, busy >= 90%%.\n");
    return rc;
}
