// canvas.h — an RGB raster for the charts: coverage-based anti-aliased drawing. Shapes are first
// rasterised into a float coverage mask (max over pieces), then composited once with a colour,
// so a polyline's joints and overlaps never blend twice (no dark beads at the vertices).
#pragma once
#include <stdint.h>

typedef struct {
    int w, h;
    uint8_t *px;        // [h, w, 3] RGB
    float *mask;        // [h, w] coverage in [0, 1] of the shape being built
    int mx0, my0, mx1, my1;   // dirty box of the mask (to clear / composite only that)
    int cx0, cy0, cx1, cy1;   // clip box [cx0, cx1) x [cy0, cy1) applied to mask drawing
} VizCanvas;

int viz_canvas_init(VizCanvas *c, int w, int h, uint32_t bg);   // 0 ok, 1 out of memory
void viz_canvas_free(VizCanvas *c);
void viz_canvas_clip(VizCanvas *c, int x0, int y0, int x1, int y1);
void viz_canvas_noclip(VizCanvas *c);

// Direct paint: blend colour rgb (0xRRGGBB) with alpha a into one pixel / a rectangle.
void viz_blend(VizCanvas *c, int x, int y, uint32_t rgb, float a);
void viz_fill_rect(VizCanvas *c, double x0, double y0, double x1, double y1, uint32_t rgb, float a);

// Mask building: a segment of width w (pixels, round caps), a filled disc; then composite.
void viz_mask_segment(VizCanvas *c, double x0, double y0, double x1, double y1, double w);
void viz_mask_disc(VizCanvas *c, double x, double y, double r);
void viz_mask_composite(VizCanvas *c, uint32_t rgb, float a);   // paints and clears the mask

// Convenience: a polyline (NaN points break it), a dashed horizontal line.
void viz_polyline(VizCanvas *c, const double *x, const double *y, int n, double w, uint32_t rgb, float a);
void viz_dashed_hline(VizCanvas *c, double x0, double x1, double y, double w, double dash, double gap,
                      uint32_t rgb, float a);
