// graph_cuda.cu — the training step as one unit on the device (SPEC §8, issue 5): the step's
// bookkeeping kernels (loss / objective, the per-step record), pinned staging and the uploads
// from it, and CUDA graphs by stream capture on dm_stream. engine/step.c drives them.
//
// Capture. graph_begin starts cudaStreamBeginCapture(dm_stream, global mode); every op the
// engine enqueues from then on is recorded into a graph instead of running; graph_end ends the
// capture, instantiates the graph and hands back the executable (cudaGraphExec_t). Inside a
// capture nothing may allocate, synchronise or copy through pageable memory: dm_scratch refuses
// to grow, upload/download refuse, and any CUDA or cuBLAS error (e.g. a stream synchronise the
// capture forbids) is recorded instead of ending the process — graph_end then returns NULL with
// the first such reason, the engine falls back to running the step eagerly and says why. None
// of the captured ops ran, so nothing needs undoing on the device.
//
// The input channel. upload_async is cudaMemcpyAsync from PINNED host memory (host_alloc =
// cudaHostAlloc) on dm_stream, so it is enqueued without waiting and captured as a memcpy node;
// the node READS THE STAGING BUFFER WHEN IT EXECUTES, i.e. at every replay. That is how a replay
// gets its step's batch and StepHyper: the host rewrites the staging before each launch. After
// each copy an event is recorded (inside a capture with cudaEventRecordExternal, so the graph
// records it at every replay too); upload_wait waits for them, so the host never overwrites
// staging a copy has not read yet. Each upload since the last wait records its OWN event: a
// graph then holds one record node per event, and which of several nodes recording one event a
// later wait refers to is not something to rely on.
//
// Determinism: the graph replays the same kernels with the same launch configurations and the
// same cuBLAS algorithms as the eager step (cuBLAS gets a fixed workspace at start-up, so its
// choice cannot depend on what memory is free; the choice is cuBLAS's heuristic — a function of
// shapes and device — never a timing). A replay is therefore bit-identical to the un-captured
// step, which tests/gpu/graph_step.c checks on a GPU.
#include "cuda_common.cuh"
#define OPT_HD __device__
#include "../cpu/step_record.h"
#include <string.h>

#ifndef DM_DOUBLE

int dm_capturing = 0;        // a capture is open on dm_stream
long dm_nallocs = 0;         // device + pinned allocations so far (Backend.allocs)
static char cap_err[256];    // the first reason the open capture failed, "" when none
// recorded after the uploads since the last upload_wait, one each (staging read up to there)
#define STAGE_EVENTS 8
static cudaEvent_t stage_ev[STAGE_EVENTS];
static int stage_next;  // the event the next upload records
static int stage_used;  // events recorded at least once: upload_wait waits for all of them (an
                        // older record is earlier work, so waiting for it costs nothing extra)

void dm_capture_fail(const char *what) {
    if (!cap_err[0]) snprintf(cap_err, sizeof cap_err, "%s", what);
}

// ================================================================================================
// the step's bookkeeping (contracts: kernels/cpu/optim_ops.h)
// ================================================================================================
// One thread: a handful of double operations, the CPU's own code (kernels/cpu/step_record.h).
__global__ void step_loss_kernel(double *out, const double *loss_sum, const float *aux, int depth,
                                 uint64_t scored, int N, double aux_w) {
    step_loss_combine(out, loss_sum, aux, depth, scored, N, aux_w);  // kernels/cpu/step_record.h
}
static void cu_step_loss(double *out, const double *loss_sum, const real *aux, int depth, uint64_t scored,
                         int N, double aux_w) {
    step_loss_kernel<<<1, 1, 0, dm_stream>>>(out, loss_sum, aux, depth, scored, N, aux_w);
    cudaLaunchCheck();
}

// the device's nanosecond clock (the rows' ms: the step's time on the device, queueing excluded)
__device__ __forceinline__ int64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return (int64_t)t;
}
__global__ void step_begin_kernel(StepRecord *ring, const StepHyper *hp) { ring[hp->slot].t0_ns = globaltimer_ns(); }
__global__ void step_end_kernel(StepRecord *ring, const StepHyper *hp, const OptStatus *st, const double *loss,
                                const int32_t *load, int depth, int E) {
    StepRecord *r = &ring[hp->slot];
    step_record_fill(r, hp, st, loss, load, depth, E);  // kernels/cpu/step_record.h
    r->t1_ns = globaltimer_ns();
}
static void cu_step_begin(StepRecord *ring, const StepHyper *hp) {
    step_begin_kernel<<<1, 1, 0, dm_stream>>>(ring, hp);
    cudaLaunchCheck();
}
static void cu_step_end(StepRecord *ring, const StepHyper *hp, const OptStatus *st, const double *loss,
                        const int32_t *load, int depth, int E) {
    step_end_kernel<<<1, 1, 0, dm_stream>>>(ring, hp, st, loss, load, depth, E);
    cudaLaunchCheck();
}

