// cuemu.cpp — the runtime behind include/cuemu.h: fibers and barriers, grids, streams and
// capture (the device behind the host), memory with kind checks, events, graphs.
// See include/cuemu.h for what it is for and what it checks; cuBLAS and cub are in cuemu_libs.cpp.
#include "include/cuemu.h"
#include "include/cublas_v2.h"
#include "include/cub/cub.cuh"
#include "cuemu_internal.h"
#include <algorithm>
#include <deque>
#include <memory>
#include <map>
#include <string>
#include <vector>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
#define EMU_SMEM_DEFAULT 49152    // dynamic shared memory without the opt-in attribute
#define EMU_SMEM_OPTIN 232448     // an H100 / H200's opt-in maximum per block
alignas(256) unsigned char emu_dyn_smem[EMU_SMEM_OPTIN];

void emu_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cuemu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(3);
}
static int order_rev = -1;  // CUEMU_ORDER=rev: threads of a phase and blocks of a grid in reverse
static int rev_order(void) {
    if (order_rev < 0) {
        const char *o = getenv("CUEMU_ORDER");
        if (o && strcmp(o, "rev") && strcmp(o, "fwd")) emu_die("CUEMU_ORDER=%s: use fwd or rev", o);
        order_rev = o && !strcmp(o, "rev");
    }
    return order_rev;
}
static struct { long launches, blocks, barriers, after_exit; } stats;
// CUEMU_PROFILE=FILE: a census of what ran on the streams, written at exit — per kernel its
// launches, blocks (total, fewest and most in one launch), threads per block, dynamic shared
// memory and the emulator's own time; per cuBLAS product shape its calls and FLOPs; per sort its
// keys. Not a GPU time: it tells what a step launches and how wide (tools/cuemu_census.py turns
// two of these, N and N+1 steps, into one step's table).
struct ProfK { long launches = 0, blocks = 0, minb = -1, maxb = 0, threads = 0, smem = 0; double ns = 0; };
// [0]: everything that ran; [1]: the last graph replay alone (one whole training step once the
// engine replays its step graph)
static std::map<std::string, ProfK> prof_k[2];
static std::map<std::string, long> prof_g[2];  // "fn ta tb m n k batch type" or "cub::SortPairs n bits" -> calls
static int prof_in_graph;
static long prof_replays;
int emu_prof_on(void) {
    static int on = -1;
    if (on < 0) on = getenv("CUEMU_PROFILE") && getenv("CUEMU_PROFILE")[0];
    return on;
}
static void write_profile(void) {
    FILE *f = fopen(getenv("CUEMU_PROFILE"), "w");
    if (!f) { fprintf(stderr, "cuemu: cannot write CUEMU_PROFILE=%s\n", getenv("CUEMU_PROFILE")); return; }
    fprintf(f, "graph_replays %ld\n", prof_replays);
    for (int sc = 0; sc < 2; sc++) {
        const char *scope = sc ? "replay" : "all";
        for (auto &kv : prof_k[sc])
            fprintf(f, "%s kernel %s launches %ld blocks %ld minblocks %ld maxblocks %ld threads %ld smem %ld emu_ms %.3f\n",
                    scope, kv.first.c_str(), kv.second.launches, kv.second.blocks, kv.second.minb, kv.second.maxb,
                    kv.second.threads, kv.second.smem, kv.second.ns * 1e-6);
        for (auto &kv : prof_g[sc]) fprintf(f, "%s call %s calls %ld\n", scope, kv.first.c_str(), kv.second);
    }
    fclose(f);
}
static void prof_kernel(const std::string &name, size_t nb, dim3 b, size_t smem, double ns) {
    for (int sc = 0; sc <= prof_in_graph; sc++) {
        ProfK &p = prof_k[sc][name];
        p.launches++;
        p.blocks += (long)nb;
        if (p.minb < 0 || (long)nb < p.minb) p.minb = (long)nb;
        if ((long)nb > p.maxb) p.maxb = (long)nb;
        p.threads = (long)b.x * b.y * b.z;
        if ((long)smem > p.smem) p.smem = (long)smem;
        p.ns += ns;
    }
}
void emu_prof_call(const char *key) {
    for (int sc = 0; sc <= prof_in_graph; sc++) prof_g[sc][key]++;
}
static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
static void print_stats(void) {
    if (emu_prof_on()) write_profile();
    if (getenv("CUEMU_STATS"))
        fprintf(stderr, "cuemu: %ld launches, %ld blocks, %ld barriers (%ld with some threads of the block already exited), order %s\n",
                stats.launches, stats.blocks, stats.barriers, stats.after_exit, rev_order() ? "rev" : "fwd");
}

