// plot.c — see plot.h. A chart is: validate and range the data, lay out the axes, grid, series
// (each one an anti-aliased polyline composited once), reference lines, frame and labels on
// top, legend last (in the emptiest corner), then one stbi_write_png.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "axes.h"
#include "font.h"
#include "plot.h"
#include "png.h"

#define MAX_SIDE 8192

static int fail(char *err, size_t n, const char *fmt, const char *a) {
    if (err && n) snprintf(err, n, fmt, a);
    return 1;
}

int viz_png_available(void) {
#ifdef DM_HAVE_PNG
    return 1;
#else
    return 0;
#endif
}

static int ok_point(const VizChart *c, double x, double y) {
    return isfinite(x) && isfinite(y) && (!c->logy || y > 0);
}

// Range the data of one chart; 1 with err when there is nothing to draw.
static int chart_ranges(const VizChart *c, VizAxes *a, long *nonfinite, long *nonpos, const double *xr, char *err, size_t n) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    long good = 0, any_finite = 0;
    *nonfinite = 0; *nonpos = 0;
    for (int s = 0; s < c->nseries; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            double x = c->series[s].x[i], y = c->series[s].y[i];
            if (!isfinite(x) || !isfinite(y)) { (*nonfinite)++; continue; }
            any_finite++;
            if (c->logy && y <= 0) { (*nonpos)++; continue; }
            good++;
            x0 = fmin(x0, x); x1 = fmax(x1, x); y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    const char *what = c->title && *c->title ? c->title : "chart";
    if (!any_finite) return fail(err, n, "nothing to plot in '%s': no finite values", what);
    if (!good) return fail(err, n, "log scale needs values > 0 and '%s' has none (use log=off)", what);
    for (int r = 0; r < c->nrefs; r++) {
        double y = c->refs[r].y;
        if (isfinite(y) && (!c->logy || y > 0)) { y0 = fmin(y0, y); y1 = fmax(y1, y); }
    }
    if (xr) { x0 = xr[0]; x1 = xr[1]; }   // a shared x range (stacked panels)
    // x: a small margin so end points and markers are not cut by the frame
    // (one x: a range around it, but not below 0 when it is not: step -1 was a tick under a chart of
    // step 0 alone: QA, session 31)
    if (x1 == x0) {
        double d = c->xint ? 1 : fmax(fabs(x0) * 0.05, 0.5), lo = x0 - d;
        x1 += d;
        x0 = x0 >= 0 && lo < 0 ? 0 : lo;
    }
    double px = fmax((x1 - x0) * 0.02, c->xint ? 0.25 : 0);
    a->xmin = x0 - px; a->xmax = x1 + px;
    if (c->logy) {
        double l0 = log10(y0), l1 = log10(y1);
        if (l1 - l0 < 1e-9) { l0 -= 0.2; l1 += 0.2; }
        double p = (l1 - l0) * 0.06;
        // the margin stays inside the doubles (a top decade of ~290 made ymax inf, and the ticks
        // and pixels after it overflowed: QA, session 27)
        a->ymin = pow(10, fmax(l0 - p, -307.0)); a->ymax = pow(10, fmin(l1 + p, 308.25));
    } else {
        // (all zero: 0 to 1, not -1 to 1: an lr of 0 got negative ticks: QA, session 31)
        if (y1 == y0 && y0 == 0) y1 = 1;
        else if (y1 == y0) { double d = fabs(y0) * 0.05; y0 -= d; y1 += d; }
        double p = (y1 - y0) * 0.06;
        a->ymin = y0 - p; a->ymax = y1 + p;
    }
    // a span no double holds (values near +-1.8e308 of both signs): nothing to scale by
    if (!isfinite(a->xmax - a->xmin) || !isfinite(a->ymax - a->ymin))
        return fail(err, n, "'%s' spans more than a chart's scale can hold (values of both signs near 1.8e308): nothing drawn", what);
    return 0;
}

