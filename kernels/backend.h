// backend.h — the one table of operations the engine calls. Numerics only: no op knows the
// model. kernels/cpu/ implements every entry; kernels/cuda/ will implement the same table over
// device pointers, so every engine path runs on either and parity is one loop over the calls.
// Conventions: row-major; every backward ACCUMULATES (+=) into its d-buffers.
#pragma once
#include <stdint.h>
#include "real.h"
#include "cpu/moe.h"   // MoEShape / MoEParams / MoEGrads: plain shape and pointer bundles

typedef struct Backend {
    const char *name;
    // memory (host memory for the CPU backend, device memory for CUDA)
    void *(*alloc)(size_t bytes);           // zero-filled
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *src, size_t bytes);    // host -> backend
    void (*download)(void *dst, const void *src, size_t bytes);  // backend -> host

    void (*matmul_forward)(real *out, const real *inp, const real *W, const real *bias, int N, int C, int OC);
    void (*matmul_backward)(real *dinp, real *dW, real *dbias, const real *dout, const real *inp,
                            const real *W, int N, int C, int OC);
    void (*gemm)(int transA, int transB, int M, int N, int K, real alpha, const real *A, int lda,
                 const real *B, int ldb, real beta, real *C, int ldc);
    void (*rmsnorm_forward)(real *out, real *rstd, const real *inp, const real *gain, int N, int C);
    void (*rmsnorm_backward)(real *dinp, real *dgain, const real *dout, const real *inp,
                             const real *gain, const real *rstd, int N, int C);
    void (*l2norm_forward)(real *out, real *rn, const real *inp, real scale, int N, int C);
    void (*l2norm_backward)(real *dinp, const real *dout, const real *out, const real *rn, real scale, int N, int C);
    void (*silu_forward)(real *out, const real *inp, size_t n);
    void (*silu_backward)(real *dinp, const real *dout, const real *inp, size_t n);
    void (*sigmoid_forward)(real *out, const real *inp, size_t n);
    void (*sigmoid_backward)(real *dinp, const real *dout, const real *out, size_t n);
    void (*embedding_forward)(real *out, const int *x, const real *table, int N, int C);
    void (*embedding_backward)(real *dtable, const real *dout, const int *x, int N, int C);
    void (*softmax_ce_forward)(real *losses, real *probs, const real *logits, const int *targets, int N, int V);
    void (*softmax_ce_backward)(real *dlogits, const real *probs, const int *targets, real scale, int N, int V);
    void (*engram_rows)(int32_t *rows, const int *x, int B, int T, const int *orders, int O, int64_t R);
    void (*engram_gather)(real *m, const real *tables, const int32_t *rows, int N, int O, int64_t R, int D);
    void (*engram_scatter)(real *dtables, const real *dm, const int32_t *rows, int N, int O, int64_t R, int D);

    size_t (*kda_ws_size)(int B, int T, int H, int D, int C);
    void (*kda_forward)(real *o, real *ws, const real *q, const real *k, const real *v,
                        const real *beta, const real *g, int B, int T, int H, int D, int C);
    void (*kda_backward)(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                         const real *q, const real *k, const real *v, const real *beta,
                         const real *g, real *ws, int B, int T, int H, int D, int C);

    size_t (*moe_ws_size)(MoEShape s);
    void (*moe_forward)(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                        MoEParams p, MoEShape s);
    void (*moe_backward)(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                         const real *n, const real *z, MoEParams p, MoEShape s);

    size_t (*retract_scratch_size)(int rows, int r);
    void (*retract)(real *X, int rows, int r, int iters, real *scratch);
    double (*orth_error)(const real *X, int rows, int r);
} Backend;

const Backend *backend_cpu(void);
// The CUDA backend: NULL with a one-line reason in why[] when it is not available (not built,
// no device, or — for now — not implemented yet).
const Backend *backend_cuda(int device, char *why, size_t n);
