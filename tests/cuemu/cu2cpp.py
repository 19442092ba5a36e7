#!/usr/bin/env python3
"""cu2cpp.py IN.cu OUT.cpp — the CUDA-only spellings kernels/cuda/ uses, as C++ cuemu runs.

Line numbers are kept (a #line at the top, one output line per input line), so compiler messages,
barrier names, sanitizer reports and debuggers point into IN.cu.
  k<<<grid, block, smem, stream>>>(args)   ->  EMU_LAUNCH(k, grid, block, smem, stream)(args)
  extern __shared__ [__align__(n)] T x[];  ->  T *const x = (T *)emu_dyn_smem;
  __shared__ T a[N], b[M];                 ->  the same line, then EMU_SHARED_POISON(a); ... : the
                                               first thread of each block to pass the declaration
                                               fills the arrays with NaN bytes (shared memory starts
                                               as garbage on a GPU; here a read before a write shows)
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t))  ->  t = emu_globaltimer()
Anything else CUDA-only fails to compile as C++, loudly.
"""
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_]\w*)<<<(.*)>>>\(')
DYN = re.compile(r'extern __shared__ (?:__align__\(\d+\) )?([A-Za-z_]\w*) ([A-Za-z_]\w*)\[\];')
STATIC = re.compile(r'^\s*__shared__\s')
ARRAY = re.compile(r'([A-Za-z_]\w*)\s*\[')
TIMER = re.compile(r'asm volatile\("mov\.u64 %0, %%globaltimer;" : "=l"\(([A-Za-z_]\w*)\)\);')


def convert(line):
    line = LAUNCH.sub(r'EMU_LAUNCH(\1, \2)(', line)
    line = DYN.sub(r'\1 *const \2 = (\1 *)emu_dyn_smem;', line)
    line = TIMER.sub(r'\1 = (uint64_t)emu_globaltimer();', line)
    if STATIC.match(line) and line.rstrip().endswith(';'):
        names = ARRAY.findall(line.split(';')[0])
        if names:
            line = line.rstrip('\n') + ''.join(' EMU_SHARED_POISON(%s);' % n for n in names) + '\n'
    return line


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        lines = f.readlines()
    with open(dst, 'w') as f:
        f.write('#line 1 "%s"\n' % src)
        f.writelines(convert(l) for l in lines)


if __name__ == '__main__':
    main()
