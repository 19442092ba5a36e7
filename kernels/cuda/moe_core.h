// moe_core.h — the CUDA backend's MoE (contract: kernels/cpu/moe.h, SPEC §1) written so that one
// source runs as GPU kernels (moe_cuda.cu) and, for verification on a machine without a GPU, on
// the CPU (tests/test_moe_core.c against kernels/cpu/moe.c).
//
// Why this shape: the whole training step is to be one CUDA-graph replay, so nothing here may
// depend on the routing on the host — no download of the per-expert counts, no launch sized by
// them, no allocation. The routing only changes the CONTENTS of device tables:
//   route      one item per token: softmax, top-k (ties to the lower index), weights
//   plan       ONE block: a counting sort of the A = N*k assignments by expert (tokens increasing
//              inside an expert, stable: the CPU's order), the offsets off[E+1], the load
//              counts, the aux loss (fixed-order double sums), and the tile table
//   grouped GEMM ("rg")  C[rows of e, :] = op(A rows) op(W_e). Each expert's row range is cut
//              into tiles of MOE_TM rows (the last one short: the padding); the grid has the
//              worst case ceil((A + E (TM-1)) / TM) row-tile slots x ceil(cols / TN) column
//              tiles, and the tile table maps slot -> (expert, first row, rows); slots past the
//              end exit. Gathers (row i reads token asg[i] / k), the s-scaling, silu and silu'
//              are folded into the operand loads / the store, so the chain needs no [A, f] copy.
//   weight GEMM ("wg")  dW_e += A_e^T B_e over expert e's rows: grid E x output tiles, the K loop
//              runs over the expert's rows read from off[] (an expert with no rows exits). Where
//              that grid is small, each expert's rows are cut into S slices (moe_wg_split: a
//              function of the shapes), one block per (tile, expert, slice) writes its partial
//              tile, and a second step adds the S partials in slice order ("wsum"); the
//              s-gradients' row sums are cut the same way (moe_sg_split, "sgsum").
//   combine    one item per output element: a token's k rows added in increasing expert order
//              (the CPU's order), so no atomics and a fixed sum.
// Every sum runs in a fixed order inside one thread; nothing depends on the thread count.
//
// Block functions take (block index, tid, nt): every phase is a strided loop
// `for (x = tid; x < n; x += nt)` over outputs it alone owns, phases are separated by DM_SYNC()
// (__syncthreads() on the GPU; an OpenMP barrier in the CPU test, which runs a block as a team of
// nt threads, so a race between phases or a missing stride shows as a wrong or nt-dependent
// result). Item functions take the item index. The GEMM tiles here are plain fp32 shared-memory
// tiles (what precision=fp32 runs, and what the CPU test checks); the bf16 mode runs the same
// tiles on the tensor cores (moe_cuda.cu's moe_gemm_bf16_kernel, checked on a device only).
//
// The step lists (moe_core_forward_steps / moe_core_backward_steps) are the algorithm: the CUDA
// backend and the CPU test both run exactly these steps in this order, each with its own executor.
#pragma once
#include <math.h>
#include <stddef.h>
#include "../cpu/moe.h"

#ifndef DM_HD            // device code: __device__ on the GPU
#define DM_HD
#endif
#ifndef DM_HDS           // sizes, views and step lists: __host__ __device__ on the GPU
#define DM_HDS
#endif
#ifndef DM_SYNC
#define DM_SYNC()
#endif
#ifndef MOE_UNROLL
#define MOE_UNROLL
#endif

#define MOE_TM 64        // rows of an output tile (and the per-expert row padding)
#define MOE_TN 64        // columns of an output tile
#define MOE_TK 16        // depth of one shared-memory step
#define MOE_NCH 256      // fixed chunks of the plan's counting sort and P sums (not the thread count)
#define MOE_MAXE 64      // experts (the plan's and the router backward's per-thread arrays)
// shared A tile, reals: [TM][TK+1] (grouped GEMM) or [TK][TM+1] (weight GEMM); +1 spreads banks
#define MOE_SA (MOE_TM * (MOE_TK + 1) > MOE_TK * (MOE_TM + 1) ? MOE_TM * (MOE_TK + 1) : MOE_TK * (MOE_TM + 1))
#define MOE_SB (MOE_TK * (MOE_TN + 1))  // shared B tile, reals ([TK][TN+1])
// Accumulators per thread: output x of a tile belongs to thread x % nt, slot x / nt. The GPU
// build sets this to TM*TN / its block size; the CPU test keeps TM*TN (any nt >= 1 fits).
#ifndef MOE_ACC
#define MOE_ACC (MOE_TM * MOE_TN)
#endif

#ifdef DM_DOUBLE
#define MOE_EXP exp
#else
#define MOE_EXP expf
#endif

