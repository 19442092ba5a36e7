// hist.h — the text of a histogram PNG's subtitle (viz_hist_png, viz/plot.h), apart so the
// numbers it prints can be checked without reading pixels.
#pragma once
#include <stddef.h>

// "n = N   mean M   std S   min A   max Z   B bins" over the finite values of v[0..n), plus
// "(K non-finite skipped)" when some are not finite. min and max are the data's, never the
// padded axis range a constant tensor is drawn on. Returns the finite count (0: nothing written).
size_t viz_hist_subtitle(char *buf, size_t nbuf, const double *v, size_t n, int bins);