// ================================================================================================
// fibers: one per thread of the running block
// ================================================================================================
extern "C" void emu_ctx_switch(void **save_sp, void *to_sp);
#if defined(__x86_64__)
// callee-saved registers on the old stack, stack pointer swapped, the same registers popped from
// the new one (System V: rbx, rbp, r12-r15; the MXCSR and x87 control words are never changed)
asm(".text\n.globl emu_ctx_switch\n.type emu_ctx_switch,@function\nemu_ctx_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
    ".size emu_ctx_switch,.-emu_ctx_switch\n");
#else
#error "cuemu: the fiber switch is written for x86-64"
#endif

enum { F_NEW, F_READY, F_BAR, F_DONE };
struct Fiber {
    void *sp;
    int state, kind, pred, result, line, stack;
    const char *file;
    dim3 idx;
};
#define EMU_MAXT 1024
#define EMU_STACK (256 * 1024)
static Fiber fib[EMU_MAXT];
static unsigned char *stacks;        // (EMU_MAXT + 1) x (guard page + EMU_STACK)
static int free_stacks[EMU_MAXT + 1], nfree;
static size_t page;
static void *sched_sp;
static int cur = -1;                 // the running thread, -1 outside a kernel
static const std::function<void()> *cur_body;

static void fiber_entry(void) {
    (*cur_body)();
    fib[cur].state = F_DONE;
    emu_ctx_switch(&fib[cur].sp, sched_sp);
    abort();  // a finished fiber is never resumed
}
// Thread t starts on a free stack. A thread that ends without waiting at a barrier gives its stack
// straight back, so a kernel without barriers runs every thread on one (cache-warm) stack; only
// threads suspended at a barrier hold a stack of their own.
static void fiber_start(int t) {
    if (!stacks) {
        page = (size_t)sysconf(_SC_PAGESIZE);
        size_t per = page + EMU_STACK;
        stacks = (unsigned char *)mmap(NULL, per * (EMU_MAXT + 1), PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (stacks == MAP_FAILED) emu_die("cannot map %d fiber stacks", EMU_MAXT + 1);
        for (int i = 0; i <= EMU_MAXT; i++) mprotect(stacks + i * per, page, PROT_NONE);  // overflow faults
        for (int i = EMU_MAXT; i >= 0; i--) free_stacks[nfree++] = i;
        atexit(print_stats);
    }
    int k = free_stacks[--nfree];
    unsigned char *top = stacks + (size_t)(k + 1) * (page + EMU_STACK);
    void **sp = (void **)((uintptr_t)(top - 64) & ~(uintptr_t)15);
    for (int i = 0; i < 6; i++) sp[i] = 0;  // r15 .. rbp
    sp[6] = (void *)fiber_entry;            // `ret` enters here with rsp = 8 mod 16, as after a call
    sp[7] = 0;
    fib[t].sp = sp;
    fib[t].stack = k;
}

// static __shared__ arrays are one copy per kernel (blocks run one at a time): each block's first
// thread to pass a declaration fills it with NaN bytes, as a GPU block starts with garbage
static long block_gen;               // counts blocks
static struct { void *p; long gen; } shared_seen[32];
void emu_shared_poison(void *p, size_t n) {
    int free_slot = -1;
    for (int i = 0; i < 32; i++) {
        if (shared_seen[i].p == p) {
            if (shared_seen[i].gen == block_gen) return;
            free_slot = i;
            break;
        }
        if (free_slot < 0 && shared_seen[i].gen != block_gen) free_slot = i;
    }
    if (free_slot < 0) emu_die("more than 32 __shared__ arrays in one block");
    shared_seen[free_slot].p = p;
    shared_seen[free_slot].gen = block_gen;
    memset(p, 0xff, n);
}

int emu_barrier(const char *file, int line, int kind, int pred) {
    if (cur < 0) emu_die("__syncthreads() outside a kernel (%s:%d)", file, line);
    Fiber *f = &fib[cur];
    f->state = F_BAR;
    f->file = file;
    f->line = line;
    f->kind = kind;
    f->pred = pred;
    emu_ctx_switch(&f->sp, sched_sp);
    return fib[cur].result;
}

static void run_block(int nt, const std::function<void()> &body) {
    cur_body = &body;
    block_gen++;
    const int rev = rev_order();
    dim3 idx(0, 0, 0);
    for (int t = 0; t < nt; t++) {  // x fastest, then y, then z: CUDA's linear thread order
        fib[t].state = F_NEW;
        fib[t].idx = idx;
        if (++idx.x == emu_blockDim.x) { idx.x = 0; if (++idx.y == emu_blockDim.y) { idx.y = 0; idx.z++; } }
    }
    for (;;) {
        for (int i = 0; i < nt; i++) {
            int t = rev ? nt - 1 - i : i;
            Fiber *f = &fib[t];
            if (f->state == F_NEW) fiber_start(t);
            else if (f->state != F_READY) continue;
            emu_threadIdx = f->idx;
            cur = t;
            emu_ctx_switch(&sched_sp, f->sp);
            if (f->state == F_DONE) free_stacks[nfree++] = f->stack;
        }
        cur = -1;
        int waiting = 0, done = 0, first = -1, sum = 0, all = 1;
        for (int t = 0; t < nt; t++) {
            if (fib[t].state == F_DONE) { done++; continue; }
            if (first < 0) first = t;
            Fiber *a = &fib[first], *b = &fib[t];
            if (b->line != a->line || (b->file != a->file && strcmp(b->file, a->file)) || b->kind != a->kind)
                emu_die("divergent __syncthreads() in block (%u,%u,%u): thread %d waits at %s:%d, thread %d at %s:%d",
                        emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z, first, a->file, a->line, t, b->file, b->line);
            waiting++;
            sum += b->pred;
            all &= b->pred;
        }
        if (!waiting) break;
        stats.barriers++;
        if (done) stats.after_exit++;  // exited threads count as arrived (what the hardware does)
        int kind = fib[first].kind;
        int res = kind == 1 ? sum : kind == 2 ? sum > 0 : kind == 3 ? all : 0;
        for (int t = 0; t < nt; t++)
            if (fib[t].state == F_BAR) { fib[t].result = res; fib[t].state = F_READY; }
    }
}

// ================================================================================================
// errors, devices
// ================================================================================================
static cudaError_t last_err = cudaSuccess;
static cudaError_t set_err(cudaError_t e) { if (e != cudaSuccess) last_err = e; return e; }
cudaError_t emu_set_err(cudaError_t e) { return set_err(e); }
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return cudaGetErrorName(e);
    }
}
cudaError_t cudaGetLastError(void) { cudaError_t e = last_err; last_err = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return last_err; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static int cur_dev = 0;
cudaError_t cudaSetDevice(int d) { if (d != 0) return set_err(cudaErrorInvalidDevice); cur_dev = d; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = cur_dev; return cudaSuccess; }
static size_t mem_limit(void) {
    static size_t lim = 0;
    if (!lim) {
        const char *m = getenv("CUEMU_MEM_MB");
        lim = (size_t)(m ? atol(m) : 1024) << 20;  // small: device_cuda.cu sizes its peak product by it
    }
    return lim;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d != 0) return set_err(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CPU emulation of a compute capability 9.0 device)");
    p->totalGlobalMem = mem_limit();
    p->sharedMemPerBlock = EMU_SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = EMU_SMEM_OPTIN;
    p->major = 9; p->minor = 0; p->multiProcessorCount = 132; p->maxThreadsPerBlock = 1024; p->warpSize = 32;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (d != 0) return set_err(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = EMU_SMEM_OPTIN; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    default: return set_err(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

// ================================================================================================
// streams, capture, graphs
// ================================================================================================
struct EmuEvent { unsigned flags; int recorded, in_capture; double ms; long long seq; };  // seq: its last record's place in the queue
// events: those the graph records (cudaEventRecordExternal): each replay is their latest record
struct EmuGraph { std::vector<std::function<void()>> ops; std::vector<EmuEvent *> events; };
struct EmuGraphExec { std::vector<std::function<void()>> ops; std::vector<EmuEvent *> events; };
struct EmuStream { int id; };
static EmuStream *cap_stream;        // the stream being captured (one capture at a time)
static EmuGraph *cap_graph;
static cudaError_t cap_invalid;      // the first forbidden call of the open capture
static char cap_why[256];

int emu_is_capturing(void) { return cap_stream != NULL; }
void emu_fail_capture(cudaError_t e, const char *what) {
    if (cap_stream && cap_invalid == cudaSuccess) {
        cap_invalid = e;
        snprintf(cap_why, sizeof cap_why, "%s", what);
        if (getenv("CUEMU_STATS")) fprintf(stderr, "cuemu: capture invalidated by %s (%s)\n", what, cudaGetErrorName(e));
    }
}
// a call a global-mode capture forbids: it fails, and so does the capture
static cudaError_t forbid_in_capture(const char *what) {
    if (!cap_stream) return cudaSuccess;
    emu_fail_capture(cudaErrorStreamCaptureUnsupported, what);
    return set_err(cudaErrorStreamCaptureUnsupported);
}
// The device runs behind the host, as a GPU does (CUEMU_DEFER=0 turns it off: each op runs when
// it is enqueued). Every op a stream is given waits in one queue (enqueue order: each stream's own
// order and more) and runs only when the host synchronises with it: a stream or device
// synchronisation, an event synchronisation or query (up to that event's latest record), a
// synchronous copy or memset, a cudaFree or cudaFreeHost (implicit device synchronisations), a
// copy into pageable memory (which a GPU does not defer either). Run at once, a host that
// rewrites pinned staging before the copy that reads it has run, or reads a pinned download before
// waiting for it, gets the right bytes by luck; deferred, it gets what a GPU would give it
// (tests/cuemu/dmsh_defer.sh runs a session both ways).
static std::deque<std::function<void()>> pending;
static long long enq_seq, done_seq;  // ops enqueued / run so far (the queue holds the difference)
int emu_defer_on(void) {
    static int on = -1;
    if (on < 0) {
        const char *d = getenv("CUEMU_DEFER");
        if (d && strcmp(d, "0") && strcmp(d, "1")) emu_die("CUEMU_DEFER=%s: use 1 (the default) or 0", d);
        on = !(d && !strcmp(d, "0"));
    }
    return on;
}
#define defer_on emu_defer_on
static void drain_through(long long seq) {
    while (done_seq < seq && !pending.empty()) {
        std::function<void()> op = std::move(pending.front());
        pending.pop_front();
        done_seq++;
        op();
    }
}
static void drain_all(void) { drain_through(enq_seq); }
// a destroy that CUDA lets return at once, releasing the object when the work queued before it
// is done (events, graph executables): the release waits in the queue behind that work
static void release_after_queued(std::function<void()> release) {
    if (!emu_defer_on() || pending.empty()) { release(); return; }
    enq_seq++;
    pending.push_back(std::move(release));
}
cudaError_t emu_enqueue(cudaStream_t s, std::function<void()> op, const char *what) {
    if (cap_stream) {
        if (s == cap_stream) {
            if (cap_invalid == cudaSuccess) cap_graph->ops.push_back(std::move(op));
            return cap_invalid == cudaSuccess ? cudaSuccess : set_err(cudaErrorStreamCaptureInvalidated);
        }
        if (s == NULL) {  // the legacy stream would wait for the capturing one
            emu_fail_capture(cudaErrorStreamCaptureImplicit, what);
            return set_err(cudaErrorStreamCaptureImplicit);
        }
    }
    enq_seq++;
    if (defer_on()) pending.push_back(std::move(op));
    else { done_seq++; op(); }
    return cudaSuccess;
}
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
int64_t emu_globaltimer(void) { return (int64_t)(now_ms() * 1e6); }

cudaError_t cudaStreamCreate(cudaStream_t *s) { static int ids; *s = new EmuStream{++ids}; return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }  // no queued op refers to it
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (cap_stream && (s == cap_stream || s == NULL)) return forbid_in_capture("cudaStreamSynchronize");
    drain_all();  // every stream's work (one queue): more than a GPU waits for, never less
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (cudaError_t e = forbid_in_capture("cudaDeviceSynchronize")) return e;
    drain_all();
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new EmuEvent{0, 0, 0, 0, 0}; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { *e = new EmuEvent{f, 0, 0, 0, 0}; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { release_after_queued([e] { delete e; }); return cudaSuccess; }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned f) {
    if (cap_stream && s == cap_stream) {
        e->in_capture = 1;
        if (!(f & cudaEventRecordExternal)) return cudaSuccess;  // a dependency inside the graph, no node
        // the project's rule, not CUDA's: one record node per event in a graph (graph_cuda.cu's
        // staging events), so a later wait on it can only mean that node
        for (EmuEvent *x : cap_graph->events)
            if (x == e) emu_die("cudaEventRecordWithFlags: an event recorded twice in one capture (one record node per event)");
        if (cap_invalid == cudaSuccess) cap_graph->events.push_back(e);
        return emu_enqueue(s, [e] { e->recorded = 1; e->in_capture = 0; e->ms = now_ms(); }, "cudaEventRecordWithFlags");
    }
    if (f & cudaEventRecordExternal) return set_err(cudaErrorInvalidValue);  // only inside a capture
    e->in_capture = 0;
    cudaError_t r = emu_enqueue(s, [e] { e->recorded = 1; e->ms = now_ms(); }, "cudaEventRecord");
    e->seq = enq_seq;
    return r;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecordWithFlags(e, s, 0); }
// (an event recorded by a graph replay waits for the whole replay: the replay is one queued op)
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (cap_stream && e->in_capture) return forbid_in_capture("cudaEventSynchronize on an event of the capture");
    drain_through(e->seq);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (cap_stream && e->in_capture) return forbid_in_capture("cudaEventQuery on an event of the capture");
    drain_through(e->seq);  // a poll would find it done sooner or later
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if ((a->flags | b->flags) & cudaEventDisableTiming) return set_err(cudaErrorInvalidResourceHandle);
    if (done_seq < a->seq || done_seq < b->seq) return set_err(cudaErrorNotReady);  // not waited for
    if (!a->recorded || !b->recorded) return set_err(cudaErrorInvalidResourceHandle);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (s == NULL) return set_err(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
    if (cap_stream) return set_err(cudaErrorIllegalState);
    cap_stream = s;
    cap_graph = new EmuGraph;
    cap_invalid = cudaSuccess;
    cap_why[0] = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (s != cap_stream) return set_err(cudaErrorIllegalState);
    cap_stream = NULL;
    if (cap_invalid != cudaSuccess) {
        delete cap_graph;
        cap_graph = NULL;
        *g = NULL;
        return set_err(cudaErrorStreamCaptureInvalidated);
    }
    *g = cap_graph;
    cap_graph = NULL;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long) {
    if (!g) return set_err(cudaErrorInvalidValue);
    *x = new EmuGraphExec{g->ops, g->events};
    return cudaSuccess;
}
cudaError_t cudaGraphUpload(cudaGraphExec_t x, cudaStream_t) { return x ? cudaSuccess : set_err(cudaErrorInvalidValue); }
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    if (!x) return set_err(cudaErrorInvalidValue);
    cudaError_t e = emu_enqueue(s, [x] {
        if (emu_prof_on()) {  // the census keeps the last replay on its own: one step
            prof_k[1].clear();
            prof_g[1].clear();
            prof_in_graph = 1;
            prof_replays++;
        }
        for (auto &op : x->ops) op();
        prof_in_graph = 0;
    }, "cudaGraphLaunch");
    if (e == cudaSuccess && !cap_stream)
        for (EmuEvent *ev : x->events) ev->seq = enq_seq;  // recorded again by this replay
    return e;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) { release_after_queued([x] { delete x; }); return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }

// ================================================================================================
// memory
// ================================================================================================
struct Alloc { size_t n; int kind; };
static std::map<uintptr_t, Alloc> allocs;  // base -> size, kind (0 device, 1 pinned host)
static size_t dev_used;
int emu_mem_kind(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return 2;
    --it;
    if (a >= it->first + it->second.n) return 2;
    if (a + n > it->first + it->second.n) return -1;  // starts inside an allocation, runs past its end
    return it->second.kind;
}
static void *emu_alloc(size_t n, int kind) {
    void *p = NULL;  // exactly n bytes (no rounding up): AddressSanitizer then sees the first byte past the end
    if (posix_memalign(&p, 256, n)) return NULL;
    memset(p, 0xff, n);  // NaN bytes: a read before the first write shows up
    allocs[(uintptr_t)p] = Alloc{n, kind};
    return p;
}
// Fault injection (tests/cuemu/dmsh_oom.sh): CUEMU_MALLOC_FAIL=K makes the K-th cudaMalloc of the
// process (from 1) fail as a full device would; CUEMU_MALLOC_LOG=1 numbers every call on stderr,
// so a test can enumerate the allocations of a run and fail each in turn.
static bool malloc_fault(size_t n) {
    static long calls = 0, fail_at = -1;
    static int log = -1;
    if (fail_at < 0) {
        const char *f = getenv("CUEMU_MALLOC_FAIL"), *l = getenv("CUEMU_MALLOC_LOG");
        fail_at = f ? atol(f) : 0;
        log = l && *l == '1';
    }
    calls++;
    if (log) fprintf(stderr, "cuemu: cudaMalloc #%ld (%zu bytes)%s\n", calls, n, calls == fail_at ? " FAILED" : "");
    return calls == fail_at;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = NULL;
    if (cudaError_t e = forbid_in_capture("cudaMalloc")) return e;
    if (n == 0) return cudaSuccess;
    if (malloc_fault(n) || dev_used + n > mem_limit()) return set_err(cudaErrorMemoryAllocation);
    if (!(*p = emu_alloc(n, 0))) return set_err(cudaErrorMemoryAllocation);
    dev_used += n;
    return cudaSuccess;
}
static cudaError_t emu_free(void *p, int kind, const char *what) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = forbid_in_capture(what)) return e;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.kind != kind) {
        fprintf(stderr, "cuemu: %s(%p): not the start of a %s allocation\n", what, p, kind ? "pinned host" : "device");
        return set_err(cudaErrorInvalidValue);
    }
    drain_all();  // a GPU's cudaFree / cudaFreeHost synchronise the device first
    if (kind == 0) dev_used -= it->second.n;
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) { return emu_free(p, 0, "cudaFree"); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) {
    *p = NULL;
    if (cudaError_t e = forbid_in_capture("cudaHostAlloc")) return e;
    // pinned memory is host RAM: more than the machine has fails, as on a device (and never
    // reaches the host allocator, which under AddressSanitizer aborts on such a size)
    size_t ram = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    if (n > ram) return set_err(cudaErrorMemoryAllocation);
    if (!(*p = emu_alloc(n ? n : 1, 1))) return set_err(cudaErrorMemoryAllocation);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }
