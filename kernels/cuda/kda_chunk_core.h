// kda_chunk_core.h — the chunked (WY/UT) KDA of SPEC §2 for ONE (batch, head) sequence, written
// as phases of a thread block: every phase is a loop `for (x = tid; x < n; x += nt)` over
// independent outputs, and phases are separated by DM_SYNC(). The CUDA backend
// (kda_chunk_cuda.cu) runs one block per (b, h) with DM_SYNC = __syncthreads(); the CPU test
// (tests/test_kda_chunk_core.c) runs the same code with tid = 0, nt = 1 and DM_SYNC empty, so the
// algorithm and every index are checked against the recurrent reference on a machine without a
// GPU. A phase may only write outputs its own index owns (no races), and every sum runs in a fixed
// order inside one thread: the result does not depend on nt (deterministic, no atomics).
//
// Chunks of GC = 16 tokens (the sub-block size of kernels/cpu/kda.c): inside one, with Gam_t the
// cumulative log-decay and m the middle token, every decay factor is split as
// e^(Gam_t - Gam_s) = F_t / F_s, F_t = e^(Gam_t - Gam_m) in e^[-8|g_min|, 8|g_min|] (±40 at the
// default g_min = -5, ±64 at its floor -8) — finite in fp32 (Gam itself is summed in double).
// Per chunk (S0 the state before it):
//   P[t,s] = (q_t F_t) . (k_s / F_s)  (s <= t),  M[t,s] = (k_t F_t) . (k_s / F_s)  (s < t)
//   W = V - KE S0,  U_t = beta_t (W_t - sum_{s<t} M[t,s] U_s)     (KE = k e^Gam, QE = q e^Gam)
//   O = QE S0 + P U,  S_end = Diag(e^Gam_last) S0 + KD^T U        (KD = k e^(Gam_last - Gam))
// This is kernels/cpu/kda.c's chunked form with one sub-block per chunk; the backward is its
// backward specialised the same way (see the comments there for the derivation).
//
// Layout as the CPU: q, k, v, g, o [B, T, H, D]; beta [B, T, H]. Rows of one (b, h) are at
// stride HD = H*D (beta at stride H). Row offsets are size_t; indices inside a head's [D, D] and
// [D, D + 1] tiles are int, D (D + 1) < 2^31 (the CUDA backend refuses D > 46340: shape_limits.h).
#pragma once
#include <math.h>
#include <stddef.h>

#ifndef DM_HD            // the phases: __device__ on the GPU
#define DM_HD
#endif
#ifndef DM_HDS           // sizes and views: __host__ __device__ on the GPU
#define DM_HDS
#endif
#ifndef DM_SYNC
#define DM_SYNC()
#endif
#ifndef DM_UNROLL        // nvcc: unroll the next loop (its trip count is a constant)
#define DM_UNROLL
#endif

#define KDA_GC 16

// Workspace of one (b, h), in reals; Gam (doubles) first so it is 8-byte aligned when the
// whole workspace is and the per-(b, h) size is even.
typedef struct {
    double *Gam;                 // [GC, D] cumulative log-decay of the chunk
    real *Sc;                    // [nsub, D, D] state before each chunk (forward -> backward)
    real *U, *W;                 // [T, D] u rows and W = V - KE S0 rows (forward -> backward)
    real *PM;                    // [nsub, 2, GC, GC] P then M of each chunk (forward -> backward)
    real *F, *iF, *R, *QF, *KF, *QE, *KE, *KD, *Y;  // [GC, D] chunk operands
    real *dKD, *dQE, *dX, *Z, *dGam;                 // [GC, D] chunk gradients
    real *dP, *dM;               // [GC, GC]
    real *dPd;                   // [GC] the diagonal of dP
    real *Em, *eL;               // [D] e^Gam_m, e^Gam_last
    real *dS, *dS0;              // [D, D+1] d loss / d state after / before the chunk (rows padded)
    real *St;                    // [D, D+1] the chunk's S0 transposed: St[a (D+1) + b] = S0[b D + a]
    real *YT, *UT;               // [D, GC+1] the chunk's Y and U transposed (the P/M and dP/G dots);
                                 // YT is NULL in the backward's shared-memory views (not read there)
} KdaCoreWs;
// The backward reads dS and S0 along columns as well as rows; with rows of D + 1 (and S0 staged
// transposed) a warp's 32 consecutive indices hit 32 different shared-memory banks in both
// directions instead of one bank 32 times (D = 64 is a multiple of the 32 banks). Likewise the
// 16 x 16 dot-product phases read Y (forward) and U (backward) transposed, rows of GC + 1.
#define KDA_PAD(D) ((size_t)(D) + 1)
#define KDA_TP (KDA_GC + 1)

