// panel.h — the live ncurses panel of :train (SPEC §6): loss sparkline, BPB so far, tok/s, ETA,
// memory, skipped steps. Independent of the engine: the caller fills a PanelInfo. Without a
// terminal (or with --no-tui, DMSH_NO_TUI=1, a headless build) panel_open returns NULL and the
// caller prints its plain lines as before.
#pragma once
#include <stdio.h>

typedef struct Panel Panel;

typedef struct {
    long long step;             // steps taken so far (the engine's step counter)
    long long start_step;       // where this run began (progress bar)
    long long end_step;         // where it ends
    const double *loss;         // this run's training losses, oldest first (not copied)
    int nloss;
    double loss_last;           // the latest loss
    double bpb;                 // the last eval BPB; NAN when none yet
    double tok_s;
    double eta_s;               // seconds left; < 0 when not known yet
    const char *eta_more;       // what eta_s leaves out (" + 2 evals not yet timed"); NULL: nothing
    int skipped;                // steps skipped by the NaN firewall in this run
    double lr, gnorm;
    int emulated;               // tok_s timed on the emulated device (tests/cuemu), not a GPU
    int force;                  // draw now, even within 0.1 s of the last draw (an eval comes next)
    const char *off;            // the arms off for these steps ("kda engram"); NULL or "" when none
    const char *busy;           // what runs next and holds the screen ("evaluating..."); NULL: nothing
    const char *device;         // where the model is ("cuda:0"); NULL or "cpu": host memory alone
    double dev_mib;             // the device memory the backend holds (MiB), shown beside the RSS
} PanelInfo;

extern int dm_no_tui;           // --no-tui (main.c sets it): never open the panel

Panel *panel_open(void);
// Redraws at most ~10 times a second (and always on the last step), so calling it every step
// costs nothing measurable.
void panel_update(Panel *p, const PanelInfo *info);
// A line for the panel's log area (evals, checkpoints); printed again, in order, on close so
// the scrollback keeps them (all of them: panel_text.h).
void panel_log(Panel *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A line for the scrollback only (the step lines :train prints without the panel), after what
// was printed before it; not drawn.
void panel_keep(Panel *p, const char *line);
// A stream for everything a command prints while the panel is up (point sh->out at it): its
// lines go to the log area, and are printed on close. Owned by the panel; NULL when p is NULL.
FILE *panel_output(Panel *p);
// Restores the terminal (endwin). NULL is fine.
void panel_close(Panel *p);
