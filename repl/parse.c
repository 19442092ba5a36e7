// parse.c — the command language (SPEC §6): splitting lines, quoting, comments, prefix
// resolution, suggestions, and the script driver.
#include <ctype.h>
#include <math.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "../engine/engine.h"
#include "../sessions/session.h"
#include <signal.h>
#include "shell.h"

// ~/ at the start of an unquoted word, or of its value after the first '=' (eval=~/x), is the
// home directory, as in a shell (completion inserts such paths; nothing else would expand them).
static size_t tilde_at(const char *p, const char *word0, const char **home) {
    // (followed by '/' or by whatever ends a word in sh_split: a '~' as the last word of a line,
    // or before a '#', was kept as the name '~': QA, session 24)
    if (p[0] != '~' || (p[1] != '/' && p[1] && !strchr(" \t\r\n;#", p[1]))) return 0;
    int start = p == word0;
    if (!start && p[-1] == '=' && !memchr(word0, '=', (size_t)(p - 1 - word0))) start = 1;
    const char *h = getenv("HOME");
    if (!start) return 0;
    if (!h || !h[0]) return (size_t)-1;  // (said by sh_split: it was kept, and "directory ~ does not exist" followed)
    *home = h;
    return strlen(h);
}

size_t sh_split_size(const char *line) {
    const char *h = getenv("HOME");
    size_t extra = 0, hl = h ? strlen(h) : 0;
    for (const char *p = line; *p; p++) extra += *p == '~' ? hl : 0;
    return strlen(line) + 1 + extra;
}

int sh_split(const char *line, char *buf, size_t nbuf, Words *cmds, int maxcmds, dm_err *err) {
    size_t len = strlen(line);
    if (len + 1 > nbuf) return dm_fail(err, "line too long (%zu characters, at most %zu)", len, nbuf - 1), -1;
    char *end = buf + nbuf;
    int nc = 0;
    char *o = buf;
    const char *p = line;
    Words *cur = NULL;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        // a line break ends a command as ';' does (a multi-line -e, as sed -e reads one); a '#'
        // comment runs to the end of its line
        if (*p == '#') { while (*p && *p != '\n') p++; continue; }
        if (*p == ';' || *p == '\n') { cur = NULL; p++; continue; }
        if (!cur) {
            if (nc == maxcmds) return dm_fail(err, "too many commands on one line (at most %d)", maxcmds), -1;
            cur = &cmds[nc++];
            cur->argc = 0;
            cur->text = p;
        }
        if (cur->argc == SH_MAX_WORDS) return dm_fail(err, "too many words in one command (at most %d)", SH_MAX_WORDS), -1;
        cur->lit[cur->argc] = *p == '"' || *p == '\'';
        cur->argv[cur->argc++] = o;
        const char *word0 = p;
        // one word: runs of plain characters and quoted parts ("a b" or key="a b")
        while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != ';' && *p != '#') {
            const char *home;
            size_t hl = tilde_at(p, word0, &home);
            if (hl == (size_t)-1)
                return dm_fail(err, "%.*s: ~ names the home directory, and HOME is not set (or empty): write the whole path", (int)strcspn(p, " \t;#\r\n"), p), -1;
            if (hl && (size_t)(end - o) > hl + strlen(p)) {
                memcpy(o, home, hl);
                o += hl;
                p++;
                continue;
            }
            if (*p == '"' || *p == '\'') {
                char q = *p++;
                while (*p && *p != q) {
                    if (*p == '\\' && q == '"' && (p[1] == '"' || p[1] == '\\')) p++;
                    *o++ = *p++;
                }
                if (*p != q) return dm_fail(err, "unterminated %s quote", q == '"' ? "double" : "single"), -1;
                p++;
            } else {
                *o++ = *p++;
            }
        }
        *o++ = 0;
        cur->textlen = (size_t)(p - cur->text);
    }
    return nc;
}

int sh_parse_int(const char *s, long long lo, long long hi, const char *what, long long *v, dm_err *err) {
    // decimal digits, as the config's integer keys (config_parse_digits): strtoll alone would
    // take " 5", "+5" and "-0"; a minus sign only where the range has negative values
    int neg = lo < 0 && s[0] == '-';
    unsigned long long u = 0;
    int bad = config_parse_digits(s + neg, (unsigned long long)LLONG_MAX, &u);
    long long x = neg ? -(long long)u : (long long)u;
    if (bad || x < lo || x > hi) return dm_fail(err, "bad %s '%s': expected an integer in [%lld, %lld] (decimal digits)", what, s, lo, hi);
    *v = x;
    return 0;
}

