// kda.c — the KDA core (SPEC §2) on the CPU: recurrent reference, chunked WY/UT form, both with
// exact backward passes, and the one-token decoding step. See kda.h for the contract.
//
// Notation per (b, h): rows are tokens, S[i][j] has key index i and value index j, so
// o_t[j] = sum_i S_t[i][j] q_t[i]. Every token row of q, k, v, g, o, dout lives at stride H*D.
#include "kda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "ops.h"
#if !defined(DM_DOUBLE) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#ifdef DM_DOUBLE
#define exp_r exp
#else
#define exp_r expf
#endif

// e^x for an exponent summed in double. In fp32, rounding x first would cost ulp(|x|) of
// relative accuracy (3e-5 at |x| ~ 300); e^(hi + lo) = e^hi (1 + lo) keeps it at ~1 ulp.
static inline real exp_dbl(double x) {
#ifdef DM_DOUBLE
    return exp(x);
#else
    float hi = (float)x;
    return dm_exp(hi) * (1.0f + (float)(x - hi));  // ops.h: vectorisable, ~1.4 ulp
#endif
}

// ================================================================================================
// Recurrent reference
// ================================================================================================
// Backward needs S_{t-1} and S_t at every step. Keeping all T states costs T*D*D per (b, h)
// (1 GB in double at B=8,T=512,H=8,D=64), and the recurrence cannot be run backwards stably
// (it would divide by exp(g)), so forward keeps a checkpoint every KDA_SEG tokens and backward
// recomputes one segment of states at a time.
#define KDA_SEG 16

// ws per (b, h): ck [nseg, D, D] state before each segment | st [SEG+1, D, D] segment states |
// dS [D, D] | ur [SEG, 2, D] (u_t, r_t of the segment) | du [D]
static size_t rec_per_bh(int T, int D) {
    size_t nseg = (size_t)(T + KDA_SEG - 1) / KDA_SEG, DD = (size_t)D * D;
    return nseg * DD + (KDA_SEG + 1) * DD + DD + 2 * (size_t)KDA_SEG * D + D;
}

size_t kda_recurrent_ws_size(int B, int T, int H, int D) {
    return (size_t)B * H * rec_per_bh(T, D);
}

// One token on one head, S [D, D] updated in place. u [D] receives u_t = beta (v - r), r [D]
// receives r_t = S'^T k (S' = decayed state); o [D] (may be NULL) receives S_t^T q.
static void rec_step(real *S, real *o, real *u, real *r, const real *q, const real *k,
                     const real *v, real beta, const real *g, int D) {
    for (int j = 0; j < D; j++) r[j] = 0;
    for (int i = 0; i < D; i++) {  // decay the row, then read it against k (one pass over S)
        real a = exp_r(g[i]), ki = k[i], *Si = S + (size_t)i * D;
        for (int j = 0; j < D; j++) {
            Si[j] *= a;
            r[j] += Si[j] * ki;
        }
    }
    for (int j = 0; j < D; j++) u[j] = beta * (v[j] - r[j]);
    if (o)
        for (int j = 0; j < D; j++) o[j] = 0;
    for (int i = 0; i < D; i++) {  // the rank-1 write, then the read-out with q
        real ki = k[i], qi = q ? q[i] : 0, *Si = S + (size_t)i * D;
        for (int j = 0; j < D; j++) Si[j] += ki * u[j];
        if (o)
            for (int j = 0; j < D; j++) o[j] += Si[j] * qi;
    }
}

void kda_recurrent_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                           const real *beta, const real *g, int B, int T, int H, int D) {
    size_t HD = (size_t)H * D, DD = (size_t)D * D;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t nseg = (size_t)(T + KDA_SEG - 1) / KDA_SEG;
        real *ck = ws + (size_t)bh * rec_per_bh(T, D);  // [nseg, D, D]
        real *S = ck + nseg * DD;                       // [D, D] running state (segment slot 0)
        real *ur = S + (KDA_SEG + 1) * DD + DD;         // [2, D] scratch u, r
        memset(S, 0, sizeof(real) * DD);
        for (int t = 0; t < T; t++) {
            size_t row = ((size_t)b * T + t) * HD + (size_t)h * D;  // into [B, T, H, D]
            if (t % KDA_SEG == 0) memcpy(ck + (size_t)(t / KDA_SEG) * DD, S, sizeof(real) * DD);
            rec_step(S, o + row, ur, ur + D, q + row, k + row, v + row,
                     beta[((size_t)b * T + t) * H + h], g + row, D);
        }
    }
}

