// optim_cuda.cu — the optimizer ops of the Backend table (kernels/backend.h, "optimizer ops";
// formulas and the OptStatus contract in kernels/cpu/optim_ops.h) over DEVICE pointers, float
// build only.
//
// The step never waits for the host: opt_decide runs as a one-thread kernel that writes the
// decision (skip, clip factor, t, retraction cadence, nan_limit halt) into the device
// OptStatus, and every later kernel reads it there (skip => it returns before writing
// anything). The loss and every scalar (lr, lr_muon, wd, betas, eps, momentum, clip) are READ
// ON THE DEVICE from the loss double and the StepHyper the engine uploads before each step;
// host arguments are only sizes, flags, pointers and the static segment table. So the sequence
// is captured into the step's CUDA graph as is and each replay uses that step's values
// (engine/step.c, graph_cuda.cu).
//
// Determinism (SPEC §7): no atomics. The gradient norm is summed per fixed 65536-element chunk
// by a fixed block tree (block_sum_d), then the chunks of each segment in order by one thread;
// the lazy-Adam rows are de-duplicated by a stable radix sort of (table, row) keys, the first
// item of each run updating its row — every row has exactly one writer; Muon's and the
// retraction's norms are a fixed grid of block partials per matrix, then one fixed tree. Results are a pure function of the
// inputs (bit-identical run to run), close to — not bit-identical with — the CPU's (FMA
// contraction, cuBLAS summation order, bf16 Newton–Schulz products in the default precision).
#include "cuda_common.cuh"
#define OPT_HD __device__
#include "../cpu/opt_decide.h"
#include <math.h>
#include <string.h>

#ifndef DM_DOUBLE

#define MUON_EPS 1e-7
#define OPT_NT 256  // threads per block of the reductions (power of two for block_sum_d)

static void opt_fail(const char *what) {
    fprintf(stderr, "cuda optimizer: %s\n", what);
    exit(1);
}

// ================================================================================================
// per-segment sum of squares + non-finite flags
// ================================================================================================
// The segment table by value (a kernel parameter: nothing to upload, graph-capturable).
// chunk0[i] = index of segment i's first chunk; chunk0[nseg] = total chunks.
struct SegTable {
    size_t off[OPT_MAX_SEGS], n[OPT_MAX_SEGS];
    int chunk0[OPT_MAX_SEGS + 1];
    int nseg;
};

// one block per chunk: part[b] = sum of squares (double), badp[b] = any non-finite
__global__ void sumsq_chunks_kernel(double *part, int32_t *badp, const float *x, SegTable tab) {
    __shared__ double sh[OPT_NT];
    int b = blockIdx.x, i = 0;
    while (i + 1 < tab.nseg && tab.chunk0[i + 1] <= b) i++;  // <= 64 segments: a scan is fine
    size_t lo = (size_t)(b - tab.chunk0[i]) * OPT_SUMSQ_CHUNK;
    size_t hi = lo + OPT_SUMSQ_CHUNK < tab.n[i] ? lo + OPT_SUMSQ_CHUNK : tab.n[i];
    const float *g = x + tab.off[i];
    double s = 0;
    int bad = 0;
    for (size_t j = lo + threadIdx.x; j < hi; j += OPT_NT) {
        float v = g[j];
        s += (double)v * v;
        bad |= !isfinite(v);
    }
    double tot = block_sum_d(s, sh);
    int anybad = __syncthreads_or(bad);
    if (threadIdx.x == 0) { part[b] = tot; badp[b] = anybad; }
}
// one thread per segment: its chunks in order
__global__ void sumsq_combine_kernel(double *ss, int32_t *bad, const double *part, const int32_t *badp,
                                     SegTable tab) {
    int i = threadIdx.x;
    if (i >= tab.nseg) return;
    double s = 0;
    int b = 0;
    for (int c = tab.chunk0[i]; c < tab.chunk0[i + 1]; c++) { s += part[c]; b |= badp[c]; }
    ss[i] = s;
    bad[i] = b;
}