int sh_parse_real(const char *s, double lo, double hi, const char *what, double *v, dm_err *err) {
    char *end;
    double x = strtod(s, &end);
    if (!*s || *end || !isfinite(x) || x < lo || x > hi) return dm_fail(err, "bad %s '%s': expected a number in [%g, %g]", what, s, lo, hi);
    *v = x;
    return 0;
}

// every word after the command must be one of the allowed key=value keys (or positional)
int sh_check_keys(const Words *w, int max_positional, const char *const *keys, dm_err *err) {
    int pos = 0;
    for (int i = 1; i < w->argc; i++) {
        const char *eq = sh_eq(w, i);
        if (!eq) {
            if (++pos > max_positional) return dm_fail(err, "%s: unexpected argument '%s' (see :help %s)", w->argv[0], w->argv[i], w->argv[0]);
            continue;
        }
        int okk = 0;
        for (int k = 0; keys && keys[k]; k++)
            if ((size_t)(eq - w->argv[i]) == strlen(keys[k]) && strncmp(w->argv[i], keys[k], eq - w->argv[i]) == 0) okk = 1;
        if (!okk) return dm_fail(err, "%s: unknown option '%.*s' (see :help %s)", w->argv[0], (int)(eq - w->argv[i]), w->argv[i], w->argv[0]);
        // a key given twice (`:gen n=5 n=50`): sh_kv would take the first one silently
        for (int j = 1; j < i; j++)
            if (!w->lit[j] && strncmp(w->argv[j], w->argv[i], (size_t)(eq - w->argv[i]) + 1) == 0)
                return dm_fail(err, "%s: option '%.*s' given twice", w->argv[0], (int)(eq - w->argv[i]), w->argv[i]);
    }
    return 0;
}

const char *sh_positional(const Words *w, int idx) {
    int pos = 0;
    for (int i = 1; i < w->argc; i++)
        if (!sh_eq(w, i) && pos++ == idx) return w->argv[i];
    return NULL;
}

const char *sh_kv(const Words *w, const char *key) {
    size_t kl = strlen(key);
    for (int i = 1; i < w->argc; i++)
        if (!w->lit[i] && strncmp(w->argv[i], key, kl) == 0 && w->argv[i][kl] == '=') return w->argv[i] + kl + 1;
    return NULL;
}

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40) return 99;
    int d[41][41];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

void sh_suggest(const char *word, char *buf, size_t n) {
    int best = 99;
    for (int i = 0; dm_commands[i].name; i++) {
        int dd = edit_distance(word, dm_commands[i].name);
        if (dd < best) best = dd;
    }
    buf[0] = 0;
    if (best > 3) return;
    size_t used = 0;
    for (int i = 0; dm_commands[i].name && used < n; i++)
        if (edit_distance(word, dm_commands[i].name) == best)
            used += snprintf(buf + used, n - used, "%s%s", used ? " or " : "", dm_commands[i].name);
}

const Command *sh_resolve(const char *word, dm_err *err) {
    if (word[0] != ':') return dm_fail(err, "'%s' is not a command (commands start with ':'; see :help)", word), NULL;
    for (int i = 0; dm_commands[i].name; i++)
        if (strcmp(dm_commands[i].name, word) == 0) return &dm_commands[i];
    size_t wl = strlen(word);
    const Command *hit = NULL;
    int nhit = 0;
    for (int i = 0; dm_commands[i].name; i++)
        if (wl > 1 && strncmp(dm_commands[i].name, word, wl) == 0) { hit = &dm_commands[i]; nhit++; }
    if (nhit == 1) return hit;
    // documented one-letter shortcuts
    static const char *shortcuts[][2] = {{":s", ":step"}, {":t", ":train"}, {":e", ":eval"},
                                         {":p", ":plot"}, {":h", ":help"}, {":q", ":quit"}};
    for (unsigned i = 0; i < sizeof shortcuts / sizeof shortcuts[0]; i++)
        if (strcmp(word, shortcuts[i][0]) == 0)
            for (int j = 0; dm_commands[j].name; j++)
                if (strcmp(dm_commands[j].name, shortcuts[i][1]) == 0) return &dm_commands[j];
    if (nhit > 1) {
        char list[400];
        size_t used = 0;
        for (int i = 0; dm_commands[i].name && used < sizeof list; i++)
            if (strncmp(dm_commands[i].name, word, wl) == 0)
                used += snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", dm_commands[i].name);
        dm_fail(err, "ambiguous command '%s': %s", word, list);
        return NULL;
    }
    if (!word[1]) return dm_fail(err, "':' alone is not a command (a command is :NAME; see :help)"), NULL;
    for (int i = 0; dm_commands[i].name; i++)  // :SET: one answer, not the near spellings
        if (strcasecmp(dm_commands[i].name, word) == 0)
            return dm_fail(err, "unknown command '%s' (commands are lower case: %s)", word, dm_commands[i].name), NULL;
    char sug[200];
    sh_suggest(word, sug, sizeof sug);
    if (sug[0]) dm_fail(err, "unknown command '%s' (did you mean %s? see :help)", word, sug);
    else dm_fail(err, "unknown command '%s' (see :help)", word);
    return NULL;
}

