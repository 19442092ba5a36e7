// busy_cupti.h — how busy the GPU is, from CUPTI's activity records: the union of the intervals
// in which a kernel, a memcpy or a memset ran, over a window of steps. That is the "kernel time /
// wall time" of issue 5 measured on the graph-replayed steps themselves (events around each op
// can only bracket an eager step, and then they also count the host's launch time inside an op).
// Built with -DDM_HAVE_CUPTI when the toolkit has CUPTI (tests/gpu/run.sh looks for it); without
// it, or when tracing cannot start (a sandbox may refuse it), busy_start says why and the
// benchmark prints "n/a" instead of a number. Tracing is switched on before the step graph is
// captured (records of a graph's nodes may need it at instantiation), busy_mark() opens the
// window after the warm-up, busy_stop() closes it.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The part of the model a kernel (its name as the per-kernel table prints it) works for, so the
// table's sum can be read as "where a step goes" at a glance. Names are the backend's own
// (kernels/cuda/*.cu); cuBLAS's and cub's are recognised by their usual words; the rest is other.
#define BUSY_NPARTS 9
static const char *const busy_part_names[BUSY_NPARTS] = {
    "matrix products (cuBLAS)", "bf16 packing", "KDA", "MoE", "Engram and embedding",
    "norms, activations, loss", "optimizer", "sorts", "other"};
static inline int busy_part(const char *name) {
    static const struct { const char *pre; int part; } map[] = {
        {"to_bf16", 1}, {"kda_", 2}, {"decay_gate", 2}, {"moe_", 3}, {"engram_", 4}, {"mem_gate", 4},
        {"scatter_sorted", 4}, {"embed", 4}, {"rmsnorm", 5}, {"l2norm", 5}, {"silu", 5}, {"sigmoid", 5},
        {"mix_", 5}, {"gate_mul", 5}, {"add_", 5}, {"running_mean", 5}, {"scale_by", 5}, {"colsum", 5},
        {"softmax_ce", 5}, {"ce_logits", 5}, {"adam", 6}, {"muon", 6}, {"ns_poly", 6}, {"poly_", 6},
        {"frob", 6}, {"sumsq", 6}, {"scale_batched", 6}, {"scaled_copy", 6}, {"clip", 6}, {"decide", 6},
        {"gated_copy", 6}, {"retract", 6}, {"orth_", 6}, {"gersh", 6}, {"row_normalize", 6},
        {"col_normalize", 6}, {"rows_keys", 6}, {"red_", 5}, {"scale_mat", 6}, {"step_", 6}, {"cub::", 7}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strncmp(name, map[i].pre, strlen(map[i].pre))) return map[i].part;
    if (strstr(name, "RadixSort") || strstr(name, "Onesweep")) return 7;
    const char *blas[] = {"gemm", "gemv", "nvjet", "xmma", "cutlass", "splitK", "cublas", "Kernel2"};
    for (size_t i = 0; i < sizeof blas / sizeof blas[0]; i++)
        if (strstr(name, blas[i])) return 0;
    return 8;
}

#ifdef DM_HAVE_CUPTI
#include <cupti.h>

typedef struct { uint64_t a, b; } BusyIv;
static BusyIv *busy_iv;
static size_t busy_n, busy_cap;
static int busy_lost;
static long busy_untimed;   // records without a usable start/end (CUPTI's 0 "not collected")

static void busy_push(uint64_t a, uint64_t b) {
    // an untimed record would lower busy unseen: counted, and busy_stop then gives no number
    if (!a || !b || b < a) { busy_untimed++; return; }
    if (b == a) return;
    if (busy_n == busy_cap) {
        size_t cap = busy_cap ? 2 * busy_cap : 1 << 16;
        BusyIv *p = (BusyIv *)realloc(busy_iv, cap * sizeof *p);
        if (!p) { busy_lost++; return; }
        busy_iv = p;
        busy_cap = cap;
    }
    busy_iv[busy_n++] = (BusyIv){a, b};
}