cudaError_t cudaFreeHost(void *p) { return emu_free(p, 1, "cudaFreeHost"); }
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot) {
    *tot = mem_limit();
    *fr = mem_limit() - dev_used;
    return cudaSuccess;
}
const char *emu_kind_name(int k) { return k == 0 ? "device" : k == 1 ? "pinned host" : k == 2 ? "host" : "out-of-range"; }
// the copy's pointers against its kind; in a capture, host memory must be pinned
static cudaError_t check_copy(void *d, const void *s, size_t n, cudaMemcpyKind k, const char *what) {
    int kd = emu_mem_kind(d, n), ks = emu_mem_kind(s, n);
    int want_d = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    int want_s = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    int bad = kd < 0 || ks < 0;
    if (k != cudaMemcpyDefault) bad |= (kd == 0) != want_d || (ks == 0) != want_s;
    if (bad) {
        fprintf(stderr, "cuemu: %s of %zu bytes, kind %d: destination is %s memory, source %s memory\n", what, n,
                (int)k, emu_kind_name(kd), emu_kind_name(ks));
        return set_err(cudaErrorInvalidValue);
    }
    if (cap_stream && (kd == 2 || ks == 2)) {
        emu_fail_capture(cudaErrorStreamCaptureUnsupported, "a copy through pageable host memory");
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = check_copy(d, s, n, k, "cudaMemcpyAsync")) return e;
    if (defer_on() && !cap_stream && emu_mem_kind(d, n) == 2) {  // into pageable memory: done on return
        drain_all();
        return set_err(emu_enqueue(st, [d, s, n] { memmove(d, s, n); }, "cudaMemcpyAsync"));
    }
    if (defer_on() && !cap_stream && emu_mem_kind(s, n) == 2) {  // from pageable memory: read on the call
        auto snap = std::make_shared<std::vector<char>>((const char *)s, (const char *)s + n);
        return set_err(emu_enqueue(st, [d, snap, n] { memmove(d, snap->data(), n); }, "cudaMemcpyAsync"));
    }
    return set_err(emu_enqueue(st, [d, s, n] { memmove(d, s, n); }, "cudaMemcpyAsync"));
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    if (cudaError_t e = forbid_in_capture("cudaMemcpy")) return e;
    cudaError_t e = cudaMemcpyAsync(d, s, n, k, NULL);
    drain_all();  // synchronous: done when it returns
    return e;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    if (emu_mem_kind(d, n) != 0) {
        fprintf(stderr, "cuemu: cudaMemsetAsync of %zu bytes on %s memory\n", n, emu_kind_name(emu_mem_kind(d, n)));
        return set_err(cudaErrorInvalidValue);
    }
    return set_err(emu_enqueue(st, [d, v, n] { memset(d, v, n); }, "cudaMemsetAsync"));
}
cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind k, cudaStream_t st) {
    if (width == 0 || height == 0) return cudaSuccess;
    if (width > dpitch || width > spitch) return set_err(cudaErrorInvalidValue);
    // the whole strided span of each side must be one allocation of the right kind
    if (cudaError_t e = check_copy(d, s, 0, k, "cudaMemcpy2DAsync")) return e;
    size_t dn = dpitch * (height - 1) + width, sn = spitch * (height - 1) + width;
    int kd = emu_mem_kind(d, dn), ks = emu_mem_kind(s, sn);
    if (kd < 0 || ks < 0 || (k != cudaMemcpyDefault && ((kd == 0) != (k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice) ||
                                                       (ks == 0) != (k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice)))) {
        fprintf(stderr, "cuemu: cudaMemcpy2DAsync %zu x %zu bytes: destination is %s memory, source %s memory\n", height, width,
                emu_kind_name(kd), emu_kind_name(ks));
        return set_err(cudaErrorInvalidValue);
    }
    cudaError_t e = set_err(emu_enqueue(st, [=] {
        for (size_t r = 0; r < height; r++) memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    }, "cudaMemcpy2DAsync"));
    if (!cap_stream && (kd == 2 || ks == 2)) drain_all();  // pageable memory: done on return (CUEMU_DEFER)
    return e;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    if (cudaError_t e = forbid_in_capture("cudaMemset")) return e;
    cudaError_t e = cudaMemsetAsync(d, v, n, NULL);
    drain_all();
    return e;
}