// Transcript comments a -b replay reports when it meets them (it cannot run what they mark)
#define NOT_REPLAYABLE "# not replayable"
#define INTERRUPTED "# interrupted during the command below"
#define FAILED_PART "# failed part-way during the command below"
#define UNFINISHED "# started, never finished"  // a command's mark while it runs (session.h)
// a :step or :train that failed after taking steps: the next line takes them, and a replay goes
// on past it when it fails at the same step
#define FAILED_STEPS "# failed part-way, its steps taken by the next line"

// One command as a transcript line. A line break inside quotes (typed with -e) would split it
// into two lines that no longer parse (or, after a '#', into a live line that never ran): such a
// command goes in as a comment that says why, its breaks shown as \n; a -b replay of the
// transcript names the line it cannot run. (Re-encoding it exactly would need the two quoting
// layers, the line splitter's and :gen's escapes, undone and redone; :gen, where a line break is
// most likely, changes no state, so a replay's training is the same without it.)
static char *transcript_text(const char *text, size_t ln, int as_comment) {
    int breaks = 0;
    for (size_t k = 0; k < ln; k++) breaks += text[k] == '\n' || text[k] == '\r';
    const char *why = breaks ? NOT_REPLAYABLE " (a line break inside quotes): " : "";
    if (breaks) as_comment = 0;  // the note is the comment
    char *t = malloc(strlen(why) + ln + 3 * (size_t)breaks + 3);
    char *o = t + sprintf(t, "%s%s", as_comment ? "# " : "", why);
    for (size_t k = 0; k < ln; k++) {
        if (text[k] == '\n') { memcpy(o, "\\n", 2); o += 2; }
        else if (text[k] == '\r') { memcpy(o, "\\r", 2); o += 2; }
        else *o++ = text[k];
    }
    *o = 0;
    return t;
}

#define CUT_SHORT "# cut short"  // a :step, :train or :stress that stopped early: the line after it rebuilds it

// A :step or :train cut short: the command that takes the steps it took (sessions/transcript_cut.c);
// a quoted word is not plain (that one stays a comment)
static char *steps_taken_line(const Command *c, const Words *w, long long k) {
    for (int a = 1; a < w->argc; a++)
        if (w->lit[a]) return NULL;
    return session_steps_line(c->name, w->argc - 1, (const char *const *)w->argv + 1, k);
}

void sh_note_eval_window(Shell *sh) {
    const Config *c = sh->eng ? &sh->eng->cfg : NULL;
    if (c && c->eval_bytes < c->seq)  // (config_validate_eval's test)
        fprintf(sh->out, "note: eval_bytes=%lld is shorter than one sequence (seq=%d): the eval window holds none; :eval and a :train that evals refuse until :set eval_bytes=%d or more\n",
                (long long)c->eval_bytes, c->seq, c->seq);
}

