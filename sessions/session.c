// session.c — see session.h.
#include "session.h"
#include "../engine/ckpt.h"
#include "same_state.h"
#include "session_lock.h"
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// fopen for a session's own files (transcript.dm): NULL unless it is a regular file. A fifo
// or device put in its place would block the open (a reader waits for a writer and the other way
// round) and hang -r or every command with no way out but SIGKILL.
FILE *session_fopen_regular(const char *path, const char *mode) {
    int fl = (mode[0] == 'r' ? O_RDONLY : O_WRONLY | O_CREAT | O_APPEND) | O_NONBLOCK | O_CLOEXEC;
    int fd = open(path, fl, 0644);
    struct stat st;
    if (fd < 0) return NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { close(fd); errno = EINVAL; return NULL; }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, mode);
    if (!f) close(fd);
    return f;
}

int session_rewrite_metrics(Engine *e, dm_err *err) {
    if (!e->session_dir[0]) return 0;
    if (engine_session_dir_check(e, err)) return 1;
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/metrics.tsv", e->session_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    // the rows in the engine's own format into a temp file, then rename
    unlink(tmp);
    FILE *f = fopen(tmp, "w");
    if (!f) return dm_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    engine_tsv_header(f);
    for (int i = 0; i < e->nrows; i++) engine_tsv_row(f, &e->rows[i]);
    // a short write (full disk) must not replace a good metrics.tsv with a truncated one; synced
    // before the rename (a power loss: old file or new, never empty; appended rows are not synced)
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    if (fclose(f) || bad) {
        int why = errno;
        unlink(tmp);
        return dm_fail(err, "cannot write %s: %s (metrics.tsv left as it was)", tmp, strerror(why));
    }
    if (rename(tmp, path)) return dm_fail(err, "cannot replace %s: %s", path, strerror(errno));
    e->tsv_failed = 0;  // every row is in it now
    return 0;
}


static int mkdir_p(const char *dir, dm_err *err) {
    char p[1100];
    snprintf(p, sizeof p, "%s", dir);
    // each level's own failure is the one said (a runs/ that could not be made was reported as
    // "cannot create runs/x: No such file or directory": QA, session 29)
    struct stat st;
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            if (mkdir(p, 0755) && errno != EEXIST) {
                int why = errno;  // (before stat sets its own)
                if (!(stat(p, &st) == 0 && S_ISDIR(st.st_mode))) return dm_fail(err, "cannot create %s: %s", p, strerror(why));
            }
            *q = '/';
        }
    if (mkdir(p, 0755) && errno != EEXIST) return dm_fail(err, "cannot create %s: %s", p, strerror(errno));
    return 0;
}

// config.dm.PID.tmp files a killed process left (the lock is held: no live process of this
// session writes one now); checkpoints' temp files are -r's to clear (QA, session 31: they stayed)
static void clear_stale_config_tmps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n > 14 && !strncmp(de->d_name, "config.dm.", 10) && !strcmp(de->d_name + n - 4, ".tmp") &&
            strspn(de->d_name + 10, "0123456789") == n - 14) {
            char p[PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) unlink(p);
        }
    }
    closedir(d);
}

int session_open(Engine *e, const char *dir, dm_err *err) {
    if (mkdir_p(dir, err) || session_lock(dir, err)) return 1;
    clear_stale_config_tmps(dir);
    char prev[sizeof e->session_dir];
    snprintf(prev, sizeof prev, "%s", e->session_dir);
    int bad = engine_session(e, dir, err);
    session_lock_commit(!bad);  // the old session's lock goes only once the switch succeeded
    if (bad) return 1;
    if (prev[0] && !session_same_dir(prev, dir)) session_transcript_unplaced(0);  // (a new transcript)
    if (prev[0] && !session_same_dir(prev, dir) && e->live) {
        // the model was built there: this transcript starts from the checkpoint the switch left
        // it in, a live :load, so it replays alone (its replay failed with "no model": QA,
        // session 28)
        char line[PATH_MAX + 2400];
        int in_file = !engine_unsaved(e) && e->synced_path[0];
        snprintf(line, sizeof line, "# continues session %s at step %lld: the model was built there (see its transcript)%s", prev,
                 (long long)e->step, in_file ? "; the next line loads the state it left" : "");
        session_transcript(e, line);
        if (in_file) {
            char *buf = NULL;
            size_t blen = 0;
            FILE *m = open_memstream(&buf, &blen);
            if (m) {
                fputs(":load ", m);
                session_put_word(m, e->synced_path);
                fclose(m);
                session_transcript(e, buf);
                free(buf);
            }
        }
    } else if (prev[0] && !session_same_dir(prev, dir)) {
        // no model yet: the config (and corpus) set in the other session is this one's start,
        // written out as lines, so a replay of this transcript alone builds the same model
        char line[2200];
        snprintf(line, sizeof line, "# continues session %s before any model: its config and corpus at the switch", prev);
        session_transcript(e, line);
        char *buf = NULL;
        size_t blen = 0;
        FILE *m = open_memstream(&buf, &blen);
        if (m) {
            session_put_config_lines(m, e);
            fclose(m);
            for (char *l = buf, *nl; l && *l; l = nl + 1) {  // one transcript line each
                nl = strchr(l, '\n');
                if (!nl) { session_transcript(e, l); break; }
                *nl = 0;
                session_transcript(e, l);
            }
            free(buf);
        }
    }
    if (session_write_config(e, err)) return 1;
    if (e->nrows && session_rewrite_metrics(e, err)) return 1;
    return 0;
}

