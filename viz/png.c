// png.c — see png.h. The only file besides font.c that needs the stb headers.
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "font.h"
#include "png.h"

#ifdef DM_HAVE_PNG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

// PATH.<pid>.tmp of a writer that no longer exists (killed between its write and its rename: the
// file stayed for good; QA, session 33) is removed before PATH is written again: only when it is
// empty or a PNG, never a running writer's (as checkpoints do, engine/ckpt.c)
static void remove_dead_tmps(const char *path) {
    char dirp[4200];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (slash) snprintf(dirp, sizeof dirp, "%.*s", (int)(slash - path == 0 ? 1 : slash - path), path);
    else snprintf(dirp, sizeof dirp, ".");
    DIR *d = opendir(dirp);
    if (!d) return;
    size_t bl = strlen(base);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        size_t nl = strlen(nm);
        if (nl < bl + 6 || strncmp(nm, base, bl) || nm[bl] != '.' || strcmp(nm + nl - 4, ".tmp")) continue;
        char *end;
        long pid = strtol(nm + bl + 1, &end, 10);
        if (pid <= 0 || end != nm + nl - 4 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char p[4200 + 256];
        snprintf(p, sizeof p, "%s/%s", dirp, nm);
        struct stat st;
        if (lstat(p, &st) || !S_ISREG(st.st_mode)) continue;
        unsigned char magic[4] = {0};
        FILE *f = st.st_size ? fopen(p, "rb") : NULL;
        size_t got = f ? fread(magic, 1, 4, f) : 0;
        if (f) fclose(f);
        if (st.st_size == 0 || (got == 4 && !memcmp(magic, "\x89PNG", 4))) unlink(p);
    }
    closedir(d);
}

int viz_png_check(char *err, size_t n) { return viz_font_ready(err, n); }

// The encoder's bytes go to a temp file beside path, put in place by rename once every write and
// the close succeeded: stbi_write_png checks neither and opens path itself, so a full disk left a
// cut or empty PNG where the earlier plot was, and "wrote PATH" was printed (QA, session 31)
typedef struct { FILE *f; int bad; } PngSink;
static void png_sink(void *ctx, void *data, int size) {
    PngSink *k = ctx;
    if (!k->bad && fwrite(data, 1, (size_t)size, k->f) != (size_t)size) k->bad = errno ? errno : EIO;
}

int viz_write_png(const char *path, const VizCanvas *c, char *err, size_t n) {
    // a symbolic link at path: the file it names is replaced, as a write through it did (the
    // rename would put a plain file in the link's place)
    char real[PATH_MAX];
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        if (realpath(path, real)) {
            path = real;
        } else {  // (a link to a file not there yet: the name it holds, from the link's directory)
            char to[PATH_MAX];
            ssize_t k = readlink(path, to, sizeof to - 1);
            if (k > 0) {
                to[k] = 0;
                const char *slash = strrchr(path, '/');
                int w = to[0] == '/' || !slash ? snprintf(real, sizeof real, "%s", to)
                                               : snprintf(real, sizeof real, "%.*s/%s", (int)(slash - path), path, to);
                if (w > 0 && w < (int)sizeof real) path = real;
            }
        }
    }
    remove_dead_tmps(path);
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof tmp) {
        if (err && n) snprintf(err, n, "cannot write %.200s: the path is too long", path);
        return 1;
    }
    errno = 0;
    PngSink k = {fopen(tmp, "wb"), 0};
    if (!k.f) {
        if (err && n) snprintf(err, n, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        return 1;
    }
    int ok = stbi_write_png_to_func(png_sink, &k, c->w, c->h, 3, c->px, c->w * 3);
    if (!ok && !k.bad) k.bad = -1;  // (the encoder itself: out of memory)
    if (!k.bad && fflush(k.f) != 0) k.bad = errno ? errno : EIO;
    if (fclose(k.f) != 0 && !k.bad) k.bad = errno ? errno : EIO;
    if (!k.bad && rename(tmp, path) != 0) k.bad = errno ? errno : EIO;
    if (k.bad) {
        unlink(tmp);
        if (err && n)
            snprintf(err, n, "cannot write %s: %s (the previous file, if any, is untouched)", path,
                     k.bad > 0 ? strerror(k.bad) : "PNG encoder failed");
        return 1;
    }
    return 0;
}
#else
int viz_png_check(char *err, size_t n) {
    if (err && n) snprintf(err, n, DM_NO_PNG_WHY);
    return 1;
}
int viz_write_png(const char *path, const VizCanvas *c, char *err, size_t n) {
    (void)path; (void)c;
    return viz_png_check(err, n);
}
#endif