void cuda_opt_sumsq(double *ss, int32_t *bad, const real *x, const OptSeg *segs, int nseg) {
    if (nseg <= 0) return;
    if (nseg > OPT_MAX_SEGS) opt_fail("opt_sumsq: more than OPT_MAX_SEGS segments");
    SegTable tab;
    memset(&tab, 0, sizeof tab);
    tab.nseg = nseg;
    int nch = 0;
    for (int i = 0; i < nseg; i++) {  // host arithmetic on the static table, no device access
        tab.off[i] = segs[i].off;
        tab.n[i] = segs[i].n;
        tab.chunk0[i] = nch;
        nch += (int)((segs[i].n + OPT_SUMSQ_CHUNK - 1) / OPT_SUMSQ_CHUNK);
    }
    tab.chunk0[nseg] = nch;
    double *part = (double *)dm_scratch(SCR_MISC, (sizeof(double) + sizeof(int32_t)) * (size_t)(nch ? nch : 1));
    int32_t *badp = (int32_t *)(part + (nch ? nch : 1));
    if (nch > 0) {
        sumsq_chunks_kernel<<<nch, OPT_NT, 0, dm_stream>>>(part, badp, x, tab);
        cudaLaunchCheck();
    }
    sumsq_combine_kernel<<<1, OPT_MAX_SEGS, 0, dm_stream>>>(ss, bad, part, badp, tab);
    cudaLaunchCheck();
}

// ================================================================================================
// the decision (one thread: a handful of double operations, the CPU's code line for line)
// ================================================================================================
__global__ void decide_kernel(OptStatus *st, const double *ss, const int32_t *bad, int nseg, const double *loss_p,
                              const StepHyper *hp) {
    opt_decide_status(st, ss, bad, nseg, loss_p, hp);  // kernels/cpu/opt_decide.h, the CPU's code
}
void cuda_opt_decide(OptStatus *st, const double *ss, const int32_t *bad, int nseg, const double *loss,
                     const StepHyper *hp) {
    decide_kernel<<<1, 1, 0, dm_stream>>>(st, ss, bad, nseg, loss, hp);
    cudaLaunchCheck();
}

// ================================================================================================
// clip, AdamW
// ================================================================================================
__global__ void clip_kernel(float *g, size_t n, const OptStatus *st) {
    if (st->skip || !st->clipped) return;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] *= (float)st->scale;
}
void cuda_opt_clip(real *g, size_t n, const OptStatus *st) {
    if (n == 0) return;
    clip_kernel<<<ceil_div((long long)n, 256), 256, 0, dm_stream>>>(g, n, st);
    cudaLaunchCheck();
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, int decay,
                             const StepHyper *hp, const OptStatus *st) {
    if (st->skip) return;  // uniform over the grid
    __shared__ float bc[2];
    if (threadIdx.x == 0) {  // the bias corrections once per block, from the device step count
        double t = (double)st->t;
        bc[0] = (float)(1.0 - pow((double)(float)hp->beta1, t));  // (the betas the moments use: optim_ops.c)
        bc[1] = (float)(1.0 - pow((double)(float)hp->beta2, t));
    }
    __syncthreads();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float b1 = (float)hp->beta1, b2 = (float)hp->beta2, eps = (float)hp->eps, lr = (float)hp->lr;
    float wd = (float)(decay ? hp->wd : 0.0);
    float gi = g[i];
    float mi = b1 * m[i] + (1 - b1) * gi;
    float vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i];
    p[i] = pi - lr * ((mi / bc[0]) / (sqrtf(vi / bc[1]) + eps) + wd * pi);
}
void cuda_opt_adamw(real *p, const real *g, real *m, real *v, size_t n, int decay, const StepHyper *hp,
                    const OptStatus *st) {
    if (n == 0) return;
    adamw_kernel<<<ceil_div((long long)n, 256), 256, 0, dm_stream>>>(p, g, m, v, n, decay, hp, st);
    cudaLaunchCheck();
}

