// hist.c — viz_hist_png: the distribution of a tensor's values (for `:probe NAME hist`). Bins
// span [min, max] of the finite values; the title carries the count, mean and std so the PNG
// stands on its own.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "axes.h"
#include "plot.h"
#include "font.h"
#include "hist.h"
#include "png.h"

size_t viz_hist_subtitle(char *buf, size_t nbuf, const double *v, size_t n, int bins) {
    double lo = INFINITY, hi = -INFINITY, sum = 0, sum2 = 0;
    size_t good = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) { lo = fmin(lo, v[i]); hi = fmax(hi, v[i]); sum += v[i]; good++; }
    if (!good || !nbuf) return 0;
    double mean = sum / good;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) sum2 += (v[i] - mean) * (v[i] - mean);
    char mn[24], sd_[24], a[24], z[24];
    snprintf(mn, sizeof mn, "%.4g", mean); snprintf(sd_, sizeof sd_, "%.4g", sqrt(sum2 / good));
    snprintf(a, sizeof a, "%.4g", lo); snprintf(z, sizeof z, "%.4g", hi);
    int k = snprintf(buf, nbuf, "n = %zu   mean %s   std %s   min %s   max %s   %d bins", good, mn, sd_, a, z, bins);
    if (good < n && k > 0 && (size_t)k < nbuf) snprintf(buf + k, nbuf - k, "   (%zu non-finite skipped)", n - good);
    return good;
}

int viz_hist_png(const char *path, const double *v, size_t n, int bins, int logy, const char *title, char *err, size_t nerr) {
    if (viz_png_check(err, nerr)) return 1;
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    size_t good = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) { lo = fmin(lo, v[i]); hi = fmax(hi, v[i]); sum += v[i]; good++; }
    if (!good) {
        if (err && nerr) snprintf(err, nerr, "nothing to plot in '%s': %zu values, none finite", title ? title : "histogram", n);
        return 1;
    }
    double mean = sum / good;  // (the dashed line; the subtitle computes its own numbers)
    if (bins <= 0) bins = (int)fmin(100, fmax(10, round(2 * cbrt((double)good))));   // Rice rule
    if (bins > 1000) bins = 1000;
    // a constant tensor is drawn on a padded range; the subtitle below is made from the data
    // itself, so it still prints the true min and max
    if (hi == lo) { double d = lo != 0 ? fabs(lo) * 0.01 : 0.5; lo -= d; hi += d; bins = bins < 11 ? bins : 11; }
    long *cnt = calloc(bins, sizeof(long));
    if (!cnt) { if (err && nerr) snprintf(err, nerr, "out of memory for %d bins", bins); return 1; }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        int b = (int)((v[i] - lo) / (hi - lo) * bins);
        b = b < 0 ? 0 : b >= bins ? bins - 1 : b;
        cnt[b]++;
    }
    long cmax = 0;
    for (int b = 0; b < bins; b++) cmax = cnt[b] > cmax ? cnt[b] : cmax;

    char sub[320];
    viz_hist_subtitle(sub, sizeof sub, v, n, bins);
    if (logy) strncat(sub, "   log count", sizeof sub - strlen(sub) - 1);

    const int W = 960, H = 540;
    VizCanvas cv;
    if (viz_canvas_init(&cv, W, H, 0xffffff)) { free(cnt); if (err && nerr) snprintf(err, nerr, "out of memory for the image"); return 1; }
    VizAxes ax = {0};
    ax.title = title && *title ? title : "histogram";
    ax.subtitle = sub; ax.xlabel = "value"; ax.ylabel = "count";
    ax.yint = 1; ax.s = viz_axes_scale(W, H);
    double pad = (hi - lo) * 0.02;
    ax.xmin = lo - pad; ax.xmax = hi + pad;
    // log count: a bin of 1 stands as tall as a decade, so the few values in the tails (the
    // outliers a linear axis draws under a pixel) show; bars rise from just below 1
    ax.logy = logy;
    if (logy) { ax.ymin = 0.7; ax.ymax = pow(10, log10((double)cmax) * 1.06 + 0.02); }
    else { ax.ymin = 0; ax.ymax = cmax * 1.08; }
    viz_axes_layout(&cv, &ax, 0, 0, W, H);
    viz_axes_background(&cv, &ax);
    double y0 = viz_ax_y(&ax, ax.ymin);
    for (int b = 0; b < bins; b++) {
        if (!cnt[b]) continue;
        double xa = viz_ax_x(&ax, lo + (hi - lo) * b / bins), xb = viz_ax_x(&ax, lo + (hi - lo) * (b + 1) / bins);
        double gap = xb - xa > 4 ? 1 : 0;   // thin white seams between wide bars
        viz_fill_rect(&cv, xa + gap / 2, viz_ax_y(&ax, (double)cnt[b]), xb - gap / 2, y0, 0x1f77b4, 0.9f);
    }
    viz_axes_frame(&cv, &ax);
    // the mean as a dashed vertical line, labelled at its top
    double mx = viz_ax_x(&ax, mean);
    viz_canvas_clip(&cv, (int)ax.x0, (int)ax.y0, (int)ceil(ax.x1), (int)ceil(ax.y1));
    for (double y = ax.y0 + 2; y < ax.y1; y += 11 * ax.s) viz_mask_segment(&cv, mx, y, mx, fmin(y + 7 * ax.s, ax.y1), 1.5 * ax.s);
    viz_mask_composite(&cv, 0xd62728, 0.9f);
    viz_canvas_noclip(&cv);
    viz_text(&cv, mx + 4 * ax.s, ax.y0 + 4 * ax.s, "mean", 12 * ax.s, 0, 0xd62728, -1, -1, 0);
    int rc = viz_write_png(path, &cv, err, nerr);
    viz_canvas_free(&cv);
    free(cnt);
    return rc;
}