int sh_exec_line(Shell *sh, const char *line, dm_err *err) {
    size_t n = sh_split_size(line);
    char *buf = malloc(n < 16 ? 16 : n);
    Words cmds[32];
    int nc = sh_split(line, buf, n < 16 ? 16 : n, cmds, 32, err);
    int rc = nc < 0;
    Engine *e = sh->eng;
    int stopped = 0, built = 0, any_cut = 0;  // any_cut: a command of the line stopped part-way
    int seq0 = e ? e->cfg.seq : 0;
    int64_t evb0 = e ? e->cfg.eval_bytes : 0;
    for (int i = 0; i < nc && !rc && !sh->quit; i++) {
        const Command *c = sh_resolve(cmds[i].argv[0], err);
        if (!c) { rc = 1; break; }
        int64_t honored0 = e ? e->intr_honored : 0;
        sh->cut_in_eval = -1;
        long long step0 = e ? (long long)e->step : 0;
        int rows0 = e ? e->nrows : 0;
        Arms arms0;  // (its counters: a cut :eval or :gen keeps what it ran, said below)
        if (e) arms0 = e->model.arms;
        // :run goes into the transcript as a comment, before the lines it runs, which go in one
        // by one as they finish (below, at their own depth): the transcript does not depend on
        // the file staying as it was, and a :run that fails halfway keeps the lines that ran
        int is_run = !strcmp(c->name, ":run");
        if (is_run && e) {
            char *t = transcript_text(cmds[i].text, cmds[i].textlen, 1);
            session_transcript(e, t);
            free(t);
        }
        // while it runs, the transcript holds a mark that says so: a process killed during it
        // leaves the mark, so the transcript names the command whose effects it lacks
        TranscriptMark mark = {.len = 0, .pushed = 0};
        if (e && !is_run) {
            char *t = transcript_text(cmds[i].text, cmds[i].textlen, 0);
            size_t ml = strlen(t) + strlen(c->name) + 200;
            char *ml_line = malloc(ml);
            // (its name and first step: a -r that resumes from a checkpoint it wrote writes the
            // line that takes the steps it took, sessions/transcript_cut.c)
            snprintf(ml_line, ml, UNFINISHED " (%s from step %lld; the process ended during it; a -r resumes from its last checkpoint): %s",
                     c->name, step0, t);
            session_transcript_begin(e, ml_line, c->name, step0, t, &mark);
            free(ml_line);
        }
        rc = c->fn(sh, &cmds[i], err);
        session_transcript_finishing(&mark);  // (its lines take the mark's place: session_transcript_end below)
        if (mark.pushed) {
            free((char *)mark.text);
            mark.text = NULL;
        }
        built |= !rc && (!strcmp(c->name, ":init") || !strcmp(c->name, ":load"));
        fflush(sh->out);
        // An interrupt (Ctrl-C; SIGINT or SIGTERM in a script) stopped the running command at a
        // step boundary (or between its units of work) with the state intact, and the rest of
        // the line does not run. A script stops here; the prompt (depth 0) carries on.
        int intr = e && e->interrupt && *e->interrupt;
        int cut = intr && e->intr_honored != honored0;  // it stopped early (not one that ran to its end)
        any_cut |= cut;
        // The transcript keeps what ran, command by command, in the session active when it
        // finished (a :session in the middle of a line splits it between the two), so replaying
        // it rebuilds the session; a :run's lines go in as they run (the :run itself as a comment,
        // above); a command cut short by an interrupt goes in as a comment, a failed one not at all
        // unless it changed the run first (then as a comment that says what it did).
        // :quit would end a replay there (a later -r's lines come after it); :session NAME in
        // NAME's own transcript would be refused when replayed in place (the run is there): both
        // go in as comments
        // a :save PATH into the session's own ckpt/ too: a replay of it would be refused (another
        // session's ckpt/, or no such directory), and it changes no state (QA, session 28)
        const char *save_to = !strcmp(c->name, ":save") ? sh_positional(&cmds[i], 0) : NULL;
        int as_comment = cut || !strcmp(c->name, ":quit") || !strcmp(c->name, ":session") || (save_to && e && session_own_ckpt(e, save_to));
        if (e && !is_run) {
            char *t = transcript_text(cmds[i].text, cmds[i].textlen, as_comment);
            // (a cut that ends in an error keeps its steps too: :check determinism cut in its
            // second pass says "nothing checked" and keeps them)
            char *again = cut ? steps_taken_line(c, &cmds[i], (long long)e->step - step0) : NULL;
            if (again) {  // its steps stay: the line that takes exactly them, after it as a comment
                char *c2 = transcript_text(cmds[i].text, cmds[i].textlen, 0);
                size_t nl = strlen(c2) + 400;
                char *note = malloc(nl);
                snprintf(note, nl, CUT_SHORT " at step %lld by an interrupt%s; the next line takes the %lld steps it ran: %s",
                         (long long)e->step,
                         sh->cut_in_eval >= 0 ? ", inside its eval (the replay runs that eval, and a checkpoint due there: the same "
                                                "weights, one more eval row and its forward counts)" : "",
                         (long long)e->step - step0, c2);
                session_transcript(e, note);
                session_transcript(e, again);
                free(note);
                free(c2);
                free(again);
            } else if (cut) {
                // (steps it took that no line retakes — a quoted word: the lines no
                // longer rebuild the state, and checkpoint lines say so from now on)
                if (e->step != step0) session_transcript_unplaced(1);
                // a cut :eval, :eval-depths or :gen ran forwards that stay counted (:show arms,
                // checkpoints) and that no line of a replay runs (QA, session 33): said here
                int counted = memcmp(arms0.fwd, e->model.arms.fwd, sizeof arms0.fwd) != 0 && e->step == step0;
                char note[400];
                snprintf(note, sizeof note, INTERRUPTED " (at step %lld; %s%s):", (long long)e->step,
                         e->step != step0 ? "a stepping command stops at a step boundary" : "it took no step",
                         counted ? "; the forwards it ran stay in the arms' counts, which a replay of these lines does not add" : "");
                session_transcript(e, note);
                session_transcript(e, t);
            } else if (!rc) {
                session_transcript(e, t);
            } else if (e->step != step0 && (again = steps_taken_line(c, &cmds[i], (long long)e->step - step0))) {
                // it failed after taking steps (a nan_limit stop, a checkpoint it could not
                // write): the line that takes exactly them, after a comment a replay reads as
                // "the next line may fail here as this one did" (a repeating nan_limit stop would
                // otherwise end the replaying script there)
                char *c2 = transcript_text(cmds[i].text, cmds[i].textlen, 0);
                size_t nl = strlen(c2) + 700;
                char *note = malloc(nl);
                snprintf(note, nl, FAILED_STEPS " (it took the run from step %lld to %lld, then failed: %.240s; a replay goes on past the "
                         "next line when it fails there at step %lld): %s", step0, (long long)e->step, err->msg, (long long)e->step, c2);
                session_transcript(e, note);
                session_transcript(e, again);
                free(note);
                free(c2);
                free(again);
            } else if (e->step != step0 || e->nrows != rows0) {
                // it failed after it changed the run (steps taken, rows recorded: a nan_limit
                // stop, a refused step or eval, a checkpoint that could not be written): left out,
                // a replay of the transcript would silently miss what it did; run again, it would
                // not stop where this one did. A comment that says so, which a -b replay names
                char note[400];
                snprintf(note, sizeof note, FAILED_PART " (it took the run from step %lld to %lld, then failed: %.240s):",
                         step0, (long long)e->step, err->msg);
                session_transcript_unplaced(1);  // (as for a cut above)
                session_transcript(e, note);
                char *c2 = transcript_text(cmds[i].text, cmds[i].textlen, 1);
                session_transcript(e, c2);
                free(c2);
            }
            free(t);
        }
        session_transcript_ckpt_after(e, &mark);  // the checkpoint it ended in: after its line
        session_transcript_end(&mark);
        if (intr) {
            stopped = !sh->interactive || sh->depth > 0;  // (a :run at the prompt stops too)
            if (sh->interactive && sh->depth == 0) {
                *e->interrupt = 0;
                // said: a command that ignores Ctrl-C (:plot) ended as usual, and the rest of the
                // line went without a word (QA, session 33)
                if (i + 1 < nc) {
                    const char *from = cmds[i + 1].text, *to = cmds[nc - 1].text + cmds[nc - 1].textlen;
                    size_t l = strlen(err->msg);
                    // after the cut command's own error, on its line (a note here came out
                    // before that error, which the caller prints: QA, session 35)
                    if (rc && l + 1 < sizeof err->msg)
                        snprintf(err->msg + l, sizeof err->msg - l, "; the rest of the line did not run: %.*s", (int)(to - from), from);
                    else if (!rc)
                        fprintf(sh->out, "note: interrupted: the rest of the line did not run: %.*s\n", (int)(to - from), from);
                }
            }
            break;  // Ctrl-C abandons the rest of the line too
        }
    }
    const char *note = e ? engine_notice(e) : NULL;  // e.g. a :load that left no corpus open
    if (note) fprintf(sh->out, "note: %s\n", note);
    // an eval window of no sequence is said where the user's line ends (the prompt's, a -e's or
    // a script's own, never inside a :run, whose lines may set seq and eval_bytes apart), when
    // the line changed seq or eval_bytes, built a model or loaded one
    if (e && !rc && sh->depth == 0 && (e->cfg.seq != seq0 || e->cfg.eval_bytes != evb0 || built)) sh_note_eval_window(sh);
    if (stopped && !rc && sh->leave_signal && *sh->leave_signal == SIGPIPE)  // (the Ctrl-C words would not say why)
        rc = dm_fail(err, "stopped at step %lld: the reader of standard output went away (SIGPIPE)%s", (long long)e->step,
                     getenv("DMSH_DIGEST") || !e->live ? "" : "; the state is saved on the way out");  // (a --replay child saves nothing)
    // (an interrupt no command acted on — it came during one that does not stop part-way, :anchors
    // or :plot — was said as this line's "interrupted", and the user ran a finished line again:
    // QA, session 41)
    else if (stopped && !rc && !any_cut)
        rc = dm_fail(err, "interrupted at step %lld (state intact) after this line ran to its end: the script stops before its next line",
                     (long long)e->step);
    else if (stopped && !rc) rc = dm_fail(err, "interrupted at step %lld (state intact): the script stops here", (long long)e->step);
    free(buf);
    return rc;
}