// ================================================================================================
// staging
// ================================================================================================
static void *cu_host_alloc(size_t bytes) {
    if (dm_capturing) { dm_capture_fail("host_alloc (cudaHostAlloc) inside the captured step"); return NULL; }
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // not left for the next launch check to find (cu_alloc)
        fprintf(stderr, "cuda pinned host alloc of %zu bytes failed: %s\n", bytes, cudaGetErrorString(e));
        return NULL;
    }
    memset(p, 0, bytes ? bytes : 1);
    dm_nallocs++;
    return p;
}
static void cu_host_free(void *p) {
    if (!p) return;
    // freeing inside a capture would leave the graph naming freed memory: fail the capture, keep
    // the buffer (it is not freed, and the step runs eagerly)
    if (dm_capturing) { dm_capture_fail("host_free (cudaFreeHost) inside the captured step"); return; }
    cudaCheck(cudaFreeHost(p));
}

static void cu_upload_async(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dm_stream));
    int k = stage_next;
    if (k == STAGE_EVENTS) {  // more uploads than events before a wait
        // eager: recording the last event again covers the earlier copies (one stream, in order);
        // a capture would get two record nodes for it: refused, the step runs eagerly
        if (dm_capturing) { dm_capture_fail("more than 8 uploads in one captured step (graph_cuda.cu STAGE_EVENTS)"); return; }
        k = STAGE_EVENTS - 1;
    } else {
        stage_next++;
    }
    if (stage_used < k + 1) stage_used = k + 1;
    if (dm_capturing) cudaCheck(cudaEventRecordWithFlags(stage_ev[k], dm_stream, cudaEventRecordExternal));
    else cudaCheck(cudaEventRecord(stage_ev[k], dm_stream));
}
static void cu_upload_wait(void) {
    for (int k = 0; k < stage_used; k++) cudaCheck(cudaEventSynchronize(stage_ev[k]));
    stage_next = 0;
}
static void cu_sync(void) { cudaCheck(cudaStreamSynchronize(dm_stream)); }
static long cu_allocs(void) { return dm_nallocs; }

// ================================================================================================
// graphs
// ================================================================================================
static int cu_graph_begin(char *why, size_t n) {
    if (dm_capturing) { snprintf(why, n, "a capture is already open"); return 1; }
    (void)cudaGetLastError();  // a stale launch error must not be blamed on the capture
    cap_err[0] = 0;
    cudaError_t e = cudaStreamBeginCapture(dm_stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        return 1;
    }
    dm_capturing = 1;
    return 0;
}

static void *cu_graph_end(char *why, size_t n) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(dm_stream, &g);
    dm_capturing = 0;
    if (cap_err[0] || e != cudaSuccess || !g) {
        snprintf(why, n, "%s", cap_err[0] ? cap_err : e != cudaSuccess ? cudaGetErrorString(e) : "empty capture");
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return NULL;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return NULL;
    }
    e = cudaGraphUpload(x, dm_stream);  // the first launch does not pay for setting it up
    if (e != cudaSuccess) {  // as a failed instantiate: the step runs eagerly, the reason said once
        snprintf(why, n, "cudaGraphUpload: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        cudaGraphExecDestroy(x);
        return NULL;
    }
    return (void *)x;
}

static void cu_graph_launch(void *g) { cudaCheck(cudaGraphLaunch((cudaGraphExec_t)g, dm_stream)); }
// an executable graph still in flight is released when it completes (cudaGraphExecDestroy)
static void cu_graph_free(void *g) { if (g) cudaCheck(cudaGraphExecDestroy((cudaGraphExec_t)g)); }

void cuda_graph_fill(Backend *b) {
    for (int k = 0; k < STAGE_EVENTS; k++)
        if (!stage_ev[k]) cudaCheck(cudaEventCreateWithFlags(&stage_ev[k], cudaEventDisableTiming));
    b->step_loss = cu_step_loss; b->step_begin = cu_step_begin; b->step_end = cu_step_end;
    b->host_alloc = cu_host_alloc; b->host_free = cu_host_free;
    b->upload_async = cu_upload_async; b->upload_wait = cu_upload_wait; b->sync = cu_sync;
    b->allocs = cu_allocs;
    b->graph_begin = cu_graph_begin; b->graph_end = cu_graph_end;
    b->graph_launch = cu_graph_launch; b->graph_free = cu_graph_free;
}

#endif  // DM_DOUBLE
