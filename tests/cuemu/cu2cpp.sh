#!/bin/sh
# cu2cpp.sh IN.cu OUT.cpp — the CUDA-only spellings kernels/cuda/ uses, as C++ cuemu runs (line
# numbers kept, so compiler messages, barrier names and debuggers point into IN.cu):
#   k<<<grid, block, smem, stream>>>(args)   ->  EMU_LAUNCH(k, grid, block, smem, stream)(args)
#   extern __shared__ [__align__(n)] T x[];  ->  T *const x = (T *)emu_dyn_smem;
#   asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t))  ->  t = emu_globaltimer()
# Anything else CUDA-only fails to compile as C++, loudly.
set -e
{
    printf '#line 1 "%s"\n' "$1"
    sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\)<<<\(.*\)>>>(/EMU_LAUNCH(\1, \2)(/' \
        -e 's/extern __shared__ \(__align__([0-9]*) \)\{0,1\}\([A-Za-z_][A-Za-z0-9_]*\) \([A-Za-z_][A-Za-z0-9_]*\)\[\];/\2 *const \3 = (\2 *)emu_dyn_smem;/' \
        -e 's/asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(\([A-Za-z_][A-Za-z0-9_]*\)));/\1 = (uint64_t)emu_globaltimer();/' \
        "$1"
} > "$2"
