// transcript_marks.c — the lines a session's transcript holds about the command running now:
// its mark while it runs, and where each checkpoint the session writes stands among the lines
// (see session.h). The second is what lets -r make the transcript rebuild the state it resumed:
// a process killed after more commands had finished (`:train 200` with no checkpoint, then a
// SIGKILL during a :gen) left those commands as plain lines, and a replay ended 200 steps past
// the session (QA, session 27).
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "session.h"

// Lines held while a command finishes (session_transcript_hold): they go into its mark's place
// in one write (session_transcript_end), so no moment exists at which the file holds neither the mark
// nor the command's line (a process killed there lost the command without a word: QA, session 28)
static char hold_path[1200], *hold_buf;
static size_t hold_len, hold_cap;
static int hold_on;

void session_transcript_hold(const char *path) {
    snprintf(hold_path, sizeof hold_path, "%s", path);
    hold_len = 0;
    hold_on = 1;
}

char *session_transcript_unhold(size_t *len) {
    hold_on = 0;
    *len = hold_len;
    hold_len = 0;
    return hold_buf;  // (valid until the next hold's first line)
}

int session_transcript_last_is(const Engine *e, const char *line) {
    char path[1200], buf[4200];
    snprintf(path, sizeof path, "%s/transcript.dm", e->session_dir);
    size_t n = strlen(line) + 1;
    if (hold_on && !strcmp(path, hold_path) && hold_len)  // (the file's last line is the running command's mark)
        return hold_len >= n && !memcmp(hold_buf + hold_len - n, line, n - 1) && hold_buf[hold_len - 1] == '\n' &&
               (hold_len == n || hold_buf[hold_len - n - 1] == '\n');
    FILE *f = session_fopen_regular(path, "r");
    if (!f) return 0;
    int same = n < sizeof buf - 1 && fseek(f, -(long)(n + 1), SEEK_END) == 0 && fread(buf, 1, n + 1, f) == n + 1 &&
               buf[0] == '\n' && !memcmp(buf + 1, line, n - 1) && buf[n] == '\n';
    fclose(f);
    return same;
}

int session_transcript_held(const char *path, const char *line) {
    if (!hold_on || strcmp(path, hold_path)) return 0;
    size_t n = strlen(line), need = hold_len + n + 2;
    if (need > hold_cap) {
        size_t cap = hold_cap ? 2 * hold_cap : 4096;
        while (cap < need) cap *= 2;
        char *b = realloc(hold_buf, cap);
        if (!b) {  // (no memory: the lines held so far go to the file first, in their order, then this one)
            FILE *f = session_fopen_regular(path, "a");
            if (f) {
                fwrite(hold_buf, 1, hold_len, f);
                fclose(f);
            }
            hold_len = 0;
            hold_on = 0;
            return 0;
        }
        hold_buf = b;
        hold_cap = cap;
    }
    memcpy(hold_buf + hold_len, line, n);
    hold_len += n;
    if (!n || line[n - 1] != '\n') hold_buf[hold_len++] = '\n';
    return 1;
}

static TranscriptMark *innermost;  // the command running now (NULL between commands)
// -r resumed a state the transcript's lines do not rebuild (it found no line placing the file, or
// could not make the lines after it comments): checkpoint lines say so and place nothing, until a
// :load (its line rebuilds the state whatever came before) or a switch to another session
static int unplaced;

void session_transcript_unplaced(int on) { unplaced = on; }
int session_transcript_is_unplaced(void) { return unplaced; }

void session_transcript_begin(Engine *e, const char *line, const char *name, long long step0, const char *text,
                              TranscriptMark *m) {
    m->len = 0;
    m->name = name;
    m->text = text;
    m->step0 = step0;
    m->wrote = 0;
    m->outer = innermost;
    m->pushed = 1;
    innermost = m;
    if (!e->session_dir[0]) return;  // no session: nothing to resume, nothing to mark
    // (a mark the file did not take, a full disk, is no mark: its place would be the end of the
    // lines before it, and the command's line went over them: QA, session 31)
    if (session_transcript_quiet(e, line)) return;
    snprintf(m->path, sizeof m->path, "%s/transcript.dm", e->session_dir);
    struct stat st;
    long len = (long)strlen(line) + 1;  // (append_line adds the line break)
    // the file itself is held (not its name): the session directory may be renamed during the
    // command, and the name it left may be another run's
    int fd = open(m->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    char *tail = malloc((size_t)len);
    int mine = tail && fstat(fd, &st) == 0 && st.st_size >= len && pread(fd, tail, (size_t)len, st.st_size - len) == len &&
               !memcmp(tail, line, (size_t)len - 1) && tail[len - 1] == '\n';
    free(tail);
    if (!mine) { close(fd); return; }  // (the file's end is not the mark: leave the file alone)
    m->fd = fd;
    m->off = (long)st.st_size - len;
    m->len = len;
}

void session_transcript_finishing(TranscriptMark *m) {
    if (m->len) session_transcript_hold(m->path);
}

// (the size a held descriptor's writes left the file at the name: not "another file" to the next append)
static void remember_if_named(const char *path, int fd) {
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) session_transcript_remember_fd(path, fd);
}

