// main.c — dmsh: interactive prompt, `-b FILE.dm` batch, `-e 'cmds'`.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "shell.h"

static volatile sig_atomic_t g_interrupt = 0;
static void on_sigint(int sig) { (void)sig; g_interrupt = 1; }

static void usage(void) {
    fprintf(stderr,
            "usage: dmsh [--norc] [-b FILE.dm] [-e 'cmds; cmds'] [-r runs/NAME]\n"
            "  (no arguments: interactive prompt; a non-terminal stdin runs like a script)\n");
}

int repl_interactive(Shell *sh);  // readline.c (or the plain line reader when built headless)

int main(int argc, char **argv) {
    Engine eng;
    engine_init(&eng);
    eng.interrupt = &g_interrupt;
    Shell sh = {0};
    sh.eng = &eng;
    sh.out = stdout;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    const char *batch = NULL, *expr = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc) batch = argv[++i];
        else if (!strcmp(argv[i], "-e") && i + 1 < argc) expr = argv[++i];
        else if (!strcmp(argv[i], "--norc")) {}
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(); return 0; }
        else { fprintf(stderr, "dmsh: unknown argument '%s'\n", argv[i]); usage(); return 2; }
    }
    int rc = 0;
    if (expr) {
        sh.src = "-e";
        sh.line = 1;
        dm_err err = {0};
        if (sh_exec_line(&sh, expr, &err)) { fprintf(stderr, "-e: error: %s\n", err.msg); rc = 1; }
    }
    if (!rc && batch) rc = sh_run_file(&sh, batch);
    if (!expr && !batch) {
        if (isatty(0)) rc = repl_interactive(&sh);
        else {
            sh.src = "<stdin>";
            char *line = NULL;
            size_t cap = 0;
            while (!sh.quit && getline(&line, &cap, stdin) >= 0) {
                sh.line++;
                dm_err err = {0};
                if (sh_exec_line(&sh, line, &err)) { fprintf(stderr, "<stdin>:%d: error: %s\n", sh.line, err.msg); rc = 1; break; }
            }
            free(line);
        }
    }
    engine_free(&eng);
    return rc;
}
