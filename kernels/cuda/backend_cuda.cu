// backend_cuda.cu — the CUDA backend (SPEC §8): the Backend table of kernels/backend.h over
// DEVICE pointers, float build only. Same semantics as kernels/cpu/*.c: row-major, every
// backward ACCUMULATES (+=), any d-buffer the CPU op allows to be NULL may be NULL here too.
//
// Determinism (SPEC §7): no float atomicAdd anywhere a sum is reduced. Reductions are
// fixed-shape trees (block_sum_d) or sequential loops owned by one thread; the row gradients of
// the embedding and the Engram tables are summed after a stable radix sort by row, in token
// order — the same float adds in the same order as the CPU loops, so they are bit-identical to
// the CPU and to themselves.
//
// Matrix products: cuBLAS. dm_fp32 = 1: SGEMM under CUBLAS_PEDANTIC_MATH (no TF32, no reduced-
// precision reductions). dm_fp32 = 0 (the default, SPEC §8): operands rounded to bf16, fp32
// accumulation and output (cublasGemmEx, CUBLAS_COMPUTE_32F), fp32 masters untouched. The
// switch is the config key `precision` (the engine calls set_precision whenever it builds or a
// :set changes it; cuda_set_precision for programs without an engine).
//
// Pointer conventions that are NOT device pointers (host-side by the engine's call sites):
//   engram_rows: `orders` is the host config array (O <= 16 entries).
//   orth_error returns its value to the host.
#include "cuda_common.cuh"
#include "shape_limits.h"
#include <string.h>
#include <dlfcn.h>

extern "C" void cuda_set_precision(int fp32);

void dm_cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
#ifndef DM_DOUBLE
    if (dm_capturing) {  // inside a graph capture: the capture fails (graph_end says why), not the process
        char msg[256];
        snprintf(msg, sizeof msg, "%s at %s:%d: %s", what, file, line, cudaGetErrorString(e));
        dm_capture_fail(msg);
        return;
    }
#endif
    fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", file, line, cudaGetErrorName(e),
            cudaGetErrorString(e), what);
    fprintf(stderr, "  hint: an illegal address usually means a host pointer was passed where the "
                    "table wants a device pointer (or a size mismatch); rerun under compute-sanitizer\n");
    exit(1);
}
void dm_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line) {
#ifndef DM_DOUBLE
    if (dm_capturing) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s at %s:%d: cuBLAS %s", what, file, line, cublasGetStatusString(s));
        dm_capture_fail(msg);
        return;
    }
#endif
    fprintf(stderr, "%s:%d: cuBLAS error %d (%s) in %s\n", file, line, (int)s,
            cublasGetStatusString(s), what);
    fprintf(stderr, "  hint: INVALID_VALUE is a bad leading dimension (row-major ld must be >= the "
                    "row length) or a negative size; NOT_INITIALIZED means no handle (backend_cuda not called)\n");
    exit(1);
}

#ifdef DM_DOUBLE
extern "C" void cuda_set_precision(int fp32) { (void)fp32; }
extern "C" const Backend *backend_cuda(int device, char *why, size_t n) {
    (void)device;
    snprintf(why, n, "the CUDA backend is float-only (this is the DM_REAL=double build): use :device cpu");
    return NULL;
}
#else

#include <cub/cub.cuh>

#define CUBLAS_WS_BYTES ((size_t)32 << 20)  // cuBLAS's recommended workspace on Hopper

cublasHandle_t dm_cublas = NULL;
// One stream for everything, created by backend_cuda(): a capturable stream (the legacy default
// stream cannot be captured into a graph), blocking with respect to the legacy stream so that a
// plain cudaMemcpy elsewhere still waits for the ops enqueued here.
cudaStream_t dm_stream = 0;
int dm_fp32 = 0;             // SPEC §8: bf16 operands by default

// ================================================================================================
// scratch, memory
// ================================================================================================
// Memory accounting for :bench and :show device: every live device allocation's size, keyed by
// pointer (a few hundred at most: parameters, moments, the activation arena, workspaces, the
// scratch slots and cuBLAS's workspace; the scratch and cuBLAS's were left out until session 32,
// a few hundred MB at base), and the running peak.
enum { MEM_SLOTS = 4096 };
static void *mem_ptr[MEM_SLOTS];
static size_t mem_size[MEM_SLOTS], mem_cur, mem_peak;
static int mem_untracked;  // allocations past MEM_SLOTS: not subtracted when freed (said once)
static void mem_note(void *p, size_t bytes) {
    int i = 0;
    while (i < MEM_SLOTS && mem_ptr[i]) i++;
    if (i < MEM_SLOTS) { mem_ptr[i] = p; mem_size[i] = bytes; }
    else if (!mem_untracked++)
        fprintf(stderr, "cuda: more than %d live allocations; the memory figures of :bench now over-count freed "
                "buffers\n", MEM_SLOTS);
    mem_cur += bytes;
    if (mem_cur > mem_peak) mem_peak = mem_cur;
}
static void mem_forget(void *p) {
    for (int i = 0; i < MEM_SLOTS; i++)
        if (mem_ptr[i] == p) { mem_cur -= mem_size[i]; mem_ptr[i] = NULL; return; }
}
static void *scr_ptr[SCR_N];
static size_t scr_cap[SCR_N];