// ---- checkpoints of a session ----------------------------------------------------------------
// ckpt/step-N.ckpt is the state at step N; a second state of step N (the run went back with :load
// and came to N again) is step-N-bK.ckpt, never written over the first. ckpt/LATEST names the
// file written last: `dmsh -r` resumes where the session stopped, not at the largest N. Without
// a LATEST to follow, and past a checkpoint that does not load, -r takes the checkpoint written
// most recently (list_ckpts): the state the run was in when it last saved, on the branch it was
// on. The largest N can be a branch the user left with :load (step-20 of the first run, when
// the second went back to step 10 and stopped at 15).

// step N of a checkpoint file name (step-N.ckpt or step-N-bK.ckpt), -1 for any other name; *branch
// (when not NULL): K, 0 for step-N.ckpt
static long long ckpt_name_step_branch(const char *name, int *branch) {
    long long s;
    int used = 0;
    size_t len = strlen(name);
    if (branch) *branch = 0;
    if (len < 11 || strcmp(name + len - 5, ".ckpt") || sscanf(name, "step-%lld%n", &s, &used) != 1 || s < 0) return -1;
    const char *rest = name + used;
    if (!strcmp(rest, ".ckpt")) return s;
    int k, used2 = 0;
    if ((sscanf(rest, "-b%d%n", &k, &used2) == 1 && k > 0 && !strcmp(rest + used2, ".ckpt")) ||
        (sscanf(rest, "-exit%d%n", &k, &used2) == 1 && k > 0 && !strcmp(rest + used2, ".ckpt"))) {  // (-exitK: older dmsh)
        if (branch) *branch = k;
        return s;
    }
    return -1;
}
static long long ckpt_name_step(const char *name) { return ckpt_name_step_branch(name, NULL); }

// A name a :save PATH gave a checkpoint in the session's own ckpt/ (mine.ckpt, or any plain
// name but LATEST's own, a hidden one or a temp file's): LATEST names it after that save, and -r
// resumes from it (it refused the name, and resumed an older step-N file as "the checkpoint
// written most recently"). Only the step-N names are -r's fallbacks.
static int user_ckpt_name(const char *name) {
    size_t len = strlen(name);
    return len > 0 && name[0] != '.' && strcmp(name, "LATEST") && (len < 4 || strcmp(name + len - 4, ".tmp"));
}

// 0 and the name LATEST holds; 1 when there is no LATEST (a session of an older dmsh), 2 when it
// holds no checkpoint name (its text, cut to a line, in name), 3 when it is no regular file or
// cannot be read (what it is, in name)
static int latest_pointer(const char *dir, char *name, size_t n) {
    char p[1200];
    snprintf(p, sizeof p, "%s/ckpt/LATEST", dir);
    // O_NONBLOCK: a fifo put there opens without a writer (a blocking open hung -r and every
    // :sessions until SIGKILL: QA, session 23); only a regular file is read
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 1;  // (none, or ckpt/ is no directory: said where that is checked)
    struct stat st = {0};
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(name, n, "%s", S_ISDIR(st.st_mode)  ? "a directory"
                        : S_ISFIFO(st.st_mode) ? "a fifo"
                                               : "a device or socket");
        close(fd);
        return 3;
    }
    char buf[512] = "";
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    int ok = got > 0;
    buf[ok ? got : 0] = 0;
    buf[strcspn(buf, "\r\n")] = 0;  // (a LATEST edited on another system ends in CR LF)
    snprintf(name, n, "%s", buf);
    if (!ok || strchr(buf, '/') || (ckpt_name_step(buf) < 0 && !user_ckpt_name(buf))) return 2;
    return 0;
}

