#!/usr/bin/env python3
"""One dormouse optimizer step in pure Python, written from the project SPEC (§4 "Optimizers",
§1 for the tensors and the TSCT retraction, §3 for which Engram rows a step reads) and the choices
in docs/decisions.md where the SPEC is open — independently of the C engine (engine/optim.c and
kernels/cpu/optim_ops.c were not read). Only the dump's layout (tensor names, shapes, row-major
order) comes from the C tensor table.

From a dump written by driver.c (parameters, the step's gradients before clipping and the
optimizer state BEFORE the step) it computes the expected state AFTER the step; compare.py
compares that with the engine's AFTER.

Conventions: a tensor [a, b] is a matrix of a rows and b columns (row-major); a 3-D tensor
[n, a, b] is n such matrices.

usage: optim_ref.py DUMP      (prints the expected schedule, norm and decision)
"""
import math
import os
import sys

# deliberate misreadings of the SPEC, to show the comparison catches them (compare.py --mutate)
MUT = os.environ.get("OPTIM_MUTATE", "")

NS_COEF = (3.4445, -4.7750, 2.0315)        # SPEC §4: Muon's Newton–Schulz
NS_ITERS = 5
FROB_EPS = 1e-7                            # SPEC §4: "dividing by its Frobenius norm (+1e-7)"
RETRACT_COEF = (1.875, -1.25, 0.375)       # SPEC §1: the polar retraction of U, V
# SPEC §4 muon_colrow: "normalises each column then each row ... to unit RMS" (no epsilon named).
# decisions.md ("Muon+ divides by RMS + 1e-7"): the +1e-7 keeps a zero column or row finite, as
# the Frobenius division's does. This check found it (3.6e-5 off without it: a tall kda.wf2
# whose gradient has near-zero rows); OPTIM_COLROW_EPS=0 shows that difference again.
COLROW_EPS = float(os.environ.get("OPTIM_COLROW_EPS", "1e-7"))


# ---------------------------------------------------------------- reading the dump
def read_dump(path):
    d = {"tensors": {}, "order": []}
    with open(path) as f:
        lines = f.read().split("\n")
    cur = None
    for ln in lines:
        w = ln.split()
        if not w:
            continue
        k = w[0]
        if k == "config":
            cfg = {}
            for j in range(1, len(w), 2):
                v = w[j + 1]
                try:
                    cfg[w[j]] = int(v)
                except ValueError:
                    try:
                        cfg[w[j]] = float(v)
                    except ValueError:
                        cfg[w[j]] = v
            d["cfg"] = cfg
        elif k == "model":
            mo = {}
            j = 1
            while j < len(w):
                if w[j] == "orders":
                    mo["orders"] = [int(v) for v in w[j + 1:]]
                    break
                mo[w[j]] = int(w[j + 1])
                j += 2
            d["model"] = mo
        elif k == "arms":
            d["arms"] = {w[j]: int(w[j + 1]) for j in range(1, len(w), 2)}
        elif k == "step":
            d["step"], d["t_before"], d["t_after"], d["loss"] = int(w[1]), int(w[3]), int(w[5]), float(w[7])
        elif k == "info":
            d["info"] = {w[j]: float(w[j + 1]) for j in range(1, len(w), 2)}
        elif k == "input":
            d["B"], d["T"] = int(w[1]), int(w[2])
            d["x"] = [int(v) for v in w[3:]]
        elif k == "tensor":
            nd = int(w[5])
            cur = {"name": w[1], "group": w[3], "shape": [int(v) for v in w[6:6 + nd]]}
            d["tensors"][w[1]] = cur
            d["order"].append(w[1])
        elif k in ("row_steps0", "row_steps1"):
            d[k] = [int(v) for v in w[2:]]
        else:
            cur[k] = [float(v) for v in w[2:]]
    return d


# ---------------------------------------------------------------- SPEC §4 / decisions.md
MUON_NAMES = {"kda.wq", "kda.wk", "kda.wv", "kda.wo", "kda.wb", "kda.wf1", "kda.wf2", "kda.wg1", "kda.wg2",
              "mem.wk", "mem.wv", "moe.U1", "moe.V1", "moe.U2", "moe.V2", "outproj"}
ADAMW_DECAY_NAMES = {"emb", "iter_emb", "head", "ctrl.w", "ctrl.router"}


