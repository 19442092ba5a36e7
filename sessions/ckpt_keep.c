// ckpt_keep.c — :train ckpt_every=K ckpt_keep=N: of the checkpoints this :train writes, the N
// newest stay; each older one is removed when a newer one is in place, and said.
//
// Why: a base model's checkpoint holds every parameter and both Adam moments (1.05 GB); a run of
// hours with ckpt_every=1000 fills a disk. Only files this :train wrote itself go: never a
// checkpoint from before it (an earlier run's, a :save, the file a :load went back to), never
// one a save found already holding the state. Nothing saved before the command is touched.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "session.h"

int ckpt_keep_after(CkptKeep *k, const char *path, int fresh, char *said, size_t n) {
    said[0] = 0;
    if (k->keep <= 0 || !fresh) return 0;
    // at most keep + 1 paths are held: the one over is removed at once
    if (k->n % 16 == 0) {
        char **grown = mallocCheck(sizeof(char *) * (size_t)(k->n + 16));
        if (k->n) memcpy(grown, k->paths, sizeof(char *) * (size_t)k->n);
        free(k->paths);
        k->paths = grown;
    }
    k->paths[k->n] = mallocCheck(strlen(path) + 1);
    strcpy(k->paths[k->n++], path);
    int removed = 0;
    size_t u0 = (size_t)snprintf(said, n, "ckpt_keep=%d: ", k->keep), u = u0;  // (taken back if nothing follows)
    while (k->n > k->keep) {
        char *old = k->paths[0];
        const char *base = strrchr(old, '/') ? strrchr(old, '/') + 1 : old;
        if (unlink(old) == 0) {
            removed++;
            if (u < n) u += (size_t)snprintf(said + u, n - u, "%s%s", u > u0 ? ", " : "removed ", base);
        } else if (u < n) {  // (gone from where it was written: the session moved, or a hand removed it)
            u += (size_t)snprintf(said + u, n - u, "%scould not remove %s: %s", u > u0 ? "; " : "", base,
                                  errno == ENOENT ? "not where it was written (the session moved, or it was removed)" : strerror(errno));
        }
        free(old);
        memmove(k->paths, k->paths + 1, sizeof(char *) * (size_t)--k->n);
    }
    if (u == u0) said[0] = 0;  // "ckpt_keep=N: removed step-6.ckpt", or nothing
    return removed;
}

void ckpt_keep_free(CkptKeep *k) {
    for (int i = 0; i < k->n; i++) free(k->paths[i]);
    free(k->paths);
    k->paths = NULL;
    k->n = 0;
}
