// ngram.h — the anchors (SPEC §5): unigram and interpolated Kneser–Ney 5-gram byte models fit
// on the training split and scored on the eval window. A model that has not beaten the 5-gram
// line has not learned the language.
#pragma once
#include <stdint.h>
#include "data.h"

typedef struct {
    double unigram_bpb, kn5_bpb;
    int64_t fit_bytes;      // training bytes used to fit
    int64_t window_bytes, nseq, T;  // the eval window scored
    uint32_t eval_set;              // its identity (data.h eval_set_end), as on eval rows
} Anchors;

// The fit set's size: min(fit_bytes, n_train, ANCHOR_FIT_MAX) (n_train < 0: not known here, a
// checkpoint's anchors without a corpus). The counts are uint32: 2^31 bytes at most.
#define ANCHOR_FIT_MAX ((int64_t)1 << 31)
int64_t anchors_fit_size(int64_t fit_bytes, int64_t n_train);
// Fit on the first anchors_fit_size(fit_bytes, n_train) training bytes, score on the eval window of
// (eval_bytes, T): every predicted byte of every eval sequence, with the context restarting at
// each sequence start (as the model sees it).
int anchors_compute(const Data *d, int64_t fit_bytes, int64_t eval_bytes, int T, Anchors *a, dm_err *err);
// Straight from bytes (for tests): fit on train[0..nt), score the targets of the eval window
// of `ev` (nseq sequences of T, inputs ev[iT..iT+T), targets ev[iT+1..iT+T]).
void anchors_from_bytes(const uint8_t *train, int64_t nt, const uint8_t *ev, int64_t nseq, int T,
                        double *unigram_bpb, double *kn5_bpb);
