// cuemu's stand-in for <cuda_runtime_api.h> (see cuemu.h). From C (tests/gpu/bench_gpu.c) only
// the runtime calls a plain C program makes are declared; the definitions have C linkage.
#pragma once
#ifdef __cplusplus
#include "cuemu.h"
#else
#include <stddef.h>
typedef enum cudaError { cudaSuccess = 0 } cudaError_t;
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot);
cudaError_t cudaDeviceSynchronize(void);
#endif
