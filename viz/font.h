// font.h — text for the charts: DejaVu Sans through stb_truetype (kerning, advances, quarter-
// pixel positioning, a glyph cache), loaded once per process. Only when the TTF is missing does
// it fall back to stb_easy_font's vector glyphs (legible, not pretty). DMSH_FONT=PATH overrides
// the regular face.
#pragma once
#include <stddef.h>
#include "canvas.h"

enum { VIZ_REGULAR = 0, VIZ_BOLD = 1 };

// Load the faces on first use; 0 ok (a TTF or the fallback). Never fails today, but callers
// check so that a future font requirement can refuse cleanly.
int viz_font_ready(char *errmsg, size_t n);
int viz_font_is_ttf(void);                      // 1: a real TTF; 0: the stb_easy_font fallback
double viz_text_width(const char *s, double px, int face);
double viz_text_ascent(double px, int face);    // above the baseline, pixels
double viz_text_descent(double px, int face);   // below the baseline, pixels (positive)

// Draw UTF-8 text at (x, y). halign: -1 left, 0 centre, 1 right edge at x. valign: -1 top,
// 0 middle (of the cap height: what looks centred for labels), 1 bottom, 2 baseline at y.
// rot = 1 turns the text 90 degrees counter-clockwise (reads bottom to top: the y-axis label).
void viz_text(VizCanvas *c, double x, double y, const char *s, double px, int face, uint32_t rgb,
              int halign, int valign, int rot);
