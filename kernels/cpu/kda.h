// kda.h — the KDA core (SPEC §2) on the CPU: the gated delta rule with per-channel decay,
// after the projections. A recurrent reference (exact, time-sequential: tests and decoding)
// and a chunked implementation (WY/UT form) for training speed. Both have exact backward
// passes through the whole sequence.
//
// Layout (row-major): q, k, v, g, o: [B, T, H, D]; beta: [B, T, H]. S is [D, D] per (b, h),
// S_0 = 0 at the start of every sequence.
//   S_t  = Diag(exp(g_t)) S_{t-1}                    (decay first, g_t <= 0 per channel)
//   S_t += beta_t k_t (v_t - S_t^T k_t)^T            (delta-rule write, with the decayed S)
//   o_t  = S_t^T q_t
// q and k are used as given: the caller has already applied l2norm (and the D^-1/2 scale to q).
//
// Conventions shared with every backward op in kernels/: gradients ACCUMULATE (+=) into the
// d-buffers; `ws` is a workspace of *_ws_size() reals owned by the caller, filled by forward and
// read (and used as scratch) by backward of the same call shapes. Parallel over (b, h) with
// OpenMP; results do not depend on the thread count.
#pragma once
#include "../real.h"

size_t kda_recurrent_ws_size(int B, int T, int H, int D);
void kda_recurrent_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                           const real *beta, const real *g, int B, int T, int H, int D);
void kda_recurrent_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg,
                            const real *dout, const real *q, const real *k, const real *v,
                            const real *beta, const real *g, real *ws, int B, int T, int H,
                            int D);

// C is the chunk length (16 or 64 typical); T need not be a multiple of C.
size_t kda_chunk_ws_size(int B, int T, int H, int D, int C);
void kda_chunk_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                       const real *beta, const real *g, int B, int T, int H, int D, int C);
void kda_chunk_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                        const real *q, const real *k, const real *v, const real *beta,
                        const real *g, real *ws, int B, int T, int H, int D, int C);

// One decoding step for generation: S [H, D, D] is updated in place; q, k, v, g: [H, D];
// beta: [H]; o: [H, D]. O(1) memory per generated token.
void kda_step(real *o, real *S, const real *q, const real *k, const real *v, const real *beta,
              const real *g, int H, int D);
