// session_lock.c — one dmsh per session: an advisory flock on DIR/.lock, held while the
// session is open, taken again when the file is removed under a run. Split from session.c.
#include "session_lock.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int lock_fd = -1, new_fd = -1;

// the pid the holder wrote into the lock file ("" when it wrote none)
static void holder_pid(int fd, char *pid, size_t n) {
    pid[0] = 0;
    ssize_t got = pread(fd, pid, n - 1, 0);
    if (got > 0) pid[got] = 0;
    pid[strcspn(pid, "\n")] = 0;
}

// DIR held by another dmsh: its error (with the pid it wrote); fd is closed
static int in_use(int fd, const char *dir, dm_err *err) {
    char pid[32];
    holder_pid(fd, pid, sizeof pid);
    close(fd);
    return dm_fail(err, "%s is in use by another dmsh%s%s%s (two processes would interleave its checkpoints and metrics)", dir,
                   pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
}

// the directory we hold, however it is spelled (runs/X, runs/X/, ./runs/X, a link to it):
// compared as files, so our own lock is never taken for another dmsh's
// (by the lock file's identity, not lock_dir's name: a session directory renamed while held is
// still ours under its new name, and the name it left may be another run's now)
static int held_dir(const char *dir) {
    if (lock_fd < 0) return 0;
    char p[1100];
    snprintf(p, sizeof p, "%s/.lock", dir);
    struct stat a, b;
    return fstat(lock_fd, &a) == 0 && stat(p, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int session_lock(const char *dir, dm_err *err) {
    if (held_dir(dir)) return 0;
    char p[1100];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return dm_fail(err, "cannot open or create %s: %s", p, strerror(errno));
    // Only EWOULDBLOCK is another holder. A file system without flock (Lustre without -o flock:
    // ENOSYS, NFS without its lock daemon: ENOLCK) refused every session as "in use by another
    // dmsh (pid N)", N a long-gone holder (QA, session 34): the session opens unguarded, said
    int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!locked && errno != EWOULDBLOCK) {
        fprintf(stderr, "dmsh: note: cannot lock %s (%s: a file system without flock?): nothing stops a second dmsh from "
                "writing this session while this one does\n", p, strerror(errno));
        locked = 1;
    }
    if (!locked) return in_use(fd, dir, err);
    if (ftruncate(fd, 0) == 0) dprintf(fd, "%ld\n", (long)getpid());
    new_fd = fd;
    return 0;
}

int session_in_use(const char *dir, dm_err *err) {
    if (held_dir(dir)) return 0;  // ours
    char p[1100];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;  // never opened by a dmsh that is still running
    int busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;  // (no flock here: session_lock says so)
    if (!busy) { close(fd); return 0; }
    return in_use(fd, dir, err);
}

// the session switch succeeded: the new lock is the one held (the previous session's goes);
// it failed: the new one is dropped and the old one stays
void session_lock_commit(int ok) {
    if (new_fd < 0) return;
    if (ok) {
        if (lock_fd >= 0) close(lock_fd);
        lock_fd = new_fd;
    } else {
        close(new_fd);
    }
    new_fd = -1;
}

// The lock file removed under the run (`rm runs/X/.lock`, a cleanup of *.lock files): a second
// dmsh could open the session, and the two runs' rows interleaved in metrics.tsv (QA, session
// 34). Checked at each checkpoint (a stat): the lock is made again and taken, or, when another
// dmsh took the session meanwhile, that is said (both write it from then on).
void session_relock_if_lost(const char *dir, char *note, size_t nnote) {
    if (lock_fd < 0 || held_dir(dir)) return;
    char p[1100], pid[32] = "", why[1400];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, sizeof why, "%s was removed under this run and cannot be made again (%s): nothing stops a second dmsh "
                 "from writing this session", p, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
        if (ftruncate(fd, 0) == 0) dprintf(fd, "%ld\n", (long)getpid());
        close(lock_fd);
        lock_fd = fd;
        snprintf(why, sizeof why, "%s was removed under this run: made again", p);
    } else {
        holder_pid(fd, pid, sizeof pid);
        close(fd);
        snprintf(why, sizeof why, "%s was removed under this run, and another dmsh%s%s%s has opened this session since: both "
                 "write its checkpoints and metrics now; stop one of them", p, pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
    }
    size_t l = strlen(note);
    if (l + 1 < nnote) snprintf(note + l, nnote - l, "%s%s", l ? "; " : "", why);
    else fprintf(stderr, "dmsh: note: %s\n", why);
}
