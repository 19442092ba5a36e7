// interactive_readline.c — the prompt with GNU readline (SPEC §6 "Interactive niceties"):
// history in ~/.dmsh_history, Tab completion (complete.c), ~/.dmshrc then ./.dmshrc at start,
// Ctrl-C clears the line at the prompt and stops a running command at its next step boundary
// (never the process), Ctrl-D quits, an error prints and the session goes on.
// Built only when readline's headers exist; headless builds use interactive_plain.c.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <readline/history.h>
#include <readline/readline.h>
#include "../engine/engine.h"
#include "../sessions/session.h"
#include "../engine/probe.h"
#include "complete.h"
#include "shell.h"

#define HISTORY_MAX 2000

// --norc: main.c sets it. Weak so this file links on its own; main.c's definition (needed by
// headless builds too) wins when present.
int dm_norc __attribute__((weak));

// SIGINT means two things: at the prompt, "drop this line"; while a command runs, "stop at the
// next step boundary". The handler only sets flags (async-signal-safe); readline work happens
// in on_signal_event, from readline's own loop: as rl_signal_event_hook after an interrupted
// read, and as rl_event_hook (every 0.1 s while idle) for a Ctrl-C that landed while readline
// was busy redrawing, which interrupts no read.
static volatile sig_atomic_t g_at_prompt, g_prompt_sigint;
static volatile sig_atomic_t *g_run_interrupt;

static void on_sigint(int sig) {
    (void)sig;
    if (g_at_prompt) g_prompt_sigint = 1;
    else if (g_run_interrupt) {
        *g_run_interrupt = 1;
        alarm(DM_STOP_GRACE_S);  // (a write blocked on a stuck stdout reader ends then: main.c)
    }
}

// The bell style the user's inputrc chose, put back after the silent abort below
static char g_bell[16];

static int on_signal_event(void) {
    if (dm_leave_signal) rl_done = 1;  // SIGTERM at the prompt: readline returns, the loop leaves
    if (g_bell[0]) { rl_variable_bind("bell-style", g_bell); g_bell[0] = 0; }
    if (g_prompt_sigint) {
        g_prompt_sigint = 0;
        // (readline's bell would ring for what follows: silenced, put back below or, after the
        // jump, at the next call of this hook)
        const char *b = rl_variable_value("bell-style");
        snprintf(g_bell, sizeof g_bell, "%s", b ? b : "audible");
        rl_variable_bind("bell-style", "none");
        // the line Up put aside is dropped too (Down brought the abandoned line back: review,
        // session 33); then Up starts again from the newest entry
        if (where_history() < history_length) rl_maybe_unsave_line();
        rl_replace_line("", 1);
        using_history();
        rl_crlf();
        rl_on_new_line();
        // Leave whatever readline was in the middle of, as Ctrl-G does: a history search (Ctrl-R:
        // clearing the line left the search running, and the next Enter ran its match, a line
        // the screen did not show: QA, session 33, an :init that threw 500 steps away), an ESC or
        // Ctrl-X prefix waiting for its key, a numeric argument. rl_abort jumps to readline's
        // top level (this hook runs inside readline's read, below it).
        if (RL_ISSTATE(RL_STATE_ISEARCH | RL_STATE_NSEARCH | RL_STATE_SEARCH | RL_STATE_NUMERICARG |
                       RL_STATE_MULTIKEY | RL_STATE_METANEXT | RL_STATE_VIMOTION | RL_STATE_CHARSEARCH) ||
            rl_explicit_arg) {
            // (a search and a numeric argument saved the prompt to show theirs)
            if (RL_ISSTATE(RL_STATE_ISEARCH | RL_STATE_NSEARCH | RL_STATE_NUMERICARG)) rl_restore_prompt();
            RL_UNSETSTATE(RL_STATE_ISEARCH | RL_STATE_NSEARCH | RL_STATE_SEARCH | RL_STATE_NUMERICARG);
            rl_abort(0, 0);  // (does not return)
        }
        rl_variable_bind("bell-style", g_bell);
        g_bell[0] = 0;
        rl_redisplay();
    }
    return 0;
}

