// same_state.c — see same_state.h.
#include "same_state.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../engine/ckpt.h"
#include "../engine/engine.h"

// the metric rows equal but for their step times (ms, tok/s)
static int same_rows(const void *x, const void *y, size_t size) {
    if (size % sizeof(MetricRow)) return !memcmp(x, y, size);
    for (size_t r = 0; r < size / sizeof(MetricRow); r++) {
        MetricRow u, v;
        memcpy(&u, (const char *)x + r * sizeof u, sizeof u);
        memcpy(&v, (const char *)y + r * sizeof v, sizeof v);
        u.ms = v.ms = 0;
        u.tok_s = v.tok_s = 0;
        if (memcmp(&u, &v, sizeof u)) return 0;
    }
    return 1;
}

int session_same_state_blocks(const char *a, const char *b) {
    // the metric rows through ckpt_peek (CRC-checked), every other byte in blocks: the rows' bytes
    // and their header's two CRCs (the data's, and the header's own over it) are skipped. A redone
    // step's rows differ in their times only, as in the sectioned comparison (QA mutation, session
    // 36: the block path compared them too, and a redone step at a large preset got a branch file
    // of the same state)
    CkptLoc la, lb;
    size_t na = 0, nb = 0;
    dm_err err = {0};
    if (ckpt_peek_at(a, "metrics", NULL, 0, &na, &la, &err) || ckpt_peek_at(b, "metrics", NULL, 0, &nb, &lb, &err) ||
        na != nb || la.data_off != lb.data_off || la.crc_off != lb.crc_off)
        return 0;
    char *ra = malloc(na ? na : 1), *rb = malloc(na ? na : 1);
    int same = ra && rb && !ckpt_peek_at(a, "metrics", ra, na, &na, &la, &err) && !ckpt_peek_at(b, "metrics", rb, nb, &nb, &lb, &err) &&
               na == nb && same_rows(ra, rb, na);
    free(ra);
    free(rb);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    same = same && fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    uint64_t at = 0;
    const uint64_t skip[2][2] = {{la.crc_off, la.crc_off + 8}, {la.data_off, la.data_off + na}};
    while (same) {
        size_t ra_ = fread(ba, 1, sizeof ba, fa), rb_ = fread(bb, 1, sizeof bb, fb);
        if (ra_ != rb_) { same = 0; break; }
        if (ra_ == 0) break;
        for (int k = 0; k < 2; k++)  // the skipped ranges, zeroed in both blocks
            for (uint64_t i = skip[k][0] > at ? skip[k][0] : at; i < skip[k][1] && i < at + ra_; i++)
                ba[i - at] = bb[i - at] = 0;
        same = !memcmp(ba, bb, ra_);
        at += ra_;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int session_same_state(const char *a, const char *b) {
    // two states of one config have files of one size; a large one is compared in blocks
    // (reading both whole would double a save's memory at a large preset)
    struct stat sa, sb;
    if (stat(a, &sa) || stat(b, &sb) || sa.st_size != sb.st_size) return 0;
    if (sa.st_size > (512LL << 20)) return session_same_state_blocks(a, b);
    CkptFile fa, fb;
    dm_err ea = {0}, eb = {0};
    int oka = !ckpt_read(a, &fa, &ea), okb = !ckpt_read(b, &fb, &eb), same = oka && okb && fa.nsec == fb.nsec;
    for (int i = 0; same && i < fa.nsec; i++) {
        const CkptSection *x = &fa.sec[i], *y = ckpt_find(&fb, x->name);
        if (!y || x->size != y->size) { same = 0; break; }
        same = strcmp(x->name, "metrics") ? !memcmp(x->data, y->data, x->size) : same_rows(x->data, y->data, x->size);
    }
    if (oka) ckpt_close(&fa);
    if (okb) ckpt_close(&fb);
    return same;
}