static DM_HDS inline size_t kda_core_per_bh(int T, int D) {
    size_t nsub = (size_t)(T + KDA_GC - 1) / KDA_GC, GD = (size_t)KDA_GC * D, DD = (size_t)D * D;
    size_t n = 2 * GD + nsub * DD + 2 * (size_t)T * D + nsub * 2 * KDA_GC * KDA_GC + 14 * GD +
               2 * KDA_GC * KDA_GC + KDA_GC + 2 * (size_t)D + 3 * (size_t)D * KDA_PAD(D) + 2 * (size_t)D * KDA_TP;
    return (n + 1) & ~(size_t)1;  // even: the next (b, h)'s Gam stays 8-byte aligned
}

// The whole workspace: every (b, h), plus 2 reals so its start can be moved to an 8-byte
// boundary (an activation arena hands out 4-byte aligned views).
static DM_HDS inline size_t kda_core_ws_size(int B, int T, int H, int D) {
    return (size_t)B * H * kda_core_per_bh(T, D) + 2;
}

// (b, h)'s views; ws is the workspace as allocated (forward and backward must pass the same).
static DM_HDS inline KdaCoreWs kda_core_carve(real *ws, int bh, int T, int D) {
    size_t nsub = (size_t)(T + KDA_GC - 1) / KDA_GC, GD = (size_t)KDA_GC * D, DD = (size_t)D * D;
    real *base = (real *)(((size_t)ws + 7) & ~(size_t)7);
    real *p = base + (size_t)bh * kda_core_per_bh(T, D);
    KdaCoreWs w;
    w.Gam = (double *)p; p += 2 * GD;
    w.Sc = p; p += nsub * DD;
    w.U = p; p += (size_t)T * D;
    w.W = p; p += (size_t)T * D;
    w.PM = p; p += nsub * 2 * KDA_GC * KDA_GC;
    real **g[] = {&w.F, &w.iF, &w.R, &w.QF, &w.KF, &w.QE, &w.KE, &w.KD, &w.Y, &w.dKD, &w.dQE, &w.dX, &w.Z, &w.dGam};
    for (int i = 0; i < 14; i++) { *g[i] = p; p += GD; }
    w.dP = p; p += KDA_GC * KDA_GC;
    w.dM = p; p += KDA_GC * KDA_GC;
    w.dPd = p; p += KDA_GC;
    w.Em = p; p += D;
    w.eL = p; p += D;
    w.dS = p; p += (size_t)D * KDA_PAD(D);
    w.dS0 = p; p += (size_t)D * KDA_PAD(D);
    w.St = p; p += (size_t)D * KDA_PAD(D);
    w.YT = p; p += (size_t)D * KDA_TP;
    w.UT = p;
    return w;
}