void *dm_scratch(int slot, size_t bytes) {
    if (bytes > scr_cap[slot]) {
        if (dm_capturing) {  // a captured op must not free what earlier captured ops name
            char msg[160];
            snprintf(msg, sizeof msg, "scratch slot %d would grow from %zu to %zu bytes inside the captured step", slot,
                     scr_cap[slot], bytes);
            dm_capture_fail(msg);
            return scr_ptr[slot];  // never runs: the capture is discarded
        }
        dm_nallocs++;
        size_t cap = bytes + bytes / 4 + 256;  // headroom so a slowly growing shape does not thrash
        // ops already enqueued (or a replay in flight) may still read the old slot: wait for
        // them rather than rely on cudaFree's implicit synchronisation
        if (scr_ptr[slot]) { cudaCheck(cudaStreamSynchronize(dm_stream)); mem_forget(scr_ptr[slot]); cudaCheck(cudaFree(scr_ptr[slot])); }
        scr_ptr[slot] = NULL;
        scr_cap[slot] = 0;
        cudaError_t e = cudaMalloc(&scr_ptr[slot], cap);
        if (e != cudaSuccess) {
            scr_ptr[slot] = NULL;
            (void)cudaGetLastError();  // not sticky: the next launch check must not take it for its own
            if (e != cudaErrorMemoryAllocation) dm_cuda_fail(e, "cudaMalloc (scratch)", __FILE__, __LINE__);
            // back to the caller's guard (the step or the eval, which undo what ran); the
            // activations and every fixed buffer were allocated before the first op
            static const char *what[SCR_N] = {"bf16 operand", "bf16 operand", "sort", "sort-key",
                                              "reduction", "column-sum"};
            size_t fr = 0, tot = 0;
            (void)cudaMemGetInfo(&fr, &tot);
            (void)cudaGetLastError();
            int dev = 0;
            (void)cudaGetDevice(&dev);
            char need[32], free_[32];
            dm_fmt_bytes(need, sizeof need, (double)cap);
            dm_fmt_bytes(free_, sizeof free_, (double)fr);
            dm_guard_raise("out of memory on cuda:%d: %s of %s scratch did not fit (%s free)", dev, need,
                           what[slot], free_);  // the catcher adds what to do
        }
        scr_cap[slot] = cap;
        mem_note(scr_ptr[slot], cap);
    }
    return scr_ptr[slot];
}

static void cu_mem_stats(size_t *cur, size_t *peak) { *cur = mem_cur; *peak = mem_peak; }
static void cu_mem_peak_set(size_t peak) { mem_peak = peak > mem_cur ? peak : mem_cur; }

static void *cu_alloc(size_t bytes) {
    if (dm_capturing) { dm_capture_fail("alloc inside the captured step"); return NULL; }
    dm_nallocs++;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {  // out of memory is the user's to handle (smaller preset), not a crash
        // the runtime also keeps the failure as its "last error": read it back here, or the next
        // launch check (cudaGetLastError) takes it for its own and ends the session
        // (the caller names what did not fit, on its one error line)
        (void)cudaGetLastError();
        return NULL;
    }
    cudaCheck(cudaMemsetAsync(p, 0, bytes ? bytes : 1, dm_stream));  // zero-filled, as calloc
    mem_note(p, bytes);
    return p;
}
static void cu_free(void *p) {
    if (!p) return;
    // as host_free: a free inside a capture fails the capture and keeps the buffer (and its count)
    if (dm_capturing) { dm_capture_fail("free inside the captured step"); return; }
    mem_forget(p);
    cudaCheck(cudaStreamSynchronize(dm_stream));  // as the scratch slots: enqueued work may still read p
    cudaCheck(cudaFree(p));
}
static void cu_zero(void *p, size_t bytes) { if (bytes) cudaCheck(cudaMemsetAsync(p, 0, bytes, dm_stream)); }
static void cu_upload(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (dm_capturing) { dm_capture_fail("a synchronous upload (host round trip) inside the captured step"); return; }
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dm_stream));
    cudaCheck(cudaStreamSynchronize(dm_stream));  // the caller may reuse src as soon as we return
}
static void cu_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (dm_capturing) {  // zeros, not garbage, for the host code that reads them before the capture ends
        dm_capture_fail("a download (host round trip) inside the captured step");
        memset(dst, 0, bytes);
        return;
    }
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dm_stream));
    cudaCheck(cudaStreamSynchronize(dm_stream));
}

// ================================================================================================
// matmul (the products themselves: gemm_cuda.cu)
// ================================================================================================
static void cu_gemm(int tA, int tB, int M, int N, int K, real alpha, const real *A, int lda,
                    const real *B, int ldb, real beta, real *C, int ldc) {
    dm_gemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1);
}

// out [N, OC] += bias [OC] broadcast over rows
__global__ void add_bias_kernel(float *out, const float *bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] += bias[i % OC];
}

