// transcript.c — appending to a session's transcript.dm (session.h: session_transcript): the lines
// typed before a session exists, held for the head of its transcript, and each append as one
// checked write that a full disk refuses whole (said, and counted in the file). The marks of a
// running command and the checkpoint lines are transcript_marks.c's; reading it back at -r is
// transcript_cut.c's.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "session.h"

// Lines typed before a session exists (:preset, :set, :data, :init, ...): kept, and written at
// the head of a new session's transcript, so replaying it rebuilds the run from the start.
static char *pre_lines;
static size_t pre_len, pre_cap;
static long pre_dropped;  // lines past PRE_MAX: counted, and said at the head of the transcript
static long lost_lines;   // lines a failed append left out (a full disk): said on stderr, then in the file
static char lost_why[128];
enum { PRE_MAX = 1 << 20 };

static void append_line(FILE *f, const char *line) {
    size_t n = strlen(line);
    fprintf(f, "%s%s", line, n && line[n - 1] == '\n' ? "" : "\n");
}

void session_transcript_lost(const char *path, const char *what, int er) {
    long nl = 1;  // (what may be several lines: a command's held lines)
    for (const char *c = what; *c; c++) nl += *c == '\n' && c[1];
    lost_lines += nl;
    session_transcript_unplaced(2);  // (checkpoint lines from here say the lines do not rebuild them)
    snprintf(lost_why, sizeof lost_why, "%s", strerror(er ? er : ENOSPC));
    size_t n = strcspn(what, "\n");
    fprintf(stderr, "dmsh: note: %s: could not append '%.*s' (%s): the transcript does not rebuild the session past here\n", path,
            (int)(n > 80 ? 80 : n), what, lost_why);
}

// The file this process appended to last, by name: an append that finds another file there says
// so (QA, session 41: a transcript.dm deleted during a run was started again with only the later
// checkpoint lines, one of them "the state the lines above rebuild"; one an editor saved over
// was written on in silence). (A session directory renamed is another name: not compared.)
// (Its size too: a file deleted and made again can take the same inode number at once, as seen
// here; one that shrank below what this run wrote was replaced or emptied all the same.)
static char seen_path[1200];
static dev_t seen_dev;
static ino_t seen_ino;
static off_t seen_size;

// into m, before an append to path's file (tst): what a file that is not the one last written says
static void check_same_file(const char *path, const struct stat *tst, FILE *m) {
    if (!seen_path[0] || strcmp(path, seen_path)) return;
    if (tst->st_dev == seen_dev && tst->st_ino == seen_ino && tst->st_size >= seen_size) return;
    seen_path[0] = 0;  // (said once: the file is this run's from here)
    if (tst->st_size == 0) {  // (deleted: a new one)
        fprintf(m, "# transcript.dm was deleted while this run wrote it: the lines it held are not here, so the lines below do not "
                   "rebuild the session\n");
        session_transcript_unplaced(2);
        fprintf(stderr, "dmsh: note: %s was deleted during the run: a new one holds the lines from here on, and does not rebuild the "
                        "session\n", path);
    } else {
        fprintf(stderr, "dmsh: note: %s is another file than the one this run wrote (replaced: an editor's save?): the lines from here "
                        "on go into it\n", path);
    }
}
static void remember_file(const char *path, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    snprintf(seen_path, sizeof seen_path, "%s", path);
    seen_dev = st.st_dev;
    seen_ino = st.st_ino;
    seen_size = st.st_size;
}

void session_transcript_remember_fd(const char *path, int fd) { remember_file(path, fd); }

void session_transcript_rewritten(void) { seen_path[0] = 0; }

void session_transcript_precheck(const char *path) {
    if (!seen_path[0] || strcmp(path, seen_path)) return;
    struct stat st;
    if (stat(path, &st) != 0 || (st.st_size == 0 && seen_size > 0)) session_transcript_unplaced(2);
}

int session_transcript_write_raw(const char *path, const char *lines, size_t n) {
    FILE *f = session_fopen_regular(path, "a");
    struct stat tst;
    if (!f || fstat(fileno(f), &tst) != 0) {
        if (f) fclose(f);
        return 1;
    }
    char *buf = NULL;
    size_t blen = 0;
    FILE *m = open_memstream(&buf, &blen);
    if (m) {
        if (tst.st_size == 0) {
            char cwd[PATH_MAX];
            if (getcwd(cwd, sizeof cwd)) fprintf(m, "# dmsh transcript, run in %s (relative paths below are from there)\n", cwd);
        }
        check_same_file(path, &tst, m);
        fwrite(lines, 1, n, m);
        fclose(m);
    }
    int ok = buf && fwrite(buf, 1, blen, f) == blen;
    ok &= fflush(f) == 0;
    if (ok) remember_file(path, fileno(f));
    free(buf);
    ok &= fclose(f) == 0;
    return !ok;
}