// --- completion: complete.c decides, this only feeds readline ---------------------------------
// :probe names as :probe itself knows them (the last forward's activations, the parameters)
static char **probe_provider(void *eng) { return probe_names((const Engine *)eng); }

static char **g_cands;
static int g_ci;

static char *next_cand(const char *text, int state) {
    (void)text;
    if (state == 0) g_ci = 0;
    return g_cands && g_cands[g_ci] ? strdup(g_cands[g_ci++]) : NULL;
}

// Inserted paths are quoted the way parse.c reads them back (complete.c dm_quote_path); the
// "key=" of a key=value word stays outside the quotes (a word that begins with a quote is never
// key=value). g_keep: the length of that prefix, set per completion.
static size_t g_keep;

static char *quote_path(char *text, int match_type, char *qcp) {
    (void)match_type;
    char q = qcp && *qcp ? *qcp : '"';
    size_t keep = g_keep <= strlen(text) ? g_keep : 0;
    // a quoted word is taken as written (parse.c expands ~/ only in an unquoted one): "~/a b"
    // went in and could not be opened (QA, session 33), so the home directory goes in instead
    const char *p = text + keep, *home = getenv("HOME");
    char *expanded = NULL;
    if (p[0] == '~' && (p[1] == '/' || !p[1]) && home && home[0] && (expanded = malloc(strlen(home) + strlen(p))))
        sprintf(expanded, "%s%s", home, p + 1), p = expanded;
    char *quoted = dm_quote_path(p, q);
    free(expanded);
    if (!quoted) return NULL;
    char *r = malloc(keep + strlen(quoted) + 1);
    if (!r) { free(quoted); return NULL; }
    memcpy(r, text, keep);
    strcpy(r + keep, quoted);
    free(quoted);
    if (qcp) *qcp = q;  // readline closes it after a single match that is not a directory
    return r;
}

static char **attempt_completion(const char *text, int start, int end) {
    (void)start;
    rl_attempted_completion_over = 1;  // no fallback to readline's own filename completion
    char *before = strndup(rl_line_buffer, end);
    // after an opening '"' the word is as typed there: \" and \\ stand for '"' and '\'
    char *word = dm_unquote_word(text, (char)rl_completion_quote_character);
    g_cands = dm_complete(dm_commands, before, word ? word : text);
    // key=value typed without a quote: "eval=" stays in front of the quote
    const char *eq = rl_completion_quote_character ? NULL : strchr(text, '=');
    g_keep = eq && eq - text == (ptrdiff_t)strspn(text, "abcdefghijklmnopqrstuvwxyz_") ? (size_t)(eq - text + 1) : 0;
    free(word);
    free(before);
    if (!g_cands) return NULL;
    // a path with a blank, a quote, a backslash, ';' or '#': let readline quote it (filename mode)
    for (int i = 0; g_cands[i]; i++)
        if (g_cands[i][strcspn(g_cands[i], " \t\"'\\;#")]) rl_filename_completion_desired = 1;
    // "lr=" and "dir/" are unfinished: the next keystroke continues them, so no space
    if (!g_cands[1]) {
        size_t n = strlen(g_cands[0]);
        // (and an open quote stays open: readline closed it after "dir/", and the next Tab
        // completed nothing inside the directory: QA, session 29)
        if (n && (g_cands[0][n - 1] == '=' || g_cands[0][n - 1] == '/')) {
            rl_completion_append_character = '\0';
            rl_completion_suppress_quote = 1;
        }
    }
    char **m = rl_completion_matches(text, next_cand);
    dm_complete_free(g_cands);
    g_cands = NULL;
    return m;
}

