// ckpt.c — the checkpoint container (SPEC §6 "Checkpoints").
//
// Layout. Every integer is little-endian; section payloads are the host's raw bytes (floats,
// doubles), which is why the host must be little-endian too (checked below).
//
//   file header, 24 bytes
//      0  magic "DMSHCKPT"                         8 bytes
//      8  format version (u32) = 2 (1 and 2 are read alike: see CK_VERSION)
//     12  section count (u32)
//     16  CRC32 of bytes 0..15 (u32)
//     20  reserved (u32), written as 0, must read 0; it makes the header 24 bytes so every
//         section's data starts 8-aligned in the file and in the loaded image (a malloc'd
//         image is 16-aligned), and callers may read doubles / u64 straight from f->image
//   per section: a 48-byte header, then the data, then 0..7 zero bytes up to a multiple of 8
//      0  name, NUL-terminated, NUL-padded          32 bytes (so at most 31 characters)
//     32  data size in bytes (u64), padding excluded
//     40  CRC32 of the data (u32)
//     44  CRC32 of bytes 0..43 of this section header (u32)
//   trailer, 20 bytes
//      0  "DMSHEND\0"                               8 bytes
//      8  total file size in bytes (u64), trailer included
//     16  CRC32 of trailer bytes 0..15 (u32)
//
// The trailer exists because a file cut exactly at a section boundary is otherwise a valid
// prefix; with it, any truncation is detected. Future format versions keep the meaning of the
// first 20 bytes (magic, version, count, header CRC), so this reader can tell "written by a
// newer dmsh" (CRC fine, version > CK_VERSION) apart from "corrupted" (CRC wrong).
//
// Writing goes to PATH.<pid>.tmp (one name per writer), which is fsynced, closed, renamed onto PATH, and then the directory
// is fsynced, so the name PATH always holds either the old or the new complete file.
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "dmsh checkpoints store raw little-endian numbers; this host is big-endian");
#endif

#define CK_MAGIC "DMSHCKPT"
#define CK_TRAILER_MAGIC "DMSHEND" // the eighth byte is the string's NUL
// 2 since session 32, with no change to the layout: the metric rows carry fields (arms_off,
// emulated) in bytes a format-1 reader took for padding, and a dmsh of before those fields loaded
// a newer file and misread its rows (an ablated step's row as "skipped 262144": a QA pass on
// files across builds). Writing 2 makes such a reader refuse the file ("written by a newer dmsh");
// this one reads 1 and 2 alike (a format-1 file's padding holds zeros or what the row checks refuse).
#define CK_VERSION 2u
#define CK_VERSION_MIN 1u
#define CK_HDR 24u
#define CK_SHDR 48u
#define CK_TRL 20u
#define CK_NAME 32u

// Runtime twin of the static assert, for compilers that do not define __BYTE_ORDER__.
static int host_is_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

// ---------------------------------------------------------------------------------------------
// CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320), zlib's crc32() semantics: pass 0 to start,
// pass the previous result to continue. Slicing-by-8: eight tables let one step consume 8 bytes
// with independent lookups, ~5-8x a byte-at-a-time loop, which matters for 100s of MB.

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    // crc_tab[k][i]: the CRC contribution of byte i followed by k zero bytes
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_tab[k][i] = (crc_tab[k - 1][i] >> 8) ^ crc_tab[0][crc_tab[k - 1][i] & 0xFF];
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init); // tables built once, safely from any thread
    const uint8_t *p = data;
    uint32_t c = ~crc;
    // byte steps up to an 8-aligned address so the 8-byte loads below are aligned
    while (n && ((uintptr_t)p & 7)) { c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8); n--; }
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4); // memcpy: no aliasing/alignment UB; compiles to a plain load
        memcpy(&b, p + 4, 4);
        a ^= c; // little-endian: a's low byte is the first byte of the stream
        c = crc_tab[7][a & 0xFF] ^ crc_tab[6][(a >> 8) & 0xFF] ^ crc_tab[5][(a >> 16) & 0xFF] ^
            crc_tab[4][a >> 24] ^ crc_tab[3][b & 0xFF] ^ crc_tab[2][(b >> 8) & 0xFF] ^
            crc_tab[1][(b >> 16) & 0xFF] ^ crc_tab[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

// ---------------------------------------------------------------------------------------------
// Little-endian field access. Explicit byte order keeps the container's own fields portable even
// though payloads are host-order.

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static uint64_t pad8(uint64_t n) { return (8 - (n & 7)) & 7; }

// ---------------------------------------------------------------------------------------------
// Writing

// write(2) may write less than asked (signals, pipes, >2 GB requests) or fail with EINTR.
static int write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30); // Linux caps one write near 2 GB
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { errno = EIO; return -1; } // no progress on a regular file: treat as I/O error
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

