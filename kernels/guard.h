// kernels/guard.h — a way back out of the middle of an op sequence.
//
// Backend ops return nothing (they are enqueued, llm.c style), so an op that cannot go on — a
// device workspace that must grow and cannot — has no error to return. Where the caller can
// still undo what ran (a forward, a backward: nothing but activations and gradients written),
// it opens a guard first; the op then calls dm_guard_raise, which closes the innermost guard
// and jumps back to it with the message. Once the caller passes a point it cannot undo (the
// optimizer starts writing weights), it calls dm_guard_commit: a raise after that ends the
// process, as a raise with no guard open does, because a half-updated model must not be kept.
//
//     DmGuard g;
//     dm_guard_open(&g);
//     if (setjmp(g.jb)) { ...undo; g.msg says why (the guard is closed already)...; }
//     ...ops...;
//     dm_guard_close(&g);
//
// A local changed between setjmp and the raise and read after it must be volatile (C11 7.13.2.1).
#pragma once
#include <setjmp.h>
#include <stddef.h>

typedef struct DmGuard {
    jmp_buf jb;
    struct DmGuard *prev;
    int committed;   // past the point of no return: a raise ends the process
    char msg[320];   // the raise's message (one line, no newline)
} DmGuard;

void dm_guard_open(DmGuard *g);
void dm_guard_close(DmGuard *g);  // the innermost guard: a no-op after a raise closed it
void dm_guard_commit(void);       // the innermost open guard (if any) can no longer be undone
// withdraws the innermost open guard's commit: for a caller whose committed ops did not run after
// all (a step recorded into a graph capture that failed: nothing was written; its eager rerun can
// still be undone, engine/step.c)
void dm_guard_uncommit(void);
int dm_guard_can_raise(void);     // 1 when a raise would return to a guard
// jumps to the innermost open guard when it is not committed; when there is none, or the
// innermost one is committed (outer guards are not tried), prints "dmsh: MSG" (and why it cannot
// be undone) to stderr and exits 1
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 1, 2)))
#endif
void dm_guard_raise(const char *fmt, ...);

// "512 B", "3.4 kB", "12.3 MB", "1.1 GB": a size in an error line, readable at any scale
void dm_fmt_bytes(char *buf, size_t n, double bytes);