// The scripts being run, outermost first (their device and inode): a :run of one of them would
// never end.
static struct { dev_t dev; ino_t ino; } run_stack[32];
static int run_n;

// One line of a script (with its '\n'), like getline, but never longer than SH_LINE_MAX: -1 at
// the end, -2 past the limit, -3 when a signal cut the read. `:run /dev/zero` (or `dmsh < /dev/zero`, a huge file with no line
// break) read one endless line into memory until the machine ran out (QA, session 24).
#define SH_LINE_MAX (1 << 20)
static ssize_t read_line_max(char **line, size_t *cap, FILE *f) {
    size_t n = 0;
    for (;;) {
        if (n + 2 > *cap) {
            size_t nc = *cap < 4096 ? 4096 : 2 * *cap;
            char *b = realloc(*line, nc);
            if (!b) return -2;
            *line = b;
            *cap = nc;
        }
        int c = getc(f);
        if (c == EOF) {
            // a read a signal cut (a piped script's writer between two lines, or in the middle of
            // one): not the end of the script, and a half line is not a command (QA, session 34:
            // the half ":set warmup=1" of ":set warmup=100" ran)
            if (ferror(f) && errno == EINTR) return n ? -4 : -3;  // (-4: part of the line was read)
            if (!n) return -1;
            break;
        }
        (*line)[n++] = (char)c;
        if (c == '\n') break;
        if (n > SH_LINE_MAX) return -2;
    }
    (*line)[n] = 0;
    return (ssize_t)n;
}