// Refuse what would produce an unreadable or ambiguous file before touching the disk.
static int check_sections(const char *path, const CkptSection *sec, int nsec, dm_err *err) {
    if (nsec < 0 || (nsec > 0 && !sec))
        return dm_fail(err, "%s: cannot save checkpoint: invalid section list (%d sections)", path, nsec);
    for (int i = 0; i < nsec; i++) {
        size_t len = strnlen(sec[i].name, CK_NAME);
        if (len == 0) return dm_fail(err, "%s: cannot save checkpoint: section %d has an empty name", path, i + 1);
        if (len >= CK_NAME)
            return dm_fail(err, "%s: cannot save checkpoint: section name '%.32s' is longer than %u bytes",
                           path, sec[i].name, CK_NAME - 1);
        if (sec[i].size > 0 && !sec[i].data)
            return dm_fail(err, "%s: cannot save checkpoint: section '%s' has %llu bytes but no data",
                           path, sec[i].name, (unsigned long long)sec[i].size);
        if (sec[i].size > SIZE_MAX)
            return dm_fail(err, "%s: cannot save checkpoint: section '%s' is too large", path, sec[i].name);
        for (int j = 0; j < i; j++)
            if (strncmp(sec[i].name, sec[j].name, CK_NAME) == 0)
                return dm_fail(err, "%s: cannot save checkpoint: duplicate section '%s'", path, sec[i].name);
    }
    return 0;
}

// fsync the directory holding path, so the rename itself survives a power loss.
static int fsync_dir_of(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == path) strcpy(dir, "/");
    else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) { errno = ENAMETOOLONG; return -1; }
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    // some filesystems cannot fsync a directory (EINVAL): nothing more can be done there
    if (rc < 0 && e != EINVAL) { errno = e; return -1; }
    return 0;
}

void ckpt_tmp_path(const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s.%ld.tmp", path, (long)getpid());
}

// The pid in NAME when it is BASE.<pid>.tmp (a temp file of a checkpoint write to BASE), else 0.
static long tmp_owner(const char *name, const char *base) {
    size_t bl = strlen(base), nl = strlen(name);
    if (nl < bl + 6 || strncmp(name, base, bl) || name[bl] != '.' || strcmp(name + nl - 4, ".tmp")) return 0;
    long pid = 0;
    for (size_t i = bl + 1; i < nl - 4; i++) {
        if (name[i] < '0' || name[i] > '9' || pid > 100000000L) return 0;
        pid = pid * 10 + (name[i] - '0');
    }
    return pid;
}

// 1 when the file at p is empty or begins like a checkpoint (a write of ours, cut short)
static int looks_like_our_tmp(const char *p) {
    struct stat st;
    if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    if (st.st_size == 0) return 1;
    char magic[8] = {0};
    int tf = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t got = tf >= 0 ? read(tf, magic, 8) : -1;
    if (tf >= 0) close(tf);
    return got > 0 && memcmp(magic, CK_MAGIC, (size_t)got) == 0;
}

// Temp files of writes to PATH by processes that no longer exist (killed during a save) are
// removed: each writer has its own PATH.<pid>.tmp, so one that is still running (another dmsh
// saving to the same name) is never touched. (PATH.tmp, the name older builds used, is left: it
// may be a user's file; a session removes its own under its lock.)
static void remove_dead_tmps(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path == 0 ? 1 : slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        long pid = tmp_owner(de->d_name, base);
        int dead = pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        if (!dead) continue;
        char p[PATH_MAX + NAME_MAX + 2];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (looks_like_our_tmp(p)) unlink(p);
    }
    closedir(d);
}

