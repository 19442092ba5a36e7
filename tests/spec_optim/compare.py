#!/usr/bin/env python3
"""Run driver (one optimizer step of the C engine, double) over a set of variants, compute the
same step with optim_ref.py (SPEC §4, pure Python) and compare every tensor's update, every
optimizer moment, the per-row table step counts, the applied-step count, the scheduled rates, the
pre-clip gradient norm and the firewall's decision.

usage: compare.py --driver PATH --out DIR [--mutate NAME[,NAME...]] [--only VARIANT]
  (a mutation deliberately breaks the Python side to show the comparison would catch that kind
  of error: with one, the exit status is 0 only when the difference is LARGE — above 1e-6 and
  above 1000x what the same variant shows unmutated; with a comma-separated list, one line per
  mutation over one set of driver runs, and 0 only when every one is caught)

Differences: a parameter is compared by its update (p1 - p0), relative to the largest update of
its tensor (the weights themselves are ~100x the update, so comparing them would hide an error of
the update); a moment by its value, relative to the tensor's largest; counts exactly (a mismatch
counts as 1). The bar is 1e-10 in double: the Newton–Schulz products of the engine's double build
are double (no bf16 on the CPU unless a parity reference asks); measured, the worst difference
is 4.4e-13 (an update of the floor-rate steps, lr 1e-3, where p1 - p0 keeps fewer digits).
"""
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import optim_ref  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
from spec_common import reldiff  # noqa: E402


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


DRIVER = arg("--driver", os.path.join(HERE, "driver"))
OUT = arg("--out", os.path.join(HERE, "out"))
os.makedirs(OUT, exist_ok=True)
BAR = 1e-10

# (name, driver args, what must hold of the step for the variant to mean what it says)
VARIANTS = [
    ("default", [], {"clipped": True, "mixed_rows": True}),   # step 3 = first after the warmup
    ("in_warmup", ["pre=1"], {"warm": True}),                 # step 1 of warmup 3
    ("in_warmup_noclip", ["pre=2", "clip=0"], {"warm": True, "clipped": False}),
    ("cosine_mid", ["pre=4", "start=3"], {}),                 # step 7 of 12
    ("past_horizon", ["pre=3", "start=11"], {}),              # step 14 > steps 12: the floor
    ("constant", ["pre=4", "start=3", "lr_schedule=constant"], {}),
    ("horizon_in_warmup", ["pre=3", "warmup=6", "steps=2"], {}),
    # no horizon (steps=0: :step before the first :train): the ramp, then the full lr (an audit,
    # session 40: the reference gave the floor at every step, and no variant ran the state)
    ("no_horizon_warm", ["pre=1", "steps=0"], {"warm": True}),
    ("no_horizon", ["pre=4", "start=3", "steps=0"], {}),
    ("adamw", ["opt=adamw", "pre=4"], {}),
    # the engine's muon_colrow divides each column and row by RMS + 1e-7 (decisions.md: SPEC §4
    # names no epsilon; this variant found it in session 23, 3.6e-5 on kda.wf2 without it), and so
    # does the reference (COLROW_EPS)
    ("muon_colrow", ["muon_colrow=on", "pre=4"], {}),
    ("clip_binds", ["clip=0.05", "pre=4"], {"clipped": True}),
    ("clip_loose", ["clip=1e6", "pre=4"], {"clipped": False}),
    ("clip_off", ["clip=0", "pre=4"], {"clipped": False}),
    ("hyper", ["pre=4", "beta1=0.8", "beta2=0.99", "eps=1e-3", "wd=0.3", "muon_momentum=0.9",
               "lr_min_frac=0.3"], {}),
    ("engram_off", ["off=engram", "pre=4"], {}),              # no table row read, mem.* frozen
    ("kda_moe_off", ["off=kda", "off=moe", "pre=4"], {}),
    # one of kda/moe off alone: the gate rows 0 (kda) and 2 (moe) are no longer symmetric, so a
    # gate stepped on the other arm's row shows (both off or both on hid it: mutation pass, session 39)
    ("moe_off", ["off=moe", "pre=4"], {}),
    ("kda_off", ["off=kda", "pre=4"], {}),
    ("firewall_grad", ["nan=kda.wq", "pre=4"], {"skipped": True}),
    ("firewall_loss", ["nanloss=1", "pre=4"], {"skipped": True}),
    ("retract", ["retract=1", "pre=6"], {}),                  # the polar retraction after the step
    ("retract_1iter", ["retract=1", "retract_iters=1", "pre=6"], {}),  # one NS iteration: the pre-scale shows
    ("d12_seed2", ["d=12", "H=3", "f=5", "r=3", "noise_seed=2", "pre=5"], {}),
]


