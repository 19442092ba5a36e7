// bench_cpu.c — `make bench`: CPU training throughput of the presets (SPEC §8). Not a test.
//
// For nano, mini and small at batch 8: build the model on the CPU backend and an optimizer, feed
// random bytes (fixed seed), run warm-up steps, then time K steps of
//   (a) forward + backward only, and
//   (b) the full step: forward + backward + optim_step (including the retraction),
// and print the median ms/step (step indices named), tok/s, model GFLOP/s (engine/flops.c) and
// the ratio to a 1024^3 GEMM measured in the same run (the CPU "MFU": the rate this BLAS reaches
// on a large square product on the same cores). The full step is also split into its phases.
// The Makefile runs it with OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 (one core).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include "../engine/model.h"
#include "../engine/optim.h"
#include "../engine/rng.h"
#include "../kernels/cpu/blas.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double *s = malloc(sizeof(double) * n);
    memcpy(s, v, sizeof(double) * n);
    qsort(s, n, sizeof(double), cmp_d);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

// C = A B through the vendor BLAS (cblas_sgemm / cblas_dgemm): the reference rate of the ratios.
static void blas_gemm(int n, const real *A, const real *B, real *C) {
#ifdef DM_DOUBLE
    cblas_dgemm(DmCblasRowMajor, DmCblasNoTrans, DmCblasNoTrans, n, n, n, 1, A, n, B, n, 0, C, n);
#else
    cblas_sgemm(DmCblasRowMajor, DmCblasNoTrans, DmCblasNoTrans, n, n, n, 1, A, n, B, n, 0, C, n);
#endif
}

// GFLOP/s of C = A B at n x n x n (median of 5 after one warm-up), in the build's precision:
// own = 0 the vendor BLAS, own = 1 the backend's product (gemm_rm: kernels/cpu/sgemm.c in float).
static double gemm_gflops(int n, int own) {
    size_t nn = (size_t)n * n;
    real *A = malloc(sizeof(real) * nn), *B = malloc(sizeof(real) * nn), *C = malloc(sizeof(real) * nn);
    Rng r = {7};
    for (size_t i = 0; i < nn; i++) { A[i] = (real)(rng_uniform(&r) - 0.5); B[i] = (real)(rng_uniform(&r) - 0.5); }
    double t[5];
    if (own) gemm_rm(0, 0, n, n, n, 1, A, n, B, n, 0, C, n); else blas_gemm(n, A, B, C);
    for (int i = 0; i < 5; i++) {
        double t0 = now_s();
        if (own) gemm_rm(0, 0, n, n, n, 1, A, n, B, n, 0, C, n); else blas_gemm(n, A, B, C);
        t[i] = now_s() - t0;
    }
    free(A); free(B); free(C);
    return 2.0 * n * n * n / median(t, 5) / 1e9;
}

typedef struct {
    const char *preset;
    int B, T, warm, K;
} BenchCase;

typedef struct {
    double ms_fb, ms_full, ms_fwd, ms_bwd, ms_opt;
    long fb_first, fb_last, full_first, full_last;
    double flops;
    size_t compute, table;
    double loss0, loss1;
} BenchResult;