// Device time per kernel over the window, by name (the first component of a mangled C++ name:
// `_Z17rmsnorm_fwd_kernelPf...` is rmsnorm_fwd_kernel; cuBLAS's own names as they come, cut to
// 63 bytes): where a step's time goes, so the first device run says what to work on next.
typedef struct { char name[64]; double ns; long n; } BusyK;
static BusyK busy_k[512];
static int busy_nk, busy_k_over;
static void busy_kernel(const char *mangled, uint64_t ns) {
    char s[64] = "";
    const char *m = mangled ? mangled : "?";
    if (!strncmp(m, "_Z", 2)) {  // <len><id>, or N<len><id><len><id>...E for a nested name
        const char *p = m + 2 + (m[2] == 'N');
        size_t used = 0;
        int len = 0, adv = 0;
        while (sscanf(p, "%d%n", &len, &adv) == 1 && len > 0 && (int)strlen(p + adv) >= len && used < sizeof s - 1) {
            used += snprintf(s + used, sizeof s - used, "%s%.*s", used ? "::" : "", len, p + adv);
            p += adv + len;
            if (m[2] != 'N') break;
        }
    }
    if (!s[0]) snprintf(s, sizeof s, "%s", m);
    for (int i = 0; i < busy_nk; i++)
        if (!strcmp(busy_k[i].name, s)) { busy_k[i].ns += (double)ns; busy_k[i].n++; return; }
    if (busy_nk == (int)(sizeof busy_k / sizeof busy_k[0])) { busy_k_over++; return; }
    snprintf(busy_k[busy_nk].name, sizeof busy_k[busy_nk].name, "%s", s);
    busy_k[busy_nk].ns = (double)ns;
    busy_k[busy_nk].n = 1;
    busy_nk++;
}
static int busy_k_cmp(const void *x, const void *y) {
    const BusyK *a = (const BusyK *)x, *b = (const BusyK *)y;
    return (a->ns < b->ns) - (a->ns > b->ns);
}
// The `top` kernels of the window by device time, per step of `steps`, after busy_stop.
static void busy_print_top(int steps, int top) {
    qsort(busy_k, busy_nk, sizeof busy_k[0], busy_k_cmp);
    double all = 0;
    long launches = 0;
    for (int i = 0; i < busy_nk; i++) { all += busy_k[i].ns; launches += busy_k[i].n; }
    printf("       kernel time per step %.3f ms in %.0f launches (%d kernels%s); the top %d:\n", all / 1e6 / steps,
           (double)launches / steps, busy_nk, busy_k_over ? ", more not tallied" : "", top < busy_nk ? top : busy_nk);
    for (int i = 0; i < busy_nk && i < top; i++)
        printf("         %-48s %8.3f ms %6.1f launches %5.1f%%\n", busy_k[i].name, busy_k[i].ns / 1e6 / steps,
               (double)busy_k[i].n / steps, all > 0 ? 100 * busy_k[i].ns / all : 0);
    double part[BUSY_NPARTS] = {0};
    for (int i = 0; i < busy_nk; i++) part[busy_part(busy_k[i].name)] += busy_k[i].ns;
    printf("       by part (ms per step, share of kernel time):");
    for (int p = 0; p < BUSY_NPARTS; p++)
        if (part[p] > 0) printf("%s %s %.3f (%.0f%%)", p ? "," : "", busy_part_names[p], part[p] / 1e6 / steps, all > 0 ? 100 * part[p] / all : 0);
    printf("\n");
}

static void CUPTIAPI busy_buf_req(uint8_t **buf, size_t *size, size_t *maxrec) {
    *size = (size_t)8 << 20;
    *buf = (uint8_t *)aligned_alloc(8, *size);
    *maxrec = 0;
}

static void CUPTIAPI busy_buf_done(CUcontext ctx, uint32_t sid, uint8_t *buf, size_t size, size_t valid) {
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
            busy_push(k->start, k->end);
            if (k->end > k->start) busy_kernel(k->name, k->end - k->start);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)rec;
            busy_push(m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)rec;
            busy_push(m->start, m->end);
            break;
        }
        default: break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, sid, &dropped) == CUPTI_SUCCESS && dropped) busy_lost += (int)dropped;
    free(buf);
}

static int busy_cmp(const void *x, const void *y) {
    const BusyIv *a = (const BusyIv *)x, *b = (const BusyIv *)y;
    return (a->a > b->a) - (a->a < b->a);
}

// Start recording (0), or say why not (1).
static int busy_start(char *why, size_t n) {
    static int registered;
    CUptiResult r = CUPTI_SUCCESS;
    if (!registered) {
        r = cuptiActivityRegisterCallbacks(busy_buf_req, busy_buf_done);
        registered = r == CUPTI_SUCCESS;
    }
    CUpti_ActivityKind kinds[3] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                   CUPTI_ACTIVITY_KIND_MEMSET};
    int on = 0;
    for (; on < 3 && r == CUPTI_SUCCESS; on++) r = cuptiActivityEnable(kinds[on]);
    if (r != CUPTI_SUCCESS) {
        // the kinds already enabled go off again: tracing left on would slow every later timing
        // of the benchmark while its rows said only "busy: n/a" (QA, session 32)
        for (int i = 0; i < on - 1; i++) cuptiActivityDisable(kinds[i]);
        const char *s = "?";
        cuptiGetResultString(r, &s);
        snprintf(why, n, "CUPTI activity tracing unavailable: %s", s);
        return 1;
    }
    busy_n = 0;
    busy_lost = 0;
    busy_untimed = 0;
    busy_nk = busy_k_over = 0;
    return 0;
}

// Drop what was recorded so far (the warm-up): the window starts now.
static void busy_mark(void) {
    cuptiActivityFlushAll(1);
    busy_n = 0;
    busy_lost = 0;
    busy_untimed = 0;
    busy_nk = busy_k_over = 0;
}

// Stop, flush, and return the ms during which at least one kernel or copy ran (-1: records lost
// or untimed; busy_why says which).
static double busy_stop(void) {
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
    if (busy_lost || busy_untimed) return -1;
    qsort(busy_iv, busy_n, sizeof *busy_iv, busy_cmp);
    double ns = 0;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i < busy_n; i++) {
        if (i == 0 || busy_iv[i].a > b) {
            ns += (double)(b - a);
            a = busy_iv[i].a;
            b = busy_iv[i].b;
        } else if (busy_iv[i].b > b) {
            b = busy_iv[i].b;
        }
    }
    ns += (double)(b - a);
    return ns / 1e6;
}

// Why busy_stop gave -1.
static void busy_why(char *why, size_t n) {
    if (busy_lost) snprintf(why, n, "CUPTI dropped %d activity records", busy_lost);
    else snprintf(why, n, "CUPTI gave %ld records without timestamps", busy_untimed);
}

#else
static int busy_start(char *why, size_t n) {
    snprintf(why, n, "built without CUPTI (no cupti.h / libcupti in the CUDA toolkit)");
    return 1;
}
static void busy_mark(void) {}
static double busy_stop(void) { return -1; }
static void busy_why(char *why, size_t n) { snprintf(why, n, "built without CUPTI"); }
static void busy_print_top(int steps, int top) { (void)steps; (void)top; }
#endif