void kda_recurrent_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg,
                            const real *dout, const real *q, const real *k, const real *v,
                            const real *beta, const real *g, real *ws, int B, int T, int H,
                            int D) {
    size_t HD = (size_t)H * D, DD = (size_t)D * D;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int nseg = (T + KDA_SEG - 1) / KDA_SEG;
        real *ck = ws + (size_t)bh * rec_per_bh(T, D);  // [nseg, D, D]
        real *st = ck + (size_t)nseg * DD;              // [SEG+1, D, D]; slot x = S_{t0+x-1}
        real *dS = st + (KDA_SEG + 1) * DD;             // [D, D] dLoss/dS_t
        real *ur = dS + DD;                             // [SEG, 2, D]
        real *du = ur + 2 * (size_t)KDA_SEG * D;        // [D]
        memset(dS, 0, sizeof(real) * DD);
        for (int seg = nseg - 1; seg >= 0; seg--) {
            int t0 = seg * KDA_SEG, n = T - t0 < KDA_SEG ? T - t0 : KDA_SEG;
            memcpy(st, ck + (size_t)seg * DD, sizeof(real) * DD);
            for (int x = 0; x < n; x++) {  // recompute the segment's states (same op order)
                size_t row = ((size_t)b * T + t0 + x) * HD + (size_t)h * D;
                memcpy(st + (x + 1) * DD, st + x * DD, sizeof(real) * DD);
                rec_step(st + (x + 1) * DD, NULL, ur + 2 * x * D, ur + (2 * x + 1) * D, NULL,
                         k + row, v + row, beta[((size_t)b * T + t0 + x) * H + h], g + row, D);
            }
            for (int x = n - 1; x >= 0; x--) {
                size_t row = ((size_t)b * T + t0 + x) * HD + (size_t)h * D;
                size_t bi = ((size_t)b * T + t0 + x) * H + h;
                const real *St = st + (x + 1) * DD, *Sp = st + x * DD;  // S_t, S_{t-1}
                const real *u = ur + 2 * x * D, *r = ur + (2 * x + 1) * D;
                const real *qt = q + row, *kt = k + row, *vt = v + row, *gt = g + row;
                const real *dot = dout + row;
                real bt = beta[bi];
                // o = S_t^T q and S_t = S' + k u^T: dS += q do^T; dq = S_t do; dk += dS u; du = dS^T k
                for (int j = 0; j < D; j++) du[j] = 0;
                for (int i = 0; i < D; i++) {
                    real *dSi = dS + (size_t)i * D, aq = 0, ak = 0, qi = qt[i], ki = kt[i];
                    const real *Si = St + (size_t)i * D;
                    for (int j = 0; j < D; j++) {
                        dSi[j] += qi * dot[j];
                        aq += Si[j] * dot[j];
                        ak += dSi[j] * u[j];
                        du[j] += ki * dSi[j];
                    }
                    dq[row + i] += aq;
                    dk[row + i] += ak;
                }
                // u = beta (v - r): dbeta, dv; dr = -beta du (kept in du)
                real db = 0;
                for (int j = 0; j < D; j++) {
                    db += du[j] * (vt[j] - r[j]);
                    dv[row + j] += bt * du[j];
                    du[j] *= -bt;
                }
                dbeta[bi] += db;
                // r = S'^T k, S' = Diag(a) S_{t-1}: dS' = dS + k dr^T; dk += S' dr;
                // dg_i = sum_j dS'_ij S'_ij; dS_{t-1} = Diag(a) dS'
                for (int i = 0; i < D; i++) {
                    real a = exp_r(gt[i]), ki = kt[i], ak = 0, ag = 0, *dSi = dS + (size_t)i * D;
                    const real *Spi = Sp + (size_t)i * D;
                    for (int j = 0; j < D; j++) {
                        real sp = a * Spi[j], dsp = dSi[j] + ki * du[j];
                        ak += sp * du[j];
                        ag += dsp * sp;
                        dSi[j] = a * dsp;
                    }
                    dk[row + i] += ak;
                    dg[row + i] += ag;
                }
            }
        }
    }
}

void kda_step(real *o, real *S, const real *q, const real *k, const real *v, const real *beta,
              const real *g, int H, int D) {
    // Same arithmetic as rec_step, but with o as the only scratch: r, then u, live in o until
    // the state is written; then o is overwritten with the read-out (one more pass over S).
    for (int h = 0; h < H; h++) {
        real *Sh = S + (size_t)h * D * D, *oh = o + (size_t)h * D;  // [D, D], [D]
        const real *qh = q + (size_t)h * D, *kh = k + (size_t)h * D, *vh = v + (size_t)h * D;
        const real *gh = g + (size_t)h * D;
        for (int j = 0; j < D; j++) oh[j] = 0;
        for (int i = 0; i < D; i++) {
            real a = exp_r(gh[i]), ki = kh[i], *Si = Sh + (size_t)i * D;
            for (int j = 0; j < D; j++) {
                Si[j] *= a;
                oh[j] += Si[j] * ki;
            }
        }
        for (int j = 0; j < D; j++) oh[j] = beta[h] * (vh[j] - oh[j]);
        for (int i = 0; i < D; i++) {
            real ki = kh[i], *Si = Sh + (size_t)i * D;
            for (int j = 0; j < D; j++) Si[j] += ki * oh[j];
        }
        for (int j = 0; j < D; j++) oh[j] = 0;
        for (int i = 0; i < D; i++) {
            real qi = qh[i], *Si = Sh + (size_t)i * D;
            for (int j = 0; j < D; j++) oh[j] += Si[j] * qi;
        }
    }
}

