// ckpt_values.h — what a checkpoint's numbers must be for the run to go on from them (SPEC §6:
// loading verifies everything). The CRCs prove the bytes are the ones written; a file made or
// edited by hand can still hold values no run writes: a non-finite weight or moment (the NaN
// firewall never lets one in), a negative second moment, a row count below zero or past the
// run's steps (it went on to write NaN into the tables at the next step, the firewall blind to it).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "err.h"
#include "../kernels/real.h"

// 0 when params, m, mom (n each) are finite, v (n) finite and >= 0, and the nrs row counts in
// [0, max_steps]; else 1 with err naming the section, the first bad index and its value.
int ckpt_check_values(const char *path, const real *params, const real *m, const real *v, const real *mom, size_t n,
                      const int64_t *row_steps, size_t nrs, int64_t max_steps, dm_err *err);
