// ckpt_keep.c — a long :train keeps a bounded number of its checkpoints (ckpt_keep=N).
//
// Why: a base model's checkpoint holds every parameter and both Adam moments (1.05 GB); a run
// of hours with ckpt_every=1000 fills a disk. Only the step-N names are removed — the files
// :train and :save write on their own — never a name a :save PATH gave, never the file LATEST
// names (where -r resumes), and only in the session's own ckpt/ (the session lock: no other dmsh
// writes there). Recency is session_list_ckpts' order, the one -r's fallbacks take, so what
// stays is what -r would fall back to. Every removal is said on :train's checkpoint line.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "session.h"

int session_keep_ckpts(const Engine *e, int keep, char *said, size_t n) {
    said[0] = 0;
    if (keep <= 0 || !e->session_dir[0]) return 0;
    // every step-N file: list with room for all of them (a cap would leave the oldest for ever)
    int cap = 64, got;
    char (*names)[256];
    long long *steps;
    for (;;) {
        names = mallocCheck((size_t)cap * 256);
        steps = mallocCheck(sizeof(long long) * (size_t)cap);
        got = session_list_ckpts(e->session_dir, names, steps, cap);
        if (got < cap) break;
        free(names);
        free(steps);
        cap *= 4;
    }
    char latest[2048] = "";
    long long lstep;
    const char *lname = "";
    if (!session_latest_ckpt(e->session_dir, latest, sizeof latest, &lstep))
        lname = strrchr(latest, '/') ? strrchr(latest, '/') + 1 : latest;
    int removed = 0, failed = 0;
    const char *oldest = NULL, *newest = NULL;  // of the removed: names[] runs newest first
    char fail[512] = "";
    for (int i = keep; i < got; i++) {
        if (!strcmp(names[i], lname)) continue;
        char p[2400];
        snprintf(p, sizeof p, "%s/ckpt/%s", e->session_dir, names[i]);
        if (unlink(p) == 0) {
            if (!newest) newest = names[i];
            oldest = names[i];
            removed++;
        } else if (errno != ENOENT && !failed++) {
            snprintf(fail, sizeof fail, "could not remove %s: %s", names[i], strerror(errno));
        }
    }
    size_t u = 0;
    if (removed == 1) u = (size_t)snprintf(said, n, "ckpt_keep=%d: removed %s", keep, newest);
    else if (removed == 2) u = (size_t)snprintf(said, n, "ckpt_keep=%d: removed %s, %s", keep, oldest, newest);
    else if (removed > 2)
        u = (size_t)snprintf(said, n, "ckpt_keep=%d: removed %d, %s to %s", keep, removed, oldest, newest);
    if (failed && u < n)
        snprintf(said + u, n - u, "%sckpt_keep=%d: %s%s", u ? "; " : "", keep, fail,
                 failed > 1 ? " (and others: see ckpt/)" : "");
    free(names);
    free(steps);
    return removed;
}