static int run_case(const BenchCase *bc, BenchResult *res) {
    Config c;
    dm_err err = {0};
    if (config_preset(&c, bc->preset, &err)) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
    c.batch = bc->B;
    c.seq = bc->T;
    Model m;
    if (model_create(&m, &c, backend_cpu(), 1, &err)) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
    Optim o;
    if (optim_create(&o, &m, &err)) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
    model_param_counts(&m, &res->compute, &res->table);
    int B = bc->B, T = bc->T, N = B * T;
    int *x = malloc(sizeof(int) * N), *y = malloc(sizeof(int) * N);
    Rng r = {12345};
    long step = 0;  // global step index over warm-up, (a) and (b)
    int K = bc->K;
    double *fb = malloc(sizeof(double) * K), *full = malloc(sizeof(double) * K);
    double *fw = malloc(sizeof(double) * K), *bw = malloc(sizeof(double) * K), *op = malloc(sizeof(double) * K);
    StepInfo info;
    // warm-up: full steps (touches every buffer, the optimizer state and the BLAS)
    for (int i = 0; i < bc->warm; i++, step++) {
        for (int j = 0; j < N; j++) { x[j] = (int)(rng_next(&r) & 255); y[j] = (int)(rng_next(&r) & 255); }
        model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
        if (i == 0) res->loss0 = m.last_loss;
        model_backward(&m);
        if (optim_step(&o, &m, step, model_objective(&m), &info, &err)) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
    }
    // (a) forward + backward
    res->fb_first = step;
    for (int i = 0; i < K; i++, step++) {
        for (int j = 0; j < N; j++) { x[j] = (int)(rng_next(&r) & 255); y[j] = (int)(rng_next(&r) & 255); }
        double t0 = now_s();
        model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
        model_backward(&m);
        fb[i] = now_s() - t0;
    }
    res->fb_last = step - 1;
    // (b) full step, with its phases
    res->full_first = step;
    for (int i = 0; i < K; i++, step++) {
        for (int j = 0; j < N; j++) { x[j] = (int)(rng_next(&r) & 255); y[j] = (int)(rng_next(&r) & 255); }
        double t0 = now_s();
        model_forward(&m, x, y, B, T, c.L, FWD_TRAIN);
        double t1 = now_s();
        model_backward(&m);
        double t2 = now_s();
        if (optim_step(&o, &m, step, model_objective(&m), &info, &err)) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
        double t3 = now_s();
        full[i] = t3 - t0; fw[i] = t1 - t0; bw[i] = t2 - t1; op[i] = t3 - t2;
    }
    res->full_last = step - 1;
    res->loss1 = m.last_loss;
    res->ms_fb = 1e3 * median(fb, K);
    res->ms_full = 1e3 * median(full, K);
    res->ms_fwd = 1e3 * median(fw, K);
    res->ms_bwd = 1e3 * median(bw, K);
    res->ms_opt = 1e3 * median(op, K);
    res->flops = model_flops_per_step(&c, B, T, &m.arms);
    free(x); free(y); free(fb); free(full); free(fw); free(bw); free(op);
    optim_free(&o);
    model_free(&m);
    return 0;
}

