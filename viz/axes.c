// axes.c — see axes.h. Everything is measured with the real font so margins fit the labels.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "axes.h"
#include "font.h"

#define C_TEXT 0x222222
#define C_MUTED 0x555555
#define C_GRID 0xe8e8e8
#define C_SPINE 0x444444

#define TICK_PX(a) (12.5 * (a)->s)
#define LABEL_PX(a) (13.5 * (a)->s)
#define TITLE_PX(a) (16.5 * (a)->s)
#define SUB_PX(a) (12.5 * (a)->s)

uint32_t viz_palette(int i) {
    static const uint32_t tab10[10] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                       0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
    return tab10[((i % 10) + 10) % 10];
}

uint32_t viz_ramp(double t) {
    // viridis at 6 stops, interpolated; stops to 0.9 so the last line is not a faint yellow
    static const double st[6][3] = {{68, 1, 84}, {65, 68, 135}, {42, 120, 142},
                                    {34, 168, 132}, {122, 209, 81}, {220, 200, 30}};
    t = !(t >= 0) ? 0 : t > 1 ? 1 : t;
    double f = t * 5;
    int i = (int)f;
    if (i >= 5) i = 4;
    f -= i;
    uint32_t rgb = 0;
    for (int k = 0; k < 3; k++) rgb = rgb << 8 | (uint32_t)lrint(st[i][k] + (st[i + 1][k] - st[i][k]) * f);
    return rgb;
}

double viz_axes_scale(int w, int h) {
    double s = sqrt((double)w * h / (960.0 * 540.0));
    return s < 0.75 ? 0.75 : s > 2.5 ? 2.5 : s;
}

double viz_ax_x(const VizAxes *a, double x) {
    return a->x0 + (x - a->xmin) / (a->xmax - a->xmin) * (a->x1 - a->x0);
}

double viz_ax_y(const VizAxes *a, double y) {
    double t = a->logy ? (log10(y) - log10(a->ymin)) / (log10(a->ymax) - log10(a->ymin))
                       : (y - a->ymin) / (a->ymax - a->ymin);
    return a->y1 - t * (a->y1 - a->y0);
}

static double max_label_w(const VizTicks *t, double px) {
    double w = 0;
    for (int i = 0; i < t->n; i++) w = fmax(w, viz_text_width(t->lab[i], px, VIZ_REGULAR));
    return w;
}

// x ticks: start dense, thin out until the widest label plus a gap fits every interval
static void pick_x_ticks(VizAxes *a) {
    double px = TICK_PX(a), plot_w = a->x1 - a->x0;
    for (int target = (int)(plot_w / (60 * a->s)) + 1; target >= 2; target--) {
        viz_ticks(a->xmin, a->xmax, target, a->xint, 0, &a->xt);
        if (a->xt.n < 2) return;
        double gap = (viz_ax_x(a, a->xt.v[1]) - viz_ax_x(a, a->xt.v[0]));
        if (max_label_w(&a->xt, px) + 2.2 * px <= gap) return;
    }
}

void viz_axes_layout(VizCanvas *c, VizAxes *a, int bx, int by, int bw, int bh) {
    (void)c;
    double s = a->s, pad = 14 * s, tick = 5 * s;
    double tpx = TICK_PX(a), lpx = LABEL_PX(a);
    double top = pad;
    if (a->title && *a->title) top += viz_text_ascent(TITLE_PX(a), VIZ_BOLD) + viz_text_descent(TITLE_PX(a), VIZ_BOLD);
    if (a->subtitle && *a->subtitle) top += 2 * s + viz_text_ascent(SUB_PX(a), 0) + viz_text_descent(SUB_PX(a), 0);
    top += 10 * s;
    double bottom = pad + tick + 4 * s + tpx * 1.2;
    if (a->xlabel && *a->xlabel) bottom += 6 * s + lpx * 1.2;
    a->y0 = by + top;
    a->y1 = by + bh - bottom;
    // y ticks depend on the plot height only; their label width sets the left margin
    int ty = (int)((a->y1 - a->y0) / (3.4 * tpx));
    viz_ticks(a->ymin, a->ymax, ty < 2 ? 2 : ty, a->yint, a->logy, &a->yt);
    double left = pad + max_label_w(&a->yt, tpx) + tick + 5 * s;
    if (a->ylabel && *a->ylabel) left += lpx * 1.2 + 6 * s;
    a->x0 = bx + left;
    a->x1 = bx + bw - 2 * pad;
    // keep the last x label inside the image
    pick_x_ticks(a);
    if (a->xt.n) {
        double last = viz_ax_x(a, a->xt.v[a->xt.n - 1]) + viz_text_width(a->xt.lab[a->xt.n - 1], tpx, 0) / 2;
        if (last > bx + bw - 4 * s) { a->x1 -= last - (bx + bw - 4 * s); pick_x_ticks(a); }
    }
}

