// pty_harness.h — drive dmsh through a pseudo-terminal: spawn it (forkpty) with a clean
// environment, read what the terminal shows with deadlines (a hang fails the test, never blocks
// CI), type keys, wait for text, for the :train panel, for the exit. Shared by test_repl_pty*.c;
// every function is static inline (a test file uses what it needs).
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"

static char dir[256], home[300], dmsh[512], corpus[600];
static pid_t child = -1;
static int mfd = -1;
static char tty[1 << 20];   // everything the terminal showed
static size_t ntty, seen;   // bytes read; where the next expectation starts looking
static int child_status = -1;

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline void kill_child(void) {
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        child = -1;
    }
    if (mfd >= 0) { close(mfd); mfd = -1; }
}

static int spawn_hup_blocked;  // the child starts with SIGHUP blocked (test_hangup_eof_first)
static const char *spawn_stdout;  // the child's stdout goes to this file (test_stdout_not_a_tty)
static const char *spawn_stderr;  // and its stderr (test_sigquit_under_panel)
static unsigned short spawn_rows = 40, spawn_cols = 200;  // the terminal's size
static const char *spawn_resume;  // dmsh -r this session (test_rc_on_resume_said)
static inline void spawn(int norc, int tui) {
    ntty = seen = 0;
    tty[0] = 0;  // nothing of a previous session may match
    child_status = -1;
    struct winsize ws = {.ws_row = spawn_rows, .ws_col = spawn_cols};
    child = forkpty(&mfd, NULL, NULL, &ws);
    assert_true(child >= 0);
    if (child == 0) {
        if (chdir(dir)) _exit(126);
        setenv("HOME", home, 1);
        setenv("TERM", "xterm", 1);
        setenv("INPUTRC", "/dev/null", 1);  // the developer's key bindings must not matter
        if (tui) unsetenv("DMSH_NO_TUI");   // the live :train panel (test_panel)
        else setenv("DMSH_NO_TUI", "1", 1); // plain :train lines
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        setenv("OMP_NUM_THREADS", "1", 1);
        // SIGHUP as a terminal's process gets it, whatever this test inherited (under `nohup`
        // it is ignored, and an ignored SIGHUP is dmsh's cue to stay quiet about a hangup)
        signal(SIGHUP, SIG_DFL);
        if (spawn_hup_blocked) {  // (a blocked signal stays blocked across exec)
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGHUP);
            sigprocmask(SIG_BLOCK, &set, NULL);
        }
        if (spawn_stdout) {
            int fd = open(spawn_stdout, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || dup2(fd, 1) < 0) _exit(125);
            close(fd);
        }
        if (spawn_stderr) {
            int fd = open(spawn_stderr, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || dup2(fd, 2) < 0) _exit(125);
            close(fd);
        }
        if (spawn_resume && norc) execl(dmsh, "dmsh", "--norc", "-r", spawn_resume, (char *)NULL);
        else if (spawn_resume) execl(dmsh, "dmsh", "-r", spawn_resume, (char *)NULL);
        else if (norc) execl(dmsh, "dmsh", "--norc", (char *)NULL);
        else execl(dmsh, "dmsh", (char *)NULL);
        _exit(127);
    }
}

// Read what is available within `ms`; 0 when the terminal closed (the child exited).
static inline int pump(int ms) {
    struct pollfd pf = {.fd = mfd, .events = POLLIN};
    int r = poll(&pf, 1, ms);
    if (r <= 0) return 1;
    ssize_t n = read(mfd, tty + ntty, sizeof tty - 1 - ntty);
    if (n <= 0) return n < 0 && errno == EINTR;
    ntty += n;
    tty[ntty] = 0;
    return 1;
}

static inline void show_tail(void) {
    size_t from = ntty > 3000 ? ntty - 3000 : 0;
    print_error("---- terminal (last %zu bytes) ----\n%s\n---- end ----\n", ntty - from, tty + from);
}

