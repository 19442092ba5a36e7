// backend_cuda.cu — the CUDA backend (SPEC §8). Not implemented yet: this file exists so the
// build proves nvcc and cuBLAS link, and so selecting CUDA fails loudly instead of silently
// falling back to the CPU.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdio.h>
extern "C" {
#include "../backend.h"
}

extern "C" const Backend *backend_cuda(int device, char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device visible (%s): use :device cpu", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(why, n, "cuda:%d does not exist (%d device%s visible)", device, count, count == 1 ? "" : "s");
        return NULL;
    }
    snprintf(why, n, "the CUDA backend is not built yet (kernels/cuda is a stub; issue 5): use :device cpu");
    return NULL;
}
