// ckpt.h — the checkpoint container (SPEC §6 "Checkpoints"): magic, format version, then named
// sections each with its length and CRC32; written to PATH.<pid>.tmp, fsynced, renamed into place
// (and the directory fsynced), so a crash never leaves a half-written file under the real
// name. Reading verifies every CRC and length before handing anything out.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "err.h"

typedef struct {
    char name[32];
    const void *data;       // write: the bytes; read: points into the loaded image
    uint64_t size;
} CkptSection;

typedef struct {
    uint8_t *image;         // the whole file, owned
    size_t image_size;
    CkptSection *sec;
    int nsec;
    uint32_t version;
} CkptFile;

uint32_t crc32_update(uint32_t crc, const void *data, size_t n);
// Write the sections atomically to path (replacing a checkpoint there; never a file that is
// not one).
int ckpt_write(const char *path, const CkptSection *sec, int nsec, dm_err *err);
enum { CK_STOP_BEFORE_RENAME = 0, CK_REPLACE = 1, CK_NEW = 2 };
// mode CK_NEW: the file must not exist when it is put in place; 2 (err set) when it does: another
// process saved to the same name while this one wrote, and its file stays.
int ckpt_write_mode(const char *path, const CkptSection *sec, int nsec, int mode, dm_err *err);
// This process's temp file for a write to path (PATH.<pid>.tmp).
void ckpt_tmp_path(const char *path, char *buf, size_t n);
// A temp file a crash left after its write was complete (killed in its fsync or before its
// rename): verified whole (as ckpt_read), synced and renamed to path, the directory synced: the
// save the crash cut short, finished. 1 (err says why, nothing moved) when it is not complete; 2
// when it was a second link of path already (the save's link made, its unlink not): removed.
int ckpt_place_tmp(const char *tmp, const char *path, dm_err *err);
// Test hook: write everything, fsync the temp file, and stop before the rename (a crash there).
int ckpt_write_no_rename(const char *path, const CkptSection *sec, int nsec, dm_err *err);
// Read and verify. Errors name the path and the section (e.g. "section 'params': CRC mismatch",
// "truncated inside section 'optim.m'", "not a dmsh checkpoint (bad magic)").
int ckpt_read(const char *path, CkptFile *f, dm_err *err);
// One named section's bytes (at most cap) into buf, *size its length, reading every section
// header, the trailer (which must close the file) and that section's bytes, each CRC-checked;
// the other sections' bytes are not read: for listings. buf NULL: *size only (nothing read).
int ckpt_peek(const char *path, const char *name, void *buf, size_t cap, size_t *size, dm_err *err);
// ckpt_peek, also saying where the section lies in the file: its data's offset and its header's
// CRC fields' (8 bytes: the data's CRC, then the header's own over it; a comparison of two files
// that skips one section: sessions/same_state.c)
typedef struct { uint64_t data_off, crc_off; } CkptLoc;
int ckpt_peek_at(const char *path, const char *name, void *buf, size_t cap, size_t *size, CkptLoc *loc, dm_err *err);
const CkptSection *ckpt_find(const CkptFile *f, const char *name);
void ckpt_close(CkptFile *f);