// ================================================================================================
// lazy Adam on the table rows the batch read
// ================================================================================================
// ws: keys [2 n] uint64 (in, out), then vals [2 n] int (in, out), n = O*N
// keys in [0, O R]: the radix passes cover that many bits
static int rows_key_bits(int O, int64_t R) {
    uint64_t sentinel = (uint64_t)O * (uint64_t)R;
    int bits = 1;
    while (bits < 64 && sentinel >= (1ULL << bits)) bits++;
    return bits;
}
// ws: keys in, keys out [n] | values in, values out [n] | the sort's own storage (16-aligned),
// n = O N: the whole update allocates nothing (it runs past the point of no return, guard.h)
size_t cuda_opt_adam_rows_ws_size(int O, int N, int64_t R) {
    size_t n = (size_t)O * (size_t)N;
    return n * (2 * sizeof(uint64_t) + 2 * sizeof(int)) + 16 + dm_sort_pairs_tmp((int)n, rows_key_bits(O, R));
}
// item a = q*N + i -> key q*R + rows[a]; a row outside [0, R) gets the sentinel O*R (sorted last)
__global__ void rows_keys_kernel(uint64_t *keys, int *vals, const int32_t *rows, int O, int N, int64_t R) {
    size_t a = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= (size_t)O * N) return;
    int32_t r = rows[a];
    keys[a] = r >= 0 && r < R ? (uint64_t)(a / N) * (uint64_t)R + (uint64_t)r : (uint64_t)O * (uint64_t)R;
    vals[a] = (int)a;
}
// one thread per sorted item; the first item of each run of equal keys updates that row
__global__ void adam_rows_kernel(float *p, const float *g, float *m, float *v, int64_t *row_steps,
                                 const uint64_t *keys, int n, uint64_t sentinel, int D, const StepHyper *hp,
                                 const OptStatus *st) {
    if (st->skip) return;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint64_t k = keys[i];
    if (k >= sentinel || (i > 0 && keys[i - 1] == k)) return;
    int64_t cnt = ++row_steps[k];  // this thread is the row's only writer
    float b1 = (float)hp->beta1, b2 = (float)hp->beta2, eps = (float)hp->eps, lr = (float)hp->lr;
    float bc1 = (float)(1.0 - pow((double)b1, (double)cnt)), bc2 = (float)(1.0 - pow((double)b2, (double)cnt));
    size_t off = (size_t)k * D;
    for (int j = 0; j < D; j++) {
        float gi = g[off + j];
        float mj = b1 * m[off + j] + (1 - b1) * gi;
        float vj = b2 * v[off + j] + (1 - b2) * gi * gi;
        m[off + j] = mj;
        v[off + j] = vj;
        p[off + j] -= lr * ((mj / bc1) / (sqrtf(vj / bc2) + eps));
    }
}
void cuda_opt_adam_rows(real *p, const real *g, real *m, real *v, int64_t *row_steps,
                        const int32_t *rows, int O, int N, int64_t R, int D, void *ws, const StepHyper *hp,
                        const OptStatus *st) {
    int n = O * N;  // <= 2^31 - 2^26 (shape_limits.h): cub's int count, int item ids
    if (n <= 0 || D <= 0) return;
    uint64_t *kin = (uint64_t *)ws, *kout = kin + n;
    int *vin = (int *)(kout + n), *vout = vin + n;
    rows_keys_kernel<<<ceil_div(n, 256), 256, 0, dm_stream>>>(kin, vin, rows, O, N, R);
    cudaLaunchCheck();
    uint64_t sentinel = (uint64_t)O * (uint64_t)R;
    void *tmp = (void *)(((size_t)(vout + n) + 15) & ~(size_t)15);
    dm_sort_pairs_ws(kin, kout, vin, vout, n, rows_key_bits(O, R), tmp);
    adam_rows_kernel<<<ceil_div(n, 128), 128, 0, dm_stream>>>(p, g, m, v, row_steps, kout, n, sentinel, D, hp, st);
    cudaLaunchCheck();
}

// ================================================================================================
// Muon: momentum, Frobenius normalisation, Newton–Schulz through cuBLAS, colrow, apply
// ================================================================================================
// The n_mats matrices of a tensor (the experts' factors: [E, rows, cols]) are orthogonalised
// TOGETHER: every launch covers all of them (element-wise kernels over the whole tensor, the
// per-matrix norms and polynomial with the matrix on gridDim.y, the products as strided-batched
// cuBLAS calls), so a tensor costs the launches of one matrix — at the base preset the 32 expert
// matrices would otherwise be ~1 600 launches of small kernels per step. Each matrix's numbers are
// the same sums as when it is alone (the batch only shares launches).
// scratch: U [n_mats, rows, cols] | Y [n_mats, rows, cols] | A [n_mats, s, s] | Bm [n_mats, s, s] |
//          inv [n_mats] floats | partial sums [n_mats, DM_RED_MAX_BLOCKS] doubles (8-aligned) |
//          the bf16 copies of X, A and Bm (16-aligned each; ns_bf16_room)
static size_t r8(size_t n) { return (n + 7) & ~(size_t)7; }
size_t cuda_opt_muon_scratch_size(int n_mats, int rows, int cols) {
    size_t s = (size_t)(rows < cols ? rows : cols), E = (size_t)(n_mats > 0 ? n_mats : 1), n = (size_t)rows * cols;
    size_t ws = (sizeof(__nv_bfloat16) * (r8(E * n) + 2 * r8(E * s * s)) + sizeof(float) - 1) / sizeof(float);
    return E * (2 * n + 2 * s * s) + E + 2 * E * DM_RED_MAX_BLOCKS + 64 + ws + 4;
}

