// panel.c — the live :train panel (panel.h). One screen, redrawn from a PanelInfo; the
// terminal is restored by panel_close (endwin) on every way out of :train, Ctrl-C included
// (Ctrl-C only sets the interrupt flag: the run ends at the next step and closes the panel).
// Headless builds (no ncurses headers) compile the stub at the bottom: panel_open is NULL.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "panel.h"
#include "shell.h"
#include "panel_text.h"

int dm_no_tui;

#ifdef DM_HAVE_NCURSES
#include <langinfo.h>
#include <locale.h>
#include <sys/ioctl.h>
#include <time.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>
#ifdef DM_NCURSESW
#include <ncursesw/curses.h>
#else
#include <ncurses.h>
#endif

struct Panel {
    SCREEN *scr;
    double last_draw;           // monotonic seconds of the last redraw
    int dirty;                  // a log line arrived since
    int utf8;                   // block characters for the chart
    char old_ctype[64];
    PanelText text;             // every line of the run (panel_text.h), printed on close
    long long lost;             // lines panel_text_add could not keep (out of memory): said on close
    FILE *out;                  // panel_output(): what commands print while the panel is up
    char *outbuf;
    size_t outlen, outdone;     // memstream size; bytes already turned into log lines
    int err_fd, err_saved;      // stderr while the panel is up: a memory file (-1: not taken)
    off_t err_done;             // its bytes already turned into log lines
    int out_in_err;             // out writes into that file too (one stream: the order kept)
    struct termios tio;         // the terminal's modes before the panel (a fatal signal puts them back)
    int tio_ok;
};

// stderr under the panel: a note written there (a transcript line a full disk refused, a
// checkpoint's note) went onto the alternate screen and was gone when it closed (review, session
// 31). While the panel is up, file descriptor 2 is a memory file (memfd: a full disk cannot
// refuse it; a file-size limit still can) and panel_output() writes into the same file, so what a
// command prints and what goes to stderr keep their order; its lines join the log area and the
// scrollback. It is put back on close; an exit() meanwhile, or a fatal signal, writes the run's
// lines and the rest of the file to the terminal first, and puts the terminal's modes back.
// SIGQUIT (Ctrl-\, which cbreak() leaves on) is one: it left the terminal on the alternate
// screen, its cursor hidden and echo off (QA, session 33); it still ends the process, unsaved.
static Panel *err_panel;
static const int fatal_sigs[] = {SIGABRT, SIGSEGV, SIGFPE, SIGILL, SIGQUIT};
#define N_FATAL (int)(sizeof fatal_sigs / sizeof fatal_sigs[0])
static struct sigaction fatal_old[N_FATAL];

