// ckpt_dirs.c — whose checkpoints a path is among: another session's ckpt/ (its resume reads
// them: :save refuses to write there) or our own (a :save there is where -r resumes); and the
// temp files a crash left in one. See session.h.
#include <dirent.h>
#include <sys/stat.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "session.h"
#include "../engine/ckpt.h"

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

// With the lock held no other dmsh writes here: a ckpt/*.ckpt.<pid>.tmp is a write a crash cut
// short. One that is whole (every CRC and the trailer: the kill came in its fsync or before its
// rename, the slowest part of a big save) is put in place, as its save would have: it was removed
// as "cut short", and a new session's only state with it (QA, session 35). The others are
// removed (never renamed into place, never a checkpoint anyone resumes from). Either is said.
void session_stale_tmps(const char *dir, char *placed, size_t nplaced) {
    placed[0] = 0;
    struct timespec newest = {0, 0};
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    DIR *d = opendir(ck);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        // NAME.ckpt.<pid>.tmp (NAME.ckpt.tmp: older builds)
        size_t len = strlen(de->d_name);
        const char *ck_at = strstr(de->d_name, ".ckpt.");
        if (len < 10 || strcmp(de->d_name + len - 4, ".tmp") || !ck_at) continue;
        int digits = 1;
        for (const char *q = ck_at + 6; q < de->d_name + len - 4; q++) digits &= *q >= '0' && *q <= '9';
        if (!digits) continue;
        char p[1400], to[1400];
        snprintf(p, sizeof p, "%s/%s", ck, de->d_name);
        snprintf(to, sizeof to, "%s/%.*s", ck, (int)(ck_at + 5 - de->d_name), de->d_name);  // NAME.ckpt
        dm_err why = {0};
        struct stat st;
        int pr = ckpt_place_tmp(p, to, &why);
        if (pr == 2 || !pr) {
            if (pr == 2) fprintf(stderr, "dmsh: removed %s (a second name of %s, which its save had put in place)\n", p, to);
            else fprintf(stderr, "dmsh: put %s in place as %s (its write was complete; a crash came before its rename)\n", p, to);
            // (the one written last, if several: the state the run had reached; a save cut
            // between its link and its unlink is as far along: LATEST follows it as well)
            if (!stat(to, &st) && (!placed[0] || st.st_mtim.tv_sec > newest.tv_sec ||
                                   (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec))) {
                newest = st.st_mtim;
                snprintf(placed, nplaced, "%.*s", (int)(ck_at + 5 - de->d_name), de->d_name);
            }
        } else if (!unlink(p)) {
            fprintf(stderr, "dmsh: removed %s (a checkpoint write cut short by a crash)\n", p);
        }
    }
    closedir(d);
}
