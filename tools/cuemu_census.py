#!/usr/bin/env python3
"""cuemu_census.py PROFILE [--sms N] — one training step's kernel census from a cuemu profile.

Run dmsh built on cuemu with CUEMU_PROFILE=FILE for a few steps (the step graph is captured after
the warm-up and replayed from then on); cuemu keeps the last graph replay apart, i.e. one whole
step. This prints what that step launches: every kernel with its launches, its grid (blocks per
launch, fewest-most), threads per block and dynamic shared memory, every cuBLAS product shape with
its FLOPs, every sort, and the launches whose grid is narrower than the GPU (fewer blocks than
--sms, 132 on an H200). The emulator's time column is CPU time of the emulation: it ranks where
the scalar work is, it is not a GPU time.
"""
import sys
from collections import defaultdict


def main():
    args = sys.argv[1:]
    sms = 132
    if "--sms" in args:
        i = args.index("--sms")
        sms = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    kern, calls, replays = {}, defaultdict(int), 0
    for line in open(args[0]):
        w = line.split()
        if w[0] == "graph_replays":
            replays = int(w[1])
        elif w[0] == "replay" and w[1] == "kernel":
            kv = dict(zip(w[3::2], w[4::2]))
            kern[w[2]] = kv
        elif w[0] == "replay" and w[1] == "call":
            calls[" ".join(w[2:-2])] += int(w[-1])
    if replays == 0 or not kern:
        sys.exit("cuemu_census: no graph replay in this profile (run more steps: the step graph is captured after "
                 "the warm-up)")
    tot_ms = sum(float(k["emu_ms"]) for k in kern.values()) or 1.0
    launches = sum(int(k["launches"]) for k in kern.values())
    print(f"one replayed step (the last of {replays} replays): {launches} kernel launches of {len(kern)} kernels, "
          f"{sum(calls.values())} cuBLAS/sort calls")
    print(f"{'kernel':34} {'launch':>6} {'blocks/launch':>15} {'thr':>5} {'smem':>7} {'emu%':>6}  note")
    for name, k in sorted(kern.items(), key=lambda kv: -float(kv[1]["emu_ms"])):
        n, lo, hi = int(k["launches"]), int(k["minblocks"]), int(k["maxblocks"])
        grid = f"{lo}" if lo == hi else f"{lo}-{hi}"
        note = f"narrow (< {sms} blocks)" if hi < sms else (f"some launches < {sms}" if lo < sms else "")
        print(f"{name[:34]:34} {n:6d} {grid:>15} {int(k['threads']):5d} {int(k['smem']):7d} "
              f"{100 * float(k['emu_ms']) / tot_ms:6.2f}  {note}")
    narrow = sum(int(k["launches"]) for k in kern.values() if int(k["maxblocks"]) < sms)
    print(f"launches with every grid narrower than {sms} blocks: {narrow} of {launches}")
    flops = 0.0
    print(f"\n{'product / sort':70} {'calls':>6} {'GFLOP':>9}")
    for key, n in sorted(calls.items(), key=lambda kv: kv[0]):
        w = key.split()
        f = 0.0
        if "m" in w and "n" in w and "k" in w:
            d = dict(zip(w[2::2], w[3::2]))
            f = 2.0 * int(d["m"]) * int(d["n"]) * int(d["k"]) * int(d.get("batch", 1)) * n
        flops += f
        print(f"{key[:70]:70} {n:6d} {f / 1e9:9.3f}")
    print(f"cuBLAS FLOPs in the step: {flops / 1e9:.2f} GFLOP")


if __name__ == "__main__":
    main()
