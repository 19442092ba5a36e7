// cmd_plot.c — `:plot METRIC[,METRIC...] [out=FILE.png] [x=step|tokens|time] [log=on|off]
// [size=WxH]`: turns the engine's metric rows into series for viz/plot.h (which knows nothing
// of the model). Several metrics become panels stacked on one PNG, sharing the x quantity.
// Without out= the PNG goes to SESSION/plots/ (./plots/ without a session) and the path is
// printed.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "../engine/probe.h"
#include "../viz/axes.h"
#include "../viz/plot.h"
#include "../viz/png.h"
#include "../sessions/session.h"
#include "shell.h"

int cmd_plot(Shell *sh, Words *w, dm_err *err);
char **complete_plot(Shell *sh, int argi, const char *prefix);

static const char *const metrics[] = {"bpb", "loss", "lr", "gnorm", "tok_s", "depths", "experts", NULL};
#define METRIC_LIST "bpb, loss, lr, gnorm, tok_s, depths, experts"
#define MAX_PANELS 8
#define MAX_SERIES 64

enum { X_STEP, X_TOKENS, X_TIME };

// One panel under construction: the chart plus the memory it points into.
typedef struct {
    VizChart chart;
    VizSeries series[MAX_SERIES];
    VizRef refs[4];
    char labels[MAX_SERIES][64], ref_labels[4][48];
    char title[160], subtitle[200], xlabel[64], ylabel[64];
    double *buf;              // every x and y array of the series, one allocation
} Panel;

typedef struct {
    const Engine *e;
    int xq;                   // X_STEP / X_TOKENS / X_TIME
    int log_set, log_on;      // log= given, and its value
    int *train;               // indices of the train rows on the current timeline
    int ntrain;
    double *train_time;       // seconds at the end of each kept train row
    int nemulated;            // kept train rows timed on the emulated device (their ms are the CPU's)
    int nsets, set_evals;     // bpb/depths: eval sets in the rows, evals of the one drawn
    int set_open;             // ... which is the open corpus's (else the latest eval's)
} Ctx;

// ---- the rows as a timeline ------------------------------------------------------------------

// A resume, :check determinism or :bench rewinds the step counter and logs the same steps
// again; the later rows are the history that stands, so a row drops every earlier row at or
// after its step (one curve per metric, never a zigzag back in x).
static void build_timeline(Ctx *cx) {
    const Engine *e = cx->e;
    cx->train = malloc(sizeof(int) * (e->nrows + 1));
    cx->train_time = malloc(sizeof(double) * (e->nrows + 1));
    cx->ntrain = 0;
    for (int i = 0; i < e->nrows; i++) {
        if (e->rows[i].kind != 0) continue;
        while (cx->ntrain && e->rows[cx->train[cx->ntrain - 1]].step >= e->rows[i].step) cx->ntrain--;
        cx->train[cx->ntrain++] = i;
    }
    double t = 0;
    cx->nemulated = 0;
    for (int k = 0; k < cx->ntrain; k++) {
        cx->nemulated += e->rows[cx->train[k]].emulated;
        double ms = e->rows[cx->train[k]].ms;
        t += isfinite(ms) && ms > 0 ? ms / 1e3 : 0;
        cx->train_time[k] = t;
    }
}

// seconds of training before step `step` began (the time of an eval taken after `step` steps)
static double time_at_step(const Ctx *cx, int64_t step) {
    int lo = 0, hi = cx->ntrain;   // first kept train row with row.step >= step
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cx->e->rows[cx->train[mid]].step < step) lo = mid + 1; else hi = mid;
    }
    return lo ? cx->train_time[lo - 1] : 0;
}

static double x_of(const Ctx *cx, const MetricRow *r, int train_k) {
    if (cx->xq == X_TOKENS) return (double)r->tokens;
    if (cx->xq == X_TIME) return train_k >= 0 ? cx->train_time[train_k] : time_at_step(cx, r->step);
    return (double)r->step;
}

// (a time axis built from emulated steps says so: they are the CPU's times, not a GPU's)
static const char *x_label(const Ctx *cx) {
    if (cx->xq == X_TIME && cx->nemulated) return "training time (s; emulated steps: cuemu on the CPU)";
    return cx->xq == X_TOKENS ? "tokens (bytes) seen" : cx->xq == X_TIME ? "training time (s)" : "step";
}

static void fmt_bytes(int64_t b, char *buf, size_t n) {
    if (b >= 10 * 1024 * 1024) snprintf(buf, n, b % (1024 * 1024) ? "%.1f MiB" : "%.0f MiB", b / (1024.0 * 1024.0));
    else if (b >= 10 * 1024) snprintf(buf, n, b % 1024 ? "%.1f KiB" : "%.0f KiB", b / 1024.0);
    else snprintf(buf, n, "%lld B", (long long)b);
}

// ---- panels ----------------------------------------------------------------------------------

static double *panel_alloc(Panel *p, size_t n) {
    p->buf = calloc(n ? n : 1, sizeof(double));
    if (!p->buf) { fprintf(stderr, "%s:%d: out of memory for a plot\n", __FILE__, __LINE__); exit(1); }
    return p->buf;
}

static VizSeries *add_series(Panel *p, const double *x, const double *y, int n, uint32_t rgb, const char *label) {
    if (p->chart.nseries >= MAX_SERIES) return NULL;
    int k = p->chart.nseries++;
    VizSeries *s = &p->series[k];
    memset(s, 0, sizeof *s);
    if (label) { snprintf(p->labels[k], sizeof p->labels[k], "%s", label); s->label = p->labels[k]; }
    s->x = x; s->y = y; s->n = n; s->rgb = rgb;
    return s;
}

static void add_ref(Panel *p, double y, uint32_t rgb, const char *fmt, double v) {
    if (p->chart.nrefs >= 4) return;
    int k = p->chart.nrefs++;
    snprintf(p->ref_labels[k], sizeof p->ref_labels[k], fmt, v);
    p->refs[k] = (VizRef){p->ref_labels[k], y, rgb};
}

