// interactive_plain.c — the prompt without readline (headless builds): a plain line reader.
// Errors print and the session goes on.
#include <stdio.h>
#include <stdlib.h>
#include "shell.h"

int repl_interactive(Shell *sh) {
    sh->src = "<tty>";
    sh->interactive = 1;
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        fputs("dmsh> ", stdout);
        fflush(stdout);
        if (getline(&line, &cap, stdin) < 0) { fputc('\n', stdout); break; }
        sh->line++;
        dm_err err = {0};
        if (sh_exec_line(sh, line, &err)) fprintf(stderr, "error: %s\n", err.msg);
        if (sh->quit) break;
    }
    free(line);
    return 0;
}
