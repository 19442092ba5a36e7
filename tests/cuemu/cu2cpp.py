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
  __global__ void __launch_bounds__(N[, M])   ->  unchanged (the macro is empty), and at the end of
    name(  (on the same line or the next)        the file a line registering N for `name`
                                               (emu_register_bounds: a launch with more threads
                                               per block is refused, as on a GPU); N a number or
                                               a name #defined to one in the same file
Anything else CUDA-only fails to compile as C++, loudly.
"""
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_]\w*)<<<(.*)>>>\(')
DYN = re.compile(r'extern __shared__ (?:__align__\(\d+\) )?([A-Za-z_]\w*) ([A-Za-z_]\w*)\[\];')
STATIC = re.compile(r'^\s*__shared__\s')
ARRAY = re.compile(r'([A-Za-z_]\w*)\s*\[')
BOUNDS = re.compile(r'__launch_bounds__\(\s*(\w+)\s*(?:,[^)]*)?\)\s*([A-Za-z_]\w*)\s*\(')
DEFINE = re.compile(r'^\s*#\s*define\s+([A-Za-z_]\w*)\s+\(?(\d+)\)?\s*(?://.*)?$')
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
    defines, bounds = {}, []
    for l in lines:
        m = DEFINE.match(l)
        if m:
            defines[m.group(1)] = int(m.group(2))
    # over the whole text: the kernel's name may be on the line after the bound
    text = ''.join(lines)
    for b in BOUNDS.finditer(text):
        v, n = b.group(1), text.count('\n', 0, b.start()) + 1
        if not v.isdigit() and v not in defines:
            sys.exit('%s:%d: __launch_bounds__(%s): not a number nor a name #defined to one in the file' % (src, n, v))
        bounds.append((b.group(2), int(v) if v.isdigit() else defines[v]))
    with open(dst, 'w') as f:
        f.write('#line 1 "%s"\n' % src)
        f.writelines(convert(l) for l in lines)
        for i, (name, v) in enumerate(bounds):
            f.write('static const int emu_bounds_%d = emu_register_bounds("%s", %d);\n' % (i, name, v))


if __name__ == '__main__':
    main()
