// sync_recorder.h — fsync and rename recorded in the order they happen, for the tests of the
// durable order (a file's data synced before the rename that puts it in place). No functional
// test sees a missing fsync (QA, session 36): a program including this links with
// -Wl,--wrap=fsync -Wl,--wrap=rename (Makefile) and sets rec_on around the calls it checks.
#pragma once
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int rec_on, nrec;
static char rec[32][700];  // "fsync PATH" (the descriptor's path) or "rename FROM TO"
int __real_fsync(int fd);
int __real_rename(const char *a, const char *b);
int __wrap_fsync(int fd) {
    if (rec_on && nrec < 32) {
        char l[64], p[600];
        snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(l, p, sizeof p - 1);
        p[n > 0 ? n : 0] = 0;
        snprintf(rec[nrec++], sizeof rec[0], "fsync %s", p);
    }
    return __real_fsync(fd);
}
int __wrap_rename(const char *a, const char *b) {
    if (rec_on && nrec < 32) snprintf(rec[nrec++], sizeof rec[0], "rename %s %s", a, b);
    return __real_rename(a, b);
}
// the index of the recorded call equal to line, -1 if none
static int rec_find(const char *line) {
    for (int i = 0; i < nrec; i++)
        if (!strcmp(rec[i], line)) return i;
    return -1;
}