__global__ void muon_momentum_kernel(float *U, float *buf, const float *g, size_t n, const StepHyper *hp,
                                     const OptStatus *st) {
    if (st->skip) return;  // buf untouched; U is scratch (the apply skips too)
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mu = (float)hp->muon_momentum;
    float b = mu * buf[i] + g[i];
    buf[i] = b;
    U[i] = g[i] + mu * b;
}
// Per matrix e = blockIdx.y of n elements each: part[e][blockIdx.x] = this block's share of
// sum X_e[i]^2 in double (a fixed grid: nb blocks per matrix, a function of n only), then
// inv[e] = 1 / (||X_e||_F + eps) from the nb partials over a fixed tree.
__global__ void sumsq_part_batched_kernel(double *part, const float *X, size_t n) {
    __shared__ double sh[256];
    const float *x = X + (size_t)blockIdx.y * n;
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t)gridDim.x * 256) s += (double)x[i] * x[i];
    double t = block_sum_d(s, sh);
    if (threadIdx.x == 0) part[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = t;
}
__global__ void frob_inv_batched_kernel(float *inv, const double *part, int nb) {
    __shared__ double sh[256];
    const double *p = part + (size_t)blockIdx.x * nb;
    double s = 0;
    for (int i = threadIdx.x; i < nb; i += 256) s += p[i];
    double ss = block_sum_d(s, sh);
    if (threadIdx.x == 0) inv[blockIdx.x] = (float)(1.0 / (sqrt(ss) + MUON_EPS));
}
// X [E, n]: X_e *= s[e]
__global__ void scale_batched_kernel(float *X, const float *s, size_t n, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) X[i] *= s[i / n];
}
// M += b A (+ a I when a != 0), every one of the [count, s, s] matrices; Mb (when not NULL) gets
// M's bf16 copy, the operand of the next product, packed here rather than by a launch of its own
__global__ void poly_kernel(float *M, const float *A, int s, float a, float b, size_t count, __nv_bfloat16 *Mb) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t ss = (size_t)s * s;
    if (i >= ss * count) return;
    size_t l = i % ss;
    float v = M[i] + b * A[i];
    if (a != 0 && l / s == l % s) v += a;
    M[i] = v;
    if (Mb) Mb[i] = __float2bfloat16_rn(v);
}
// Y = a X, and Xb = X in bf16 when Xb is not NULL (the iterate's one packing per iteration)
__global__ void ns_start_kernel(float *Y, __nv_bfloat16 *Xb, const float *X, float a, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = X[i];
    Y[i] = a * x;
    if (Xb) Xb[i] = __float2bfloat16_rn(x);
}
__global__ void pack_bf16_kernel(__nv_bfloat16 *Mb, const float *M, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) Mb[i] = __float2bfloat16_rn(M[i]);
}
// colrow: block per (column, matrix), then per (row, matrix): RMS in double over a fixed tree,
// scaled in place
__global__ void col_normalize_kernel(float *U, int rows, int cols) {
    __shared__ double sh[OPT_NT];
    int j = blockIdx.x;
    float *Ue = U + (size_t)blockIdx.y * rows * cols;
    double s = 0;
    for (int i = threadIdx.x; i < rows; i += OPT_NT) { double u = Ue[(size_t)i * cols + j]; s += u * u; }
    double ss = block_sum_d(s, sh);
    float inv = (float)(1.0 / (sqrt(ss / rows) + MUON_EPS));
    for (int i = threadIdx.x; i < rows; i += OPT_NT) Ue[(size_t)i * cols + j] *= inv;
}
__global__ void row_normalize_kernel(float *U, int rows, int cols) {
    __shared__ double sh[OPT_NT];
    float *r = U + ((size_t)blockIdx.y * rows + blockIdx.x) * cols;  // [cols]
    double s = 0;
    for (int j = threadIdx.x; j < cols; j += OPT_NT) s += (double)r[j] * r[j];
    double ss = block_sum_d(s, sh);
    float inv = (float)(1.0 / (sqrt(ss / cols) + MUON_EPS));
    for (int j = threadIdx.x; j < cols; j += OPT_NT) r[j] *= inv;
}
// lr = hp->lr_muon: decay = 1 - lr wd, step = lr * scale, rounded to float once (the CPU's
// expressions); scale = 0.2 sqrt(max(rows, cols)), or 0.2 under colrow (a shape: by value)
__global__ void muon_apply_kernel(float *p, const float *U, size_t n, double scale, const StepHyper *hp,
                                  const OptStatus *st) {
    if (st->skip) return;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    double lr = hp->lr_muon;
    float decay = (float)(1.0 - lr * hp->wd), step = (float)(lr * scale);
    if (i < n) p[i] = p[i] * decay - step * U[i];
}

