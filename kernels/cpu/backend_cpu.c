// backend_cpu.c — the CPU implementation of the backend table (kernels/backend.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <dirent.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "../backend.h"
#include "fused.h"
#include "kda.h"
#include "moe.h"
#include "ops.h"
#include "optim_ops.h"
#include "retract.h"
#include "blas.h"

// Allocations carry their size in a 16-byte header (the block stays 16-byte aligned, as calloc
// gives) so :bench can report the memory the backend holds, now and at its peak.
// Large blocks (the activation arena, parameters, gradients, moments) are mapped on their own,
// 2 MiB aligned, and asked for transparent huge pages: the step streams through ~70 MB of
// activations at nano, and with 4 KiB pages that is ~17 000 pages against a 2 048-entry L2 TLB.
// Header: [mapped length or 0][size]; the mapping's base is found by aligning down.
enum { HUGE_MIN = 4 << 20, HUGE_SZ = 2 << 20, HDR = 64 };
static size_t mem_cur, mem_peak;
static long n_allocs;  // allocations ever made (Backend.allocs: a captured step asserts none happen)
// Memory the host can still give (MemAvailable + SwapFree of /proc/meminfo): 0 when unknown.
double host_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0, v;
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %lf kB", &v) == 1 || sscanf(line, "SwapFree: %lf kB", &v) == 1) { kb += v; seen++; }
    }
    fclose(f);
    return seen ? kb * 1024 : 0;
}