// ================================================================================================
// Small vector helpers (restrict lets the compiler vectorise the element-wise passes)
// ================================================================================================
static void axpy_r(real *restrict y, real a, const real *restrict x, int n) {
    for (int j = 0; j < n; j++) y[j] += a * x[j];
}
// y -= sum_j c[j * cs] X[rows[j]], j = 0..n-1 in that order, one fused multiply-add per term
// per element — the same operations, in the same order, as n calls axpy_r(y, -c[j * cs],
// X + rows[j] * D, D), so the results are identical; here y stays in registers across the
// terms (the substitutions below are chains of such updates of one row). rows[j] = r0 + j * rs.
static void rowcomb_sub(real *restrict y, const real *restrict c, int cs, const real *restrict X, int r0,
                        int rs, int n, int D) {
    if (n <= 0) return;
#if !defined(DM_DOUBLE) && defined(__AVX2__) && defined(__FMA__)
    if (D == 64) {
        __m256 y0 = _mm256_loadu_ps(y), y1 = _mm256_loadu_ps(y + 8), y2 = _mm256_loadu_ps(y + 16),
               y3 = _mm256_loadu_ps(y + 24), y4 = _mm256_loadu_ps(y + 32), y5 = _mm256_loadu_ps(y + 40),
               y6 = _mm256_loadu_ps(y + 48), y7 = _mm256_loadu_ps(y + 56);
        for (int j = 0; j < n; j++) {
            const float *x = X + (ptrdiff_t)(r0 + j * rs) * 64;
            __m256 a = _mm256_set1_ps(-c[(ptrdiff_t)j * cs]);
            y0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x), y0);
            y1 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 8), y1);
            y2 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 16), y2);
            y3 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 24), y3);
            y4 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 32), y4);
            y5 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 40), y5);
            y6 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 48), y6);
            y7 = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + 56), y7);
        }
        _mm256_storeu_ps(y, y0); _mm256_storeu_ps(y + 8, y1); _mm256_storeu_ps(y + 16, y2);
        _mm256_storeu_ps(y + 24, y3); _mm256_storeu_ps(y + 32, y4); _mm256_storeu_ps(y + 40, y5);
        _mm256_storeu_ps(y + 48, y6); _mm256_storeu_ps(y + 56, y7);
        return;
    }
#endif
    for (int j = 0; j < n; j++) axpy_r(y, -c[(ptrdiff_t)j * cs], X + (ptrdiff_t)(r0 + j * rs) * D, D);
}
static real dot_r(const real *restrict a, const real *restrict b, int n) {
    real s[8] = {0};  // 8 partial sums: vectorisable, and fixed order (deterministic)
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) s[u] += a[j + u] * b[j + u];
    for (; j < n; j++) s[0] += a[j] * b[j];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}
static void mul_r(real *restrict y, const real *restrict a, const real *restrict b, int n) {
    for (int j = 0; j < n; j++) y[j] = a[j] * b[j];
}

// ================================================================================================
// Chunked (WY/UT) form
// ================================================================================================
// Inside a chunk of L <= C tokens with S0 the state before it and Gam_t = sum_{s<=t} g_s
// (cumulative inside the chunk, per channel):
//   M[t,s] = sum_c k_tc k_sc e^(Gam_tc - Gam_sc)  (s < t),  P[t,s] = same with q_t  (s <= t)
//   W = V - KE S0,  U = (I + Diag(beta) M)^-1 Diag(beta) W      (KE = k * e^Gam, QE = q * e^Gam)
//   O = QE S0 + P U,  S_end = Diag(e^Gam_last) S0 + KD^T U      (KD = k * e^(Gam_last - Gam))
// Numerics: e^Gam alone underflows harmlessly, e^-Gam alone would overflow. Pairwise factors are
// split per sub-block i of KDA_BC tokens around the reference m_i (its middle token):
// e^(Gam_t - Gam_s) = F_t * e^(Gam_m_i - Gam_s), F_t = e^(Gam_t - Gam_m_i) in e^[-40, 40]
// (|g| <= 5), and for s in an earlier block j, e^(Gam_m_i - Gam_s) = Bm[i,j] * R_s with
// Bm[i,j] = e^(Gam_m_i - Gam_e_j) <= 1 and R_s = e^(Gam_e_j - Gam_s) in [e^-75, 1] (e_j: last
// token of block j). For g >= -5.5 every product is finite in fp32 (down to g = -11 only the
// masked-out upper entries can overflow, and those are overwritten); whatever underflows
// multiplies a true value below ~1e-28.
// Gradients w.r.t. Gam use that each product is y * e^(Gam_x - Gam_ref) with a reference that
// cancels in the pair (a constant for differentiation): dGam_x += dX * X on the t side, -= on
// the s side; only KD and e^Gam_last depend on Gam_last for real. dg = reverse cumsum of dGam.
//
// Per block i (rows a..e-1, n = e - a) the q and k sides are stacked so one gemm serves both:
// QK_i = [QF_i; KF_i] (2n rows), PM_i = QK_i Y_i^T = [P rows; M rows] (2n rows, columns 0..e-1).
#define KDA_BC 16

enum { CH_IF, CH_R, CH_QE, CH_KE, CH_KD, CH_Y, CH_H, CH_DU, CH_DKD, CH_DQE, CH_DX, CH_Z,
       CH_DKE, CH_DY, CH_DGAM, CH_N };