// Column sums acc[c] += sum_n f(n, c) over N rows, in a fixed order that depends on (N, C) only:
// the rows are cut into S contiguous slices (S from N alone); block (x, y) sums 32 columns of
// slice y — thread row ty takes rows ty, ty+32, ... of the slice, in double, then a fixed tree
// over ty — into part[y][c]; a second kernel adds the S partials in slice order. Two stages
// because a column sum over 16k..200k rows (the gain of a per-head norm at the base preset) on
// ceil(C/32) blocks alone would leave all but a few SMs idle.
template <typename F>
__global__ void __launch_bounds__(1024) colsum_part_kernel(double *part, F f, int N, int C, int rows_per) {
    __shared__ double sh[32][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
    double s = 0;
    if (c < C)
        for (int n = r0 + ty; n < r1; n += 32) s += (double)f(n, c);
    sh[ty][tx] = s;
    __syncthreads();
    for (int w = 16; w > 0; w >>= 1) {
        if (ty < w) sh[ty][tx] += sh[ty + w][tx];
        __syncthreads();
    }
    if (ty == 0 && c < C) part[(size_t)blockIdx.y * C + c] = sh[0][tx];
}
__global__ void colsum_final_kernel(float *acc, const double *part, int S, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0;
    for (int k = 0; k < S; k++) s += part[(size_t)k * C + c];
    acc[c] += (float)s;
}
template <typename F> static void colsum(float *acc, F f, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int S = row_slices(N);
    int rows_per = ceil_div(N, S);
    double *part = (double *)dm_scratch(SCR_COLSUM, sizeof(double) * (size_t)S * C);
    colsum_part_kernel<<<dim3(ceil_div(C, 32), S), dim3(32, 32), 0, dm_stream>>>(part, f, N, C, rows_per);
    cudaLaunchCheck();
    colsum_final_kernel<<<ceil_div(C, 256), 256, 0, dm_stream>>>(acc, part, S, C);
    cudaLaunchCheck();
}
struct ReadF {
    const float *p; int ld;
    __device__ float operator()(int n, int c) const { return p[(size_t)n * ld + c]; }
};
// acc [C] += column sums of x [N, C] at row stride ld (fused_cuda.cu's bias_backward)
void dm_colsum_rows(float *acc, const float *x, int ld, int N, int C) {
    ReadF f = {x, ld};
    colsum(acc, f, N, C);
}
struct GainGradF {  // dy * x * rstd, the CPU's per-row float product
    const float *dy, *x, *r; int C;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return dy[i] * x[i] * r[n];
    }
};

static void cu_matmul_forward(real *out, const real *inp, const real *W, const real *bias, int N, int C, int OC) {
    // out [N, OC] = inp [N, C] W [OC, C]^T (+ bias [OC])
    dm_gemm(0, 1, N, OC, C, 1, inp, C, W, C, 0, out, OC, 1);
    if (bias && N > 0 && OC > 0) {
        add_bias_kernel<<<ceil_div((long long)N * OC, 256), 256, 0, dm_stream>>>(out, bias, N, OC);
        cudaLaunchCheck();
    }
}
static void cu_matmul_backward(real *dinp, real *dW, real *dbias, const real *dout, const real *inp,
                               const real *W, int N, int C, int OC) {
    if (dinp) dm_gemm(0, 0, N, C, OC, 1, dout, OC, W, C, 1, dinp, C, 1);  // [N, C] += dout W
    if (dW) dm_gemm(1, 0, OC, C, N, 1, dout, OC, inp, C, 1, dW, C, 1);    // [OC, C] += dout^T inp
    if (dbias && OC > 0) {
        ReadF f = {dout, OC};
        colsum(dbias, f, N, OC);
    }
}

// ================================================================================================
// norms: one block per row, double sums over a fixed tree (the CPU sums in double too)
// ================================================================================================
#define NORM_EPS 1e-6
#define NT 256  // threads per row block (power of two for block_sum_d)

__global__ void rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp, const float *gain, int C) {
    __shared__ double sh[NT];
    const float *x = inp + (size_t)blockIdx.x * C;  // [C]
    float *y = out + (size_t)blockIdx.x * C;        // [C]
    double s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)x[c] * x[c];
    double ss = block_sum_d(s, sh);
    float r = (float)(1.0 / sqrt(ss / C + NORM_EPS));
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = gain ? x[c] * r * gain[c] : x[c] * r;
}
__global__ void rmsnorm_bwd_kernel(float *dinp, const float *dout, const float *inp, const float *gain,
                                   const float *rstd, int C) {
    __shared__ double sh[NT];
    size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off, *dy = dout + off;  // [C] each
    float r = rstd[blockIdx.x];
    double s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)(gain ? dy[c] * gain[c] : dy[c]) * x[c];
    double dot = block_sum_d(s, sh);
    float k = (float)(dot * r * r * r / C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float gd = gain ? dy[c] * gain[c] : dy[c];
        dinp[off + c] += r * gd - x[c] * k;
    }
}
__global__ void l2norm_fwd_kernel(float *out, float *rn, const float *inp, float scale, int C) {
    __shared__ double sh[NT];
    size_t off = (size_t)blockIdx.x * C;
    double s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)inp[off + c] * inp[off + c];
    double ss = block_sum_d(s, sh);
    float r = (float)(1.0 / sqrt(ss + NORM_EPS));
    if (threadIdx.x == 0) rn[blockIdx.x] = r;
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[off + c] = inp[off + c] * r * scale;
}
__global__ void l2norm_bwd_kernel(float *dinp, const float *dout, const float *out, const float *rn,
                                  float scale, int C) {
    // dx = r (s dy - y (y.dy) / s)
    __shared__ double sh[NT];
    size_t off = (size_t)blockIdx.x * C;
    double s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)dout[off + c] * out[off + c];
    double dot = block_sum_d(s, sh);
    float r = rn[blockIdx.x], k = (float)(dot / scale);
    for (int c = threadIdx.x; c < C; c += blockDim.x) dinp[off + c] += r * (scale * dout[off + c] - out[off + c] * k);
}

