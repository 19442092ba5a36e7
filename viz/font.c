// font.c — see font.h. Glyph bitmaps are rendered by stb_truetype at (codepoint, size in
// quarter pixels, face, quarter-pixel x shift) and kept in a small open-addressing cache: a
// chart draws a few hundred glyphs from a few dozen distinct ones.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "font.h"
#include "png.h"

#ifdef DM_HAVE_PNG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-braces"
#include <stb_truetype.h>
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

#define DEJAVU_DIR "/usr/share/fonts/truetype/dejavu/"

typedef struct {
    unsigned char *data;
    stbtt_fontinfo info;
    int ok, ascent, descent, cap;   // font units
} Face;

typedef struct {
    int used, cp, q, face, sub;     // q: pixel size x4; sub: x shift in quarter pixels
    int w, h, xoff, yoff;
    unsigned char *bmp;
} Glyph;

#define CACHE_N 4096
static Face faces[2];
static int loaded;
static Glyph cache[CACHE_N];

static unsigned char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = n > 0 ? malloc(n) : NULL;
    if (b && fread(b, 1, n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    return b;
}

static void load_face(Face *fc, const char *path) {
    fc->data = read_all(path);
    if (!fc->data) return;
    if (!stbtt_InitFont(&fc->info, fc->data, stbtt_GetFontOffsetForIndex(fc->data, 0))) {
        free(fc->data); fc->data = NULL; return;
    }
    int lg, x0, y0, x1, y1;
    stbtt_GetFontVMetrics(&fc->info, &fc->ascent, &fc->descent, &lg);
    // cap height from 'H' (the OS/2 table is not exposed): centres digits and capitals
    fc->cap = stbtt_GetCodepointBox(&fc->info, 'H', &x0, &y0, &x1, &y1) ? y1 : fc->ascent * 7 / 10;
    fc->ok = 1;
}

int viz_font_ready(char *errmsg, size_t n) {
    (void)errmsg; (void)n;
    if (loaded) return 0;
    loaded = 1;
    const char *env = getenv("DMSH_FONT");
    load_face(&faces[0], env && *env ? env : DEJAVU_DIR "DejaVuSans.ttf");
    if (faces[0].ok) load_face(&faces[1], DEJAVU_DIR "DejaVuSans-Bold.ttf");
    return 0;
}

int viz_font_is_ttf(void) { viz_font_ready(NULL, 0); return faces[0].ok; }

static const Face *face_of(int face) {
    viz_font_ready(NULL, 0);
    if (face == VIZ_BOLD && faces[1].ok) return &faces[1];
    return faces[0].ok ? &faces[0] : NULL;
}

// UTF-8 decode; malformed bytes come out as '?', never read past the terminator
static int next_cp(const char **ps) {
    const unsigned char *s = (const unsigned char *)*ps;
    int c = *s++, extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (c >= 0x80 && c < 0xC0) { *ps = (const char *)s; return '?'; }
    int cp = extra ? c & (0x3F >> extra) : c;
    for (int i = 0; i < extra; i++) {
        if ((*s & 0xC0) != 0x80) { *ps = (const char *)s; return '?'; }
        cp = cp << 6 | (*s++ & 0x3F);
    }
    *ps = (const char *)s;
    return cp;
}

// stb_easy_font fallback: its glyphs are ~7 units cap height on a 12-unit line
#define EASY_UNIT(px) ((px) / 11.0)

// stb_easy_font indexes its glyph table by byte - 32, so a byte outside ' '..'~' (each byte of
// UTF-8's "×" in an axis factor, "×1e-4") read before or past the table (QA, session 38). Each
// code point outside becomes one '?' ("×" an 'x'); a newline stays.
static char *easy_ascii(const char *s, char *buf, size_t n) {
    size_t j = 0;
    while (*s && j + 1 < n) {
        int cp = next_cp(&s);
        buf[j++] = (char)(cp == '\n' || (cp >= 32 && cp < 127) ? cp : cp == 0xD7 ? 'x' : '?');
    }
    buf[j] = 0;
    return buf;
}

double viz_text_width(const char *s, double px, int face) {
    const Face *f = face_of(face);
    char ab[1024];
    if (!f) return stb_easy_font_width(easy_ascii(s, ab, sizeof ab)) * EASY_UNIT(px);
    float scale = stbtt_ScaleForPixelHeight(&f->info, (float)px);
    double w = 0;
    int prev = 0;
    while (*s) {
        int cp = next_cp(&s), adv, lsb;
        stbtt_GetCodepointHMetrics(&f->info, cp, &adv, &lsb);
        if (prev) w += scale * stbtt_GetCodepointKernAdvance(&f->info, prev, cp);
        w += scale * adv;
        prev = cp;
    }
    return w;
}

double viz_text_ascent(double px, int face) {
    const Face *f = face_of(face);
    return f ? stbtt_ScaleForPixelHeight(&f->info, (float)px) * f->ascent : 9 * EASY_UNIT(px);
}

double viz_text_descent(double px, int face) {
    const Face *f = face_of(face);
    return f ? -stbtt_ScaleForPixelHeight(&f->info, (float)px) * f->descent : 3 * EASY_UNIT(px);
}

static double cap_height(const Face *f, double px) {
    return f ? stbtt_ScaleForPixelHeight(&f->info, (float)px) * f->cap : 7 * EASY_UNIT(px);
}

static const Glyph *glyph(const Face *f, int fi, int cp, int q, int sub, Glyph *tmp) {
    unsigned hsh = ((unsigned)cp * 2654435761u) ^ ((unsigned)q * 40503u) ^ ((unsigned)(fi * 4 + sub) * 97u);
    for (int probe = 0; probe < 32; probe++) {
        Glyph *g = &cache[(hsh + probe) % CACHE_N];
        if (g->used && g->cp == cp && g->q == q && g->face == fi && g->sub == sub) return g;
        if (!g->used) { tmp = g; break; }
    }
    // render into the free cache slot, or into *tmp (freed by the caller) when the probe run is full
    float scale = stbtt_ScaleForPixelHeight(&f->info, q / 4.0f);
    tmp->bmp = stbtt_GetCodepointBitmapSubpixel(&f->info, scale, scale, sub / 4.0f, 0, cp, &tmp->w, &tmp->h,
                                                &tmp->xoff, &tmp->yoff);
    tmp->cp = cp; tmp->q = q; tmp->face = fi; tmp->sub = sub;
    tmp->used = tmp >= cache && tmp < cache + CACHE_N;
    return tmp;
}

void viz_text(VizCanvas *c, double x, double y, const char *s, double px, int face, uint32_t rgb,
              int halign, int valign, int rot) {
    const Face *f = face_of(face);
    double w = viz_text_width(s, px, face);
    // text-space origin: u along the baseline, v down from it
    double u0 = halign < 0 ? 0 : halign == 0 ? -w / 2 : -w;
    double v0 = valign == -1 ? viz_text_ascent(px, face) : valign == 0 ? cap_height(f, px) / 2
              : valign == 1 ? -viz_text_descent(px, face) : 0;
    // snap the baseline to a pixel row (crisp horizontal stems)
    double bx = rot ? x + round(v0) : x, by = rot ? y : y + round(v0);
    if (rot) bx = round(bx); else by = round(by);
    if (!f) {
        // stb_easy_font: quads of solid pixels at unit scale; draw each scaled as a rectangle
        static char vb[64 * 1024];
        char ab[1024];
        int nq = stb_easy_font_print(0, 0, easy_ascii(s, ab, sizeof ab), NULL, vb, sizeof vb);
        // its capitals span rows 0..7 and descenders reach 9: the baseline is row 7 (with -9 all
        // text sat 2 units above its anchor, and middle-aligned labels off their grid lines)
        double k = EASY_UNIT(px), top = -7 * k;
        for (int q = 0; q < nq; q++) {
            const float *p = (const float *)(vb + q * 64);   // 4 vertices of x, y, z, rgba
            double qx0 = u0 + p[0] * k, qy0 = top + p[1] * k, qx1 = u0 + p[8] * k, qy1 = top + p[9] * k;
            if (rot) viz_fill_rect(c, bx + qy0, by - qx1, bx + qy1, by - qx0, rgb, 1);
            else viz_fill_rect(c, bx + qx0, by + qy0, bx + qx1, by + qy1, rgb, 1);
        }
        return;
    }
    int fi = f == &faces[1];
    int q = (int)lrint(px * 4);
    float scale = stbtt_ScaleForPixelHeight(&f->info, q / 4.0f);
    double pen = u0;
    int prev = 0;
    while (*s) {
        int cp = next_cp(&s), adv, lsb;
        if (prev) pen += scale * stbtt_GetCodepointKernAdvance(&f->info, prev, cp);
        // U: the pen on the canvas axis the text runs along (x, or -y when rotated), split into
        // a whole pixel and a quarter-pixel shift rendered into the glyph
        double U = rot ? pen - by : bx + pen, fl = floor(U);
        int sub = (int)((U - fl) * 4);
        Glyph tmp = {0};
        const Glyph *g = glyph(f, fi, cp, q, sub, &tmp);
        for (int j = 0; j < g->h; j++)
            for (int i = 0; i < g->w; i++) {
                unsigned char a = g->bmp[j * g->w + i];
                if (!a) continue;
                int u = (int)fl + g->xoff + i, v = g->yoff + j;
                if (rot) viz_blend(c, (int)bx + v, -u - 1, rgb, a / 255.0f);
                else viz_blend(c, u, (int)by + v, rgb, a / 255.0f);
            }
        if (g == &tmp) stbtt_FreeBitmap(tmp.bmp, NULL);
        stbtt_GetCodepointHMetrics(&f->info, cp, &adv, &lsb);
        pen += scale * adv;
        prev = cp;
    }
}

#else  // built without stb: no text (the chart functions refuse before drawing anything)

int viz_font_ready(char *errmsg, size_t n) {
    if (errmsg && n) snprintf(errmsg, n, DM_NO_PNG_WHY);
    return 1;
}
int viz_font_is_ttf(void) { return 0; }
double viz_text_width(const char *s, double px, int face) { (void)face; return strlen(s) * px * 0.6; }
double viz_text_ascent(double px, int face) { (void)face; return px * 0.8; }
double viz_text_descent(double px, int face) { (void)face; return px * 0.2; }
void viz_text(VizCanvas *c, double x, double y, const char *s, double px, int face, uint32_t rgb,
              int halign, int valign, int rot) {
    (void)c; (void)x; (void)y; (void)s; (void)px; (void)face; (void)rgb; (void)halign; (void)valign; (void)rot;
}
#endif
