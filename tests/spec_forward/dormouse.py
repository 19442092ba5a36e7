#!/usr/bin/env python3
"""dormouse forward pass in pure Python, written from the project SPEC (../shared/SPEC.md, §1-§3), independently of the C engine, and the
choices in docs/decisions.md where the SPEC is open. Reads a tensor dump written by driver.c
(PREFIX.params) and prints the per-depth CE losses, the aux loss and the objective.

Conventions: a matrix named W with shape [out, in] maps a vector x to W x (row o dotted with x).
Only the storage layout (tensor names, shapes, row-major order) was taken from the C tensor table.

usage: dormouse.py PREFIX [--acts]
"""
import math
import sys

import os
MUT = os.environ.get("DORMOUSE_MUTATE", "")   # deliberate errors, to show the check catches them
EPS = 1e-6          # SPEC §1: RMSNorm eps 1e-6; decisions.md: inside the sqrt, l2norm too


# ---------------------------------------------------------------- reading the dump
def read_dump(path):
    cfg, arms, tens = {}, {}, {}
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i].split()
        i += 1
        if not ln:
            continue
        if ln[0] == "config":
            w = ln[1:]
            j = 0
            while j < len(w):
                key = w[j]
                if key == "orders":
                    cfg["orders"] = [int(v) for v in w[j + 1:j + 1 + cfg["n_orders"]]]
                    j += 1 + cfg["n_orders"]
                else:
                    v = w[j + 1]
                    cfg[key] = float(v) if ("." in v or "e" in v) else int(v)
                    j += 2
        elif ln[0] == "arms":
            for j in range(1, len(ln), 2):
                arms[ln[j]] = int(ln[j + 1])
        elif ln[0] == "tensor":
            name, nd = ln[1], int(ln[2])
            shape = [int(v) for v in ln[3:3 + nd]]
            vals = lines[i].split()
            i += 1
            n = int(vals[1])
            tens[name] = (shape, [float(v) for v in vals[2:2 + n]])
        elif ln[0] == "input":
            B, T = int(ln[1]), int(ln[2])
            x = [int(v) for v in lines[i].split()]
            y = [int(v) for v in lines[i + 1].split()]
            i += 2
    return cfg, arms, tens, B, T, x, y


def mat(tens, name):
    """[rows, cols] tensor as a list of rows"""
    shape, v = tens[name]
    r, c = shape
    return [v[i * c:(i + 1) * c] for i in range(r)]


def mats3(tens, name):
    shape, v = tens[name]
    a, r, c = shape
    return [[v[(k * r + i) * c:(k * r + i + 1) * c] for i in range(r)] for k in range(a)]


def vec(tens, name):
    return list(tens[name][1])


# ---------------------------------------------------------------- small linear algebra
def mv(W, x):
    return [sum(w * xi for w, xi in zip(row, x)) for row in W]


def matmul(A, B):  # A [m, k], B [k, n]
    Bt = list(zip(*B))
    return [[sum(a * b for a, b in zip(row, col)) for col in Bt] for row in A]


def transpose(A):
    return [list(r) for r in zip(*A)]


def sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    ez = math.exp(z)
    return ez / (1.0 + ez)


def silu(z):
    return z * sigmoid(z)


def rmsnorm(x, g):
    ms = sum(v * v for v in x) / len(x)
    s = 1.0 / math.sqrt(ms + EPS) if MUT != "eps_outside" else 1.0 / (math.sqrt(ms) + EPS)
    return [v * s * gi for v, gi in zip(x, g)]


def l2norm(x):
    s = 1.0 / math.sqrt(sum(v * v for v in x) + EPS)
    return [v * s for v in x]


def softmax(z):
    mx = max(z)
    e = [math.exp(v - mx) for v in z]
    s = sum(e)
    return [v / s for v in e]


def log_softmax_at(z, t):
    mx = max(z)
    lse = mx + math.log(sum(math.exp(v - mx) for v in z))
    return z[t] - lse