def spec_group(name, shape):
    """The group SPEC §4 assigns (decisions.md 'Optimizer groups' names them): Muon on every 2-D
    hidden matrix (attention and MemRead projections, expert factors U, V one matrix per expert,
    OutProj one per iteration); AdamW with decay on embeddings, IterEmb, Head, controller and
    router; AdamW without decay on 1-D parameters and s1, s2 (a vector per expert), alpha, A_h;
    Adam without decay, lazily, on the Engram tables."""
    if name == "engram.tables":
        return "table"
    if name in MUON_NAMES:
        return "muon"
    if name in ADAMW_DECAY_NAMES:
        return "adamw"
    if len(shape) == 1 or name in ("moe.s1", "moe.s2"):
        return "adamw_1d"
    return "?"


def arm_of(name):
    """decisions.md 'An arm that is off is frozen'."""
    if name.startswith("kda."):
        return "kda"
    if name.startswith("mem.") or name == "engram.tables":
        return "engram"
    if name.startswith("moe.") or name == "ctrl.router":
        return "moe"
    if name == "alpha":
        return "rezero"
    return None


def lr_mult(cfg, s):
    """SPEC §4: warmup lr*(s+1)/warmup, then cosine to lr_min_frac at the horizon `steps` (or
    constant); decisions.md: a horizon inside the warmup gives the ramp until `steps`, the floor
    from it on; no horizon (`steps` = 0, before the first :train) gives the full lr after the
    warmup (this reference took 0 for a horizon passed, the floor from step 0: an audit, session 40)."""
    W, S, fl = cfg["warmup"], cfg["steps"], cfg["lr_min_frac"]
    cos = cfg["lr_schedule"] == "cosine"
    if cos and S > 0 and s >= S:
        return fl
    if s < W:
        return (s if MUT == "warmup_off_by_one" else s + 1) / W
    if not cos or S <= 0:
        return 1.0
    p = (s - W) / (S - W)
    lo = 0.0 if MUT == "cosine_to_zero" else fl
    return lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * p))


def matmul(A, B):
    n, k, m = len(A), len(B), len(B[0])
    Bt = [[B[i][j] for i in range(k)] for j in range(m)]
    return [[sum(a * b for a, b in zip(A[i], Bt[j])) for j in range(m)] for i in range(n)]


def transpose(A):
    return [list(r) for r in zip(*A)]


def frob(A):
    return math.sqrt(sum(v * v for r in A for v in r))


def newton_schulz(G):
    """SPEC §4: divide by ||G||_F + 1e-7, then 5 iterations X <- aX + (bA + cA^2)X, A = X X^T."""
    a, b, c = (2.0, -1.5, 0.5) if MUT == "ns_cubic" else NS_COEF
    nrm = frob(G) + (0.0 if MUT == "frob_no_eps" else FROB_EPS)
    X = [[v / nrm for v in r] for r in G]
    for _ in range(NS_ITERS):
        A = matmul(X, transpose(X))
        AA = matmul(A, A)
        Bm = [[b * A[i][j] + c * AA[i][j] for j in range(len(A))] for i in range(len(A))]
        BX = matmul(Bm, X)
        X = [[a * X[i][j] + BX[i][j] for j in range(len(X[0]))] for i in range(len(X))]
    return X


def colrow(O):
    """SPEC §4 muon_colrow: each column, then each row, to unit RMS."""
    R, C = len(O), len(O[0])

    def cols(O):
        for j in range(C):
            s = math.sqrt(sum(O[i][j] ** 2 for i in range(R)) / R) + COLROW_EPS
            for i in range(R):
                O[i][j] /= s

    def rows(O):
        for i in range(R):
            s = math.sqrt(sum(v * v for v in O[i]) / C) + COLROW_EPS
            O[i] = [v / s for v in O[i]]
    O = [list(r) for r in O]
    if MUT == "colrow_rows_first":
        rows(O); cols(O)
    else:
        cols(O); rows(O)
    return O


# ---------------------------------------------------------------- SPEC §3: the rows a step reads
# (the hash of the SPEC forward's reference, tests/spec_forward/dormouse.py: one reading of §3)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spec_forward"))
from dormouse import fnv1a  # noqa: E402


