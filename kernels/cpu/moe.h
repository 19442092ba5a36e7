// moe.h — dropless top-k mixture of TSCT experts (SPEC §1 "MoE", "TSCT experts") on the CPU.
//
// Router: p = softmax(z) over E experts per token, z: [N, E] (router logits, computed by the
// caller as W_r n). Each token goes to its k highest-p experts, ties broken by the LOWER expert
// index; no capacity, no token dropped. Weight: k == 1 -> p_e itself; k >= 2 -> p renormalised
// over the chosen k.
// Expert e (TSCT: W1_e = U1_e diag(s1_e) V1_e^T is [f, d], W2_e = U2_e diag(s2_e) V2_e^T is [d, f]):
//   FFN_e(x) = W2_e silu(W1_e x)
// computed in low-rank form (x V1 -> *s1 -> U1^T -> silu -> V2 -> *s2 -> U2^T), tokens gathered
// per expert (no dense compute of all experts).
//   out[t] = sum_{e chosen by t} w_{t,e} FFN_e(n[t])
// Aux loss (Switch): aux = E * sum_e f_e * P_e, f_e = (#assignments to e) / (N * k) (constant,
// no gradient), P_e = mean_t p[t, e].
//
// Parameter shapes (expert-major, contiguous):
//   U1 [E, f, r]  s1 [E, r]  V1 [E, d, r]  U2 [E, d, r]  s2 [E, r]  V2 [E, f, r]
// Conventions: gradients ACCUMULATE (+=); `ws` (moe_ws_size reals, caller-owned) is filled by
// forward and used by backward of the same call.
#pragma once
#include "../real.h"

typedef struct { int N, d, E, k, r, f; } MoEShape;

typedef struct {
    const real *U1, *s1, *V1, *U2, *s2, *V2;
} MoEParams;

typedef struct {
    real *U1, *s1, *V1, *U2, *s2, *V2;
} MoEGrads;

// How far a given routing is from the one this side's own top-k would pick (moe_forward_routed).
typedef struct {
    long moved;    // given assignments (t, e) that the own top-k of token t does not contain
    double gap;    // max over them of (p_k - p_e) / p_k in THIS side's softmax, p_k the own k-th
                   // pick's: how far from being picked the given expert was (a tie gives ~0)
} MoERouteDiff;

size_t moe_ws_size(MoEShape s);

// out: [N, d], written (not accumulated). aux: [1] the aux loss value; load: [E] routed
// assignments per expert. Both are BACKEND memory like every other pointer (device memory on
// CUDA, written there without a host round trip, so a step can be captured as a graph; host
// memory on the CPU), and either may be NULL (not wanted). n: [N, d]; z: [N, E].
void moe_forward(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                 MoEParams p, MoEShape s);

// dout: [N, d] gradient of the loss w.r.t. out; daux: d loss / d aux (e.g. moe_aux / L).
// Accumulates into dn [N, d], dz [N, E] and the parameter grads.
void moe_backward(real *dn, real *dz, MoEGrads g, const real *dout, real daux, real *ws,
                  const real *n, const real *z, MoEParams p, MoEShape s);

// moe_forward that follows a given routing instead of choosing: route [N, k] (HOST memory, each
// row k distinct experts in [0, E), the order a backend's top-k gave them) replaces the top-k;
// everything else (p, the weights w from p at the given experts, the sort, the experts, aux,
// load) and the backward that follows are unchanged. For the parity reference: a router logit
// within rounding of a tie may pick another expert on a device, after which the two sides would
// compute different functions; following the device's choice compares the same function.
// diff (host, may be NULL) accumulates how far `route` is from this call's own top-k.
void moe_forward_routed(real *out, real *aux, int *load, real *ws, const real *n, const real *z,
                        MoEParams p, MoEShape s, const int *route, MoERouteDiff *diff);

// The routing the last moe_forward on `ws` chose, copied to idx [N, k] (host memory).
void moe_route_read(int *idx, const real *ws, MoEShape s);

// 1 when route [N, k] is a routing moe_forward_routed accepts: every entry in [0, E), the k of
// each row distinct.
int moe_route_valid(const int *route, int N, int E, int k);

// The routing alone, for tests and probes: idx [N, k] chosen experts (descending p, ties to
// lower index), w [N, k] their weights, p [N, E] the softmax.
void moe_route(int *idx, real *w, real *p, const real *z, int N, int E, int k);