// G [E, rows, cols] (device) -> NS5 of each G_e / (||G_e||_F + eps); returns the buffer holding
// the result (G or Y: the iterate ping-pongs, no copy). One iteration, X -> a X + (b A + c A A) X
// with A = X X^T (X^T X when tall): in bf16 mode (as Muon is usually run: bf16 operands, fp32
// accumulation) each operand is packed ONCE — X with Y = a X (ns_start), A after its product, Bm
// inside the polynomial — and the products run on the packed copies (dm_gemm_bf16): 6 launches
// an iteration instead of 8, the same bf16 values and cuBLAS calls as packing per product.
// precision=fp32 runs fp32 products on X, A, Bm directly. The bf16 copies live in ws, the
// optimizer's own workspace: the update runs after the point of no return (kernels/guard.h),
// where nothing may allocate.
static float *ns5(float *G, float *Y, float *A, float *Bm, float *inv, double *part, void *ws, int E, int rows,
                  int cols) {
    const float a = 3.4445f, b = -4.7750f, c = 2.0315f;
    size_t n = (size_t)rows * cols, tot = n * E;
    int tall = rows > cols, s = tall ? cols : rows;
    long long ss = (long long)s * s;
    int nb = ceil_div((long long)n, 256 * 8);  // >= 8 elements per thread, at most DM_RED_MAX_BLOCKS
    if (nb > DM_RED_MAX_BLOCKS) nb = DM_RED_MAX_BLOCKS;
    sumsq_part_batched_kernel<<<dim3(nb, E), 256, 0, dm_stream>>>(part, G, n);
    cudaLaunchCheck();
    frob_inv_batched_kernel<<<E, 256, 0, dm_stream>>>(inv, part, nb);
    cudaLaunchCheck();
    scale_batched_kernel<<<ceil_div((long long)tot, 256), 256, 0, dm_stream>>>(G, inv, n, tot);
    cudaLaunchCheck();
    int lowp = !dm_fp32;
    __nv_bfloat16 *Xb = NULL, *Ab = NULL, *Bmb = NULL;  // bf16 copies [E, rows, cols], [E, s, s] x 2
    if (lowp) {
        Xb = (__nv_bfloat16 *)ws;
        Ab = Xb + r8(tot);
        Bmb = Ab + r8((size_t)ss * E);
    }
    float *X = G;
    for (int it = 0; it < 5; it++) {
        ns_start_kernel<<<ceil_div((long long)tot, 256), 256, 0, dm_stream>>>(Y, Xb, X, a, tot);  // Y = a X
        cudaLaunchCheck();
        if (lowp) {
            if (tall) dm_gemm_bf16(1, 0, s, s, rows, 1, Xb, cols, n, Xb, cols, n, 0, A, s, ss, E);  // A = X^T X
            else      dm_gemm_bf16(0, 1, s, s, cols, 1, Xb, cols, n, Xb, cols, n, 0, A, s, ss, E);  // A = X X^T
            pack_bf16_kernel<<<ceil_div(ss * E, 256), 256, 0, dm_stream>>>(Ab, A, (size_t)(ss * E));
            cudaLaunchCheck();
            dm_gemm_bf16(0, 0, s, s, s, c, Ab, s, ss, Ab, s, ss, 0, Bm, s, ss, E);                   // Bm = c A A
        } else {
            if (tall) dm_gemm_batched_ws(1, 0, s, s, rows, 1, X, cols, n, X, cols, n, 0, A, s, ss, E, 0, NULL);
            else      dm_gemm_batched_ws(0, 1, s, s, cols, 1, X, cols, n, X, cols, n, 0, A, s, ss, E, 0, NULL);
            dm_gemm_batched_ws(0, 0, s, s, s, c, A, s, ss, A, s, ss, 0, Bm, s, ss, E, 0, NULL);
        }
        poly_kernel<<<ceil_div(ss * E, 256), 256, 0, dm_stream>>>(Bm, A, s, 0.0f, b, (size_t)E, Bmb);  // += b A
        cudaLaunchCheck();
        if (lowp) {
            if (tall) dm_gemm_bf16(0, 0, rows, cols, cols, 1, Xb, cols, n, Bmb, s, ss, 1, Y, cols, n, E);  // Y += X Bm
            else      dm_gemm_bf16(0, 0, rows, cols, rows, 1, Bmb, s, ss, Xb, cols, n, 1, Y, cols, n, E);  // Y += Bm X
        } else {
            if (tall) dm_gemm_batched_ws(0, 0, rows, cols, cols, 1, X, cols, n, Bm, s, ss, 1, Y, cols, n, E, 0, NULL);
            else      dm_gemm_batched_ws(0, 0, rows, cols, rows, 1, Bm, s, ss, X, cols, n, 1, Y, cols, n, E, 0, NULL);
        }
        float *t = X; X = Y; Y = t;
    }
    return X;
}