// An eval "set" is the bytes scored: its size (window) and identity (eval_set, a hash of the
// bytes; 0 on rows from before ids existed, which match any set of their size). Evals of two
// corpora — or two splits — with the same window size are different sets, never one curve.
typedef struct { int64_t window; uint32_t set; } EvalKey;
static int same_set(uint32_t a, uint32_t b) { return a == b || !a || !b; }
static int in_set(const MetricRow *r, EvalKey k) {
    return r->kind == 1 && r->window == k.window && same_set(r->eval_set, k.set);
}

// anchors are a property of one eval set: drawn only on a plot of that set
static int anchors_match(const Engine *e, EvalKey k) { return engine_anchors_for(e, k.window, k.set) != NULL; }
static void add_anchors(Panel *p, const Engine *e, EvalKey k) {
    if (!anchors_match(e, k)) return;
    add_ref(p, e->anchors.unigram_bpb, 0x6f6f6f, "unigram %.3f", e->anchors.unigram_bpb);
    add_ref(p, e->anchors.kn5_bpb, 0xc0392b, "5-gram %.3f", e->anchors.kn5_bpb);
}

// loss, lr, gnorm, tok_s: one value per kept train row
static int panel_train(Ctx *cx, Panel *p, const char *m, dm_err *err) {
    const Engine *e = cx->e;
    if (!cx->ntrain) return dm_fail(err, "nothing to plot yet: train first (:step or :train)");
    int n = cx->ntrain, is_loss = !strcmp(m, "loss");
    double *x = panel_alloc(p, 7 * (size_t)n), *y = x + n, *sm = y + n, *ya = sm + n;  // (ya: ablation steps, up to four series)
    for (int k = 0; k < n; k++) {
        const MetricRow *r = &e->rows[cx->train[k]];
        x[k] = x_of(cx, r, k);
        y[k] = !strcmp(m, "loss") ? r->loss : !strcmp(m, "lr") ? r->lr : !strcmp(m, "gnorm") ? r->gnorm : r->tok_s;
    }
    p->chart.logy = cx->log_set ? cx->log_on : is_loss;
    if (is_loss) {
        snprintf(p->title, sizeof p->title, "training loss");
        snprintf(p->ylabel, sizeof p->ylabel, "loss, nats%s", p->chart.logy ? " (log scale)" : "");
        if (n >= 100) {
            // the raw curve is noisy at small batch: a light trace under a debiased EMA
            int span = n / 40 < 5 ? 5 : n / 40 > 500 ? 500 : n / 40;
            double a = 2.0 / (span + 1), m_ = 0, wsum = 0;
            for (int k = 0; k < n; k++) {
                if (isfinite(y[k])) { m_ = (1 - a) * m_ + a * y[k]; wsum = (1 - a) * wsum + a; }
                // a skipped step breaks the average's line as it breaks the trace's (carried over
                // it, a run of skipped steps was a flat stretch of values no step had: QA,
                // session 31); the average itself carries on after it
                sm[k] = wsum > 0 && isfinite(y[k]) ? m_ / wsum : NAN;
            }
            VizSeries *raw = add_series(p, x, y, n, 0x1f77b4, "per step");
            raw->alpha = 0.3f; raw->width = 1.2; raw->markers = -1;
            char lab[48];
            snprintf(lab, sizeof lab, "EMA over %d steps", span);
            add_series(p, x, sm, n, 0x1f77b4, lab)->markers = -1;
        } else {
            add_series(p, x, y, n, 0x1f77b4, "loss");
        }
        // the steps an ablation took (an arm off): marked over the curve, one series per set of
        // arms off (steps with moe off and later steps with kda off were one "kda,moe off" series:
        // QA, session 30), said in the subtitle
        int nab = 0, nmask = 0;
        uint16_t masks[3] = {0};
        for (int k = 0; k < n; k++) {
            uint16_t mk = e->rows[cx->train[k]].arms_off;
            nab += mk != 0;
            int q = 0;
            while (q < nmask && masks[q] != mk) q++;
            if (mk && q == nmask && nmask < 3) masks[nmask++] = mk;
        }
        if (nab) {
            char all[120] = "";
            for (int q = 0; q <= nmask; q++) {
                // (q == nmask: the steps of any further arm set, one series)
                int cnt = 0;
                for (int k = 0; k < n; k++) {
                    uint16_t mk = e->rows[cx->train[k]].arms_off;
                    int in = q < nmask ? mk == masks[q] : mk && mk != masks[0] && mk != masks[1] && mk != masks[2];
                    ya[k] = in ? y[k] : NAN;
                    cnt += in;
                }
                if (!cnt) continue;
                char names[40], lab[48];
                if (q < nmask) arms_mask_names(masks[q], names, sizeof names);
                else snprintf(names, sizeof names, "other arms");
                snprintf(lab, sizeof lab, "%s off", names);
                snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", all[0] ? "; " : "", names);
                VizSeries *sr = add_series(p, x, ya, n, q == 0 ? 0xd62728 : q == 1 ? 0xff7f0e : q == 2 ? 0x8c564b : 0x7f7f7f, lab);
                if (sr) { sr->width = 1.5; sr->markers = cnt <= 40 ? 1 : -1; }
                p->chart.gaps += n - cnt;
                ya += n;  // (each series keeps its own copy: ya has room for four)
            }
            snprintf(p->subtitle + strlen(p->subtitle), sizeof p->subtitle - strlen(p->subtitle), "%s%d step%s with arms off (%s) marked",
                     p->subtitle[0] ? "; " : "", nab, nab == 1 ? "" : "s", all);
        }
    } else if (!strcmp(m, "lr")) {
        // the logged lr is AdamW's (and the tables'); Muon's follows the same schedule from
        // lr_muon, which a reader of the chart would otherwise not know
        snprintf(p->title, sizeof p->title, "learning rate");
        // (the ratio is the settings' now: a :set of lr or lr_muon during the run changed it, and
        // the rows keep AdamW's lr only: QA, session 29)
        if (e->cfg.lr > 0)
            snprintf(p->subtitle, sizeof p->subtitle, "AdamW and tables; Muon on the same schedule, lr_muon/lr x this curve (%g x with the "
                     "settings now: lr_muon %g, lr %g)", e->cfg.lr_muon / e->cfg.lr, e->cfg.lr_muon, e->cfg.lr);
        else  // (no ratio to an lr of 0: "0 x" said Muon's was 0 too)
            snprintf(p->subtitle, sizeof p->subtitle, "AdamW and tables; Muon on the same schedule from lr_muon (the settings now: "
                     "lr_muon %g, lr %g)", e->cfg.lr_muon, e->cfg.lr);
        snprintf(p->ylabel, sizeof p->ylabel, "lr%s", p->chart.logy ? " (log scale)" : "");
        add_series(p, x, y, n, 0x2ca02c, "lr (AdamW)");
    } else if (!strcmp(m, "gnorm")) {
        snprintf(p->title, sizeof p->title, "gradient norm (before clipping)");
        snprintf(p->ylabel, sizeof p->ylabel, "global L2 norm%s", p->chart.logy ? " (log scale)" : "");
        add_series(p, x, y, n, 0xd62728, "gnorm")->width = 1.5;
        if (e->cfg.clip > 0) add_ref(p, e->cfg.clip, 0x555555, "clip %g (the setting now)", e->cfg.clip);
    } else {
        if (cx->nemulated)  // (the CPU running the CUDA code: not a GPU's throughput)
            snprintf(p->title, sizeof p->title, "training throughput (%d of %d steps emulated on the CPU: cuemu)", cx->nemulated, n);
        else snprintf(p->title, sizeof p->title, "training throughput");
        snprintf(p->ylabel, sizeof p->ylabel, "tokens / s%s", p->chart.logy ? " (log scale)" : "");
        add_series(p, x, y, n, 0x9467bd, "tok/s")->width = 1.5;
    }
    snprintf(p->xlabel, sizeof p->xlabel, "%s", x_label(cx));
    return 0;
}

