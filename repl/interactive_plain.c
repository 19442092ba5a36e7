// interactive_plain.c — the prompt without readline (headless builds): a plain line reader.
// Errors print and the session goes on. The start-up files run as under readline.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "shell.h"

extern int dm_norc;  // --norc (main.c)

int repl_interactive(Shell *sh) {
    sh->src = "<tty>";
    sh->interactive = 1;
    if (!dm_norc) sh_run_rc(sh);
    char *line = NULL;
    size_t cap = 0;
    // stdout a pipe or a file at a terminal: the prompt goes to the terminal (as with readline)
    FILE *pout = !isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) ? stderr : stdout;
    for (;;) {
        fputs("dmsh> ", pout);
        fflush(pout);
        errno = 0;
        if (sh->reading) sh->reading(1);  // (a Ctrl-C or SIGTERM ends the wait: EINTR)
        ssize_t got = dm_leave_signal ? -1 : getline(&line, &cap, stdin);
        int read_errno = errno;
        if (sh->reading) sh->reading(0);
        errno = read_errno;
        if (got < 0) {
            // a Ctrl-C at the prompt (the read was interrupted) drops the line; SIGTERM and
            // end-of-file leave
            if (errno == EINTR && !dm_leave_signal && !feof(stdin)) { clearerr(stdin); fputc('\n', pout); continue; }
            if (errno == EIO) sh->tty_lost = 1;  // the terminal closed (the hangup signal may come after)
            fputc('\n', pout);
            break;
        }
        sh->line++;
        dm_err err = {0};
        if (sh->eng->interrupt) *sh->eng->interrupt = 0;  // a Ctrl-C at the prompt must not stop this command
        if (sh_exec_line(sh, line, &err)) fprintf(stderr, "error: %s\n", err.msg);
        if (sh->quit || dm_leave_signal) break;
    }
    free(line);
    return 0;
}
