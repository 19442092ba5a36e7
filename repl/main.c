// main.c — dmsh: interactive prompt, `-b FILE.dm` batch, `-e 'cmds'`.
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "../sessions/session.h"
#include "panel.h"
#include "replay.h"
#include "shell.h"

static volatile sig_atomic_t g_signal = 0;
int dm_norc;  // --norc: interactive_readline.c skips ~/.dmshrc and ./.dmshrc
volatile sig_atomic_t dm_leave_signal;  // SIGTERM, SIGHUP, SIGPIPE: the prompt leaves as after :quit (shell.h)
// A stop request's grace for a write blocked on stdout: the handlers restart system calls (below),
// so a write to a reader that stopped reading (a `| less` left at its prompt, a stalled ssh pipe)
// would hold the run past the signal until a scheduler's SIGKILL lost it (review, session 34).
// SIGALRM, which does not restart, ends such a write DM_STOP_GRACE_S seconds after the request: the
// line is lost (said at exit), the run stops at its step boundary and is saved. A reader that
// reads within the grace loses nothing. Cancelled when input is read (the stop is over by then).
// Re-armed each second while the stop is pending: a write that had sent part of its bytes when
// interrupted returns that count, and stdio writes the rest, blocking again.
static volatile sig_atomic_t g_grace_over;  // the grace ended while a command ran (said at exit)
static volatile sig_atomic_t g_interrupt;
static void on_alarm(int sig) {
    (void)sig;
    g_grace_over = 1;
    if (g_interrupt) alarm(1);
}
static void on_sigint(int sig) {
    g_interrupt = 1;
    // the exit status names the signal that ends the process: a Ctrl-C after a SIGTERM or
    // SIGHUP does not turn a terminated run (143, 129) into an interrupted one (1)
    if (g_signal != SIGTERM && g_signal != SIGHUP && g_signal != SIGPIPE) g_signal = sig;
    // (a SIGHUP leaves too: a kill -HUP with the terminal still there stopped the command, stayed
    // at the prompt, and a :quit much later exited 129 with a signal's save: QA, session 34)
    if (sig == SIGTERM || sig == SIGPIPE || sig == SIGHUP) dm_leave_signal = sig;
    alarm(DM_STOP_GRACE_S);  // (async-signal-safe)
}

int cmd_device(Shell *sh, Words *w, dm_err *err);  // (repl/cmd_inspect.c)
// -r goes back to the device the session's transcript last chose (sessions/transcript_cut.c sets
// resume_dev): the resumed model moves there as `:device NAME` would move it, and trains on
// where the run stopped. Where that device cannot be used (no GPU here, no room on it) the run
// resumes on the CPU and says why, with the command that goes back.
static void resume_on_device(Shell *sh) {
    Engine *e = sh->eng;
    char dev[sizeof e->resume_dev], was[sizeof e->device];
    snprintf(dev, sizeof dev, "%s", e->resume_dev);
    snprintf(was, sizeof was, "%s", e->device[0] ? e->device : "cpu");
    e->resume_dev[0] = 0;
    printf("this session last ran on %s (its transcript's last :device): the resumed model moves there\n", dev);
    fflush(stdout);
    Words w = {0};
    w.argc = 2;
    w.argv[0] = ":device";
    w.argv[1] = dev;
    dm_err err = {0};
    if (cmd_device(sh, &w, &err))
        printf("note: this session last ran on %s, which this dmsh cannot use (%s): resumed on %s; `:device %s` to go back\n",
               dev, err.msg, was, dev);
}

