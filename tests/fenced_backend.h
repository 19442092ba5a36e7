// fenced_backend.h — test-only: the CPU backend behind a memory fence, to prove the engine is
// device-clean (it touches activations, parameters and gradients only through the Backend
// table, as it must when they are device memory).
//
// fenced_backend() returns a table whose alloc hands out page-aligned mmap'd regions that are
// kept PROT_NONE whenever no backend call is running. Every entry — each op, zero, upload,
// download — opens all registered regions (PROT_READ | PROT_WRITE) on entry, calls the CPU
// backend's entry, and closes them again on exit. Any host dereference of backend memory by the
// engine therefore faults (SIGSEGV) instead of silently working as it does on the plain CPU
// backend. The arithmetic is the CPU backend's, so results must match it bit for bit.
//
// The wrappers below were generated from kernels/backend.h's entries; fenced_backend_complete()
// reports an entry of the table that has no wrapper (a new op: add it here and to FENCE_OPS).
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../kernels/backend.h"

// FENCE_HOOKS: a file that defines it before including this one supplies fence_inner,
// fence_open() and fence_close() itself and gets only the wrappers (fw_*) and FENCE_OPS — e.g.
// a test that wraps another backend.
static long fb_nallocs;    // fb_alloc calls (Backend.allocs; stays 0 under FENCE_HOOKS)
#ifndef FENCE_HOOKS
typedef struct { void *base; size_t len; } FenceRegion;
static FenceRegion fence_regs[1024];
static int fence_nregs, fence_depth;
static long fence_calls;  // backend entries called through the fence (a test sanity check)
static const Backend *fence_inner;

static void fence_protect(int prot) {
    for (int i = 0; i < fence_nregs; i++)
        if (mprotect(fence_regs[i].base, fence_regs[i].len, prot) != 0) {
            perror("fenced_backend: mprotect");
            abort();
        }
}
// nesting-safe: only the outermost entry opens / closes the fence
static void fence_open(void) {
    fence_calls++;
    if (fence_depth++ == 0) fence_protect(PROT_READ | PROT_WRITE);
}
static void fence_close(void) {
    if (--fence_depth == 0) fence_protect(PROT_NONE);
}

static size_t fence_round(size_t bytes) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return ((bytes ? bytes : 1) + pg - 1) / pg * pg;
}
static void *fb_alloc(size_t bytes) {
    if (fence_nregs == (int)(sizeof fence_regs / sizeof fence_regs[0])) return NULL;
    size_t len = fence_round(bytes);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zero-filled
    if (p == MAP_FAILED) return NULL;
    if (fence_depth == 0 && mprotect(p, len, PROT_NONE) != 0) { munmap(p, len); return NULL; }
    fence_regs[fence_nregs++] = (FenceRegion){p, len};
    fb_nallocs++;
    return p;
}
static void fb_free(void *p) {
    if (!p) return;
    for (int i = 0; i < fence_nregs; i++)
        if (fence_regs[i].base == p) {
            munmap(p, fence_regs[i].len);
            fence_regs[i] = fence_regs[--fence_nregs];
            return;
        }
    fprintf(stderr, "fenced_backend: free of %p, which the backend did not allocate\n", p);
    abort();
}
static void fb_zero(void *p, size_t bytes) { fence_open(); fence_inner->zero(p, bytes); fence_close(); }
static void fb_upload(void *dst, const void *src, size_t bytes) {
    fence_open(); fence_inner->upload(dst, src, bytes); fence_close();
}
static void fb_download(void *dst, const void *src, size_t bytes) {
    fence_open(); fence_inner->download(dst, src, bytes); fence_close();
}

#endif  // FENCE_HOOKS

