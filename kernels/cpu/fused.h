// fused.h — the fused element-wise ops of the looped block (CPU). Each is ONE pass that used
// to be a loop in engine/forward.c or engine/backward.c, with the same fusion and the same
// arithmetic in the same order, so moving it behind the backend table changed no bit. They are
// numerics only: no op knows the model (the engine passes strides, column offsets and the
// parameter pointers a formula reads).
//
// Unlike the elementary backwards of ops.h (which accumulate), most of these WRITE (=) their
// outputs, as the loops they replace did; each comment says "=" or "+=" per output.
// Per-row dot products and reductions are in double in a fixed order (dm_dot_d: 8 partial
// sums combined pairwise; a few ops, e.g. sum_forward and bias_backward, one sequential
// double accumulator), so every result is a pure function of the inputs.
#pragma once
#include <stddef.h>
#include "../real.h"

// ---- forward ----
// out[N,C] = inp[N,C] + row[C]
void add_row_forward(real *out, const real *inp, const real *row, int N, int C);
// sg[N,C] = sigmoid(inp), out[N,C] = silu(inp) = inp sg; inp rows at stride ldx. The sigmoid is
// kept for silu_rows_backward.
void silu_rows_forward(real *out, real *sg, const real *inp, int ldx, int N, int C);
// sg[N,Cs] = sigmoid(inp[:, 0:Cs] + bias[Cs]) (bias may be NULL: no bias), cp[N,Cc] =
// inp[:, Cs:Cs+Cc] (cp may be NULL when Cc = 0); inp rows at stride ldx.
void sigmoid_split_forward(real *sg, real *cp, const real *inp, int ldx, const real *bias, int N,
                           int Cs, int Cc);
// The per-channel decay of a gated delta rule, per head h of dh channels (C = H dh):
// gs[N,C] = sigmoid(exp(A[h]) (z[N,C] + bias[C])), g[N,C] = gmin gs. A[H], bias[C] are read
// where they live (parameters).
void decay_gate_forward(real *gs, real *g, const real *z, const real *A, const real *bias, real gmin,
                        int N, int H, int dh);
// gt[N,C] = sigmoid(gt + bias[C]) (in place), og[N,C] = on[N,C] gt
void gate_mul_forward(real *gt, real *og, const real *on, const real *bias, int N, int C);
// gate[N] = sigmoid((nn[n,:] . kn[n,:]) scale) (dot in double), e[N,C] = gate[n] val[N,C]
void mem_gate_forward(real *gate, real *e, const real *nn, const real *kn, const real *val,
                      real scale, int N, int C);
// The gated sum of the three arms and the residual, w[N,3] the gates:
// body[N,C] = w0 a + min(w1, cap) e + w2 gout (summed in that order from 0; an arm whose
// pointer is NULL is absent), h[N,C] = hprev + alpha[0] body (alpha may be NULL: 1). h must not
// alias hprev.
void mix_forward(real *body, real *h, const real *hprev, const real *w, const real *a, const real *e,
                 const real *gout, real cap, const real *alpha, int N, int C);
// The running mean of readouts: out[n] = i/(i+1) prev + 1/(i+1) y (i = 0 or prev NULL: out = y)
void running_mean_forward(real *out, const real *prev, const real *y, int i, size_t n);
// out[0] = sum of x[n] (=), in double in index order (the CPU's loss sum; the result stays on
// the backend: download it with the other scalars)
void sum_forward(double *out, const real *x, size_t n);

// ---- backward ----
// dlogits[N,V] = scale (probs - onehot(targets)) (=): softmax_ce_backward into a fresh buffer,
// one pass
void ce_logits_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V);
// the running mean's backward: dy[n] = dbar[n] / (i+1) (=), dbar[n] *= i/(i+1) (what passes to
// the previous mean)
void running_mean_backward(real *dy, real *dbar, int i, size_t n);
// h = hprev + alpha body: dalpha[0] += dh . body (double, dm_dot_d order; skipped when dalpha is
// NULL), dbody[n] = alpha[0] dh[n] (=; alpha NULL: 1)
void rezero_backward(real *dbody, real *dalpha, const real *dh, const real *body, const real *alpha,
                     size_t n);
// One arm of mix_forward, gate column j of w[N,3]: darm[N,C] = wc dbody (=) with wc = w[n,j],
// or min(w[n,j], cap) when use_cap; dw[n,j] = dbody[n,:] . arm[n,:] (=), 0 where capped (min
// passes no gradient to w when w >= cap).
void mix_arm_backward(real *darm, real *dw, const real *dbody, const real *arm, const real *w, int j,
                      int use_cap, real cap, int N, int C);
// og = on gt, gt = sigmoid(pre): don[n] = dog gt (=), dpre[n] = dog on gt (1 - gt) (=)
void gate_mul_backward(real *don, real *dpre, const real *dog, const real *gt, const real *on, size_t n);
// decay_gate_forward's backward: dz[N,C] = dg gmin gs (1 - gs) exp(A[h]) (=); per channel c,
// summed over n in token order in double: dbias[c] += sum dz, dA[h] += sum dz (z + bias) (the
// channels of a head added to dA[h] in channel order)
void decay_gate_backward(real *dz, real *dA, real *dbias, const real *dg, const real *gs, const real *z,
                         const real *A, const real *bias, real gmin, int N, int H, int dh);
// dx[N,C] (rows at stride ldd) = dy[N,C] y (1 - y) (=): a sigmoid's backward from its output
void sigmoid_rows_backward(real *dx, int ldd, const real *dy, const real *y, int N, int C);
// dx[N,C] (stride ldd) = dy silu'(x) (=), silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) kept by
// silu_rows_forward [N,C]; x rows at stride ldx
void silu_rows_backward(real *dx, int ldd, const real *dy, const real *x, int ldx, const real *sg,
                        int N, int C);
// y = l2norm(silu(x)) scale per head (rows of dh, C = H dh): dx[N,C] (stride ldd) from dy[N,C]
// (=), with y[N,C], rn[N,H], sg[N,C] kept by forward; x at stride ldx
void l2norm_silu_backward(real *dx, int ldd, const real *dy, const real *y, const real *rn, real scale,
                          const real *x, int ldx, const real *sg, int N, int H, int dh);
// mem_gate_forward's backward from de[N,C]: dval += gate de, dnn = dp kn (=), dkn += dp nn,
// with dp = (de . val) gate (1 - gate) scale per row
void mem_gate_backward(real *dnn, real *dkn, real *dval, const real *de, const real *gate, const real *nn,
                       const real *kn, const real *val, real scale, int N, int C);
// dbias[C] += sum over n of dout[n, 0:C] (rows at stride ld), in row order in double
void bias_backward(real *dbias, const real *dout, int ld, int N, int C);
// dst[N,C] (stride ldd) = src[N,C] (stride lds)
void copy_rows(real *dst, int ldd, const real *src, int lds, int N, int C);
// dst[n] += src[n]
void add_inplace(real *dst, const real *src, size_t n);
