// data.c — corpora (SPEC §5). A corpus is a file or a directory tree of regular files, sorted by
// full path (bytewise), each mmap'd read-only: the corpus is the concatenation of its files, and
// nothing is read into RAM until a window touches it, so a 50 GB corpus costs address space,
// not memory. Training windows are a pure function of (seed, step, row) so a resumed run sees
// exactly the batches an uninterrupted one would; the eval window is fixed by (eval_bytes, T).
#include "data.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rng.h"

// ----------------------------------------------------------------------------------------------
// path collection

typedef struct { char **v; int n, cap; } PathList;

static const char *plural(int n) { return n == 1 ? "" : "s"; }

static void pl_push(PathList *pl, const char *s) {
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 16;
        char **v = mallocCheck((size_t)cap * sizeof *v);
        if (pl->n) memcpy(v, pl->v, (size_t)pl->n * sizeof *v);
        free(pl->v);
        pl->v = v;
        pl->cap = cap;
    }
    size_t len = strlen(s);
    char *c = mallocCheck(len + 1);
    memcpy(c, s, len + 1);
    pl->v[pl->n++] = c;
}

static void pl_free(PathList *pl) {
    for (int i = 0; i < pl->n; i++) free(pl->v[i]);
    free(pl->v);
    memset(pl, 0, sizeof *pl);
}

// strcmp compares as unsigned char, i.e. bytewise: the order does not depend on the locale.
static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// What a directory walk left out, counted so :data can say it (it was silent: a symlinked
// directory of books dropped without a word, a file linked twice read twice).
typedef struct { int dirlinks, other, dups; } WalkSkips;