// threads per row: the power of two covering C, 32..NT (a 64-wide head norm on 256 threads would
// leave three quarters of them idle through an eight-level tree)
static int norm_threads(int C) {
    int t = 32;
    while (t < C && t < NT) t *= 2;
    return t;
}
static void cu_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *gain, int N, int C) {
    if (N <= 0) return;
    rmsnorm_fwd_kernel<<<N, norm_threads(C), 0, dm_stream>>>(out, rstd, inp, gain, C);
    cudaLaunchCheck();
}
static void cu_rmsnorm_backward(real *dinp, real *dgain, const real *dout, const real *inp,
                                const real *gain, const real *rstd, int N, int C) {
    if (N <= 0) return;
    if (dinp) {
        rmsnorm_bwd_kernel<<<N, norm_threads(C), 0, dm_stream>>>(dinp, dout, inp, gain, rstd, C);
        cudaLaunchCheck();
    }
    if (dgain) {
        GainGradF f = {dout, inp, rstd, C};
        colsum(dgain, f, N, C);
    }
}
static void cu_l2norm_forward(real *out, real *rn, const real *inp, real scale, int N, int C) {
    if (N <= 0) return;
    l2norm_fwd_kernel<<<N, norm_threads(C), 0, dm_stream>>>(out, rn, inp, scale, C);
    cudaLaunchCheck();
}
static void cu_l2norm_backward(real *dinp, const real *dout, const real *out, const real *rn, real scale, int N, int C) {
    if (N <= 0) return;
    l2norm_bwd_kernel<<<N, norm_threads(C), 0, dm_stream>>>(dinp, dout, out, rn, scale, C);
    cudaLaunchCheck();
}

// ================================================================================================
// element-wise (in place allowed: each thread reads its element before writing it)
// ================================================================================================
__global__ void silu_fwd_kernel(float *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = inp[i]; out[i] = x * sigmoidf_dev(x); }
}
__global__ void silu_bwd_kernel(float *dinp, const float *dout, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = inp[i], s = sigmoidf_dev(x); dinp[i] += dout[i] * s * (1 + x * (1 - s)); }
}
__global__ void sigmoid_fwd_kernel(float *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = sigmoidf_dev(inp[i]);
}
__global__ void sigmoid_bwd_kernel(float *dinp, const float *dout, const float *out, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float y = out[i]; dinp[i] += dout[i] * y * (1 - y); }
}
#define EW_LAUNCH(kern, n, ...) do { if ((n) > 0) { \
    kern<<<ceil_div((long long)(n), 256), 256, 0, dm_stream>>>(__VA_ARGS__, n); cudaLaunchCheck(); } } while (0)
static void cu_silu_forward(real *out, const real *inp, size_t n) { EW_LAUNCH(silu_fwd_kernel, n, out, inp); }
static void cu_silu_backward(real *dinp, const real *dout, const real *inp, size_t n) { EW_LAUNCH(silu_bwd_kernel, n, dinp, dout, inp); }
static void cu_sigmoid_forward(real *out, const real *inp, size_t n) { EW_LAUNCH(sigmoid_fwd_kernel, n, out, inp); }
static void cu_sigmoid_backward(real *dinp, const real *dout, const real *out, size_t n) { EW_LAUNCH(sigmoid_bwd_kernel, n, dinp, dout, out); }

// ================================================================================================
// embedding, softmax-CE
// ================================================================================================
__global__ void embedding_fwd_kernel(float *out, const int *x, const float *table, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over [N, C]
    if (i >= (size_t)N * C) return;
    size_t n = i / C, c = i % C;
    out[i] = table[(size_t)x[n] * C + c];
}
static void cu_embedding_forward(real *out, const int *x, const real *table, int N, int C) {
    if ((long long)N * C <= 0) return;
    embedding_fwd_kernel<<<ceil_div((long long)N * C, 256), 256, 0, dm_stream>>>(out, x, table, N, C);
    cudaLaunchCheck();
}

// keys [n] = row index of item, vals [n] = item id
__global__ void embed_keys_kernel(uint64_t *keys, int *vals, const int *x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { keys[i] = (uint64_t)(uint32_t)x[i]; vals[i] = i; }
}

