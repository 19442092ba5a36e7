// backend_none.c — linked instead of backend_cuda.cu when nvcc is absent.
#include <stdio.h>
#include "../backend.h"

const Backend *backend_cuda(int device, char *why, size_t n) {
    (void)device;
    snprintf(why, n, "this dmsh was built without CUDA (nvcc not found at build time): use :device cpu");
    return NULL;
}
