// axes.h — one chart panel: margins measured from the real label sizes, grid, ticks with
// labels that never overlap, title / subtitle, axis labels, dashed reference lines with labels,
// and a legend placed in the corner that hides the fewest data points. Used by the series
// charts (plot.c) and the histogram (hist.c).
#pragma once
#include <stdint.h>
#include "canvas.h"
#include "ticks.h"

typedef struct {
    // set by the caller before viz_axes_layout
    const char *title, *subtitle, *xlabel, *ylabel;
    int logy, xint, yint;              // log y axis; integer x / y ticks
    double xmin, xmax, ymin, ymax;     // the visible data range (ymin > 0 when logy)
    double s;                          // scale of fonts and strokes (1 at 960x540)
    // computed
    double x0, y0, x1, y1;             // plot area in pixels
    VizTicks xt, yt;
} VizAxes;

typedef struct { const char *label; uint32_t rgb; double width; float alpha; int marker; int hollow; } VizLegendItem;

double viz_axes_scale(int w, int h);
// Lay the panel out inside the box (bx, by, bw, bh) of the canvas.
void viz_axes_layout(VizCanvas *c, VizAxes *a, int bx, int by, int bw, int bh);
// Move the plot area's left edge (to line up stacked panels); re-picks the x ticks.
void viz_axes_set_x0(VizAxes *a, double x0);
double viz_ax_x(const VizAxes *a, double x);    // data -> pixel
double viz_ax_y(const VizAxes *a, double y);
void viz_axes_background(VizCanvas *c, const VizAxes *a);   // grid, before the data
void viz_axes_frame(VizCanvas *c, const VizAxes *a);        // spines, ticks, labels, title: after the data
// A reference: the dashed horizontal line at data y (drawn under the data), and its label
// (drawn over it) at whichever end of the line, above or below, hides the fewest data points
// (px/py: all points in pixels) and no label already placed (`taken`: 4 doubles each, <= 16).
void viz_axes_ref_line(VizCanvas *c, const VizAxes *a, double y, uint32_t rgb);
void viz_axes_ref_label(VizCanvas *c, const VizAxes *a, double y, const char *label, uint32_t rgb,
                        const double *px, const double *py, int np, double *taken, int *ntaken);
// The legend: placed first in the corner that hides the fewest data points (px/py: every
// point in pixels) and labels (`taken`), so reference labels can then avoid its box; drawn last.
void viz_axes_legend_place(const VizAxes *a, const VizLegendItem *it, int n, const double *px, const double *py,
                           int np, const double *taken, int ntaken, double box[4]);
void viz_axes_legend_draw(VizCanvas *c, const VizAxes *a, const VizLegendItem *it, int n, const double box[4]);

// colours
uint32_t viz_palette(int i);          // tab10
uint32_t viz_ramp(double t);          // viridis-like, t in [0, 1] (dark blue -> yellow)