void viz_axes_set_x0(VizAxes *a, double x0) {
    a->x0 = x0;
    pick_x_ticks(a);
}

void viz_axes_background(VizCanvas *c, const VizAxes *a) {
    double lw = fmax(1.0, a->s);
    for (int i = 0; i < a->yt.n; i++) {
        double y = round(viz_ax_y(a, a->yt.v[i])) + 0.5;
        viz_fill_rect(c, a->x0, y - lw / 2, a->x1, y + lw / 2, C_GRID, 1);
    }
    for (int i = 0; i < a->xt.n; i++) {
        double x = round(viz_ax_x(a, a->xt.v[i])) + 0.5;
        viz_fill_rect(c, x - lw / 2, a->y0, x + lw / 2, a->y1, C_GRID, 1);
    }
}

static void axis_label(char *buf, size_t n, const char *label, const char *factor) {
    if (factor[0]) snprintf(buf, n, "%s (%s)", label ? label : "", factor);
    else snprintf(buf, n, "%s", label ? label : "");
}

void viz_axes_frame(VizCanvas *c, const VizAxes *a) {
    double s = a->s, lw = fmax(1.0, s), tick = 5 * s, tpx = TICK_PX(a), lpx = LABEL_PX(a);
    // spines: left and bottom dark, top and right light (a box that does not shout)
    viz_fill_rect(c, a->x0 - lw, a->y0, a->x0, a->y1 + lw, C_SPINE, 1);
    viz_fill_rect(c, a->x0 - lw, a->y1, a->x1, a->y1 + lw, C_SPINE, 1);
    viz_fill_rect(c, a->x0, a->y0 - lw, a->x1 + lw, a->y0, 0xbbbbbb, 1);
    viz_fill_rect(c, a->x1, a->y0, a->x1 + lw, a->y1, 0xbbbbbb, 1);
    for (int i = 0; i < a->yt.n; i++) {
        double y = round(viz_ax_y(a, a->yt.v[i])) + 0.5;
        viz_fill_rect(c, a->x0 - lw - tick, y - lw / 2, a->x0 - lw, y + lw / 2, C_SPINE, 1);
        viz_text(c, a->x0 - lw - tick - 4 * s, y, a->yt.lab[i], tpx, VIZ_REGULAR, C_TEXT, 1, 0, 0);
    }
    for (int i = 0; i < a->yt.nminor; i++) {
        double y = round(viz_ax_y(a, a->yt.minor[i])) + 0.5;
        if (y < a->y0 || y > a->y1) continue;
        viz_fill_rect(c, a->x0 - lw - tick * 0.6, y - lw / 2, a->x0 - lw, y + lw / 2, C_SPINE, 1);
    }
    for (int i = 0; i < a->xt.n; i++) {
        double x = round(viz_ax_x(a, a->xt.v[i])) + 0.5;
        viz_fill_rect(c, x - lw / 2, a->y1 + lw, x + lw / 2, a->y1 + lw + tick, C_SPINE, 1);
        viz_text(c, x, a->y1 + lw + tick + 4 * s, a->xt.lab[i], tpx, VIZ_REGULAR, C_TEXT, 0, -1, 0);
    }
    char buf[300];
    double xlab_y = a->y1 + lw + tick + 4 * s + tpx * 1.2 + 6 * s;
    axis_label(buf, sizeof buf, a->xlabel, a->xt.factor);
    if (buf[0]) viz_text(c, (a->x0 + a->x1) / 2, xlab_y, buf, lpx, VIZ_REGULAR, C_TEXT, 0, -1, 0);
    axis_label(buf, sizeof buf, a->ylabel, a->yt.factor);
    if (buf[0]) {
        double w = 0;
        for (int i = 0; i < a->yt.n; i++) w = fmax(w, viz_text_width(a->yt.lab[i], tpx, 0));
        double x = a->x0 - lw - tick - 4 * s - w - 8 * s;   // right edge of the rotated label
        viz_text(c, x, (a->y0 + a->y1) / 2, buf, lpx, VIZ_REGULAR, C_TEXT, 0, 1, 1);
    }
    // title (bold) and subtitle, centred on the plot area; shrunk to fit when long
    double ty = a->y0 - 10 * s;
    if (a->subtitle && *a->subtitle) {
        double px = SUB_PX(a), w = viz_text_width(a->subtitle, px, 0), room = a->x1 - a->x0 + 40 * s;
        if (w > room) px *= room / w;
        viz_text(c, (a->x0 + a->x1) / 2, ty, a->subtitle, px, VIZ_REGULAR, C_MUTED, 0, 1, 0);
        ty -= viz_text_ascent(SUB_PX(a), 0) + viz_text_descent(SUB_PX(a), 0) + 2 * s;
    }
    if (a->title && *a->title) {
        double px = TITLE_PX(a), w = viz_text_width(a->title, px, VIZ_BOLD), room = a->x1 - a->x0 + 40 * s;
        if (w > room) px *= room / w;
        viz_text(c, (a->x0 + a->x1) / 2, ty, a->title, px, VIZ_BOLD, C_TEXT, 0, 1, 0);
    }
}