int session_latest_broken(const char *dir, char *why, size_t n) {
    char name[512], p[1700];
    int r = latest_pointer(dir, name, sizeof name);
    if (r == 1) return 0;
    if (r == 3) {
        snprintf(why, n, "%s/ckpt/LATEST is %s, not a file naming a checkpoint", dir, name);
        return 1;
    }
    if (r == 2) {
        snprintf(why, n, "%s/ckpt/LATEST holds '%.60s', not a checkpoint name", dir, name);
        return 1;
    }
    snprintf(p, sizeof p, "%s/ckpt/%s", dir, name);
    struct stat st;
    int gone = stat(p, &st) != 0;
    if (!gone && S_ISREG(st.st_mode)) return 0;
    snprintf(why, n, "%s/ckpt/LATEST named %s, which is %s", dir, name, gone ? "missing" : "not a file");
    return 1;
}

static int timespec_le(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

// DIR/ckpt/LATEST := name, by a synced temp file renamed over it (after a power loss the name is
// the old LATEST or the new one, never an empty file: QA, session 35). 0 ok, else errno set.
static int latest_write(const char *dir, const char *name) {
    char p[1200], tmp[1300];
    snprintf(p, sizeof p, "%s/ckpt/LATEST", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    unlink(tmp);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (f) {
        fprintf(f, "%s\n", name);
        int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
        ok = (fclose(f) == 0) & !bad;
        ok = ok && rename(tmp, p) == 0;
    }
    return !ok;
}

// LATEST := path's file name. 0, or 1 with why: then no LATEST is left naming an older file
// (removed: -r takes the checkpoint written most recently, this one), or why says it is. (A full
// disk left LATEST on the checkpoint before, unsaid: -r resumed that one, commented out the
// commands since and cut metrics.tsv back, saying no checkpoint held those steps: QA, session 31.)
static int put_latest(const Engine *e, const char *path, char *why, size_t nwhy) {
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    char p[1200], tmp[1300];
    snprintf(p, sizeof p, "%s/ckpt/LATEST", e->session_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    if (!latest_write(e->session_dir, name)) return 0;
    int er = errno ? errno : EIO;
    unlink(tmp);
    // the file named is made the newest (a save that found the state in an older file, or an
    // autosave after a :load of one, names a file that is not; -r would take another state)
    int fresh = utimensat(AT_FDCWD, path, NULL, 0) == 0;
    errno = 0;
    if (unlink(p) == 0 || errno == ENOENT)
        snprintf(why, nwhy, "%s could not be written (%s): %s, so -r takes the checkpoint written most recently, %s%s", p, strerror(er),
                 errno == ENOENT ? "there was none" : "removed", name, fresh ? "" : " (if no file is newer: its time could not be set)");
    else
        snprintf(why, nwhy, "%s could not be written (%s) nor removed (%s): -r would resume the checkpoint it names, not %s", p,
                 strerror(er), strerror(errno), name);
    return 1;
}

// put_latest, but a LATEST that named a checkpoint no longer there (deleted or moved by hand)
// is not replaced silently: a note says what it named, appended to note (nnote > 0), else on
// stderr
static int write_latest(const Engine *e, const char *path, char *note, size_t nnote, char *fail, size_t nfail) {
    char why[2048];
    if (session_latest_broken(e->session_dir, why, sizeof why)) {
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t l = note ? strlen(note) : 0;
        if (note && l + 1 < nnote) snprintf(note + l, nnote - l, "%s%s; it names %s now", l ? "; " : "", why, name);
        else fprintf(stderr, "dmsh: note: %s; it names %s now\n", why, name);
    }
    return put_latest(e, path, fail, nfail);
}

// The session's checkpoints, the most recently written first (the order every fallback of -r
// takes, see above): the `max` newest, names into out[], count. Files of the same time (a file
// system that keeps whole seconds) are ordered by the larger step, then the later branch (the
// larger K; step-N.ckpt is K = 0, written before any step-N-bK), then the name: the same
// directory always gives the same order, whatever readdir's.
static int list_ckpts(const char *dir, char out[][256], long long *steps, int max) {
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    DIR *d = opendir(ck);
    if (!d) return 0;
    int n = 0;
    typedef struct { struct timespec t; int k; } Key;  // the file's time, its branch K
    Key *key = mallocCheck(sizeof(Key) * (size_t)max), kn;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long s = ckpt_name_step_branch(de->d_name, &kn.k);
        if (s < 0 || strlen(de->d_name) >= 256) continue;
        char p[1400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", ck, de->d_name);
        if (stat(p, &st) || !S_ISREG(st.st_mode)) continue;
        kn.t = st.st_mtim;
        // keep the max newest: insert in order (newest first), dropping the oldest when full
        int at = n;
        while (at > 0) {
            const struct timespec *t = &key[at - 1].t;
            int c = t->tv_sec != kn.t.tv_sec ? (t->tv_sec < kn.t.tv_sec ? -1 : 1)
                  : t->tv_nsec != kn.t.tv_nsec ? (t->tv_nsec < kn.t.tv_nsec ? -1 : 1)
                  : steps[at - 1] != s ? (steps[at - 1] < s ? -1 : 1)
                  : key[at - 1].k != kn.k ? (key[at - 1].k < kn.k ? -1 : 1)
                  : strcmp(out[at - 1], de->d_name);
            if (c > 0) break;  // the one there is newer: the new one goes after it
            at--;
        }
        if (at >= max) continue;
        int last = n < max ? n : max - 1;
        for (int j = last; j > at; j--) {
            key[j] = key[j - 1]; steps[j] = steps[j - 1];
            memcpy(out[j], out[j - 1], 256);
        }
        key[at] = kn; steps[at] = s;
        snprintf(out[at], 256, "%s", de->d_name);
        if (n < max) n++;
    }
    closedir(d);
    free(key);
    return n;
}

// (for -r's note when there is no LATEST to follow: 2 means "more than one")
static int count_ckpts(const char *dir) {
    char names[2][256];
    long long steps[2];
    return list_ckpts(dir, names, steps, 2);
}
// a LATEST that can be read (one that is missing, a dangling link or unreadable is none to follow)
static int latest_exists(const char *dir) {
    char name[512];
    return latest_pointer(dir, name, sizeof name) != 1;
}

int session_latest_ckpt(const char *dir, char *path, size_t n, long long *step) {
    char name[512];
    struct stat st;
    if (!latest_pointer(dir, name, sizeof name)) {
        snprintf(path, n, "%s/ckpt/%s", dir, name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            *step = ckpt_name_step(name);
            return 0;
        }
    }
    char newest[1][256];  // no LATEST to follow: the checkpoint written most recently (list_ckpts)
    if (list_ckpts(dir, newest, step, 1) < 1) return 1;
    snprintf(path, n, "%s/ckpt/%s", dir, newest[0]);
    return 0;
}

const char *session_default_dir(const Engine *e, char *buf, size_t n) {
    const char *rd = getenv("DMSH_REPLAY_DIR");
    const char *d = e && e->session_dir[0] ? e->session_dir : rd && rd[0] ? rd : "";
    size_t dl = strlen(d);
    snprintf(buf, n, "%s%s", d, dl && d[dl - 1] != '/' ? "/" : "");
    return buf;
}

int session_same_dir(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    struct stat sa, sb;
    return a[0] && b[0] && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
// With no checkpoint to resume, what transcript.dm still offers (a -r advised "remove runs/X" of
// a session whose ckpt/ was deleted to free disk, though its transcript replays the run: QA,
// session 41): into hint, the replay's command line, or "" when it has no command line; into
// last, the last checkpoint a line names ("" when none).
static void transcript_replay_hint(const char *dir, char *hint, size_t nh, char *last, size_t nl) {
    hint[0] = last[0] = 0;
    char path[1100], l[8192];
    snprintf(path, sizeof path, "%s/transcript.dm", dir);
    FILE *f = session_fopen_regular(path, "r");
    int cmds = 0;
    while (f && fgets(l, sizeof l, f)) {
        const char *q = l + strspn(l, " \t");
        if (*q == ':') cmds++;
        const char *c = !strncmp(q, "# checkpoint ckpt/", 18) ? q + 18 : NULL;
        if (c) snprintf(last, nl, "%.*s", (int)strcspn(c, " \r\n"), c);
    }
    if (f) fclose(f);
    if (cmds) snprintf(hint, nh, "`dmsh -e ':session NEW' -b %s` replays its commands in a new session", path);
}

int session_resume(Engine *e, const char *dir_in, dm_err *err) {
    // runs/X/ and runs/X name one directory: without the trailing '/' the paths printed below
    // (runs/X/ckpt/...) carry no "//"
    char dirbuf[1024];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir_in);
    for (size_t l = strlen(dirbuf); l > 1 && dirbuf[l - 1] == '/'; l--) dirbuf[l - 1] = 0;
    const char *dir = dirbuf;
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        // -r takes the directory: `-r NAME` for runs/NAME is the likely slip, so name it
        char alt[1100];
        snprintf(alt, sizeof alt, "runs/%s", dir);
        if (!strchr(dir, '/') && stat(alt, &st) == 0 && S_ISDIR(st.st_mode))
            return dm_fail(err, "%s: not a session directory (-r takes the directory: did you mean -r %s?)", dir, alt);
        return dm_fail(err, "%s: not a session directory", dir);
    }
    if (session_lock(dir, err)) return 1;
    clear_stale_config_tmps(dir);
    session_lock_commit(1);  // (dmsh -r: at start-up, no other session held)
    // a save a crash cut short after its write is finished (ckpt_dirs.c), LATEST too when that
    // file was written after LATEST's: as the save would have (its file was put in place and -r
    // then resumed the older one: review, session 35)
    char placed[256], ln[512], lp[1300];
    session_stale_tmps(dir, placed, sizeof placed);
    // (LATEST's own time too: one set by hand after the crash names the user's choice)
    struct stat pst, lst, lpst;
    snprintf(lp, sizeof lp, "%s/ckpt/%s", dir, placed);
    if (placed[0] && !stat(lp, &pst)) {
        int lr = latest_pointer(dir, ln, sizeof ln);
        snprintf(lp, sizeof lp, "%s/ckpt/LATEST", dir);
        int lnew = !lr && !stat(lp, &lpst) && !timespec_le(&lpst.st_mtim, &pst.st_mtim);
        snprintf(lp, sizeof lp, "%s/ckpt/%s", dir, ln);
        if (!lnew && (lr || stat(lp, &lst) || timespec_le(&lst.st_mtim, &pst.st_mtim)) && !latest_write(dir, placed))
            fprintf(stderr, "dmsh: %s/ckpt/LATEST names %s now, as that save would have\n", dir, placed);
    }
    char path[1200], broken[2048];
    long long step;
    // a LATEST naming a file that is gone: -r falls back to the checkpoint written most recently,
    // as past one that does not load (list_ckpts), and says so (it once resumed at the largest
    // step silently: an older state, or another branch, passed for the latest)
    int lost = session_latest_broken(dir, broken, sizeof broken);
    if (session_latest_ckpt(dir, path, sizeof path, &step)) {
        char hint[1300], last[256];
        transcript_replay_hint(dir, hint, sizeof hint, last, sizeof last);
        if (lost) return dm_fail(err, "%s, and no checkpoint is in %s/ckpt: nothing to resume%s%s%s", broken, dir, hint[0] ? " (" : "",
                                 hint, hint[0] ? ")" : "");
        // the transcript names a checkpoint: they were deleted, not never written
        if (last[0])
            return dm_fail(err, "%s: no checkpoint in %s/ckpt, though its transcript names ckpt/%s (deleted?): nothing to resume; %s",
                           dir, dir, last, hint);
        // (":save writes one" was said here: -r opens no session without a checkpoint, and
        // :session refuses one with rows: QA, session 35)
        char mp[1100];
        snprintf(mp, sizeof mp, "%s/metrics.tsv", dir);
        if (stat(mp, &st) == 0 && st.st_size > 0)
            return dm_fail(err, "%s: no checkpoint in %s/ckpt: the run stopped before its first save, so it cannot be resumed "
                           "(metrics.tsv holds its rows%s%s): remove %s or choose a new name", dir, dir, hint[0] ? "; " : "", hint, dir);
        return dm_fail(err, "%s: no checkpoint in %s/ckpt: nothing to resume (`:session %s` starts a run in it)", dir, dir, dir);
    }
    if (lost)
        fprintf(stderr, "dmsh: -r: note: %s; resuming from %s, the newest checkpoint by file time (a copy that kept no file times, "
                "cp -r, has lost that order: :load another of %s/ckpt if that is not the state you want)\n", broken, path, dir);
    else if (!latest_exists(dir) && count_ckpts(dir) > 1)  // (said too: QA, session 29)
        fprintf(stderr, "dmsh: -r: note: no readable %s/ckpt/LATEST; resuming from %s, the newest checkpoint by file time (a copy that kept no "
                "file times, cp -r, has lost that order: :load another of %s/ckpt if that is not the state you want)\n", dir, path, dir);
    int fell_back = lost;  // (resumed from another file than LATEST's)
    if (engine_load(e, path, err)) {
        fell_back = 1;
        // an unreadable checkpoint (a crash, a full disk): resume from the next most recently
        // written one that loads, loudly; the bad file stays where it is
        char first[sizeof err->msg];
        snprintf(first, sizeof first, "%s", err->msg);
        enum { MAXC = 256 };
        static char names[MAXC][256];
        static long long steps[MAXC];
        int n = list_ckpts(dir, names, steps, MAXC), done = 0;
        for (int i = 0; i < n && !done; i++) {
            char alt[PATH_MAX];
            if (snprintf(alt, sizeof alt, "%s/ckpt/%s", dir, names[i]) >= (int)sizeof alt) continue;
            if (!strcmp(alt, path)) continue;
            dm_err e2 = {0};
            if (!engine_load(e, alt, &e2)) {
                fprintf(stderr, "dmsh: -r: %s did not load (%s); resumed from %s instead, the newest by file time that loads (a copy "
                        "that did not keep file times, cp -r, has lost that order)\n",
                        path, first, alt);
                done = 1;
            }
        }
        if (!done) return dm_fail(err, "%s (and no other checkpoint in %s/ckpt loads)", first, dir);
    }
    if (engine_session(e, dir, err)) return 1;
    char lfail[2600];
    if (lost && put_latest(e, e->synced_path, lfail, sizeof lfail)) fprintf(stderr, "dmsh: note: %s\n", lfail);  // (said above)
    const char *rb = strrchr(e->synced_path, '/') ? strrchr(e->synced_path, '/') + 1 : e->synced_path;
    session_resume_transcript(e, dir, fell_back, (count_ckpts(dir) == 1) | (placed[0] && !strcmp(placed, rb)) << 1);
    // the transcript says where the lines after this one start from (a run killed mid-command
    // left its last command out: the lines above need not rebuild this state)
    // (and from which directory: a -r run elsewhere types paths relative to there)
    char line[sizeof e->synced_path + PATH_MAX + 128], cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "?");
    // (a state the lines above may not rebuild: worded so that no later -r reads it as a place;
    // "may": an old transcript without checkpoint lines can rebuild it, as a QA pass found, but
    // nothing here can tell which)
    snprintf(line, sizeof line, "# dmsh -r: resumed %s %s at step %lld, run in %s (relative paths below are from there)",
             session_transcript_is_unplaced() ? "(a state the lines above may not rebuild) from" : "from", e->synced_path,
             (long long)e->step, cwd);
    // metrics.tsv becomes the checkpoint's rows: rows past them (steps a killed process never
    // saved, or a fallback's newer checkpoint that did not load) leave it, said with their count
    snprintf(path, sizeof path, "%s/metrics.tsv", dir);
    FILE *mf = session_fopen_regular(path, "r");
    long long lines = 0;
    if (mf) {
        int ch, last = '\n';
        while ((ch = getc(mf)) != EOF) { lines += ch == '\n'; last = ch; }
        lines += last != '\n';  // (a last row without its line break)
        fclose(mf);
    }
    long long dropped = lines - 1 - e->nrows;  // (the header)
    if (lines > 1 && dropped > 0) {
        // a checkpoint of a later step may hold them: a process stopped between writing it and
        // naming it in LATEST (the note said no checkpoint held them: QA, session 31)
        enum { MAXC = 256 };
        static char names[MAXC][256];
        static long long steps[MAXC];
        // (only a file written after LATEST was, of a later step, when -r took LATEST's own file:
        // a fallback or another branch's larger step is not that case, and naming one sent the
        // user to a file that did not load or to the branch they had left)
        int n = fell_back ? 0 : list_ckpts(dir, names, steps, MAXC), later = -1;
        char lp[1200], cp[1500];
        snprintf(lp, sizeof lp, "%s/ckpt/LATEST", dir);
        struct stat lst, cst;
        const char *mine = strrchr(e->synced_path, '/') ? strrchr(e->synced_path, '/') + 1 : e->synced_path;
        if (stat(lp, &lst) != 0) n = 0;
        for (int i = 0; i < n && later < 0; i++) {  // (newest first)
            snprintf(cp, sizeof cp, "%s/ckpt/%s", dir, names[i]);
            if (steps[i] > (long long)e->step && strcmp(names[i], mine) && stat(cp, &cst) == 0 &&
                (cst.st_mtim.tv_sec > lst.st_mtim.tv_sec ||
                 (cst.st_mtim.tv_sec == lst.st_mtim.tv_sec && cst.st_mtim.tv_nsec > lst.st_mtim.tv_nsec)))
                later = i;
        }
        // (rows, not steps: an eval's rows are among them, and a :save outside ckpt/ may hold
        // them: QA, session 32)
        char held[400] = "steps and evals after it, which no checkpoint in ckpt/ holds";
        if (later >= 0)
            snprintf(held, sizeof held, "steps and evals after it; ckpt/%s, of step %lld, is not the file LATEST names: :load it to go on from there",
                     names[later], steps[later]);
        engine_note(e, "metrics.tsv held %lld row%s past this checkpoint's %d (%s): %s it; the run from here writes its own", dropped,
                    dropped == 1 ? "" : "s", e->nrows, held, dropped == 1 ? "it leaves" : "they leave");
    }
    if (session_rewrite_metrics(e, err)) return 1;
    // (after the rewrite: a -r that failed there, a full disk, left a "resumed" line for a resume
    // that never happened: QA, session 31)
    session_transcript(e, line);
    return 0;
}

// 1 when a and b are the same existing file
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return a[0] && b[0] && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Where a checkpoint of the current state goes: PREFIX<N>.ckpt, unless that file holds another
// state of step N (then PREFIX<N>-bK.ckpt, and *branch = 1). A file this state was saved to (or
// loaded from) already is the same file again.
static void free_ckpt_path(const Engine *e, const char *prefix, char *path, size_t n, int *branch) {
    *branch = 0;
    int same = e->synced_step == e->step && e->synced_settings == engine_settings_hash(e) && e->synced_corpus == engine_corpus_hash(e);
    // the same state (a :gen's counts or an :anchors since) whose file is a name of the user's in
    // this directory (:save ckpt/mine.ckpt, or -r from it): that file again (it went to a new
    // step-N-bK as "another state", and LATEST left mine.ckpt: QA, session 24)
    struct stat sst;
    size_t pl = strlen(prefix);
    int in_session = pl >= 11 && !strcmp(prefix + pl - 11, "/ckpt/step-");  // (not the working directory's own files)
    if (same && in_session && e->synced_path[0] && stat(e->synced_path, &sst) == 0 && S_ISREG(sst.st_mode)) {
        char pd[PATH_MAX], sd[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
        snprintf(pd, sizeof pd, "%s", prefix);
        snprintf(sd, sizeof sd, "%s", e->synced_path);
        char *ps = strrchr(pd, '/'), *ss = strrchr(sd, '/');
        if (ps) *ps = 0; else snprintf(pd, sizeof pd, ".");
        if (ss) *ss = 0; else snprintf(sd, sizeof sd, ".");
        if (realpath(pd, a) && realpath(sd, b) && !strcmp(a, b)) {
            snprintf(path, n, "%s/%s", pd, strrchr(e->synced_path, '/') ? strrchr(e->synced_path, '/') + 1 : e->synced_path);
            return;
        }
    }
    snprintf(path, n, "%s%lld.ckpt", prefix, (long long)e->step);
    struct stat st;
    if (stat(path, &st) != 0 || (same && same_file(path, e->synced_path))) return;
    *branch = 1;
    for (int k = 1; k < 100000; k++) {
        snprintf(path, n, "%s%lld-b%d.ckpt", prefix, (long long)e->step, k);
        if (stat(path, &st) != 0) return;
        if (same && same_file(path, e->synced_path)) { *branch = 0; return; }
    }
}

// Save the state; a new branch file (step-N-bK) that holds the same state as an earlier file of
// step N is not kept: the state is that file's (a resumed run whose settings went back to the
// ones saved there came to the same state, which was written again as "another state" before).
static int save_step(Engine *e, const char *prefix, char *path, size_t n, char *note, size_t nnote, dm_err *err) {
    note[0] = 0;
    int branch, rc;
    // a name that was free is taken only if it still is when the file is put in place: a second
    // dmsh saving dmsh-step-N.ckpt in the same directory got there first, so this state takes
    // the next free name (the same file again, this state's own, is replaced as before)
    for (int tries = 0;; tries++) {
        free_ckpt_path(e, prefix, path, n, &branch);
        struct stat st;
        int fresh = stat(path, &st) != 0;
        rc = engine_save_mode(e, path, fresh ? CK_NEW : CK_REPLACE, err);
        if (rc != 2 || tries == 20) break;
        branch = 1;
    }
    if (rc) return 1;
    if (!branch) return 0;
    char other[1300], abs[PATH_MAX];
    for (int k = 0;; k++) {
        if (k) snprintf(other, sizeof other, "%s%lld-b%d.ckpt", prefix, (long long)e->step, k);
        else snprintf(other, sizeof other, "%s%lld.ckpt", prefix, (long long)e->step);
        if (!strcmp(other, path)) break;
        if (session_same_state(other, path)) {
            unlink(path);
            snprintf(path, n, "%s", other);
            snprintf(e->synced_path, sizeof e->synced_path, "%s", realpath(other, abs) ? abs : other);
            snprintf(note, nnote, "%s already held this exact state: no new file", other);
            return 0;
        }
    }
    snprintf(note, nnote, "%s%lld.ckpt holds another state of step %lld (kept); this one is %s", prefix,
             (long long)e->step, (long long)e->step, path);
    return 0;
}

int session_save_default(Engine *e, char *path, size_t n, char *note, size_t nnote, dm_err *err) {
    char dd[1100], prefix[1200];
    snprintf(prefix, sizeof prefix, "%sdmsh-step-", session_default_dir(e, dd, sizeof dd));
    return save_step(e, prefix, path, n, note, nnote, err);
}

int session_save(Engine *e, char *path, size_t n, char *note, size_t nnote, dm_err *err) {
    if (engine_session_dir_check(e, err)) return 1;
    char prefix[1200], before[sizeof e->session_dir];
    snprintf(before, sizeof before, "%s", e->session_dir);
    snprintf(prefix, sizeof prefix, "%s/ckpt/step-", e->session_dir);
    if (save_step(e, prefix, path, n, note, nnote, err)) {
        // the directory was renamed during the save (after the check, before the write): once
        // more where it is now
        dm_err e2 = {0};
        // (or deleted: that is what the user must hear, not the rename's ENOENT it caused)
        if (engine_session_dir_check(e, &e2)) return dm_fail(err, "%s", e2.msg);
        if (!strcmp(before, e->session_dir)) return 1;
        snprintf(prefix, sizeof prefix, "%s/ckpt/step-", e->session_dir);
        if (save_step(e, prefix, path, n, note, nnote, err)) return 1;
    }
    session_relock_if_lost(e->session_dir, note, nnote);
    // (the line first: LATEST naming a file no line places yet left a -r killed between the two
    // with a transcript that could not rebuild it; a line for a file LATEST does not name yet is
    // taken out with the commands after it)
    // (2: the state proved to be that file's already, nothing written: save_step's note)
    session_transcript_ckpt(e, path, strstr(note, " already held this exact state") ? 2 : 1);
    char fail[2600];
    if (write_latest(e, path, note, nnote, fail, sizeof fail)) {
        // the directory was renamed between the checkpoint and LATEST (the file went with it: a
        // CI run saw "LATEST could not be written (No such file or directory)"): LATEST once
        // more where it is now, naming the file there
        dm_err e2 = {0};
        snprintf(before, sizeof before, "%s", e->session_dir);
        int gone = engine_session_dir_check(e, &e2);
        // (deleted, the checkpoint with it: "PATH was written" would be untrue)
        if (gone) return dm_fail(err, "%s", e2.msg);
        if (strcmp(before, e->session_dir)) {
            const char *base = strrchr(path, '/');
            char moved[1400];
            snprintf(moved, sizeof moved, "%s/ckpt/%s", e->session_dir, base ? base + 1 : path);
            snprintf(path, n, "%s", moved);
            if (!write_latest(e, path, note, nnote, fail, sizeof fail)) return 0;
        }
        return dm_fail(err, "%s was written, but %s (:save again once that is fixed)", path, fail);
    }
    return 0;
}

int session_autosave(Engine *e, char *path, size_t n, dm_err *err) {
    path[0] = 0;
    // (step 0 too: a session left right after :init, or after an :eval of the fresh model, must
    // resume with -r like any other)
    if (!e->session_dir[0] || !e->live) return 0;
    if (engine_session_dir_check(e, err)) return 1;
    // this state and its rows are in a file already: enough only when that file is one of this
    // session's checkpoints (a :save elsewhere or a :load does not put it where -r looks), and
    // then LATEST must name it (-r resumes where the user stopped)
    char ck[1100], abs[PATH_MAX];
    snprintf(ck, sizeof ck, "%s/ckpt", e->session_dir);
    const char *base = strrchr(e->synced_path, '/');
    int in_session = base && realpath(ck, abs) && strlen(abs) == (size_t)(base - e->synced_path) &&
                     !strncmp(abs, e->synced_path, strlen(abs));
    // (and only while that file is there: one deleted by hand since holds nothing to resume)
    struct stat sst;
    int gone = in_session && stat(e->synced_path, &sst) != 0;
    if (gone && !engine_unsaved(e))
        fprintf(stderr, "dmsh: note: %s/ckpt/%s, where this state was saved, is gone: saving it again\n", e->session_dir, base + 1);
    if (!engine_unsaved(e) && in_session && !gone) {
        char name[512];
        session_transcript_ckpt(e, e->synced_path, 0);
        char fail[2600];
        if ((latest_pointer(e->session_dir, name, sizeof name) || strcmp(name, base + 1)) &&
            write_latest(e, e->synced_path, NULL, 0, fail, sizeof fail))
            return dm_fail(err, "%s", fail);
        return 0;
    }
    char note[1600];
    if (session_save(e, path, n, note, sizeof note, err)) return 1;
    if (note[0]) fprintf(stderr, "dmsh: %s\n", note);
    // the state was that file's already (save_step's note): nothing was written, so the caller's
    // "saved PATH" would be untrue
    if (strstr(note, " already held this exact state")) path[0] = 0;
    return 0;
}
