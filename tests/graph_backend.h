// graph_backend.h — test-only: a backend WITH GRAPHS on the CPU, to test engine/step.c's
// capture / replay / re-capture / fallback logic where there is no GPU. It wraps the fenced CPU
// backend (fenced_backend.h: backend memory is PROT_NONE outside backend calls) and emulates
// CUDA stream capture faithfully where it matters:
//   * between graph_begin and graph_end every op is RECORDED with its arguments by value and
//     does not run (tests/graph_backend_ops.h, generated from kernels/backend.h);
//   * graph_launch replays the recorded calls in order with the recorded arguments — so a
//     host scalar that changes from step to step but was passed by value is replayed STALE, as
//     in a CUDA graph, and upload_async reads its source at replay time, as a memcpy node does;
//   * anything CUDA forbids inside a capture fails the capture (graph_end returns NULL with the
//     reason): alloc / free / host_alloc, a synchronous upload or download, sync, orth_error.
// The arithmetic is the CPU backend's, so a replayed step must equal an eager one bit for bit.
#pragma once
#include "fenced_backend.h"

typedef void (*gr_fn)(const void *args);
typedef struct {
    gr_fn *fn;
    size_t *off;     // offset of each call's arguments in args
    char *args;
    int n, cap;
    size_t used, capb;
} GrGraph;

static const Backend *gr_inner;  // the fenced CPU backend
static GrGraph *gr_cur;          // the open capture, NULL: none
static char gr_err[256];         // the first reason the open capture failed
static long gr_launches, gr_captures, gr_failed;

static void gr_fail(const char *what) {
    if (!gr_err[0]) snprintf(gr_err, sizeof gr_err, "%s inside the captured step", what);
}

// Run now, or record (the arguments copied, 16-byte aligned) while a capture is open.
static void gr_call(gr_fn fn, const void *a, size_t bytes) {
    if (!gr_cur) { fn(a); return; }
    GrGraph *g = gr_cur;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->fn = realloc(g->fn, sizeof *g->fn * g->cap);
        g->off = realloc(g->off, sizeof *g->off * g->cap);
    }
    size_t at = (g->used + 15) & ~(size_t)15;
    if (at + bytes > g->capb) {
        g->capb = 2 * (at + bytes) + 4096;
        g->args = realloc(g->args, g->capb);
    }
    memcpy(g->args + at, a, bytes);
    g->fn[g->n] = fn;
    g->off[g->n] = at;
    g->n++;
    g->used = at + bytes;
}

#include "graph_backend_ops.h"

// ---- the entries written by hand: memory, host round trips, queries, graphs ----
static void *gr_alloc(size_t bytes) { if (gr_cur) gr_fail("alloc"); return gr_inner->alloc(bytes); }
static void gr_free(void *p) { if (gr_cur) gr_fail("free"); gr_inner->free(p); }
static void gr_upload(void *dst, const void *src, size_t bytes) {
    if (gr_cur) { gr_fail("a synchronous upload"); return; }  // CUDA's refuses too
    gr_inner->upload(dst, src, bytes);
}
static void gr_download(void *dst, const void *src, size_t bytes) {
    if (gr_cur) { gr_fail("a download"); memset(dst, 0, bytes); return; }
    gr_inner->download(dst, src, bytes);
}
static void *gr_host_alloc(size_t bytes) { if (gr_cur) gr_fail("host_alloc"); return gr_inner->host_alloc(bytes); }
static void gr_host_free(void *p) { if (gr_cur) gr_fail("host_free"); gr_inner->host_free(p); }
static long gr_upload_waits;
static void gr_upload_wait(void) { if (gr_cur) gr_fail("upload_wait"); gr_upload_waits++; }
static void gr_sync(void) { if (gr_cur) gr_fail("sync"); }
static long gr_allocs(void) { return gr_inner->allocs(); }
static double gr_orth_error(const real *X, int rows, int r) {
    if (gr_cur) { gr_fail("orth_error (a value to the host)"); return 0; }
    return gr_inner->orth_error(X, rows, r);
}
// the parity reference's routing entries write host memory: round trips a graph cannot hold
static void gr_moe_route_read(int *idx, const real *ws, MoEShape s) {
    if (gr_cur) { gr_fail("moe_route_read (a download)"); memset(idx, 0, sizeof(int) * (size_t)s.N * s.k); return; }
    gr_inner->moe_route_read(idx, ws, s);
}
static void gr_moe_forward_routed(real *out, real *aux, int *load, real *ws, const real *n, const real *z, MoEParams p,
                                  MoEShape s, const int *route, MoERouteDiff *diff) {
    if (gr_cur) { gr_fail("moe_forward_routed (host routing and counts)"); return; }
    gr_inner->moe_forward_routed(out, aux, load, ws, n, z, p, s, route, diff);
}
static void gr_describe(char *buf, size_t n) { gr_inner->describe(buf, n); }
static void gr_mem_stats(size_t *cur, size_t *peak) { gr_inner->mem_stats(cur, peak); }
static void gr_mem_peak_set(size_t peak) { gr_inner->mem_peak_set(peak); }