// ---- workspace ----
// ws (reals, base moved up to an 8-byte boundary for the doubles):
//   Ppart [NCH, E], PE [E] (doubles)  per-chunk and total router mass per expert (plan scratch)
//   P [N, E]   softmax                      persistent (forward -> backward)
//   W [N, k]   routing weights              persistent
//   a1 [A, r]  X V1 (before s1)             persistent, rows in sorted (expert-major) order
//   a2 [A, r]  silu(h) V2 (before s2)       persistent
//   h [A, f]   pre-activations              persistent; backward overwrites them with dh
//   y [A, d]   forward: expert outputs; backward: dX rows
//   t1, t2 [A, r]  backward: D -> da2, db1 -> da1
//   dw [A]     backward: d loss / d w per assignment (indexed by assignment t*k + j)
//   ints: idx [N, k] chosen experts | asg [A] sorted position -> assignment | pos [A] its inverse |
//         off [E+1] expert offsets | tstart [E+1] first tile slot per expert | tiles [MT, 3]
//         (expert or -1, first row, rows) | cnt [NCH, E] per-chunk counts, then their prefix
//   part      backward: the partial sums of a split row reduction (moe_core_part_size reals)
// Backward is destructive on h, as on the CPU: run forward again before a second backward.
typedef struct {
    int N, d, E, k, r, f, A, MT;
    int nosplit;  // 1: every row reduction in one piece (the tests run both ways; 0 from the view)
    double *Ppart, *PE;
    real *P, *W, *a1, *a2, *h, *y, *t1, *t2, *dw, *part;
    int *idx, *asg, *pos, *off, *tstart, *tiles, *cnt;
} MoeView;

// Slices of a reduction over an expert's rows, a function of the shapes alone (never of the
// routing or of timing). A weight GEMM has one block per (output tile, expert), each walking all
// of its expert's rows — thousands in a row at small b32, on fewer blocks than an H200 has SMs
// for the [d, r] weights: cut so that the grid has >= 512 blocks, at most 8 slices. The
// s-gradients have one thread per (expert, column): cut to >= 32768 threads, at most 64 slices.
static DM_HDS inline int moe_wg_split(int P, int Q, int E) {
    long blocks = (long)((P + MOE_TM - 1) / MOE_TM) * ((Q + MOE_TN - 1) / MOE_TN) * E;
    if (blocks >= 512) return 1;
    long s = (512 + blocks - 1) / blocks;
    return s > 8 ? 8 : (int)s;
}
static DM_HDS inline int moe_sg_split(int E, int r) {
    long items = (long)E * r, s = (32768 + items - 1) / items;
    return s > 64 ? 64 : s < 1 ? 1 : (int)s;
}
// Reals of the partial sums: the largest split reduction of the backward (its weight GEMMs are
// [d, r] and [f, r] per expert; its s-gradients [r] per expert).
static DM_HDS inline size_t moe_core_part_size(MoEShape s) {
    size_t n = 0, E = (size_t)s.E;
    int Sd = moe_wg_split(s.d, s.r, s.E), Sf = moe_wg_split(s.f, s.r, s.E), Sg = moe_sg_split(s.E, s.r);
    if (Sd > 1 && (size_t)Sd * E * s.d * s.r > n) n = (size_t)Sd * E * s.d * s.r;
    if (Sf > 1 && (size_t)Sf * E * s.f * s.r > n) n = (size_t)Sf * E * s.f * s.r;
    if (Sg > 1 && (size_t)Sg * E * s.r > n) n = (size_t)Sg * E * s.r;
    return n;
}

// row-tile slots of the grouped GEMM: enough for any routing (each expert wastes < TM rows)
static DM_HDS inline int moe_core_slots(int A, int E) { return (A + E * (MOE_TM - 1) + MOE_TM - 1) / MOE_TM; }

static DM_HDS inline size_t moe_core_ws_size(MoEShape s) {
    size_t N = (size_t)s.N, A = N * s.k, E = (size_t)s.E, MT = (size_t)moe_core_slots((int)A, s.E);
    size_t dbl = 2 * ((size_t)MOE_NCH * E + E);
    size_t rl = N * E + N * s.k + 2 * A * s.r + A * s.f + A * s.d + 2 * A * s.r + A;
    size_t ints = 3 * A + 2 * (E + 1) + 3 * MT + (size_t)MOE_NCH * E;
    return 2 + dbl + rl + (ints * sizeof(int) + sizeof(real) - 1) / sizeof(real) + moe_core_part_size(s);
}

static DM_HDS inline MoeView moe_core_view(real *ws, MoEShape s) {
    MoeView v;
    size_t N = (size_t)s.N, A = N * s.k, E = (size_t)s.E;
    v.N = s.N; v.d = s.d; v.E = s.E; v.k = s.k; v.r = s.r; v.f = s.f; v.A = (int)A;  // <= 2^31 - 2^26: shape_limits.h
    v.nosplit = 0;
    v.MT = moe_core_slots((int)A, s.E);
    real *p = (real *)(((size_t)ws + 7) & ~(size_t)7);
    v.Ppart = (double *)p; p += 2 * (size_t)MOE_NCH * E;
    v.PE = (double *)p;    p += 2 * E;
    v.P = p;  p += N * E;
    v.W = p;  p += N * s.k;
    v.a1 = p; p += A * s.r;
    v.a2 = p; p += A * s.r;
    v.h = p;  p += A * s.f;
    v.y = p;  p += A * s.d;
    v.t1 = p; p += A * s.r;
    v.t2 = p; p += A * s.r;
    v.dw = p; p += A;
    int *q = (int *)p;
    v.idx = q;    q += A;
    v.asg = q;    q += A;
    v.pos = q;    q += A;
    v.off = q;    q += E + 1;
    v.tstart = q; q += E + 1;
    v.tiles = q;  q += 3 * (size_t)v.MT;
    v.cnt = q;
    size_t ints = 3 * A + 2 * (E + 1) + 3 * (size_t)v.MT + (size_t)MOE_NCH * E;
    v.part = p + (ints * sizeof(int) + sizeof(real) - 1) / sizeof(real);
    return v;
}