// ================================================================================================
// kernels
// ================================================================================================
static std::map<std::string, int> smem_attr;  // kernel name -> its MaxDynamicSharedMemorySize
// kernel name -> its __launch_bounds__ (registered while the converted files' statics initialise:
// a function-local map, built on first use whatever the order of the files)
static std::map<std::string, int> &launch_bounds(void) {
    static std::map<std::string, int> m;
    return m;
}
int emu_register_bounds(const char *kernel, int max_threads) {
    auto it = launch_bounds().find(kernel);
    if (it != launch_bounds().end() && it->second != max_threads)
        emu_die("two kernels named %s with different __launch_bounds__ (%d, %d)", kernel, it->second, max_threads);
    if (max_threads < 1 || max_threads > 1024) emu_die("__launch_bounds__(%d) on %s: not 1..1024", max_threads, kernel);
    launch_bounds()[kernel] = max_threads;
    return max_threads;
}
cudaError_t emu_not_supported(const char *what) {
    (void)what;  // registers and occupancy are the compiler's and the GPU's: nothing to emulate
    return set_err(cudaErrorNotSupported);
}
cudaError_t emu_func_set_attribute(const char *f, cudaFuncAttribute a, int v) {
    // the carveout is a hint a GPU takes as given (-1 .. 100 percent); nothing to emulate
    if (a == cudaFuncAttributePreferredSharedMemoryCarveout) return v < -1 || v > 100 ? set_err(cudaErrorInvalidValue) : cudaSuccess;
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > EMU_SMEM_OPTIN) return set_err(cudaErrorInvalidValue);
    smem_attr[f] = v;
    return cudaSuccess;
}
cudaError_t emu_launch_grid(const char *k, dim3 g, dim3 b, size_t smem, cudaStream_t st, std::function<void()> body) {
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (nt == 0 || nt > 1024 || b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 ||
        g.z > 65535)
        return set_err(cudaErrorInvalidConfiguration);
    {  // more threads than the kernel's __launch_bounds__: refused as on a GPU
        auto it = launch_bounds().find(k);
        if (it != launch_bounds().end() && nt > (unsigned long long)it->second)
            return set_err(cudaErrorLaunchOutOfResources);
        // The project's rule (a GPU may accept such a launch, or refuse it): a block of more than
        // 256 threads needs __launch_bounds__, or nvcc may give the kernel more registers than
        // 65536 / threads (up to 255 a thread fit 256 threads; the register file is 64K) and the
        // launch fails on the device only. Refused here, where it costs no device time.
        if (it == launch_bounds().end() && nt > 256) {
            fprintf(stderr, "cuemu: %s launched with %llu threads a block and no __launch_bounds__ (the project's rule "
                            "above 256 threads: declare the bound, or the register file may not fit it on a GPU)\n", k, nt);
            return set_err(cudaErrorLaunchOutOfResources);
        }
    }
    if (smem > EMU_SMEM_DEFAULT) {
        auto it = smem_attr.find(k);
        if (it == smem_attr.end() || (size_t)it->second < smem) return set_err(cudaErrorInvalidValue);
    }
    stats.launches++;
    std::string name(k);
    return set_err(emu_enqueue(st, [g, b, smem, body, name] {
        const int rev = rev_order();
        const double t0 = emu_prof_on() ? now_ns() : 0;
        emu_gridDim = g;
        emu_blockDim = b;
        size_t nb = (size_t)g.x * g.y * g.z;
        for (size_t i = 0; i < nb; i++) {
            size_t j = rev ? nb - 1 - i : i;
            emu_blockIdx = dim3((unsigned)(j % g.x), (unsigned)(j / g.x % g.y), (unsigned)(j / ((size_t)g.x * g.y)));
            if (smem) memset(emu_dyn_smem, 0xff, smem);  // uninitialised shared memory reads as NaN
            run_block((int)(b.x * b.y * b.z), body);
            stats.blocks++;
        }
        if (emu_prof_on()) prof_kernel(name, nb, b, smem, now_ns() - t0);
    }, "kernel launch"));
}