// Put the finished temp file at PATH without replacing anything there (a second process chose
// the same free name since): 2 when PATH exists. renameat2(RENAME_NOREPLACE), or link() where
// the filesystem lacks it; a filesystem with neither gets a check-then-rename.
static int place_new(const char *tmp, const char *path) {
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
    if (errno == EEXIST) return 2;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return -1;
    if (link(tmp, path) == 0) { unlink(tmp); return 0; }
    if (errno == EEXIST) return 2;
    struct stat st;
    if (lstat(path, &st) == 0) return 2;
    return rename(tmp, path) == 0 ? 0 : -1;
}

static int ckpt_write_impl(const char *path, const CkptSection *sec, int nsec, int mode, dm_err *err) {
    int do_rename = mode != CK_STOP_BEFORE_RENAME;
    if (!host_is_le()) return dm_fail(err, "%s: cannot save checkpoint: big-endian hosts are not supported", path);
    if (check_sections(path, sec, nsec, err)) return 1;
    // the path itself first: its errors would otherwise surface as a failed create or rename of
    // PATH.tmp, naming a file the user never asked for
    if (!path[0]) return dm_fail(err, "cannot save checkpoint: the path is empty");
    struct stat ps;
    if (path[strlen(path) - 1] == '/' || (stat(path, &ps) == 0 && S_ISDIR(ps.st_mode)))
        return dm_fail(err, "%s: cannot save checkpoint: a directory; give a file name (e.g. %s%smodel.ckpt)", path, path,
                       path[strlen(path) - 1] == '/' ? "" : "/");
    {
        char dir[PATH_MAX];
        const char *slash = strrchr(path, '/');
        if (slash && slash != path && (size_t)(slash - path) < sizeof dir) {
            memcpy(dir, path, (size_t)(slash - path));
            dir[slash - path] = 0;
            if (stat(dir, &ps) != 0)
                return dm_fail(err, "%s: cannot save checkpoint: directory %s does not exist", path, dir);
            if (!S_ISDIR(ps.st_mode))
                return dm_fail(err, "%s: cannot save checkpoint: %s is not a directory", path, dir);
        }
    }
    char tmp[PATH_MAX + 32];
    ckpt_tmp_path(path, tmp, sizeof tmp);
    if (strlen(tmp) >= PATH_MAX) return dm_fail(err, "%s: cannot save checkpoint: path too long", path);
    // the temp file's name is the file's plus ".PID.tmp": past the file system's limit on a name,
    // its create failed as "remove stale NAME.PID.tmp: File name too long" (QA, session 24)
    const char *base = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
    if (strlen(base) > NAME_MAX)
        return dm_fail(err, "cannot save checkpoint: the file name is %zu bytes; with the temp file's .PID.tmp it passes the %d-byte limit on a name (choose a shorter one)",
                       strlen(strrchr(path, '/') ? strrchr(path, '/') + 1 : path), NAME_MAX);

    if (mode == CK_REPLACE) {  // never replace a file that is not a checkpoint (a corpus, a script, ...)
        int pf = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (pf >= 0) {
            struct stat pst;
            char magic[8] = {0};
            int foreign = fstat(pf, &pst) == 0 && (!S_ISREG(pst.st_mode) ||
                          (pst.st_size > 0 && (read(pf, magic, 8) != 8 || memcmp(magic, CK_MAGIC, 8) != 0)));
            close(pf);
            if (foreign)
                return dm_fail(err, "%s: exists and is not a dmsh checkpoint: not replaced (choose another path)", path);
        }
    }
    // PATH.<pid>.tmp is this writer's name: a stale one (a crash of an earlier process with
    // this pid) or a link is removed, never written through (O_EXCL | O_NOFOLLOW: a symlink
    // there cannot redirect the write). A regular file there that is not a checkpoint's
    // beginning is someone else's: refused, never deleted. Another live writer's temp file for
    // the same PATH has another name and is left alone (two runs saving dmsh-step-N.ckpt in one
    // directory each deleted the other's and lost a save).
    remove_dead_tmps(path);
    struct stat tst;
    if (lstat(tmp, &tst) == 0 && S_ISREG(tst.st_mode) && tst.st_size > 0) {
        char magic[8] = {0};
        int tf = open(tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t got = tf >= 0 ? read(tf, magic, 8) : -1;
        if (tf >= 0) close(tf);
        if (got <= 0 || memcmp(magic, CK_MAGIC, (size_t)got) != 0)
            return dm_fail(err, "%s: cannot save checkpoint: %s exists and is not a dmsh temp file: not removed (move it away)",
                           path, tmp);
    } else if (lstat(tmp, &tst) == 0 && S_ISDIR(tst.st_mode)) {
        return dm_fail(err, "%s: cannot save checkpoint: %s is a directory", path, tmp);
    }
    if (unlink(tmp) < 0 && errno != ENOENT)
        return dm_fail(err, "%s: cannot save checkpoint: remove stale %s: %s", path, tmp, strerror(errno));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return dm_fail(err, "%s: cannot save checkpoint: create %s: %s", path, tmp, strerror(errno));

    const char *what = "write";
    uint64_t total = CK_HDR + CK_TRL;
    for (int i = 0; i < nsec; i++) total += CK_SHDR + sec[i].size + pad8(sec[i].size);

    uint8_t h[CK_HDR] = {0};
    memcpy(h, CK_MAGIC, 8);
    put_u32(h + 8, CK_VERSION);
    put_u32(h + 12, (uint32_t)nsec);
    put_u32(h + 16, crc32_update(0, h, 16));
    if (write_all(fd, h, sizeof h)) goto fail;

    static const uint8_t zeros[8] = {0};
    for (int i = 0; i < nsec; i++) {
        uint8_t s[CK_SHDR] = {0};
        memcpy(s, sec[i].name, strnlen(sec[i].name, CK_NAME)); // rest stays NUL
        put_u64(s + 32, sec[i].size);
        put_u32(s + 40, crc32_update(0, sec[i].data, (size_t)sec[i].size));
        put_u32(s + 44, crc32_update(0, s, 44));
        if (write_all(fd, s, sizeof s)) goto fail;
        if (write_all(fd, sec[i].data, (size_t)sec[i].size)) goto fail;
        if (write_all(fd, zeros, (size_t)pad8(sec[i].size))) goto fail;
    }

    uint8_t t[CK_TRL];
    memcpy(t, CK_TRAILER_MAGIC, 8);
    put_u64(t + 8, total);
    put_u32(t + 16, crc32_update(0, t, 16));
    if (write_all(fd, t, sizeof t)) goto fail;

    what = "fsync";
    if (fsync(fd) < 0) goto fail;
    what = "close";
    int rc = close(fd); // NFS and friends report deferred write errors here
    fd = -1;
    if (rc < 0) goto fail;
    if (!do_rename) return 0;
    what = "rename";
    if (mode == CK_NEW) {
        int pr = place_new(tmp, path);
        if (pr == 2) {
            unlink(tmp);
            dm_fail(err, "%s: cannot save checkpoint: the file appeared while this one was written (another process saved there): not replaced",
                    path);
            return 2;
        }
        if (pr < 0) goto fail;
    } else if (rename(tmp, path) < 0) goto fail;
    if (fsync_dir_of(path) < 0)
        return dm_fail(err, "%s: checkpoint renamed into place, but syncing its directory failed: %s",
                       path, strerror(errno));
    return 0;

fail:;
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp); // never leave a partial temp file behind; PATH itself was not touched
    return dm_fail(err, "%s: cannot save checkpoint: %s %s: %s (the previous file, if any, is untouched)",
                   path, what, tmp, strerror(e));
}