// to stdout when asked for (--help: `dmsh --help | less`), to stderr after a bad argument
static void usage_to(FILE *f) {
    fprintf(f,
            "usage: dmsh [--norc] [--no-tui] [-b FILE.dm] [-e 'cmds; cmds']... [-r runs/NAME]\n"
            "       dmsh --replay FILE.dm   (the script in two processes, compared bit for bit)\n"
            "       dmsh --commands-md   (the command table as Markdown: docs/commands.md)\n"
            "  (no arguments: interactive prompt; a non-terminal stdin runs like a script)\n"
            "  exit status: 0 done, 1 a command failed or an interrupt (Ctrl-C) stopped a script (a -b\n"
            "  script or -r session that cannot be opened too; a script's trained state is saved, in its\n"
            "  session or else as ./dmsh-step-N.ckpt), 2 bad arguments (an unknown option, a\n"
            "  missing value), 128+N ended by signal N at a step boundary with the state saved\n"
            "  (in the session; without one, as ./dmsh-step-N.ckpt)\n"
            "  (129 SIGHUP: terminal closed, 141 SIGPIPE: the reader of stdout went away, 143 SIGTERM)\n"
            "  --norc: skip ~/.dmshrc and ./.dmshrc (read only by the interactive prompt, never by -b, -e or\n"
            "  a piped stdin); --no-tui (or DMSH_NO_TUI=1): step lines instead of :train's live panel\n"
            "  environment: DMSH_FONT=FILE.ttf the charts' font (else a system DejaVu Sans, else a built-in\n"
            "  one); OMP_NUM_THREADS the CPU threads\n");
}
static void usage(void) { usage_to(stderr); }

int repl_interactive(Shell *sh);  // readline.c (or the plain line reader when built headless)

// a signal the parent set to SIG_IGN (nohup, a background job) stays ignored
static int catch_unless_ignored(int sig, const struct sigaction *sa) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN) return 0;
    sigaction(sig, sa, NULL);
    return 1;
}

// The handlers restart interrupted system calls (SA_RESTART): a signal that came while stdout
// was blocked on a full pipe (a paused `| less`) failed that write with EINTR, and stdio dropped
// the line and called the rest of the output lost (QA, session 34); the step loop polls the
// flag, nothing needs the EINTR. Except a read of input lines (the plain prompt, a piped
// script): there the signal must end the wait, so around it they do not restart (Shell.reading).
// Only the flag changes: the handler is whichever is in place (the readline prompt's own SIGINT
// handler stays through a :run's reads).
static const int caught_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
static int caught[4];  // (which of them are ours: one left ignored stays so)
static void set_restart(int on) {
    for (int i = 0; i < 4; i++) {
        struct sigaction sa;
        if (!caught[i] || sigaction(caught_sigs[i], NULL, &sa)) continue;
        if (on) sa.sa_flags |= SA_RESTART;
        else sa.sa_flags &= ~SA_RESTART;
        sigaction(caught_sigs[i], &sa, NULL);
    }
}
static void reading_input(int on) {
    if (on) alarm(0);  // (a stop request's grace is over: nothing is blocked on stdout now)
    set_restart(!on);
}

// The terminal closed under the prompt: a pty's reader is woken with EIO when the other side
// closes, and the hangup (SIGHUP) follows; a reader that runs first, or a SIGHUP that is
// blocked, left dmsh with 0, as after Ctrl-D. The prompt's read failing with EIO, or a hung-up
// terminal (tcgetattr answers EIO), is the same exit as the SIGHUP (128 + 1), whichever arrived
// first. (Not when SIGHUP is ignored: `nohup` asked for the plain exit.)
static void hangup_if_terminal_gone(int hup_caught, int tty_lost) {
    struct termios t;
    if (hup_caught && g_signal != SIGTERM && g_signal != SIGHUP && g_signal != SIGPIPE && (tty_lost || (tcgetattr(0, &t) != 0 && errno == EIO)))
        g_signal = SIGHUP;
}