void cuda_opt_muon(real *p, const real *g, real *buf, int n_mats, int rows, int cols, int colrow,
                   real *scratch, const StepHyper *hp, const OptStatus *st) {
    size_t n = (size_t)rows * cols, s = (size_t)(rows < cols ? rows : cols), E = (size_t)n_mats;
    if (n == 0 || n_mats <= 0) return;
    double scale = colrow ? 0.2 : 0.2 * sqrt((double)(rows > cols ? rows : cols));
    float *U = scratch, *Y = U + E * n, *A = Y + E * n, *Bm = A + E * s * s, *inv = Bm + E * s * s;
    double *part = (double *)(((size_t)(inv + E) + 7) & ~(size_t)7);
    void *ws = (void *)(((size_t)(part + E * DM_RED_MAX_BLOCKS) + 15) & ~(size_t)15);  // bf16 operands
    long long tot = (long long)(E * n);
    muon_momentum_kernel<<<ceil_div(tot, 256), 256, 0, dm_stream>>>(U, buf, g, (size_t)tot, hp, st);
    cudaLaunchCheck();
    float *R = ns5(U, Y, A, Bm, inv, part, ws, n_mats, rows, cols);
    if (colrow) {
        col_normalize_kernel<<<dim3(cols, n_mats), OPT_NT, 0, dm_stream>>>(R, rows, cols);
        cudaLaunchCheck();
        row_normalize_kernel<<<dim3(rows, n_mats), OPT_NT, 0, dm_stream>>>(R, rows, cols);
        cudaLaunchCheck();
    }
    muon_apply_kernel<<<ceil_div(tot, 256), 256, 0, dm_stream>>>(p, R, (size_t)tot, scale, hp, st);
    cudaLaunchCheck();
}