typedef struct {  // carved views of one (b, h)'s chunk workspace
    real *Sc;        // [nc, D, D] state before each chunk
    real *U, *W;     // [T, D] each: u rows, and W = V - KE S0 rows
    real *F;         // [T, D] F_t = e^(Gam_t - Gam_m) (kept so backward does not redo the exps)
    real *PM;        // [nc, nb, 2*BC, C] per block: its P rows, then its M rows
    real *cd[CH_N];  // [C, D] scratch each (see enum)
    real *QK;        // [nb, 2*BC, D] per block: QF = q F rows, then KF = k F rows
    real *X2;        // [2*BC, D] one block's stacked operands
    real *dPM;       // [2*BC, C] one block's dP rows, then dM rows
    real *dPd;       // [C] the diagonal of dP
    real *Em, *Lj;   // [nb, D] e^Gam_m_i, e^(Gam_last - Gam_e_i)
    real *Bm;        // [nb, nb, D] e^(Gam_m_i - Gam_e_j), j < i
    real *eL;        // [D] e^Gam_last
    real *dS, *dS0;  // [D, D] dLoss/d(state after / before the chunk)
    double *Gam;     // [C, D] cumulative log-decay, in double (see chunk_prep)
} ChunkWs;

// The workspace holds, per (b, h), only what forward keeps for backward (Sc, U, W, F, PM); the
// chunk-local views every pass rebuilds (cd[], QK, Gam, ... ~360 KB at C = D = 64) live in one
// per-thread scratch instead. Per (b, h) they were fresh memory for every head: at nano's 16
// heads that was 5.8 MB of cold lines a pass, where one thread's copy stays in L2 between heads.
static size_t chunk_per_bh(int T, int D, int C) {
    size_t nc = (size_t)(T + C - 1) / C, nb = (size_t)(C + KDA_BC - 1) / KDA_BC;
    size_t DD = (size_t)D * D, BCC = 2 * (size_t)KDA_BC * C;
    return nc * DD + 3 * (size_t)T * D + nc * nb * BCC;
}

static size_t chunk_scratch_size(int D, int C) {
    size_t nb = (size_t)(C + KDA_BC - 1) / KDA_BC;
    size_t CD = (size_t)C * D, DD = (size_t)D * D, BCC = 2 * (size_t)KDA_BC * C;
    return CH_N * CD + nb * 2 * KDA_BC * D + 2 * KDA_BC * D + BCC + C + (2 * nb + nb * nb + 1) * D +
           2 * DD + (CD + 1) * sizeof(double) / sizeof(real) + 1;
}

// A chunk longer than the sequence is the sequence: every size below is taken at min(C, T) (the
// workspace grew as C^2 per head whatever T was: kda_chunk=1024 at seq=31 asked for 27 GB, and
// nano at kda_chunk=1024 held twice its memory, for the same numbers: QA, session 29)
static int chunk_len(int C, int T) { return C < T ? C : (T > 0 ? T : 1); }

size_t kda_chunk_ws_size(int B, int T, int H, int D, int C) {
    C = chunk_len(C, T);
    return (size_t)B * H * chunk_per_bh(T, D, C);
}

// The calling thread's scratch, grown on demand and kept (no malloc per call); NULL when the
// memory is not there (the caller aborts: the arena itself was already allocated).
static real *chunk_scratch(size_t n) {
    static _Thread_local real *buf;
    static _Thread_local size_t cap;
    if (n > cap) {
        free(buf);
        buf = malloc(sizeof(real) * n);
        cap = buf ? n : 0;
    }
    return buf;
}

static ChunkWs chunk_carve(real *ws, int bh, int T, int D, int C) {
    size_t nc = (size_t)(T + C - 1) / C, nb = (size_t)(C + KDA_BC - 1) / KDA_BC;
    size_t CD = (size_t)C * D, DD = (size_t)D * D, BCC = 2 * (size_t)KDA_BC * C;
    real *p = ws + (size_t)bh * chunk_per_bh(T, D, C);
    ChunkWs w;
    w.Sc = p; p += nc * DD;
    w.U = p; p += (size_t)T * D;
    w.W = p; p += (size_t)T * D;
    w.F = p; p += (size_t)T * D;
    w.PM = p; p += nc * nb * BCC;
    p = chunk_scratch(chunk_scratch_size(D, C));
    if (!p) {
        fprintf(stderr, "%s:%d: cannot allocate the chunked KDA scratch (%zu reals)\n", __FILE__, __LINE__,
                chunk_scratch_size(D, C));
        abort();
    }
    for (int i = 0; i < CH_N; i++) { w.cd[i] = p; p += CD; }
    w.QK = p; p += nb * 2 * KDA_BC * D;
    w.X2 = p; p += 2 * KDA_BC * D;
    w.dPM = p; p += BCC;
    w.dPd = p; p += C;
    w.Em = p; p += nb * D;
    w.Lj = p; p += nb * D;
    w.Bm = p; p += nb * nb * D;
    w.eL = p; p += D;
    w.dS = p; p += DD;
    w.dS0 = p; p += DD;
    w.Gam = (double *)(((uintptr_t)p + sizeof(double) - 1) & ~(uintptr_t)(sizeof(double) - 1));
    return w;
}

static void cumsum_dbl(double *restrict G, const real *restrict g, size_t ld, int L, int D) {
    for (int c = 0; c < D; c++) G[c] = (double)g[c];
    for (int t = 1; t < L; t++)
        for (int c = 0; c < D; c++) G[t * D + c] = G[(t - 1) * D + c] + (double)g[t * ld + c];
}