static int gr_graph_begin(char *why, size_t n) {
    if (gr_cur) { snprintf(why, n, "a capture is already open"); return 1; }
    gr_cur = calloc(1, sizeof *gr_cur);
    gr_err[0] = 0;
    return 0;
}
static void gr_graph_free(void *p) {
    GrGraph *g = p;
    if (!g) return;
    free(g->fn); free(g->off); free(g->args); free(g);
}
static void *gr_graph_end(char *why, size_t n) {
    GrGraph *g = gr_cur;
    gr_cur = NULL;
    if (gr_err[0] || !g || !g->n) {
        snprintf(why, n, "%s", gr_err[0] ? gr_err : "empty capture");
        gr_graph_free(g);
        gr_failed++;
        return NULL;
    }
    gr_captures++;
    return g;
}
static void gr_graph_launch(void *p) {
    GrGraph *g = p;
    for (int i = 0; i < g->n; i++) g->fn[i](g->args + g->off[i]);
    gr_launches++;
}

// a host-side switch of the inner products (parity only, never inside a step): passed through
static void gr_emulate_bf16(int on) { gr_inner->emulate_bf16(on); }

// The table: the fenced CPU backend's, every entry replaced by a recording or checking wrapper.
static const Backend *graph_backend(void) {
    static Backend b;
    gr_inner = fenced_backend();
    b = *gr_inner;
    b.name = "cpu-graph";
    gr_fill_generated(&b);
    b.alloc = gr_alloc; b.free = gr_free; b.upload = gr_upload; b.download = gr_download;
    b.moe_route_read = gr_moe_route_read; b.moe_forward_routed = gr_moe_forward_routed;
    b.host_alloc = gr_host_alloc; b.host_free = gr_host_free; b.upload_wait = gr_upload_wait; b.sync = gr_sync;
    b.allocs = gr_allocs; b.orth_error = gr_orth_error; b.describe = gr_describe; b.mem_stats = gr_mem_stats; b.mem_peak_set = gr_mem_peak_set;
    b.graph_begin = gr_graph_begin; b.graph_end = gr_graph_end; b.graph_launch = gr_graph_launch;
    b.graph_free = gr_graph_free;
    b.emulate_bf16 = gr_inner->emulate_bf16 ? gr_emulate_bf16 : NULL;
    return &b;
}

// 1 when every non-NULL entry of the fenced table is wrapped here (an entry added to backend.h
// and not to the generator's output is still the fenced one: rerun tools/gen_graph_backend.py).
static int graph_backend_complete(const Backend *gb, char *why, size_t n) {
    const Backend *fb = fenced_backend();
    size_t off = offsetof(Backend, alloc), k = (sizeof(Backend) - off) / sizeof(void (*)(void));
    for (size_t i = 0; i < k; i++) {
        void (*a)(void), (*b)(void);
        memcpy(&a, (const char *)gb + off + i * sizeof a, sizeof a);
        memcpy(&b, (const char *)fb + off + i * sizeof b, sizeof b);
        if (b && a == b) {
            snprintf(why, n, "Backend entry #%zu (after `name`) is not wrapped by tests/graph_backend.h: rerun tools/gen_graph_backend.py", i);
            return 0;
        }
    }
    return 1;
}