int ckpt_place_tmp(const char *tmp, const char *path, dm_err *err) {
    // a link of path already (place_new's link() without its unlink(): rename would do nothing,
    // and the temp name would be "put in place" at every -r)
    struct stat ts, ps;
    if (!stat(tmp, &ts) && !stat(path, &ps) && ts.st_dev == ps.st_dev && ts.st_ino == ps.st_ino)
        return unlink(tmp) == 0 ? 2 : dm_fail(err, "%s: remove: %s", tmp, strerror(errno));
    CkptFile f;
    if (ckpt_read(tmp, &f, err)) return 1;  // (every length and CRC, and the trailer)
    ckpt_close(&f);
    // the crash may have come before its fsync: the bytes read back are the page cache's
    int fd = open(tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fsync(fd) < 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return dm_fail(err, "%s: sync: %s", tmp, strerror(e));
    }
    close(fd);
    if (rename(tmp, path) < 0) return dm_fail(err, "%s: rename to %s: %s", tmp, path, strerror(errno));
    if (fsync_dir_of(path) < 0) return dm_fail(err, "%s: put in place, but syncing its directory failed: %s", path, strerror(errno));
    return 0;
}

int ckpt_write(const char *path, const CkptSection *sec, int nsec, dm_err *err) {
    return ckpt_write_impl(path, sec, nsec, CK_REPLACE, err);
}