size_t dm_sort_pairs_tmp(int n, int bits) {
    size_t tmp = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, tmp, (const uint64_t *)NULL, (uint64_t *)NULL, (const int *)NULL,
                                              (int *)NULL, n, 0, bits, dm_stream));
    return tmp;
}
void dm_sort_pairs_ws(const uint64_t *keys_in, uint64_t *keys_out, const int *vals_in, int *vals_out,
                      int n, int bits, void *ws) {
    size_t tmp = dm_sort_pairs_tmp(n, bits);
    void *t = ws ? ws : dm_scratch(SCR_SORT, tmp);
    cudaCheck(cub::DeviceRadixSort::SortPairs(t, tmp, keys_in, keys_out, vals_in, vals_out, n, 0,
                                              bits, dm_stream));
}
void dm_sort_pairs(const uint64_t *keys_in, uint64_t *keys_out, const int *vals_in, int *vals_out,
                   int n, int bits) {
    dm_sort_pairs_ws(keys_in, keys_out, vals_in, vals_out, n, bits, NULL);
}

// One block per item; only the first item of each run of equal keys works, walking the run in
// order (ids increasing: the sort is stable), so every row has exactly one writer and each of its
// columns is the same chain of float adds as the CPU's. The block first finds where the run ends
// (its threads test blockDim keys at a time: the equal keys are one contiguous prefix), then each
// thread owns a column and walks the run with no key test in the loop, so the loads of successive
// items are independent and can be in flight together (a run can be thousands long: the space
// byte in the embedding, a low-order Engram row).
__global__ void __launch_bounds__(1024) scatter_sorted_kernel(float *dst, const float *src, const uint64_t *keys,
                                      const int *vals, int n, int per, size_t ld, int D) {
    int i = blockIdx.x;
    uint64_t key = keys[i];
    if (i > 0 && keys[i - 1] == key) return;  // uniform over the block: no barrier below is skipped
    int end = i;
    for (;;) {
        int j = end + (int)threadIdx.x;
        int same = __syncthreads_count(j < n && keys[j] == key);
        end += same;
        if (same < (int)blockDim.x) break;
    }
    float *d = dst + key * (uint64_t)D;  // [D]
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = d[c];
#pragma unroll 8
        for (int j = i; j < end; j++) {
            int a = vals[j];
            acc += src[(size_t)(a % per) * ld + (size_t)(a / per) * D + c];
        }
        d[c] = acc;
    }
}
void dm_scatter_sorted(float *dst, const float *src, const uint64_t *keys, const int *vals, int n,
                       int per, size_t ld, int D) {
    if (n <= 0) return;
    int threads = D >= 1024 ? 1024 : 32 * ceil_div(D, 32);  // one column per thread up to 1024
    scatter_sorted_kernel<<<n, threads, 0, dm_stream>>>(dst, src, keys, vals, n, per, ld, D);
    cudaLaunchCheck();
}

// keys/vals scratch: [2n] uint64 keys (in, out), then [2n] int vals (in, out)
static void sort_scratch(int n, uint64_t **kin, uint64_t **kout, int **vin, int **vout) {
    char *p = (char *)dm_scratch(SCR_KEYS, (size_t)n * (2 * sizeof(uint64_t) + 2 * sizeof(int)));
    *kin = (uint64_t *)p; *kout = *kin + n;
    *vin = (int *)(*kout + n); *vout = *vin + n;
}

static void cu_embedding_backward(real *dtable, const real *dout, const int *x, int N, int C) {
    if (N <= 0 || C <= 0) return;
    uint64_t *kin, *kout; int *vin, *vout;
    sort_scratch(N, &kin, &kout, &vin, &vout);
    embed_keys_kernel<<<ceil_div(N, 256), 256, 0, dm_stream>>>(kin, vin, x, N);
    cudaLaunchCheck();
    dm_sort_pairs(kin, kout, vin, vout, N, 16);  // byte ids (< 256): 16 key bits, 2 radix passes instead of 4
    dm_scatter_sorted(dtable, dout, kout, vout, N, N, (size_t)C, C);
}

__global__ void softmax_ce_fwd_kernel(float *losses, float *probs, const float *logits,
                                      const int *targets, int V) {
    __shared__ double shd[NT];
    __shared__ float shf[NT];
    size_t off = (size_t)blockIdx.x * V;
    const float *l = logits + off;  // [V]
    float *p = probs + off;         // [V]
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += NT) m = fmaxf(m, l[v]);
    float mx = block_max_f(m, shf);
    double s = 0;
    for (int v = threadIdx.x; v < V; v += NT) { float e = expf(l[v] - mx); p[v] = e; s += e; }
    double sum = block_sum_d(s, shd);
    float inv = (float)(1.0 / sum);
    for (int v = threadIdx.x; v < V; v += NT) p[v] *= inv;
    if (threadIdx.x == 0) losses[blockIdx.x] = (float)(log(sum) + mx - l[targets[blockIdx.x]]);
}
__global__ void softmax_ce_bwd_kernel(float *dlogits, const float *probs, const int *targets,
                                      float scale, int N, int V) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    size_t n = i / V;
    float d = dlogits[i] + scale * probs[i];  // the CPU's two steps, in its order
    if ((int)(i % V) == targets[n]) d -= scale;
    dlogits[i] = d;
}
static void cu_softmax_ce_forward(real *losses, real *probs, const real *logits, const int *targets, int N, int V) {
    if (N <= 0) return;
    softmax_ce_fwd_kernel<<<N, NT, 0, dm_stream>>>(losses, probs, logits, targets, V);
    cudaLaunchCheck();
}
static void cu_softmax_ce_backward(real *dlogits, const real *probs, const int *targets, real scale, int N, int V) {
    if ((long long)N * V <= 0) return;
    softmax_ce_bwd_kernel<<<ceil_div((long long)N * V, 256), 256, 0, dm_stream>>>(dlogits, probs, targets, scale, N, V);
    cudaLaunchCheck();
}