# ---------------------------------------------------------------- SPEC §3 Engram hashing
FNV_OFF, FNV_PRIME, M64 = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1


def fnv1a(bs):
    h = FNV_OFF
    for b in bs:
        h ^= b
        h = (h * FNV_PRIME) & M64
    return h


def engram_row(seq, t, n, R):
    """the n symbols ending at t (before the start: 256); hash n as one byte, then each symbol
    oldest first as 2 little-endian bytes; row = hash mod R"""
    bs = [n & 0xFF] if MUT != "no_n_byte" else []
    for p in (range(t - n + 1, t + 1) if MUT != "hash_newest_first" else range(t, t - n, -1)):
        if MUT == "pad0":
            s = seq[p] if p >= 0 else 0
        else:
            s = seq[p] if p >= 0 else 256
        bs += [s & 0xFF, (s >> 8) & 0xFF]
    return fnv1a(bs) % R


# ---------------------------------------------------------------- the model
class Dormouse:
    def __init__(self, cfg, arms, tens):
        self.c, self.arms, self.P = cfg, arms, tens
        c = cfg
        self.d, self.H, self.L, self.E, self.k = c["d"], c["H"], c["L"], c["E"], c["k"]
        self.dh = self.d // self.H
        P = tens
        self.emb = mat(P, "emb")
        self.iter_emb = mat(P, "iter_emb")
        self.blk_norm = vec(P, "blk_norm")
        self.ctrl_w, self.ctrl_b, self.router = mat(P, "ctrl.w"), vec(P, "ctrl.b"), mat(P, "ctrl.router")
        self.wq, self.wk, self.wv, self.wb = mat(P, "kda.wq"), mat(P, "kda.wk"), mat(P, "kda.wv"), mat(P, "kda.wb")
        self.wf1, self.wf2 = mat(P, "kda.wf1"), mat(P, "kda.wf2")
        self.A, self.dt_bias, self.w_on = vec(P, "kda.A"), vec(P, "kda.dt_bias"), vec(P, "kda.w_on")
        self.wg1, self.wg2, self.b_g, self.wo = mat(P, "kda.wg1"), mat(P, "kda.wg2"), vec(P, "kda.b_g"), mat(P, "kda.wo")
        self.mk, self.mvw = mat(P, "mem.wk"), mat(P, "mem.wv")
        self.mem_gn, self.mem_gk = vec(P, "mem.norm_n"), vec(P, "mem.norm_k")
        self.alpha = vec(P, "alpha")[0]
        self.outproj = mats3(P, "outproj")
        self.out_norm = vec(P, "out_norm")
        self.head = mat(P, "head")
        self.tables = mats3(P, "engram.tables")
        # TSCT experts: W1_e = U1 diag(s1) V1^T (f x d), W2_e = U2 diag(s2) V2^T (d x f)
        U1, V1, U2, V2 = mats3(P, "moe.U1"), mats3(P, "moe.V1"), mats3(P, "moe.U2"), mats3(P, "moe.V2")
        s1, s2 = mat(P, "moe.s1"), mat(P, "moe.s2")
        self.W1, self.W2 = [], []
        for e in range(self.E):
            self.W1.append(matmul([[u * s for u, s in zip(row, s1[e])] for row in U1[e]], transpose(V1[e])))
            self.W2.append(matmul([[u * s for u, s in zip(row, s2[e])] for row in U2[e]], transpose(V2[e])))
        self.acts = {}

    # ---- KDA, recurrent form (SPEC §2), one sequence of block inputs ns [T][d]
    def kda(self, ns):
        d, H, dh = self.d, self.H, self.dh
        gmin = self.c["g_min"]
        S = [[[0.0] * dh for _ in range(dh)] for _ in range(H)]   # S_0 = 0, per head [dh x dh]
        outs = []
        for n in ns:
            qf, kf, vf = mv(self.wq, n), mv(self.wk, n), mv(self.wv, n)
            bf = mv(self.wb, n)
            z = mv(self.wf2, mv(self.wf1, n))                     # d -> dh -> H*dh
            gt = mv(self.wg2, mv(self.wg1, n))
            og = [0.0] * d
            for h in range(H):
                sl = slice(h * dh, (h + 1) * dh)
                q = l2norm([silu(v) for v in qf[sl]])
                k = l2norm([silu(v) for v in kf[sl]])
                v = [silu(u) for u in vf[sl]]
                beta = sigmoid(bf[h])
                eA = math.exp(self.A[h])
                if MUT == "A_not_exp":
                    eA = self.A[h]
                g = [gmin * sigmoid(eA * (z[h * dh + j] + self.dt_bias[h * dh + j])) for j in range(dh)]
                Sh = S[h]
                if MUT == "write_then_decay":
                    Stk = [sum(Sh[i][j] * k[i] for i in range(dh)) for j in range(dh)]
                    for i in range(dh):
                        Sh[i] = [Sh[i][j] + k[i] * beta * (v[j] - Stk[j]) for j in range(dh)]
                    for i in range(dh):
                        Sh[i] = [math.exp(g[i]) * s for s in Sh[i]]
                    g = [0.0] * dh
                    beta = 0.0
                # decay first: S <- Diag(exp(g)) S (row i of S scaled by exp(g_i))
                for i in range(dh):
                    a = math.exp(g[i])
                    Sh[i] = [a * s for s in Sh[i]]
                # delta-rule write: S <- S + beta k (v - S^T k)^T
                Stk = [sum(Sh[i][j] * k[i] for i in range(dh)) for j in range(dh)]
                w = [beta * (v[j] - Stk[j]) for j in range(dh)]
                for i in range(dh):
                    Sh[i] = [Sh[i][j] + k[i] * w[j] for j in range(dh)]
                qs = [qi * dh ** -0.5 for qi in q] if MUT != "no_qscale" else q
                o = [sum(Sh[i][j] * qs[i] for i in range(dh)) for j in range(dh)]   # S^T q
                on = rmsnorm(o, self.w_on)                                          # RMSNorm_head * w_on
                for j in range(dh):
                    og[h * dh + j] = on[j] * sigmoid(gt[h * dh + j] + self.b_g[h * dh + j])
            outs.append(mv(self.wo, og))
        return outs

    def forward(self, B, T, x, y):
        d, L, E, k = self.d, self.L, self.E, self.k
        on = self.arms
        lam = self.c["lam_max"]
        alpha = self.alpha if on["rezero"] else 1.0
        N = B * T
        h0 = [list(self.emb[t]) for t in x]
        # Engram: retrieved memory once per sequence
        R = self.c["rows"]
        m = []
        for b in range(B):
            seq = x[b * T:(b + 1) * T]
            for t in range(T):
                row = []
                for oi, n in enumerate(self.c["orders"]):
                    row += self.tables[oi][engram_row(seq, t, n, R)]
                m.append(row)
        key = [mv(self.mk, mt) for mt in m]
        val = [mv(self.mvw, mt) for mt in m]
        kn = [rmsnorm(kt, self.mem_gk) for kt in key]
        self.acts["h0"], self.acts["m"] = h0, m
        h = [list(r) for r in h0]
        ys = [[0.0] * d for _ in range(N)]
        depth_ce, aux_list = [], []
        for i in range(L):
            u = [[a + b for a, b in zip(h[t], self.iter_emb[i])] for t in range(N)]
            n = [rmsnorm(ut, self.blk_norm) for ut in u]
            ctrl = [[sigmoid(v + bb) for v, bb in zip(mv(self.ctrl_w, nt), self.ctrl_b)] for nt in n]
            zr = [mv(self.router, nt) for nt in n]
            # attention arm
            if on["kda"]:
                a = []
                for b in range(B):
                    a += self.kda(n[b * T:(b + 1) * T])
            else:
                a = [[0.0] * d for _ in range(N)]
            # memory arm
            if on["engram"]:
                e = []
                for t in range(N):
                    nn = rmsnorm(n[t], self.mem_gn)
                    gate = sigmoid(sum(p * q for p, q in zip(nn, kn[t])) / math.sqrt(d))
                    e.append([gate * v for v in val[t]])
            else:
                e = [[0.0] * d for _ in range(N)]
            # expert arm: dropless top-k
            g = [[0.0] * d for _ in range(N)]
            if on["moe"]:
                cnt = [0] * E
                Psum = [0.0] * E
                for t in range(N):
                    p = softmax(zr[t])
                    for ee in range(E):
                        Psum[ee] += p[ee]
                    order = sorted(range(E), key=lambda ee: (-p[ee], ee if MUT != "ties_high" else -ee))   # ties: lower index
                    chosen = order[:k]
                    if k == 1 and MUT != "k1_renorm":
                        wts = [p[chosen[0]]]
                    else:
                        s = sum(p[ee] for ee in chosen)
                        wts = [p[ee] / s for ee in chosen]
                    for ee, wgt in zip(chosen, wts):
                        cnt[ee] += 1
                        hid = [silu(v) for v in mv(self.W1[ee], n[t])]
                        out = mv(self.W2[ee], hid)
                        g[t] = [gv + wgt * ov for gv, ov in zip(g[t], out)]
                # Switch aux: E * sum_e f_e P_e, f_e = assignments / (N k), P_e = mean p_e
                aux_list.append(E * sum((cnt[ee] / (N * (k if MUT != "aux_no_k" else 1))) * (Psum[ee] / N) for ee in range(E)))
            body = []
            for t in range(N):
                wa, wm, wf = ctrl[t]
                wm = min(wm, lam)
                body.append([wa * a[t][j] + wm * e[t][j] + wf * g[t][j] for j in range(d)])
            h = [[h[t][j] + alpha * body[t][j] for j in range(d)] for t in range(N)]
            yi = [mv(self.outproj[i], ht) for ht in h]
            ys = [[s + v for s, v in zip(ys[t], yi[t])] for t in range(N)]
            ybar = [[v / (i + 1) for v in ys[t]] for t in range(N)] if MUT != "no_ybar" else yi
            ce = 0.0
            losses = []
            for t in range(N):
                logits = mv(self.head, rmsnorm(ybar[t], self.out_norm))
                l = -log_softmax_at(logits, y[t])
                losses.append(l)
                ce += l
            depth_ce.append(ce / N)
            for nm, v in (("u", u), ("n", n), ("ctrl", ctrl), ("z", zr), ("a", a), ("e", e), ("gout", g),
                          ("body", body), ("h", h), ("y", yi), ("ybar", ybar), ("losses", [[l] for l in losses])):
                self.acts["%s.%d" % (nm, i + 1)] = v
        aux = sum(aux_list) / len(aux_list) if aux_list else 0.0   # averaged over iterations
        return depth_ce, aux


def main():
    pre = sys.argv[1]
    cfg, arms, tens, B, T, x, y = read_dump(pre + ".params")
    M = Dormouse(cfg, arms, tens)
    depth_ce, aux = M.forward(B, T, x, y)
    L = cfg["L"]
    train = depth_ce[L - 1] if cfg["loss_final"] else sum(depth_ce) / L   # loss = final | rec
    obj = train + (cfg["moe_aux"] * aux if (arms["aux"] and arms["moe"]) else 0.0)
    out = {"depth_loss %d" % (i + 1): v for i, v in enumerate(depth_ce)}
    out["depth1_last"] = depth_ce[0]
    out["train_loss"] = train
    out["last_aux"] = aux
    out["objective"] = obj
    for kk, v in out.items():
        print("%s %.17g" % (kk, v))
    if "--acts" in sys.argv:
        import json
        with open(pre + ".pyacts.json", "w") as f:
            json.dump(M.acts, f)


if __name__ == "__main__":
    main()
