// png.h — the PNG boundary of viz: whether this build can write PNGs, and the one write call.
#pragma once
#include <stddef.h>
#include "canvas.h"

// Why a build has no PNGs: the headless build chose it (make headless, HEADLESS=1), or the stb
// headers were missing when it was built.
#ifdef DM_HEADLESS
#define DM_NO_PNG_WHY "this dmsh is the headless build (make headless: no PNG charts, no readline, no panel); `make dmsh` builds the full one"
#else
#define DM_NO_PNG_WHY "this dmsh was built without PNG support (libstb-dev was missing: `make deps` installs it, then `make dmsh`)"
#endif

// 0 when PNGs can be written (and the font is ready); else 1 with the one-line reason.
int viz_png_check(char *err, size_t n);
// Write the canvas as an RGB PNG; 1 with "cannot write PATH: reason" on failure.
int viz_write_png(const char *path, const VizCanvas *c, char *err, size_t n);