// ================================================================================================
// Engram (SPEC §3)
// ================================================================================================
#define MAX_ORDERS 16
struct Orders { int n[MAX_ORDERS]; };

__global__ void engram_rows_kernel(int32_t *rows, const int *x, int B, int T, Orders ord, int O, int64_t R) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over [O, B, T]
    size_t BT = (size_t)B * T;
    if (i >= (size_t)O * BT) return;
    int o = (int)(i / BT), b = (int)((i % BT) / T), t = (int)(i % T), n = ord.n[o];
    // FNV-1a 64: n as one byte, then each symbol oldest first as 2 little-endian bytes
    uint64_t h = 0xcbf29ce484222325ULL;
    const uint64_t prime = 0x100000001b3ULL;
    h ^= (uint8_t)n; h *= prime;
    for (int j = 0; j < n; j++) {
        int p = t - n + 1 + j;
        unsigned s = p < 0 ? 256u : (unsigned)x[(size_t)b * T + p];
        h ^= (uint8_t)(s & 0xff); h *= prime;
        h ^= (uint8_t)(s >> 8); h *= prime;
    }
    rows[i] = (int32_t)(h % (uint64_t)R);
}
static void cu_engram_rows(int32_t *rows, const int *x, int B, int T, const int *orders, int O, int64_t R) {
    // orders: HOST array (the config's engram_orders), O <= 16
    if (O > MAX_ORDERS) { fprintf(stderr, "cuda engram_rows: %d orders > %d\n", O, MAX_ORDERS); exit(1); }
    Orders ord;
    memset(&ord, 0, sizeof ord);
    for (int o = 0; o < O; o++) ord.n[o] = orders[o];
    long long n = (long long)O * B * T;
    if (n <= 0) return;
    engram_rows_kernel<<<ceil_div(n, 256), 256, 0, dm_stream>>>(rows, x, B, T, ord, O, R);
    cudaLaunchCheck();
}
__global__ void engram_gather_kernel(float *m, const float *tables, const int32_t *rows, int N, int O, int64_t R, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over m [N, O*D]
    if (i >= (size_t)N * O * D) return;
    size_t t = i / ((size_t)O * D);
    int o = (int)((i / D) % O), c = (int)(i % D);
    m[i] = tables[((size_t)o * R + rows[(size_t)o * N + t]) * D + c];
}
static void cu_engram_gather(real *m, const real *tables, const int32_t *rows, int N, int O, int64_t R, int D) {
    long long n = (long long)N * O * D;
    if (n <= 0) return;
    engram_gather_kernel<<<ceil_div(n, 256), 256, 0, dm_stream>>>(m, tables, rows, N, O, R, D);
    cudaLaunchCheck();
}
// item a = o*N + t -> key o*R + rows[o][t]
__global__ void engram_keys_kernel(uint64_t *keys, int *vals, const int32_t *rows, int N, int O, int64_t R) {
    size_t a = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= (size_t)O * N) return;
    keys[a] = (uint64_t)(a / N) * (uint64_t)R + (uint64_t)rows[a];
    vals[a] = (int)a;
}
static void cu_engram_scatter(real *dtables, const real *dm, const int32_t *rows, int N, int O, int64_t R, int D) {
    int n = O * N;  // <= 2^31 - 2^26 (shape_limits.h): cub's int count, int item ids, one block per item
    if (n <= 0 || D <= 0) return;
    uint64_t *kin, *kout; int *vin, *vout;
    sort_scratch(n, &kin, &kout, &vin, &vout);
    engram_keys_kernel<<<ceil_div(n, 256), 256, 0, dm_stream>>>(kin, vin, rows, N, O, R);
    cudaLaunchCheck();
    int bits = 1;
    while (bits < 64 && ((uint64_t)O * (uint64_t)R) > (1ULL << bits)) bits++;
    dm_sort_pairs(kin, kout, vin, vout, n, bits);
    // item a reads dm [t, o*D : (o+1)*D], t = a % N, o = a / N
    dm_scatter_sorted(dtables, dm, kout, vout, n, N, (size_t)O * D, D);
}