// Wait until `needle` appears after `seen`; move `seen` past it. Fails after `timeout` s.
static inline const char *expect_out(const char *needle, double timeout) {
    double t0 = now_s();
    for (;;) {
        const char *hit = strstr(tty + seen, needle);
        if (hit) {
            seen = hit - tty + strlen(needle);
            return hit;
        }
        if (now_s() - t0 > timeout || !pump(50)) break;
    }
    print_error("timed out waiting for \"%s\"\n", needle);
    show_tail();
    kill_child();
    fail();
    return NULL;
}

static inline void type(const char *s) {
    size_t n = strlen(s);
    assert_int_equal(write(mfd, s, n), (ssize_t)n);
}

// keep reading the terminal for `sec` seconds (what a keystroke set off has time to show)
static inline void settle(double sec) { for (double t1 = now_s(); now_s() - t1 < sec;) pump(50); }

// Wait (60 s at most) for :train's panel, xterm's alternate screen (what newterm+refresh draws
// on), or plain step lines instead: 1 when the panel is up
static const char *const SMCUP = "\x1b[?1049h";
static inline int panel_up(void) {
    for (double t0 = now_s(); !strstr(tty + seen, SMCUP) && !strstr(tty + seen, "\nstep ") && now_s() - t0 < 60;) pump(50);
    return strstr(tty + seen, SMCUP) != NULL;
}

// Ctrl-C at the prompt, and the time to show what it did
static inline void ctrl_c(void) { type("\x03"); settle(0.6); }

// wait for the next prompt, then type a line
static inline void command(const char *line) {
    expect_out("dmsh> ", 20);
    type(line);
    type("\r");
}

static inline int wait_exit(double timeout) {
    double t0 = now_s();
    while (now_s() - t0 < timeout) {
        pump(20);  // keep draining so the child never blocks on a full terminal
        int st;
        if (waitpid(child, &st, WNOHANG) == child) {
            child = -1;
            close(mfd);
            mfd = -1;
            return st;
        }
    }
    show_tail();
    kill_child();
    fail_msg("dmsh did not exit");
    return -1;
}

static inline char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char b[1 << 16];
    size_t n = fread(b, 1, sizeof b - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}


// a tiny model on the corpus, at the prompt
static inline void small_model(int preset) {
    if (preset) command(":preset nano");
    command(":set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 warmup=5");
    char line[800];
    snprintf(line, sizeof line, ":data %s", corpus);
    command(line);
    command(":init");
    expect_out("init seed", 60);
}

static inline int teardown_one(void **s) {
    (void)s;
    kill_child();
    return 0;
}

static inline int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/dmsh_pty_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(home, sizeof home, "%s/home", dir);
    if (mkdir(home, 0700)) return 1;
    char cwd[300];
    if (!getcwd(cwd, sizeof cwd)) return 1;
    const char *bin = getenv("DMSH_PTY_BIN");  // another build's dmsh (the headless one: main)
    if (bin && bin[0] == '/') snprintf(dmsh, sizeof dmsh, "%s", bin);
    else if (bin) snprintf(dmsh, sizeof dmsh, "%s/%s", cwd, bin);
    else snprintf(dmsh, sizeof dmsh, "%s/build/" REAL_NAME "/dmsh", cwd);
    // a small corpus of our own: varied enough that the loss moves, large enough for eval
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    FILE *f = fopen(corpus, "w");
    if (!f) return 1;
    static const char *w[] = {"the", "dormouse", "sleeps", "in", "a", "teapot", "while", "hatter", "pours", "tea",
                              "and", "march", "hare", "laughs", "at", "alice", "who", "asks", "why", "raven"};
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 60000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        fprintf(f, "%s%s", w[x % 20], (x >> 20) % 11 == 0 ? ".\n" : " ");
    }
    fclose(f);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static inline int teardown(void **s) {
    (void)s;
    kill_child();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}