// the eval set of the open corpus's window when the rows hold evals of it, else of the latest eval
// row (window -1: none); and how many distinct sets the rows hold
static EvalKey latest_set(const Engine *e, int *nset, int *open) {
    *open = 0;
    EvalKey key = {-1, 0}, seen[32];
    int ns = 0;
    for (int i = 0; i < e->nrows; i++) {
        if (e->rows[i].kind != 1) continue;
        key = (EvalKey){e->rows[i].window, e->rows[i].eval_set};
        int k = 0;
        while (k < ns && !(seen[k].window == key.window && seen[k].set == key.set)) k++;
        if (k == ns && ns < 32) seen[ns++] = key;
    }
    // distinct sets: every identified one, and unidentified rows (older checkpoints) only where
    // no identified set of their size exists
    int n = 0;
    for (int k = 0; k < ns; k++) {
        int merged = 0;
        for (int j = 0; j < ns && !seen[k].set; j++) merged |= seen[j].set && seen[j].window == seen[k].window;
        n += !merged;
    }
    *nset = n;
    // the set an eval of the open corpus scores, when the rows hold evals of it: an :eval of a
    // probe text (eval=) and a :data back made the plot that one dot (QA, session 35)
    int64_t w;
    uint32_t now;
    dm_err err = {0};
    if (n > 1 && !engine_eval_set_now(e, &w, &now, &err))
        for (int i = 0; i < e->nrows; i++)
            if (in_set(&e->rows[i], (EvalKey){w, now})) { *open = 1; return (EvalKey){w, now}; }
    return key;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

// bpb: one series per depth over the latest eval set (never two sets on one curve)
static int panel_bpb(Ctx *cx, Panel *p, dm_err *err) {
    const Engine *e = cx->e;
    int nwin;
    EvalKey key = latest_set(e, &nwin, &cx->set_open);
    int64_t win = key.window;
    if (win < 0) return dm_fail(err, "nothing to plot yet: no evals (run :eval, or :train with eval_every=N)");
    int depths[64], nd = 0, nev = 0;
    for (int i = 0; i < e->nrows; i++) {
        const MetricRow *r = &e->rows[i];
        if (!in_set(r, key)) continue;
        nev++;
        int k = 0;
        while (k < nd && depths[k] != r->depth) k++;
        if (k == nd && nd < 64) depths[nd++] = r->depth;
    }
    qsort(depths, nd, sizeof(int), cmp_int);
    double *buf = panel_alloc(p, 2 * (size_t)nev + 2);
    int64_t *st = malloc(sizeof(int64_t) * (nev + 1));
    size_t off = 0;
    // an eval with a forward-changing arm off (:arm kda off, then :eval) scored another model: its
    // own series per arm set, never a point of the depth's curve (it was drawn as a spike on it)
    uint16_t masks[4] = {0};
    int nmask = 1, napart = 0, nlost = 0, prev_ab = -1;
    for (int i = 0; i < e->nrows; i++) {
        const MetricRow *r = &e->rows[i];
        uint16_t mk = r->arms_off & ARMS_FORWARD_MASK;
        if (!in_set(r, key) || !mk) continue;
        int q = 0;
        while (q < nmask && masks[q] != mk) q++;
        if (q == nmask && nmask < 4) masks[nmask++] = mk;
        // evals, not rows: an :eval-depths with an arm off is one eval of L rows, next to each
        // other (QA, session 31: "6 evals with arms off" here, "1 eval" on :plot depths)
        int again = prev_ab >= 0 && prev_ab == i - 1 && e->rows[prev_ab].step == r->step &&
                    (e->rows[prev_ab].arms_off & ARMS_FORWARD_MASK) == mk && e->rows[prev_ab].depth < r->depth;
        prev_ab = i;
        if (again) continue;
        if (q < nmask) napart++;
        else nlost++;
    }
    VizSeries *main_sr[MAX_SERIES];
    int main_n[MAX_SERIES], nmain = 0, most = 0;
    for (int q = 0; q < nmask; q++) {
        for (int k = 0; k < nd && k < MAX_SERIES; k++) {
            double *x = buf + off, *y = buf + nev + 1 + off;
            int n = 0;
            for (int i = 0; i < e->nrows; i++) {
                const MetricRow *r = &e->rows[i];
                if (!in_set(r, key) || r->depth != depths[k] || (r->arms_off & ARMS_FORWARD_MASK) != masks[q]) continue;
                // a rewind or a repeated eval at one step: the later row stands (see build_timeline)
                while (n && st[n - 1] >= r->step) n--;
                x[n] = x_of(cx, r, -1); y[n] = r->bpb; st[n] = r->step;
                n++;
            }
            if (q && !n) continue;
            uint32_t rgb = nd == 1 ? 0x1f77b4 : viz_ramp(0.9 * k / (nd - 1));
            // an arm set off: red with one depth; with several, each depth's own colour (six
            // "depth k, moe off" series in one red: QA, session 31), its dots rings (a lone dot of
            // "depth 1, engram off" looked like depth 1's own: QA, session 35)
            uint32_t rgb_off = nd == 1 ? (q == 1 ? 0xd62728 : q == 2 ? 0xff7f0e : 0x8c564b) : rgb;
            char lab[48], names[28];
            arms_mask_names(masks[q], names, sizeof names);
            if (q) snprintf(lab, sizeof lab, "depth %d, %s off", depths[k], names);
            else snprintf(lab, sizeof lab, "depth %d", depths[k]);
            // many depths: label a handful, the colour ramp carries the rest
            int labelled = q || nd <= 10 || k == 0 || k == nd - 1 || k % ((nd + 5) / 6) == 0;
            VizSeries *sr = add_series(p, x, y, n, q ? rgb_off : rgb, labelled ? lab : NULL);
            if (sr && q) { sr->markers = 1; sr->width = 1.2; sr->hollow = 1; }
            if (sr && !q && nmain < MAX_SERIES) { main_sr[nmain] = sr; main_n[nmain++] = n; most = n > most ? n : most; }
            off += (size_t)n;
            if (!q && n > cx->set_evals) cx->set_evals = n;
        }
    }
    // a depth scored at fewer evals than another (:eval-depths now and then, :train's evals at
    // depth L only): its points alone, not a line through the evals it missed, which read as
    // "the shallow depths lag badly" between them (QA, session 31)
    int sparse = 0;
    for (int k = 0; k < nmain; k++)
        if (main_n[k] < most) {
            main_sr[k]->markers = 2;
            sparse += main_n[k] > 0;  // (a depth scored only with an arm off is none of these)
        }
    cx->nsets = nwin;
    free(st);
    char wb[32];
    fmt_bytes(win, wb, sizeof wb);   // "64 KiB": the size at a glance next to the exact count
    snprintf(p->title, sizeof p->title, "held-out BPB over %lld B%s%s%s", (long long)win, win >= 10240 ? " (" : "",
             win >= 10240 ? wb : "", win >= 10240 ? ")" : "");
    if (nwin > 1) snprintf(p->subtitle, sizeof p->subtitle, "%s %d eval sets (corpus or window changed)", cx->set_open ? "the open corpus's eval set, one of" : "latest of", nwin);
    if (napart)
        snprintf(p->subtitle + strlen(p->subtitle), sizeof p->subtitle - strlen(p->subtitle), "%s%d eval%s with arms off drawn apart",
                 p->subtitle[0] ? "; " : "", napart, napart == 1 ? "" : "s");
    if (nlost)
        snprintf(p->subtitle + strlen(p->subtitle), sizeof p->subtitle - strlen(p->subtitle), "%s%d more of other arm sets not drawn",
                 p->subtitle[0] ? "; " : "", nlost);
    if (sparse)
        snprintf(p->subtitle + strlen(p->subtitle), sizeof p->subtitle - strlen(p->subtitle),
                 "%s%d depth%s scored at fewer evals: points, not lines", p->subtitle[0] ? "; " : "", sparse, sparse == 1 ? "" : "s");
    if (e->has_anchors && !anchors_match(e, key))
        snprintf(p->subtitle + strlen(p->subtitle), sizeof p->subtitle - strlen(p->subtitle), "%sanchors %s: not drawn",
                 p->subtitle[0] ? "; " : "",
                 engine_anchors_for(e, e->anchors.window_bytes, e->anchors.eval_set) ? "were scored on other bytes"
                                                                                      : "were fit with another anchor_fit_bytes");
    add_anchors(p, e, key);
    p->chart.logy = cx->log_set && cx->log_on;
    snprintf(p->xlabel, sizeof p->xlabel, "%s", x_label(cx));
    snprintf(p->ylabel, sizeof p->ylabel, "bits per byte%s", p->chart.logy ? " (log scale)" : "");
    return 0;
}

// depths: BPB against depth, one line per eval step that scored several depths
static int panel_depths(Ctx *cx, Panel *p, dm_err *err) {
    const Engine *e = cx->e;
    int nwin;
    EvalKey key = latest_set(e, &nwin, &cx->set_open);
    int64_t win = key.window;
    if (win < 0) return dm_fail(err, "nothing to plot yet: no evals (run :eval-depths)");
    // groups of rows by step and arms off, in order; a later row for the same (step, arms, depth)
    // replaces. An eval with a forward-changing arm off scored another model: its own group, never
    // joined to the same step's depths with every arm on (a QA pass found :eval-depths, then
    // :arm kda off and :eval depth=2, drawn as one curve)
    int maxd = 1;
    for (int i = 0; i < e->nrows; i++)
        if (e->rows[i].kind == 1 && e->rows[i].depth > maxd) maxd = e->rows[i].depth;
    if (maxd > 64) maxd = 64;
    int cap = 256, ng = 0;
    int64_t *gstep = malloc(sizeof(int64_t) * cap);
    uint16_t *gmask = malloc(sizeof(uint16_t) * cap);
    double *gval = malloc(sizeof(double) * cap * maxd);
    for (int i = 0; i < e->nrows; i++) {
        const MetricRow *r = &e->rows[i];
        if (!in_set(r, key) || r->depth < 1 || r->depth > maxd) continue;
        uint16_t mk = r->arms_off & ARMS_FORWARD_MASK;
        while (ng && gstep[ng - 1] > r->step) ng--;   // a rewind
        int g = ng - 1;
        while (g >= 0 && gstep[g] == r->step && gmask[g] != mk) g--;
        if (g < 0 || gstep[g] != r->step) {
            if (ng == cap) {
                cap *= 2;
                gstep = realloc(gstep, sizeof(int64_t) * cap);
                gmask = realloc(gmask, sizeof(uint16_t) * cap);
                gval = realloc(gval, sizeof(double) * cap * maxd);
                if (!gstep || !gmask || !gval) { fprintf(stderr, "%s:%d: out of memory for a plot\n", __FILE__, __LINE__); exit(1); }
            }
            g = ng++;
            gstep[g] = r->step;
            gmask[g] = mk;
            for (int d = 0; d < maxd; d++) gval[(size_t)g * maxd + d] = NAN;
        }
        gval[(size_t)g * maxd + r->depth - 1] = r->bpb;
    }
    // keep the groups with two or more depths (:eval-depths); a single :eval is not a curve
    int keep[MAX_SERIES], nk = 0, nmulti = 0;
    for (int g = 0; g < ng; g++) {
        int c = 0;
        for (int d = 0; d < maxd; d++) c += !isnan(gval[(size_t)g * maxd + d]);
        nmulti += c >= 2;
    }
    // more eval steps than lines we draw: an even subsample that keeps the first and the last
    int want = nmulti < 24 ? nmulti : 24, seen = 0, j = 0;
    for (int g = 0; g < ng && nk < want; g++) {
        int c = 0;
        for (int d = 0; d < maxd; d++) c += !isnan(gval[(size_t)g * maxd + d]);
        if (c < 2) continue;
        long target = want > 1 ? lround((double)j * (nmulti - 1) / (want - 1)) : 0;
        if (seen == target) { keep[nk++] = g; j++; }
        seen++;
    }
    if (!nk) {
        free(gstep);
        free(gmask);
        free(gval);
        // (with several eval sets the earlier ones' :eval-depths are not drawn with the latest:
        // "run :eval-depths" right after one, unexplained, once the window changed: QA, session 41)
        if (nwin > 1)
            return dm_fail(err, "nothing to plot yet: no eval of the latest of %d eval sets (the window evals score now) scored several depths; "
                           ":eval-depths scores it (an earlier set's depths are not drawn with it)", nwin);
        return dm_fail(err, "nothing to plot yet: no eval scored several depths (run :eval-depths)");
    }
    cx->nsets = nwin;
    if (nmulti > cx->set_evals) cx->set_evals = nmulti;
    double *buf = panel_alloc(p, 2 * (size_t)nk * maxd);
    int napart = 0, nall = 0;  // the drawn evals with arms off; of every arm on
    for (int k = 0; k < nk; k++) nall += !gmask[keep[k]];
    for (int k = 0, a = 0; k < nk; k++) {
        double *x = buf + 2 * (size_t)k * maxd, *y = x + maxd;
        int n = 0;
        for (int d = 0; d < maxd; d++) {
            double v = gval[(size_t)keep[k] * maxd + d];
            if (isnan(v)) continue;
            x[n] = d + 1; y[n] = v; n++;
        }
        char lab[64], names[28];
        uint16_t mk = gmask[keep[k]];
        arms_mask_names(mk, names, sizeof names);
        if (mk) snprintf(lab, sizeof lab, "step %lld, %s off", (long long)gstep[keep[k]], names);
        else snprintf(lab, sizeof lab, "step %lld", (long long)gstep[keep[k]]);
        // the every-arm evals on the colour ramp; an ablation's in a colour of its own, dashed
        // by its markers, always in the legend
        int labelled = mk || nall <= 8 || a == 0 || a == nall - 1 || a % ((nall + 4) / 5) == 0;
        uint32_t rgb = mk ? (napart % 3 == 0 ? 0xd62728 : napart % 3 == 1 ? 0xff7f0e : 0x8c564b)
                          : nall == 1 ? 0x1f77b4 : viz_ramp(0.9 * a / (nall - 1));
        VizSeries *sr = add_series(p, x, y, n, rgb, labelled ? lab : NULL);
        if (sr) sr->markers = 1;
        if (mk) { napart++; if (sr) sr->width = 1.2; }
        else a++;
    }
    snprintf(p->title, sizeof p->title, "held-out BPB by depth over %lld B", (long long)win);
    int nsub = 0;
    if (nk < nmulti) nsub += snprintf(p->subtitle, sizeof p->subtitle, "%d of %d evals shown; ", nk, nmulti);
    if (nwin > 1) nsub += snprintf(p->subtitle + nsub, sizeof p->subtitle - nsub, "%s %d eval sets; ", cx->set_open ? "the open corpus's eval set, one of" : "latest of", nwin);
    // the colour ramp tells evals apart; one eval is one blue line with no legend (a single entry
    // gets none), so its step goes here instead of a colour key with nothing to key
    if (napart) nsub += snprintf(p->subtitle + nsub, sizeof p->subtitle - nsub, "%d eval%s with arms off drawn apart; ", napart,
                                 napart == 1 ? "" : "s");
    if (nk == 1) {
        char names[28];
        arms_mask_names(gmask[keep[0]], names, sizeof names);
        snprintf(p->subtitle + nsub, sizeof p->subtitle - nsub, "one eval, at step %lld%s%s%s", (long long)gstep[keep[0]],
                 napart ? ", " : "", napart ? names : "", napart ? " off" : "");
    } else if (nall > 1) {
        snprintf(p->subtitle + nsub, sizeof p->subtitle - nsub, "colour: early (dark) to late (yellow)");
    } else if (nsub >= 2) {
        p->subtitle[nsub - 2] = 0;  // (no ramp to key: the trailing "; " goes)
    }
    add_anchors(p, e, key);
    p->chart.logy = cx->log_set && cx->log_on;
    p->chart.xint = 1;
    snprintf(p->xlabel, sizeof p->xlabel, "depth (iterations of the block)");
    snprintf(p->ylabel, sizeof p->ylabel, "bits per byte");
    free(gstep); free(gmask); free(gval);
    return 0;
}

// experts over time: each train row carries the share of that step's assignments per expert
// (MetricRow.expert_frac, E <= 16); one line per expert against the x axis.
static int panel_experts_history(Ctx *cx, Panel *p, dm_err *err) {
    const Engine *e = cx->e;
    int E = e->cfg.E, n = cx->ntrain;
    if (n < 2) return 1;
    double *buf = panel_alloc(p, (size_t)(E + 1) * n);
    double *x = buf + (size_t)E * n;
    for (int k = 0; k < n; k++) x[k] = x_of(cx, &e->rows[cx->train[k]], k);
    // a step that routed nothing (moe arm off, a skipped step) has no shares: a gap, not 0 % each
    int unrouted = 0;
    for (int k = 0; k < n; k++) {
        float sum = 0;
        for (int j = 0; j < E; j++) sum += e->rows[cx->train[k]].expert_frac[j];
        unrouted += sum <= 0;
    }
    for (int j = 0; j < E && j < MAX_SERIES; j++) {
        double *y = buf + (size_t)j * n;
        for (int k = 0; k < n; k++) {
            const MetricRow *r = &e->rows[cx->train[k]];
            float sum = 0;
            for (int q = 0; q < E; q++) sum += r->expert_frac[q];
            y[k] = sum > 0 ? 100.0 * r->expert_frac[j] : NAN;
        }
        char lab[32];
        snprintf(lab, sizeof lab, "expert %d", j);
        add_series(p, x, y, n, E == 1 ? 0x1f77b4 : viz_ramp(0.9 * j / (E - 1)), lab);
    }
    add_ref(p, 100.0 / E, 0x555555, "uniform %.1f%%", 100.0 / E);
    snprintf(p->title, sizeof p->title, "expert load over training");
    snprintf(p->subtitle, sizeof p->subtitle, "%d expert%s, top-%d routing; share of each step's assignments, all iterations", E, E == 1 ? "" : "s", e->cfg.k);
    if (unrouted) {
        snprintf(p->subtitle + strlen(p->subtitle), sizeof p->subtitle - strlen(p->subtitle),
                 "; %d step%s routed nothing (moe off or skipped): gaps", unrouted, unrouted == 1 ? "" : "s");
        p->chart.gaps = (long)unrouted * (E < MAX_SERIES ? E : MAX_SERIES);
    }
    snprintf(p->ylabel, sizeof p->ylabel, "assignments (%%)");
    snprintf(p->xlabel, sizeof p->xlabel, "%s", x_label(cx));
    p->chart.logy = cx->log_set && cx->log_on;
    (void)err;
    return 0;
}

// experts: with a routing history (train rows), load per expert over time; otherwise the tokens
// per expert at each iteration of the last forward.
static int panel_experts(Ctx *cx, Panel *p, dm_err *err) {
    const Engine *e = cx->e;
    if (e->cfg.E <= 16) {
        int have = 0;
        for (int k = 0; k < cx->ntrain && !have; k++)
            for (int j = 0; j < e->cfg.E; j++) have |= e->rows[cx->train[k]].expert_frac[j] > 0;
        if (have && panel_experts_history(cx, p, err) == 0) return 0;
    }
    const Model *m = &e->model;
    int E = e->cfg.E, L = m->last_depth > 0 ? m->last_depth : e->cfg.L;
    if (!e->live || !m->expert_load || E <= 0) return dm_fail(err, "nothing to plot yet: no model (:init, then train)");
    // the last forward's loads: only when it routed (moe on) and was not undone (:bench)
    if (m->last_depth < 1) return dm_fail(err, "no expert loads in memory: :step or :eval first");
    if (!m->last_on[ARM_MOE]) return dm_fail(err, "no expert loads: the last forward ran with the moe arm off");
    if (L > e->cfg.L) L = e->cfg.L;
    long total = 0;
    for (int i = 0; i < L * E; i++) total += m->expert_load[i];
    if (!total) return dm_fail(err, "nothing to plot yet: no forward has routed tokens (is the moe arm on? train first)");
    double *buf = panel_alloc(p, (size_t)E * (L + 1));
    double *x = buf + (size_t)E * L;
    for (int j = 0; j < E; j++) x[j] = j;
    int shown = 0;
    for (int i = 0; i < L && i < MAX_SERIES; i++) {
        double *y = buf + (size_t)i * E;
        long s = 0;
        for (int j = 0; j < E; j++) { y[j] = m->expert_load[i * E + j]; s += m->expert_load[i * E + j]; }
        if (!s) continue;
        char lab[32];
        snprintf(lab, sizeof lab, "iteration %d", i + 1);
        int labelled = L <= 10 || i == 0 || i == L - 1 || i % ((L + 5) / 6) == 0;
        add_series(p, x, y, E, L == 1 ? 0x1f77b4 : viz_ramp(0.9 * i / (L - 1)), labelled ? lab : NULL)->markers = 1;
        shown++;
    }
    // a balanced router sends every expert the same share: the reference to compare against
    add_ref(p, (double)total / shown / E, 0x555555, "uniform %.0f", (double)total / shown / E);
    // which forward, in :probe's words (it said "after step N" of the forward :probe calls "of
    // step N-1": QA, session 24)
    ProbeInfo pi = {0};
    pi.activation = 1;
    char src[160], tag[96];
    probe_source(e, &pi, src, sizeof src, tag, sizeof tag);
    snprintf(p->title, sizeof p->title, "expert load, %.120s", src);
    snprintf(p->subtitle, sizeof p->subtitle, "%d expert%s, top-%d routing; one line per iteration%s", E, E == 1 ? "" : "s", e->cfg.k,
             E > 16 ? "; no history over training: the metric rows keep shares of at most 16 experts" : "");
    p->chart.logy = cx->log_set && cx->log_on;
    p->chart.xint = 1;
    snprintf(p->xlabel, sizeof p->xlabel, "expert");
    snprintf(p->ylabel, sizeof p->ylabel, "tokens routed");
    return 0;
}

// ---- the command -----------------------------------------------------------------------------

// key=value lookup (as sh_kv; kept local so test_plot links this file without the parser)
static const char *kv(const Words *w, const char *key) {
    size_t kl = strlen(key);
    for (int i = 1; i < w->argc; i++)
        if (!strncmp(w->argv[i], key, kl) && w->argv[i][kl] == '=') return w->argv[i] + kl + 1;
    return NULL;
}

static int mkdir_p(const char *dir) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(tmp, 0755) && errno != EEXIST) return 1; *p = '/'; }
    return mkdir(tmp, 0755) && errno != EEXIST;
}