int ckpt_write_mode(const char *path, const CkptSection *sec, int nsec, int mode, dm_err *err) {
    return ckpt_write_impl(path, sec, nsec, mode, err);
}

int ckpt_write_no_rename(const char *path, const CkptSection *sec, int nsec, dm_err *err) {
    return ckpt_write_impl(path, sec, nsec, CK_STOP_BEFORE_RENAME, err);
}

// ---------------------------------------------------------------------------------------------
// Reading

// Verify the whole image; fill out[0..cap) with sections pointing into img. Nothing is handed
// out unless every byte checks: lengths, every CRC, zero padding, and the trailer.
static int verify(const char *path, const uint8_t *img, size_t n, CkptSection *out, int cap, dm_err *err) {
    if (n == 0) return dm_fail(err, "%s: empty file (truncated inside the file header)", path);
    if (memcmp(img, CK_MAGIC, n < 8 ? n : 8) != 0) return dm_fail(err, "%s: not a dmsh checkpoint (bad magic)", path);
    if (n < CK_HDR)
        return dm_fail(err, "%s: truncated inside the file header (%zu of %u bytes)", path, n, CK_HDR);
    if (get_u32(img + 16) != crc32_update(0, img, 16))
        return dm_fail(err, "%s: file header: CRC mismatch (file corrupted)", path);
    uint32_t version = get_u32(img + 8);
    if (version > CK_VERSION)
        return dm_fail(err, "%s: written by a newer dmsh (format %u), this one reads %u", path, version, CK_VERSION);
    if (version < CK_VERSION_MIN)
        return dm_fail(err, "%s: unknown checkpoint format version %u (file corrupted?)", path, version);
    if (get_u32(img + 20) != 0) return dm_fail(err, "%s: file header: nonzero reserved bytes (file corrupted)", path);
    uint32_t nsec = get_u32(img + 12);
    if (nsec > INT_MAX) return dm_fail(err, "%s: %u sections is more than this reader handles", path, nsec);

    size_t off = CK_HDR;
    char after[CK_NAME + 16] = "the file header"; // where we are, for truncation messages
    for (uint32_t i = 0; i < nsec; i++) {
        size_t left = n - off;
        if (left == 0)
            return dm_fail(err, "%s: truncated before section %u of %u (after %s)", path, i + 1, nsec, after);
        if (left < CK_SHDR)
            return dm_fail(err, "%s: truncated inside the header of section %u of %u (after %s)", path, i + 1, nsec, after);
        const uint8_t *s = img + off;
        if (get_u32(s + 44) != crc32_update(0, s, 44))
            return dm_fail(err, "%s: header of section %u of %u (after %s): CRC mismatch (file corrupted)",
                           path, i + 1, nsec, after);
        const char *name = (const char *)s;
        size_t len = strnlen(name, CK_NAME);
        if (len == 0 || len == CK_NAME)
            return dm_fail(err, "%s: header of section %u of %u: invalid name (file corrupted)", path, i + 1, nsec);
        // a well-formed name is NUL-padded; anything after the NUL would be invisible to ckpt_find
        for (size_t k = len; k < CK_NAME; k++)
            if (s[k]) return dm_fail(err, "%s: header of section %u of %u: invalid name (file corrupted)", path, i + 1, nsec);
        for (uint32_t j = 0; j < i && (int)j < cap; j++)
            if (strcmp(out[j].name, name) == 0) return dm_fail(err, "%s: duplicate section '%s' (file corrupted)", path, name);

        uint64_t size = get_u64(s + 32);
        left -= CK_SHDR;
        if (size > left)
            return dm_fail(err, "%s: truncated inside section '%s' (expected %llu bytes, %zu left)",
                           path, name, (unsigned long long)size, left);
        size_t pad = (size_t)pad8(size);
        if (pad > left - size)
            return dm_fail(err, "%s: truncated inside section '%s' (in its padding: expected %llu bytes, %zu left)",
                           path, name, (unsigned long long)(size + pad), left);
        const uint8_t *data = s + CK_SHDR;
        if (get_u32(s + 40) != crc32_update(0, data, (size_t)size))
            return dm_fail(err, "%s: section '%s': CRC mismatch (file corrupted)", path, name);
        for (size_t k = 0; k < pad; k++)
            if (data[size + k]) return dm_fail(err, "%s: section '%s': nonzero padding (file corrupted)", path, name);

        // cap bounds how many sections can fit in n bytes, so this never overflows out[]
        if ((int)i >= cap) return dm_fail(err, "%s: internal error: section table overflow", path);
        memcpy(out[i].name, name, len + 1);
        out[i].data = data;
        out[i].size = size;
        snprintf(after, sizeof after, "section '%s'", name);
        off += CK_SHDR + (size_t)size + pad;
    }

    size_t left = n - off;
    if (left == 0) return dm_fail(err, "%s: truncated before the trailer (after %s)", path, after);
    if (left < CK_TRL) return dm_fail(err, "%s: truncated inside the trailer (%zu of %u bytes)", path, left, CK_TRL);
    const uint8_t *t = img + off;
    if (memcmp(t, CK_TRAILER_MAGIC, 8) != 0) return dm_fail(err, "%s: bad trailer magic (file corrupted)", path);
    if (get_u32(t + 16) != crc32_update(0, t, 16)) return dm_fail(err, "%s: trailer: CRC mismatch (file corrupted)", path);
    if (left > CK_TRL)
        return dm_fail(err, "%s: %zu unexpected bytes after the trailer (file corrupted)", path, left - CK_TRL);
    if (get_u64(t + 8) != n)
        return dm_fail(err, "%s: trailer records %llu bytes but the file has %zu (file corrupted)",
                       path, (unsigned long long)get_u64(t + 8), n);
    return 0;
}