// Every line of f as script `name`: the first error ends it, as "name:LINE: message". The same
// checks for a file and for standard input (a piped script ran a line cut at a NUL byte, which
// -b refused, and said nothing of a transcript's lines it cannot replay: QA, session 24).
static int run_stream(Shell *sh, FILE *f, const char *name, dm_err *err) {
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    ssize_t got;
    long long expect_at = -1;  // the step the line after a FAILED_STEPS comment failed at in the session
    long long expect_from = -1;  // and the step it started from
    int told_step = 0;
    for (;;) {
        if (sh->quit) break;
        if (sh->reading) sh->reading(1);  // (a piped script waiting for its next line: a signal ends the wait)
        got = read_line_max(&line, &cap, f);
        if (sh->reading) sh->reading(0);
        if (got == -1) break;
        sh->line++;
        if (got == -3 || got == -4) {  // (the exit status names a SIGTERM, SIGHUP or SIGPIPE; a Ctrl-C's is 1)
            // (the part-read words only when a part was read: QA, session 41)
            rc = dm_fail(err, "%s:%d: interrupted while waiting for this line (state intact): the script stops here%s", name, sh->line,
                         got == -4 ? "; a part of the line already read did not run" : "");
            break;
        }
        dm_err e1 = {0};
        long long expect = expect_at, from_at = expect_from;  // (for this line only)
        expect_at = expect_from = -1;
        if (got == -2) {
            rc = dm_fail(err, "%s:%d: a line longer than %d bytes (is this a text file?)", name, sh->line, SH_LINE_MAX);
            break;
        }
        if ((size_t)got != strlen(line)) {  // a NUL would end the line there, silently
            rc = dm_fail(err, "%s:%d: the line holds a NUL byte (is this a text file?)", name, sh->line);
            break;
        }
        // a transcript's marks of what it cannot replay: said, not skipped in silence
        const char *lp = line + strspn(line, " \t");
        int live = 0;  // the mark of a command a running dmsh is still in (read from a second terminal)
        if (!strncmp(lp, UNFINISHED, strlen(UNFINISHED))) {
            size_t nl = strlen(name), tl = strlen("transcript.dm");
            if (nl >= tl && !strcmp(name + nl - tl, "transcript.dm") && (nl == tl || name[nl - tl - 1] == '/')) {
                char d[PATH_MAX];
                snprintf(d, sizeof d, "%.*s", nl == tl ? 1 : (int)(nl - tl - 1), nl == tl ? "." : name);
                dm_err ue = {0};
                live = session_in_use(d, &ue);
                char *cut = strstr(ue.msg, " (two processes");  // (its reason is not this line's)
                if (cut) *cut = 0;
                if (live)
                    fprintf(stderr, "%s:%d: note: this line is not run: the command it marks is still running (%s); its mark reads "
                            "as if the process had ended\n", name, sh->line, ue.msg);
            }
        }
        if (!live && (!strncmp(lp, NOT_REPLAYABLE, strlen(NOT_REPLAYABLE)) || !strncmp(lp, INTERRUPTED, strlen(INTERRUPTED)) ||
                      !strncmp(lp, FAILED_PART, strlen(FAILED_PART)) || !strncmp(lp, UNFINISHED, strlen(UNFINISHED))))
            fprintf(stderr, "%s:%d: note: this line is not run: %.*s\n", name, sh->line, (int)strcspn(lp + 2, "\n"), lp + 2);
        // a checkpoint's line says the step the lines above it reached in the session: a replay
        // elsewhere is not rebuilding it (a line edited or deleted by hand, a loaded file since
        // rewritten): said once (QA, session 28: the replay went on in silence)
        if (!told_step && sh->eng && !strncmp(lp, "# checkpoint ckpt/", 18)) {
            const char *rb = strstr(lp, ": the state the lines above rebuild"), *at = NULL;
            for (const char *q = lp; rb && (q = strstr(q, " at step ")) && q < rb; q++) at = q;
            long long was;
            // (a replay with no model at all, too: a transcript without its :init line, or one
            // started again after a deletion, replayed to its end in silence: QA, session 41)
            if (at && !sh->eng->live && sscanf(at, " at step %lld", &was) == 1) {
                fprintf(stderr, "%s:%d: note: the session had a model at step %lld here, this replay has none: it does not rebuild the "
                        "session's state (its :init or :load line edited or missing?)\n", name, sh->line, was);
                told_step = 1;
            } else if (at && sh->eng->live && sscanf(at, " at step %lld", &was) == 1 && was != (long long)sh->eng->step) {
                fprintf(stderr, "%s:%d: note: the session was at step %lld here, this replay is at step %lld: it does not rebuild the "
                        "session's state (a line above edited or missing, a file it loads since rewritten?)\n", name, sh->line, was,
                        (long long)sh->eng->step);
                told_step = 1;
            }
        }
        if (!strncmp(lp, FAILED_STEPS, strlen(FAILED_STEPS)) &&
            sscanf(lp + strlen(FAILED_STEPS), " (it took the run from step %lld to %lld,", &expect_from, &expect_at) != 2)
            expect_at = expect_from = -1;
        long long step_before = sh->eng ? (long long)sh->eng->step : -1;
        if (sh_exec_line(sh, line, &e1)) {
            // (the same failure: the line started where the session's command did and stopped
            // where it did; a run that reached here otherwise is the replay's own failure)
            if (expect >= 0 && sh->eng && step_before == from_at && (long long)sh->eng->step == expect && !sh->quit &&
                !(sh->eng->interrupt && *sh->eng->interrupt)) {
                // the failure the session's run met, at the same step: the state is the session's
                fprintf(stderr, "%s:%d: note: failed as the session's command did, the run at step %lld (the comment above says so); the replay "
                        "goes on: %s\n", name, sh->line, expect, e1.msg);
                continue;
            }
            // FILE:LINE: then the message (a nested script's own FILE:LINE: comes with it): one
            // line that says where, however deep. Past the message's room the middle of the chain
            // goes, never its end (the cause)
            char big[2 * sizeof e1.msg + 64];
            snprintf(big, sizeof big, "%s:%d: %s", name, sh->line, e1.msg);
            size_t bl = strlen(big), room = sizeof err->msg - 1;
            if (bl > room) {
                size_t head = room / 4, tail = room - head - 5;
                rc = dm_fail(err, "%.*s ... %s", (int)head, big, big + bl - tail);
            } else {
                rc = dm_fail(err, "%s", big);
            }
            break;
        }
    }
    free(line);
    return rc;
}