int viz_chart_range(const VizChart *c, double r[4], char *err, size_t n) {
    VizAxes a;
    memset(&a, 0, sizeof a);
    long nonfinite, nonpos;
    if (chart_ranges(c, &a, &nonfinite, &nonpos, NULL, err, n)) return 1;
    r[0] = a.xmin; r[1] = a.xmax; r[2] = a.ymin; r[3] = a.ymax;
    return 0;
}

// a growable list of extra points (pixels)
typedef struct { double *x, *y; long n, cap; } Pts;
static void pts_push(Pts *p, double x, double y) {
    if (p->n == p->cap) {
        long cap = p->cap ? 2 * p->cap : 1024;
        double *nx = realloc(p->x, sizeof(double) * cap), *ny = nx ? realloc(p->y, sizeof(double) * cap) : NULL;
        if (nx) p->x = nx;
        if (!nx || !ny) return;   // out of memory: legend placement just sees fewer points
        p->y = ny; p->cap = cap;
    }
    p->x[p->n] = x; p->y[p->n] = y; p->n++;
}

// The subtitle: the chart's own, then what was not drawn (gaps left on purpose are the caller's
// to explain, not counted)
static void chart_subtitle(const VizChart *c, long nonfinite, long nonpos, char *sub, size_t nsub) {
    sub[0] = 0;
    if (c->subtitle && *c->subtitle) snprintf(sub, nsub, "%s", c->subtitle);
    nonfinite -= c->gaps < nonfinite ? c->gaps : nonfinite;
    if (nonfinite) snprintf(sub + strlen(sub), nsub - strlen(sub), "%s%ld non-finite skipped", sub[0] ? "; " : "", nonfinite);
    if (nonpos) snprintf(sub + strlen(sub), nsub - strlen(sub), "%s%ld values <= 0 not shown on the log scale", sub[0] ? "; " : "", nonpos);
}

int viz_chart_subtitle(const VizChart *c, char *sub, size_t nsub, char *err, size_t n) {
    VizAxes a;
    memset(&a, 0, sizeof a);
    long nonfinite, nonpos;
    if (chart_ranges(c, &a, &nonfinite, &nonpos, NULL, err, n)) return 1;
    chart_subtitle(c, nonfinite, nonpos, sub, nsub);
    return 0;
}

// Ranges and layout of one panel (no drawing); sub receives the subtitle with the counts.
static int chart_prepare(VizCanvas *cv, const VizChart *c, VizAxes *a, char *sub, size_t nsub, int bx, int by, int bw,
                         int bh, double s, const double *xr, char *err, size_t n) {
    memset(a, 0, sizeof *a);
    long nonfinite, nonpos;
    if (chart_ranges(c, a, &nonfinite, &nonpos, xr, err, n)) return 1;
    chart_subtitle(c, nonfinite, nonpos, sub, nsub);
    a->title = c->title; a->subtitle = sub; a->xlabel = c->xlabel; a->ylabel = c->ylabel;
    a->logy = c->logy; a->xint = c->xint; a->s = s;
    viz_axes_layout(cv, a, bx, by, bw, bh);
    return 0;
}

