// cuemu.h — a CPU stand-in for the slice of CUDA that kernels/cuda/ uses, so the CUDA backend's
// own sources run (and are checked against the CPU backend) on a machine without a GPU.
//
// What it is: every thread of a block is a fiber (its own stack) on one OS thread; a block runs
// its threads in turn until each reaches __syncthreads() or exits, then the barrier opens. Blocks
// of a grid run one after another, and every stream operation waits in issue order until the
// host synchronises with it, as a GPU runs behind the host (CUEMU_DEFER=0: at once); inside a
// stream capture it is recorded into the graph and runs at each replay. cuBLAS products
// run through OpenBLAS in fp32 (bf16 operands converted exactly); cub's radix sort is a stable
// host sort; wmma fragments hold a whole 16 x 16 tile in every thread of the warp.
//
// What it checks beyond "the same numbers as the CPU": launch configurations (block size, grid
// limits, a block above the kernel's __launch_bounds__ or, without one, above 256 threads, dynamic
// shared memory above 48 KiB without the opt-in attribute), wmma operands (32-byte aligned, ldm a
// multiple of 16 bytes), a host that touches pinned staging or downloads before waiting for the
// device (the deferred queue gives it what a GPU would), threads of one block
// waiting at different __syncthreads() (a divergent barrier), memory copies whose ranges are not
// the kind the copy says (a host pointer passed as device memory, a pageable host buffer inside a
// capture), the operations a global-mode capture forbids (allocation, synchronisation), and the
// graph semantics themselves (a replay runs the kernels with the arguments captured, reads pinned
// host buffers when it runs). Fresh device allocations and shared memory (dynamic, and static at
// each block's start) are filled with NaN bytes, so a read before a write shows. CUEMU_ORDER=rev runs the threads of every phase and
// the blocks of every grid in reverse order: a race between threads of one phase, or between
// blocks, changes the result between the two orders.
//
// What it cannot say: anything about speed, the real hardware's bf16 / tensor-core rounding,
// memory-model effects between streams, or warp-synchronous code (there is none in kernels/cuda/).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <tuple>
#include <utility>
#include <type_traits>
#include <functional>

// ---- the CUDA keywords ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
// __launch_bounds__(N) on a kernel: tests/cuemu/cu2cpp.py registers N under the kernel's name (a
// line appended to the converted file, emu_register_bounds); a launch with more threads per block
// fails as it does on a GPU
#define __launch_bounds__(...)
int emu_register_bounds(const char *kernel, int max_threads);
// what a GPU would refuse or fault on, caught in the emulator: the message, exit status 3
[[noreturn]] void emu_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// 1 unless CUEMU_DEFER=0: queued ops run when the host synchronises with them (cuemu.cpp)
int emu_defer_on(void);
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static   // one copy per kernel: blocks run one at a time (see the file comment)
#define __constant__

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
extern dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim

// barriers: the file and line name the barrier (threads must meet at the same one)
int emu_barrier(const char *file, int line, int kind, int pred);
#define __syncthreads() ((void)emu_barrier(__FILE__, __LINE__, 0, 0))
#define __syncthreads_count(p) emu_barrier(__FILE__, __LINE__, 1, (p) ? 1 : 0)
#define __syncthreads_or(p) emu_barrier(__FILE__, __LINE__, 2, (p) ? 1 : 0)
#define __syncthreads_and(p) emu_barrier(__FILE__, __LINE__, 3, (p) ? 1 : 0)
#define __syncwarp(...) ((void)0)
#define __threadfence() ((void)0)
extern unsigned char emu_dyn_smem[];  // dynamic shared memory (extern __shared__ arrays point here)
// a static __shared__ array: NaN bytes at the first pass of each block (cu2cpp.py adds the call)
void emu_shared_poison(void *p, size_t n);
#define EMU_SHARED_POISON(a) emu_shared_poison((void *)(a), sizeof(a))
int64_t emu_globaltimer(void);

template <typename T> inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <typename T> inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0 ? 0 : x > 1 ? 1 : x; }
// CUDA's min / max overloads for any two arithmetic types (the usual conversions)
template <typename A, typename B> inline typename std::common_type<A, B>::type min(A a, B b) { return b < a ? b : a; }
template <typename A, typename B> inline typename std::common_type<A, B>::type max(A a, B b) { return a < b ? b : a; }
template <typename T> inline T __ldg(const T *p) { return *p; }