// The file at m->path, opened, with the mark the held file (fd) has at m->off found in it (its
// last copy at a line's start): m->off moved there, st that file's. -1 when it is not there.
static int relocate_mark(int fd, TranscriptMark *m, long len, struct stat *st) {
    char *mark = malloc((size_t)len);
    if (!mark || pread(fd, mark, (size_t)len, m->off) != (ssize_t)len) { free(mark); return -1; }
    int nfd = open(m->path, O_RDWR | O_CLOEXEC);
    struct stat ns;
    char *all = NULL;
    long found = -1;
    if (nfd >= 0 && fstat(nfd, &ns) == 0 && S_ISREG(ns.st_mode) && ns.st_size >= len && ns.st_size < (64L << 20) &&
        (all = malloc((size_t)ns.st_size)) && pread(nfd, all, (size_t)ns.st_size, 0) == (ssize_t)ns.st_size)
        for (long at = 0; at + len <= (long)ns.st_size; at++)
            if ((at == 0 || all[at - 1] == '\n') && !memcmp(all + at, mark, (size_t)len)) found = at;
    free(all);
    free(mark);
    if (found < 0) {
        if (nfd >= 0) close(nfd);
        return -1;
    }
    m->off = found;
    *st = ns;
    return nfd;
}

void session_transcript_end(TranscriptMark *m) {
    size_t hl = 0;
    char *hb = m->len ? session_transcript_unhold(&hl) : NULL;
    long len = m->len;
    if (!len) return;
    m->len = 0;
    int fd = m->fd;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return; }  // (best effort, as every transcript write)
    // the held file is in no directory now (deleted, or an editor's save renamed its copy over
    // the name): the command's lines went into it, out of sight, and the copy kept the mark, which
    // -r then read as "the process ended during it" (QA, session 41). The mark is looked for in
    // the file at the name; where it is not, the lines go at that file's end. (A file still
    // linked is the same file under a renamed session directory: written as before.)
    if (st.st_nlink == 0) {
        int nfd = relocate_mark(fd, m, len, &st);
        close(fd);
        if (nfd < 0) {
            if (hl && session_transcript_write_raw(m->path, hb, hl)) {
                hb[hl - 1] = 0;
                session_transcript_lost(m->path, hb, errno);
            }
            return;
        }
        fd = nfd;
    }
    if (st.st_size == m->off + len) {
        // nothing written after the mark (the usual case): its place takes the command's lines in
        // one write, so the file holds the mark or the lines at every moment. Shorter lines leave
        // the rest of the mark until the truncate: a '#' after them makes it a comment meanwhile.
        if (!hl) {
            if (ftruncate(fd, m->off) != 0) {}  // (best effort, as every transcript write)
        } else {
            size_t n = hl;
            // (not over the mark's last byte, its line break: the next line would join the '#')
            if ((long)hl < len - 1) hb[n++] = '#';  // (session.c keeps a byte spare past the lines)
            errno = 0;
            if (pwrite(fd, hb, n, m->off) != (ssize_t)n) {
                // (a full disk: the mark goes as before the lines were held, and they with it:
                // said, as every line the transcript could not take; a short write sets no errno)
                int er = errno ? errno : ENOSPC;
                if (ftruncate(fd, m->off) != 0) {}
                hb[hl - 1] = 0;  // (its lines as one string, for the note)
                session_transcript_lost(m->path, hb, er);
            } else if ((long)hl < len && ftruncate(fd, m->off + (long)hl) != 0) {
            }
        }
        remember_if_named(m->path, fd);
        close(fd);
        return;
    }
    // the command wrote lines of its own after it (a session header, a note, a :train's
    // checkpoint line): its lines go at the end, then the mark is blanked in place, a comment of
    // the same length, so what follows stays where it is
    errno = 0;
    if (hl && pwrite(fd, hb, hl, st.st_size) != (ssize_t)hl) {
        int er = errno ? errno : ENOSPC;
        if (ftruncate(fd, st.st_size) != 0) {}  // (no part of a line)
        hb[hl - 1] = 0;
        session_transcript_lost(m->path, hb, er);
    }
    char *b = malloc((size_t)len);
    if (b && pread(fd, b, (size_t)len, m->off) == (ssize_t)len && b[0] == '#' && b[len - 1] == '\n') {
        static const char done[] = "# (finished)";
        for (long k = 1; k < len - 1; k++) b[k] = k < (long)sizeof done - 1 ? done[k] : ' ';
        if (pwrite(fd, b, (size_t)len, m->off) != (ssize_t)len) {}
    }
    free(b);
    remember_if_named(m->path, fd);
    close(fd);
}