// One row of the scaled operands: QF = q F, KF = k F, QE = QF Em, KE = KF Em, KD = k Lj R.
static void prep_row(real *restrict QF, real *restrict KF, real *restrict QE, real *restrict KE,
                     real *restrict KD, const real *restrict q, const real *restrict k,
                     const real *restrict F, const real *restrict R, const real *restrict Em,
                     const real *restrict Lj, int D) {
    for (int c = 0; c < D; c++) {
        QF[c] = q[c] * F[c];
        KF[c] = k[c] * F[c];
        QE[c] = QF[c] * Em[c];
        KE[c] = KF[c] * Em[c];
        KD[c] = k[c] * Lj[c] * R[c];
    }
}

// Decay factors of one chunk (L tokens, rows of q, k, g at stride ld) into w: F, iF = 1/F, R,
// Em, Lj, Bm, eL, and the operands QK (per block), QE, KE, KD.
// Gam is summed in double: factors e^(Gam_t - Gam_s) built from fp32 sums reaching -5*C would
// carry ulp(5*C) ~ 1e-5 of relative error even where t and s are neighbours (that showed as
// 1e-5 differences in dg against the recurrent form at C = 64).
// F [L, D] is computed when fresh (forward), else read (backward).
static void chunk_prep(ChunkWs *w, real *F, int fresh, const real *q, const real *k,
                       const real *g, size_t ld, int L, int D) {
    double *Gam = w->Gam;
    real *iF = w->cd[CH_IF], *R = w->cd[CH_R];
    int nb = (L + KDA_BC - 1) / KDA_BC;
    cumsum_dbl(Gam, g, ld, L, D);
    const double *Glast = Gam + (size_t)(L - 1) * D;
    for (int c = 0; c < D; c++) w->eL[c] = exp_dbl(Glast[c]);
    for (int i = 0; i < nb; i++) {
        int a = i * KDA_BC, n = L - a < KDA_BC ? L - a : KDA_BC, m = a + n / 2, e = a + n - 1;
        const double *Gm = Gam + (size_t)m * D, *Ge = Gam + (size_t)e * D;
        for (int c = 0; c < D; c++) {
            w->Em[i * D + c] = exp_dbl(Gm[c]);
            w->Lj[i * D + c] = exp_dbl(Glast[c] - Ge[c]);
        }
        if (fresh)
            for (int t = a; t <= e; t++)
                for (int c = 0; c < D; c++) F[t * D + c] = exp_dbl(Gam[t * D + c] - Gm[c]);
        for (int x = a * D; x < (e + 1) * D; x++) iF[x] = 1 / F[x];
        for (int t = a; t <= e; t++) mul_r(R + t * D, F + e * D, iF + t * D, D);
        for (int j = 0; j < i; j++) {
            const double *Gej = Gam + (size_t)(j * KDA_BC + KDA_BC - 1) * D;
            for (int c = 0; c < D; c++)
                w->Bm[((size_t)i * nb + j) * D + c] = exp_dbl(Gm[c] - Gej[c]);
        }
        real *QK = w->QK + (size_t)i * 2 * KDA_BC * D;
        for (int t = a; t <= e; t++)
            prep_row(QK + (t - a) * D, QK + (n + t - a) * D, w->cd[CH_QE] + t * D,
                     w->cd[CH_KE] + t * D, w->cd[CH_KD] + t * D, q + t * ld, k + t * ld,
                     F + t * D, R + t * D, w->Em + i * D, w->Lj + i * D, D);
    }
}

static void scale3_row(real *restrict Y, real *restrict hf, const real *restrict k,
                       const real *restrict b, const real *restrict r, int D) {
    for (int c = 0; c < D; c++) {
        real f = b[c] * r[c];
        if (hf) hf[c] = f;
        Y[c] = k[c] * f;
    }
}

// Y (rows 0..e-1) = k_s e^(Gam_m_i - Gam_s), the s side of block i; hf (if not NULL) the same
// without k.
static void chunk_Y(ChunkWs *w, real *Y, real *hf, const real *k, size_t ld, int i, int e, int L,
                    int D) {
    int nb = (L + KDA_BC - 1) / KDA_BC, a = i * KDA_BC;
    for (int s = 0; s < a; s++)
        scale3_row(Y + s * D, hf ? hf + s * D : NULL, k + s * ld,
                   w->Bm + ((size_t)i * nb + s / KDA_BC) * D, w->cd[CH_R] + s * D, D);
    for (int s = a; s < e; s++) {
        mul_r(Y + s * D, k + s * ld, w->cd[CH_IF] + s * D, D);
        if (hf) memcpy(hf + s * D, w->cd[CH_IF] + s * D, sizeof(real) * D);
    }
}