static DM_HD inline real moe_sigmoid(real x) { return (real)1 / ((real)1 + MOE_EXP(-x)); }

// ---- operands ----
// Rows of an [A or N, *] matrix seen by sorted position i (expert e owns i):
//   element (i, c) = p[row * ld + c], row = asg[i] / k (gather: a token's row) or i, then
//   MOE_OP_SCALE: * s[e * r + c];  MOE_OP_SILU: silu(.);  MOE_OP_WROW: * W[asg[i]]
enum { MOE_OP_PLAIN, MOE_OP_SCALE, MOE_OP_SILU, MOE_OP_WROW };
typedef struct {
    const real *p;
    int ld, gather, op;
    const real *s;  // [E, r] for MOE_OP_SCALE
} MoeRows;

static DM_HD inline real moe_rows_at(const MoeRows *o, const MoeView *v, int e, int i, int c) {
    int a = o->gather || o->op == MOE_OP_WROW ? v->asg[i] : 0;
    size_t row = o->gather ? (size_t)(a / v->k) : (size_t)i;
    real x = o->p[row * o->ld + c];
    if (o->op == MOE_OP_SCALE) x = x * o->s[(size_t)e * v->r + c];
    else if (o->op == MOE_OP_SILU) x = x * moe_sigmoid(x);
    else if (o->op == MOE_OP_WROW) x = v->W[a] * x;
    return x;
}

// Grouped GEMM over row tiles: C[i, j] = sum_kk A(i, kk) Bw_e(kk, j) for the rows i of the slot's
// expert e, j < Nc, kk < K. Bw_e = B + e * K * Nc: [K, Nc] (btrans 0) or [Nc, K] read transposed.
// epi MOE_EPI_STORE: C = sum; MOE_EPI_DSILU: C = sum * silu'(C) (C holds h: dh in place).
enum { MOE_EPI_STORE, MOE_EPI_DSILU };
typedef struct {
    MoeRows A;
    const real *B;
    int btrans, K, Nc;
    real *C;
    int ldc, epi;
} MoeRG;

// Weight GEMM: C_e[p, q] += sum over expert e's rows i (in order) of A(i, p) B(i, q);
// C_e = C + e * P * Q, p < P, q < Q. An expert with no rows leaves C_e untouched (split: adds zeros).
typedef struct {
    MoeRows A, B;
    real *C;
    int P, Q;
    int S;        // row slices (1: C_e += the whole sum; > 1: partial tiles into part, then wsum)
    real *part;   // [S, E, P, Q] when S > 1
} MoeWG;

// Rows [*i0, *i1) of expert e's slice sl of S: whole 32-row steps (both GEMM paths step 16 or 32
// rows), the last slices short or empty. S = 1: all of e's rows.
static DM_HD inline void moe_slice_rows(const MoeView *v, int e, int sl, int S, int *i0, int *i1) {
    const int o = v->off[e], c = v->off[e + 1] - o;
    const long per = ((long)(c + S - 1) / S + 31) / 32 * 32, b = sl * per, t = b + per;
    *i0 = o + (int)(b < c ? b : c);
    *i1 = o + (int)(t < c ? t : c);
}

// ---- route: one item per token t (kernels/cpu/moe.c's moe_route, operation for operation) ----
static DM_HD void moe_core_route(const MoeView *v, const real *z, int t) {
    const int E = v->E, k = v->k;
    const real *zt = z + (size_t)t * E;   // [E]
    real *pt = v->P + (size_t)t * E;      // [E]
    int *it = v->idx + (size_t)t * k;     // [k]
    real *wt = v->W + (size_t)t * k;      // [k]
    real zmax = zt[0];
    for (int e = 1; e < E; e++) zmax = zt[e] > zmax ? zt[e] : zmax;
    double sum = 0;
    for (int e = 0; e < E; e++) { pt[e] = MOE_EXP(zt[e] - zmax); sum += pt[e]; }
    real inv = (real)(1.0 / sum);
    for (int e = 0; e < E; e++) pt[e] *= inv;
    for (int j = 0; j < k; j++) {  // repeated selection: strict '>' keeps the lower index on ties
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int l = 0; l < j; l++) taken |= it[l] == e;
            if (!taken && (best < 0 || pt[e] > pt[best])) best = e;
        }
        it[j] = best;
    }
    if (k == 1) {
        wt[0] = pt[it[0]];
    } else {
        real S = 0;
        for (int j = 0; j < k; j++) S += pt[it[j]];
        for (int j = 0; j < k; j++) wt[j] = pt[it[j]] / S;
    }
}

