// parity_common.cuh — what the CUDA parity programs share (tests/gpu/parity*.cu): the two
// backends, fixed-seed random inputs, device mirrors of host vectors, and the report rows
// (normwise relative error max|gpu - cpu| / max|cpu|; a NaN or a non-finite GPU value fails).
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
extern "C" {
#include "../../kernels/backend.h"
void cuda_set_precision(int fp32);
}

// defined once, in parity.cu: the two backends and the pass/fail tally of every file
extern const Backend *C_, *G_;
extern int n_fail, n_pass;

// ---- random numbers: a fixed-seed xorshift, so a failure reproduces ----
static uint64_t rng = 0x9E3779B97F4A7C15ULL;  // per file: each file's rows reproduce alone
static inline float urand() {  // [0, 1)
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0));
}
static inline float nrand() { return (urand() + urand() + urand() + urand() - 2.0f) * 1.7320508f; }
static inline std::vector<float> randv(size_t n, float scale = 1) {
    std::vector<float> v(n);
    for (auto &x : v) x = nrand() * scale;
    return v;
}

// ---- device mirrors ----
struct Dev {
    void *p = NULL; size_t bytes = 0;
    Dev() {}
    explicit Dev(size_t b) : bytes(b) { p = G_->alloc(b); if (!p) { fprintf(stderr, "device alloc failed\n"); exit(2); } }
    ~Dev() { if (p) G_->free(p); }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    float *f() { return (float *)p; }
    int *i() { return (int *)p; }
};
template <typename T> static Dev *up(const std::vector<T> &v) {
    Dev *d = new Dev(sizeof(T) * (v.size() ? v.size() : 1));
    if (v.size()) G_->upload(d->p, v.data(), sizeof(T) * v.size());
    return d;
}
template <typename T> static std::vector<T> down(Dev *d, size_t n) {
    std::vector<T> v(n);
    if (n) G_->download(v.data(), d->p, sizeof(T) * n);
    return v;
}

static inline void report(const char *name, double err, double tol, const char *note = "") {
    int ok = err <= tol;  // NaN fails
    printf("  %-34s %-4s  rel err %9.2e  (tol %.0e) %s\n", name, ok ? "PASS" : "FAIL", err, tol, note);
    if (ok) n_pass++; else n_fail++;
}
// the larger of two errors, a NaN being the worst (fmax would drop it)
static inline double worst2(double a, double b) { return isnan(a) || isnan(b) ? INFINITY : fmax(a, b); }
static inline double relerr(const float *cpu, const float *gpu, size_t n) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i]) || !isfinite(cpu[i])) {  // must match exactly (a NaN never does)
            if (!(gpu[i] == cpu[i])) return INFINITY;
            continue;
        }
        mx = fmax(mx, fabs((double)cpu[i]));
        md = fmax(md, fabs((double)gpu[i] - cpu[i]));
    }
    return mx > 0 ? md / mx : md;
}
static inline void cmp(const char *name, const std::vector<float> &cpu, Dev *gpu, double tol) {
    std::vector<float> g = down<float>(gpu, cpu.size());
    report(name, relerr(cpu.data(), g.data(), cpu.size()), tol);
}
static inline void cmp_exact_i(const char *name, const std::vector<int> &cpu, Dev *gpu) {
    std::vector<int> g = down<int>(gpu, cpu.size());
    size_t bad = 0;
    for (size_t i = 0; i < cpu.size(); i++) bad += cpu[i] != g[i];
    char note[64];
    snprintf(note, sizeof note, "(%zu of %zu differ)", bad, cpu.size());
    report(name, bad ? 1.0 : 0.0, 0, note);
}

// the row groups that live in their own files
void t_optim();   // parity_optim.cu
void t_fused();   // parity_fused.cu
