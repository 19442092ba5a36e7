// transcript_cut.c — what -r reads back from a session's transcript (the command a killed
// process ended in, settings it made after its last checkpoint, its last device), and the line
// that rebuilds a :step or :train cut short (an interrupt, or a killed process resumed with -r
// from a checkpoint the command wrote): its steps stay in the run, so the transcript must take
// them for a replay to rebuild it (it held the cut line as a comment only, and a replay trained
// a different run).
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "lost_settings.h"
#include "session.h"

char *session_steps_line(const char *name, int nw, const char *const *words, long long k) {
    if (k < 1 || (strcmp(name, ":step") && strcmp(name, ":train"))) return NULL;
    size_t n = 64;
    for (int a = 0; a < nw; a++) {
        size_t l = strlen(words[a]);
        if (!l || strspn(words[a], "abcdefghijklmnopqrstuvwxyz_=0123456789") != l) return NULL;
        n += l + 1;
    }
    char *t = malloc(n);
    if (!t) return NULL;
    if (!strcmp(name, ":step")) {
        snprintf(t, n, ":step %lld", k);
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

void session_resume_transcript(Engine *e, const char *dir, int fell_back) {
    // A checkpoint holds no device (it loads anywhere): -r starts on the CPU. When the session's
    // transcript last moved to another device, say so rather than continue there silently.
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
    if (tf) {
        char tl[4096];
        while (fgets(tl, sizeof tl, tf)) {
            const char *q = tl + strspn(tl, " \t");
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
    } else if (cut[0])
        engine_note(e, "the process ended during `%s` (its transcript's last command): resumed from its last checkpoint, step %lld; a replay of the transcript does not rebuild what it did",
                    cut, (long long)e->step);
    lost_settings_note(e, &lost_set);
    if (last_dev[0] && strcmp(last_dev, "cpu") && strcmp(last_dev, e->device))
        engine_note(e, "this session last ran on %s (its transcript's last :device); resumed on %s: `:device %s` to go back",
                    last_dev, e->device[0] ? e->device : "cpu", last_dev);
}