// Walk `dir` recursively, pushing regular files (and symlinks to regular files). We recurse only
// into real directories (lstat), never through symlinked ones: that rules out cycles. Anything
// else (sockets, fifos, devices, dangling links) is skipped: it is not text we can map. Each
// skip is counted.
static int walk_dir(const char *dir, PathList *pl, WalkSkips *sk, dm_err *err) {
    DIR *dp = opendir(dir);
    if (!dp) return dm_fail(err, "data: cannot read directory '%s': %s (check its permissions)", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    size_t dl = strlen(dir);
    while ((de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        size_t nl = strlen(de->d_name);
        char *p = mallocCheck(dl + nl + 2);
        memcpy(p, dir, dl);
        size_t o = dl;
        if (o == 0 || p[o - 1] != '/') p[o++] = '/';
        memcpy(p + o, de->d_name, nl + 1);
        struct stat ls, st;
        // a directory that can be listed but not searched (mode r--: `chmod -R 644`) lists names
        // whose lstat fails: an error like an unreadable file's (they were dropped unsaid, and the
        // same mode on the top directory read as "holds no regular files": QA, session 34). A name
        // gone between readdir and lstat (a file deleted meanwhile) is passed over.
        int lr = lstat(p, &ls);
        if (lr != 0 && errno != ENOENT) {
            rc = dm_fail(err, "data: cannot read '%s': %s (check the permissions of its directory: x lets a directory's files be opened)",
                         p, strerror(errno));
        } else if (lr == 0) {
            int to_reg = 0, to_dir = 0;
            if (S_ISLNK(ls.st_mode) && stat(p, &st) == 0) { to_reg = S_ISREG(st.st_mode); to_dir = S_ISDIR(st.st_mode); }
            if (S_ISDIR(ls.st_mode)) rc = walk_dir(p, pl, sk, err);
            else if (S_ISREG(ls.st_mode) || to_reg) pl_push(pl, p);
            else if (to_dir) sk->dirlinks++;
            else sk->other++;
        }
        free(p);
        if (rc) break;
    }
    closedir(dp);
    return rc;
}

typedef struct { uint64_t dev, ino; int idx; } FileId;
static int cmp_fileid(const void *a, const void *b) {
    const FileId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->idx - y->idx;
}

// One path per file: a file reached twice (a symlink beside its target, two links to it) is read
// once, under its first name in path order; the others are counted.
static void drop_duplicate_files(PathList *pl, WalkSkips *sk) {
    FileId *id = mallocCheck(sizeof(FileId) * (size_t)(pl->n ? pl->n : 1));
    int m = 0;
    for (int i = 0; i < pl->n; i++) {
        struct stat st;
        if (stat(pl->v[i], &st) == 0) id[m++] = (FileId){(uint64_t)st.st_dev, (uint64_t)st.st_ino, i};
    }
    qsort(id, (size_t)m, sizeof *id, cmp_fileid);
    for (int k = 1; k < m; k++)
        if (id[k].dev == id[k - 1].dev && id[k].ino == id[k - 1].ino) {
            free(pl->v[id[k].idx]);
            pl->v[id[k].idx] = NULL;
            sk->dups++;
        }
    free(id);
    int w = 0;
    for (int i = 0; i < pl->n; i++)
        if (pl->v[i]) pl->v[w++] = pl->v[i];
    pl->n = w;
}

// ----------------------------------------------------------------------------------------------
// corpus

static void corpus_close(Corpus *c) {
    for (int i = 0; i < c->nfiles; i++) {
        if (c->maps && c->maps[i] && c->sizes[i] > 0) munmap((void *)c->maps[i], (size_t)c->sizes[i]);
        if (c->paths) free(c->paths[i]);
    }
    free(c->paths);
    free((void *)c->maps);
    free(c->sizes);
    free(c->starts);
    free(c->devs);
    free(c->inos);
    memset(c, 0, sizeof *c);
}

// Open `path` as a corpus. On error *c is closed (zeroed) and nothing leaks.
static int corpus_open(Corpus *c, const char *path, dm_err *err) {
    memset(c, 0, sizeof *c);
    struct stat st;
    if (stat(path, &st) != 0)
        return dm_fail(err, "data: cannot open '%s': %s (check the path)", path, strerror(errno));
    PathList pl = {0};
    int is_dir = S_ISDIR(st.st_mode);
    if (is_dir) {
        WalkSkips sk = {0};
        if (walk_dir(path, &pl, &sk, err)) { pl_free(&pl); return 1; }
        if (pl.n == 0) {
            pl_free(&pl);
            return dm_fail(err, "data: directory '%s' holds no regular files (put text files in it, or point :data at a file)%s", path,
                           sk.dirlinks ? "; symlinked directories are not followed: link the files, or point :data at the directory itself" : "");
        }
        qsort(pl.v, (size_t)pl.n, sizeof *pl.v, cmp_path);
        drop_duplicate_files(&pl, &sk);
        size_t u = 0;
        char *lo = c->left_out;
        if (sk.dirlinks) u += snprintf(lo + u, sizeof c->left_out - u, "%d symlinked director%s (not followed)", sk.dirlinks, sk.dirlinks == 1 ? "y" : "ies");
        if (sk.dups && u < sizeof c->left_out)
            u += snprintf(lo + u, sizeof c->left_out - u, "%s%d name%s of a file already read", u ? ", " : "", sk.dups, plural(sk.dups));
        if (sk.other && u < sizeof c->left_out)
            snprintf(lo + u, sizeof c->left_out - u, "%s%d fifo%s, socket%s, device%s or dangling link%s", u ? ", " : "", sk.other,
                     plural(sk.other), plural(sk.other), plural(sk.other), plural(sk.other));
    } else if (S_ISREG(st.st_mode)) {
        pl_push(&pl, path);
    } else {
        return dm_fail(err, "data: '%s' is neither a regular file nor a directory (point :data at a file or a directory)", path);
    }

    // Map every non-empty file; empty files are skipped (mmap of 0 bytes is an error, and they
    // add nothing to the stream).
    c->paths = callocCheck((size_t)pl.n * sizeof *c->paths);
    c->maps = callocCheck((size_t)pl.n * sizeof *c->maps);
    c->sizes = callocCheck((size_t)pl.n * sizeof *c->sizes);
    c->starts = callocCheck((size_t)(pl.n + 1) * sizeof *c->starts);
    c->devs = callocCheck((size_t)pl.n * sizeof *c->devs);
    c->inos = callocCheck((size_t)pl.n * sizeof *c->inos);
    int64_t total = 0;
    int nempty = 0;
    for (int i = 0; i < pl.n; i++) {
        int fd = open(pl.v[i], O_RDONLY);
        if (fd < 0) {
            dm_fail(err, "data: cannot open '%s': %s (check its permissions)", pl.v[i], strerror(errno));
            goto fail;
        }
        struct stat fs;
        if (fstat(fd, &fs) != 0) {
            dm_fail(err, "data: cannot stat '%s': %s (check the file)", pl.v[i], strerror(errno));
            close(fd);
            goto fail;
        }
        if (fs.st_size == 0) { close(fd); nempty++; continue; }
        void *m = mmap(NULL, (size_t)fs.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        int e = errno;
        close(fd);  // the mapping keeps the file alive
        if (m == MAP_FAILED) {
            dm_fail(err, "data: cannot map '%s': %s (too many files? concatenate them into fewer)", pl.v[i], strerror(e));
            goto fail;
        }
        int k = c->nfiles++;
        c->paths[k] = pl.v[i];
        pl.v[i] = NULL;  // ownership moved to the corpus
        c->maps[k] = m;
        c->sizes[k] = fs.st_size;
        c->devs[k] = (uint64_t)fs.st_dev;
        c->inos[k] = (uint64_t)fs.st_ino;
        c->starts[k] = total;
        total += fs.st_size;
    }
    c->starts[c->nfiles] = total;
    c->n = total;
    if (is_dir && nempty) {  // (they add no byte, and are said with the rest left out)
        size_t u = strlen(c->left_out);
        if (u < sizeof c->left_out)
            snprintf(c->left_out + u, sizeof c->left_out - u, "%s%d empty file%s", u ? ", " : "", nempty, plural(nempty));
    }
    pl_free(&pl);
    if (total == 0) {
        corpus_close(c);
        return dm_fail(err, "data: '%s' is empty (0 bytes); point :data at a file or directory with text", path);
    }
    return 0;
fail:
    // files mapped so far are owned by c; the rest are still in pl
    pl_free(&pl);
    corpus_close(c);
    return 1;
}

// The file holding global byte i (0 <= i < n): the last k with starts[k] <= i. Empty files were
// dropped, so starts is strictly increasing and the answer is unique.
static inline int corpus_file(const Corpus *c, int64_t i) {
    int lo = 0, hi = c->nfiles - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (c->starts[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static inline uint8_t corpus_byte(const Corpus *c, int64_t i) {
    int k = corpus_file(c, i);
    return c->maps[k][i - c->starts[k]];
}

// Copy bytes [off, off+len) to ints. One binary search, then a straight loop per file: a window
// almost always lies inside one file, and crossing a boundary just moves to the next map.
static void corpus_read(const Corpus *c, int64_t off, int len, int *out) {
    if (len <= 0) return;
    int k = corpus_file(c, off);
    int64_t pos = off - c->starts[k];
    while (len > 0) {
        int64_t avail = c->sizes[k] - pos;
        int m = avail < len ? (int)avail : len;
        const uint8_t *src = c->maps[k] + pos;
        for (int j = 0; j < m; j++) out[j] = src[j];
        out += m;
        len -= m;
        k++;
        pos = 0;
    }
}

// ----------------------------------------------------------------------------------------------
// Data

void data_close(Data *d) {
    if (!d) return;
    corpus_close(&d->train);
    if (!d->shared) corpus_close(&d->eval);  // shared: eval is a copy of train's views, already freed
    memset(d, 0, sizeof *d);
}

int data_open(Data *d, const char *path, const char *eval_path, double eval_frac, int T, dm_err *err) {
    memset(d, 0, sizeof *d);
    if (!path || !*path) return dm_fail(err, "data: no path given (usage: :data PATH [eval=PATH2])");
    if (T < 1) return dm_fail(err, "data: sequence length %d for '%s' must be at least 1 (set seq)", T, path);
    if (corpus_open(&d->train, path, err)) { data_close(d); return 1; }
    const Corpus *tc = &d->train;
    if (!eval_path) {
        if (!(eval_frac > 0 && eval_frac < 1)) {
            int64_t n = tc->n;
            data_close(d);
            return dm_fail(err, "data: eval_frac %g for '%s' (%lld B) must lie in (0, 1) (set eval_frac, or give eval=PATH2)",
                           eval_frac, path, (long long)n);
        }
        d->shared = 1;
        d->eval = d->train;  // the same maps, viewed from the tail
        int64_t ne = (int64_t)floor((double)tc->n * eval_frac);
        d->n_train = tc->n - ne;
        d->eval_off = d->n_train;
        d->n_eval = ne;
        if (d->n_train < (int64_t)T + 1) {
            int64_t nt = d->n_train;
            data_close(d);
            return dm_fail(err, "data: training split of '%s' is %lld B, shorter than one sequence (seq+1 = %lld B): use a larger corpus, a smaller seq or a smaller eval_frac",
                           path, (long long)nt, (long long)T + 1);
        }
        if (d->n_eval < (int64_t)T + 1) {
            int64_t ne2 = d->n_eval;
            data_close(d);
            return dm_fail(err, "data: held-out split of '%s' is %lld B, shorter than one sequence (seq+1 = %lld B): use a larger eval_frac, a smaller seq, a larger corpus or eval=PATH2",
                           path, (long long)ne2, (long long)T + 1);
        }
        snprintf(d->desc, sizeof d->desc, "corpus %s: %d file%s, %lld B; train %lld B, held-out %lld B (last %g%%)%s%s",
                 path, tc->nfiles, plural(tc->nfiles), (long long)tc->n, (long long)d->n_train,
                 (long long)d->n_eval, eval_frac * 100, tc->left_out[0] ? "; left out: " : "", tc->left_out);
        return 0;
    }
    d->n_train = tc->n;
    if (d->n_train < (int64_t)T + 1) {
        int64_t nt = d->n_train;
        data_close(d);
        return dm_fail(err, "data: training corpus '%s' is %lld B, shorter than one sequence (seq+1 = %lld B): use a larger corpus or a smaller seq",
                       path, (long long)nt, (long long)T + 1);
    }
    if (corpus_open(&d->eval, eval_path, err)) { data_close(d); return 1; }
    d->eval_off = 0;
    d->n_eval = d->eval.n;
    if (d->n_eval < (int64_t)T + 1) {
        int64_t ne = d->n_eval;
        data_close(d);
        return dm_fail(err, "data: eval corpus '%s' is %lld B, shorter than one sequence (seq+1 = %lld B): use a larger eval file or a smaller seq",
                       eval_path, (long long)ne, (long long)T + 1);
    }
    snprintf(d->desc, sizeof d->desc, "corpus %s: %d file%s, %lld B (all train)%s%s; eval %s: %d file%s, %lld B%s%s",
             path, tc->nfiles, plural(tc->nfiles), (long long)tc->n, tc->left_out[0] ? ", left out: " : "", tc->left_out,
             eval_path, d->eval.nfiles, plural(d->eval.nfiles), (long long)d->n_eval,
             d->eval.left_out[0] ? ", left out: " : "", d->eval.left_out);
    return 0;
}

int data_fits(const Data *d, int T, dm_err *err) {
    if (T < 1) return dm_fail(err, "seq=%d: must be at least 1", T);
    if (d->n_train < (int64_t)T + 1)
        return dm_fail(err, "the training split is %lld B, shorter than one sequence (seq+1 = %lld B): a smaller seq or a larger corpus",
                       (long long)d->n_train, (long long)T + 1);
    if (d->n_eval < (int64_t)T + 1)
        return dm_fail(err, "the held-out split is %lld B, shorter than one sequence (seq+1 = %lld B): a smaller seq, or :data PATH eval=PATH2",
                       (long long)d->n_eval, (long long)T + 1);
    return 0;
}

uint8_t data_train_byte(const Data *d, int64_t i) { return corpus_byte(&d->train, i); }
uint8_t data_eval_byte(const Data *d, int64_t i) { return corpus_byte(&d->eval, d->eval_off + i); }
void data_train_read(const Data *d, int64_t off, int len, int *out) { corpus_read(&d->train, off, len, out); }
void data_eval_read(const Data *d, int64_t off, int len, int *out) { corpus_read(&d->eval, d->eval_off + off, len, out); }

// SPEC §5: off = H mod (n_train - T), H = sm(sm(sm(seed) ^ step) ^ row). The window [off, off+T]
// then ends at most at byte n_train - 1, inside the training split.
int64_t data_window_offset(uint64_t seed, int64_t step, int64_t row, int64_t n_train, int T) {
    uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ (uint64_t)step) ^ (uint64_t)row);
    return (int64_t)(h % (uint64_t)(n_train - T));
}

void data_batch(const Data *d, uint64_t seed, int64_t step, int B, int T, int *x, int *y) {
    for (int b = 0; b < B; b++) {
        int64_t off = data_window_offset(seed, step, b, d->n_train, T);
        int *xb = x + (size_t)b * T, *yb = y + (size_t)b * T;
        data_train_read(d, off, T, xb);
        // targets are the inputs shifted by one, plus one more byte: no second read of T bytes
        memcpy(yb, xb + 1, (size_t)(T - 1) * sizeof *yb);
        yb[T - 1] = data_train_byte(d, off + T);
    }
}

// ---- reads guarded against a file that shrank while mapped ---------------------------------
// A mapped file truncated on disk (a corpus regenerated with `> file`) turns a read past its new
// end into SIGBUS, which would end the process and the session with it. The step's and the
// eval's reads run with a handler armed that jumps back and makes it a one-line error.
static _Thread_local sigjmp_buf *guard_jb;
static struct sigaction bus_prev;
static int bus_installed;

static _Thread_local const void *guard_addr;  // where the guarded read faulted (names the file)
static void bus_handler(int sig, siginfo_t *si, void *uc) {
    if (guard_jb) {
        guard_addr = si ? si->si_addr : NULL;
        siglongjmp(*guard_jb, 1);
    }
    // not ours: the previous disposition
    sigaction(SIGBUS, &bus_prev, NULL);
    if (bus_prev.sa_flags & SA_SIGINFO) {
        if (bus_prev.sa_sigaction) bus_prev.sa_sigaction(sig, si, uc);
    } else if (bus_prev.sa_handler != SIG_IGN && bus_prev.sa_handler != SIG_DFL) {
        bus_prev.sa_handler(sig);
    } else {
        raise(sig);
    }
}

static void bus_install(void) {
    if (bus_installed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = bus_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &bus_prev) == 0) bus_installed = 1;
}

// (the file whose mapping holds the faulting address, named when found: QA, session 34)
static int bus_fail(const Data *d, dm_err *err) {
    const uint8_t *a = guard_addr;
    for (int s = 0; s < 2; s++) {
        const Corpus *c = s ? &d->eval : &d->train;
        for (int k = 0; a && k < c->nfiles; k++)
            if (a >= c->maps[k] && a < c->maps[k] + c->sizes[k])
                return dm_fail(err, "the corpus file %s changed on disk while open (reading it faulted: it shrank from %lld B): :data PATH "
                               "reopens the corpus", c->paths[k], (long long)c->sizes[k]);
    }
    return dm_fail(err, "a corpus file changed on disk while open (reading it faulted: it shrank): :data PATH reopens the corpus");
}

// A file cut inside its last page reads zeros past its new end instead of faulting (the page is
// still backed): a run trained on NUL bytes the file no longer held, and said nothing (QA, session
// 34). Every file [off, off + len) of c lies in is stat'ed by path after the read: the same file
// (device and inode: one replaced by a rename leaves the mapped one intact) smaller than mapped
// is an error. A file deleted keeps its mapping whole.
static int corpus_check_span(const Corpus *c, int64_t off, int64_t len, dm_err *err) {
    if (len <= 0 || off < 0 || off >= c->n) return 0;
    int k = corpus_file(c, off);
    for (; k < c->nfiles && c->starts[k] < off + len; k++) {
        struct stat st;
        if (stat(c->paths[k], &st) || (uint64_t)st.st_dev != c->devs[k] || (uint64_t)st.st_ino != c->inos[k]) continue;
        if ((int64_t)st.st_size < c->sizes[k])
            return dm_fail(err, "the corpus file %s changed on disk while open: it shrank from %lld B to %lld B, and its bytes past the "
                           "cut read as zeros; :data PATH reopens the corpus", c->paths[k], (long long)c->sizes[k], (long long)st.st_size);
    }
    return 0;
}

// One guarded read: which reader runs (batch, eval sequence, a span of train/eval) and its
// arguments; guarded() arms the handler around it.
typedef struct {
    int kind;  // 0 batch, 1 eval sequence, 2 train span, 3 eval span
    uint64_t seed;
    int64_t at;
    int B, T, len;
    int *x, *y;
} GuardedRead;

static void guarded_run(const Data *d, const GuardedRead *r) {
    switch (r->kind) {
    case 0: data_batch(d, r->seed, r->at, r->B, r->T, r->x, r->y); break;
    case 1: data_eval_seq(d, r->at, r->T, r->x, r->y); break;
    case 2: data_train_read(d, r->at, r->len, r->x); break;
    default: data_eval_read(d, r->at, r->len, r->x); break;
    }
}

static int guarded(const Data *d, const GuardedRead *r, dm_err *err) {
    bus_install();
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        guard_jb = NULL;
        return bus_fail(d, err);
    }
    guard_jb = &jb;
    guarded_run(d, r);
    guard_jb = NULL;
    // the files read, checked for a cut that read as zeros (after the read: a cut during it counts)
    switch (r->kind) {
    case 0:
        for (int b = 0; b < r->B; b++)
            if (corpus_check_span(&d->train, data_window_offset(r->seed, r->at, b, d->n_train, r->T), r->T + 1, err)) return 1;
        return 0;
    case 1: return corpus_check_span(&d->eval, d->eval_off + r->at * (int64_t)r->T, r->T + 1, err);
    case 2: return corpus_check_span(&d->train, r->at, r->len, err);
    default: return corpus_check_span(&d->eval, d->eval_off + r->at, r->len, err);
    }
}

int data_batch_checked(const Data *d, uint64_t seed, int64_t step, int B, int T, int *x, int *y, dm_err *err) {
    // a sequence longer than the split would read before its start: an error, never a read out
    // of range (:set checks seq with data_fits; :check parity's seq= option is its own length)
    if (T < 1 || d->n_train < (int64_t)T + 1)
        return dm_fail(err, "seq=%d does not fit the training split (%lld B): at most seq=%lld", T, (long long)d->n_train,
                       (long long)d->n_train - 1);
    GuardedRead r = {.kind = 0, .seed = seed, .at = step, .B = B, .T = T, .x = x, .y = y};
    return guarded(d, &r, err);
}

int data_eval_seq_checked(const Data *d, int64_t i, int T, int *x, int *y, dm_err *err) {
    if (T < 1 || d->n_eval < (int64_t)T + 1)  // as data_batch_checked
        return dm_fail(err, "seq=%d does not fit the held-out split (%lld B): at most seq=%lld", T, (long long)d->n_eval,
                       (long long)d->n_eval - 1);
    GuardedRead r = {.kind = 1, .at = i, .T = T, .x = x, .y = y};
    return guarded(d, &r, err);
}

int data_read_checked(const Data *d, int eval, int64_t off, int len, int *out, dm_err *err) {
    GuardedRead r = {.kind = eval ? 3 : 2, .at = off, .len = len, .x = out};
    return guarded(d, &r, err);
}

#define FP_P 0x100000001b3ull
static uint64_t fp_size(uint64_t h, int64_t n) {
    for (int b = 0; b < 8; b++) h = (h ^ (uint64_t)((n >> (8 * b)) & 255)) * FP_P;
    return h;
}
// 64 blocks of 1 KiB spread over the first n bytes of the training stream (s 0) or held-out split (s 1)
static int fp_blocks(const Data *d, int s, int64_t n, uint64_t *h, dm_err *err) {
    enum { NB = 64, BL = 1024 };
    int buf[BL];
    for (int b = 0; b < NB && n > 0; b++) {
        int len = n < BL ? (int)n : BL;
        int64_t off = (n - len) * b / (NB - 1);
        if (data_read_checked(d, s, off, len, buf, err)) return 1;
        for (int i = 0; i < len; i++) *h = (*h ^ (uint64_t)(buf[i] & 255)) * FP_P;
    }
    return 0;
}

uint64_t data_fingerprint(const Data *d, dm_err *err) {
    uint64_t h = fp_size(fp_size(0xcbf29ce484222325ull, d->n_train), d->n_eval);
    if (fp_blocks(d, 0, d->n_train, &h, err) || fp_blocks(d, 1, d->n_eval, &h, err)) return 0;
    return h ? h : 1;
}

uint64_t data_split_fingerprint(const Data *d, int s, dm_err *err) {
    int64_t n = s ? d->n_eval : d->n_train;
    uint64_t h = fp_size(0xcbf29ce484222325ull, n);
    if (fp_blocks(d, s, n, &h, err)) return 0;
    return h ? h : 1;
}

uint64_t data_stream_fingerprint(const Data *d, dm_err *err) {
    uint64_t h = fp_size(0xcbf29ce484222325ull, d->train.n);
    if (fp_blocks(d, 0, d->train.n, &h, err)) return 0;
    return h ? h : 1;
}

static int cmp_devino(const void *a, const void *b) {
    const FileId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    return x->ino < y->ino ? -1 : x->ino > y->ino;
}

const char *data_eval_in_train(const Data *d) {
    if (d->shared || !d->train.nfiles) return NULL;
    FileId *id = mallocCheck(sizeof(FileId) * (size_t)d->train.nfiles);
    for (int k = 0; k < d->train.nfiles; k++) id[k] = (FileId){d->train.devs[k], d->train.inos[k], k};
    qsort(id, (size_t)d->train.nfiles, sizeof *id, cmp_devino);
    const char *hit = NULL;
    for (int i = 0; i < d->eval.nfiles && !hit; i++) {
        FileId key = {d->eval.devs[i], d->eval.inos[i], 0};
        if (bsearch(&key, id, (size_t)d->train.nfiles, sizeof *id, cmp_devino)) hit = d->eval.paths[i];
    }
    free(id);
    return hit;
}

uint32_t eval_set_begin(void) { return 2166136261u; }
uint32_t eval_set_add(uint32_t h, const int *bytes, int64_t n) {
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint32_t)(bytes[i] & 255)) * 16777619u;
    return h;
}
uint32_t eval_set_end(uint32_t h) { return h ? h : 1; }

int64_t data_eval_nseq(const Data *d, int64_t eval_bytes, int T) {
    int64_t m = d->n_eval - 1;
    if (eval_bytes < m) m = eval_bytes;
    return m > 0 && T > 0 ? m / T : 0;
}

void data_eval_seq(const Data *d, int64_t i, int T, int *x, int *y) {
    int64_t off = i * (int64_t)T;
    data_eval_read(d, off, T, x);
    memcpy(y, x + 1, (size_t)(T - 1) * sizeof *y);
    y[T - 1] = data_eval_byte(d, off + T);
}
