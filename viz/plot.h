// plot.h — line charts and histograms to PNG. Knows nothing of the model: it draws series of
// (x, y) points. Non-finite points are skipped (and counted under the title); on a log axis so
// are values <= 0. Every function returns 0, or 1 with a one-line message in errmsg. A dmsh
// built without libstb-dev (no DM_HAVE_PNG) has these functions and they refuse.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *label;          // legend text; NULL: not in the legend
    const double *x, *y;
    int n;
    uint32_t rgb;               // 0xRRGGBB
    double width;               // stroke width at 960x540, pixels; 0: 2
    float alpha;                // 0: opaque
    int markers;                // 0: dots when the series has few points (<= 40), 1: always, -1: never,
                                // 2: dots only, no line between them (points that are no curve)
    int hollow;                 // its dots are rings (a white centre): a series told apart from
                                // another of the same colour, even where it is one point
} VizSeries;

typedef struct { const char *label; double y; uint32_t rgb; } VizRef;   // dashed horizontal line

typedef struct {
    const char *title, *xlabel, *ylabel;
    int width, height, logy;
    const VizSeries *series;
    int nseries;
    const VizRef *refs;
    int nrefs;
    const char *subtitle;       // second title line (grey), optional
    int xint;                   // x is an index (depth, expert): integer ticks
    int share_x;                // stacked panels with share_x all get the union of their x ranges
    long gaps;                  // NaN points left on purpose (a gap the subtitle explains): not
                                // counted as "non-finite skipped"
} VizChart;

// One chart, width x height (default 960 x 540 when 0).
int viz_chart_png(const char *path, const VizChart *c, char *errmsg, size_t n);
// Several charts stacked top to bottom in one width x height image (each chart's own
// width/height are ignored): `:plot loss,lr` lines the panels up on the same x.
int viz_charts_png(const char *path, const VizChart *c, int ncharts, int width, int height, char *errmsg, size_t n);
// Histogram of v[0..n) in `bins` bins (<= 0: automatic), 960 x 540; the title gets the count,
// mean, std and the number of non-finite values skipped. logy: the counts on a log axis.
int viz_hist_png(const char *path, const double *v, size_t n, int bins, int logy, const char *title, char *errmsg, size_t nerr);
// The visible data range one chart would get, margins included (xmin, xmax, ymin, ymax), with no
// drawing: what a test checks of the ranging rules (an all-zero series spans 0..1, one x at or above
// 0 does not reach below it). 1 with errmsg when there is nothing to draw.
int viz_chart_range(const VizChart *c, double r[4], char *errmsg, size_t n);
// The second title line one chart would get (its subtitle, then "K non-finite skipped" less its
// gaps, and on a log axis "K values <= 0 not shown on the log scale"), with no drawing; 1 with
// errmsg when there is nothing to draw.
int viz_chart_subtitle(const VizChart *c, char *sub, size_t nsub, char *errmsg, size_t n);
// 1 when this build can write PNGs
int viz_png_available(void);