static void write_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k <= 0) return;
        b += k;
        n -= (size_t)k;
    }
}
// the file from byte `from` to its end, to the terminal's stderr (async-signal-safe)
static void err_copy_out(Panel *p, off_t from) {
    char buf[4096];
    ssize_t k;
    while ((k = pread(p->err_fd, buf, sizeof buf, from)) > 0) {
        write_all(p->err_saved, buf, (size_t)k);
        from += k;
    }
}
static void err_restore(Panel *p) {
    if (!p || p->err_fd < 0) return;
    fflush(stderr);
    dup2(p->err_saved, 2);
    close(p->err_saved);
    close(p->err_fd);
    p->err_fd = -1;
}
// The panel is down: its exit and fatal-signal handlers stand down (guard_take)
static void guard_release(Panel *p) {
    if (err_panel != p) return;
    err_panel = NULL;
    for (int i = 0; i < N_FATAL; i++) sigaction(fatal_sigs[i], &fatal_old[i], NULL);
}
static void err_on_fatal(int sig) {
    Panel *p = err_panel;
    if (p) {
        static const char leave[] = "\x1b[?1049l\x1b[?25h\r\n";  // (off the alternate screen, cursor back)
        write_all(p->err_fd >= 0 ? p->err_saved : 1, leave, sizeof leave - 1);  // (the terminal)
        if (p->tio_ok) tcsetattr(0, TCSANOW, &p->tio);  // (async-signal-safe)
        if (p->err_fd >= 0) err_copy_out(p, 0);
    }
    raise(sig);  // (SA_RESETHAND: the default action now)
}
static void err_at_exit(void) {
    Panel *p = err_panel;
    if (!p) return;
    if (p->out) fflush(p->out);
    endwin();
    fflush(stdout);
    // the run's lines so far, then what the file holds past them
    if (p->text.len) write_all(1, p->text.all, p->text.len);
    if (p->err_fd >= 0) err_copy_out(p, p->err_done);
    err_restore(p);
    guard_release(p);
}
static void err_take(Panel *p) {
    p->err_fd = -1;
    if (!isatty(2)) return;  // (stderr to a file or a pipe: it has them already)
    int fd = memfd_create("dmsh-panel-stderr", MFD_CLOEXEC);
    if (fd < 0) {
        FILE *t = tmpfile();
        fd = t ? fcntl(fileno(t), F_DUPFD_CLOEXEC, 0) : -1;
        if (t) fclose(t);
    }
    int saved = fd >= 0 ? fcntl(2, F_DUPFD_CLOEXEC, 0) : -1;
    fflush(stderr);
    if (fd < 0 || saved < 0 || dup2(fd, 2) != 2) {  // (dup2 leaves fd 2 without close-on-exec)
        if (fd >= 0) close(fd);
        if (saved >= 0) close(saved);
        return;
    }
    p->err_fd = fd;
    p->err_saved = saved;
}
// While the panel is up, an exit() or a fatal signal puts the terminal back first (whether or not
// stderr was taken: with `2> file` a Ctrl-\ left echo off and the alternate screen: review,
// session 33)
static void guard_take(Panel *p) {
    static int registered;
    err_panel = p;
    if (!registered) registered = atexit(err_at_exit) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = err_on_fatal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_FATAL; i++) sigaction(fatal_sigs[i], &sa, &fatal_old[i]);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

Panel *panel_open(void) {
    const char *term = getenv("TERM");
    const char *off = getenv("DMSH_NO_TUI");
    if (dm_no_tui || (off && off[0] && strcmp(off, "0")) || !isatty(1) || !isatty(0) || !term || !term[0] ||
        !strcmp(term, "dumb"))
        return NULL;
    Panel *p = calloc(1, sizeof *p);
    // LC_CTYPE only (never LC_NUMERIC: printed numbers keep their '.'), to know whether the
    // terminal takes UTF-8 block characters; restored on close.
    const char *ct = setlocale(LC_CTYPE, NULL);
    snprintf(p->old_ctype, sizeof p->old_ctype, "%s", ct ? ct : "C");
    setlocale(LC_CTYPE, "");
#ifdef DM_NCURSESW
    p->utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
#endif
    fflush(stdout);
    p->tio_ok = tcgetattr(0, &p->tio) == 0;
    // newterm, not initscr: initscr exits the process when the terminal is unusable
    p->scr = newterm(NULL, stdout, stdin);
    char *cup = p->scr ? tigetstr("cup") : NULL;
    if (!p->scr || !cup || cup == (char *)-1) {  // no cursor addressing: plain lines instead
        if (p->scr) { endwin(); delscreen(p->scr); }
        setlocale(LC_CTYPE, p->old_ctype);
        free(p);
        return NULL;
    }
    err_take(p);
    guard_take(p);
    cbreak();  // not raw(): Ctrl-C must still raise SIGINT
    noecho();
    curs_set(0);
    leaveok(stdscr, TRUE);
    p->dirty = 1;
    return p;
}

void panel_log(Panel *p, const char *fmt, ...) {
    if (!p) return;
    char *buf = NULL;  // (whole: a line cut at 512 bytes was not what --no-tui prints)
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&buf, fmt, ap);
    va_end(ap);
    if (n < 0 || !buf) { p->lost++; return; }
    buf[strcspn(buf, "\n")] = 0;
    if (panel_text_add(&p->text, buf, 1)) p->lost++;
    free(buf);
    p->dirty = 1;
}