void kda_chunk_forward(real *o, real *ws, const real *q, const real *k, const real *v,
                       const real *beta, const real *g, int B, int T, int H, int D, int C) {
    C = chunk_len(C, T);
    size_t HD = (size_t)H * D, DD = (size_t)D * D;
    size_t PMc = (size_t)((C + KDA_BC - 1) / KDA_BC) * 2 * KDA_BC * C;  // PM per chunk
    int nc = (T + C - 1) / C;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        ChunkWs w = chunk_carve(ws, bh, T, D, C);
        memset(w.Sc, 0, sizeof(real) * DD);
        for (int ci = 0; ci < nc; ci++) {
            int t0 = ci * C, L = T - t0 < C ? T - t0 : C, nb = (L + KDA_BC - 1) / KDA_BC;
            size_t row0 = ((size_t)b * T + t0) * HD + (size_t)h * D;  // token t0 in [B, T, H, D]
            const real *qc = q + row0, *kc = k + row0, *vc = v + row0, *gc = g + row0;
            const real *bc = beta + ((size_t)b * T + t0) * H + h;  // stride H
            real *oc = o + row0;                                    // stride HD
            real *S = w.Sc + (size_t)ci * DD;                          // [D, D]
            real *U = w.U + (size_t)t0 * D, *W = w.W + (size_t)t0 * D;  // [L, D]
            real *Y = w.cd[CH_Y];                                       // [C, D]
            chunk_prep(&w, w.F + (size_t)t0 * D, 1, qc, kc, gc, HD, L, D);
            // W = V - KE S0;  O = QE S0 (P U is added block by block below)
            for (int t = 0; t < L; t++) memcpy(W + t * D, vc + t * HD, sizeof(real) * D);
            if (ci > 0) {
                gemm_rm(0, 0, L, D, D, -1, w.cd[CH_KE], D, S, D, 1, W, D);
                gemm_rm(0, 0, L, D, D, 1, w.cd[CH_QE], D, S, D, 0, oc, (int)HD);
            } else {  // S0 = 0 before the first chunk: W = V, O starts at 0
                for (int t = 0; t < L; t++) memset(oc + t * HD, 0, sizeof(real) * D);
            }
            for (int i = 0; i < nb; i++) {
                int a = i * KDA_BC, n = L - a < KDA_BC ? L - a : KDA_BC, e = a + n;
                real *P = w.PM + ci * PMc + (size_t)i * 2 * KDA_BC * C, *M = P + n * C;  // [n, C]
                chunk_Y(&w, Y, NULL, kc, HD, i, e, L, D);
                gemm_rm(0, 1, 2 * n, e, D, 1, w.QK + (size_t)i * 2 * KDA_BC * D, D, Y, D, 0, P, C);
                for (int x = 0; x < n; x++) {  // masks: overwrite (the upper may hold large values)
                    for (int s = a + x + 1; s < e; s++) P[x * C + s] = 0;
                    for (int s = a + x; s < e; s++) M[x * C + s] = 0;
                }
                // U rows of this block: W - M U over earlier blocks, then forward substitution
                memcpy(U + a * D, W + a * D, sizeof(real) * n * D);
                if (a > 0) gemm_rm(0, 0, n, D, a, -1, M, C, U, D, 1, U + a * D, D);
                for (int x = 0; x < n; x++) {
                    real *Ut = U + (a + x) * D;
                    rowcomb_sub(Ut, M + x * C + a, 1, U, a, 1, x, D);  // - sum_{s = a..a+x-1} M[x,s] U_s
                    for (int j = 0; j < D; j++) Ut[j] *= bc[(size_t)(a + x) * H];
                }
                gemm_rm(0, 0, n, D, e, 1, P, C, U, D, 1, oc + a * HD, (int)HD);
            }
            // S_next = Diag(eL) S0 + KD^T U (the state after the last chunk is never read)
            if (ci + 1 < nc) {
                real *Sn = S + DD;
                for (int i = 0; i < D; i++)
                    for (int j = 0; j < D; j++) Sn[i * D + j] = w.eL[i] * S[i * D + j];
                gemm_rm(1, 0, D, D, L, 1, w.cd[CH_KD], D, U, D, 1, Sn, D);
            }
        }
    }
}

// Gradient rows of the pairwise factors of one block (see the numerics note above).
// t side: QF_t = q_t F_t, KF_t = k_t F_t, with dXq, dXk their gradients; dpd is dP[t,t].
static void tside_row(real *restrict dq, real *restrict dk, real *restrict dG,
                      const real *restrict dXq, const real *restrict dXk, const real *restrict F,
                      const real *restrict QF, const real *restrict KF, const real *restrict q,
                      const real *restrict k, real dpd, int D) {
    for (int c = 0; c < D; c++) {
        dq[c] += dXq[c] * F[c] + dpd * k[c];
        dk[c] += dXk[c] * F[c] + dpd * q[c];
        dG[c] += dXq[c] * QF[c] + dXk[c] * KF[c];
    }
}
// s side: Y_s = k_s hf_s with hf_s = e^(Gam_m - Gam_s).
static void sside_row(real *restrict dk, real *restrict dG, const real *restrict dY,
                      const real *restrict hf, const real *restrict Y, int D) {
    for (int c = 0; c < D; c++) {
        dk[c] += dY[c] * hf[c];
        dG[c] -= dY[c] * Y[c];
    }
}
// QE = q Em F, KE = k Em F, KD = k Lj R (dGl: dGam of the last token; NULL on that token,
// whose KD = k has no decay, so no +x/-x pair is made there).
static void eterm_row(real *restrict dq, real *restrict dk, real *restrict dG, real *restrict dGl,
                      const real *restrict dQE, const real *restrict QE,
                      const real *restrict dKE, const real *restrict KE,
                      const real *restrict dKD, const real *restrict KD, const real *restrict F,
                      const real *restrict Em, const real *restrict Lj, const real *restrict R,
                      int D) {
    for (int c = 0; c < D; c++) {
        real E = Em[c] * F[c];
        dq[c] += dQE[c] * E;
        dk[c] += dKE[c] * E + dKD[c] * Lj[c] * R[c];
        dG[c] += dQE[c] * QE[c] + dKE[c] * KE[c];
    }
    if (dGl)
        for (int c = 0; c < D; c++) {
            real x = dKD[c] * KD[c];
            dG[c] -= x;
            dGl[c] += x;
        }
}
// Gam is the cumulative sum of g inside the chunk: dg_t += sum_{t' >= t} dGam_t'.
static void cumsum_rev(real *restrict dg, size_t ld, real *restrict dG, int L, int D) {
    for (int t = L - 2; t >= 0; t--)
        for (int c = 0; c < D; c++) dG[t * D + c] += dG[(t + 1) * D + c];
    for (int t = 0; t < L; t++)
        for (int c = 0; c < D; c++) dg[t * ld + c] += dG[t * D + c];
}