// ---- plan: ONE block. aux [1] and load [E] are backend memory (either may be NULL). ----
// The assignments are cut into MOE_NCH fixed chunks (a function of A only), so the sort's
// placement and every partial sum are the same for any nt.
static DM_HD void moe_core_plan(const MoeView *v, real *aux, int *load, int tid, int nt) {
    const int N = v->N, E = v->E, k = v->k, A = v->A;
    const int CA = (A + MOE_NCH - 1) / MOE_NCH, CN = (N + MOE_NCH - 1) / MOE_NCH;
    // 1. per chunk: expert histogram of its assignments, router mass of its tokens per expert
    for (int c = tid; c < MOE_NCH; c += nt) {
        int *cc = v->cnt + (size_t)c * E;  // [E]
        // counted in the thread's own array, then stored: in backend memory each increment
        // would wait for the previous one's store
        int h[MOE_MAXE];
        for (int e = 0; e < E; e++) h[e] = 0;
        int a1 = (c + 1) * CA < A ? (c + 1) * CA : A;
        for (int a = c * CA; a < a1; a++) h[v->idx[a]]++;
        for (int e = 0; e < E; e++) cc[e] = h[e];
        int t1 = (c + 1) * CN < N ? (c + 1) * CN : N;
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int t = c * CN; t < t1; t++) s += v->P[(size_t)t * E + e];
            v->Ppart[(size_t)c * E + e] = s;
        }
    }
    DM_SYNC();
    // 2. per expert: the chunks' counts become their exclusive prefix (each chunk's first slot
    //    inside the expert); the expert's count into off[e + 1], its mass into PE[e]
    for (int e = tid; e < E; e += nt) {
        int run = 0;
        double ps = 0;
        for (int c = 0; c < MOE_NCH; c++) {
            int x = v->cnt[(size_t)c * E + e];
            v->cnt[(size_t)c * E + e] = run;
            run += x;
            ps += v->Ppart[(size_t)c * E + e];
        }
        v->off[e + 1] = run;
        v->PE[e] = ps;
    }
    DM_SYNC();
    // 3. one thread: offsets, tile starts, load, aux = E sum_e (cnt_e / (N k)) (P_e / N) in e order
    for (int x = tid; x < 1; x += nt) {
        double auxv = 0;
        v->off[0] = 0;
        v->tstart[0] = 0;
        for (int e = 0; e < E; e++) {
            int c = v->off[e + 1];
            if (load) load[e] = c;
            auxv += ((double)c / ((double)N * k)) * (v->PE[e] / N);
            v->off[e + 1] = v->off[e] + c;
            v->tstart[e + 1] = v->tstart[e] + (c + MOE_TM - 1) / MOE_TM;
        }
        if (aux) aux[0] = (real)(E * auxv);
    }
    DM_SYNC();
    // 4. per chunk: place its assignments in (t, j) order behind the earlier chunks' (stable)
    for (int c = tid; c < MOE_NCH; c += nt) {
        int cur[MOE_MAXE];
        for (int e = 0; e < E; e++) cur[e] = v->off[e] + v->cnt[(size_t)c * E + e];
        int a1 = (c + 1) * CA < A ? (c + 1) * CA : A;
        for (int a = c * CA; a < a1; a++) {
            int i = cur[v->idx[a]]++;
            v->asg[i] = a;
            v->pos[a] = i;
        }
    }
}

// The tile table from off / tstart (after moe_core_plan's phase 3): slot s -> (expert, first row,
// rows); slots past the last tile get (-1, 0, 0) and their blocks exit.
static DM_HD void moe_core_tiles(const MoeView *v, int tid, int nt) {
    for (int s = tid; s < v->MT; s += nt) {
        int *tb = v->tiles + 3 * (size_t)s;
        int e = 0;
        while (e < v->E && v->tstart[e + 1] <= s) e++;
        if (e == v->E) { tb[0] = -1; tb[1] = 0; tb[2] = 0; continue; }
        int row0 = v->off[e] + (s - v->tstart[e]) * MOE_TM, left = v->off[e + 1] - row0;
        tb[0] = e;
        tb[1] = row0;
        tb[2] = left < MOE_TM ? left : MOE_TM;
    }
}

// ---- grouped GEMM, one (row-tile slot, column tile) block; sA [MOE_SA], sB [MOE_SB] shared ----
static DM_HD void moe_core_rg_tile(const MoeRG *g, const MoeView *v, int slot, int ct, real *sA, real *sB,
                                   int tid, int nt) {
    const int *tb = v->tiles + 3 * (size_t)slot;
    const int e = tb[0], row0 = tb[1], rows = tb[2], K = g->K, Nc = g->Nc, j0 = ct * MOE_TN;
    if (rows <= 0 || j0 >= Nc) return;  // block-uniform: no barrier is skipped by part of a block
    const real *Bw = g->B + (size_t)e * K * Nc;
    real acc[MOE_ACC];
    MOE_UNROLL
    for (int s = 0; s < MOE_ACC; s++) acc[s] = 0;
    for (int k0 = 0; k0 < K; k0 += MOE_TK) {
        const int kw = K - k0 < MOE_TK ? K - k0 : MOE_TK;
        for (int x = tid; x < MOE_TM * MOE_TK; x += nt) {  // sA[m][kk], kk fastest: rows read contiguously
            int m = x / MOE_TK, kk = x % MOE_TK;
            sA[m * (MOE_TK + 1) + kk] = m < rows && kk < kw ? moe_rows_at(&g->A, v, e, row0 + m, k0 + kk) : (real)0;
        }
        for (int x = tid; x < MOE_TK * MOE_TN; x += nt) {  // sB[kk][j], read along B's rows
            int kk, j;
            if (g->btrans) { j = x / MOE_TK; kk = x % MOE_TK; } else { kk = x / MOE_TN; j = x % MOE_TN; }
            real b = 0;
            if (kk < kw && j0 + j < Nc)
                b = g->btrans ? Bw[(size_t)(j0 + j) * K + k0 + kk] : Bw[(size_t)(k0 + kk) * Nc + j0 + j];
            sB[kk * (MOE_TN + 1) + j] = b;
        }
        DM_SYNC();
        MOE_UNROLL
        for (int s = 0; s < MOE_ACC; s++) {
            int x = tid + s * nt, m = x / MOE_TN, j = x % MOE_TN;
            if (x >= MOE_TM * MOE_TN || m >= rows) continue;
            real sum = acc[s];
            for (int kk = 0; kk < kw; kk++) sum += sA[m * (MOE_TK + 1) + kk] * sB[kk * (MOE_TN + 1) + j];
            acc[s] = sum;
        }
        DM_SYNC();
    }
    MOE_UNROLL
    for (int s = 0; s < MOE_ACC; s++) {
        int x = tid + s * nt, m = x / MOE_TN, j = x % MOE_TN;
        if (x >= MOE_TM * MOE_TN || m >= rows || j0 + j >= Nc) continue;
        real *c = g->C + (size_t)(row0 + m) * g->ldc + j0 + j;
        if (g->epi == MOE_EPI_DSILU) {  // c holds h: silu'(h) = sig + silu(h) (1 - sig)
            real hv = *c, sg = moe_sigmoid(hv), gv = hv * sg;
            *c = acc[s] * (sg + gv * ((real)1 - sg));
        } else {
            *c = acc[s];
        }
    }
}