int repl_interactive(Shell *sh) {
    sh->src = "<tty>";
    sh->interactive = 1;
    g_run_interrupt = sh->eng->interrupt;
    dm_complete_eng = sh->eng;
    dm_probe_provider = probe_provider;
    // SA_RESTART: a Ctrl-C during a command must not fail its writes or reads with EINTR.
    // Readline swaps in its own handler while it reads (and calls this one from it).
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);

    // stdout a pipe or a file (`dmsh | tee run.log`, `dmsh > out.txt`) at a terminal: the prompt,
    // the echo and readline's redraws go to the terminal on stderr, and the log holds what the
    // commands print (QA, session 29: the log held prompts, completion lists and escape codes)
    if (!isatty(STDOUT_FILENO) && isatty(STDERR_FILENO)) rl_outstream = stderr;
    static char breaks[] = " \t;";  // '=' is not a break: "eval=/us" completes as one word
    rl_readline_name = "dmsh";
    rl_attempted_completion_function = attempt_completion;
    rl_completer_word_break_characters = breaks;
    rl_signal_event_hook = on_signal_event;
    rl_event_hook = on_signal_event;
    // No "Display all N possibilities? (y or n)" query and no --More-- pager: a Ctrl-C inside
    // either made readline display a match list it had already freed (a use-after-free that
    // printed heap bytes). The list is printed whole instead.
    rl_completion_query_items = 0;
    rl_variable_bind("page-completions", "off");
    // A completed path with a blank, a quote, a backslash, ';' or '#' is inserted quoted (the
    // command language reads "a b.txt" as one word; quote_path escapes '"' and '\\' in it),
    // and ~/ is expanded in the inserted text (the commands take the path as written: there is
    // no shell to expand it)
    static char quotes[] = "\"'";
    static char needs_quote[] = " \t\"'\\;#";
    rl_completer_quote_characters = quotes;
    rl_filename_quote_characters = needs_quote;
    rl_filename_quoting_function = quote_path;
    rl_variable_bind("expand-tilde", "on");
    // the candidates carry their own '/' (dm_complete); in filename mode (a name with a blank
    // among them) readline's listing added another ("bin//")
    rl_variable_bind("mark-directories", "off");

    char hist[1100] = "";
    const char *home = getenv("HOME");
    if (home && home[0]) {
        snprintf(hist, sizeof hist, "%s/.dmsh_history", home);
        using_history();
        stifle_history(HISTORY_MAX);
        read_history(hist);
        // append_history() does not create the file; each line is appended as it is typed,
        // so a killed session keeps its history
        int fd = open(hist, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) close(fd);
        else hist[0] = 0;
    }

    if (!dm_norc) sh_run_rc(sh);

    for (;;) {
        g_prompt_sigint = 0;
        g_at_prompt = 1;
        errno = 0;
        alarm(0);  // (a stop request's grace is over: the command returned)
        char *line = dm_leave_signal ? NULL : readline("dmsh> ");
        g_at_prompt = 0;
        if (!line && errno == EIO) sh->tty_lost = 1;  // the terminal closed (the hangup signal may come after)
        if (!line || dm_leave_signal) {  // Ctrl-D, SIGTERM
            free(line);
            fputc('\n', rl_outstream ? rl_outstream : stdout);
            if (!dm_leave_signal && !sh->tty_lost && sh_leave_save(sh)) continue;  // (the save on the way out failed: stay)
            break;
        }
        sh->line++;
        if (!line[strspn(line, " \t")]) { free(line); continue; }
        // each line of a multi-line paste is an entry of its own (one entry with newlines in it
        // came back from the file as several, one of them empty: QA, session 29)
        char *hl = strdup(line), *save = NULL;
        int added = 0;
        for (char *q = hl ? strtok_r(hl, "\r\n", &save) : NULL; q; q = strtok_r(NULL, "\r\n", &save)) {
            if (!q[strspn(q, " \t")]) continue;
            HIST_ENTRY *prev = history_length ? history_get(history_base + history_length - 1) : NULL;
            if (prev && !strcmp(prev->line, q)) continue;
            add_history(q);
            added++;
        }
        free(hl);
        if (added && hist[0]) append_history(added, hist);
        if (g_run_interrupt) *g_run_interrupt = 0;  // a Ctrl-C that raced the prompt must not stop this command
        dm_err err = {0};
        if (sh_exec_line(sh, line, &err)) fprintf(stderr, "error: %s\n", err.msg);
        if (g_run_interrupt) *g_run_interrupt = 0;  // nor one that a command without step boundaries ignored
        fflush(stdout);
        free(line);
        if (sh->quit && !dm_leave_signal && sh_leave_save(sh)) { sh->quit = 0; continue; }
        if (sh->quit || dm_leave_signal) break;  // (SIGTERM stopped the command at a step boundary)
    }
    if (hist[0]) history_truncate_file(hist, HISTORY_MAX);
    return 0;
}