// The chunk-local views (Gam, the [GC, D] operands and gradients, dP, dM, dPd, Em, eL, dS, dS0,
// St, YT, UT): nothing in them outlives one kernel (forward -> backward goes through Sc, U, W, PM
// only), so the GPU keeps them in the block's shared memory, and each kernel carves only the views
// it reads — the fewer bytes a block holds, the more blocks an SM runs at once (two per SM needs
// <= 113 KB each on an H100/H200; the forward's views are 48.8 KiB at D = 64, the backward's 107.6 KiB).
// Sizes in reals (even, so the doubles of Gam stay 8-byte aligned).
static DM_HDS inline size_t kda_core_local_size_fwd(int D) {
    size_t GD = (size_t)KDA_GC * D;
    size_t n = 2 * GD + 9 * GD + 2 * (size_t)D + (size_t)D * KDA_TP;
    return (n + 1) & ~(size_t)1;
}
static DM_HDS inline size_t kda_core_local_size_bwd(int D) {
    size_t GD = (size_t)KDA_GC * D;
    size_t n = 13 * GD + 2 * KDA_GC * KDA_GC + KDA_GC + 2 * (size_t)D + 3 * (size_t)D * KDA_PAD(D) +
               (size_t)D * KDA_TP;
    return (n + 1) & ~(size_t)1;
}
// Re-point the forward's views into `local` (8-byte aligned, kda_core_local_size_fwd(D) reals).
static DM_HDS inline void kda_core_carve_local_fwd(KdaCoreWs *w, real *local, int D) {
    size_t GD = (size_t)KDA_GC * D;
    real *p = local;
    w->Gam = (double *)p; p += 2 * GD;
    real **g[] = {&w->F, &w->iF, &w->R, &w->QF, &w->KF, &w->QE, &w->KE, &w->KD, &w->Y};
    for (int i = 0; i < 9; i++) { *g[i] = p; p += GD; }
    w->Em = p; p += D;
    w->eL = p; p += D;
    w->YT = p;
}
// Re-point the backward's views into `local` (8-byte aligned, kda_core_local_size_bwd(D) reals).
// Three views share bytes with others whose lifetimes within a chunk do not overlap (each chunk's
// phases, in order: prep, dU / dS0, the solve, dP / G, dbeta, the per-element gradients, the
// per-channel sums; a barrier between each):
//   Gam (2 GD reals: read only inside prep)        over dX and Z (first written after prep);
//   dGam (written by the per-element phase)        over dX (last read by the dbeta phase, before it).
// tests/test_kda_chunk_core.c runs these views against the global carving, where every view has
// its own bytes, bit for bit with real threads: a lifetime got wrong changes the result.
static DM_HDS inline void kda_core_carve_local_bwd(KdaCoreWs *w, real *local, int D) {
    size_t GD = (size_t)KDA_GC * D;
    real *p = local;
    w->Gam = (double *)p;
    w->dX = p; p += GD;
    w->dGam = w->dX;
    w->Z = p; p += GD;
    real **g[] = {&w->F, &w->iF, &w->R, &w->QF, &w->KF, &w->QE, &w->KE, &w->KD, &w->Y, &w->dKD, &w->dQE};
    for (int i = 0; i < 11; i++) { *g[i] = p; p += GD; }
    w->dP = p; p += KDA_GC * KDA_GC;
    w->dM = p; p += KDA_GC * KDA_GC;
    w->dPd = p; p += KDA_GC;
    w->Em = p; p += D;
    w->eL = p; p += D;
    w->dS = p; p += (size_t)D * KDA_PAD(D);
    w->dS0 = p; p += (size_t)D * KDA_PAD(D);
    w->St = p; p += (size_t)D * KDA_PAD(D);
    w->UT = p;
    w->YT = NULL;
}

// Decay factors and scaled operands of the chunk of L tokens whose rows start at q, k, g
// (stride ld): Gam, F, iF, R = e^(Gam_last - Gam), Em, eL, QF, KF, QE, KE, KD, Y.
static DM_HD void kda_core_prep(KdaCoreWs *w, const real *q, const real *k, const real *g,
                                size_t ld, int L, int D, int tid, int nt) {
    int m = L / 2;  // the reference (middle) token
    for (int c = tid; c < D; c += nt) {
        double s = 0;
        for (int t = 0; t < L; t++) {
            s += (double)g[t * ld + c];
            w->Gam[t * D + c] = s;
        }
        w->Em[c] = (real)exp(w->Gam[m * D + c]);
        w->eL[c] = (real)exp(s);
    }
    DM_SYNC();
    for (int x = tid; x < L * D; x += nt) {
        int t = x / D, c = x % D;
        double Gt = w->Gam[x], Gm = w->Gam[m * D + c], Gl = w->Gam[(L - 1) * D + c];
        real F = (real)exp(Gt - Gm), iF = (real)exp(Gm - Gt);
        real qv = q[t * ld + c], kv = k[t * ld + c];
        w->F[x] = F;
        w->iF[x] = iF;
        w->QF[x] = qv * F;
        w->KF[x] = kv * F;
        w->QE[x] = qv * F * w->Em[c];
        w->KE[x] = kv * F * w->Em[c];
        w->R[x] = (real)exp(Gl - Gt);
        w->KD[x] = kv * w->R[x];
        w->Y[x] = kv * iF;
        if (w->YT) w->YT[c * KDA_TP + t] = kv * iF;
    }
    DM_SYNC();
}