// ---- weight GEMM, one (output tile, expert, row slice) block: by = slice * E + expert ----
static DM_HD void moe_core_wg_tile(const MoeWG *g, const MoeView *v, int tile, int by, real *sA, real *sB,
                                   int tid, int nt) {
    const int E = v->E, e = by % E, sl = by / E, P = g->P, Q = g->Q;
    int o, o1;
    moe_slice_rows(v, e, sl, g->S, &o, &o1);
    const int c = o1 - o;
    const int ntq = (Q + MOE_TN - 1) / MOE_TN, p0 = (tile / ntq) * MOE_TM, q0 = (tile % ntq) * MOE_TN;
    // block-uniform; a slice of a split reduction writes its partial tile even without rows
    if (p0 >= P || (c == 0 && g->S == 1)) return;
    real acc[MOE_ACC];
    MOE_UNROLL
    for (int s = 0; s < MOE_ACC; s++) acc[s] = 0;
    for (int k0 = 0; k0 < c; k0 += MOE_TK) {
        const int kw = c - k0 < MOE_TK ? c - k0 : MOE_TK;
        for (int x = tid; x < MOE_TK * MOE_TM; x += nt) {  // sA[kk][p]: row o+k0+kk of A, p fastest
            int kk = x / MOE_TM, p = x % MOE_TM;
            sA[kk * (MOE_TM + 1) + p] = kk < kw && p0 + p < P ? moe_rows_at(&g->A, v, e, o + k0 + kk, p0 + p) : (real)0;
        }
        for (int x = tid; x < MOE_TK * MOE_TN; x += nt) {  // sB[kk][q]
            int kk = x / MOE_TN, q = x % MOE_TN;
            sB[kk * (MOE_TN + 1) + q] = kk < kw && q0 + q < Q ? moe_rows_at(&g->B, v, e, o + k0 + kk, q0 + q) : (real)0;
        }
        DM_SYNC();
        MOE_UNROLL
        for (int s = 0; s < MOE_ACC; s++) {
            int x = tid + s * nt, p = x / MOE_TN, q = x % MOE_TN;
            if (x >= MOE_TM * MOE_TN) continue;
            real sum = acc[s];
            for (int kk = 0; kk < kw; kk++) sum += sA[kk * (MOE_TM + 1) + p] * sB[kk * (MOE_TN + 1) + q];
            acc[s] = sum;
        }
        DM_SYNC();
    }
    real *Ce = g->S > 1 ? g->part + ((size_t)sl * E + e) * P * Q : g->C + (size_t)e * P * Q;
    MOE_UNROLL
    for (int s = 0; s < MOE_ACC; s++) {
        int x = tid + s * nt, p = x / MOE_TN, q = x % MOE_TN;
        if (x >= MOE_TM * MOE_TN || p0 + p >= P || q0 + q >= Q) continue;
        if (g->S > 1) Ce[(size_t)(p0 + p) * Q + q0 + q] = acc[s];
        else Ce[(size_t)(p0 + p) * Q + q0 + q] += acc[s];
    }
}

// ---- wsum: item x of [E, P, Q]. C[x] += the S partial tiles' sums, in slice order ----
static DM_HD void moe_core_wsum(const MoeView *v, const MoeWG *g, size_t x) {
    const size_t EPQ = (size_t)v->E * g->P * g->Q;
    real acc = g->part[x];
    for (int s = 1; s < g->S; s++) acc += g->part[(size_t)s * EPQ + x];
    g->C[x] += acc;
}