def rows_read(x, B, T, orders, R):
    """per order index: the set of table rows the forward read (each sequence starts padded with 256)."""
    out = []
    for n in orders:
        s = set()
        for b in range(B):
            seq = x[b * T:(b + 1) * T]
            for t in range(T):
                syms = [seq[i] if i >= 0 else 256 for i in range(t - n + 1, t + 1)]
                bs = [n]
                for v in syms:
                    bs += [v & 255, v >> 8]
                s.add(fnv1a(bs) % R)
        out.append(s)
    return out


# ---------------------------------------------------------------- the step
def retract_factor(X, r, iters):
    """SPEC §1: scale X by sqrt(r)/||X||_F, then iters x X <- aX + bX(X^T X) + cX(X^T X)^2."""
    a, b, c = RETRACT_COEF
    s = (1.0 if MUT == "retract_bare_frob" else math.sqrt(r)) / frob(X)
    X = [[v * s for v in row] for row in X]
    G = matmul(transpose(X), X)
    # decisions.md: a Gershgorin bound on sigma_max^2 above 2.25 rescales X first (by a value the
    # docs do not give): not modelled, so the check refuses a dump where it would apply
    gersh = max(sum(abs(v) for v in row) for row in G)
    if gersh > 2.25:
        raise SystemExit("retraction: Gershgorin bound %.3f > 2.25 (rescaling not modelled)" % gersh)
    for _ in range(iters):
        G = matmul(transpose(X), X)
        GG = matmul(G, G)
        P = [[b * G[i][j] + c * GG[i][j] for j in range(r)] for i in range(r)]
        XP = matmul(X, P)
        X = [[a * X[i][j] + XP[i][j] for j in range(r)] for i in range(len(X))]
    return X