void kda_chunk_backward(real *dq, real *dk, real *dv, real *dbeta, real *dg, const real *dout,
                        const real *q, const real *k, const real *v, const real *beta,
                        const real *g, real *ws, int B, int T, int H, int D, int C) {
    (void)v;  // v enters backward only through W, which forward kept
    C = chunk_len(C, T);
    size_t HD = (size_t)H * D, DD = (size_t)D * D;
    size_t PMc = (size_t)((C + KDA_BC - 1) / KDA_BC) * 2 * KDA_BC * C;
    int nc = (T + C - 1) / C;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        ChunkWs w = chunk_carve(ws, bh, T, D, C);
        real *dS = w.dS, *dS0 = w.dS0;  // [D, D]
        memset(dS, 0, sizeof(real) * DD);
        for (int ci = nc - 1; ci >= 0; ci--) {
            int t0 = ci * C, L = T - t0 < C ? T - t0 : C, nb = (L + KDA_BC - 1) / KDA_BC;
            size_t row0 = ((size_t)b * T + t0) * HD + (size_t)h * D;  // all rows at stride HD
            const real *qc = q + row0, *kc = k + row0, *gc = g + row0, *dO = dout + row0;
            size_t b0 = ((size_t)b * T + t0) * H + h;  // beta index of token t0; stride H
            real *dqc = dq + row0, *dkc = dk + row0, *dvc = dv + row0, *dgc = dg + row0;
            const real *S0 = w.Sc + (size_t)ci * DD;                          // [D, D]
            const real *U = w.U + (size_t)t0 * D, *W = w.W + (size_t)t0 * D;  // [L, D]
            const real *F = w.F + (size_t)t0 * D;  // [L, D]
            real *QE = w.cd[CH_QE], *KE = w.cd[CH_KE], *KD = w.cd[CH_KD];
            real *Y = w.cd[CH_Y], *hf = w.cd[CH_H], *dU = w.cd[CH_DU], *dKD = w.cd[CH_DKD];
            real *dQE = w.cd[CH_DQE], *dX = w.cd[CH_DX], *Z = w.cd[CH_Z], *dKE = w.cd[CH_DKE];
            real *dY = w.cd[CH_DY], *dGam = w.cd[CH_DGAM], *X2 = w.X2, *dPM = w.dPM;
            chunk_prep(&w, w.F + (size_t)t0 * D, 0, qc, kc, gc, HD, L, D);
            memset(dGam, 0, sizeof(real) * L * D);
            // S_end = Diag(eL) S0 + KD^T U and O = QE S0 + P U:
            // dU = KD dS + P^T dO; dKD = U dS^T; dQE = dO S0^T; dS0 = Diag(eL) dS + QE^T dO
            // The last chunk has dS = 0 (nothing reads the final state) and the first has S0 = 0:
            // the products with them are exactly zero and skipped, and the first chunk needs no dS0.
            int first = ci == 0, last = ci == nc - 1;
            if (last) {
                memset(dU, 0, sizeof(real) * L * D);
                memset(dKD, 0, sizeof(real) * L * D);
            } else {
                gemm_rm(0, 0, L, D, D, 1, KD, D, dS, D, 0, dU, D);
                gemm_rm(0, 1, L, D, D, 1, U, D, dS, D, 0, dKD, D);
            }
            for (int i = 0; i < nb; i++) {
                int a = i * KDA_BC, n = L - a < KDA_BC ? L - a : KDA_BC, e = a + n;
                const real *P = w.PM + ci * PMc + (size_t)i * 2 * KDA_BC * C;
                gemm_rm(1, 0, e, D, n, 1, P, C, dO + a * HD, (int)HD, 1, dU, D);
            }
            if (first) {
                memset(dQE, 0, sizeof(real) * L * D);
            } else {
                gemm_rm(0, 1, L, D, D, 1, dO, (int)HD, S0, D, 0, dQE, D);
                for (int i = 0; i < D; i++) {
                    if (!last) dGam[(L - 1) * D + i] += w.eL[i] * dot_r(dS + i * D, S0 + i * D, D);
                    for (int j = 0; j < D; j++) dS0[i * D + j] = w.eL[i] * dS[i * D + j];
                }
                gemm_rm(1, 0, D, D, L, 1, QE, D, dO, (int)HD, 1, dS0, D);
            }
            // (I + Diag(beta) M) U = Diag(beta) W: solve (I + Diag(beta) M)^T dX = dU from the
            // last row up. Z = Diag(beta) dX is dW; once a block's Z is final, its rows push
            // their M-terms into all earlier rows with one gemm.
            memcpy(dX, dU, sizeof(real) * L * D);
            for (int i = nb - 1; i >= 0; i--) {
                int a = i * KDA_BC, n = L - a < KDA_BC ? L - a : KDA_BC;
                const real *M = w.PM + ci * PMc + (size_t)i * 2 * KDA_BC * C + n * C;  // [n, C]
                // row a+x is final once the rows after it in the block have pushed their terms:
                // pull them, in the order they would have been pushed (x' = n-1 down to x+1)
                for (int x = n - 1; x >= 0; x--) {
                    real *Zt = Z + (a + x) * D, *dXt = dX + (a + x) * D;
                    rowcomb_sub(dXt, M + (n - 1) * C + a + x, -C, Z, a + n - 1, -1, n - 1 - x, D);
                    for (int j = 0; j < D; j++) Zt[j] = beta[b0 + (size_t)(a + x) * H] * dXt[j];
                }
                if (a > 0) gemm_rm(1, 0, a, D, n, -1, M, C, Z + a * D, D, 1, dX, D);
            }
            for (int i = 0; i < nb; i++) {
                int a = i * KDA_BC, n = L - a < KDA_BC ? L - a : KDA_BC, e = a + n;
                const real *P = w.PM + ci * PMc + (size_t)i * 2 * KDA_BC * C, *M = P + n * C;
                real *dP = dPM, *dM = dPM + n * C;  // [n, C] each
                // [dP; G] = [dO; dX] U^T for this block's rows; dP = dO U^T (s <= t) and with
                // dA = -G: dbeta_t += dX_t . W_t - sum_s G[t,s] M[t,s],  dM = -Diag(beta) G
                for (int x = 0; x < n; x++) memcpy(X2 + x * D, dO + (a + x) * HD, sizeof(real) * D);
                memcpy(X2 + n * D, dX + a * D, sizeof(real) * n * D);
                gemm_rm(0, 1, 2 * n, e, D, 1, X2, D, U, D, 0, dPM, C);
                for (int x = 0; x < n; x++) {
                    int t = a + x;
                    real bt = beta[b0 + (size_t)t * H], db = dot_r(dX + t * D, W + t * D, D);
                    for (int s = 0; s < t; s++) {
                        db -= dM[x * C + s] * M[x * C + s];
                        dM[x * C + s] *= -bt;
                    }
                    for (int s = t; s < e; s++) dM[x * C + s] = 0;
                    for (int s = t + 1; s < e; s++) dP[x * C + s] = 0;
                    dbeta[b0 + (size_t)t * H] += db;
                    // P[t,t] = q_t . k_t has no decay: keep its term out of the gemms below (it
                    // goes to dq, dk directly) so dGam does not get a +x at t and a -x at s = t
                    // that cancel only up to round-off, which the cumsum would then spread over
                    // the chunk (that dominated dg under strong decay, where dg itself is small).
                    w.dPd[t] = dP[x * C + t];
                    dP[x * C + t] = 0;
                }
                // P = QF Y^T, M = KF Y^T: [dXq; dXk] = [dP; dM] Y;  dY = [dP; dM]^T [QF; KF]
                const real *QK = w.QK + (size_t)i * 2 * KDA_BC * D;
                chunk_Y(&w, Y, hf, kc, HD, i, e, L, D);
                gemm_rm(0, 0, 2 * n, D, e, 1, dPM, C, Y, D, 0, X2, D);
                gemm_rm(1, 0, e, D, 2 * n, 1, dPM, C, QK, D, 0, dY, D);
                for (int x = 0; x < n; x++) {
                    int t = a + x;
                    tside_row(dqc + t * HD, dkc + t * HD, dGam + t * D, X2 + x * D,
                              X2 + (n + x) * D, F + t * D, QK + x * D, QK + (n + x) * D,
                              qc + t * HD, kc + t * HD, w.dPd[t], D);
                }
                for (int s = 0; s < e; s++)
                    sside_row(dkc + s * HD, dGam + s * D, dY + s * D, hf + s * D, Y + s * D, D);
            }
            // W = V - KE S0: dv += Z; dKE = -Z S0^T; dS0 -= KE^T Z
            for (int t = 0; t < L; t++) axpy_r(dvc + t * HD, 1, Z + t * D, D);
            if (first) {
                memset(dKE, 0, sizeof(real) * L * D);
            } else {
                gemm_rm(0, 1, L, D, D, -1, Z, D, S0, D, 0, dKE, D);
                gemm_rm(1, 0, D, D, L, -1, KE, D, Z, D, 1, dS0, D);
            }
            for (int t = 0; t < L; t++) {
                int i = t / KDA_BC;
                eterm_row(dqc + t * HD, dkc + t * HD, dGam + t * D,
                          t < L - 1 ? dGam + (L - 1) * D : NULL, dQE + t * D, QE + t * D,
                          dKE + t * D, KE + t * D, dKD + t * D, KD + t * D, F + t * D,
                          w.Em + i * D, w.Lj + i * D, w.cd[CH_R] + t * D, D);
            }
            cumsum_rev(dgc, HD, dGam, L, D);
            real *tmp = dS; dS = dS0; dS0 = tmp;
        }
    }
}