FILE *panel_output(Panel *p) {
    if (!p) return NULL;
    if (!p->out && p->err_fd >= 0) {  // (stderr's file: one stream, in the order written)
        int d = dup(p->err_fd);
        p->out = d >= 0 ? fdopen(d, "w") : NULL;
        if (p->out) {
            setvbuf(p->out, NULL, _IOLBF, 0);
            p->out_in_err = 1;
        } else if (d >= 0) {
            close(d);
        }
    }
    if (!p->out) p->out = open_memstream(&p->outbuf, &p->outlen);
    return p->out;
}

// complete lines printed to panel_output() since the last call become log lines
static void drain_output(Panel *p, int all);
static void err_drain(Panel *p, int all);

void panel_keep(Panel *p, const char *line) {
    if (!p) return;
    drain_output(p, 0);  // what was printed before it stays before it
    err_drain(p, 0);
    char *buf = strndup(line, strcspn(line, "\n"));
    if (!buf || panel_text_add(&p->text, buf, 0)) p->lost++;
    free(buf);
}

static void drain_output(Panel *p, int all) {
    if (!p->out) return;
    fflush(p->out);
    if (p->out_in_err) return;  // (err_drain reads it)
    while (p->outdone < p->outlen) {
        char *s = p->outbuf + p->outdone, *nl = memchr(s, '\n', p->outlen - p->outdone);
        if (!nl && !all) break;
        size_t n = nl ? (size_t)(nl - s) : p->outlen - p->outdone;
        panel_log(p, "%.*s", (int)n, s);
        p->outdone += n + (nl != NULL);
    }
}

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return NAN;
    long size, res;
    int ok = fscanf(f, "%ld %ld", &size, &res) == 2;
    fclose(f);
    return ok ? res * (double)sysconf(_SC_PAGESIZE) / (1 << 20) : NAN;
}

// Loss over the whole run, squeezed into w columns (mean per column) and h rows of eighths.
static void draw_chart(Panel *p, const PanelInfo *in, int y0, int h, int w) {
    if (w < 4 || h < 1 || in->nloss < 1 || !in->loss) return;
    int n = in->nloss, cols = n < w ? n : w;
    double *v = malloc(cols * sizeof *v);
    double lo, hi;
    panel_chart_columns(in->loss, n, w, v, &lo, &hi);  // (the numbers: panel_text.h)
    if (!(hi >= lo)) { free(v); return; }
    static const char *blocks[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = " ..::||##";
    for (int r = 0; r < h; r++) {
        char scale[32];
        panel_chart_scale(scale, sizeof scale, r, h, lo, hi);  // the scale: top and bottom values
        mvprintw(y0 + r, 0, "%s", scale);
        for (int c = 0; c < cols; c++) {
            int fill = isfinite(v[c]) ? panel_chart_fill(panel_chart_level(v[c], lo, hi, h), r, h) : 0;
            if (p->utf8) addstr(blocks[fill]);
            else addch(ascii[fill]);
        }
    }
    free(v);
}

static void draw(Panel *p, const PanelInfo *in) {
    struct winsize ws;  // follow a resized terminal (no getch loop to deliver KEY_RESIZE)
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && (ws.ws_row != LINES || ws.ws_col != COLS))
        resizeterm(ws.ws_row, ws.ws_col);
    int rows = LINES, cols = COLS;
    erase();
    long long done = in->step - in->start_step, total = in->end_step - in->start_step;
    double frac = total > 0 ? (double)done / total : 1;
    frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
    // the three status lines as fields, each whole on a row: a narrow terminal takes them on
    // more rows (a line wider than the terminal wrapped and the next one overwrote it, cutting
    // "step 2712" to "step 27": QA, session 29); a field wider than the terminal alone is cut
    // with a '>' at its end
    char f[12][96];
    panel_fields(f, in, rss_mib());
    // drawn in this order (the arms off and what runs now next to the title), on these lines
    static const int order[12] = {0, 10, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const int line_of[12] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2};
    int y = 0, x = 0, line = 0;
    for (int o = 0; o < 12 && y < rows; o++) {
        int i = order[o];
        int w = (int)strlen(f[i]);
        if (!w) continue;
        if (line_of[o] != line || (x > 0 && x + 3 + w > cols)) { y++; x = 0; line = line_of[o]; }
        if (y >= rows) break;
        if (x > 0) x += 3;
        if (w > cols - x) {  // alone and still too wide
            mvaddnstr(y, x, f[i], cols - x - 1 > 0 ? cols - x - 1 : 0);
            if (cols - x - 1 >= 0) mvaddch(y, cols - 1, '>');
        } else {
            mvaddstr(y, x, f[i]);
        }
        x += w;
        // the progress bar after the step, when the row has room for it
        if (i == 1 && cols - x - 11 > 4) {
            int barw = cols - x - 11;
            move(y, x + 2);
            addch('[');
            int fillw = (int)(frac * barw);
            for (int b = 0; b < barw; b++) addch(b < fillw ? '#' : '.');
            char pct[16];
            panel_fmt_pct(pct, sizeof pct, frac);
            printw("] %s", pct);
            x = cols;
        }
    }
    int top = y + 2;  // (a blank row under the status lines)
    // the rest: chart, then the newest log lines (panel_layout), then the hint
    int h, nlogs;
    panel_layout(rows - 1 - top, p->text.nshown, &h, &nlogs);
    if (h) {
        mvprintw(top, 0, "loss, %d steps", in->nloss);
        draw_chart(p, in, top + 1, h, cols - 10);
    }
    y = h ? top + 1 + h + 1 : top;
    for (int i = nlogs - 1; i >= 0 && y < rows - 1; i--, y++) mvaddnstr(y, 0, panel_text_newest(&p->text, i), cols - 1);
    if (rows > 3 && top - 2 < rows - 1)  // (never over a status row: a tiny terminal keeps the numbers)
        mvaddnstr(rows - 1, 0, "Ctrl-C: stop at the next step (state intact)", cols - 1);
    refresh();
}