// ---- runtime types ----
typedef enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorInvalidDevice = 101, cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600, cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906, cudaErrorIllegalState = 401, cudaErrorLaunchFailure = 719,
    cudaErrorNoDevice = 100, cudaErrorLaunchOutOfResources = 701, cudaErrorNotSupported = 801
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;
typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9  // a hint (percent of the unified L1 / shared memory)
} cudaFuncAttribute;
enum { cudaSharedmemCarveoutDefault = -1, cudaSharedmemCarveoutMaxShared = 100, cudaSharedmemCarveoutMaxL1 = 0 };
typedef enum cudaDeviceAttr {
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76
} cudaDeviceAttr;
struct EmuStream;
struct EmuEvent;
struct EmuGraph;
struct EmuGraphExec;
typedef EmuStream *cudaStream_t;
typedef EmuEvent *cudaEvent_t;
typedef EmuGraph *cudaGraph_t;
typedef EmuGraphExec *cudaGraphExec_t;
#define cudaHostAllocDefault 0u
#define cudaEventDefault 0u
#define cudaEventDisableTiming 2u
#define cudaEventRecordDefault 0u
#define cudaEventRecordExternal 1u
#define cudaStreamDefault 0u
#define cudaStreamNonBlocking 1u
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
    int major, minor, multiProcessorCount, maxThreadsPerBlock, warpSize, clockRate, memoryClockRate,
        memoryBusWidth, l2CacheSize;
};

// the runtime API: C linkage, as the real one (plain C programs such as tests/gpu/bench_gpu.c call it)
extern "C" {
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0);
cudaError_t cudaMemset(void *d, int v, size_t n);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st = 0);
cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind k, cudaStream_t st = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned f);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphUpload(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
}  // extern "C"
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
template <typename T> inline cudaError_t cudaHostAlloc(T **p, size_t n, unsigned f) { return cudaHostAlloc((void **)p, n, f); }
cudaError_t emu_func_set_attribute(const char *kernel, cudaFuncAttribute a, int v);
#define cudaFuncSetAttribute(f, a, v) emu_func_set_attribute(#f, a, v)  // by the kernel's name
// A kernel's registers and occupancy: the emulator has neither, and says so (cudaErrorNotSupported)
struct cudaFuncAttributes { size_t sharedSizeBytes, constSizeBytes, localSizeBytes; int maxThreadsPerBlock, numRegs; };
cudaError_t emu_not_supported(const char *what);
#define cudaFuncGetAttributes(attr, f) ((void)(attr), emu_not_supported("cudaFuncGetAttributes(" #f ")"))
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, smem) \
    ((void)(n), (void)(threads), (void)(smem), emu_not_supported("cudaOccupancyMaxActiveBlocksPerMultiprocessor(" #f ")"))

// ---- stream operations (the emulator's own interface; cuBLAS and cub use it too) ----
// Runs `op` now, or records it when `s` is being captured. Returns the error a real runtime
// would give (an operation on the legacy stream during a global capture, say).
cudaError_t emu_enqueue(cudaStream_t s, std::function<void()> op, const char *what);
void emu_fail_capture(cudaError_t e, const char *what);  // a forbidden call inside a capture
int emu_is_capturing(void);
// the memory checks: kind 0 device, 1 pinned host, 2 pageable (neither); n bytes from p
int emu_mem_kind(const void *p, size_t n);

// ---- kernel launch: `k<<<grid, block, smem, stream>>>(args)` is rewritten (cu2cpp.sh) to
// `EMU_LAUNCH(k, grid, block, smem, stream)(args)`. The kernel is called through a generic lambda,
// so a kernel template deduces its arguments as nvcc would; the arguments are copied at the
// launch, as CUDA does (a captured graph keeps them). Kernels are named by their spelling (the
// dynamic shared memory attribute is set and checked per name).
cudaError_t emu_launch_grid(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t st, std::function<void()> body);
template <typename L> struct EmuLauncher {
    const char *name;
    L lam;
    dim3 g, b;
    size_t smem;
    cudaStream_t st;
    template <typename... A> void operator()(A &&...a) const {
        std::tuple<typename std::decay<A>::type...> args(std::forward<A>(a)...);
        L l = lam;
        emu_launch_grid(name, g, b, smem, st, [l, args]() { std::apply(l, args); });
    }
};
template <typename L>
inline EmuLauncher<L> emu_launch_any(const char *name, L lam, dim3 g, dim3 b, size_t smem = 0, cudaStream_t st = 0) {
    return EmuLauncher<L>{name, lam, g, b, smem, st};
}
#define EMU_LAUNCH(K, ...) emu_launch_any(#K, [](auto... emu_a) { K(emu_a...); }, __VA_ARGS__)
