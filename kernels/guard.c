// kernels/guard.c — see guard.h. One chain of guards per process (the engine runs on one thread
// as far as the backends are concerned: OpenMP regions never raise).
#include "guard.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static DmGuard *top;

void dm_guard_open(DmGuard *g) {
    g->prev = top;
    g->committed = 0;
    g->msg[0] = 0;
    top = g;
}

void dm_guard_close(DmGuard *g) {
    if (top == g) top = g->prev;
}

void dm_guard_commit(void) {
    if (top) top->committed = 1;
}

void dm_guard_uncommit(void) {
    if (top) top->committed = 0;
}

int dm_guard_can_raise(void) { return top && !top->committed; }

void dm_guard_raise(const char *fmt, ...) {
    char msg[sizeof top->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!dm_guard_can_raise()) {
        fprintf(stderr, "dmsh: %s%s\n", msg,
                top ? " (inside the optimizer's update, which cannot be undone: the process ends)" : "");
        exit(1);
    }
    DmGuard *g = top;
    top = g->prev;
    snprintf(g->msg, sizeof g->msg, "%s", msg);
    longjmp(g->jb, 1);
}

void dm_fmt_bytes(char *buf, size_t n, double bytes) {
    if (bytes < 1e3) snprintf(buf, n, "%.0f B", bytes);
    else if (bytes < 1e6) snprintf(buf, n, "%.1f kB", bytes / 1e3);
    else if (bytes < 1e9) snprintf(buf, n, "%.1f MB", bytes / 1e6);
    else snprintf(buf, n, "%.1f GB", bytes / 1e9);
}
