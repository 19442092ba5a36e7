// cuemu_internal.h — what cuemu.cpp (the runtime) shares with cuemu_libs.cpp (cuBLAS, cub).
#pragma once
#include "include/cuemu.h"
cudaError_t emu_set_err(cudaError_t e);  // the error cudaGetLastError returns next (e, passed through)
const char *emu_kind_name(int kind);     // "device", "pinned host", "host", "out-of-range" (emu_mem_kind)
int emu_prof_on(void);                   // CUEMU_PROFILE set: the census is being taken
void emu_prof_call(const char *key);     // count a library call (a product shape, a sort) in the census