static int transcript_append(Engine *e, const char *line, int say);
int session_transcript(Engine *e, const char *line) { return transcript_append(e, line, 1); }
int session_transcript_quiet(Engine *e, const char *line) { return transcript_append(e, line, 0); }

static int transcript_append(Engine *e, const char *line, int say) {
    if (!e->session_dir[0]) {
        size_t n = strlen(line);
        if (pre_len + n + 2 > PRE_MAX) { pre_dropped++; return 1; }  // a pathological amount of typing: keep the head
        if (pre_len + n + 2 > pre_cap) {
            size_t cap = pre_cap ? 2 * pre_cap : 4096;
            while (cap < pre_len + n + 2) cap *= 2;
            char *p = realloc(pre_lines, cap);
            if (!p) { pre_dropped++; return 1; }
            pre_lines = p;
            pre_cap = cap;
        }
        memcpy(pre_lines + pre_len, line, n);
        pre_len += n;
        if (!n || line[n - 1] != '\n') pre_lines[pre_len++] = '\n';
        return 0;
    }
    dm_err derr = {0};
    if (engine_session_dir_check(e, &derr)) return 1;  // deleted: said by the next save or metrics row
    char path[1200];
    snprintf(path, sizeof path, "%s/transcript.dm", e->session_dir);
    if (session_transcript_held(path, line)) {
        dm_err err = {0};
        if (session_write_config(e, &err)) fprintf(stderr, "dmsh: note: %s\n", err.msg);
        return 0;
    }
    // Everything this call appends is composed first and goes in one write, undone whole when it
    // fails: a full disk used to leave a cut line, or none, without a word, and a mark the
    // transcript did not take was then written over lines it held (QA, session 31)
    FILE *f = session_fopen_regular(path, "a");
    int ok = f != NULL, er = errno;
    struct stat tst;
    char *buf = NULL;
    size_t blen = 0;
    if (ok && fstat(fileno(f), &tst) != 0) { ok = 0; er = errno; }
    FILE *m = ok ? open_memstream(&buf, &blen) : NULL;
    if (ok && !m) { ok = 0; er = errno; }
    if (ok) {
        if (tst.st_size == 0) {  // a new transcript: where its relative paths start from
            char cwd[PATH_MAX];
            if (getcwd(cwd, sizeof cwd)) fprintf(m, "# dmsh transcript, run in %s (relative paths below are from there)\n", cwd);
        }
        check_same_file(path, &tst, m);
        if (pre_len) {  // the first line since the session opened: what came before it goes first
            fwrite(pre_lines, 1, pre_len, m);
            if (pre_dropped)
                fprintf(m, "# %ld more lines ran before the session opened and are not here (over %d bytes): this transcript does not rebuild the run\n",
                        pre_dropped, (int)PRE_MAX);
        }
        if (lost_lines)
            fprintf(m, "# %ld line%s could not be written here (%s): the lines below do not rebuild the session's state\n",
                    lost_lines, lost_lines == 1 ? "" : "s", lost_why);
        append_line(m, line);
        if (fclose(m) != 0 || !buf) { ok = 0; er = errno ? errno : ENOMEM; }
    }
    if (ok) {
        for (size_t done = 0; done < blen;) {
            ssize_t w = write(fileno(f), buf + done, blen - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) { ok = 0; er = w < 0 ? errno : ENOSPC; break; }
            done += (size_t)w;
        }
        if (!ok && ftruncate(fileno(f), tst.st_size) != 0) {}  // (a part of it would join the next line)
    }
    free(buf);
    if (ok) remember_file(path, fileno(f));
    if (f && fclose(f) != 0 && ok) { ok = 0; er = errno; }  // (nothing is buffered in f: one write above)
    if (!ok) {
        if (say) session_transcript_lost(path, line, er);
        return 1;
    }
    pre_len = 0;
    pre_dropped = 0;
    lost_lines = 0;
    dm_err err = {0};
    if (session_write_config(e, &err))  // config.dm follows :set / :data
        fprintf(stderr, "dmsh: note: %s\n", err.msg);
    return 0;
}
