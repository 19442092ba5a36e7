// err.h — errors as values. The engine never prints: it fills a dm_err with one line that says
// what went wrong and what to do, and the caller (REPL, tests) decides how to show it.
#pragma once
#include <stdarg.h>
#include <stdio.h>

typedef struct { int code; char msg[2048]; } dm_err;  // (room for a :run chain of FILE:LINE: prefixes)

static inline int dm_fail(dm_err *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = 1;
        // one line, and no terminal control: a byte below 0x20 or DEL from what was typed or
        // read (an escape sequence, a bell, a line break in a name) shows as '?' (QA, session 24)
        for (char *c = e->msg; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    }
    return 1;
}

// mallocCheck / callocCheck: allocation that fails loudly with file:line and a hint.
#include <stdlib.h>
static inline void *malloc_check(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "%s:%d: out of memory allocating %zu bytes (hint: a smaller batch, seq or preset)\n", file, line, n);
        exit(1);
    }
    return p;
}
static inline void *calloc_check(size_t n, const char *file, int line) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "%s:%d: out of memory allocating %zu bytes (hint: a smaller batch, seq or preset)\n", file, line, n);
        exit(1);
    }
    return p;
}
static inline void *realloc_check(void *old, size_t n, const char *file, int line) {
    void *p = realloc(old, n ? n : 1);
    if (!p) {
        fprintf(stderr, "%s:%d: out of memory growing a buffer to %zu bytes (hint: a smaller batch, seq or preset)\n", file, line, n);
        exit(1);
    }
    return p;
}
#define mallocCheck(n) malloc_check((n), __FILE__, __LINE__)
#define reallocCheck(p, n) realloc_check((p), (n), __FILE__, __LINE__)
#define callocCheck(n) calloc_check((n), __FILE__, __LINE__)