// ---- combine: item x of [N, d]. dst[t, q] = (accumulate ? dst : 0) + sum over t's k assignments
// in increasing expert order of (W[a] if weighted) * rows[pos[a], q] ----
static DM_HD void moe_core_combine(const MoeView *v, real *dst, const real *rows, int weighted, int accumulate,
                                   size_t x) {
    const int k = v->k, t = (int)(x / v->d), q = (int)(x % v->d);
    const int *it = v->idx + (size_t)t * k;  // [k] distinct experts
    real acc = accumulate ? dst[x] : (real)0;
    int prev = -1;
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int j = 0; j < k; j++)
            if (it[j] > prev && (best < 0 || it[j] < it[best])) best = j;
        prev = it[best];
        int a = t * k + best;
        real yv = rows[(size_t)v->pos[a] * v->d + q];
        acc += weighted ? v->W[a] * yv : yv;
    }
    dst[x] = acc;
}

// ---- dw: item i (sorted row). dw[a] = D_i . (a2_i s2_e) (the CPU's float order); then
// D_i *= w_a (d loss / d b2 = w D) ----
static DM_HD void moe_core_dw(const MoeView *v, real *D, const real *s2, int i) {
    const int r = v->r, a = v->asg[i], e = v->idx[a];
    real *Di = D + (size_t)i * r;                 // [r]
    const real *ai = v->a2 + (size_t)i * r;       // [r]
    const real *se = s2 + (size_t)e * r;          // [r]
    real acc = 0;
    for (int q = 0; q < r; q++) acc += Di[q] * (ai[q] * se[q]);
    v->dw[a] = acc;
    real wa = v->W[a];
    for (int q = 0; q < r; q++) Di[q] *= wa;
}

// ---- sgrad: item x of [S, E, r] (slice, expert, column). S = 1: gs[e, q] += sum_i t[i, q]
// a[i, q] over e's rows in order (the CPU accumulates into gs the same way); S > 1: the slice's
// rows summed from 0 into part[x], which sgsum adds to gs in slice order. t[i, q] *= s[e, q] ----
// (t and a are distinct buffers: __restrict__ lets the loads of the next rows be issued before
// this row's store, so a thread walking many rows has several loads in flight)
static DM_HD void moe_core_sgrad(const MoeView *v, real *gs, real *__restrict__ t, const real *__restrict__ a,
                                 const real *s, int S, real *part, int x) {
    const int r = v->r, Er = v->E * r, sl = x / Er, y = x % Er, e = y / r, q = y % r;
    int i0, i1;
    moe_slice_rows(v, e, sl, S, &i0, &i1);
    real acc = S > 1 ? (real)0 : gs[y], sq = s[y];
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
    for (int i = i0; i < i1; i++) {
        real tv = t[(size_t)i * r + q];
        acc += tv * a[(size_t)i * r + q];
        t[(size_t)i * r + q] = tv * sq;
    }
    if (S > 1) part[x] = acc;
    else gs[y] = acc;
}
// ---- sgsum: item y of [E, r]. gs[y] += the S slices' sums, in slice order ----
static DM_HD void moe_core_sgsum(const MoeView *v, real *gs, int S, const real *part, int y) {
    const size_t Er = (size_t)v->E * v->r;
    real acc = part[y];
    for (int s = 1; s < S; s++) acc += part[(size_t)s * Er + y];
    gs[y] += acc;
}

// ---- router backward: item t (kernels/cpu/moe.c's formulas, same order) ----
static DM_HD void moe_core_router_bwd(const MoeView *v, real *dz, real daux, int t) {
    const int N = v->N, E = v->E, k = v->k;
    const real *pt = v->P + (size_t)t * E, *wt = v->W + (size_t)t * k, *dwt = v->dw + (size_t)t * k;
    const int *it = v->idx + (size_t)t * k;
    real dp[MOE_MAXE];
    for (int e = 0; e < E; e++) {
        int cnt = v->off[e + 1] - v->off[e];
        dp[e] = daux * (real)((double)E * cnt / ((double)N * k) / N);
    }
    if (k == 1) {
        dp[it[0]] += dwt[0];
    } else {
        real S = 0, dot = 0;
        for (int j = 0; j < k; j++) { S += pt[it[j]]; dot += dwt[j] * wt[j]; }
        for (int j = 0; j < k; j++) dp[it[j]] += (dwt[j] - dot) / S;
    }
    real pdp = 0;
    for (int e = 0; e < E; e++) pdp += pt[e] * dp[e];
    real *dzt = dz + (size_t)t * E;
    for (int e = 0; e < E; e++) dzt[e] += pt[e] * (dp[e] - pdp);
}

// ---- the algorithm as a list of steps ----
enum { MOE_K_ROUTE, MOE_K_PLAN, MOE_K_RG, MOE_K_WG, MOE_K_COMBINE, MOE_K_DW, MOE_K_SGRAD, MOE_K_ROUTER, MOE_K_WSUM,
       MOE_K_SGSUM };
#define MOE_MAX_STEPS 24  // the backward's 13, a wsum after each of 4 weight GEMMs, an sgsum after each of 2 sgrads
typedef struct {
    int kind;
    MoeRG rg;                          // RG
    MoeWG wg;                          // WG
    const real *z;                     // ROUTE: router logits [N, E]
    real *aux; int *load;              // PLAN: backend outputs, may be NULL
    real *dst; const real *src;        // COMBINE: dst [N, d], rows src [A, d]
    int weighted, accumulate;          // COMBINE
    real *gs, *t; const real *a, *s;   // SGRAD: gs [E, r] +=, t [A, r], a [A, r], s [E, r]; DW: t = D, s = s2
    int split; real *part;             // SGRAD, SGSUM: slices, partials [split, E, r]
    real *dz; real daux;               // ROUTER
} MoeStep;