// ================================================================================================
// the retraction, gated by the status
// ================================================================================================
// The iteration runs on a copy (Xs), and only the final copy back into X is gated by
// st->retract: a device flag cannot skip cuBLAS calls, so on a non-retracting step (possible
// only with retract_every > 1, or a skipped step) the products are computed and dropped.
// As Muon, the n_mats factors of a tensor ([E, rows, r]) go together: one launch per stage for
// all of them (per-matrix sums on gridDim.y / z, strided-batched products).
// scratch: Xs [E, rows, r] | Y [E, rows, r] | A [E, r, r] | M [E, r, r] | err [E, r, r] doubles |
//          scale [E] | guard on A [E] | guard on X [E] floats | partial sums [E, DM_RED_MAX_BLOCKS]
//          doubles (8-aligned)
size_t cuda_opt_retract_scratch_size(int n_mats, int rows, int r) {
    size_t E = (size_t)(n_mats > 0 ? n_mats : 1);
    return E * (2 * (size_t)rows * r + 2 * (size_t)r * r + 2 * (size_t)r * r) + 3 * E + 2 * E * DM_RED_MAX_BLOCKS + 64;
}
// scale[e] = sqrt(r / ||X_e||_F^2), 0 when X_e = 0 (X_e then stays 0, as the CPU's early return),
// from the nb partial sums of matrix e (sumsq_part_batched_kernel) over a fixed tree
__global__ void retract_scale_kernel(float *scale, const double *part, int nb, int r) {
    __shared__ double sh[256];
    const double *p = part + (size_t)blockIdx.x * nb;
    double s = 0;
    for (int i = threadIdx.x; i < nb; i += 256) s += p[i];
    double ss = block_sum_d(s, sh);
    if (threadIdx.x == 0) scale[blockIdx.x] = ss == 0 ? 0.0f : (float)sqrt((double)r / ss);
}
__global__ void gated_copy_kernel(float *dst, const float *src, size_t n, const OptStatus *st) {
    if (!st->retract) return;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
// err_e[i][j] for matrix e = blockIdx.z: (1 or 2) (G_ij - delta_ij)^2 for j >= i, 0 below, with
// G = X_e^T X_e summed in double. Tiled like a product: block (bx, by) owns G[64 by .., 64 bx ..],
// stages 32 rows of both column bands in shared memory per step and each of its 256 threads
// accumulates a 4 x 4 patch over the rows in order (fixed order: deterministic). Tiles wholly
// below the diagonal only write their zeros. (One thread per entry re-reading X from L2 moved
// ~460 MB per 3072 x 192 factor — ~15 GB a step over the base preset's 32 factors.)
#define OT_T 64   // tile edge
#define OT_R 32   // rows staged per step
__global__ void __launch_bounds__(256) orth_terms_batched_kernel(double *err, const float *X, int rows, int r) {
    __shared__ float si[OT_R][OT_T], sj[OT_R][OT_T];
    const size_t e = blockIdx.z;
    const int i0 = blockIdx.y * OT_T, j0 = blockIdx.x * OT_T, tid = threadIdx.x;
    const int ti = (tid / 16) * 4, tj = (tid % 16) * 4;  // this thread's 4 x 4 patch in the tile
    double *Ee = err + e * (size_t)r * r;
    if (j0 + OT_T <= i0) {  // block-uniform: every entry below the diagonal
        for (int x = tid; x < OT_T * OT_T; x += 256) {
            int i = i0 + x / OT_T, j = j0 + x % OT_T;
            if (i < r && j < r) Ee[(size_t)i * r + j] = 0;
        }
        return;
    }
    const float *Xe = X + e * (size_t)rows * r;
    double acc[4][4];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) acc[a][b] = 0;
    for (int q0 = 0; q0 < rows; q0 += OT_R) {
        for (int x = tid; x < OT_R * OT_T; x += 256) {
            int q = x / OT_T, c = x % OT_T;
            bool in = q0 + q < rows;
            si[q][c] = in && i0 + c < r ? Xe[(size_t)(q0 + q) * r + i0 + c] : 0.0f;
            sj[q][c] = in && j0 + c < r ? Xe[(size_t)(q0 + q) * r + j0 + c] : 0.0f;
        }
        __syncthreads();
        for (int q = 0; q < OT_R; q++) {
            double a[4], b[4];
            for (int u = 0; u < 4; u++) { a[u] = si[q][ti + u]; b[u] = sj[q][tj + u]; }
            for (int u = 0; u < 4; u++)
                for (int w = 0; w < 4; w++) acc[u][w] += a[u] * b[w];
        }
        __syncthreads();
    }
    for (int u = 0; u < 4; u++)
        for (int w = 0; w < 4; w++) {
            int i = i0 + ti + u, j = j0 + tj + w;
            if (i >= r || j >= r) continue;
            double v = 0;
            if (j >= i) {
                double dev = acc[u][w] - (i == j ? 1.0 : 0.0);
                v = (i == j ? 1.0 : 2.0) * dev * dev;
            }
            Ee[(size_t)i * r + j] = v;
        }
}
// st->orth_err = max(st->orth_err, max_e sqrt(sum err_e) / r) on a retracting step: the matrices
// one after another, each a fixed tree (the max does not depend on the order anyway)
__global__ void __launch_bounds__(1024) orth_fold_kernel(OptStatus *st, const double *err, size_t rr, int r, int E) {
    __shared__ double sh[1024];
    double worst = 0;
    for (int e = 0; e < E; e++) {
        double s = 0;
        for (size_t i = threadIdx.x; i < rr; i += 1024) s += err[(size_t)e * rr + i];
        double tot = block_sum_d(s, sh);
        double v = sqrt(tot) / r;
        worst = isnan(v) || isnan(worst) ? v + worst : v > worst ? v : worst;  // NaN sticks (as on the CPU)
    }
    if (threadIdx.x == 0 && st->retract) {
        if (isnan(worst) || isnan(st->orth_err)) st->orth_err = worst + st->orth_err;
        else if (worst > st->orth_err) st->orth_err = worst;
    }
}

