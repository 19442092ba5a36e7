// device_cuda.cu — what `:show device` and `:bench` say about the GPU: name, memory, compute
// capability, and two peak rates MEASURED on this device the first time they are asked for
// (a bf16 cuBLAS product of 8192^3 and a device-to-device copy of 1 GiB, each the median of 10
// after 200 ms of warm-up, cudaEvent timing), plus the memory the backend holds through its allocator. The peaks are the
// denominators of the GPU MFU and bandwidth figures in docs/perf.md.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

static double peak_bf16_tflops = -1, peak_copy_gbs = -1;

// Steady time (ms) of the work `fn` enqueues on dm_stream: the median of 10 single runs, after at
// least 200 ms of the same work (doubling batches, at most 4095 runs). Why not a best of a few from
// cold: an idle card sits at low clocks (this workplace's H200 read 345 MHz SM idle, 1980 MHz after
// products), so a few milliseconds of warm-up can time the ramp and understate the peak, and every
// MFU divided by it would be too high; and a best-of picks a transient boost, a median the rate the
// benchmark's warm steps run at (QA, session 32).
template <typename F> static float steady_ms(F fn) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    float warm = 0;
    for (int k = 1; warm < 200 && k <= 2048; k *= 2) {
        cudaCheck(cudaEventRecord(a, dm_stream));
        for (int i = 0; i < k; i++) fn();
        cudaCheck(cudaEventRecord(b, dm_stream));
        cudaCheck(cudaEventSynchronize(b));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        warm += ms;
    }
    enum { R = 10 };
    float t[R];
    for (int i = 0; i < R; i++) {
        cudaCheck(cudaEventRecord(a, dm_stream));
        fn();
        cudaCheck(cudaEventRecord(b, dm_stream));
        cudaCheck(cudaEventSynchronize(b));
        cudaCheck(cudaEventElapsedTime(&t[i], a, b));
    }
    for (int i = 1; i < R; i++)   // insertion sort of 10
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { float x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return 0.5f * (t[R / 2 - 1] + t[R / 2]);
}