static int overlaps(const double *r, const double *taken, int n) {
    for (int i = 0; i < n; i++) {
        const double *t = taken + 4 * i;
        if (r[0] < t[2] && t[0] < r[2] && r[1] < t[3] && t[1] < r[3]) return 1;
    }
    return 0;
}

void viz_axes_ref_line(VizCanvas *c, const VizAxes *a, double y, uint32_t rgb) {
    double py = viz_ax_y(a, y), s = a->s;
    if (!(py >= a->y0 - 0.5 && py <= a->y1 + 0.5)) return;
    viz_canvas_clip(c, (int)a->x0, (int)a->y0, (int)ceil(a->x1), (int)ceil(a->y1));
    viz_dashed_hline(c, a->x0 + 2 * s, a->x1 - 2 * s, py, 1.6 * s, 7 * s, 4 * s, rgb, 0.95f);
    viz_canvas_noclip(c);
}

static int points_in(const double *r, const double *px, const double *py, int np) {
    int k = 0;
    for (int i = 0; i < np; i++) k += px[i] >= r[0] && px[i] <= r[2] && py[i] >= r[1] && py[i] <= r[3];
    return k;
}

void viz_axes_ref_label(VizCanvas *c, const VizAxes *a, double y, const char *label, uint32_t rgb,
                        const double *px, const double *py, int np, double *taken, int *ntaken) {
    double ly = viz_ax_y(a, y), s = a->s;
    if (!(ly >= a->y0 - 0.5 && ly <= a->y1 + 0.5) || !label || !*label) return;
    double fpx = 12 * s, w = viz_text_width(label, fpx, 0), h = viz_text_ascent(fpx, 0) + viz_text_descent(fpx, 0);
    // right end above / below the line, then the left end, then a third and two thirds along:
    // the spot with the fewest data points under it and no other label or legend
    double xs[4] = {a->x1 - 6 * s - w, a->x0 + 6 * s, a->x0 + (a->x1 - a->x0 - w) / 3, a->x0 + 2 * (a->x1 - a->x0 - w) / 3};
    double ys[2] = {ly - 3 * s - h, ly + 3 * s};
    double best[4] = {0}, bcost = 1e300;
    for (int k = 0; k < 8; k++) {
        double r[4] = {xs[k / 2] - 3 * s, ys[k % 2], xs[k / 2] + w + 3 * s, ys[k % 2] + h};
        double cost = points_in(r, px, py, np) + k * 0.1;
        if (r[1] < a->y0 || r[3] > a->y1) cost += 1e6;
        if (overlaps(r, taken, *ntaken)) cost += 1e5;
        if (cost < bcost) { bcost = cost; memcpy(best, r, sizeof r); }
    }
    viz_fill_rect(c, best[0], best[1], best[2], best[3], 0xffffff, 0.85f);
    viz_text(c, best[0] + 3 * s, best[1], label, fpx, VIZ_REGULAR, rgb, -1, -1, 0);
    if (*ntaken < 16) { memcpy(taken + 4 * *ntaken, best, sizeof best); (*ntaken)++; }
}

// legend geometry: columns when the entries do not fit one column
typedef struct { double fpx, row, sw, pad, colgap, W, H, colw[16]; int ncol, nrow; } LegendGeom;

