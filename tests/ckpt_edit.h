// ckpt_edit.h — a checkpoint with one section edited by hand, for the tests of what a load
// refuses (test_ckpt_values.c, test_ckpt_values2.c).
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../engine/ckpt.h"

// SRC with n bytes at offset off of section NAME replaced, written to OUT; off = SIZE_MAX: the
// whole section becomes those n bytes; bytes NULL: the section left out (a file older than it)
static void write_edit(const char *src, const char *out, const char *name, size_t off, const void *bytes, size_t n) {
    CkptFile f;
    dm_err e0 = {0};
    if (ckpt_read(src, &f, &e0)) fail_msg("%s", e0.msg);
    CkptSection *sec = malloc(sizeof *sec * (size_t)f.nsec);
    char *copy = NULL;
    int m = 0, found = 0;
    for (int k = 0; k < f.nsec; k++) {
        int it = !strcmp(f.sec[k].name, name);
        found |= it;
        if (it && !bytes) continue;
        sec[m] = f.sec[k];
        if (it && off == SIZE_MAX) {
            copy = malloc(n ? n : 1);
            memcpy(copy, bytes, n);
            sec[m].data = copy;
            sec[m].size = n;
        } else if (it) {
            assert_true(off + n <= f.sec[k].size);
            copy = malloc(f.sec[k].size);
            memcpy(copy, f.sec[k].data, f.sec[k].size);
            memcpy(copy + off, bytes, n);
            sec[m].data = copy;
        }
        m++;
    }
    assert_true(found);
    if (ckpt_write(out, sec, m, &e0)) fail_msg("%s", e0.msg);
    free(copy);
    free(sec);
    ckpt_close(&f);
}
