// interactive_plain.c — the prompt without readline (headless builds): a plain line reader.
// Errors print and the session goes on. The start-up files run as under readline.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "shell.h"

extern int dm_norc;  // --norc (main.c)

// Wait for input with the signals that end a wait blocked except inside ppoll. A Ctrl-C (or a
// SIGTERM) that came after the prompt was written but before the read began only set its flag,
// and the read then waited for the next key: no new prompt, a kill ignored until a key (QA,
// session 38). Blocked, the flag is checked and the signal stays pending until ppoll takes it.
// stdin is unbuffered (below), so a line is never waiting in stdio's buffer unseen by the poll.
// 1: the wait was interrupted (EINTR), 0: input (or end-of-file, or an error the read will say).
static int interrupted_wait(const Shell *sh) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < 4; i++) sigaddset(&block, sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    int intr = dm_leave_signal || (sh->eng->interrupt && *sh->eng->interrupt);
    if (!intr) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        intr = ppoll(&p, 1, NULL, &old) < 0 && errno == EINTR;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return intr;
}

int repl_interactive(Shell *sh) {
    sh->src = "<tty>";
    sh->interactive = 1;
    if (!dm_norc) sh_run_rc(sh);
    char *line = NULL;
    size_t cap = 0;
    // stdout a pipe or a file at a terminal: the prompt goes to the terminal (as with readline)
    FILE *pout = !isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) ? stderr : stdout;
    setvbuf(stdin, NULL, _IONBF, 0);  // (what the poll sees is all there is: interrupted_wait)
    // DMSH_PROMPT_SIGINT=1 (tests only): one SIGINT raised right after the first prompt is
    // written, before its read: the window a real Ctrl-C can land in
    int raise_once = getenv("DMSH_PROMPT_SIGINT") != NULL;
    for (;;) {
        if (sh->eng->interrupt) *sh->eng->interrupt = 0;  // (a Ctrl-C during the last command was its)
        fputs("dmsh> ", pout);
        fflush(pout);
        if (raise_once) { raise_once = 0; raise(SIGINT); }
        errno = 0;
        if (sh->reading) sh->reading(1);  // (a Ctrl-C or SIGTERM ends the wait: EINTR)
        ssize_t got = interrupted_wait(sh) ? (errno = EINTR, -1) : getline(&line, &cap, stdin);
        int read_errno = errno;
        if (sh->reading) sh->reading(0);
        errno = read_errno;
        if (got < 0) {
            // a Ctrl-C at the prompt (the read was interrupted) drops the line; SIGTERM and
            // end-of-file leave
            if (errno == EINTR && !dm_leave_signal && !feof(stdin)) { clearerr(stdin); fputc('\n', pout); continue; }
            if (errno == EIO) sh->tty_lost = 1;  // the terminal closed (the hangup signal may come after)
            fputc('\n', pout);
            if (feof(stdin) && !dm_leave_signal && !sh->tty_lost && sh_leave_save(sh)) { clearerr(stdin); continue; }
            break;
        }
        sh->line++;
        dm_err err = {0};
        if (sh->eng->interrupt) *sh->eng->interrupt = 0;  // a Ctrl-C at the prompt must not stop this command
        if (sh_exec_line(sh, line, &err)) fprintf(stderr, "error: %s\n", err.msg);
        if (sh->quit && !dm_leave_signal && sh_leave_save(sh)) { sh->quit = 0; continue; }
        if (sh->quit || dm_leave_signal) break;
    }
    free(line);
    return 0;
}