// min_x0: the left edge of the plot area at least here (stacked panels share one left edge)
static int chart_draw(VizCanvas *cv, const VizChart *c, int bx, int by, int bw, int bh, double s, const double *xr,
                      double min_x0, char *err, size_t n) {
    VizAxes a;
    char sub[400];
    if (chart_prepare(cv, c, &a, sub, sizeof sub, bx, by, bw, bh, s, xr, err, n)) return 1;
    if (a.x0 < min_x0) viz_axes_set_x0(&a, min_x0);
    viz_axes_background(cv, &a);
    for (int r = 0; r < c->nrefs; r++)
        if (isfinite(c->refs[r].y) && (!c->logy || c->refs[r].y > 0)) viz_axes_ref_line(cv, &a, c->refs[r].y, c->refs[r].rgb);

    // series, in pixels; all the points are kept for placing the legend
    long total = 0;
    for (int k = 0; k < c->nseries; k++) total += c->series[k].n;
    double *allx = malloc(sizeof(double) * (total + 1)), *ally = malloc(sizeof(double) * (total + 1));
    if (!allx || !ally) { free(allx); free(ally); return fail(err, n, "out of memory drawing '%s'", c->title ? c->title : ""); }
    long np = 0;
    Pts extra = {0};
    VizLegendItem items[64];
    int nitems = 0;
    viz_canvas_clip(cv, (int)a.x0, (int)a.y0, (int)ceil(a.x1), (int)ceil(a.y1));
    for (int k = 0; k < c->nseries; k++) {
        const VizSeries *sr = &c->series[k];
        double w = (sr->width > 0 ? sr->width : 2) * s;
        double *px = allx + np, *py = ally + np;
        int good = 0;
        for (int i = 0; i < sr->n; i++) {
            int ok = ok_point(c, sr->x[i], sr->y[i]);
            px[i] = ok ? viz_ax_x(&a, sr->x[i]) : NAN;
            py[i] = ok ? viz_ax_y(&a, sr->y[i]) : NAN;
            good += ok;
        }
        // a skipped point breaks the line: the segment would claim a value that was never seen
        if (sr->markers != 2)
            for (int i = 0; i + 1 < sr->n; i++) viz_mask_segment(cv, px[i], py[i], px[i + 1], py[i + 1], w);
        int dots = sr->markers > 0 || (sr->markers == 0 && good <= 40);
        for (int i = 0; i < sr->n; i++) {
            int lone = (i == 0 || !isfinite(py[i - 1])) && (i + 1 == sr->n || !isfinite(py[i + 1]));
            if (isfinite(py[i]) && (dots || lone)) viz_mask_disc(cv, px[i], py[i], fmax(w * 1.4, 2.5 * s));
        }
        viz_mask_composite(cv, sr->rgb, sr->alpha > 0 ? sr->alpha : 1);
        if (sr->hollow && dots) {  // rings: a white centre in each dot
            for (int i = 0; i < sr->n; i++)
                if (isfinite(py[i])) viz_mask_disc(cv, px[i], py[i], 0.5 * fmax(w * 1.4, 2.5 * s));
            viz_mask_composite(cv, 0xffffff, 1);
        }
        for (int i = 0; i < sr->n; i++)
            if (isfinite(py[i])) { allx[np] = px[i]; ally[np] = py[i]; np++; }
        // and points along long segments, so a sparse eval curve still keeps labels off itself
        for (int i = 0; i + 1 < sr->n && sr->markers != 2; i++) {
            double x0 = px[i], y0 = py[i], x1 = px[i + 1], y1 = py[i + 1];
            if (!isfinite(y0) || !isfinite(y1)) continue;
            int m = (int)(hypot(x1 - x0, y1 - y0) / (6 * s));
            for (int j = 1; j < m; j++) pts_push(&extra, x0 + (x1 - x0) * j / m, y0 + (y1 - y0) * j / m);
        }
        if (sr->label && *sr->label && good && nitems < 64)
            items[nitems++] = (VizLegendItem){sr->label, sr->rgb, w, sr->alpha, sr->markers == 2 ? 2 : dots, sr->hollow};
    }
    viz_canvas_noclip(cv);
    // reference lines count as data for the legend's placement (it should not hide them)
    for (int r = 0; r < c->nrefs; r++) {
        if (!isfinite(c->refs[r].y) || (c->logy && c->refs[r].y <= 0)) continue;
        double ry = viz_ax_y(&a, c->refs[r].y);
        for (double x = a.x0; x <= a.x1; x += 12 * s) pts_push(&extra, x, ry);
    }
    // vertices first, then the segment samples: one array for the placement tests
    double *tx = realloc(allx, sizeof(double) * (np + extra.n + 1)), *ty = tx ? realloc(ally, sizeof(double) * (np + extra.n + 1)) : NULL;
    if (tx) allx = tx;
    if (ty) ally = ty;
    if (ty && extra.n) {  // (one point draws no segment: extra is empty and its arrays NULL)
        ally = ty;
        memcpy(allx + np, extra.x, sizeof(double) * extra.n);
        memcpy(ally + np, extra.y, sizeof(double) * extra.n);
        np += extra.n;
    }
    free(extra.x); free(extra.y);
    double taken[64];
    int ntaken = 0;
    // one entry needs no legend: the title and the axis already name it
    double box[4];
    int legend = nitems > 1;
    if (legend) {
        viz_axes_legend_place(&a, items, nitems, allx, ally, (int)np, NULL, 0, box);
        memcpy(taken, box, sizeof box);
        ntaken = 1;
    }
    for (int r = 0; r < c->nrefs; r++)
        if (isfinite(c->refs[r].y) && (!c->logy || c->refs[r].y > 0))
            viz_axes_ref_label(cv, &a, c->refs[r].y, c->refs[r].label, c->refs[r].rgb, allx, ally, (int)np, taken, &ntaken);
    viz_axes_frame(cv, &a);
    if (legend) viz_axes_legend_draw(cv, &a, items, nitems, box);
    free(allx); free(ally);
    return 0;
}

