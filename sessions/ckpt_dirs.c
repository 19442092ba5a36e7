// ckpt_dirs.c — whose checkpoints a path is among: another session's ckpt/ (its resume reads
// them: :save refuses to write there) or our own (a :save there is where -r resumes). See
// session.h.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "session.h"

int session_foreign_ckpt_dir(const Engine *e, const char *path, char *owner, size_t n) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    char abs[PATH_MAX];
    if (!realpath(dir, abs)) return 0;
    size_t al = strlen(abs);
    if (al < 5 || strcmp(abs + al - 5, "/ckpt")) return 0;
    abs[al - 5] = 0;  // the directory holding ckpt/: a session's when it has its files
    char f1[PATH_MAX + 32], f2[PATH_MAX + 32];
    snprintf(f1, sizeof f1, "%s/transcript.dm", abs);
    snprintf(f2, sizeof f2, "%s/config.dm", abs);
    if (access(f1, F_OK) != 0 && access(f2, F_OK) != 0) return 0;
    if (e->session_dir[0] && session_same_dir(e->session_dir, abs)) return 0;
    snprintf(owner, n, "%s", abs);
    return 1;
}

int session_own_ckpt(const Engine *e, const char *path) {
    if (!e->session_dir[0]) return 0;
    char dir[PATH_MAX], ck[1100], a[PATH_MAX], b[PATH_MAX];
    const char *slash = strrchr(path, '/');  // (its directory: the file need not exist yet)
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    snprintf(ck, sizeof ck, "%s/ckpt", e->session_dir);
    return realpath(dir, a) && realpath(ck, b) && !strcmp(a, b);
}
