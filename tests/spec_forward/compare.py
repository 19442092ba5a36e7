#!/usr/bin/env python3
"""Run driver (C engine, double) and dormouse.py (SPEC, pure Python) over a set of variants and
compare losses, aux, objective and the activations both sides expose.

usage: compare.py --driver PATH --out DIR [--mutate NAME]
  (a mutation deliberately breaks the Python model to show the comparison would catch that kind
  of error: with one, the exit status is 0 only when the difference is LARGE)
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(HERE, ".."))
from spec_common import reldiff  # noqa: E402


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


DRIVER = arg("--driver", os.path.join(HERE, "driver"))
OUT = arg("--out", os.path.join(HERE, "out"))
os.makedirs(OUT, exist_ok=True)

VARIANTS = [
    ("base", []),
    ("kda_off", ["off=kda"]),
    ("engram_off", ["off=engram"]),
    ("moe_off", ["off=moe"]),
    ("rezero_off", ["off=rezero"]),
    ("aux_off", ["off=aux"]),
    ("all_arms_off", ["off=kda", "off=engram", "off=moe", "off=rezero"]),
    ("loss_final", ["loss=final"]),
    ("k1", ["k=1"]),
    ("k1_final", ["k=1", "loss=final"]),
    ("k3_E4_L3", ["E=4", "k=3", "L=3"]),
    ("lam_max_0.4", ["lam_max=0.4"]),
    ("router_zero_ties", ["zero=ctrl.router"]),
    ("router_zero_ties_k1", ["zero=ctrl.router", "k=1"]),
    ("long_T21_B3_chunk4", ["seq=21", "batch=3"]),
    ("chunk1", ["kda_chunk=1"]),
    ("chunk64", ["kda_chunk=64", "seq=21"]),
    ("H4_dh2", ["H=4"]),
    ("H1_dh8", ["H=1"]),
    ("gmin-8", ["g_min=-8", "seq=13"]),
    ("orders_1_4_5_rows7", ["engram_orders=1,4,5", "engram_rows=7"]),
    ("alpha_neg", ["alpha=-1.3"]),
    ("d12_H3_f5_r3_seed2", ["d=12", "H=3", "f=5", "r=3", "noise_seed=2"]),
    ("moe_aux_0.7_seed3", ["moe_aux=0.7", "noise_seed=3"]),
]

LAM = {"lam_max_0.4": 0.4}
ACT_NAMES = ["h0", "m", "u", "n", "ctrl", "z", "a", "e", "gout", "body", "h", "y", "ybar", "losses"]


def parse_kv(text):
    r = {}
    for ln in text.strip().split("\n"):
        w = ln.rsplit(" ", 1)
        r[w[0]] = float(w[1])
    return r


def read_acts(path):
    r = {}
    with open(path) as f:
        for ln in f:
            w = ln.split()
            if int(w[1]) != len(w) - 2:  # (the driver writes each activation's count: a short line fails)
                raise SystemExit("%s: %s holds %d values, its count says %s" % (path, w[0], len(w) - 2, w[1]))
            r[w[0]] = [float(v) for v in w[2:]]
    return r


def flat(v):
    out = []
    for row in v:
        out.extend(row if isinstance(row, list) else [row])
    return out


def main():
    mutate = None
    if "--mutate" in sys.argv:
        mutate = sys.argv[sys.argv.index("--mutate") + 1]
    env = dict(os.environ)
    if mutate:
        env["DORMOUSE_MUTATE"] = mutate
    worst = 0.0
    print("%-24s %10s %10s %10s  %s" % ("variant", "loss_rel", "obj_rel", "acts_rel", "arm contributions rms(alpha*w*arm) kda/mem/moe"))
    for name, args in VARIANTS:
        pre = os.path.join(OUT, name)
        subprocess.run([DRIVER, pre] + args, check=True)
        with open(pre + ".c") as f:
            c = parse_kv(f.read())
        p = parse_kv(subprocess.run([sys.executable, os.path.join(HERE, "dormouse.py"), pre, "--acts"],
                                    check=True, capture_output=True, text=True, env=env).stdout)
        # every loss the C side wrote: one the reference lacks counts only when it is NaN (not computed)
        lrel = 0.0
        for k in c:
            if k == "objective":
                continue
            if k not in p:
                lrel = lrel if math.isnan(c[k]) else math.inf
                continue
            lrel = max(lrel, reldiff([c[k]], [p[k]]))
        orel = reldiff([c["objective"]], [p["objective"]])
        ca = read_acts(pre + ".acts")
        with open(pre + ".pyacts.json") as f:
            pa = json.load(f)
        arel, aworst, ncmp = 0.0, "", 0
        for k in ca:
            if k.split(".")[0] in ACT_NAMES and k in pa:
                if k == "m" and "off=engram" in args:
                    continue  # an arm that is off costs nothing: the C never gathers m
                rd = reldiff(ca[k], flat(pa[k]))
                ncmp += 1
                if not rd <= arel:  # (NaN: inf from reldiff, never lost)
                    arel, aworst = rd, k
        if ncmp == 0:
            arel, aworst = math.inf, "(no activation compared)"
        # how much each arm moved h (so a match is not a match of zeros)
        contrib = []
        for arm in ("a", "e", "gout"):
            k = arm + ".1"
            if k in pa:
                col = {"a": 0, "e": 1, "gout": 2}[arm]
                vals = []
                for t, row in enumerate(pa[k]):
                    w = pa["ctrl.1"][t][col]
                    if col == 1:
                        w = min(w, LAM.get(name, 1.0))
                    vals += [w * v for v in row]
                contrib.append(math.sqrt(sum(v * v for v in vals) / len(vals)))
        worst = max(worst, lrel, orel, arel)
        if any(math.isnan(v) for v in (lrel, orel, arel)):
            worst = math.inf
        print("%-24s %10.2e %10.2e %10.2e  %s  (worst act %s)" % (name, lrel, orel, arel,
              "/".join("%.3f" % v for v in contrib), aworst))
    print("WORST relative difference over all variants: %.3e" % worst)
    if mutate:  # a broken model must be caught
        print("mutation %s: %s" % (mutate, "caught" if worst > 1e-6 else "NOT caught"))
        return 0 if worst > 1e-6 else 1
    return 0 if worst < 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
