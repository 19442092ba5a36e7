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
#include <stdlib.h>
#include <string.h>

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