// ---- one wrapper per op (generated from kernels/backend.h) ----
static void fw_matmul_forward(real *out, const real *inp, const real *W, const real *bias, int N, int C,
    int OC) {
    fence_open(); fence_inner->matmul_forward(out, inp, W, bias, N, C, OC); fence_close();
}
static void fw_matmul_backward(real *dinp, real *dW, real *dbias, const real *dout, const real *inp,
    const real *W, int N, int C, int OC) {
    fence_open(); fence_inner->matmul_backward(dinp, dW, dbias, dout, inp, W, N, C, OC); fence_close();
}
static void fw_gemm(int transA, int transB, int M, int N, int K, real alpha, const real *A, int lda,
    const real *B, int ldb, real beta, real *C, int ldc) {
    fence_open(); fence_inner->gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        fence_close();
}
static void fw_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *gain, int N, int C) {
    fence_open(); fence_inner->rmsnorm_forward(out, rstd, inp, gain, N, C); fence_close();
}
static void fw_rmsnorm_backward(real *dinp, real *dgain, const real *dout, const real *inp, const real
    *gain, const real *rstd, int N, int C) {
    fence_open(); fence_inner->rmsnorm_backward(dinp, dgain, dout, inp, gain, rstd, N, C);
        fence_close();
}
static void fw_l2norm_forward(real *out, real *rn, const real *inp, real scale, int N, int C) {
    fence_open(); fence_inner->l2norm_forward(out, rn, inp, scale, N, C); fence_close();
}
static void fw_l2norm_backward(real *dinp, const real *dout, const real *out, const real *rn, real
    scale, int N, int C) {
    fence_open(); fence_inner->l2norm_backward(dinp, dout, out, rn, scale, N, C); fence_close();
}
static void fw_silu_forward(real *out, const real *inp, size_t n) {
    fence_open(); fence_inner->silu_forward(out, inp, n); fence_close();
}
static void fw_silu_backward(real *dinp, const real *dout, const real *inp, size_t n) {
    fence_open(); fence_inner->silu_backward(dinp, dout, inp, n); fence_close();
}
static void fw_sigmoid_forward(real *out, const real *inp, size_t n) {
    fence_open(); fence_inner->sigmoid_forward(out, inp, n); fence_close();
}
static void fw_sigmoid_backward(real *dinp, const real *dout, const real *out, size_t n) {
    fence_open(); fence_inner->sigmoid_backward(dinp, dout, out, n); fence_close();
}
static void fw_embedding_forward(real *out, const int *x, const real *table, int N, int C) {
    fence_open(); fence_inner->embedding_forward(out, x, table, N, C); fence_close();
}
static void fw_embedding_backward(real *dtable, const real *dout, const int *x, int N, int C) {
    fence_open(); fence_inner->embedding_backward(dtable, dout, x, N, C); fence_close();
}
static void fw_softmax_ce_forward(real *losses, real *probs, const real *logits, const int *targets, int
    N, int V) {
    fence_open(); fence_inner->softmax_ce_forward(losses, probs, logits, targets, N, V); fence_close();
}
static void fw_softmax_ce_backward(real *dlogits, const real *probs, const int *targets, real scale, int
    N, int V) {
    fence_open(); fence_inner->softmax_ce_backward(dlogits, probs, targets, scale, N, V); fence_close();
}
static void fw_engram_rows(int32_t *rows, const int *x, int B, int T, const int *orders, int O, int64_t
    R) {
    fence_open(); fence_inner->engram_rows(rows, x, B, T, orders, O, R); fence_close();
}
static void fw_engram_gather(real *m, const real *tables, const int32_t *rows, int N, int O, int64_t R,
    int D) {
    fence_open(); fence_inner->engram_gather(m, tables, rows, N, O, R, D); fence_close();
}
static void fw_engram_scatter(real *dtables, const real *dm, const int32_t *rows, int N, int O, int64_t
    R, int D) {
    fence_open(); fence_inner->engram_scatter(dtables, dm, rows, N, O, R, D); fence_close();
}
static size_t fw_kda_ws_size(int B, int T, int H, int D, int C) {
    fence_open(); size_t res_ = fence_inner->kda_ws_size(B, T, H, D, C); fence_close(); return res_;
}
static void fw_kda_forward(real *o, real *ws, const real *q, const real *k, const real *v, const real
    *beta, const real *g, int B, int T, int H, int D, int C) {
    fence_open(); fence_inner->kda_forward(o, ws, q, k, v, beta, g, B, T, H, D, C); fence_close();
}
static void fw_kda_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout, const
    real *q, const real *k, const real *v, const real *beta, const real *g, real *ws, int B, int T, int
    H, int D, int C) {
    fence_open(); fence_inner->kda_backward(dq, dk, dv, dbeta, dg, dout, q, k, v, beta, g, ws, B, T, H,
        D, C); fence_close();
}
static void fw_kda_step(real *o, real *S, const real *q, const real *k, const real *v, const real *beta,
    const real *g, int H, int D) {
    fence_open(); fence_inner->kda_step(o, S, q, k, v, beta, g, H, D); fence_close();
}
static size_t fw_moe_ws_size(MoEShape s) {
    fence_open(); size_t res_ = fence_inner->moe_ws_size(s); fence_close(); return res_;
}
static void fw_moe_forward(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
    MoEParams p, MoEShape s) {
    fence_open(); fence_inner->moe_forward(out, aux, load, ws, n, z, p, s); fence_close();
}
static void fw_moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws, const
    real *n, const real *z, MoEParams p, MoEShape s) {
    fence_open(); fence_inner->moe_backward(dn, dz, g, dout, daux, ws, n, z, p, s); fence_close();
}
static void fw_moe_route_read(int *idx, const real *ws, MoEShape s) {
    fence_open(); fence_inner->moe_route_read(idx, ws, s); fence_close();
}
static void fw_moe_forward_routed(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
    MoEParams p, MoEShape s, const int *route, MoERouteDiff *diff) {
    fence_open(); fence_inner->moe_forward_routed(out, aux, load, ws, n, z, p, s, route, diff); fence_close();
}
static void fw_add_row_forward(real *out, const real *inp, const real *row, int N, int C) {
    fence_open(); fence_inner->add_row_forward(out, inp, row, N, C); fence_close();
}
static void fw_silu_rows_forward(real *out, real *sg, const real *inp, int ldx, int N, int C) {
    fence_open(); fence_inner->silu_rows_forward(out, sg, inp, ldx, N, C); fence_close();
}
static void fw_sigmoid_split_forward(real *sg, real *cp, const real *inp, int ldx, const real *bias, int
    N, int Cs, int Cc) {
    fence_open(); fence_inner->sigmoid_split_forward(sg, cp, inp, ldx, bias, N, Cs, Cc); fence_close();
}
static void fw_decay_gate_forward(real *gs, real *g, const real *z, const real *A, const real *bias,
    real gmin, int N, int H, int dh) {
    fence_open(); fence_inner->decay_gate_forward(gs, g, z, A, bias, gmin, N, H, dh); fence_close();
}
static void fw_gate_mul_forward(real *gt, real *og, const real *on, const real *bias, int N, int C) {
    fence_open(); fence_inner->gate_mul_forward(gt, og, on, bias, N, C); fence_close();
}
static void fw_mem_gate_forward(real *gate, real *e, const real *nn, const real *kn, const real *val,
    real scale, int N, int C) {
    fence_open(); fence_inner->mem_gate_forward(gate, e, nn, kn, val, scale, N, C); fence_close();
}
static void fw_mix_forward(real *body, real *h, const real *hprev, const real *w, const real *a, const
    real *e, const real *gout, real cap, const real *alpha, int N, int C) {
    fence_open(); fence_inner->mix_forward(body, h, hprev, w, a, e, gout, cap, alpha, N, C);
        fence_close();
}
static void fw_running_mean_forward(real *out, const real *prev, const real *y, int i, size_t n) {
    fence_open(); fence_inner->running_mean_forward(out, prev, y, i, n); fence_close();
}
static void fw_sum_forward(double *out, const real *x, size_t n) {
    fence_open(); fence_inner->sum_forward(out, x, n); fence_close();
}
static void fw_ce_logits_backward(real *dlogits, const real *probs, const int *targets, real scale, int
    N, int V) {
    fence_open(); fence_inner->ce_logits_backward(dlogits, probs, targets, scale, N, V); fence_close();
}
static void fw_running_mean_backward(real *dy, real *dbar, int i, size_t n) {
    fence_open(); fence_inner->running_mean_backward(dy, dbar, i, n); fence_close();
}
static void fw_rezero_backward(real *dbody, real *dalpha, const real *dh, const real *body, const real
    *alpha, size_t n) {
    fence_open(); fence_inner->rezero_backward(dbody, dalpha, dh, body, alpha, n); fence_close();
}
static void fw_mix_arm_backward(real *darm, real *dw, const real *dbody, const real *arm, const real *w,
    int j, int use_cap, real cap, int N, int C) {
    fence_open(); fence_inner->mix_arm_backward(darm, dw, dbody, arm, w, j, use_cap, cap, N, C);
        fence_close();
}
static void fw_gate_mul_backward(real *don, real *dpre, const real *dog, const real *gt, const real *on,
    size_t n) {
    fence_open(); fence_inner->gate_mul_backward(don, dpre, dog, gt, on, n); fence_close();
}
static void fw_decay_gate_backward(real *dz, real *dA, real *dbias, const real *dg, const real *gs,
    const real *z, const real *A, const real *bias, real gmin, int N, int H, int dh) {
    fence_open(); fence_inner->decay_gate_backward(dz, dA, dbias, dg, gs, z, A, bias, gmin, N, H, dh);
        fence_close();
}
static void fw_sigmoid_rows_backward(real *dx, int ldd, const real *dy, const real *y, int N, int C) {
    fence_open(); fence_inner->sigmoid_rows_backward(dx, ldd, dy, y, N, C); fence_close();
}
static void fw_silu_rows_backward(real *dx, int ldd, const real *dy, const real *x, int ldx, const real
    *sg, int N, int C) {
    fence_open(); fence_inner->silu_rows_backward(dx, ldd, dy, x, ldx, sg, N, C); fence_close();
}
static void fw_l2norm_silu_backward(real *dx, int ldd, const real *dy, const real *y, const real *rn,
    real scale, const real *x, int ldx, const real *sg, int N, int H, int dh) {
    fence_open(); fence_inner->l2norm_silu_backward(dx, ldd, dy, y, rn, scale, x, ldx, sg, N, H, dh);
        fence_close();
}
static void fw_mem_gate_backward(real *dnn, real *dkn, real *dval, const real *de, const real *gate,
    const real *nn, const real *kn, const real *val, real scale, int N, int C) {
    fence_open(); fence_inner->mem_gate_backward(dnn, dkn, dval, de, gate, nn, kn, val, scale, N, C);
        fence_close();
}
static void fw_bias_backward(real *dbias, const real *dout, int ld, int N, int C) {
    fence_open(); fence_inner->bias_backward(dbias, dout, ld, N, C); fence_close();
}
static void fw_copy_rows(real *dst, int ldd, const real *src, int lds, int N, int C) {
    fence_open(); fence_inner->copy_rows(dst, ldd, src, lds, N, C); fence_close();
}
static void fw_add_inplace(real *dst, const real *src, size_t n) {
    fence_open(); fence_inner->add_inplace(dst, src, n); fence_close();
}
static size_t fw_retract_scratch_size(int rows, int r) {
    fence_open(); size_t res_ = fence_inner->retract_scratch_size(rows, r); fence_close(); return res_;
}
static void fw_retract(real *X, int rows, int r, int iters, real *scratch) {
    fence_open(); fence_inner->retract(X, rows, r, iters, scratch); fence_close();
}
static double fw_orth_error(const real *X, int rows, int r) {
    fence_open(); double res_ = fence_inner->orth_error(X, rows, r); fence_close(); return res_;
}
static void fw_opt_sumsq(double *ss, int32_t *bad, const real *x, const OptSeg *segs, int nseg) {
    fence_open(); fence_inner->opt_sumsq(ss, bad, x, segs, nseg); fence_close();
}
static void fw_opt_decide(OptStatus *st, const double *ss, const int32_t *bad, int nseg, const double *loss,
    const StepHyper *hp) {
    fence_open(); fence_inner->opt_decide(st, ss, bad, nseg, loss, hp); fence_close();
}
static void fw_opt_clip(real *g, size_t n, const OptStatus *st) {
    fence_open(); fence_inner->opt_clip(g, n, st); fence_close();
}
static void fw_opt_adamw(real *p, const real *g, real *m, real *v, size_t n, int decay, const StepHyper
    *hp, const OptStatus *st) {
    fence_open(); fence_inner->opt_adamw(p, g, m, v, n, decay, hp, st); fence_close();
}
static size_t fw_opt_adam_rows_ws_size(int O, int N, int64_t R) {
    fence_open(); size_t res_ = fence_inner->opt_adam_rows_ws_size(O, N, R); fence_close(); return res_;
}
static void fw_opt_adam_rows(real *p, const real *g, real *m, real *v, int64_t *row_steps, const int32_t
    *rows, int O, int N, int64_t R, int D, void *ws, const StepHyper *hp, const OptStatus *st) {
    fence_open(); fence_inner->opt_adam_rows(p, g, m, v, row_steps, rows, O, N, R, D, ws, hp, st);
        fence_close();
}
static size_t fw_opt_muon_scratch_size(int n_mats, int rows, int cols) {
    fence_open(); size_t res_ = fence_inner->opt_muon_scratch_size(n_mats, rows, cols); fence_close(); return
        res_;
}
static void fw_opt_muon(real *p, const real *g, real *buf, int n_mats, int rows, int cols, int colrow,
    real *scratch, const StepHyper *hp, const OptStatus *st) {
    fence_open(); fence_inner->opt_muon(p, g, buf, n_mats, rows, cols, colrow, scratch, hp, st); fence_close();
}
static size_t fw_opt_retract_scratch_size(int n_mats, int rows, int r) {
    fence_open(); size_t res_ = fence_inner->opt_retract_scratch_size(n_mats, rows, r); fence_close(); return
        res_;
}
static void fw_opt_retract(real *X, int n_mats, int rows, int r, int iters, real *scratch, OptStatus *st) {
    fence_open(); fence_inner->opt_retract(X, n_mats, rows, r, iters, scratch, st); fence_close();
}
// host-only entries (no backend memory behind their pointers): forwarded as they are
static void fw_describe(char *buf, size_t n) { fence_inner->describe(buf, n); }
// (no backend memory is touched: a switch of the inner backend's products; not in FENCE_OPS,
// which bench_gpu.c also wraps around CUDA, where it is NULL)
__attribute__((unused)) static void fw_emulate_bf16(int on) { fence_inner->emulate_bf16(on); }
static void fw_mem_stats(size_t *cur, size_t *peak) { fence_inner->mem_stats(cur, peak); }
static void fw_mem_peak_set(size_t peak) { fence_inner->mem_peak_set(peak); }
// the step's bookkeeping ops and staging (backend.h, "the training step as one unit")
static void fw_step_loss(double *out, const double *loss_sum, const real *aux, int depth, uint64_t scored,
    int N, double aux_w) {
    fence_open(); fence_inner->step_loss(out, loss_sum, aux, depth, scored, N, aux_w); fence_close();
}
static void fw_step_begin(StepRecord *ring, const StepHyper *hp) {
    fence_open(); fence_inner->step_begin(ring, hp); fence_close();
}
static void fw_step_end(StepRecord *ring, const StepHyper *hp, const OptStatus *st, const double *loss,
    const int32_t *load, int depth, int E) {
    fence_open(); fence_inner->step_end(ring, hp, st, loss, load, depth, E); fence_close();
}
// staging is HOST memory (the host writes it directly): not fenced, only forwarded
static void *fw_host_alloc(size_t bytes) { return fence_inner->host_alloc(bytes); }
static void fw_host_free(void *p) { fence_inner->host_free(p); }
static void fw_upload_async(void *dst, const void *src, size_t bytes) {
    fence_open(); fence_inner->upload_async(dst, src, bytes); fence_close();
}
// this backend's own allocations (fb_alloc), plus the inner backend's (host_alloc, ...)
static long fw_allocs(void) { return fb_nallocs + fence_inner->allocs(); }
#define FENCE_OPS(X) \
    X(matmul_forward) X(matmul_backward) X(gemm) X(rmsnorm_forward) X(rmsnorm_backward) \
    X(l2norm_forward) X(l2norm_backward) X(silu_forward) X(silu_backward) X(sigmoid_forward) \
    X(sigmoid_backward) X(embedding_forward) X(embedding_backward) X(softmax_ce_forward) X(softmax_ce_backward) \
    X(engram_rows) X(engram_gather) X(engram_scatter) X(kda_ws_size) X(kda_forward) \
    X(kda_backward) X(kda_step) X(moe_ws_size) X(moe_forward) X(moe_backward) X(moe_route_read) X(moe_forward_routed) \
    X(add_row_forward) X(silu_rows_forward) X(sigmoid_split_forward) X(decay_gate_forward) X(gate_mul_forward) \
    X(mem_gate_forward) X(mix_forward) X(running_mean_forward) X(sum_forward) X(ce_logits_backward) \
    X(running_mean_backward) X(rezero_backward) X(mix_arm_backward) X(gate_mul_backward) X(decay_gate_backward) \
    X(sigmoid_rows_backward) X(silu_rows_backward) X(l2norm_silu_backward) X(mem_gate_backward) X(bias_backward) \
    X(copy_rows) X(add_inplace) X(retract_scratch_size) X(retract) X(orth_error) \
    X(opt_sumsq) X(opt_decide) X(opt_clip) X(opt_adamw) X(opt_adam_rows_ws_size) \
    X(opt_adam_rows) X(opt_muon_scratch_size) X(opt_muon) X(opt_retract_scratch_size) X(opt_retract) \
    X(describe) X(mem_stats) X(mem_peak_set) \
    X(step_loss) X(step_begin) X(step_end) X(host_alloc) X(host_free) X(upload_async) X(allocs)