int main(int argc, char **argv) {
    // optional: a subset of presets by name (`bench_cpu nano`); `nogemm` skips the GEMM
    // reference (for profiling the training steps alone: `perf record ./bench_cpu nano nogemm`)
    BenchCase cases[] = {
        {"nano", 8, 128, 3, 20},
        {"mini", 8, 256, 2, 10},
        {"small", 8, 512, 1, 4},
    };
    int nc = (int)(sizeof cases / sizeof cases[0]);
    int nogemm = 0, npick = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "nogemm") == 0) { nogemm = 1; continue; }
        int known = 0;
        for (int i = 0; i < nc; i++) known |= strcmp(argv[a], cases[i].preset) == 0;
        if (!known) {  // (it printed the footer alone: QA)
            fprintf(stderr, "bench_cpu: unknown argument '%s' (presets: nano, mini, small; nogemm skips the GEMM reference)\n", argv[a]);
            return 2;
        }
        npick++;
    }
    const char *omp = getenv("OMP_NUM_THREADS"), *obl = getenv("OPENBLAS_NUM_THREADS");
    printf("dmsh bench_cpu: backend cpu, real = %s, OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s\n",
           sizeof(real) == 4 ? "float" : "double", omp ? omp : "(unset)", obl ? obl : "(unset)");
    char desc[512];
    backend_cpu()->describe(desc, sizeof desc);
    printf("%s\n", desc);
    // The GEMM rate is measured before the presets (the ratios use it) and again after them: on a
    // shared machine clock and load drift, and the second number shows by how much.
    double g_before = nogemm ? NAN : gemm_gflops(1024, 0), g = g_before;
    if (nogemm) printf("GEMM reference skipped (nogemm): the ratio columns are n/a\n");
    else printf("cblas_%s 1024^3: %.1f GFLOP/s (median of 5; the ratios use this)\n", sizeof(real) == 4 ? "sgemm" : "dgemm", g);
    // the backend's own product (float): the second ratio, "own", is against it — the rate the
    // step's products could reach at best on this machine (it can exceed the vendor BLAS's)
    double g_own = nogemm || sizeof(real) != 4 ? NAN : gemm_gflops(1024, 1);
    if (!isnan(g_own))
        printf("dm_sgemm (kernels/cpu/sgemm.c, the backend's product) 1024^3: %.1f GFLOP/s (the \"own\" ratios use this)\n", g_own);
    printf("\n");
    printf("%-6s %3s %4s  %-11s %-9s %9s %9s %9s %8s %6s %6s\n", "preset", "B", "T", "phase", "steps",
           "ms/step", "tok/s", "GFLOP", "GFLOP/s", "ratio", "own");
    for (int i = 0; i < nc; i++) {
        if (npick) {
            int want = 0;
            for (int a = 1; a < argc; a++) want |= strcmp(argv[a], cases[i].preset) == 0;
            if (!want) continue;
        }
        BenchResult r;
        double t0 = now_s();
        if (run_case(&cases[i], &r)) return 1;
        double wall = now_s() - t0;
        const BenchCase *bc = &cases[i];
        double tok = (double)bc->B * bc->T;
        char s1[32], s2[32];
        snprintf(s1, sizeof s1, "%ld..%ld", r.fb_first, r.fb_last);
        snprintf(s2, sizeof s2, "%ld..%ld", r.full_first, r.full_last);
        // model FLOPs count forward + backward; the full step adds the (uncounted) optimizer
        double rfb = r.flops / (r.ms_fb * 1e-3) / 1e9, rfull = r.flops / (r.ms_full * 1e-3) / 1e9;
        char q[4][16];  // the ratios; "n/a" where no reference rate was measured
        const double qv[4] = {rfb / g, rfb / g_own, rfull / g, rfull / g_own};
        for (int k = 0; k < 4; k++) {
            if (isnan(qv[k])) snprintf(q[k], sizeof q[k], "n/a");
            else snprintf(q[k], sizeof q[k], "%.3f", qv[k]);
        }
        printf("%-6s %3d %4d  %-11s %-9s %9.1f %9.0f %9.2f %8.2f %6s %6s\n", bc->preset, bc->B, bc->T,
               "fwd+bwd", s1, r.ms_fb, tok / (r.ms_fb * 1e-3), r.flops / 1e9, rfb, q[0], q[1]);
        printf("%-6s %3d %4d  %-11s %-9s %9.1f %9.0f %9.2f %8.2f %6s %6s\n", bc->preset, bc->B, bc->T,
               "full step", s2, r.ms_full, tok / (r.ms_full * 1e-3), r.flops / 1e9, rfull, q[2], q[3]);
        printf("%-6s             phases of the full step (medians): forward %.1f ms, backward %.1f ms, "
               "optimizer %.1f ms; params %.2fM compute + %.2fM table; loss %.3f -> %.3f; %.0f s\n",
               "", r.ms_fwd, r.ms_bwd, r.ms_opt, r.compute / 1e6, r.table / 1e6, r.loss0, r.loss1, wall);
        fflush(stdout);
    }
    double g_after = nogemm ? NAN : gemm_gflops(1024, 0);
    if (!nogemm)
        printf("\ncblas_%s 1024^3 again after the presets: %.1f GFLOP/s (before: %.1f, used for the ratios; "
               "the two differ by %.0f%%: the machine's noise)\n", sizeof(real) == 4 ? "sgemm" : "dgemm",
               g_after, g_before, 100 * fabs(g_after - g_before) / fmax(g_after, g_before));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\npeak RSS %.0f MiB. ratio = model GFLOP/s / cblas GFLOP/s (CPU \"MFU\" against the vendor BLAS), own = the same against dm_sgemm; model FLOPs per "
           "step = 3 x forward matrix-product FLOPs (engine/flops.c); tok/s = B*T / median step time.\n",
           ru.ru_maxrss / 1024.0);
    return 0;
}