int ckpt_read(const char *path, CkptFile *f, dm_err *err) {
    memset(f, 0, sizeof *f);
    if (!host_is_le()) return dm_fail(err, "%s: cannot load checkpoint: big-endian hosts are not supported", path);
    // O_NONBLOCK: a FIFO at path would block the open until a writer came (it is then refused
    // as not a regular file below); reads of a regular file ignore the flag
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dm_fail(err, "%s: cannot open checkpoint: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return dm_fail(err, "%s: cannot stat checkpoint: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dm_fail(err, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    // the magic before the whole file: a 6 GB file that is no checkpoint was read into memory
    // first (29 s, 6.4 GB), and one larger than memory would end the process
    char head[8];
    ssize_t hn = pread(fd, head, sizeof head, 0);
    if (hn > 0 && memcmp(head, CK_MAGIC, (size_t)hn) != 0) {
        close(fd);
        return dm_fail(err, "%s: not a dmsh checkpoint (bad magic)", path);
    }
    // plain malloc, not mallocCheck: a checkpoint too big for memory is an error to report, not exit
    uint8_t *img = malloc(n ? n : 1);
    if (!img) {
        close(fd);
        return dm_fail(err, "%s: cannot allocate %zu bytes to load the checkpoint", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, img + got, n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(img);
            close(fd);
            return dm_fail(err, "%s: cannot read checkpoint: %s", path, strerror(e));
        }
        if (r == 0) break; // shrank under us: verify what is there, which will then fail cleanly
        got += (size_t)r;
    }
    close(fd);

    // Each section takes at least CK_SHDR bytes, so this many slots always suffice for a file
    // that verifies, and a corrupt count cannot make us allocate more than the file's size.
    // The header's count (not yet verified) can only shrink the table, never grow it.
    size_t cap = got > CK_HDR ? (got - CK_HDR) / CK_SHDR : 0;
    if (got >= CK_HDR && get_u32(img + 12) < cap) cap = get_u32(img + 12);
    if (cap > INT_MAX) cap = INT_MAX;
    CkptSection *sec = calloc(cap + 1, sizeof *sec);
    if (!sec) {
        free(img);
        return dm_fail(err, "%s: cannot allocate the section table", path);
    }
    if (verify(path, img, got, sec, (int)cap, err)) {
        free(sec);
        free(img);
        return 1;
    }
    f->image = img;
    f->image_size = got;
    f->sec = sec;
    f->nsec = (int)get_u32(img + 12);
    f->version = get_u32(img + 8);
    return 0;
}

const CkptSection *ckpt_find(const CkptFile *f, const char *name) {
    for (int i = 0; i < f->nsec; i++)
        if (strncmp(f->sec[i].name, name, CK_NAME) == 0) return &f->sec[i];
    return NULL;
}

void ckpt_close(CkptFile *f) {
    if (!f) return;
    free(f->sec);
    free(f->image);
    memset(f, 0, sizeof *f);
}

// One section without reading the file: the headers are walked with pread (each checked by its
// CRC) to the trailer (which must close the file: a file cut short anywhere is refused), and the
// section's own bytes are read and checked by theirs. The other sections' bytes are not read: a
// listing (:sessions) reads a step this way from checkpoints of any size.
int ckpt_peek(const char *path, const char *name, void *buf, size_t cap, size_t *size, dm_err *err) {
    return ckpt_peek_at(path, name, buf, cap, size, NULL, err);
}

int ckpt_peek_at(const char *path, const char *name, void *buf, size_t cap, size_t *size, CkptLoc *loc, dm_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dm_fail(err, "%s: cannot open checkpoint: %s", path, strerror(errno));
    struct stat st;
    const char *why = NULL;
    uint8_t h[CK_HDR];
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) why = "not a regular file";
    else if (pread(fd, h, CK_HDR, 0) != (ssize_t)CK_HDR) why = "truncated inside the file header";
    else if (memcmp(h, CK_MAGIC, 8)) why = "not a dmsh checkpoint (bad magic)";
    else if (get_u32(h + 16) != crc32_update(0, h, 16)) why = "file header: CRC mismatch (file corrupted)";
    else if (get_u32(h + 8) < CK_VERSION_MIN || get_u32(h + 8) > CK_VERSION) why = "unknown checkpoint format version";
    else if (get_u32(h + 20) != 0) why = "file header: nonzero reserved bytes (file corrupted)";
    uint64_t off = CK_HDR, fsz = (uint64_t)st.st_size;
    int found = 0;
    for (uint32_t i = 0, nsec = why ? 0 : get_u32(h + 12); i < nsec && !why; i++) {
        uint8_t s[CK_SHDR];
        if (off + CK_SHDR > fsz || pread(fd, s, CK_SHDR, (off_t)off) != (ssize_t)CK_SHDR) why = "truncated inside a section header";
        else if (get_u32(s + 44) != crc32_update(0, s, 44)) why = "section header: CRC mismatch (file corrupted)";
        else {
            uint64_t sz = get_u64(s + 32);
            if (sz > fsz - off - CK_SHDR) why = "truncated inside a section";
            else if (!found && strncmp((const char *)s, name, CK_NAME) == 0) {
                if (!buf) found = 1, *size = (size_t)sz;  // (its size alone: the caller's buffer next)
                else if (sz > cap) why = "section larger than expected";
                else if (pread(fd, buf, (size_t)sz, (off_t)(off + CK_SHDR)) != (ssize_t)sz) why = "cannot read the section";
                else if (get_u32(s + 40) != crc32_update(0, buf, (size_t)sz)) why = "section CRC mismatch (file corrupted)";
                else found = 1, *size = (size_t)sz;
                if (found && loc) loc->data_off = off + CK_SHDR, loc->crc_off = off + 40;
            }
            off += CK_SHDR + sz + pad8(sz);
        }
    }
    uint8_t t[CK_TRL];
    if (!why && !found) why = "no such section";
    else if (!why && (off + CK_TRL > fsz || pread(fd, t, CK_TRL, (off_t)off) != (ssize_t)CK_TRL)) why = "truncated before the trailer";
    else if (!why && (memcmp(t, CK_TRAILER_MAGIC, 8) || get_u32(t + 16) != crc32_update(0, t, 16) || get_u64(t + 8) != fsz))
        why = "bad trailer (file corrupted or cut short)";
    close(fd);
    if (!why) return 0;
    return dm_fail(err, "%s: section '%s': %s", path, name, why);
}
