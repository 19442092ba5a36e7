// panel_text.h — the :train panel's text, apart from ncurses (so a test can hold it): every line
// the run printed while the panel was up, kept whole for the scrollback, and the layout of the
// rows under the status lines.
//
// Why every line: the panel used to keep the last 256 and print those on close, so a long run
// with frequent checkpoints or evals lost its first lines from the terminal without a word (QA,
// session 31). The memory is what --no-tui would have printed; the model's metric rows already
// cost more per step. The step lines :train prints without the panel are kept too (not drawn:
// the panel's numbers replace them), so the scrollback after the panel reads as a --no-tui run.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "panel.h"
#include "shell.h"

#define PANEL_SHOWN 16  // the newest drawable lines (the log area shows at most 6)

typedef struct {
    char *all;              // every line, '\n'-ended, oldest first: printed on close
    size_t len, cap;
    char *shown[PANEL_SHOWN];  // ring of the newest drawable lines
    long long nshown;       // drawable lines so far (the ring holds the last PANEL_SHOWN)
} PanelText;

// Append one line (no '\n' in it). shown = 0: for the scrollback only. 0, or -1 out of memory
// (the line is then lost from the scrollback, and the caller says so).
static inline int panel_text_add(PanelText *t, const char *line, int shown) {
    size_t n = strlen(line);
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1) cap *= 2;
        char *a = realloc(t->all, cap);
        if (!a) return -1;
        t->all = a;
        t->cap = cap;
    }
    memcpy(t->all + t->len, line, n);
    t->all[t->len + n] = '\n';
    t->len += n + 1;
    if (shown) {
        char **slot = &t->shown[t->nshown % PANEL_SHOWN];
        free(*slot);
        *slot = strdup(line);
        t->nshown++;
    }
    return 0;
}

// The i-th newest drawable line (0 = the newest); NULL past what is kept.
static inline const char *panel_text_newest(const PanelText *t, int i) {
    if (i < 0 || i >= PANEL_SHOWN || i >= t->nshown) return NULL;
    return t->shown[(t->nshown - 1 - i) % PANEL_SHOWN];
}

static inline void panel_text_free(PanelText *t) {
    free(t->all);
    for (int i = 0; i < PANEL_SHOWN; i++) free(t->shown[i]);
    memset(t, 0, sizeof *t);
}

// The rows between the status lines and the hint row (avail of them): the loss chart (its
// title row, then *chart_h rows; 0 = no chart) and under it, after a blank row, the newest
// *log_rows log lines. Room goes to the newest log lines first, up to 6, but a chart of 2 rows
// stays when the terminal has 5 rows for it and one log line (a small terminal lost the chart
// as soon as one line came in, and showed the oldest of its lines, not the newest: QA, session 31).
static inline void panel_layout(int avail, long long nshown, int *chart_h, int *log_rows) {
    int want = nshown < 6 ? (int)nshown : 6;
    int logs = 0, h = 0;
    if (avail < 1) {
        logs = 0;
    } else if (!want) {
        h = avail - 1;
    } else if (avail >= 1 + 2 + 1 + want) {  // title, 2 chart rows, blank, every wanted line
        logs = want;
        h = avail - 1 - 1 - logs;
    } else if (avail >= 5) {  // title, 2 chart rows, blank, and what is left for the newest lines
        h = 2;
        logs = avail - 4;
    } else {  // no room for a chart: the newest lines
        logs = want < avail ? want : avail;
    }
    if (h > 12) h = 12;
    if (h < 2) h = 0;
    *chart_h = h;
    *log_rows = logs;
}

// ---- the numbers the panel draws (pure, so test_panel_text holds them: mutation testing, QA
// session 37, found an ETA of 3725 s shown as "1h62m05s", the bar at 50 % saying "0.5%", the
// loss chart upside down and the gnorm field showing the loss, with every test passing) -------

