// png.c — see png.h. The only file besides font.c that needs the stb headers.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "font.h"
#include "png.h"

#ifdef DM_HAVE_PNG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

int viz_png_check(char *err, size_t n) { return viz_font_ready(err, n); }

int viz_write_png(const char *path, const VizCanvas *c, char *err, size_t n) {
    errno = 0;
    if (!stbi_write_png(path, c->w, c->h, 3, c->px, c->w * 3)) {
        if (err && n) snprintf(err, n, "cannot write %s: %s", path, errno ? strerror(errno) : "PNG encoder failed");
        return 1;
    }
    return 0;
}
#else
int viz_png_check(char *err, size_t n) {
    if (err && n) snprintf(err, n, DM_NO_PNG_WHY);
    return 1;
}
int viz_write_png(const char *path, const VizCanvas *c, char *err, size_t n) {
    (void)path; (void)c;
    return viz_png_check(err, n);
}
#endif
