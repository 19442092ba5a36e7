// device_cuda.cu — what `:show device` and `:bench` say about the GPU: name, memory, compute
// capability, and two peak rates MEASURED on this device the first time they are asked for
// (a bf16 cuBLAS product of 8192^3 and a device-to-device copy of 1 GiB, best of 5 each,
// cudaEvent timing), plus the memory the backend holds through its allocator. The peaks are the
// denominators of the GPU MFU and bandwidth figures in docs/perf.md.
#include "cuda_common.cuh"

#ifndef DM_DOUBLE

static double peak_bf16_tflops = -1, peak_copy_gbs = -1;

// Best-of-5 time (ms) of the work `fn` enqueues on dm_stream.
template <typename F> static float best_ms(F fn) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    fn();  // warm-up (cuBLAS heuristics, clocks)
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        cudaCheck(cudaEventRecord(a, dm_stream));
        fn();
        cudaCheck(cudaEventRecord(b, dm_stream));
        cudaCheck(cudaEventSynchronize(b));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        best = ms < best ? ms : best;
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return best;
}

// The device's reachable rates, measured once (a few hundred ms on an H200). A smaller product
// when memory is short: the rate is still the bf16 tensor-core rate of this device.
static void measure_peaks(void) {
    if (peak_bf16_tflops >= 0) return;
    size_t fr = 0, tot = 0;
    cudaCheck(cudaMemGetInfo(&fr, &tot));
    int n = 8192;
    while (n > 1024 && (size_t)3 * n * n * 2 + ((size_t)1 << 30) > fr) n /= 2;
    __nv_bfloat16 *A, *B;
    float *C;
    cudaCheck(cudaMalloc(&A, (size_t)n * n * 2));
    cudaCheck(cudaMalloc(&B, (size_t)n * n * 2));
    cudaCheck(cudaMalloc(&C, (size_t)n * n * 4));
    cudaCheck(cudaMemsetAsync(A, 0, (size_t)n * n * 2, dm_stream));
    cudaCheck(cudaMemsetAsync(B, 0, (size_t)n * n * 2, dm_stream));
    const float one = 1, zero = 0;
    float ms = best_ms([&] {
        cublasCheck(cublasGemmEx(dm_cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B,
                                 CUDA_R_16BF, n, &zero, C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    peak_bf16_tflops = 2.0 * n * n * (double)n / (ms * 1e-3) / 1e12;
    cudaCheck(cudaFree(A));
    cudaCheck(cudaFree(B));
    cudaCheck(cudaFree(C));
    size_t bytes = (size_t)1 << 30;
    if (2 * bytes + ((size_t)1 << 28) > fr) bytes = fr / 4;
    char *s, *d;
    cudaCheck(cudaMalloc(&s, bytes));
    cudaCheck(cudaMalloc(&d, bytes));
    ms = best_ms([&] { cudaCheck(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, dm_stream)); });
    peak_copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;  // read + write
    cudaCheck(cudaFree(s));
    cudaCheck(cudaFree(d));
}

extern "C" double cuda_peak_bf16_tflops(void) { measure_peaks(); return peak_bf16_tflops; }

void cuda_describe(char *buf, size_t n) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    size_t fr = 0, tot = 0;
    cudaCheck(cudaMemGetInfo(&fr, &tot));
    measure_peaks();
    extern int dm_fp32;
    snprintf(buf, n,
             "cuda:%d: %s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free); measured peaks: "
             "bf16 GEMM %.0f TFLOP/s, device copy %.0f GB/s; matrix products %s",
             dev, p.name, p.major, p.minor, p.multiProcessorCount, tot / 1073741824.0, fr / 1073741824.0,
             peak_bf16_tflops, peak_copy_gbs, dm_fp32 ? "fp32 (pedantic)" : "bf16 operands, fp32 accumulate");
}

#endif  // DM_DOUBLE