def compare(d, r):
    """worst relative difference and where, plus the scalars"""
    worst, where = 0.0, ""

    def note(v, w):
        nonlocal worst, where
        if v > worst:
            worst, where = v, w
    T = d["tensors"]
    moved = 0
    for name in d["order"]:
        x, e = T[name], r["tensors"][name]
        upd_c = [b - a for a, b in zip(x["p0"], x["p1"])]
        upd_p = [b - a for a, b in zip(x["p0"], e["p"])]
        moved += any(u != 0 for u in upd_c)
        note(reldiff(upd_c, upd_p), name + " update")
        for k in ("m", "v", "mom"):
            note(reldiff(x[k + "1"], e[k]), name + " " + k)
    rs = sum(1 for a, b in zip(d["row_steps1"], r["row_steps1"]) if a != b)
    note(1.0 if rs else 0.0, "row_steps (%d rows differ)" % rs)
    note(1.0 if d["t_after"] != r["t_after"] else 0.0, "t_after %d vs %d" % (d["t_after"], r["t_after"]))
    note(1.0 if int(d["info"]["skipped"]) != r["skipped"] else 0.0, "skipped")
    for k in ("lr", "lr_muon", "gnorm"):
        c, p = d["info"][k], r[k]
        if math.isfinite(c) or math.isfinite(p):
            note(abs(c - p) / max(abs(c), abs(p), 1e-300) if c != p else 0.0, k)
    return worst, where, moved


def load_variant(name, args):
    dump = os.path.join(OUT, name + ".dump")
    subprocess.run([DRIVER, dump] + args, check=True)
    return optim_ref.read_dump(dump)


BASE = {}


def check_variant(name, d, want, mutate, quiet=False):
    """the variant's worst difference with the reference as mutated (and unmutated, for the verdict)"""
    w, where = 0.0, ""
    for tn in d["order"]:   # the engine's groups against the SPEC's
        sg, cg = optim_ref.spec_group(tn, d["tensors"][tn]["shape"]), d["tensors"][tn]["group"]
        if sg != cg:
            print("FINDING: group of %s: SPEC %s, engine %s" % (tn, sg, cg))
            w, where = 1.0, "group of " + tn
    if name not in BASE:   # the unmutated difference (a mutation must exceed it)
        optim_ref.MUT = ""
        BASE[name] = compare(d, optim_ref.step(d))[0]
    base = BASE[name]
    optim_ref.MUT = mutate
    r = optim_ref.step(d)
    w2, where2, moved = compare(d, r)
    if w2 > w:
        w, where = w2, where2
    # the variant must be the case it names (so a pass is not a pass of another case); mixed_rows:
    # the rows this step updates had different counts before it, some below t_before (so a row's
    # own count and the global step give different bias corrections)
    pre = {a for a, b in zip(d["row_steps0"], d["row_steps1"]) if a != b}
    state = {"clipped": r["clipped"], "skipped": bool(r["skipped"]), "warm": d["step"] < d["cfg"]["warmup"],
             "mixed_rows": len(pre) >= 2 and min(pre) < d["t_before"]}
    for k, v in want.items():
        if state[k] != v:
            print("variant %s does not test what it names: %s is %s" % (name, k, state[k]))
            w, where = max(w, 1.0), "variant setup"
    if not quiet:
        rows_moved = sum(1 for a, b in zip(d["row_steps0"], d["row_steps1"]) if a != b)
        print("%-18s %5d %9.3g %8.3g %6s %5d %5d %3d/%-2d %9.2e  %s" % (
            name, d["step"], r["lr"], r["gnorm"], "yes" if r["clipped"] else "no", r["skipped"], rows_moved,
            moved, len(d["order"]), w, where))
    return w, base


def main():
    mutate = arg("--mutate", "")
    only = arg("--only", "")
    variants = [v for v in VARIANTS if not only or v[0] == only]
    dumps = {name: load_variant(name, args) for name, args, _ in variants}
    if "," in mutate:   # several mutations over one set of driver runs: a line each, all must be caught
        bad = 0
        for mu in mutate.split(","):
            caught, by = 0.0, ""
            for name, _, want in variants:   # the first variant that catches it is enough
                w, base = check_variant(name, dumps[name], want, mu, quiet=True)
                if w > max(1e-6, 1e3 * base):
                    caught, by = w, name
                    break
            print("mutation %s: %s" % (mu, "caught by %s (%.2e)" % (by, caught) if caught else "NOT caught"))
            bad += not caught
        return 1 if bad else 0
    worst, caught = 0.0, 0.0
    print("%-18s %5s %9s %8s %6s %5s %5s %6s %9s  %s" % ("variant", "step", "lr", "gnorm", "clip", "skip", "rows",
                                                           "moved", "worst", "where"))
    for name, _, want in variants:
        w, base = check_variant(name, dumps[name], want, mutate)
        worst = max(worst, w)
        if w > max(1e-6, 1e3 * base):   # a mutation is caught only above what the variant shows unmutated
            caught = max(caught, w)
    print("WORST relative difference over all variants: %.3e" % worst)
    if mutate:  # a broken reference must be caught
        print("mutation %s: %s (%.2e)" % (mutate, "caught" if caught else "NOT caught", caught))
        return 0 if caught else 1
    return 0 if worst < BAR else 1


if __name__ == "__main__":
    sys.exit(main())
