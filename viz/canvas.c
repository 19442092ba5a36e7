// canvas.c — see canvas.h. Anti-aliasing by exact distance: a pixel's coverage of a thick
// segment is clamp(w/2 + 0.5 - distance(pixel centre, segment), 0, 1), a box-filter estimate
// that is accurate for lines wider than a pixel and costs one projection per pixel.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "canvas.h"

int viz_canvas_init(VizCanvas *c, int w, int h, uint32_t bg) {
    memset(c, 0, sizeof *c);
    c->px = malloc((size_t)w * h * 3);
    c->mask = calloc((size_t)w * h, sizeof(float));
    if (!c->px || !c->mask) { free(c->px); free(c->mask); c->px = NULL; c->mask = NULL; return 1; }
    c->w = w; c->h = h;
    for (size_t i = 0; i < (size_t)w * h; i++) {
        c->px[3 * i + 0] = (bg >> 16) & 255; c->px[3 * i + 1] = (bg >> 8) & 255; c->px[3 * i + 2] = bg & 255;
    }
    c->mx0 = w; c->my0 = h; c->mx1 = 0; c->my1 = 0;
    viz_canvas_noclip(c);
    return 0;
}

void viz_canvas_free(VizCanvas *c) { free(c->px); free(c->mask); c->px = NULL; c->mask = NULL; }

void viz_canvas_clip(VizCanvas *c, int x0, int y0, int x1, int y1) {
    c->cx0 = x0 < 0 ? 0 : x0; c->cy0 = y0 < 0 ? 0 : y0;
    c->cx1 = x1 > c->w ? c->w : x1; c->cy1 = y1 > c->h ? c->h : y1;
}

void viz_canvas_noclip(VizCanvas *c) { c->cx0 = 0; c->cy0 = 0; c->cx1 = c->w; c->cy1 = c->h; }

void viz_blend(VizCanvas *c, int x, int y, uint32_t rgb, float a) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h || a <= 0) return;
    if (a > 1) a = 1;
    uint8_t *p = c->px + 3 * ((size_t)y * c->w + x);
    float col[3] = {(float)((rgb >> 16) & 255), (float)((rgb >> 8) & 255), (float)(rgb & 255)};
    for (int k = 0; k < 3; k++) p[k] = (uint8_t)lrintf(p[k] + (col[k] - p[k]) * a);
}

// Fractional edges get partial coverage so thin bars and ticks stay crisp but exact.
void viz_fill_rect(VizCanvas *c, double x0, double y0, double x1, double y1, uint32_t rgb, float a) {
    if (x1 < x0) { double t = x0; x0 = x1; x1 = t; }
    if (y1 < y0) { double t = y0; y0 = y1; y1 = t; }
    int ix0 = (int)floor(x0), ix1 = (int)ceil(x1), iy0 = (int)floor(y0), iy1 = (int)ceil(y1);
    for (int y = iy0; y < iy1; y++) {
        double cy = fmin(y + 1, y1) - fmax(y, y0);
        if (cy <= 0) continue;
        for (int x = ix0; x < ix1; x++) {
            double cx = fmin(x + 1, x1) - fmax(x, x0);
            if (cx > 0) viz_blend(c, x, y, rgb, (float)(a * cx * cy));
        }
    }
}

static void mask_put(VizCanvas *c, int x, int y, float v) {
    float *m = c->mask + (size_t)y * c->w + x;
    if (v > *m) *m = v;
    if (x < c->mx0) c->mx0 = x;
    if (x + 1 > c->mx1) c->mx1 = x + 1;
    if (y < c->my0) c->my0 = y;
    if (y + 1 > c->my1) c->my1 = y + 1;
}

void viz_mask_segment(VizCanvas *c, double x0, double y0, double x1, double y1, double w) {
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1)) return;
    double r = w / 2 + 1;
    int bx0 = (int)floor(fmin(x0, x1) - r), bx1 = (int)ceil(fmax(x0, x1) + r);
    int by0 = (int)floor(fmin(y0, y1) - r), by1 = (int)ceil(fmax(y0, y1) + r);
    if (bx0 < c->cx0) bx0 = c->cx0;
    if (by0 < c->cy0) by0 = c->cy0;
    if (bx1 > c->cx1) bx1 = c->cx1;
    if (by1 > c->cy1) by1 = c->cy1;
    double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = by0; y < by1; y++)
        for (int x = bx0; x < bx1; x++) {
            double px = x + 0.5 - x0, py = y + 0.5 - y0;
            double t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            double cov = w / 2 + 0.5 - sqrt(ex * ex + ey * ey);
            if (cov > 0) mask_put(c, x, y, (float)(cov > 1 ? 1 : cov));
        }
}

void viz_mask_disc(VizCanvas *c, double x, double y, double r) { viz_mask_segment(c, x, y, x, y, 2 * r); }

void viz_mask_composite(VizCanvas *c, uint32_t rgb, float a) {
    for (int y = c->my0; y < c->my1; y++)
        for (int x = c->mx0; x < c->mx1; x++) {
            float *m = c->mask + (size_t)y * c->w + x;
            if (*m > 0) viz_blend(c, x, y, rgb, *m * a);
            *m = 0;
        }
    c->mx0 = c->w; c->my0 = c->h; c->mx1 = 0; c->my1 = 0;
}

void viz_polyline(VizCanvas *c, const double *x, const double *y, int n, double w, uint32_t rgb, float a) {
    for (int i = 0; i + 1 < n; i++) viz_mask_segment(c, x[i], y[i], x[i + 1], y[i + 1], w);
    viz_mask_composite(c, rgb, a);
}

void viz_dashed_hline(VizCanvas *c, double x0, double x1, double y, double w, double dash, double gap,
                      uint32_t rgb, float a) {
    for (double x = x0; x < x1; x += dash + gap) viz_mask_segment(c, x, y, fmin(x + dash, x1), y, w);
    viz_mask_composite(c, rgb, a);
}