#ifndef FENCE_HOOKS
// The table: the CPU backend's, every entry replaced by its fenced wrapper.
static const Backend *fenced_backend(void) {
    static Backend b;
    fence_inner = backend_cpu();
    b = *fence_inner;
    b.name = "cpu-fenced";
    b.alloc = fb_alloc; b.free = fb_free; b.zero = fb_zero; b.upload = fb_upload; b.download = fb_download;
#define X(op) b.op = fw_##op;
    FENCE_OPS(X)
#undef X
    b.emulate_bf16 = fence_inner->emulate_bf16 ? fw_emulate_bf16 : NULL;
    return &b;
}

// 1 when every function entry of the fenced table differs from the plain CPU table's (each is a
// wrapper). Backend is `name` followed only by function pointers; an entry added to backend.h
// without a wrapper here is still the CPU's and is reported by its index.
static int fenced_backend_complete(const Backend *fb, char *why, size_t n) {
    const Backend *cpu = backend_cpu();
    size_t off = offsetof(Backend, alloc), k = (sizeof(Backend) - off) / sizeof(void (*)(void));
    for (size_t i = 0; i < k; i++) {
        void (*a)(void), (*b)(void);
        memcpy(&a, (const char *)fb + off + i * sizeof a, sizeof a);
        memcpy(&b, (const char *)cpu + off + i * sizeof b, sizeof b);
        if (b && a == b) {
            snprintf(why, n, "Backend entry #%zu (after `name`) has no fenced wrapper: add it to tests/fenced_backend.h", i);
            return 0;
        }
    }
    return 1;
}
#endif  // FENCE_HOOKS
