// ckpt_state.h — the checkpoint's "state" section as stored (SPEC §6): the trainer's counters
// and the arms. Raw bytes in the file, so its layout is part of the format; engine_ckpt.c writes
// and checks it, tests/test_ckpt_values.c edits it.
#pragma once
#include <stdint.h>
#include "arms.h"

typedef struct {
    uint32_t real_size;          // sizeof(real) of the build that wrote it: 4 or 8
    uint32_t n_arms;             // ARM_COUNT of that build
    int64_t step, tokens, opt_t, total_skips;
    int32_t consecutive_skips, pad;
    uint64_t n_params, n_rows_tables;
    double last_orth_err;        // >= 0, or -1: none measured
    int32_t arms_on[ARM_COUNT];  // 0 or 1
    int64_t arms_fwd[ARM_COUNT], arms_bwd[ARM_COUNT];
} CkptState;
