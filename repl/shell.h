// shell.h — the command interpreter (SPEC §6 "Command language"): one command table (name,
// handler, completer, help), the line parser, prefix resolution, batch / -e / interactive
// drivers. Handlers are thin: parse words, call the engine, print.
#pragma once
#include <math.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include "../engine/err.h"

struct Engine;

#define SH_MAX_WORDS 64

typedef struct {
    int argc;
    char *argv[SH_MAX_WORDS];   // argv[0] is the command word as typed (":eval-d")
    const char *text;           // the command as typed: text[0..textlen) of the line (transcript)
    size_t textlen;
    unsigned char lit[SH_MAX_WORDS];  // 1: the word began with a quote ("n=5"): never a key=value
} Words;
// the '=' of a key=value word, NULL for a positional one (no '=', or a word that began quoted)
static inline const char *sh_eq(const Words *w, int i) { return w->lit[i] ? NULL : strchr(w->argv[i], '='); }

typedef struct Shell {
    struct Engine *eng;
    FILE *out;                  // where handlers print (stdout; tests capture it)
    const char *src;            // "FILE.dm", "-e", "<stdin>" — for error locations
    int line;                   // current line in src
    int quit;                   // set by :quit
    int depth;                  // :run nesting depth
    int interactive;
    int tty_lost;                // the prompt's read failed with EIO: the terminal went away (main.c)
    int leave_refused;           // sh_leave_save kept the prompt once (a failed save on the way out)
    long long cut_in_eval;       // a :train an interrupt stopped inside its eval: that step (else -1; parse.c)
    volatile sig_atomic_t *leave_signal;  // main.c's dm_leave_signal (NULL in the tests that link
                                          // the parser alone): SIGPIPE's stop says why
    void (*reading)(int on);    // main.c: 1 around a read of input lines (the prompt's, a piped
                                // script's), where a signal must interrupt it; 0 after (NULL: none)
} Shell;

typedef int (*CmdFn)(Shell *sh, Words *w, dm_err *err);
// Completer: the candidates for the word being completed (argument `argi` of the command),
// given its prefix; returns a malloc'd NULL-terminated array of malloc'd strings (or NULL).
typedef char **(*CmdCompleter)(Shell *sh, int argi, const char *prefix);

typedef struct {
    const char *name;           // ":step"
    CmdFn fn;
    CmdCompleter complete;
    const char *usage;          // ":step [N]"
    const char *help;           // one paragraph
} Command;

extern const Command dm_commands[];   // in table order, terminated by a {NULL} entry
extern const int dm_n_commands;

// Resolve a typed command word: an exact name wins, then a unique prefix, then the one-letter
// shortcuts (:s :t :e :p :h :q). NULL with err filled ("ambiguous ':e': :eval, :eval-depths,
// ...", "unknown command ':foo' (did you mean :bar? see :help)") otherwise.
const Command *sh_resolve(const char *word, dm_err *err);
// Split one line into commands on ';' (outside quotes), strip '#' comments (outside quotes),
// split words on blanks, keep "quoted strings" (with \" and \\ escapes) as one word without
// the quotes. Returns the number of commands; cmds[i] are views into `buf` (a copy of line).
// err on an unterminated quote.
int sh_split(const char *line, char *buf, size_t nbuf, Words *cmds, int maxcmds, dm_err *err);
// The buffer sh_split needs for LINE (its length, plus room for ~ expanded to $HOME).
size_t sh_split_size(const char *line);
// Find key=value in words (argv[1..]); returns the value or NULL.
const char *sh_kv(const Words *w, const char *key);
// Execute one line (may hold several commands). Returns 0 or 1 (err filled, message only,
// without location; the driver adds "FILE:LINE: error: ").
int sh_exec_line(Shell *sh, const char *line, dm_err *err);
// "note: ..." when the eval window holds no sequence (eval_bytes < seq): sh_exec_line says it
// after a top-level command that leaves it so, dmsh -r after a resume
void sh_note_eval_window(Shell *sh);
// Run a script; its first failure ends it, said as "FILE:LINE: error: msg" (on stderr by
// sh_run_file, in err by sh_run_file_err: a :run passes it up, so a nested failure is one line).
// Returns 0 on success.
int sh_run_file(Shell *sh, const char *path);
// ~/.dmshrc then ./.dmshrc (skipped for the same file twice), at an interactive prompt's start
void sh_run_rc(Shell *sh);
// The prompt's :quit or Ctrl-D in a session: its save on the way out, made here (cmd_state.c).
// 1 when it failed the first time: said, and the prompt stays (the state is in no file); 0 to
// leave (saved, nothing to save, or a second :quit: main.c's exit save says the failure again).
int sh_leave_save(Shell *sh);
// Set (to the signal) by SIGTERM, SIGHUP, SIGPIPE: the interactive prompt leaves as after :quit (main.c).
extern volatile sig_atomic_t dm_leave_signal;
// A stop request's grace for a write blocked on stdout, in seconds (main.c: SIGALRM ends it)
#define DM_STOP_GRACE_S 2
// A loss, bpb or norm for a line: fixed-point while it reads as one (below 1e6), else with an
// exponent (after a blow-up %.4f printed 30-digit numbers: QA, session 34). buf: 32 bytes.
static inline const char *sh_num(char *buf, double x, int prec) {
    snprintf(buf, 32, !isfinite(x) || fabs(x) < 1e6 ? "%.*f" : "%.*e", prec, x);
    return buf;
}
// the note that the held-out split lies in bytes the live model trained on, when it does (cmd_config.c)
void sh_note_heldout_trained(Shell *sh);
// Argument parsing shared by the handlers: one-line errors naming the value and its range.
int sh_parse_int(const char *s, long long lo, long long hi, const char *what, long long *v, dm_err *err);
int sh_parse_real(const char *s, double lo, double hi, const char *what, double *v, dm_err *err);
// every word after the command is a known key=value or one of max_positional positional words
int sh_check_keys(const Words *w, int max_positional, const char *const *keys, dm_err *err);
// the idx-th word after the command that is not key=value, or NULL
const char *sh_positional(const Words *w, int idx);
int sh_run_file_err(Shell *sh, const char *path, dm_err *err);
// The same, reading `path` but naming it `name` in every message (a --replay child runs a temp
// copy of a piped script and says the name the user gave).
int sh_run_file_as(Shell *sh, const char *path, const char *name);
int sh_run_stdin(Shell *sh);  // standard input as a script ("<stdin>:LINE: error: ..."): 0, or 1 said
int sh_run_file_as_err(Shell *sh, const char *path, const char *name, dm_err *err);
// Nearest commands to a mistyped word (edit distance), for the unknown-command message.
void sh_suggest(const char *word, char *buf, size_t n);