// Operands of the peak product: uniform in [-1, 1) from a hash of the index. Not zeros: tensor
// cores multiplying zeros draw less power and hold higher clocks (an 8192^3 bf16 product was seen
// 13 % faster on zeros than on random data on an H200 of this workplace), which would make the
// MFU denominator optimistic and every MFU figure low.
__global__ void peak_fill_kernel(__nv_bfloat16 *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        p[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

// cudaMalloc that may fail: a device another process has filled is an answer, not a crash (the
// failure is cleared, or the next launch check would take it for its own and end the session)
static int try_malloc(void **p, size_t bytes) {
    if (cudaMalloc(p, bytes) == cudaSuccess) return 0;
    (void)cudaGetLastError();
    *p = NULL;
    return 1;
}

// Steady ms (steady_ms) of one bf16 product as dm_gemm runs it: row-major C[M, N] fp32 = op(A) op(B), the
// operands dense (leading dimension = their stored width), random. The peak's product, and
// bench_gpu's probe of the fused projection's three products at its width and padded; -1 when
// they do not fit.
static double gemm_bf16_ms(int tA, int tB, int M, int N, int K) {
    int ar = tA ? K : M, ac = tA ? M : K, br = tB ? N : K, bc = tB ? K : N;
    __nv_bfloat16 *A = NULL, *B = NULL;
    float *C = NULL;
    if (try_malloc((void **)&A, (size_t)ar * ac * 2) || try_malloc((void **)&B, (size_t)br * bc * 2) ||
        try_malloc((void **)&C, (size_t)M * N * 4)) {
        cudaFree(A); cudaFree(B); cudaFree(C);
        return -1;
    }
    peak_fill_kernel<<<1024, 256, 0, dm_stream>>>(A, (size_t)ar * ac, 0x9e3779b9u);
    cudaLaunchCheck();
    peak_fill_kernel<<<1024, 256, 0, dm_stream>>>(B, (size_t)br * bc, 0x7f4a7c15u);
    cudaLaunchCheck();
    const float one = 1, zero = 0;
    // the tensor-core rate whatever precision the session runs: precision=fp32 puts the handle
    // in pedantic math, which must not leak into (and shrink) the MFU denominator
    cublasMath_t mode;
    cublasCheck(cublasGetMathMode(dm_cublas, &mode));
    cublasCheck(cublasSetMathMode(dm_cublas, CUBLAS_DEFAULT_MATH));
    float ms = steady_ms([&] {
        // column-major C^T = op(B)^T op(A)^T, as dm_gemm
        cublasCheck(cublasGemmEx(dm_cublas, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                 &one, B, CUDA_R_16BF, bc, A, CUDA_R_16BF, ac, &zero, C, CUDA_R_32F, N,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    cublasCheck(cublasSetMathMode(dm_cublas, mode));
    cudaCheck(cudaFree(A));
    cudaCheck(cudaFree(B));
    cudaCheck(cudaFree(C));
    return ms;
}

// The device's reachable rates, measured once (a few hundred ms on an H200). A smaller product
// when memory is short: the rate is still the bf16 tensor-core rate of this device. With not even
// 8 MB free (another process holds the device) a rate stays unmeasured (-1), said as such, and is
// tried again the next time it is asked for.
static void measure_peaks(void) {
    if (peak_bf16_tflops >= 0 && peak_copy_gbs >= 0) return;
    size_t fr = 0, tot = 0;
    cudaCheck(cudaMemGetInfo(&fr, &tot));
    int n = 8192;
    // A and B bf16 (2 n^2 bytes each) and C fp32 (4 n^2): 8 n^2, plus 1 GiB of headroom
    while (n > 1024 && (size_t)8 * n * n + ((size_t)1 << 30) > fr) n /= 2;
    for (; peak_bf16_tflops < 0 && n >= 1024; n /= 2) {
        double ms = gemm_bf16_ms(0, 0, n, n, n);
        if (ms > 0) peak_bf16_tflops = 2.0 * n * n * (double)n / (ms * 1e-3) / 1e12;
    }
    size_t bytes = (size_t)1 << 30;
    if (2 * bytes + ((size_t)1 << 28) > fr) bytes = fr / 4;
    for (; peak_copy_gbs < 0 && bytes >= ((size_t)4 << 20); bytes /= 2) {
        char *s = NULL, *d = NULL;
        if (try_malloc((void **)&s, bytes) || try_malloc((void **)&d, bytes)) {
            cudaFree(s);
            continue;
        }
        float ms = steady_ms([&] { cudaCheck(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, dm_stream)); });
        peak_copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;  // read + write
        cudaCheck(cudaFree(s));
        cudaCheck(cudaFree(d));
    }
}

extern "C" double cuda_peak_bf16_tflops(void) { measure_peaks(); return peak_bf16_tflops; }
extern "C" double cuda_gemm_bf16_ms(int tA, int tB, int M, int N, int K) { return gemm_bf16_ms(tA, tB, M, N, K); }

void cuda_describe(char *buf, size_t n) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    size_t fr = 0, tot = 0;
    cudaCheck(cudaMemGetInfo(&fr, &tot));
    measure_peaks();
    extern int dm_fp32;
    char gemm[64], copy[64];
    if (peak_bf16_tflops >= 0) snprintf(gemm, sizeof gemm, "%.3g TFLOP/s", peak_bf16_tflops);
    else snprintf(gemm, sizeof gemm, "not measured (no free memory)");
    if (peak_copy_gbs >= 0) snprintf(copy, sizeof copy, "%.3g GB/s", peak_copy_gbs);
    else snprintf(copy, sizeof copy, "not measured (no free memory)");
    snprintf(buf, n,
             "cuda:%d: %s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free); measured peaks: "
             "bf16 GEMM %s, device copy %s; matrix products %s",
             dev, p.name, p.major, p.minor, p.multiProcessorCount, tot / 1073741824.0, fr / 1073741824.0, gemm, copy,
             dm_fp32 ? "fp32 (pedantic)" : "bf16 operands, fp32 accumulate");
}

#endif  // DM_DOUBLE
