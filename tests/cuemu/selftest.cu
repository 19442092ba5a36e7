// selftest.cu — cuemu's own checks (make cuemu-check runs it first): each thing the emulator
// claims to catch is provoked here and must be caught, and each CUDA behaviour the backend relies
// on must be reproduced. Built like the backend (tests/cuemu/cu2cpp.py, then C++ against
// tests/cuemu/include); `selftest divergent` runs a kernel with a divergent barrier, and
// `selftest wmma-align` / `selftest wmma-ldm` a wmma load from a 16-byte (not 32-byte) aligned
// pointer / with a leading dimension of 24 bytes: each must end the process with cuemu's message
// (the harness checks its exit status and text).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <mma.h>
#include <cub/cub.cuh>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static int fails = 0;
static void check(const char *what, int ok) {
    printf("  %-66s %s\n", what, ok ? "PASS" : "FAIL");
    fails += !ok;
}

// a block sum with the barrier after the store left out: thread tid reads sh[tid + s] in the
// same phase another thread writes it — in forward order the reader runs first, in reverse the
// writer: the two orders must disagree (the harness runs both and compares this row's value)
__global__ void racy_sum(float *out, const float *x) {
    __shared__ float sh[64];
    int t = threadIdx.x;
    sh[t] = x[t];
    for (int s = 32; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0) *out = sh[0];
}
__global__ void good_sum(float *out, const float *x) {
    __shared__ float sh[64];
    int t = threadIdx.x;
    sh[t] = x[t];
    __syncthreads();
    for (int s = 32; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0) *out = sh[0];
}
__global__ void count_kernel(int *out, int k) {
    int c = __syncthreads_count((int)threadIdx.x < k);
    int o = __syncthreads_or((int)threadIdx.x == k);
    if (threadIdx.x == 0) { out[0] = c; out[1] = o; }
}
__global__ void divergent(int *out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void idx_kernel(int *out) {  // every thread of a 3-D grid of 3-D blocks writes its linear id
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;
}
__global__ void dyn_kernel(float *out) {
    extern __shared__ float dyn[];
    out[threadIdx.x] = dyn[threadIdx.x];  // never written: must read NaN bytes
}
__global__ void shared_unwritten(float *out) {  // block 0 writes all of sh, block 1 only sh[1]
    __shared__ float sh[8];
    if (blockIdx.x == 0 || threadIdx.x == 1) sh[threadIdx.x] = 1.0f;
    __syncthreads();
    out[blockIdx.x * 8 + threadIdx.x] = sh[threadIdx.x];
}
__global__ void add_scalar(float *x, float a, const float *hp) { x[threadIdx.x] += a + *hp; }
#define SELF_BOUND 64
__global__ void __launch_bounds__(SELF_BOUND) bounded(int *out) { out[threadIdx.x] = 1; }
__global__ void __launch_bounds__(SELF_BOUND, 2)
bounded2(int *out) { out[threadIdx.x] = 2; }  // the name on the next line, a minimum of blocks
__global__ void wmma_kernel(float *c, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int lda = 16) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    float *dx, *dout;
    cudaMalloc(&dx, 64 * sizeof(float));
    cudaMalloc(&dout, 1024 * sizeof(float));
    if (argc > 1 && !strcmp(argv[1], "divergent")) {
        divergent<<<1, 32>>>((int *)dout);
        cudaDeviceSynchronize();
        printf("divergent barrier ran to the end\n");
        return 0;
    }
    if (argc > 1 && (!strcmp(argv[1], "wmma-align") || !strcmp(argv[1], "wmma-ldm"))) {
        __nv_bfloat16 *da;
        cudaMalloc(&da, 1024 * sizeof(__nv_bfloat16));  // cudaMalloc: 256-byte aligned
        if (!strcmp(argv[1], "wmma-align")) wmma_kernel<<<1, 32>>>(dout, da + 8, da);  // 16 bytes in
        else wmma_kernel<<<1, 32>>>(dout, da, da, 12);                               // ldm 24 bytes
        cudaDeviceSynchronize();
        printf("misplaced wmma operand ran to the end\n");
        return 0;
    }
    printf("cuemu self-test (order %s)\n", getenv("CUEMU_ORDER") ? getenv("CUEMU_ORDER") : "fwd");
    float hx[64], r;
    for (int i = 0; i < 64; i++) hx[i] = (float)((i * 37) % 11) - 4.5f;  // not zeros, not all equal
    cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice);
    double want = 0;
    for (int i = 0; i < 64; i++) want += hx[i];
    good_sum<<<1, 64>>>(dout, dx);
    cudaMemcpy(&r, dout, 4, cudaMemcpyDeviceToHost);
    check("a correctly synchronised block sum is exact", r == (float)want);
    racy_sum<<<1, 64>>>(dout, dx);
    cudaMemcpy(&r, dout, 4, cudaMemcpyDeviceToHost);
    printf("  racy sum: %.1f (the correct sum is %.1f)\n", r, want);  // the harness compares orders

    int hc[2];
    count_kernel<<<1, 256>>>((int *)dout, 77);
    cudaMemcpy(hc, dout, sizeof hc, cudaMemcpyDeviceToHost);
    check("__syncthreads_count and __syncthreads_or", hc[0] == 77 && hc[1] == 1);

    int *didx, hidx[2 * 3 * 2 * 4 * 2 * 3];
    cudaMalloc(&didx, sizeof hidx);
    idx_kernel<<<dim3(2, 3, 2), dim3(4, 2, 3)>>>(didx);
    cudaMemcpy(hidx, didx, sizeof hidx, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int b = 0; b < 12; b++)
        for (int t = 0; t < 24; t++) ok &= hidx[b * 24 + t] == b * 1000 + t;
    check("3-D grids and blocks: every (block, thread) index once", ok);

    cudaGetLastError();
    good_sum<<<1, 2048>>>(dout, dx);
    check("a 2048-thread block is refused (cudaErrorInvalidConfiguration)", cudaGetLastError() == cudaErrorInvalidConfiguration);
    good_sum<<<dim3(1, 70000), 64>>>(dout, dx);
    check("grid.y > 65535 is refused", cudaGetLastError() == cudaErrorInvalidConfiguration);
    bounded<<<1, 2 * SELF_BOUND>>>((int *)dout);
    check("more threads than the kernel's __launch_bounds__ is refused (out of resources)",
          cudaGetLastError() == cudaErrorLaunchOutOfResources);
    bounded<<<1, SELF_BOUND>>>((int *)dout);
    check("... and as many runs", cudaGetLastError() == cudaSuccess);
    bounded2<<<1, 2 * SELF_BOUND>>>((int *)dout);
    check("... also a bound with a minimum of blocks, the kernel's name on the next line",
          cudaGetLastError() == cudaErrorLaunchOutOfResources);
    idx_kernel<<<1, 512>>>((int *)dout);  // no __launch_bounds__: 256 threads at most (the project's rule)
    check("512 threads for a kernel without __launch_bounds__ is refused (project rule)",
          cudaGetLastError() == cudaErrorLaunchOutOfResources);
    dyn_kernel<<<1, 32, 64 * 1024>>>(dout);
    check("64 KiB of dynamic shared memory without the attribute is refused", cudaGetLastError() == cudaErrorInvalidValue);
    cudaFuncSetAttribute(dyn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    dyn_kernel<<<1, 32, 64 * 1024>>>(dout);
    float hd[32];
    cudaMemcpy(hd, dout, sizeof hd, cudaMemcpyDeviceToHost);
    check("... and runs with it; unwritten shared memory reads as NaN", cudaGetLastError() == cudaSuccess && isnan(hd[0]) && isnan(hd[31]));
    shared_unwritten<<<2, 8>>>(dout);
    cudaMemcpy(hd, dout, 16 * sizeof(float), cudaMemcpyDeviceToHost);
    check("a block's unwritten static shared memory reads as NaN (not the last block's values)",
          hd[0] == 1.0f && hd[7] == 1.0f && isnan(hd[8]) && hd[9] == 1.0f && isnan(hd[15]));
    float *fresh;
    cudaMalloc(&fresh, 16);
    cudaMemcpy(hd, fresh, 16, cudaMemcpyDeviceToHost);
    check("a fresh device allocation reads as NaN", isnan(hd[0]) && isnan(hd[3]));
    check("a copy whose kind does not match its pointers is refused",
          cudaMemcpy(hd, dout, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    check("a copy running past the end of an allocation is refused",
          cudaMemcpy(hd, fresh, 32, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);

    // capture: arguments by value at capture time, pinned memory read at replay time
    cudaStream_t s;
    cudaStreamCreate(&s);
    float *pin, *dv;
    cudaHostAlloc(&pin, 4 * sizeof(float), cudaHostAllocDefault);
    cudaMalloc(&dv, 32 * sizeof(float));
    cudaMemsetAsync(dv, 0, 32 * sizeof(float), s);
    float *dhp = dv + 16;  // the "hyperparameter" slot the graph uploads into
    pin[0] = 10.0f;
    float arg = 1.0f;
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    cudaMemcpyAsync(dhp, pin, sizeof(float), cudaMemcpyHostToDevice, s);
    add_scalar<<<1, 4, 0, s>>>(dv, arg, dhp);
    cudaError_t ec = cudaStreamEndCapture(s, &g);
    cudaMemcpy(hd, dv, 16, cudaMemcpyDeviceToHost);
    check("a captured op does not run at capture", ec == cudaSuccess && hd[0] == 0.0f);
    cudaGraphInstantiate(&x, g, 0);
    arg = 100.0f;      // a later change of a host variable: the graph keeps 1
    pin[0] = 20.0f;    // a later change of the pinned buffer: the replay reads 20
    cudaGraphLaunch(x, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(hd, dv, 16, cudaMemcpyDeviceToHost);
    check("a replay uses the captured arguments and reads pinned memory when it runs", hd[0] == 21.0f && hd[3] == 21.0f);
    pin[0] = 5.0f;
    cudaGraphLaunch(x, s);
    cudaGraphExecDestroy(x);  // CUDA: returns at once, the executable freed when its launch is done
    cudaStreamSynchronize(s);
    cudaMemcpy(hd, dv, 16, cudaMemcpyDeviceToHost);
    check("a graph executable destroyed right after its launch still runs it", hd[0] == 27.0f && hd[3] == 27.0f);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    void *tmp;
    cudaError_t em = cudaMalloc(&tmp, 16);
    cudaError_t es = cudaStreamSynchronize(s);
    ec = cudaStreamEndCapture(s, &g);
    check("cudaMalloc / stream sync inside a capture fail and invalidate it",
          em == cudaErrorStreamCaptureUnsupported && es == cudaErrorStreamCaptureUnsupported &&
          ec == cudaErrorStreamCaptureInvalidated && g == NULL);
    float hp4[4] = {1, 2, 3, 4};
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    cudaError_t ep = cudaMemcpyAsync(dv, hp4, sizeof hp4, cudaMemcpyHostToDevice, s);
    ec = cudaStreamEndCapture(s, &g);
    check("a copy from pageable memory inside a capture fails", ep != cudaSuccess && ec == cudaErrorStreamCaptureInvalidated);

    // the device behind the host (the default; CUEMU_DEFER=0 runs ops at once): what the host does
    // before a wait, the device sees; what the device writes, the host sees at the wait
    if (emu_defer_on()) {
        float *pin2, *dd;
        cudaHostAlloc(&pin2, 16, cudaHostAllocDefault);
        cudaMalloc(&dd, 16);
        cudaEvent_t ev;
        cudaEventCreate(&ev);
        pin2[0] = 1;
        cudaMemcpyAsync(dd, pin2, 4, cudaMemcpyHostToDevice, s);
        pin2[0] = 2;  // rewritten before the copy ran: a GPU may read either; the emulator reads this
        cudaEventRecord(ev, s);
        cudaEventSynchronize(ev);
        cudaMemcpy(hd, dd, 4, cudaMemcpyDeviceToHost);
        check("deferred: a pinned source rewritten before its copy ran is read rewritten", hd[0] == 2.0f);
        pin2[0] = 3;
        cudaMemcpyAsync(dd, pin2, 4, cudaMemcpyHostToDevice, s);
        cudaEventRecord(ev, s);
        cudaEventSynchronize(ev);
        pin2[0] = 4;  // after the wait: the copy has read 3
        cudaMemcpy(hd, dd, 4, cudaMemcpyDeviceToHost);
        check("deferred: ... and rewritten after waiting for it, read as it was", hd[0] == 3.0f);
        pin2[1] = -1;
        cudaMemcpyAsync(pin2 + 1, dd, 4, cudaMemcpyDeviceToHost, s);
        int before = pin2[1] == -1.0f;
        cudaStreamSynchronize(s);
        check("deferred: a download into pinned memory lands at the wait, not before", before && pin2[1] == 3.0f);
        cudaEventDestroy(ev);
    }

    // wmma: bf16 16x16x16 against a plain loop
    __nv_bfloat16 ha[256], hb[256];
    float fa[256], fb[256], hcm[256];
    for (int i = 0; i < 256; i++) {
        ha[i] = __float2bfloat16((float)((i * 7) % 13) / 8 - 0.7f);
        hb[i] = __float2bfloat16((float)((i * 5) % 17) / 16 - 0.4f);
        fa[i] = __bfloat162float(ha[i]);
        fb[i] = __bfloat162float(hb[i]);
    }
    __nv_bfloat16 *da, *db;
    cudaMalloc(&da, sizeof ha);
    cudaMalloc(&db, sizeof hb);
    cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
    wmma_kernel<<<1, 32>>>(dout, da, db);
    cudaMemcpy(hcm, dout, sizeof hcm, cudaMemcpyDeviceToHost);
    double err = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double w = 1;
            for (int q = 0; q < 16; q++) w += (double)fa[i * 16 + q] * fb[j * 16 + q];  // B col-major
            err = fmax(err, fabs(w - hcm[i * 16 + j]));
        }
    check("wmma bf16 16x16x16 (A row-major, B col-major) = the plain product", err < 1e-5);
    check("bf16 rounds to nearest even", __bfloat162float(__float2bfloat16(1.0f + 1.0f / 256)) == 1.0f &&
          __bfloat162float(__float2bfloat16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);

    // cub: stable, only the requested bits
    uint64_t hk[6] = {0x105, 0x003, 0x205, 0x001, 0x003, 0x005}, hko[6];
    int hvi[6] = {0, 1, 2, 3, 4, 5}, hvo[6];
    uint64_t *dk;
    int *dvi;
    cudaMalloc(&dk, 2 * sizeof hk);
    cudaMalloc(&dvi, 2 * sizeof hvi);
    cudaMemcpy(dk, hk, sizeof hk, cudaMemcpyHostToDevice);
    cudaMemcpy(dvi, hvi, sizeof hvi, cudaMemcpyHostToDevice);
    size_t tb = 0;
    cub::DeviceRadixSort::SortPairs(NULL, tb, dk, dk + 6, dvi, dvi + 6, 6, 0, 8, s);
    void *dtmp;
    cudaMalloc(&dtmp, tb);
    cub::DeviceRadixSort::SortPairs(dtmp, tb, dk, dk + 6, dvi, dvi + 6, 6, 0, 8, s);
    cudaMemcpy(hko, dk + 6, sizeof hko, cudaMemcpyDeviceToHost);
    cudaMemcpy(hvo, dvi + 6, sizeof hvo, cudaMemcpyDeviceToHost);
    int want_v[6] = {3, 1, 4, 0, 2, 5};  // low byte 1, 3, 3, 5, 5, 5; equal keys in input order
    ok = 1;
    for (int i = 0; i < 6; i++) ok &= hvo[i] == want_v[i] && hko[i] == hk[want_v[i]];
    check("cub SortPairs: stable, sorted on bits [0, 8) only", ok);

    // cuBLAS: column-major C = A^T B against a loop, fp32
    float hA[6] = {1, 2, 3, 4, 5, 6}, hB[6] = {0.5f, -1, 2, 0.25f, 3, -2}, hC[4];  // A 3x2, B 3x2 col-major
    float *dA, *dB, *dC, one = 1, zero = 0;
    cudaMalloc(&dA, sizeof hA);
    cudaMalloc(&dB, sizeof hB);
    cudaMalloc(&dC, sizeof hC);
    cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB, sizeof hB, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, s);
    cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, dA, 3, dB, 3, &zero, dC, 2);
    cudaMemcpy(hC, dC, sizeof hC, cudaMemcpyDeviceToHost);
    ok = 1;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            float w = 0;
            for (int q = 0; q < 3; q++) w += hA[i * 3 + q] * hB[j * 3 + q];
            ok &= fabsf(w - hC[j * 2 + i]) < 1e-6f;
        }
    check("cublasSgemm (column-major, A transposed) = the plain product", ok);
    check("cublasSgemm on a host pointer is refused",
          cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, hA, 2, dB, 3, &zero, dC, 2) != CUBLAS_STATUS_SUCCESS);
    printf("selftest: %s\n", fails ? "FAIL" : "all rows pass");
    return fails ? 1 : 0;
}