// Seconds left: "1h02m05s", "4m07s", "12s"; "--" when not known (negative, NaN, inf).
static inline void panel_fmt_eta(char *buf, size_t n, double s) {
    if (!(s >= 0) || !isfinite(s)) { snprintf(buf, n, "--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

// The progress bar's percentage (frac: done / total in [0, 1]): " 50.0%".
static inline void panel_fmt_pct(char *buf, size_t n, double frac) { snprintf(buf, n, "%5.1f%%", 100 * frac); }

// The status fields: f[0] the title, then step, loss, bpb, lr, gnorm, tok/s, ETA, RSS (rss MiB;
// on a GPU the device memory held too: the memory that limits a GPU run — an audit, session 40),
// skipped, the arms off, what runs now; "" for a field with nothing to say.
static inline void panel_fields(char f[12][96], const PanelInfo *in, double rss) {
    char bpb[32], eta[32], nb[32];
    if (isnan(in->bpb)) snprintf(bpb, sizeof bpb, "--");
    else sh_num(bpb, in->bpb, 4);
    panel_fmt_eta(eta, sizeof eta, in->eta_s);
    snprintf(f[0], 96, "dmsh :train");
    snprintf(f[1], 96, "step %lld / %lld", in->step, in->end_step);
    snprintf(f[2], 96, "loss %s", sh_num(nb, in->loss_last, 4));
    snprintf(f[3], 96, "bpb %s", bpb);
    snprintf(f[4], 96, "lr %.3e", in->lr);
    snprintf(f[5], 96, "gnorm %s", sh_num(nb, in->gnorm, 3));
    snprintf(f[6], 96, "tok/s %.0f%s", in->tok_s, in->emulated ? " (cuemu: emulated on the CPU)" : "");
    snprintf(f[7], 96, "ETA %s%s", eta, in->eta_more ? in->eta_more : "");
    if (in->device && in->device[0] && strcmp(in->device, "cpu"))
        snprintf(f[8], 96, "RSS %.1f MiB, %.15s %.1f MiB", rss, in->device, in->dev_mib);
    else
        snprintf(f[8], 96, "RSS %.1f MiB", rss);
    snprintf(f[9], 96, "skipped %d", in->skipped);
    // an ablation says so on the screen watched (QA, session 31: only the step lines of
    // --no-tui and the eval lines named the arms that were off)
    snprintf(f[10], 96, "%s%s", in->off && in->off[0] ? "OFF: " : "", in->off ? in->off : "");
    snprintf(f[11], 96, "%s", in->busy ? in->busy : "");
}

// The loss chart: the run's n losses squeezed into cols = min(n, w) columns, each the mean of
// its finite losses (NAN when it has none), into v[cols]; *lo and *hi over the columns (lo > hi:
// no column has a value). Returns cols.
static inline int panel_chart_columns(const double *loss, int n, int w, double *v, double *lo, double *hi) {
    int cols = n < w ? n : w;
    *lo = INFINITY; *hi = -INFINITY;
    for (int c = 0; c < cols; c++) {
        int a = (int)((long long)c * n / cols), b = (int)((long long)(c + 1) * n / cols);
        double s = 0;
        int m = 0;
        for (int i = a; i < b; i++)
            if (isfinite(loss[i])) { s += loss[i]; m++; }
        v[c] = m ? s / m : NAN;
        if (m) { *lo = fmin(*lo, v[c]); *hi = fmax(*hi, v[c]); }
    }
    return cols;
}

// A column's height in eighths of a row, 1 (at least a sliver, at lo) to h * 8 (at hi), over h rows.
static inline int panel_chart_level(double v, double lo, double hi, int h) {
    double span = hi > lo ? hi - lo : 1;
    return 1 + (int)((v - lo) / span * (h * 8 - 1));
}

// The eighths (0..8) of row r (0: the top row) a column of that level fills.
static inline int panel_chart_fill(int level, int r, int h) {
    int fill = level - (h - 1 - r) * 8;
    return fill < 0 ? 0 : fill > 8 ? 8 : fill;
}

// The scale left of row r of h: the top value on the first row, the bottom value on the last.
static inline void panel_chart_scale(char *buf, size_t n, int r, int h, double lo, double hi) {
    if (r == 0) snprintf(buf, n, "%8.4f ", hi);
    else if (r == h - 1) snprintf(buf, n, "%8.4f ", lo);
    else snprintf(buf, n, "%9s", "");
}