int cmd_plot(Shell *sh, Words *w, dm_err *err) {
    const char *spec = NULL;
    for (int i = 1; i < w->argc; i++) {
        const char *eq = sh_eq(w, i);
        if (!eq) {
            if (spec) return dm_fail(err, ":plot: unexpected argument '%s' (several metrics are one word: loss,lr)", w->argv[i]);
            spec = w->argv[i];
            continue;
        }
        size_t kl = eq - w->argv[i];
        if (!(kl == 3 && !strncmp(w->argv[i], "out", 3)) && !(kl == 1 && w->argv[i][0] == 'x') &&
            !(kl == 3 && !strncmp(w->argv[i], "log", 3)) && !(kl == 4 && !strncmp(w->argv[i], "size", 4)))
            return dm_fail(err, ":plot: unknown option '%.*s' (options: out= x= log= size=)", (int)kl, w->argv[i]);
        // a key given twice: one of them would be dropped without a word
        for (int j = 1; j < i; j++)
            if (!w->lit[j] && !strncmp(w->argv[j], w->argv[i], kl + 1))
                return dm_fail(err, ":plot: option '%.*s' given twice", (int)kl, w->argv[i]);
    }
    if (!spec) return dm_fail(err, "usage: :plot METRIC[,METRIC...] [out=FILE.png] [x=step|tokens|time] [log=on|off] [size=WxH]; metrics: " METRIC_LIST);
    Ctx cx = {.e = sh->eng, .xq = X_STEP};
    const char *xs = kv(w, "x"), *ls = kv(w, "log"), *ss = kv(w, "size"), *out = kv(w, "out");
    if (out && strlen(out) >= 1400)  // (the path buffer below: it was cut to fit, its .png too)
        return dm_fail(err, ":plot: out= is %zu bytes long, at most 1399: not written", strlen(out));
    if (xs) {
        if (!strcmp(xs, "step")) cx.xq = X_STEP;
        else if (!strcmp(xs, "tokens")) cx.xq = X_TOKENS;
        else if (!strcmp(xs, "time")) cx.xq = X_TIME;
        else return dm_fail(err, ":plot: x=%s: expected step, tokens or time", xs);
    }
    if (ls) {
        if (strcmp(ls, "on") && strcmp(ls, "off")) return dm_fail(err, ":plot: log=%s: expected on or off", ls);
        cx.log_set = 1; cx.log_on = !strcmp(ls, "on");
    }
    int W = 960, H = 0;
    if (ss) {
        char *end;
        long a = strtol(ss, &end, 10), b = *end == 'x' ? strtol(end + 1, &end, 10) : -1;
        if (*end || a < 320 || a > 8192 || b < 160 || b > 8192)
            return dm_fail(err, ":plot: size=%s: expected WxH, e.g. 960x540 (320..8192 x 160..8192, and 160 per metric)", ss);
        W = (int)a; H = (int)b;
    }
    if (out && !*out) return dm_fail(err, ":plot: out= needs a file name");
    if (out && (strlen(out) < 5 || strcasecmp(out + strlen(out) - 4, ".png")))
        return dm_fail(err, ":plot: out=%s: the chart is a PNG: give a name ending in .png", out);
    // the metric list: names checked before any drawing
    char names[MAX_PANELS][16];
    int np = 0;
    for (const char *p = spec; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        int ok = 0;
        for (int k = 0; metrics[k]; k++)
            if (len == strlen(metrics[k]) && !strncmp(p, metrics[k], len)) ok = 1;
        if (!len || (c && !c[1])) return dm_fail(err, ":plot: an empty metric name in '%s' (METRIC[,METRIC...]); valid: " METRIC_LIST, spec);
        if (!ok) return dm_fail(err, ":plot: unknown metric '%.*s'; valid: " METRIC_LIST, (int)len, p);
        for (int k = 0; k < np; k++)  // a second panel of the same curve shows nothing new
            if (len == strlen(names[k]) && !strncmp(p, names[k], len))
                return dm_fail(err, ":plot: metric '%.*s' given twice in '%s'", (int)len, p, spec);
        if (np == MAX_PANELS) return dm_fail(err, ":plot: at most %d metrics in one plot", MAX_PANELS);
        snprintf(names[np++], sizeof names[0], "%.*s", (int)len, p);
        p += len + (c != NULL);
    }
    if (!np) return dm_fail(err, ":plot: no metric given; valid: " METRIC_LIST);
    // depths has depth on its x axis: x= applies to the time series only, never silently to none
    int timeseries = 0;
    for (int k = 0; k < np; k++) timeseries += strcmp(names[k], "depths") != 0;
    if (xs && !timeseries) return dm_fail(err, ":plot depths: x=%s does not apply (its x axis is the loop depth)", xs);
    if (!viz_png_available()) return dm_fail(err, DM_NO_PNG_WHY);

    build_timeline(&cx);
    Panel *panels = calloc(np, sizeof(Panel));
    VizChart charts[MAX_PANELS];
    int rc = 0, nc = 0;
    // a metric with nothing to plot yet (no evals, no routed tokens) in a list of several is left
    // out and said below; alone, or when every one of the list has nothing, it is the error
    char left[MAX_PANELS][sizeof names[0] + sizeof err->msg + 16];  // "NAME not drawn: MSG"
    int nleft = 0;
    const char *const nothing = "nothing to plot yet";
    for (int k = 0; k < np && !rc; k++) {
        Panel *p = &panels[nc];
        const char *m = names[k];
        if (!strcmp(m, "bpb")) rc = panel_bpb(&cx, p, err);
        else if (!strcmp(m, "depths")) rc = panel_depths(&cx, p, err);
        else if (!strcmp(m, "experts")) rc = panel_experts(&cx, p, err);
        else rc = panel_train(&cx, p, m, err);
        if (rc && np > 1 && !strncmp(err->msg, nothing, strlen(nothing))) {
            snprintf(left[nleft++], sizeof left[0], "%.*s not drawn: %s", (int)sizeof names[0] - 1, m, err->msg);
            free(p->buf);
            memset(p, 0, sizeof *p);
            if (nleft < np) { rc = 0; memset(err, 0, sizeof *err); }
            continue;  // (all of them: rc and err stay, the last one's reason)
        }
        if (rc) break;
        if (nc != k) memcpy(names[nc], m, sizeof names[0]);  // the drawn metrics, in order (nc < k)
        p->chart.title = p->title; p->chart.subtitle = p->subtitle;
        p->chart.xlabel = p->xlabel; p->chart.ylabel = p->ylabel;
        p->chart.series = p->series; p->chart.refs = p->refs;
        p->chart.share_x = strcmp(m, "depths") && !(!strcmp(m, "experts") && p->chart.xint);   // the time series line up
        if (p->chart.share_x && cx.xq != X_TIME) p->chart.xint = 1;  // steps and tokens are counts: no 0.5 ticks
        charts[nc++] = p->chart;
    }
    if (rc && np > 1 && nleft == np) {  // every metric had nothing: each one's reason (only the last one's was said)
        char all[sizeof err->msg];
        int o = snprintf(all, sizeof all, "%s", nothing);
        for (int k = 0; k < nleft && o < (int)sizeof all; k++) {
            const char *why = strstr(left[k], nothing);
            why = why ? why + strlen(nothing) : "";
            if (*why == ':') why++;
            while (*why == ' ') why++;
            o += snprintf(all + o, sizeof all - o, "%s %s: %s", k ? ";" : ":", names[k], why);
        }
        snprintf(err->msg, sizeof err->msg, "%s", all);
    }
    char path[1400], dir[1200] = "";
    int made_dir = 0;  // plots/ made by this command: a refused chart leaves no empty folder behind
    if (!rc) {
        if (out) snprintf(path, sizeof path, "%s", out);
        else {
            const Engine *e = sh->eng;
            char dd[1100];
            snprintf(dir, sizeof dir, "%splots", session_default_dir(e, dd, sizeof dd));
            struct stat st;
            made_dir = stat(dir, &st) != 0;
            if (mkdir_p(dir)) rc = dm_fail(err, ":plot: cannot create %s: %s", dir, strerror(errno));
            int n = snprintf(path, sizeof path, "%s/", dir);
            for (int k = 0; k < nc; k++) n += snprintf(path + n, sizeof path - n, "%s%s", k ? "-" : "", names[k]);
            snprintf(path + n, sizeof path - n, ".png");
        }
    }
    if (!rc) {
        char msg[512];
        if (viz_charts_png(path, charts, nc, W, H, msg, sizeof msg)) {
            rc = dm_fail(err, ":plot: %s", msg);
            if (made_dir) rmdir(dir);  // (only when empty: never a file of anyone's)
        } else fprintf(sh->out, "wrote %s\n", path);
        for (int k = 0; !rc && k < nleft; k++) fprintf(sh->out, "note: %s\n", left[k]);
        if (!rc && cx.nsets > 1)  // said here too: the subtitle is easy to miss
            fprintf(sh->out, "note: the eval curves show %s %d eval sets (%d eval%s); evals of another corpus, split or window size are not on them\n",
                    cx.set_open ? "the open corpus's eval set, one of" : "the latest of", cx.nsets, cx.set_evals, cx.set_evals == 1 ? "" : "s");
    }
    for (int k = 0; k < np; k++) free(panels[k].buf);
    free(panels);
    free(cx.train); free(cx.train_time);
    return rc;
}

// ":plot " argument 1: metric names (after the last comma of a list); later words: options
char **complete_plot(Shell *sh, int argi, const char *prefix) {
    (void)sh;
    static const char *const opts[] = {"out=", "x=step", "x=tokens", "x=time", "log=on", "log=off", "size=", NULL};
    const char *comma = argi == 1 ? strrchr(prefix, ',') : NULL;
    const char *part = comma ? comma + 1 : prefix;
    size_t keep = comma ? (size_t)(comma - prefix + 1) : 0, pl = strlen(part);
    char **v = calloc(16, sizeof(char *));
    int n = 0;
    const char *const *list = argi == 1 ? metrics : opts;
    for (int k = 0; list[k] && n < 15; k++) {
        if (strncmp(list[k], part, pl)) continue;
        v[n] = malloc(keep + strlen(list[k]) + 1);
        memcpy(v[n], prefix, keep);
        strcpy(v[n] + keep, list[k]);
        n++;
    }
    if (!n) { free(v); return NULL; }
    return v;
}