// The line that says a checkpoint holds the state the lines above it rebuild (read back by -r,
// sessions/transcript_cut.c; the format is part of the transcript's)
static void plain_line(char *buf, size_t n, const char *base, long long step) {
    if (unplaced)
        // (after a -r: "may not", as its resume line says: an old transcript without checkpoint
        // lines can rebuild the state, and nothing here can tell: QA, session 32)
        snprintf(buf, n, "# unplaced checkpoint ckpt/%s at step %lld: the lines above %s rebuild it (%s)", base, step,
                 unplaced == 2 ? "do not" : "may not",
                 unplaced == 2 ? "lines that ran could not be written to this file"
                               : "steps a cut or failed command took that no line retakes, or a -r from a state the lines may not rebuild");
    else
        snprintf(buf, n, "# checkpoint ckpt/%s at step %lld: the state the lines above rebuild", base, step);
}

static void put_plain(Engine *e, const char *base, long long step) {
    char line[4096];
    plain_line(line, sizeof line, base, step);
    if (!session_transcript_last_is(e, line)) session_transcript(e, line);
}

void session_transcript_ckpt(Engine *e, const char *path, int written) {
    if (!e->session_dir[0] || !session_own_ckpt(e, path)) return;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    // (a name a line cannot hold: no line, and -r says that none places the file)
    if (strlen(base) >= 1024 || strpbrk(base, "\r\n")) return;
    char tp[1200];
    snprintf(tp, sizeof tp, "%s/transcript.dm", e->session_dir);
    session_transcript_precheck(tp);
    TranscriptMark *m = innermost;
    if (!m) {  // between commands (the exit's save): the state of the transcript as it stands
        put_plain(e, base, (long long)e->step);
        return;
    }
    m->wrote++;
    // a :save changes nothing: its line places the file once the :save's own line is in; a file
    // found holding the state (no write: a :load's own ckpt/ file) is the state the command ends in
    if (!strcmp(m->name, ":save") || !written) return;
    // a file found holding the state (2) during another command than a :train (whose line -r
    // takes the run's steps to): it was not "written by" that command, and its own line placed it
    // (a :load's line claimed the write of a file an earlier :save had made: QA, session 41)
    if (written == 2 && strcmp(m->name, ":train")) return;
    // any other command's, at once (a name reused since — ckpt_keep removed the file, or a save
    // of another state took it — is placed by its newest line): a :train's own checkpoint is
    // -r's to take the run's steps to (the :train's line is written at its end); another's holds
    // the state before the command's line (the save before a :load, an :init, a :session switch)
    // unless the state is the file's still when the command returns (then a line after it says so)
    char line[4096];
    snprintf(line, sizeof line, "# %scheckpoint ckpt/%s at step %lld, written by the %s running here (from step %lld): %s",
             unplaced ? "unplaced " : "", base, (long long)e->step, m->name, m->step0, m->text);
    session_transcript(e, line);
}

void session_transcript_ckpt_after(Engine *e, TranscriptMark *m) {
    if (!m->pushed) return;
    if (innermost == m) innermost = m->outer;
    m->pushed = 0;
    const char *sb = strrchr(e->synced_path, '/');
    if (m->wrote && e->session_dir[0] && sb && !engine_unsaved(e) && session_own_ckpt(e, e->synced_path)) {
        if (!strcmp(m->name, ":load")) unplaced = 0;  // (the state is the loaded file's, and its line says which)
        put_plain(e, sb + 1, (long long)e->step);
    }
}