// ================================================================================================
// retraction (Newton–Schulz on the Gram matrix, retract.h) and the orthogonality monitor
// ================================================================================================
// scale[0] = sqrt(r / ||X||_F^2) (0 when X = 0: then X stays 0, as the CPU's early return)
__global__ void __launch_bounds__(1024) frob_scale_kernel(float *scale, const float *X, size_t n, int r) {
    __shared__ double sh[1024];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += 1024) s += (double)X[i] * X[i];
    double ss = block_sum_d(s, sh);
    if (threadIdx.x == 0) scale[0] = ss == 0 ? 0.0f : (float)sqrt((double)r / ss);
}
__global__ void scale_by_kernel(float *X, const float *scale, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) X[i] *= scale[0];
}
// M [r, r] += b A + a I   (M already holds c A^2)
__global__ void ns_poly_kernel(float *M, const float *A, int r, float a, float b) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)r * r) return;
    M[i] += b * A[i];
    if (i / r == i % r) M[i] += a;
}
static size_t cu_retract_scratch_size(int rows, int r) { return 2 * (size_t)r * r + (size_t)rows * r; }
static void cu_retract(real *X, int rows, int r, int iters, real *scratch) {
    // X [rows, r]; scratch: A [r, r] | M [r, r] | Y [rows, r] (device)
    size_t n = (size_t)rows * r;
    if (n == 0) return;
    float *A = scratch, *M = A + (size_t)r * r, *Y = M + (size_t)r * r;
    float *scale = (float *)dm_scratch(SCR_MISC, 3 * sizeof(float));  // Frobenius | guard on A | guard on X
    frob_scale_kernel<<<1, 1024, 0, dm_stream>>>(scale, X, n, r);
    cudaLaunchCheck();
    scale_by_kernel<<<ceil_div(n, 256), 256, 0, dm_stream>>>(X, scale, n);
    cudaLaunchCheck();
    for (int it = 0; it < iters; it++) {  // fp32 always: the fixed point at 1 needs the digits
        dm_gemm(1, 0, r, r, rows, 1, X, r, X, r, 0, A, r, 0);         // A = X^T X
        if (it == 0) {  // sigma_max <= 1.5 (retract.c): A and X scaled by the Gershgorin guard
            gersh_scale_kernel<<<1, 256, 0, dm_stream>>>(scale + 1, scale + 2, A, r);
            cudaLaunchCheck();
            scale_by_kernel<<<ceil_div((long long)r * r, 256), 256, 0, dm_stream>>>(A, scale + 1, (size_t)r * r);
            cudaLaunchCheck();
            scale_by_kernel<<<ceil_div(n, 256), 256, 0, dm_stream>>>(X, scale + 2, n);
            cudaLaunchCheck();
        }
        dm_gemm(0, 0, r, r, r, 0.375f, A, r, A, r, 0, M, r, 0);       // M = c A^2
        ns_poly_kernel<<<ceil_div((long long)r * r, 256), 256, 0, dm_stream>>>(M, A, r, 1.875f, -1.25f);
        cudaLaunchCheck();
        dm_gemm(0, 0, rows, r, r, 1, X, r, M, r, 0, Y, r, 0);         // Y = X M
        cudaCheck(cudaMemcpyAsync(X, Y, sizeof(float) * n, cudaMemcpyDeviceToDevice, dm_stream));
    }
}
// orth_terms_kernel: cuda_common.cuh (the optimizer's gated retraction uses it too)
__global__ void __launch_bounds__(1024) sum_d_kernel(double *out, const double *x, size_t n) {
    __shared__ double sh[1024];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += 1024) s += x[i];
    double t = block_sum_d(s, sh);
    if (threadIdx.x == 0) out[0] = t;
}
static double cu_orth_error(const real *X, int rows, int r) {
    if (r <= 0) return 0;
    double *err = (double *)dm_scratch(SCR_MISC, sizeof(double) * ((size_t)r * r + 1));
    orth_terms_kernel<<<dim3(ceil_div(r, 64), r), 64, 0, dm_stream>>>(err, X, rows, r);  // r <= 65535: shape_limits.h
    cudaLaunchCheck();
    sum_d_kernel<<<1, 1024, 0, dm_stream>>>(err + (size_t)r * r, err, (size_t)r * r);
    cudaLaunchCheck();
    double tot = 0;
    cu_download(&tot, err + (size_t)r * r, sizeof tot);
    return sqrt(tot) / r;
}

// ================================================================================================
// the table
// ================================================================================================
static Backend cuda_backend;
void cuda_fused_fill(Backend *b);  // fused_cuda.cu: the fused element-wise ops of the looped block
void cuda_describe(char *buf, size_t n);  // device_cuda.cu
extern "C" double cuda_peak_bf16_tflops(void);