int sh_run_file_as_err(Shell *sh, const char *path, const char *name, dm_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return dm_fail(err, "%s: cannot open script: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {  // fopen opens a directory; reading it fails
        fclose(f);
        return dm_fail(err, "%s: cannot run a directory as a script", name);
    }
    for (int i = 0; i < run_n; i++)
        if (run_stack[i].dev == st.st_dev && run_stack[i].ino == st.st_ino) {
            fclose(f);
            return dm_fail(err, "%s is already running (a :run of a script from itself would never end)", name);
        }
    if (run_n == (int)(sizeof run_stack / sizeof run_stack[0])) {
        fclose(f);
        return dm_fail(err, "%s: scripts nested too deeply (at most %d)", name, run_n);
    }
    run_stack[run_n].dev = st.st_dev;
    run_stack[run_n].ino = st.st_ino;
    run_n++;
    const char *src0 = sh->src;
    int line0 = sh->line;
    sh->src = name;
    sh->line = 0;
    int rc = run_stream(sh, f, name, err);
    fclose(f);
    run_n--;
    sh->src = src0;
    sh->line = line0;
    return rc;
}

int sh_run_file_err(Shell *sh, const char *path, dm_err *err) { return sh_run_file_as_err(sh, path, path, err); }

static int print_script_error(const char *name, const dm_err *e) {
    const char *msg = e->msg;
    // "FILE:LINE: error: ..." (SPEC §0): the location sh_run_file_err put first, then "error:"
    size_t pl = strlen(name), loc = 0;
    if (!strncmp(msg, name, pl) && msg[pl] == ':') {
        loc = pl + 1;
        size_t dgt = loc;
        while (isdigit((unsigned char)msg[dgt])) dgt++;
        if (dgt > loc && msg[dgt] == ':') loc = dgt + 1;
        if (msg[loc] == ' ') loc++;
    }
    fprintf(stderr, "%.*serror: %s\n", (int)loc, msg, msg + loc);
    return 1;
}

