// data.h — corpora (SPEC §5): a file or a directory (regular files, recursive, sorted by path),
// memory-mapped, never read whole into RAM; the held-out split; training windows as a pure
// function of (seed, step, row); the fixed eval window.
#pragma once
#include <stdint.h>
#include "err.h"

typedef struct {
    int nfiles;
    char **paths;           // [nfiles] sorted
    const uint8_t **maps;   // [nfiles] mmap'd bytes
    int64_t *sizes;         // [nfiles]
    int64_t *starts;        // [nfiles + 1] prefix sums: global byte offset of each file
    uint64_t *devs, *inos;  // [nfiles] the files' identities when mapped (a shrink is checked by path)
    int64_t n;              // total bytes
    char left_out[160];     // a directory's entries not read, said by :data ("" when none)
} Corpus;

typedef struct {
    Corpus train, eval;     // when no eval= file, both view one corpus: train [0, n_train), eval [n_train, n)
    int shared;             // 1: eval is the tail of train's corpus
    int64_t n_train;        // bytes the training windows may use
    int64_t eval_off, n_eval; // the held-out bytes: [eval_off, eval_off + n_eval) of `eval`
    char desc[512];         // one line for :show data
} Data;

// Open PATH (file or directory) with an optional eval PATH2 (NULL). T is the sequence length:
// every split must hold at least one sequence (T + 1 bytes). Errors: missing or unreadable path,
// empty corpus, a directory with no regular files, a split shorter than one sequence.
int data_open(Data *d, const char *path, const char *eval_path, double eval_frac, int T, dm_err *err);
void data_close(Data *d);
// 0 when both splits hold a window of seq T (+1 target byte); else a one-line error. data_open
// checks it for the seq it was opened with; seq can change afterwards (:set, :load).
int data_fits(const Data *d, int T, dm_err *err);
// Byte i of the training stream / of the held-out split.
uint8_t data_train_byte(const Data *d, int64_t i);
uint8_t data_eval_byte(const Data *d, int64_t i);
// Copy bytes [off, off+len) of the training stream / held-out split into out (ints 0..255).
void data_train_read(const Data *d, int64_t off, int len, int *out);
void data_eval_read(const Data *d, int64_t off, int len, int *out);
// The training window offset for (seed, step, row): H mod (n_train - T), H = sm(sm(sm(seed)^step)^row)
int64_t data_window_offset(uint64_t seed, int64_t step, int64_t row, int64_t n_train, int T);
// Fill x [B, T] and y [B, T] with the training batch of `step`.
void data_batch(const Data *d, uint64_t seed, int64_t step, int B, int T, int *x, int *y);
// The same as data_batch / data_eval_seq, with a one-line error instead of SIGBUS when a mapped
// corpus file shrank on disk since it was opened (the step and the eval use these); a shrink
// inside the file's last page reads zeros rather than faulting, so after the read each file it
// touched is stat'ed too (one stat per file a window lies in).
int data_batch_checked(const Data *d, uint64_t seed, int64_t step, int B, int T, int *x, int *y, dm_err *err);
int data_eval_seq_checked(const Data *d, int64_t i, int T, int *x, int *y, dm_err *err);
// A fingerprint of the splits as opened: both sizes and 64 blocks of 1 KiB spread over each
// (FNV-1a 64). A checkpoint keeps it, so a resume can say the corpus changed since (the windows
// would then differ from the original run's). 0 on a read fault (err set).
uint64_t data_fingerprint(const Data *d, dm_err *err);
// The same for one split alone (s 0: training, 1: held-out): a resume says which one changed
uint64_t data_split_fingerprint(const Data *d, int s, dm_err *err);
// The training corpus's whole byte stream (with the held-out tail when it is that corpus's), split
// aside: the bytes a model's windows came from are the same bytes under another eval setting
uint64_t data_stream_fingerprint(const Data *d, dm_err *err);
// An eval= file that is also a file of the training corpus (the same device and inode), or NULL
const char *data_eval_in_train(const Data *d);
// data_train_read (eval 0) / data_eval_read (eval 1), guarded the same way
int data_read_checked(const Data *d, int eval, int64_t off, int len, int *out, dm_err *err);
// The identity of an eval window: 32-bit FNV-1a over its bytes in order (nseq*T + 1 of them: every
// input byte and the last target). Never 0 (0 marks rows from before the identity existed), so two
// eval rows score the same bytes exactly when their ids are equal (up to a 2^-32 collision).
uint32_t eval_set_begin(void);
uint32_t eval_set_add(uint32_t h, const int *bytes, int64_t n);
uint32_t eval_set_end(uint32_t h);
// The eval window: nseq = min(eval_bytes, n_eval - 1) / T sequences; sequence i reads inputs
// heldout[iT, iT+T) and targets heldout[iT+1, iT+T].
int64_t data_eval_nseq(const Data *d, int64_t eval_bytes, int T);
void data_eval_seq(const Data *d, int64_t i, int T, int *x, int *y);