extern "C" void cuda_set_precision(int fp32) {
    dm_fp32 = fp32 ? 1 : 0;
    if (dm_cublas)  // pedantic for fp32: no TF32, no reduced-precision split reductions
        cublasCheck(cublasSetMathMode(dm_cublas, dm_fp32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
}

extern "C" const Backend *backend_cuda(int device, char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        // With no NVIDIA driver at all the runtime says "driver version is insufficient", which
        // reads as "upgrade the driver": say there is none when libcuda.so.1 did not load.
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        int no_driver = e != cudaSuccess && !drv;
        if (drv) dlclose(drv);  // (NOLOAD still counts a reference)
        if (no_driver)
            snprintf(why, n, "no CUDA device visible (no NVIDIA driver here: libcuda.so.1 is not installed or did not "
                     "load; the runtime said: %s): use :device cpu", cudaGetErrorString(e));
        else
            snprintf(why, n, "no CUDA device visible (%s): use :device cpu",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(why, n, "cuda:%d does not exist (%d device%s visible)", device, count, count == 1 ? "" : "s");
        return NULL;
    }
    // one device per process: the handle, stream and workspace below belong to the first one
    static int bound_device = -1;
    if (bound_device >= 0 && device != bound_device) {
        snprintf(why, n, "this process already runs on cuda:%d; one CUDA device per dmsh process (start another "
                 "dmsh for cuda:%d)", bound_device, device);
        return NULL;
    }
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaSetDevice(%d) failed: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    if (!dm_cublas) {
        cublasStatus_t s = cublasCreate(&dm_cublas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            dm_cublas = NULL;
            snprintf(why, n, "cublasCreate failed: %s", cublasGetStatusString(s));
            return NULL;
        }
        cudaCheck(cudaStreamCreate(&dm_stream));  // see dm_stream
        cublasCheck(cublasSetStream(dm_cublas, dm_stream));
        // a fixed workspace (set after the stream: cublasSetStream resets it): cuBLAS never
        // allocates inside a captured step, and its algorithm choice cannot depend on free memory
        static void *cublas_ws = NULL;
        cudaError_t we = cudaMalloc(&cublas_ws, CUBLAS_WS_BYTES);
        if (we != cudaSuccess) {  // a device another process holds: said, and nothing changes
            (void)cudaGetLastError();  // (not left as the "last error" for the next launch check)
            cublasDestroy(dm_cublas), dm_cublas = NULL;
            cudaStreamDestroy(dm_stream), dm_stream = 0;
            snprintf(why, n, "cuda:%d cannot hold cuBLAS's %d MiB workspace (%s): the device's memory is taken", device,
                     (int)(CUBLAS_WS_BYTES >> 20), cudaGetErrorString(we));
            return NULL;
        }
        cublasCheck(cublasSetWorkspace(dm_cublas, cublas_ws, CUBLAS_WS_BYTES));
        mem_note(cublas_ws, CUBLAS_WS_BYTES);
        cuda_set_precision(dm_fp32);
        bound_device = device;
    }
    Backend *b = &cuda_backend;
    b->name = "cuda";
    b->alloc = cu_alloc; b->free = cu_free; b->zero = cu_zero;
    b->upload = cu_upload; b->download = cu_download;
    b->matmul_forward = cu_matmul_forward; b->matmul_backward = cu_matmul_backward; b->gemm = cu_gemm;
    b->rmsnorm_forward = cu_rmsnorm_forward; b->rmsnorm_backward = cu_rmsnorm_backward;
    b->l2norm_forward = cu_l2norm_forward; b->l2norm_backward = cu_l2norm_backward;
    b->silu_forward = cu_silu_forward; b->silu_backward = cu_silu_backward;
    b->sigmoid_forward = cu_sigmoid_forward; b->sigmoid_backward = cu_sigmoid_backward;
    b->embedding_forward = cu_embedding_forward; b->embedding_backward = cu_embedding_backward;
    b->softmax_ce_forward = cu_softmax_ce_forward; b->softmax_ce_backward = cu_softmax_ce_backward;
    b->engram_rows = cu_engram_rows; b->engram_gather = cu_engram_gather; b->engram_scatter = cu_engram_scatter;
    b->kda_fixed_chunk = 16;  // kda_chunk_core.h's KDA_GC (kda_chunk_cuda.cu: the config's chunk is the CPU's)
    b->kda_ws_size = cuda_kda_ws_size; b->kda_forward = cuda_kda_forward;
    b->kda_backward = cuda_kda_backward; b->kda_step = cuda_kda_step;
    b->moe_ws_size = cuda_moe_ws_size; b->moe_forward = cuda_moe_forward; b->moe_backward = cuda_moe_backward;
    b->moe_route_read = cuda_moe_route_read;  // (no moe_forward_routed: CUDA is never the parity reference)
    b->retract_scratch_size = cu_retract_scratch_size; b->retract = cu_retract; b->orth_error = cu_orth_error;
    // optimizer ops (optim_cuda.cu)
    b->opt_sumsq = cuda_opt_sumsq; b->opt_decide = cuda_opt_decide; b->opt_clip = cuda_opt_clip;
    b->opt_adamw = cuda_opt_adamw; b->opt_adam_rows_ws_size = cuda_opt_adam_rows_ws_size;
    b->opt_adam_rows = cuda_opt_adam_rows; b->opt_muon_scratch_size = cuda_opt_muon_scratch_size;
    b->opt_muon = cuda_opt_muon; b->opt_retract_scratch_size = cuda_opt_retract_scratch_size;
    b->opt_retract = cuda_opt_retract;
    cuda_fused_fill(b);
    cuda_graph_fill(b);  // graph_cuda.cu: the step's bookkeeping ops, staging, graphs
    b->describe = cuda_describe; b->mem_stats = cu_mem_stats; b->mem_peak_set = cu_mem_peak_set; b->set_precision = cuda_set_precision;
    b->peak_tflops = cuda_peak_bf16_tflops;
    b->shape_check = cuda_shape_check;  // shape_limits.h
    return b;
}
#endif  // DM_DOUBLE