// Launch shape of a step: item steps -> *items (one thread each); block steps -> gx x gy blocks.
static DM_HDS inline void moe_core_shape(const MoeStep *st, const MoeView *v, size_t *items, int *gx, int *gy) {
    *items = 0; *gx = 0; *gy = 0;
    switch (st->kind) {
    case MOE_K_ROUTE: case MOE_K_ROUTER: *items = (size_t)v->N; break;
    case MOE_K_COMBINE: *items = (size_t)v->N * v->d; break;
    case MOE_K_DW: *items = (size_t)v->A; break;
    case MOE_K_SGRAD: *items = (size_t)st->split * v->E * v->r; break;
    case MOE_K_SGSUM: *items = (size_t)v->E * v->r; break;
    case MOE_K_WSUM: *items = (size_t)v->E * st->wg.P * st->wg.Q; break;
    case MOE_K_PLAN: *gx = 1; *gy = 1; break;
    case MOE_K_RG: *gx = v->MT; *gy = (st->rg.Nc + MOE_TN - 1) / MOE_TN; break;
    case MOE_K_WG:
        *gx = ((st->wg.P + MOE_TM - 1) / MOE_TM) * ((st->wg.Q + MOE_TN - 1) / MOE_TN);
        *gy = v->E * st->wg.S;
        break;
    }
}

static inline MoeRows moe_rows(const real *p, int ld, int gather, int op, const real *s) {
    MoeRows o;
    o.p = p; o.ld = ld; o.gather = gather; o.op = op; o.s = s;
    return o;
}
static inline MoeStep moe_step(int kind) {
    MoeStep st = {0};
    st.kind = kind;
    return st;
}
static inline MoeStep moe_step_rg(MoeRows A, const real *B, int btrans, int K, int Nc, real *C, int ldc,
                                  int epi) {
    MoeStep st = moe_step(MOE_K_RG);
    st.rg.A = A; st.rg.B = B; st.rg.btrans = btrans; st.rg.K = K; st.rg.Nc = Nc;
    st.rg.C = C; st.rg.ldc = ldc; st.rg.epi = epi;
    return st;
}
// a weight GEMM, and after it its wsum when the rows are split: appended to st, the new count
static inline int moe_add_wg(MoeStep *st, int ns, const MoeView *v, MoeRows A, MoeRows B, real *C, int P, int Q) {
    MoeStep w = moe_step(MOE_K_WG);
    w.wg.A = A; w.wg.B = B; w.wg.C = C; w.wg.P = P; w.wg.Q = Q;
    w.wg.S = v->nosplit ? 1 : moe_wg_split(P, Q, v->E);
    w.wg.part = v->part;
    st[ns++] = w;
    if (w.wg.S > 1) { st[ns] = w; st[ns].kind = MOE_K_WSUM; ns++; }
    return ns;
}
// an s-gradient (gs [E, r] +=, t [A, r] *= s), and after it its sgsum when the rows are split
static inline int moe_add_sgrad(MoeStep *st, int ns, const MoeView *v, real *gs, real *t, const real *a,
                                const real *s) {
    MoeStep g = moe_step(MOE_K_SGRAD);
    g.gs = gs; g.t = t; g.a = a; g.s = s;
    g.split = v->nosplit ? 1 : moe_sg_split(v->E, v->r);
    g.part = v->part;
    st[ns++] = g;
    if (g.split > 1) { st[ns] = g; st[ns].kind = MOE_K_SGSUM; ns++; }
    return ns;
}

// Forward: out [N, d] written; aux [1], load [E] backend memory (may be NULL); n [N, d]; z [N, E].
// Returns the number of steps (<= 8).
static inline int moe_core_forward_steps(MoeStep *st, const MoeView *v, real *out, real *aux, int *load,
                                         const real *n, const real *z, MoEParams p) {
    const int d = v->d, r = v->r, f = v->f;
    int ns = 0;
    st[ns] = moe_step(MOE_K_ROUTE); st[ns].z = z; ns++;
    st[ns] = moe_step(MOE_K_PLAN); st[ns].aux = aux; st[ns].load = load; ns++;
    // a1 = X V1                  (X: the rows of n gathered per assignment)
    st[ns++] = moe_step_rg(moe_rows(n, d, 1, MOE_OP_PLAIN, NULL), p.V1, 0, d, r, v->a1, r, MOE_EPI_STORE);
    // h = (a1 s1) U1^T
    st[ns++] = moe_step_rg(moe_rows(v->a1, r, 0, MOE_OP_SCALE, p.s1), p.U1, 1, r, f, v->h, f, MOE_EPI_STORE);
    // a2 = silu(h) V2
    st[ns++] = moe_step_rg(moe_rows(v->h, f, 0, MOE_OP_SILU, NULL), p.V2, 0, f, r, v->a2, r, MOE_EPI_STORE);
    // y = (a2 s2) U2^T
    st[ns++] = moe_step_rg(moe_rows(v->a2, r, 0, MOE_OP_SCALE, p.s2), p.U2, 1, r, d, v->y, d, MOE_EPI_STORE);
    // out[t] = sum over t's experts in index order of w y
    st[ns] = moe_step(MOE_K_COMBINE); st[ns].dst = out; st[ns].src = v->y; st[ns].weighted = 1; ns++;
    return ns;
}

