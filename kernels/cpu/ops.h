// ops.h — the elementary CPU ops (dense layers, norms, activations, embedding, loss, Engram
// lookup). Every backward ACCUMULATES (+=) into its d-buffers; any d-buffer may be NULL when
// that gradient is not needed.
#pragma once
#include <stdint.h>
#include "../real.h"

// out[N,OC] = inp[N,C] W[OC,C]^T (+ bias[OC])
void matmul_forward(real *out, const real *inp, const real *W, const real *bias, int N, int C, int OC);
void matmul_backward(real *dinp, real *dW, real *dbias, const real *dout, const real *inp,
                     const real *W, int N, int C, int OC);

// out[N,C] = inp * rstd * gain (gain may be NULL = 1); rstd[N] = 1/sqrt(mean(inp^2) + eps)
void rmsnorm_forward(real *out, real *rstd, const real *inp, const real *gain, int N, int C);
void rmsnorm_backward(real *dinp, real *dgain, const real *dout, const real *inp, const real *gain,
                      const real *rstd, int N, int C);

// out[N,C] = inp / sqrt(sum(inp^2) + eps) * scale; rn[N] = the reciprocal norm
void l2norm_forward(real *out, real *rn, const real *inp, real scale, int N, int C);
void l2norm_backward(real *dinp, const real *dout, const real *out, const real *rn, real scale, int N, int C);

void silu_forward(real *out, const real *inp, size_t n);
void silu_backward(real *dinp, const real *dout, const real *inp, size_t n);
void sigmoid_forward(real *out, const real *inp, size_t n);
// dinp += dout * out * (1 - out), from the sigmoid's output
void sigmoid_backward(real *dinp, const real *dout, const real *out, size_t n);

// out[N,C] = table[x[n]]
void embedding_forward(real *out, const int *x, const real *table, int N, int C);
void embedding_backward(real *dtable, const real *dout, const int *x, int N, int C);

// Cross-entropy of logits[N,V] against targets[N]: losses[N] (nats), probs[N,V] the softmax
// (kept for backward). dlogits += scale * (probs - onehot).
void softmax_ce_forward(real *losses, real *probs, const real *logits, const int *targets, int N, int V);
void softmax_ce_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V);

// Engram (SPEC §3). rows[o][B*T] for order orders[o]: FNV-1a over (n as one byte, then each
// symbol of x[t-n+1..t] oldest first as 2 little-endian bytes; 256 before the sequence start).
uint64_t engram_hash(const int *syms, int n);
void engram_rows(int32_t *rows, const int *x, int B, int T, const int *orders, int O, int64_t R);
// m[N, O*D]: concat over orders of tables[o][rows[o][t]], tables[o] at tables + o*R*D.
void engram_gather(real *m, const real *tables, const int32_t *rows, int N, int O, int64_t R, int D);
// dtables[o][row] += dm[t, o*D:(o+1)*D] summed over t in index order (deterministic).
void engram_scatter(real *dtables, const real *dm, const int32_t *rows, int N, int O, int64_t R, int D);