// complete lines written to stderr since the last call become log lines (all: the rest too)
static void err_drain(Panel *p, int all) {
    if (p->err_fd < 0) return;
    fflush(stderr);
    struct stat st;
    if (fstat(p->err_fd, &st) != 0 || st.st_size <= p->err_done) return;
    size_t n = (size_t)(st.st_size - p->err_done);
    char *b = malloc(n + 1);
    if (!b) return;
    ssize_t k = pread(p->err_fd, b, n, p->err_done);
    size_t used = 0;
    for (size_t i = 0; k > 0 && i < (size_t)k; i++)
        if (b[i] == '\n' || (all && i + 1 == (size_t)k)) {
            panel_log(p, "%.*s", (int)(i - used + (b[i] != '\n')), b + used);
            used = i + 1;
        }
    p->err_done += (off_t)used;
    free(b);
}

void panel_update(Panel *p, const PanelInfo *info) {
    if (!p || !info) return;
    drain_output(p, 0);
    err_drain(p, 0);
    double t = now_s();
    if (!p->dirty && !info->force && t - p->last_draw < 0.1 && info->step < info->end_step) return;
    p->last_draw = t;
    p->dirty = 0;
    draw(p, info);
}

void panel_close(Panel *p) {
    if (!p) return;
    drain_output(p, 1);
    err_drain(p, 1);
    err_restore(p);
    if (p->out) fclose(p->out);
    free(p->outbuf);
    endwin();
    guard_release(p);
    delscreen(p->scr);
    setlocale(LC_CTYPE, p->old_ctype);
    if (p->text.len) fwrite(p->text.all, 1, p->text.len, stdout);
    if (p->lost) printf("note: %lld lines of this run could not be kept for this scrollback (out of memory)\n", p->lost);
    panel_text_free(&p->text);
    fflush(stdout);
    free(p);
}

#else  // headless: no ncurses headers; :train prints plain lines

Panel *panel_open(void) { return NULL; }
void panel_update(Panel *p, const PanelInfo *info) { (void)p; (void)info; }
void panel_log(Panel *p, const char *fmt, ...) { (void)p; (void)fmt; }
void panel_keep(Panel *p, const char *line) { (void)p; (void)line; }
FILE *panel_output(Panel *p) { (void)p; return NULL; }
void panel_close(Panel *p) { (void)p; }

#endif