// Backward (the CPU's chain, expert-grouped): accumulates into dn [N, d], dz [N, E] and g.
// Returns the number of steps (<= MOE_MAX_STEPS).
static inline int moe_core_backward_steps(MoeStep *st, const MoeView *v, real *dn, real *dz, MoEGrads g,
                                          const real *dout, real daux, const real *n, MoEParams p) {
    const int d = v->d, r = v->r, f = v->f;
    int ns = 0;
    // D = G U2 (G: the rows of dout gathered)
    st[ns++] = moe_step_rg(moe_rows(dout, d, 1, MOE_OP_PLAIN, NULL), p.U2, 0, d, r, v->t1, r, MOE_EPI_STORE);
    // dw = D . b2; D *= w (now d loss / d b2)
    st[ns] = moe_step(MOE_K_DW); st[ns].t = v->t1; st[ns].s = p.s2; ns++;
    // dU2 += (w G)^T (a2 s2)
    ns = moe_add_wg(st, ns, v, moe_rows(dout, d, 1, MOE_OP_WROW, NULL), moe_rows(v->a2, r, 0, MOE_OP_SCALE, p.s2),
                    g.U2, d, r);
    // ds2 += sum db2 a2; da2 = db2 s2 (in t1)
    ns = moe_add_sgrad(st, ns, v, g.s2, v->t1, v->a2, p.s2);
    // dV2 += silu(h)^T da2
    ns = moe_add_wg(st, ns, v, moe_rows(v->h, f, 0, MOE_OP_SILU, NULL), moe_rows(v->t1, r, 0, MOE_OP_PLAIN, NULL),
                    g.V2, f, r);
    // dh = (da2 V2^T) silu'(h), over h
    st[ns++] = moe_step_rg(moe_rows(v->t1, r, 0, MOE_OP_PLAIN, NULL), p.V2, 1, r, f, v->h, f, MOE_EPI_DSILU);
    // dU1 += dh^T (a1 s1)
    ns = moe_add_wg(st, ns, v, moe_rows(v->h, f, 0, MOE_OP_PLAIN, NULL), moe_rows(v->a1, r, 0, MOE_OP_SCALE, p.s1),
                    g.U1, f, r);
    // db1 = dh U1 (in t2)
    st[ns++] = moe_step_rg(moe_rows(v->h, f, 0, MOE_OP_PLAIN, NULL), p.U1, 0, f, r, v->t2, r, MOE_EPI_STORE);
    // ds1 += sum db1 a1; da1 = db1 s1
    ns = moe_add_sgrad(st, ns, v, g.s1, v->t2, v->a1, p.s1);
    // dV1 += X^T da1
    ns = moe_add_wg(st, ns, v, moe_rows(n, d, 1, MOE_OP_PLAIN, NULL), moe_rows(v->t2, r, 0, MOE_OP_PLAIN, NULL),
                    g.V1, d, r);
    // dX = da1 V1^T (in y), then dn[t] += dX rows in expert order
    st[ns++] = moe_step_rg(moe_rows(v->t2, r, 0, MOE_OP_PLAIN, NULL), p.V1, 1, r, d, v->y, d, MOE_EPI_STORE);
    st[ns] = moe_step(MOE_K_COMBINE); st[ns].dst = dn; st[ns].src = v->y; st[ns].accumulate = 1; ns++;
    // the router: dz += softmax backward of (aux + weight) gradients
    st[ns] = moe_step(MOE_K_ROUTER); st[ns].dz = dz; st[ns].daux = daux; ns++;
    return ns;
}

// One item of an item step (the executors loop / launch over moe_core_shape's items).
static DM_HD inline void moe_core_item(const MoeStep *st, const MoeView *v, size_t x) {
    switch (st->kind) {
    case MOE_K_ROUTE: moe_core_route(v, st->z, (int)x); break;
    case MOE_K_COMBINE: moe_core_combine(v, st->dst, st->src, st->weighted, st->accumulate, x); break;
    case MOE_K_DW: moe_core_dw(v, st->t, st->s, (int)x); break;
    case MOE_K_SGRAD: moe_core_sgrad(v, st->gs, st->t, st->a, st->s, st->split, st->part, (int)x); break;
    case MOE_K_SGSUM: moe_core_sgsum(v, st->gs, st->split, st->part, (int)x); break;
    case MOE_K_WSUM: moe_core_wsum(v, &st->wg, x); break;
    case MOE_K_ROUTER: moe_core_router_bwd(v, st->dz, st->daux, (int)x); break;
    }
}

// One block of a block step (bx < gx, by < gy); sA [MOE_SA], sB [MOE_SB] the block's shared tiles.
static DM_HD inline void moe_core_block(const MoeStep *st, const MoeView *v, int bx, int by, real *sA, real *sB,
                                        int tid, int nt) {
    switch (st->kind) {
    case MOE_K_PLAN:
        moe_core_plan(v, st->aux, st->load, tid, nt);
        DM_SYNC();
        moe_core_tiles(v, tid, nt);
        break;
    case MOE_K_RG: moe_core_rg_tile(&st->rg, v, bx, by, sA, sB, tid, nt); break;
    case MOE_K_WG: moe_core_wg_tile(&st->wg, v, bx, by, sA, sB, tid, nt); break;
    }
}