// GPUs the NVIDIA driver lists (a directory per GPU in /proc/driver/nvidia/gpus, or in dir):
// 0 when none or no driver. Read without loading CUDA (a CPU session never loads cuBLAS).
int host_nvidia_gpus(const char *dir) {
    DIR *d = opendir(dir ? dir : "/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static void *cpu_alloc(size_t bytes) {
    char *p;
    size_t maplen = 0;
    if (bytes >= HUGE_MIN) {
        // a block past what the host has (an activation arena for a huge batch) would be mapped,
        // then touched until the OOM killer came (the kernel overcommits): failed, as the callers
        // of alloc already say in one line (QA, session 24)
        double have = host_memory_available();
        if (have > 0 && (double)bytes > have) return NULL;
        maplen = (bytes + HDR + HUGE_SZ - 1) / HUGE_SZ * HUGE_SZ + HUGE_SZ;
        char *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        // keep only the aligned part (the kernel zero-fills it): [base, base + len)
        char *base = (char *)(((uintptr_t)m + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1));
        size_t len = maplen - HUGE_SZ;
        if (base > m) munmap(m, (size_t)(base - m));
        if (m + maplen > base + len) munmap(base + len, (size_t)(m + maplen - (base + len)));
        madvise(base, len, MADV_HUGEPAGE);  // a hint: without THP the pages are ordinary ones
        maplen = len;
        p = base + HDR - 16;
    } else {
        p = calloc(bytes + 16, 1);
        if (!p) return NULL;
    }
    n_allocs++;
    ((size_t *)p)[0] = maplen;
    ((size_t *)p)[1] = bytes;
    mem_cur += bytes;
    if (mem_cur > mem_peak) mem_peak = mem_cur;
    return p + 16;
}
static void cpu_free(void *p) {
    if (!p) return;
    char *b = (char *)p - 16;
    size_t maplen = ((size_t *)b)[0];
    mem_cur -= ((size_t *)b)[1];
    if (maplen) munmap(b + 16 - HDR, maplen);
    else free(b);
}
static void cpu_mem_stats(size_t *cur, size_t *peak) { *cur = mem_cur; *peak = mem_peak; }
static void cpu_mem_peak_set(size_t peak) { mem_peak = peak > mem_cur ? peak : mem_cur; }

// "cpu: MODEL NAME, N cores (OpenMP threads T), float GEMM: ..." from /proc/cpuinfo
int cpu_flushes_subnormals(void);
static void cpu_describe(char *buf, size_t n) {
    char model[128] = "unknown CPU", line[512];
    int cores = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
        }
        if (!strncmp(line, "processor", 9)) cores++;
    }
    if (f) fclose(f);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const char *wp = getenv("OMP_WAIT_POLICY"), *sc = getenv("GOMP_SPINCOUNT");
    char wait[96];
    if (wp) snprintf(wait, sizeof wait, " (OMP_WAIT_POLICY=%.40s)", wp);
    else if (sc) snprintf(wait, sizeof wait, " (GOMP_SPINCOUNT=%.40s)", sc);
    else snprintf(wait, sizeof wait, " (idle threads spin first: OMP_WAIT_POLICY unset)");
    snprintf(buf, n, "cpu: %s, %d logical cores, OpenMP threads %d%s; subnormals %s; matrix products: %s", model, cores, threads, wait,
             cpu_flushes_subnormals() ? "flushed to zero" : "kept (slow)",
             sizeof(real) == 4 ?
#if defined(__AVX512F__)
             "own AVX-512 sgemm, 6x32 tiles (kernels/cpu/sgemm.c)"
#elif defined(__AVX2__) && defined(__FMA__)
             "own AVX2/FMA sgemm, 6x16 tiles (kernels/cpu/sgemm.c)"
#else
             "OpenBLAS sgemm on one thread"
#endif
             : "OpenBLAS dgemm on one thread (double build)");
}
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
// staging memory is ordinary host memory here: nothing reads it asynchronously
static void *cpu_host_alloc(size_t bytes) { n_allocs++; return calloc(bytes ? bytes : 1, 1); }
static long cpu_allocs(void) { return n_allocs; }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_gemm(int tA, int tB, int M, int N, int K, real alpha, const real *A, int lda,
                     const real *B, int ldb, real beta, real *C, int ldc) {
    gemm_lp(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#ifndef DM_DOUBLE
static void cpu_emulate_bf16(int on) { dm_emulate_bf16 = on ? 1 : 0; }
#endif

static const Backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc, .free = cpu_free, .zero = cpu_zero, .upload = cpu_copy, .download = cpu_copy,
    .matmul_forward = matmul_forward, .matmul_backward = matmul_backward, .gemm = cpu_gemm,
    .rmsnorm_forward = rmsnorm_forward, .rmsnorm_backward = rmsnorm_backward,
    .l2norm_forward = l2norm_forward, .l2norm_backward = l2norm_backward,
    .silu_forward = silu_forward, .silu_backward = silu_backward,
    .sigmoid_forward = sigmoid_forward, .sigmoid_backward = sigmoid_backward,
    .embedding_forward = embedding_forward, .embedding_backward = embedding_backward,
    .softmax_ce_forward = softmax_ce_forward, .softmax_ce_backward = softmax_ce_backward,
    .engram_rows = engram_rows, .engram_gather = engram_gather, .engram_scatter = engram_scatter,
    .kda_ws_size = kda_chunk_ws_size, .kda_forward = kda_chunk_forward, .kda_backward = kda_chunk_backward,
    .kda_step = kda_step,
    .describe = cpu_describe, .mem_stats = cpu_mem_stats, .mem_peak_set = cpu_mem_peak_set, .set_precision = NULL,
#ifndef DM_DOUBLE
    .emulate_bf16 = cpu_emulate_bf16,
#endif
    .moe_ws_size = moe_ws_size, .moe_forward = moe_forward, .moe_backward = moe_backward,
    .moe_route_read = moe_route_read, .moe_forward_routed = moe_forward_routed,
    // fused element-wise ops of the looped block (fused.c)
    .add_row_forward = add_row_forward, .silu_rows_forward = silu_rows_forward,
    .sigmoid_split_forward = sigmoid_split_forward, .decay_gate_forward = decay_gate_forward,
    .gate_mul_forward = gate_mul_forward, .mem_gate_forward = mem_gate_forward, .mix_forward = mix_forward,
    .running_mean_forward = running_mean_forward, .sum_forward = sum_forward,
    .ce_logits_backward = ce_logits_backward, .running_mean_backward = running_mean_backward,
    .rezero_backward = rezero_backward, .mix_arm_backward = mix_arm_backward,
    .gate_mul_backward = gate_mul_backward, .decay_gate_backward = decay_gate_backward,
    .sigmoid_rows_backward = sigmoid_rows_backward, .silu_rows_backward = silu_rows_backward,
    .l2norm_silu_backward = l2norm_silu_backward, .mem_gate_backward = mem_gate_backward,
    .bias_backward = bias_backward, .copy_rows = copy_rows, .add_inplace = add_inplace,
    .retract_scratch_size = retract_scratch_size, .retract = retract, .orth_error = orth_error,
    // optimizer ops (optim_ops.c)
    .opt_sumsq = opt_sumsq, .opt_decide = opt_decide, .opt_clip = opt_clip, .opt_adamw = opt_adamw,
    .opt_adam_rows_ws_size = opt_adam_rows_ws_size, .opt_adam_rows = opt_adam_rows,
    .opt_muon_scratch_size = opt_muon_scratch_size, .opt_muon = opt_muon,
    .opt_retract_scratch_size = opt_retract_scratch_size, .opt_retract = opt_retract,
    // the step as one unit (optim_ops.c). Every op has run when it returns, so upload_async is a
    // copy, and upload_wait, sync and the graph entries are NULL: the engine runs the step eagerly.
    .step_loss = step_loss, .step_begin = step_begin, .step_end = step_end,
    .host_alloc = cpu_host_alloc, .host_free = free, .upload_async = cpu_copy, .allocs = cpu_allocs,
};

// Subnormal numbers flush to zero (FTZ: results; DAZ: inputs) on every thread that runs the CPU
// ops. The KDA arm's chunked products scale keys and queries by exp of a cumulative decay, which
// reaches the subnormal range as the decay learns; x86 handles a subnormal operand or result in
// microcode, ~100x slower: nano's step slowed by half over 400 steps, and a diverging run (or
// :stress) ran 10x slower (QA, session 26). Values below 1.2e-38 change nothing a float step can
// see. Set once, on the first use: this thread and every OpenMP worker (a worker made later is a
// clone of one that has it). The same binary and backend still give the same bits every run.
// OpenBLAS runs on one thread whatever OPENBLAS_NUM_THREADS says (blas.h: its result depended on
// its thread count), set on the same first use.
#include <pthread.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
static void set_ftz_daz(void) { _mm_setcsr(_mm_getcsr() | 0x8040); }  // FTZ (bit 15) | DAZ (bit 6)
int cpu_flushes_subnormals(void) { return (_mm_getcsr() & 0x8040) == 0x8040; }
#else
static void set_ftz_daz(void) {}
int cpu_flushes_subnormals(void) { return 0; }
#endif
static int blas_omp;  // OpenBLAS built with OpenMP: its thread count is OpenMP's at each call
int dm_blas_enter(void) {
#ifdef _OPENMP
    if (!blas_omp) return 0;
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    return nt;
#else
    return 0;
#endif
}
void dm_blas_leave(int saved) {
#ifdef _OPENMP
    if (blas_omp && saved > 0) omp_set_num_threads(saved);
#else
    (void)saved;
#endif
}
static void cpu_once(void) {
    blas_omp = openblas_get_parallel() == 2;
#ifdef _OPENMP
    // (an OpenMP build of OpenBLAS sets OpenMP's thread count with its own: put ours back; its
    // calls get one thread by dm_blas_enter)
    int nt = omp_get_max_threads();
    openblas_set_num_threads(1);
    omp_set_num_threads(nt);
#else
    openblas_set_num_threads(1);
#endif
    set_ftz_daz();
#ifdef _OPENMP
#pragma omp parallel
    set_ftz_daz();
#endif
}
static pthread_once_t cpu_once_flag = PTHREAD_ONCE_INIT;
const Backend *backend_cpu(void) {
    pthread_once(&cpu_once_flag, cpu_once);
    return &cpu_backend;
}
