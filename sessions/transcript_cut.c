// transcript_cut.c — what -r reads back from a session's transcript (the command a killed
// process ended in, settings it made after its last checkpoint, its last device), and the line
// that rebuilds a :step or :train cut short (an interrupt, or a killed process resumed with -r
// from a checkpoint the command wrote): its steps stay in the run, so the transcript must take
// them for a replay to rebuild it (it held the cut line as a comment only, and a replay trained
// a different run).
#include <errno.h>
#include <limits.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "lost_settings.h"
#include "session.h"

char *session_steps_line(const char *name, int nw, const char *const *words, long long k) {
    // :check determinism cut in its second pass keeps the steps it took from where it started
    // (the first pass is undone): :step k's, bit for bit (QA, session 35: left as a comment, the
    // replay ended k steps short)
    int det = !strcmp(name, ":check") && nw >= 1 && !strcmp(words[0], "determinism");
    if (k < 1 || (strcmp(name, ":step") && strcmp(name, ":train") && strcmp(name, ":stress") && !det)) return NULL;
    size_t n = 64;
    for (int a = 0; a < nw; a++) {
        size_t l = strlen(words[a]);
        // (capitals too: lr_mult=2E0 was no plain word, and its steps no line retook)
        if (!l || strspn(words[a], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_=0123456789.+-") != l) return NULL;
        n += l + 1;
    }
    char *t = malloc(n);
    if (!t) return NULL;
    if (!strcmp(name, ":step") || det) {
        snprintf(t, n, ":step %lld", k);
        return t;
    }
    if (!strcmp(name, ":stress")) {  // each of its steps runs at the same constant lr whatever its
        // N: its first k steps are the same command with steps=k (the report is over those k)
        size_t used = (size_t)snprintf(t, n, ":stress");
        int has = 0;
        for (int a = 0; a < nw; a++) {
            if (strncmp(words[a], "steps=", 6)) { used += (size_t)snprintf(t + used, n - used, " %s", words[a]); continue; }
            if (strtoll(words[a] + 6, NULL, 10) < k) break;  // (k = N: failed at its last step, the line as typed)
            used += (size_t)snprintf(t + used, n - used, " steps=%lld", k);
            has = 1;
        }
        if (!has) { free(t); return NULL; }
        return t;
    }
    for (int a = 0; a < nw; a++)  // (k past the run's N is no cut of it)
        if (!strchr(words[a], '=') && strtoll(words[a], NULL, 10) < k) { free(t); return NULL; }
    size_t used = (size_t)snprintf(t, n, ":train");
    for (int a = 0; a < nw; a++)  // (a cut of a stop_after run: the new count replaces it)
        if (strncmp(words[a], "stop_after=", 11)) used += (size_t)snprintf(t + used, n - used, " %s", words[a]);
    snprintf(t + used, n - used, " stop_after=%lld", k);
    return t;
}

// The line as typed (":t 200 eval_every=50"), split at blanks; the first word is the command's
// name as typed (the resolved one is name)
char *transcript_cut_line(const char *name, const char *typed, long long k) {
    enum { MAXW = 32 };
    char buf[512];
    const char *words[MAXW];
    int nw = 0;
    if (snprintf(buf, sizeof buf, "%s", typed) >= (int)sizeof buf) return NULL;
    for (char *p = strtok(buf, " \t"); p; p = strtok(NULL, " \t")) {
        if (nw == MAXW) return NULL;
        words[nw++] = p;
    }
    // (a :step writes no checkpoint: one past its first step is no state it made)
    if (nw < 1 || strcmp(name, ":train")) return NULL;
    return session_steps_line(name, nw - 1, words + 1, k);
}

// Where the transcript placed the checkpoint -r loaded (sessions/transcript_marks.c writes the
// lines; a -r's own "resumed from" line places the file it resumed): the last such line for its
// file name and step. off: the offset just past it (-1: none); name/step0/text: the :train that
// wrote it, when one did (name "" otherwise).
typedef struct {
    long off;
    int line;
    char name[32], text[512];
    long long step0;
    int long_text;  // a command's checkpoint whose command is longer than text holds
    int open;       // written during a command whose mark is still there (the process ended in it)
} ResumePos;

// mark_open: the last command mark before this line is one a command never took out
static void resume_pos_line(const char *q, long off, int line, const char *base, long long step, int mark_open, ResumePos *rp) {
    static const char ck[] = "# checkpoint ckpt/", rs[] = "# dmsh -r: resumed from ";
    size_t bl = strlen(base);
    long long at;
    int used = 0;
    if (!strncmp(q, ck, sizeof ck - 1)) {
        q += sizeof ck - 1;
        if (strncmp(q, base, bl) || sscanf(q + bl, " at step %lld%n", &at, &used) != 1 || at != step) return;
        q += bl + (size_t)used;
        rp->off = off;
        rp->line = line;
        rp->name[0] = 0;
        rp->long_text = 0;
        rp->open = 0;
        static const char run[] = ", written by the ";
        int u2 = 0;
        if (strncmp(q, run, sizeof run - 1) ||
            sscanf(q + sizeof run - 1, "%31s running here (from step %lld): %n", rp->name, &rp->step0, &u2) != 2 || !u2) {
            rp->name[0] = 0;
            return;
        }
        q += sizeof run - 1 + (size_t)u2;
        size_t tl = strcspn(q, "\r\n");
        rp->open = mark_open;
        if (tl >= sizeof rp->text) {  // (no line takes its steps: said at the resume)
            rp->long_text = 1;
            rp->text[0] = 0;
        } else {
            snprintf(rp->text, sizeof rp->text, "%.*s", (int)tl, q);
        }
    } else if (!strncmp(q, rs, sizeof rs - 1)) {
        const char *p = q + sizeof rs - 1, *a = strstr(p, " at step ");
        if (!a || sscanf(a, " at step %lld", &at) != 1 || at != step) return;
        const char *b = a;
        while (b > p && b[-1] != '/') b--;
        if ((size_t)(a - b) != bl || strncmp(b, base, bl)) return;
        rp->off = off;
        rp->line = line;
        rp->name[0] = 0;
        rp->long_text = 0;
        rp->open = 0;
    }
}

// A line that places a checkpoint among the commands (what resume_pos_line reads)
static int is_place_line(const char *q, size_t n) {
    static const char ck[] = "# checkpoint ckpt/", rs[] = "# dmsh -r: resumed from ";
    return (n >= sizeof ck - 1 && !memcmp(q, ck, sizeof ck - 1)) || (n >= sizeof rs - 1 && !memcmp(q, rs, sizeof rs - 1));
}

// The command lines after rp->off become comments that say why (they ran, but their effect is
// not in the state resumed): the file is rewritten whole (a temp file, fsynced, renamed over
// it). Returns how many, or -1 (why set) when the file could not be rewritten.
static long comment_out_after(const char *path, const ResumePos *rp, const char *base, char *why, size_t nwhy) {
    FILE *f = session_fopen_regular(path, "r");
    if (!f) { snprintf(why, nwhy, "it could not be read"); return -1; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            size_t nc = cap ? 2 * cap : 1 << 20;
            char *nb = realloc(buf, nc);
            if (!nb) { free(buf); fclose(f); snprintf(why, nwhy, "out of memory"); return -1; }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (!got) break;
    }
    if (ferror(f)) {  // (a read error is no end of file: the rewrite would drop the rest)
        snprintf(why, nwhy, "reading it: %s", strerror(errno));
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    long count = 0, places = 0;
    for (size_t o = (size_t)rp->off; o < len;) {
        size_t e = o;
        while (e < len && buf[e] != '\n') e++;
        size_t lead = o;
        while (lead < e && (buf[lead] == ' ' || buf[lead] == '\t')) lead++;
        count += lead < e && buf[lead] != '#' && buf[lead] != '\r';
        places += is_place_line(buf + lead, e - lead);
        o = e + 1;
    }
    if (!count && !places) { free(buf); return 0; }
    char tmp[PATH_MAX + 128];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen(tmp, "w");
    if (!o) { free(buf); snprintf(why, nwhy, "transcript.dm.tmp: %s", strerror(errno)); return -1; }
    fwrite(buf, 1, (size_t)rp->off, o);
    for (size_t p = (size_t)rp->off; p < len;) {
        size_t e = p;
        while (e < len && buf[e] != '\n') e++;
        size_t lead = p;
        while (lead < e && (buf[lead] == ' ' || buf[lead] == '\t')) lead++;
        if (lead < e && buf[lead] != '#' && buf[lead] != '\r')
            fprintf(o, "# after ckpt/%s was written, not in the state -r resumed from it: ", base);
        else if (is_place_line(buf + lead, e - lead))  // (the lines above it no longer rebuild that state)
            fprintf(o, "# no longer placed (the commands above it that rebuilt it are comments now): ");
        fwrite(buf + p, 1, e - p, o);
        fputc('\n', o);
        p = e + 1;
    }
    free(buf);
    // (a write that failed part-way, a full disk, sets the stream's error even when the last
    // flush succeeds: the temp file is then short and must not replace the transcript)
    int bad = fflush(o) != 0 || ferror(o) || fsync(fileno(o)) != 0;
    int saved = errno;
    if (fclose(o) != 0 && !bad) { bad = 1; saved = errno; }
    if (!bad && rename(tmp, path) != 0) { bad = 1; saved = errno; }
    if (bad) {
        snprintf(why, nwhy, "transcript.dm.tmp: %s", strerror(saved ? saved : EIO));
        unlink(tmp);
        return -1;
    }
    session_transcript_rewritten();
    return count;
}

void session_resume_transcript(Engine *e, const char *dir, int fell_back, int unlined) {
    // A checkpoint holds no device (it loads anywhere): -r loads on the CPU. When the session's
    // transcript last moved to another device, e->resume_dev names it: the caller moves there
    // (a GPU run resumed on the CPU trained on at the CPU's speed with fp32 products, said only
    // by a note: QA, session 40), or says why it cannot.
    char last_dev[64] = "", cut[512] = "", cut_name[32] = "";
    long long cut_step = -1;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/transcript.dm", dir);
    FILE *tf = session_fopen_regular(path, "r");
    struct stat tst;
    if (!tf && lstat(path, &tst) == 0 && !S_ISREG(tst.st_mode))  // (a missing one is a new session's)
        engine_note(e, "%s is not a regular file (%s): it is not read, and no command is recorded in it; move it away to "
                    "keep a transcript", path, S_ISFIFO(tst.st_mode) ? "a fifo" : S_ISDIR(tst.st_mode) ? "a directory" : "a device or link");
    LostSettings lost_set;
    lost_settings_reset(&lost_set);
    const char *base = strrchr(e->synced_path, '/') ? strrchr(e->synced_path, '/') + 1 : e->synced_path;
    ResumePos rp = {.off = -1};
    int places = 0;  // checkpoint lines, placing or unplaced (a transcript since session 28 has them)
    int mark_open = 0;
    if (tf) {
        char tl[8192];  // (a checkpoint's line is under 4 096 bytes: read whole)
        int line = 0, at_start = 1;
        while (fgets(tl, sizeof tl, tf)) {
            int start = at_start;
            at_start = strchr(tl, '\n') != NULL;  // (a longer line comes in pieces)
            line += start;
            const char *q = tl + strspn(tl, " \t");
            if (start && !strncmp(q, "# started, never finished", 25)) mark_open = 1;
            else if (start && !strncmp(q, "# (finished)", 12)) mark_open = 0;
            if (start && at_start) {
                resume_pos_line(q, ftell(tf), line, base, (long long)e->step, mark_open, &rp);
                places += !strncmp(q, "# checkpoint ckpt/", 18) || !strncmp(q, "# unplaced checkpoint ckpt/", 27);
            }
            lost_settings_line(&lost_set, q);
            // the mark a command leaves while it runs (repl/parse.c): the last one of a killed run
            static const char mark[] = "# started, never finished";
            const char *c = strncmp(q, mark, sizeof mark - 1) ? NULL : strstr(q, "): ");
            if (c) {
                snprintf(cut, sizeof cut, "%.*s", (int)strcspn(c + 3, "\r\n"), c + 3);
                // (its name and first step, in marks since session 26)
                if (sscanf(q + sizeof mark - 1, " (%31s from step %lld;", cut_name, &cut_step) != 2 ||
                    strcspn(c + 3, "\r\n") >= sizeof cut)  // (cut short here: its words are not all there)
                    cut_name[0] = 0;
            } else if (*q && *q != '\n' && *q != '#') cut[0] = 0;  // a command ran after it
            if (strncmp(q, ":device", 7) || (q[7] != ' ' && q[7] != '\t')) continue;
            q += 7 + strspn(q + 7, " \t");
            size_t w = strcspn(q, " \t\r\n;#");
            if (w > 0 && w < sizeof last_dev) { memcpy(last_dev, q, w); last_dev[w] = 0; }
        }
        fclose(tf);
    }
    session_transcript_unplaced(0);
    if (rp.off >= 0) {  // the transcript says where the file was written: what ran after it is not in it
        char why[PATH_MAX + 64] = "";
        long n = comment_out_after(path, &rp, base, why, sizeof why);
        long long k = (long long)e->step - rp.step0;
        int train = !strcmp(rp.name, ":train");
        char *again = train && !rp.long_text && n >= 0 ? transcript_cut_line(rp.name, rp.text, k) : NULL;
        // (whether the lines can rebuild the state is known before anything is said of it)
        int no_retake = train && !again && n >= 0, open = !train && rp.name[0] && rp.open && n == 0;
        if (cut[0]) engine_note(e, "the process ended during `%s` (its transcript's last command)", cut);
        if (n < 0) session_transcript_unplaced(1);
        if (n < 0)
            engine_note(e, "%s: the command lines after its line %d, where ckpt/%s was written, ran but are not in the state resumed from it, "
                        "and could not be made comments (%s): a replay of the transcript ends past this state", path, rp.line, base, why);
        else if (n > 0)
            engine_note(e, "the transcript's %ld command line%s after ckpt/%s was written (its line %d) %s not in the state resumed "
                        "from it: comments now%s", n, n == 1 ? "" : "s", base, rp.line, n == 1 ? "is" : "are",
                        no_retake || open ? "" : ", so a replay of the transcript rebuilds this state");
        if (again) {
            char line[PATH_MAX + 256];
            snprintf(line, sizeof line, "# -r resumed from ckpt/%s, which the :train that line %d names wrote %lld steps into its run: "
                     "the next line takes them", base, rp.line, k);
            session_transcript(e, line);
            session_transcript(e, again);
            engine_note(e, "ckpt/%s was written %lld steps into `%s`: the transcript takes them with `%s`", base, k, rp.text, again);
            free(again);
        } else if (no_retake) {
            session_transcript_unplaced(1);
            if (rp.long_text)
                engine_note(e, "ckpt/%s was written inside a :train whose line is longer than %zu bytes, and no line takes the steps it had run: "
                            "a replay of the transcript does not rebuild this state", base, sizeof rp.text - 1);
            else
                engine_note(e, "ckpt/%s was written %lld steps into `%s`, and no line takes exactly those steps (a quoted or unknown word): "
                            "a replay of the transcript does not rebuild this state", base, k, rp.text);
        } else if (open) {
            // written during the command the process ended in: the state before its change (the
            // save before a :load or an :init) or after it (the new model's) — the lines cannot say
            session_transcript_unplaced(1);
            engine_note(e, "ckpt/%s was written during %s, which the process ended in: whether it holds the state before that command "
                        "or after it the transcript cannot say, so a replay of it may not end in this state", base, rp.name);
        }
        cut[0] = 0;  // (said)
    } else if (((unlined & 1 && !places) || (unlined & 2 && places)) && cut[0] && cut_name[0] && !fell_back && (long long)e->step > cut_step) {
        // no line for this file, holding steps of the command the process ended in (its mark,
        // with its name and first step, is the transcript's last command: cut[0]), and it is the only
        // file of a transcript with no checkpoint line, or a save this -r finished (its temp file
        // was whole) in one that has them (placed lines: this dmsh's): a kill between the save and
        // its line (an older dmsh's transcript has no line and, as a rule, several files). The rule below takes its steps with a line, so the lines rebuild it: said there,
        // nothing unplaced (it said "written before dmsh placed them", or "no line places it",
        // and every later line was "unplaced": QA, session 35)
    } else if (places) {  // (a LATEST set by hand, a file copied in, a kill between its save and its line)
        engine_note(e, "no line of the transcript places %s among its commands: a replay of the transcript may not end in this state", base);
        session_transcript_unplaced(1);
        cut_name[0] = 0;  // (and no line is added on the older rule's word below: only its note)
    } else {
        // a transcript from before checkpoint lines (or of a name no line can hold): the older
        // rule below does what it can, but no later line can vouch for what the lines rebuild
        session_transcript_unplaced(1);
        engine_note(e, "no line of the transcript places a checkpoint (it was written before dmsh placed them): a replay of it may not end "
                    "in this state, and the checkpoint lines written from now on do not claim it does");
    }
    // a :step or :train that wrote the checkpoint resumed from: the transcript takes its steps
    char *again = cut[0] && cut_name[0] && !fell_back ? transcript_cut_line(cut_name, cut, (long long)e->step - cut_step) : NULL;
    if (again) {
        char line[512];
        snprintf(line, sizeof line, "# cut short: the process ended during the command marked above; -r resumed from its checkpoint at step %lld: "
                 "the next line takes the %lld steps it took to there", (long long)e->step, (long long)e->step - cut_step);
        session_transcript(e, line);
        session_transcript(e, again);
        engine_note(e, "the process ended during `%s` (its transcript's last command): resumed from its last checkpoint, step %lld; "
                    "the transcript takes the %lld steps it ran to there with `%s`", cut, (long long)e->step, (long long)e->step - cut_step, again);
        free(again);
    } else if (cut[0]) {
        session_transcript_unplaced(1);
        engine_note(e, "the process ended during `%s` (its transcript's last command): resumed from its last checkpoint, step %lld; a replay of the transcript does not rebuild what it did",
                    cut, (long long)e->step);
    }
    lost_settings_note(e, &lost_set);
    e->resume_dev[0] = 0;
    if (last_dev[0] && strcmp(last_dev, "cpu") && strcmp(last_dev, e->device) && strlen(last_dev) < sizeof e->resume_dev)
        snprintf(e->resume_dev, sizeof e->resume_dev, "%s", last_dev);
    else if (last_dev[0] && strcmp(last_dev, "cpu") && strcmp(last_dev, e->device))  // (no device has such a name)
        engine_note(e, "this session last ran on %s (its transcript's last :device); resumed on %s", last_dev,
                    e->device[0] ? e->device : "cpu");
}