// Forward of one (b, h): o rows (stride ld) from q, k, v, g rows (stride ld) and beta (stride
// ldb). Keeps Sc, U, W, PM for the backward.
static DM_HD void kda_core_forward(KdaCoreWs *w, real *o, const real *q, const real *k,
                                   const real *v, const real *beta, const real *g, size_t ld,
                                   size_t ldb, int T, int D, int tid, int nt) {
    int nsub = (T + KDA_GC - 1) / KDA_GC;
    size_t DD = (size_t)D * D;
    for (int x = tid; x < (int)DD; x += nt) w->Sc[x] = 0;  // S = 0 before the first chunk
    DM_SYNC();
    for (int ci = 0; ci < nsub; ci++) {
        int t0 = ci * KDA_GC, L = T - t0 < KDA_GC ? T - t0 : KDA_GC;
        const real *qc = q + t0 * ld, *kc = k + t0 * ld, *vc = v + t0 * ld, *gc = g + t0 * ld;
        const real *bc = beta + t0 * ldb;
        real *oc = o + t0 * ld;
        const real *S0 = w->Sc + ci * DD;
        real *U = w->U + (size_t)t0 * D, *W = w->W + (size_t)t0 * D;
        real *P = w->PM + (size_t)ci * 2 * KDA_GC * KDA_GC, *M = P + KDA_GC * KDA_GC;  // [GC, GC]
        kda_core_prep(w, qc, kc, gc, ld, L, D, tid, nt);
        // W = V - KE S0; O = QE S0 (S0 = 0 on the first chunk); P, M
        for (int x = tid; x < L * D; x += nt) {
            int t = x / D, j = x % D;
            real wv = vc[t * ld + j], ov = 0;
            if (ci > 0) {
                real a = 0, b = 0;
                for (int i = 0; i < D; i++) {
                    a += w->KE[t * D + i] * S0[i * D + j];
                    b += w->QE[t * D + i] * S0[i * D + j];
                }
                wv -= a;
                ov = b;
            }
            W[x] = wv;
            oc[t * ld + j] = ov;
        }
        for (int x = tid; x < 2 * KDA_GC * KDA_GC; x += nt) {
            int side = x / (KDA_GC * KDA_GC), t = (x / KDA_GC) % KDA_GC, s = x % KDA_GC;
            real acc = 0;
            int on = t < L && s < L && (side ? s < t : s <= t);
            if (on) {
                const real *a = (side ? w->KF : w->QF) + t * D, *b = w->YT + s;  // b[c KDA_TP] = Y[s, c]
                for (int c = 0; c < D; c++) acc += a[c] * b[c * KDA_TP];
            }
            P[x] = acc;  // x runs over P then M (side 1): M = P + GC*GC
        }
        DM_SYNC();
        // U_t = beta_t (W_t - sum_{s<t} M[t,s] U_s): column j depends on column j only. Its U
        // values stay in registers (loops unrolled over the chunk's 16 rows): the chain would
        // otherwise wait on a global-memory round trip per row
        for (int j = tid; j < D; j += nt) {
            real uc[KDA_GC];
            DM_UNROLL
            for (int t = 0; t < KDA_GC; t++) {
                if (t >= L) break;
                real u = W[t * D + j];
                DM_UNROLL
                for (int s = 0; s < t; s++) u -= M[t * KDA_GC + s] * uc[s];
                uc[t] = u * bc[t * ldb];
                U[t * D + j] = uc[t];
            }
        }
        DM_SYNC();
        // O += P U; S_next = Diag(eL) S0 + KD^T U (the state after the last chunk is not kept)
        for (int x = tid; x < L * D; x += nt) {
            int t = x / D, j = x % D;
            real acc = 0;
            for (int s = 0; s <= t; s++) acc += P[t * KDA_GC + s] * U[s * D + j];
            oc[t * ld + j] += acc;
        }
        if (ci + 1 < nsub) {
            real *Sn = w->Sc + (ci + 1) * DD;
            for (int x = tid; x < (int)DD; x += nt) {
                int i = x / D, j = x % D;
                real acc = w->eL[i] * S0[x];
                for (int t = 0; t < L; t++) acc += w->KD[t * D + i] * U[t * D + j];
                Sn[x] = acc;
            }
        }
        DM_SYNC();
    }
}