// The length of the first line of an -e text: up to a line break outside quotes and comments
// (the line splitter's rules: "..." with \" and \\, '...', '#' to the end of the line).
static size_t expr_line_len(const char *s) {
    size_t i = 0;
    char q = 0;
    int comment = 0;
    for (; s[i]; i++) {
        char c = s[i];
        if (comment) { if (c == '\n') break; continue; }
        if (q) {
            if (q == '"' && c == '\\' && (s[i + 1] == '"' || s[i + 1] == '\\')) i++;
            else if (c == q) q = 0;
            continue;
        }
        if (c == '\n') break;
        if (c == '#') comment = 1;
        else if (c == '"' || c == '\'') q = c;
    }
    return i;
}
static int expr_line_count(const char *s) {
    int n = 0;
    for (size_t at = 0, l = strlen(s); at < l; n++) {
        size_t len = expr_line_len(s + at);
        at += len + (s[at + len] == '\n');
    }
    return n ? n : 1;
}

// the command-line options dmsh knows (main's loop below)
static int is_option(const char *s) {
    static const char *opts[] = {"-b", "-e", "-r", "--replay", "--norc", "--no-tui", "-h", "--help", "--commands-md"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        if (!strcmp(s, opts[i])) return 1;
    return 0;
}

// OpenMP's idle threads spin before they sleep (libgomp: some 300 000 rounds at each barrier and
// between parallel regions). On a machine whose cores are busy (another job, a second dmsh, a
// build) a spinning thread takes the time slice its working twin needs: nano's CPU step measured
// 1135 ms instead of 56 ms (2 cores, load 2.8; docs/perf.md session 17). libgomp reads
// OMP_WAIT_POLICY when it loads, before main, so dmsh sets "passive" and runs itself again once;
// a policy (or GOMP_SPINCOUNT) the user set is kept. `:show device` says which is in force. The
// price, on an idle host: 20-30 % at 2 threads (docs/decisions.md "Threads": the opt-out).
static void omp_wait_passive(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    // under valgrind /proc/self/exe is valgrind's own tool: run on as we are
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // the exec failed: run on as we are, and say nothing false
}

int main(int argc, char **argv) {
    omp_wait_passive(argv);
    // after the exec above the kernel names the process "exe" (the path's last part): pgrep,
    // killall and top would not find a dmsh; give it back its own name
    if (argc > 0 && argv[0] && argv[0][0]) {
        const char *b = strrchr(argv[0], '/');
        prctl(PR_SET_NAME, (unsigned long)(b ? b + 1 : argv[0]), 0, 0, 0);
    }
    Engine eng;
    engine_init(&eng);
    eng.interrupt = &g_interrupt;
    Shell sh = {0};
    sh.eng = &eng;
    sh.out = stdout;
    sh.leave_signal = &dm_leave_signal;
    sh.reading = reading_input;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;  // (set_restart)
    sigaction(SIGINT, &sa, NULL);  // (also in a background job: `kill -INT` stops a script gracefully)
    caught[0] = 1;
    struct sigaction al;
    memset(&al, 0, sizeof al);
    al.sa_handler = on_alarm;  // (no SA_RESTART: it is there to end a blocked write)
    sigaction(SIGALRM, &al, NULL);
    const char *batch = NULL, *resume = NULL;
    // every -e and the -b script run in the order given (as sed's -e and -f: `dmsh -b setup.dm -e
    // ':train 100'` trains after the setup; every -e ran first, whatever the order); the first
    // failing one stops them
    const char **exprs = calloc((size_t)argc, sizeof *exprs);
    int nexpr = 0, batch_at = 0;  // the -b script runs after exprs[0..batch_at)
    for (int i = 1; i < argc; i++) {
        // a value that is itself one of our options (`dmsh -b -e ':step 1'`) is a missing value,
        // not a script named "-e"
        if ((!strcmp(argv[i], "-b") || !strcmp(argv[i], "-e") || !strcmp(argv[i], "-r") || !strcmp(argv[i], "--replay")) &&
            (i + 1 == argc || is_option(argv[i + 1]))) {
            fprintf(stderr, "dmsh: %s needs a value (%s)\n", argv[i],
                    argv[i][1] == 'b' || argv[i][1] == '-' ? "a script FILE.dm" : argv[i][1] == 'e' ? "'cmds; cmds'" : "a session directory runs/NAME");
            usage();
            free(exprs);
            return 2;
        }
        if ((!strcmp(argv[i], "-b") && batch) || (!strcmp(argv[i], "-r") && resume)) {
            fprintf(stderr, "dmsh: %s given twice (one %s per run)\n", argv[i], argv[i][1] == 'b' ? "script" : "session");
            free(exprs);
            return 2;
        }
        if (!strcmp(argv[i], "-b")) batch = argv[++i], batch_at = nexpr;
        else if (!strcmp(argv[i], "-e")) exprs[nexpr++] = argv[++i];
        else if (!strcmp(argv[i], "-r")) resume = argv[++i];
        else if (!strcmp(argv[i], "--replay")) {
            // --norc and --no-tui may come along (the replay's children run with neither an rc
            // file nor a panel anyway); anything else would be silently ignored: refused
            int others = 0;
            for (int j = 1; j < argc; j++)
                if (j != i && j != i + 1 && strcmp(argv[j], "--norc") && strcmp(argv[j], "--no-tui")) others++;
            if (i + 1 >= argc || others) {
                fprintf(stderr, "dmsh: --replay takes one script (and at most --norc, --no-tui): dmsh --replay FILE.dm\n");
                free(exprs);
                return 2;
            }
            free(exprs);
            engine_free(&eng);
            return replay_main(argv[i + 1]);
        }
        else if (!strcmp(argv[i], "--norc")) dm_norc = 1;
        else if (!strcmp(argv[i], "--no-tui")) dm_no_tui = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage_to(stdout); free(exprs); return 0; }
        else if (!strcmp(argv[i], "--commands-md")) {
            if (argc != 2) { fprintf(stderr, "dmsh: --commands-md takes nothing else (it prints the command table and exits)\n"); free(exprs); return 2; }
            // docs/commands.md is generated from the command table, so it cannot drift
            printf("# dmsh commands\n\nGenerated by `dmsh --commands-md` from the command table (repl/commands.c); do not edit.\n"
                   "A unique prefix of a name works (`:eval-d`); shortcuts: `:s` step, `:t` train, `:e` eval, `:p` plot, `:h` help, `:q` quit.\n\n"
                   "| command | what it does |\n|---|---|\n");
            for (int c = 0; dm_commands[c].name; c++) printf("| `%s` | %s |\n", dm_commands[c].usage, dm_commands[c].help);
            free(exprs);
            return 0;
        }
        else { fprintf(stderr, "dmsh: unknown argument '%s'\n", argv[i]); usage(); free(exprs); return 2; }
    }
    // A scheduler (or a shutdown) stops a job with SIGTERM: the running command stops at the
    // next step boundary like Ctrl-C, a script ends there and the prompt leaves as after :quit,
    // the session is saved on the way out, and the exit status says so (128 + 15). (It once
    // kept its default at the prompt: a kill during an interactive :train lost the run.)
    sigaction(SIGTERM, &sa, NULL);
    caught[1] = 1;
    // A closed terminal (SIGHUP) leaves like Ctrl-D: the running command stops at a step
    // boundary, the prompt reads end-of-file, and the session is saved on the way out. (Not
    // under `nohup`, which ignores it on purpose: the job must outlive the terminal.)
    int hup_caught = caught[2] = catch_unless_ignored(SIGHUP, &sa);
    // The reader of stdout went away (`| head`, a tee or an ssh pipe that closed): by default
    // the next write killed dmsh on the spot, the session unsaved and the transcript missing the
    // command. Now it is a hangup of the output: the running command stops at a step boundary,
    // the session is saved, exit 141. (Left ignored when the parent ignores it: the run goes on
    // and the lost output is said on stderr at the end.)
    caught[3] = catch_unless_ignored(SIGPIPE, &sa);
    // A file-size limit (ulimit -f) is a failed write like a full disk (EFBIG: the save or the
    // metrics row that hit it says so, and nothing saved before is touched), not a kill.
    signal(SIGXFSZ, SIG_IGN);
    int rc = 0;
    if (resume) {
        dm_err err = {0};
        if (session_resume(&eng, resume, &err)) { fprintf(stderr, "dmsh: -r: error: %s\n", err.msg); engine_free(&eng); free(exprs); return 1; }
        // which checkpoint: LATEST's, or the one a fallback chose (said on stderr, and here)
        const char *ck = strrchr(eng.synced_path, '/') ? strrchr(eng.synced_path, '/') + 1 : eng.synced_path;
        printf("resumed %s at step %lld from ckpt/%s (%d metric rows)%s%s\n", resume, (long long)eng.step, ck, eng.nrows,
               eng.has_data ? ", data " : "", eng.has_data ? eng.data_path : "");
        const char *note = engine_notice(&eng);  // the checkpoint's corpus did not open, ...
        if (note) printf("note: %s\n", note);
        // an ablation left on (an :arm X off for an eval, then the exit save) is the state -r
        // goes on from: said where one comes back to a session (QA, session 35)
        char off[64] = "";
        arms_mask_names(arms_off_mask(&eng.model.arms), off, sizeof off);
        if (off[0]) printf("note: arms off in the resumed state: %s (steps go on without them; :arm NAME on switches one back)\n", off);
        if (eng.resume_dev[0]) resume_on_device(&sh);
        sh_note_eval_window(&sh);
    }
    for (int k = 0; k <= nexpr && !rc && !sh.quit; k++) {
        if (batch && k == batch_at) {
            // a --replay child of a piped script runs a temp copy; its messages name the script
            const char *shown = getenv("DMSH_DIGEST") ? getenv("DMSH_REPLAY_NAME") : NULL;
            rc = sh_run_file_as(&sh, batch, shown && shown[0] ? shown : batch);
            if (rc || sh.quit) break;
        }
        if (k == nexpr) break;
        // a multi-line -e runs line by line, so an error names its line (-e:3:, -e #2:3:)
        const char *x = exprs[k];
        size_t xl = strlen(x);
        char *ln = malloc(xl + 1);
        int nlines = expr_line_count(x), li = 0;
        for (size_t at = 0; at < xl && !rc && !sh.quit;) {
            size_t len = expr_line_len(x + at);
            memcpy(ln, x + at, len);
            ln[len] = 0;
            at += len + (x[at + len] == '\n');
            li++;
            sh.src = "-e";
            sh.line = li;
            dm_err err = {0};
            if (sh_exec_line(&sh, ln, &err)) {
                char where[48];
                if (nexpr > 1 && nlines > 1) snprintf(where, sizeof where, "-e #%d:%d", k + 1, li);
                else if (nexpr > 1) snprintf(where, sizeof where, "-e #%d", k + 1);
                else if (nlines > 1) snprintf(where, sizeof where, "-e:%d", li);
                else snprintf(where, sizeof where, "-e");
                fprintf(stderr, "%s: error: %s\n", where, err.msg);
                rc = 1;
            }
        }
        free(ln);
    }
    if (!nexpr && !batch) {
        if (isatty(0)) {
            rc = repl_interactive(&sh);
            hangup_if_terminal_gone(hup_caught, sh.tty_lost);
        }
        else rc = sh_run_stdin(&sh);  // a piped script: as -b runs a file
    }
    // leaving a session keeps its state: the next `dmsh -r` continues from here
    dm_err aerr = {0};
    char saved[1300];
    if (session_autosave(&eng, saved, sizeof saved, &aerr)) {
        fprintf(stderr, "dmsh: autosave failed: %s\n", aerr.msg);
        rc = rc ? rc : 1;  // the final state is in no file: not a success
    } else if (saved[0]) {
        fprintf(stderr, "dmsh: saved %s\n", saved);
    }
    // Ended by a signal (a scheduler's SIGTERM, a closed terminal, stdout's reader gone) with no
    // session: the state goes where session-less checkpoints go (./dmsh-step-N.ckpt), since the
    // user did not choose to leave it unsaved (it was lost, and the script's last line said
    // "state intact"). A :quit, a script's end or the prompt's Ctrl-D without a session saves
    // nothing, as before. A script (-b, -e, a pipe) without a session that stopped at an error or a Ctrl-C is the
    // same: a typo in a line after a long :train, found only when that line is reached, threw the
    // trained steps away without a word, the last line saying "state intact" (QA, session 41).
    // (A state with no step trained is not kept: the lines that built it rebuild it.)
    int sig_stop = g_signal == SIGTERM || g_signal == SIGHUP || g_signal == SIGPIPE;
    int script_stop = rc && !sig_stop && !sh.quit && (nexpr || batch || !isatty(0)) && eng.step > 0;
    if ((sig_stop || script_stop) && !eng.session_dir[0] && eng.live && engine_unsaved(&eng) && !getenv("DMSH_DIGEST")) {
        char path[1300], note[1400];
        dm_err serr = {0};
        if (session_save_default(&eng, path, sizeof path, note, sizeof note, &serr)) {
            fprintf(stderr, "dmsh: the state was not saved (no session, and %s)\n", serr.msg);
            rc = rc ? rc : 1;
        } else {
            // (a file that held this state already was not written: "saved" would be untrue)
            int held = strstr(note, " already held this exact state") != NULL;
            fprintf(stderr, "dmsh: %s %s (no session: the state the %s stopped; :load it to go on)%s%s\n", held ? "kept in" : "saved", path,
                    sig_stop ? "signal" : eng.interrupt && *eng.interrupt ? "Ctrl-C" : "script's error", held ? ", which already held it" : note[0] ? "; " : "",
                    held ? "" : note);
        }
    }
    if (g_signal == SIGPIPE)  // (the Ctrl-C that killed a `| tee` ended dmsh too: say why)
        fprintf(stderr, "dmsh: left because the reader of standard output went away (SIGPIPE): a `| tee` or `| less` ended "
                        "(Ctrl-C at the terminal reaches them too; `tee -i` ignores it)\n");
    // a job's log said only "interrupted at step N": the cause was in the exit status alone,
    // which nobody sees for a background job (QA, session 34)
    else if (g_signal == SIGTERM)
        fprintf(stderr, "dmsh: left because it was sent SIGTERM (a scheduler's or a shutdown's stop, or a kill)\n");
    else if (g_signal == SIGHUP)
        fprintf(stderr, "dmsh: left because it was sent SIGHUP (its terminal closed, or a kill -HUP; nohup, tmux or screen keep a "
                        "run going without a terminal)\n");
    const char *digest = getenv("DMSH_DIGEST");  // a --replay child: its state for the comparison
    if (digest && digest[0] && replay_write_digest(&eng, digest)) {
        fprintf(stderr, "dmsh: cannot write the replay digest %s\n", digest);
        rc = rc ? rc : 1;
    }
    if (eng.tsv_failed) {
        fprintf(stderr, "dmsh: %lld metric rows could not be written to %s/metrics.tsv %s\n", (long long)eng.tsv_failed,
                eng.session_dir, aerr.msg[0] ? "(and the exit save failed: the rows after the last checkpoint are in no file)"
                                             : "(the checkpoints hold them; dmsh -r rewrites it)");
        rc = rc ? rc : 1;
    }
    // output that never reached its reader (stdout a closed pipe while SIGPIPE is ignored, a
    // full disk under `> log`): said where it can still be seen
    int out_bad = fflush(stdout) != 0;
    const char *why = out_bad ? strerror(errno)
                      : g_grace_over ? "its reader stopped reading, and a write was abandoned 2 s after the stop request"
                                     : "an earlier write failed";
    if ((out_bad || ferror(stdout)) && g_signal != SIGPIPE) {
        fprintf(stderr, "dmsh: writing to standard output failed (%s): some output was lost\n", why);
        rc = rc ? rc : 1;
    }
    alarm(0);
    if (g_signal == SIGTERM || g_signal == SIGHUP || g_signal == SIGPIPE) rc = 128 + g_signal;
    engine_free(&eng);
    free(exprs);
    return rc;
}
