// png.h — the PNG boundary of viz: whether this build can write PNGs, and the one write call.
#pragma once
#include <stddef.h>
#include "canvas.h"

// 0 when PNGs can be written (and the font is ready); else 1 with the one-line reason.
int viz_png_check(char *err, size_t n);
// Write the canvas as an RGB PNG; 1 with "cannot write PATH: reason" on failure.
int viz_write_png(const char *path, const VizCanvas *c, char *err, size_t n);