def step(d):
    """Expected AFTER state: {name: {p1, m1, v1, mom1}}, row_steps1, t_after, and the scalars."""
    cfg, arms, T = d["cfg"], d["arms"], d["tensors"]
    s = d["step"]
    mult = lr_mult(cfg, s)
    lr, lr_muon = cfg["lr"] * mult, cfg["lr_muon"] * mult
    b1, b2, eps, wd = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["wd"]
    mu = cfg["muon_momentum"]
    opt_adamw = cfg["opt"] == "adamw"

    # global gradient norm, measured before clipping (SPEC §4), over every tensor
    ss = 0.0
    finite = math.isfinite(d["loss"])
    for name in d["order"]:
        if MUT == "clip_norm_no_tables" and name == "engram.tables":
            continue
        for g in T[name]["g"]:
            if not math.isfinite(g):
                finite = False
            ss += g * g
    gnorm = math.sqrt(ss)
    clip = cfg["clip"]
    scale = clip / gnorm if (clip > 0 and finite and gnorm > clip) else 1.0
    skipped = not finite and MUT != "firewall_off"

    res = {"lr": lr, "lr_muon": lr_muon, "gnorm": gnorm, "skipped": int(not finite), "clipped": scale < 1.0,
           "tensors": {}}
    t = d["t_before"] + (0 if skipped else 1)
    res["t_after"] = t
    rs1 = list(d["row_steps0"])
    if skipped:   # NaN firewall: nothing moves, not the moments, not the counts
        for name in d["order"]:
            x = T[name]
            res["tensors"][name] = {k: list(x[k + "0"]) for k in ("p", "m", "v", "mom")}
        res["row_steps1"] = rs1
        return res

    for name in d["order"]:
        x = T[name]
        shape = x["shape"]
        p, g = list(x["p0"]), [v * scale for v in x["g"]]
        m, v, mom = list(x["m0"]), list(x["v0"]), list(x["mom0"])
        grp = spec_group(name, shape)
        if opt_adamw and grp == "muon":
            grp = "adamw"   # SPEC §4: opt = adamw puts everything on AdamW (the tables keep lazy Adam)
        arm = arm_of(name)
        frozen = arm is not None and not arms[arm]
        out = {"p": p, "m": m, "v": v, "mom": mom}
        res["tensors"][name] = out
        if frozen:
            continue
        n = len(p)
        # the elements that step: ctrl.w row j / ctrl.b entry j only while arm j is on (decisions.md)
        live = [True] * n
        if name in ("ctrl.w", "ctrl.b"):
            per = n // 3
            for j, a in enumerate(("kda", "engram", "moe")):
                if not arms[a]:
                    for i in range(j * per, (j + 1) * per):
                        live[i] = False
        if grp in ("adamw", "adamw_1d"):
            decay = wd if (grp == "adamw" or MUT == "wd_on_1d") else 0.0
            bc1 = 1 - b1 ** t
            bc2 = 1 - b2 ** t
            if MUT == "adamw_no_bias_correction":
                bc1 = bc2 = 1.0
            for i in range(n):
                if not live[i]:
                    continue
                gi = g[i]
                if MUT == "wd_coupled":
                    gi += decay * p[i]
                m[i] = b1 * m[i] + (1 - b1) * gi
                v[i] = b2 * v[i] + (1 - b2) * gi * gi
                upd = (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps)
                p[i] = p[i] - lr * upd - (0.0 if MUT == "wd_coupled" else lr * decay * p[i])
        elif grp == "muon":
            if len(shape) == 2:
                nm, R, C = 1, shape[0], shape[1]
            else:
                nm, R, C = shape[0], shape[1], shape[2]
            for k in range(nm):
                o = k * R * C
                for i in range(o, o + R * C):
                    mom[i] = mu * mom[i] + g[i]          # buf = mu buf + g
                if MUT == "no_nesterov":
                    u = [mom[i] for i in range(o, o + R * C)]
                else:                                    # update = g + mu buf
                    u = [g[i] + mu * mom[i] for i in range(o, o + R * C)]
                U = [u[i * C:(i + 1) * C] for i in range(R)]
                O = newton_schulz(U)
                if cfg["muon_colrow"]:
                    O = colrow(O)
                    sc = 0.2
                elif MUT == "scale_ratio":
                    sc = 0.2 * math.sqrt(R / C)
                else:
                    sc = 0.2 * math.sqrt(max(R, C))      # the Moonlight rule
                lr_wd = lr if MUT == "muon_wd_adamw_lr" else lr_muon
                for i in range(R):
                    for j in range(C):
                        q = o + i * C + j
                        p[q] = p[q] - lr_muon * sc * O[i][j] - lr_wd * wd * p[q]
        elif grp == "table":
            if not arms["engram"]:
                continue   # no rows read (and the arm is frozen anyway)
            mo = d["model"]
            Rr, De = mo["rows"], mo["dim"]
            read = rows_read(d["x"], d["B"], d["T"], mo["orders"], Rr)
            for oi in range(len(mo["orders"])):
                rows = range(Rr) if MUT == "tables_dense" else sorted(read[oi])
                for r in rows:
                    ri = oi * Rr + r
                    rs1[ri] += 1
                    kk = t if MUT == "table_global_t" else rs1[ri]
                    bc1, bc2 = 1 - b1 ** kk, 1 - b2 ** kk
                    for e in range(De):
                        i = ri * De + e
                        m[i] = b1 * m[i] + (1 - b1) * g[i]
                        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
                        p[i] = p[i] - lr * (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps)
        else:
            raise SystemExit("no SPEC group for tensor %s %s" % (name, shape))

    # SPEC §1: after the step, U and V are pulled back onto the orthonormal manifold (every
    # retract_every optimizer steps: t counts the applied steps)
    if arms.get("retract") and arms["moe"] and t % cfg["retract_every"] == 0:
        for name in ("moe.U1", "moe.V1", "moe.U2", "moe.V2"):
            out = res["tensors"][name]
            nm, R, C = T[name]["shape"]
            for k in range(nm):
                o = k * R * C
                X = [out["p"][o + i * C:o + (i + 1) * C] for i in range(R)]
                X = retract_factor(X, C, cfg["retract_iters"])
                for i in range(R):
                    out["p"][o + i * C:o + (i + 1) * C] = X[i]
    res["row_steps1"] = rs1
    return res


def main():
    d = read_dump(sys.argv[1])
    r = step(d)
    print("step %d lr %.17g lr_muon %.17g gnorm %.17g clipped %d skipped %d t_after %d" %
          (d["step"], r["lr"], r["lr_muon"], r["gnorm"], r["clipped"], r["skipped"], r["t_after"]))
    for name in d["order"]:
        g = spec_group(name, d["tensors"][name]["shape"])
        if g != d["tensors"][name]["group"]:
            print("group of %s: SPEC %s, engine %s" % (name, g, d["tensors"][name]["group"]))


if __name__ == "__main__":
    main()
