// shape_limits.h — the shapes the CUDA backend's kernels can index: its Backend.shape_check.
// Plain C, so the CPU tests check the formula too (tests/test_shape_limits.c).
//
// Indices and sizes in kernels/cuda/ are 64-bit wherever a product of shapes can pass 2^31. What
// stays 32-bit is fixed by an interface (a grid dimension, cub's int item count) or kept for a hot
// loop's sake, and a model past it is refused here, before anything is allocated for it (the
// engine asks first: engine/model.c, model_shape_check):
//  * rows per token: the tokens B*T times m = max(H, O, k) at most 2^31 - 2^26. The per-head
//    norms run one block per (token, head) row (gridDim.x; the table's row counts are int); the
//    gradients of the embedding and of the Engram tables, and the tables' lazy Adam, sort B*T and
//    O*B*T items (cub's int count, int item ids) and launch a block or a thread per item; the MoE
//    keeps its B*T*k assignments in int tables (offsets, sorted positions, tile rows). The 2^26
//    left below 2^31 is room for the sums beside those counts (a grid's reach past its last item,
//    < 1024; a row slice's end, < 64; the MoE's padding to 64-row tiles, < 4 400; cub's tiles).
//    (On one H200 the activations of so many rows do not fit: there memory runs out first.)
//  * head dim d/H at most 46340: the chunked KDA (kda_chunk_core.h) indexes a head's [dh, dh + 1]
//    state tiles in int, dh (dh + 1) < 2^31 (64-bit indices there would put a 64-bit division in
//    every element of its phases).
//  * expert rank r at most 65535: the orthogonality monitor (backend_cuda.cu, cu_orth_error)
//    launches one grid row per column of a factor, and gridDim.y is at most 65535.
#pragma once
#include <stdio.h>
#include "../backend.h"

#define CUDA_ROWS_MAX ((1LL << 31) - (1LL << 26))  // tokens x max(H, O, k)
#define CUDA_DH_MAX 46340          // the largest dh with dh (dh + 1) < 2^31
#define CUDA_R_MAX 65535           // gridDim.y

static inline int cuda_shape_check(const BackendShape *s, char *why, size_t n) {
    int dh = s->H > 0 ? s->d / s->H : s->d;
    if (dh > CUDA_DH_MAX) {
        snprintf(why, n, "head dim d/H = %d is more than the CUDA KDA kernels index (at most %d: a head's state is "
                 "indexed in 32 bits): raise H or lower d", dh, CUDA_DH_MAX);
        return 1;
    }
    if (s->r > CUDA_R_MAX) {
        snprintf(why, n, "expert rank r = %d is more than the CUDA kernels launch (at most %d: a grid row per column "
                 "of a factor): lower r", s->r, CUDA_R_MAX);
        return 1;
    }
    int m = s->H > s->O ? s->H : s->O;
    if (s->k > m) m = s->k;
    if (m < 1) m = 1;
    long long tokens = (long long)s->B * s->T, most = CUDA_ROWS_MAX / m;
    if (tokens > most) {
        snprintf(why, n, "batch x seq = %lld tokens is more than the CUDA kernels index (at most %lld with H=%d, %d "
                 "engram orders, k=%d: tokens x max(H, orders, k) <= 2^31 - 2^26): lower batch or seq", tokens, most, s->H,
                 s->O, s->k);
        return 1;
    }
    return 0;
}