static void legend_geom(const VizAxes *a, const VizLegendItem *it, int n, LegendGeom *g) {
    double s = a->s;
    memset(g, 0, sizeof *g);
    g->fpx = 12.5 * s; g->row = 1.45 * g->fpx; g->sw = 22 * s; g->pad = 8 * s; g->colgap = 14 * s;
    int max_rows = (int)((a->y1 - a->y0 - 2 * g->pad - 16 * s) / g->row);
    if (max_rows < 1) max_rows = 1;
    g->ncol = (n + max_rows - 1) / max_rows;
    if (g->ncol > 16) g->ncol = 16;
    g->nrow = (n + g->ncol - 1) / g->ncol;
    g->W = 2 * g->pad - g->colgap;
    for (int i = 0; i < n; i++) {
        int col = i / g->nrow;
        if (col >= g->ncol) break;
        g->colw[col] = fmax(g->colw[col], g->sw + 6 * s + viz_text_width(it[i].label, g->fpx, 0));
    }
    for (int k = 0; k < g->ncol; k++) g->W += g->colw[k] + g->colgap;
    g->H = 2 * g->pad + g->nrow * g->row - (g->row - g->fpx) + 2 * s;
}

void viz_axes_legend_place(const VizAxes *a, const VizLegendItem *it, int n, const double *px, const double *py,
                           int np, const double *taken, int ntaken, double box[4]) {
    LegendGeom g;
    legend_geom(a, it, n, &g);
    double s = a->s, m = 10 * s, W = g.W, H = g.H, best = 1e300;
    // the corner whose box covers the fewest data points (ties: top right, top left, ...)
    double cx[4] = {a->x1 - m - W, a->x0 + m, a->x1 - m - W, a->x0 + m};
    double cy[4] = {a->y0 + m, a->y0 + m, a->y1 - m - H, a->y1 - m - H};
    for (int k = 0; k < 4; k++) {
        double r[4] = {cx[k], cy[k], cx[k] + W, cy[k] + H};
        double grow[4] = {r[0] - 4 * s, r[1] - 4 * s, r[2] + 4 * s, r[3] + 4 * s};
        double cost = points_in(grow, px, py, np);
        if (overlaps(r, taken, ntaken)) cost += 8;   // a label already placed: worth a few points
        if (cost < best - 1e-9) { best = cost; memcpy(box, r, sizeof r); }
    }
}

void viz_axes_legend_draw(VizCanvas *c, const VizAxes *a, const VizLegendItem *it, int n, const double box[4]) {
    if (n <= 0) return;
    LegendGeom g;
    legend_geom(a, it, n, &g);
    double s = a->s, bx = box[0], by = box[1], W = g.W, H = g.H, lw = fmax(1.0, s);
    viz_fill_rect(c, bx, by, bx + W, by + H, 0xffffff, 0.88f);
    viz_fill_rect(c, bx, by, bx + W, by + lw, 0xcccccc, 1);
    viz_fill_rect(c, bx, by + H - lw, bx + W, by + H, 0xcccccc, 1);
    viz_fill_rect(c, bx, by, bx + lw, by + H, 0xcccccc, 1);
    viz_fill_rect(c, bx + W - lw, by, bx + W, by + H, 0xcccccc, 1);
    double x = bx + g.pad;
    for (int col = 0; col < g.ncol; col++) {
        for (int r = 0; r < g.nrow; r++) {
            int i = col * g.nrow + r;
            if (i >= n) break;
            double yc = by + g.pad + r * g.row + g.fpx / 2 + s;
            double w = it[i].width > 0 ? it[i].width : 2 * s;
            if (it[i].marker != 2) viz_mask_segment(c, x, yc, x + g.sw, yc, w);  // (2: points only, as drawn)
            if (it[i].marker) viz_mask_disc(c, x + g.sw / 2, yc, 3 * s);
            viz_mask_composite(c, it[i].rgb, it[i].alpha > 0 ? it[i].alpha : 1);
            if (it[i].marker && it[i].hollow) {  // a ring, as on the chart
                viz_mask_disc(c, x + g.sw / 2, yc, 1.6 * s);
                viz_mask_composite(c, 0xffffff, 1);
            }
            viz_text(c, x + g.sw + 6 * s, yc, it[i].label, g.fpx, VIZ_REGULAR, C_TEXT, -1, 0, 0);
        }
        x += g.colw[col] + g.colgap;
    }
}