// Backward of one (b, h): ACCUMULATES into dq, dk, dv, dg (stride ld) and dbeta (stride ldb),
// from dout (stride ld) and what forward kept.
static DM_HD void kda_core_backward(KdaCoreWs *w, real *dq, real *dk, real *dv, real *dbeta,
                                    real *dg, const real *dout, const real *q, const real *k,
                                    const real *beta, const real *g, size_t ld, size_t ldb,
                                    int T, int D, int tid, int nt) {
    int nsub = (T + KDA_GC - 1) / KDA_GC;
    size_t DD = (size_t)D * D;
    real *dS = w->dS, *dS0 = w->dS0, *St = w->St;
    const int lS = D + 1;  // row stride of dS, dS0, St
    for (int x = tid; x < D * lS; x += nt) dS[x] = 0;  // nothing reads the final state
    DM_SYNC();
    for (int ci = nsub - 1; ci >= 0; ci--) {
        int t0 = ci * KDA_GC, L = T - t0 < KDA_GC ? T - t0 : KDA_GC;
        int first = ci == 0, last = ci == nsub - 1;
        const real *qc = q + t0 * ld, *kc = k + t0 * ld, *gc = g + t0 * ld, *dO = dout + t0 * ld;
        const real *bc = beta + t0 * ldb;
        real *dqc = dq + t0 * ld, *dkc = dk + t0 * ld, *dvc = dv + t0 * ld, *dgc = dg + t0 * ld;
        real *dbc = dbeta + t0 * ldb;
        const real *S0 = w->Sc + ci * DD;
        const real *U = w->U + (size_t)t0 * D, *W = w->W + (size_t)t0 * D;
        const real *P = w->PM + (size_t)ci * 2 * KDA_GC * KDA_GC, *M = P + KDA_GC * KDA_GC;
        kda_core_prep(w, qc, kc, gc, ld, L, D, tid, nt);
        for (int x = tid; x < (int)DD; x += nt) St[(x % D) * lS + x / D] = S0[x];  // S0 transposed
        for (int x = tid; x < L * D; x += nt) w->UT[(x % D) * KDA_TP + x / D] = U[x];  // U transposed
        DM_SYNC();
        // dU = KD dS + P^T dO (into dX, which the solve turns into dX);  dKD = U dS^T;  dQE = dO S0^T
        for (int x = tid; x < L * D; x += nt) {
            int t = x / D, j = x % D;
            real du = 0, dkd = 0, dqe = 0;
            if (!last)
                for (int i = 0; i < D; i++) {
                    du += w->KD[t * D + i] * dS[i * lS + j];
                    dkd += U[t * D + i] * dS[j * lS + i];
                }
            for (int s = t; s < L; s++) du += P[s * KDA_GC + t] * dO[s * ld + j];
            if (!first)
                for (int i = 0; i < D; i++) dqe += dO[t * ld + i] * St[i * lS + j];  // S0[j, i]
            w->dX[x] = du;
            w->dKD[x] = dkd;
            w->dQE[x] = dqe;
        }
        // dS0 = Diag(eL) dS + QE^T dO (the -KE^T Z part comes after the solve)
        if (!first)
            for (int x = tid; x < (int)DD; x += nt) {
                int i = x / D, j = x % D;
                real acc = w->eL[i] * dS[i * lS + j];
                for (int t = 0; t < L; t++) acc += w->QE[t * D + i] * dO[t * ld + j];
                dS0[i * lS + j] = acc;
            }
        DM_SYNC();
        // (I + Diag(beta) M)^T dX = dU from the last row up; Z = Diag(beta) dX (column-private;
        // the column in registers while it is solved, as the forward's U)
        for (int j = tid; j < D; j += nt) {
            real xc[KDA_GC];
            DM_UNROLL
            for (int t = 0; t < KDA_GC; t++) xc[t] = t < L ? w->dX[t * D + j] : 0;
            DM_UNROLL
            for (int t = KDA_GC - 1; t >= 0; t--) {
                if (t >= L) continue;
                real z = bc[t * ldb] * xc[t];
                w->Z[t * D + j] = z;
                DM_UNROLL
                for (int s = 0; s < t; s++) xc[s] -= M[t * KDA_GC + s] * z;
            }
            DM_UNROLL
            for (int t = 0; t < KDA_GC; t++)
                if (t < L) w->dX[t * D + j] = xc[t];
        }
        DM_SYNC();
        // dP = dO U^T (s <= t, diagonal set aside), G = dX U^T (s < t) -> dM = -beta_t G
        for (int x = tid; x < 2 * KDA_GC * KDA_GC; x += nt) {
            int side = x / (KDA_GC * KDA_GC), t = (x / KDA_GC) % KDA_GC, s = x % KDA_GC;
            real acc = 0;
            int on = t < L && s < L && (side ? s < t : s <= t);
            if (on) {
                const real *u = w->UT + s;  // u[c KDA_TP] = U[s, c]
                if (side)
                    for (int c = 0; c < D; c++) acc += w->dX[t * D + c] * u[c * KDA_TP];
                else
                    for (int c = 0; c < D; c++) acc += dO[t * ld + c] * u[c * KDA_TP];
            }
            (side ? w->dM : w->dP)[t * KDA_GC + s] = acc;  // dM holds G for now
        }
        DM_SYNC();
        // per token: dbeta_t += dX_t . W_t - sum_s G[t,s] M[t,s]; dM = -beta G; diagonal of dP
        for (int t = tid; t < L; t += nt) {
            real db = 0;
            for (int c = 0; c < D; c++) db += w->dX[t * D + c] * W[t * D + c];
            for (int s = 0; s < t; s++) {
                db -= w->dM[t * KDA_GC + s] * M[t * KDA_GC + s];
                w->dM[t * KDA_GC + s] *= -bc[t * ldb];
            }
            dbc[t * ldb] += db;
            w->dPd[t] = w->dP[t * KDA_GC + t];
            w->dP[t * KDA_GC + t] = 0;  // q_t . k_t has no decay: its gradient goes straight to q, k
        }
        DM_SYNC();
        // per element: [dXq; dXk] = [dP; dM] Y, dY = dP^T QF + dM^T KF, dKE = -Z S0^T (each
        // element's own, kept in registers), then the t side, the s side, the e^Gam terms into
        // dGam; dv += Z
        for (int x = tid; x < L * D; x += nt) {
            int t = x / D, c = x % D;
            real xq = 0, xk = 0, dy = 0, dke = 0;
            for (int s = 0; s < L; s++) {
                xq += w->dP[t * KDA_GC + s] * w->Y[s * D + c];
                xk += w->dM[t * KDA_GC + s] * w->Y[s * D + c];
            }
            for (int r = 0; r < L; r++) dy += w->dP[r * KDA_GC + t] * w->QF[r * D + c];
            for (int r = 0; r < L; r++) dy += w->dM[r * KDA_GC + t] * w->KF[r * D + c];
            if (!first)
                for (int j = 0; j < D; j++) dke -= w->Z[t * D + j] * St[j * lS + c];  // S0[c, j]
            real F = w->F[x], E = w->Em[c] * F, dpd = w->dPd[t];
            real qv = qc[t * ld + c], kv = kc[t * ld + c];
            real dqa = xq * F + dpd * kv + w->dQE[x] * E;
            real dka = xk * F + dpd * qv + dy * w->iF[x] + dke * E + w->dKD[x] * w->R[x];
            real dG = xq * w->QF[x] + xk * w->KF[x] - dy * w->Y[x] + w->dQE[x] * w->QE[x] + dke * w->KE[x];
            if (t < L - 1) dG -= w->dKD[x] * w->KD[x];
            dqc[t * ld + c] += dqa;
            dkc[t * ld + c] += dka;
            dvc[t * ld + c] += w->Z[x];
            w->dGam[x] = dG;  // (over dX in shared memory: nothing in this phase reads dX)
        }
        // dS0 -= KE^T Z
        if (!first)
            for (int x = tid; x < (int)DD; x += nt) {
                int i = x / D, j = x % D;
                real acc = 0;
                for (int t = 0; t < L; t++) acc += w->KE[t * D + i] * w->Z[t * D + j];
                dS0[i * lS + j] -= acc;
            }
        DM_SYNC();
        // per channel: e^(Gam_last) terms into the last token, then dg = reverse cumsum of dGam
        for (int c = tid; c < D; c += nt) {
            real extra = 0;
            for (int t = 0; t < L - 1; t++) extra += w->dKD[t * D + c] * w->KD[t * D + c];
            if (!last) {
                real s = 0;
                for (int j = 0; j < D; j++) s += dS[c * lS + j] * St[j * lS + c];  // dS[c, j] S0[c, j]
                extra += w->eL[c] * s;
            }
            w->dGam[(L - 1) * D + c] += extra;
            real run = 0;
            for (int t = L - 1; t >= 0; t--) {
                run += w->dGam[t * D + c];
                dgc[t * ld + c] += run;
            }
        }
        DM_SYNC();
        real *tmp = dS; dS = dS0; dS0 = tmp;  // the state gradient before this chunk
    }
}