void cuda_opt_retract(real *X, int n_mats, int rows, int r, int iters, real *scratch, OptStatus *st) {
    size_t n = (size_t)rows * r, rr = (size_t)r * r, E = (size_t)n_mats;
    if (n == 0 || n_mats <= 0) return;
    long long tot = (long long)(E * n), ss = (long long)rr;
    float *Xs = scratch, *Y = Xs + E * n, *A = Y + E * n, *M = A + E * rr;
    double *err = (double *)(M + E * rr);  // 8-aligned: 2 E (n + rr) floats is even
    float *scale = (float *)(err + E * rr), *ga = scale + E, *gx = ga + E;
    double *part = (double *)(((size_t)(gx + E) + 7) & ~(size_t)7);
    cudaCheck(cudaMemcpyAsync(Xs, X, sizeof(float) * E * n, cudaMemcpyDeviceToDevice, dm_stream));
    int nb = ceil_div((long long)n, 256 * 8);  // >= 8 elements per thread, at most DM_RED_MAX_BLOCKS
    if (nb > DM_RED_MAX_BLOCKS) nb = DM_RED_MAX_BLOCKS;
    sumsq_part_batched_kernel<<<dim3(nb, n_mats), 256, 0, dm_stream>>>(part, Xs, n);
    cudaLaunchCheck();
    retract_scale_kernel<<<n_mats, 256, 0, dm_stream>>>(scale, part, nb, r);
    cudaLaunchCheck();
    scale_batched_kernel<<<ceil_div(tot, 256), 256, 0, dm_stream>>>(Xs, scale, n, (size_t)tot);
    cudaLaunchCheck();
    for (int it = 0; it < iters; it++) {  // fp32 always: the fixed point at 1 needs the digits
        dm_gemm_batched(1, 0, r, r, rows, 1, Xs, r, n, Xs, r, n, 0, A, r, ss, n_mats, 0);     // A = X^T X
        if (it == 0) {  // sigma_max <= 1.5 per matrix (retract.c): A and X scaled by the Gershgorin guard
            gersh_scale_kernel<<<n_mats, 256, 0, dm_stream>>>(ga, gx, A, r);
            cudaLaunchCheck();
            scale_batched_kernel<<<ceil_div(ss * n_mats, 256), 256, 0, dm_stream>>>(A, ga, rr, E * rr);
            cudaLaunchCheck();
            scale_batched_kernel<<<ceil_div(tot, 256), 256, 0, dm_stream>>>(Xs, gx, n, (size_t)tot);
            cudaLaunchCheck();
        }
        dm_gemm_batched(0, 0, r, r, r, 0.375f, A, r, ss, A, r, ss, 0, M, r, ss, n_mats, 0);  // M = c A^2
        poly_kernel<<<ceil_div(ss * n_mats, 256), 256, 0, dm_stream>>>(M, A, r, 1.875f, -1.25f, E, (__nv_bfloat16 *)NULL);
        cudaLaunchCheck();
        dm_gemm_batched(0, 0, rows, r, r, 1, Xs, r, n, M, r, ss, 0, Y, r, n, n_mats, 0);      // Y = X M
        float *t = Xs; Xs = Y; Y = t;
    }
    gated_copy_kernel<<<ceil_div(tot, 256), 256, 0, dm_stream>>>(X, Xs, (size_t)tot, st);
    cudaLaunchCheck();
    orth_terms_batched_kernel<<<dim3(ceil_div(r, OT_T), ceil_div(r, OT_T), n_mats), 256, 0, dm_stream>>>(err, Xs, rows, r);
    cudaLaunchCheck();
    orth_fold_kernel<<<1, 1024, 0, dm_stream>>>(st, err, rr, r, n_mats);
    cudaLaunchCheck();
}

#endif  // DM_DOUBLE