int sh_run_file_as(Shell *sh, const char *path, const char *name) {
    dm_err err = {0};
    if (!sh_run_file_as_err(sh, path, name, &err)) return 0;
    return print_script_error(name, &err);
}

int sh_run_stdin(Shell *sh) {
    dm_err err = {0};
    sh->src = "<stdin>";
    if (!run_stream(sh, stdin, "<stdin>", &err)) return 0;
    return print_script_error("<stdin>", &err);
}

int sh_run_file(Shell *sh, const char *path) { return sh_run_file_as(sh, path, path); }

// ~/.dmshrc, then ./.dmshrc, at the interactive prompt's start (SPEC §6; both prompts: readline
// and the headless line reader). An error stops that file (as a script would) and names
// FILE:LINE; the session continues.
void sh_run_rc(Shell *sh) {
    char paths[2][1100];
    const char *home = getenv("HOME");
    snprintf(paths[0], sizeof paths[0], "%s/.dmshrc", home ? home : "");
    snprintf(paths[1], sizeof paths[1], ".dmshrc");
    struct stat seen = {0};
    int have_seen = 0;
    // a resumed session (-r: the only live model at the prompt's start): what the files change
    // in it is said, since the run no longer goes on as it stopped (a `:set lr=` meant for new
    // sessions changed a resumed run's lr in silence, and the exit saved it as another state of
    // the same step: QA, session 41)
    Engine *re = sh->eng && sh->eng->live ? sh->eng : NULL;
    Config cfg0;
    if (re) cfg0 = re->cfg;
    const char *ran[2] = {NULL, NULL};
    for (int i = home && home[0] ? 0 : 1; i < 2; i++) {  // (HOME="": not /.dmshrc)
        struct stat st;
        if (stat(paths[i], &st) || !S_ISREG(st.st_mode)) continue;
        if (have_seen && st.st_dev == seen.st_dev && st.st_ino == seen.st_ino) continue;  // cwd is $HOME
        seen = st;
        have_seen = 1;
        ran[i] = paths[i];
        // its lines head the transcript (what they set is part of the run a replay rebuilds)
        if (sh->eng) {
            char line[1200];
            snprintf(line, sizeof line, "# start-up file %s:", paths[i]);
            session_transcript(sh->eng, line);
        }
        sh->depth++;  // a script: Ctrl-C stops the whole file, as for :run
        dm_err err = {0};
        int intr0 = sh->eng && sh->eng->interrupt && *sh->eng->interrupt;
        if (sh_run_file_as_err(sh, paths[i], paths[i], &err)) {
            print_script_error(paths[i], &err);
            // the lines after the failed or interrupted one did not run: said (QA, session 29: a
            // later :set was silently not in effect)
            size_t pl = strlen(paths[i]);
            long at = !strncmp(err.msg, paths[i], pl) && err.msg[pl] == ':' ? strtol(err.msg + pl + 1, NULL, 10) : 0;
            // (up to its last line that holds a command: blank lines and comments run nothing)
            long ln = 0, last_cmd = 0;
            FILE *f = fopen(paths[i], "r");
            char *l = NULL;
            size_t cap = 0;
            while (f && getline(&l, &cap, f) >= 0) {
                ln++;
                const char *q = l + strspn(l, " \t\r\n");
                if (*q && *q != '#') last_cmd = ln;
            }
            free(l);
            if (f) fclose(f);
            int intr = sh->eng && sh->eng->interrupt && *sh->eng->interrupt && !intr0;
            // (a Ctrl-C's too: its own line says the script stops, not which lines were left)
            if (at > 0 && at < last_cmd)
                fprintf(stderr, "%s: lines %ld..%ld not run (%s)\n", paths[i], at + 1, last_cmd,
                        intr ? "Ctrl-C stops a start-up file, as it does a script" : "a start-up file stops at its first error, as a script does");
        }
        sh->depth--;
        if (sh->eng && sh->eng->interrupt) *sh->eng->interrupt = 0;
        sh->quit = 0;  // a :quit in an rc file does not end the session before it starts
    }
    char diff[1024];
    if (re && re->live && config_set_diff(&cfg0, &re->cfg, diff, sizeof diff))
        printf("note: %s%s%s changed the resumed run's settings: %s (it goes on with them; `dmsh --norc -r` resumes as it stopped)\n",
               ran[0] ? ran[0] : "", ran[0] && ran[1] ? " and " : "", ran[1] ? ran[1] : "", diff);
}