int viz_charts_png(const char *path, const VizChart *c, int ncharts, int width, int height, char *err, size_t n) {
    if (viz_png_check(err, n)) return 1;
    if (ncharts < 1) return fail(err, n, "%snothing to plot", "");
    if (width <= 0) width = 960;
    if (height <= 0) height = ncharts == 1 ? 540 : 360 * ncharts;
    // (smaller, the legend and the labels no longer fit: 160 x 120 per panel drew legends past
    // both edges of the image: QA, session 31)
    if (width < 320 || height < 160 * ncharts || width > MAX_SIDE || height > MAX_SIDE)
        return fail(err, n, "%schart size out of range: at least 320 x 160 per panel, at most 8192 x 8192", "");
    VizCanvas cv;
    if (viz_canvas_init(&cv, width, height, 0xffffff)) return fail(err, n, "%sout of memory for the image", "");
    // fonts follow the panel size, so stacked panels keep readable labels; but never larger than
    // the panel's narrow side allows (8192 x 120 took fonts from its area, 1.4x, and its title
    // ran over the frame; 200 x 8192 left a plot 27 px wide: QA, session 31)
    double s = viz_axes_scale(width, ncharts == 1 ? height : (int)fmax(height / ncharts, 400));
    double cap = 1.5 * fmin(width / 960.0, (double)height / ncharts / 540.0);
    if (s > cap) s = cap < 0.75 ? 0.75 : cap;
    // the x range shared by the share_x panels: the union of their drawable points
    double xr[2] = {INFINITY, -INFINITY};
    for (int k = 0; k < ncharts; k++)
        for (int j = 0; c[k].share_x && j < c[k].nseries; j++)
            for (int i = 0; i < c[k].series[j].n; i++)
                if (ok_point(&c[k], c[k].series[j].x[i], c[k].series[j].y[i])) {
                    xr[0] = fmin(xr[0], c[k].series[j].x[i]); xr[1] = fmax(xr[1], c[k].series[j].x[i]);
                }
    // and their common left edge: the widest y-label margin among them
    double left = 0;
    int rc = 0;
    for (int k = 0; k < ncharts && !rc; k++) {
        int y0 = (int)((long)height * k / ncharts), y1 = (int)((long)height * (k + 1) / ncharts);
        VizAxes a;
        char sub[400];
        if (c[k].share_x && !chart_prepare(&cv, &c[k], &a, sub, sizeof sub, 0, y0, width, y1 - y0, s, xr, NULL, 0))
            left = fmax(left, a.x0);
    }
    for (int k = 0; k < ncharts && !rc; k++) {
        int y0 = (int)((long)height * k / ncharts), y1 = (int)((long)height * (k + 1) / ncharts);
        int share = c[k].share_x && xr[0] <= xr[1];
        rc = chart_draw(&cv, &c[k], 0, y0, width, y1 - y0, s, share ? xr : NULL, share ? left : 0, err, n);
    }
    if (!rc) rc = viz_write_png(path, &cv, err, n);
    viz_canvas_free(&cv);
    return rc;
}

int viz_chart_png(const char *path, const VizChart *c, char *err, size_t n) {
    return viz_charts_png(path, c, 1, c->width, c->height, err, n);
}
