// parity.cu — every op of the CUDA Backend table against the CPU table (kernels/backend.h).
// Random inputs on the host; the CPU op runs on host copies, the CUDA op on device copies; the
// outputs are compared with the normwise relative error max|gpu - cpu| / max|cpu| (a per-element
// ratio would blow up on entries that are ~0). Backward ops accumulate (+=), so every d-buffer
// starts from the same random values on both sides: that checks the accumulation too.
// Tolerances: 1e-4 at fp32; 3e-2 for the bf16 matrix products. Determinism: scatters with every
// position colliding on one row, run twice, must be bit-identical (and, being the CPU's float
// adds in the CPU's order, equal to the CPU's).
// Exit status: 0 when every row passes. Needs a GPU; builds anywhere nvcc does (tests/gpu/run.sh).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
extern "C" {
#include "../../kernels/backend.h"
void cuda_set_precision(int fp32);
}

static const Backend *C_, *G_;
static int n_fail = 0, n_pass = 0;

// ---- random numbers: a fixed-seed xorshift, so a failure reproduces ----
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float urand() {  // [0, 1)
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0));
}
static float nrand() { return (urand() + urand() + urand() + urand() - 2.0f) * 1.7320508f; }
static std::vector<float> randv(size_t n, float scale = 1) {
    std::vector<float> v(n);
    for (auto &x : v) x = nrand() * scale;
    return v;
}

// ---- device mirrors ----
struct Dev {
    void *p = NULL; size_t bytes = 0;
    Dev() {}
    explicit Dev(size_t b) : bytes(b) { p = G_->alloc(b); if (!p) { fprintf(stderr, "device alloc failed\n"); exit(2); } }
    ~Dev() { if (p) G_->free(p); }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    float *f() { return (float *)p; }
    int *i() { return (int *)p; }
};
template <typename T> static Dev *up(const std::vector<T> &v) {
    Dev *d = new Dev(sizeof(T) * (v.size() ? v.size() : 1));
    if (v.size()) G_->upload(d->p, v.data(), sizeof(T) * v.size());
    return d;
}
template <typename T> static std::vector<T> down(Dev *d, size_t n) {
    std::vector<T> v(n);
    if (n) G_->download(v.data(), d->p, sizeof(T) * n);
    return v;
}

static void report(const char *name, double err, double tol, const char *note = "") {
    int ok = err <= tol;  // NaN fails
    printf("  %-34s %-4s  rel err %9.2e  (tol %.0e) %s\n", name, ok ? "PASS" : "FAIL", err, tol, note);
    if (ok) n_pass++; else n_fail++;
}
static double relerr(const float *cpu, const float *gpu, size_t n) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i]) && isfinite(cpu[i])) return INFINITY;
        mx = fmax(mx, fabs((double)cpu[i]));
        md = fmax(md, fabs((double)gpu[i] - cpu[i]));
    }
    return mx > 0 ? md / mx : md;
}
static void cmp(const char *name, const std::vector<float> &cpu, Dev *gpu, double tol) {
    std::vector<float> g = down<float>(gpu, cpu.size());
    report(name, relerr(cpu.data(), g.data(), cpu.size()), tol);
}
static void cmp_exact_i(const char *name, const std::vector<int> &cpu, Dev *gpu) {
    std::vector<int> g = down<int>(gpu, cpu.size());
    size_t bad = 0;
    for (size_t i = 0; i < cpu.size(); i++) bad += cpu[i] != g[i];
    char note[64];
    snprintf(note, sizeof note, "(%zu of %zu differ)", bad, cpu.size());
    report(name, bad ? 1.0 : 0.0, 0, note);
}

// ================================================================================================
static void t_matmul(int fp32) {
    cuda_set_precision(fp32);
    double tol = fp32 ? 1e-4 : 3e-2;
    const char *tag = fp32 ? "fp32" : "bf16";
    char nm[64];
    int N = 67, Cc = 96, OC = 130;
    auto inp = randv((size_t)N * Cc), W = randv((size_t)OC * Cc, 0.1f), bias = randv(OC);
    Dev *dinp = up(inp), *dW = up(W), *dbias = up(bias), *dout_ = new Dev(sizeof(float) * N * OC);
    std::vector<float> out((size_t)N * OC);
    C_->matmul_forward(out.data(), inp.data(), W.data(), bias.data(), N, Cc, OC);
    G_->matmul_forward(dout_->f(), dinp->f(), dW->f(), dbias->f(), N, Cc, OC);
    snprintf(nm, sizeof nm, "matmul_forward %s", tag); cmp(nm, out, dout_, tol);
    // backward, accumulating onto random starts
    auto dy = randv((size_t)N * OC), gi = randv((size_t)N * Cc), gW = randv((size_t)OC * Cc), gb = randv(OC);
    Dev *ddy = up(dy), *dgi = up(gi), *dgW = up(gW), *dgb = up(gb);
    C_->matmul_backward(gi.data(), gW.data(), gb.data(), dy.data(), inp.data(), W.data(), N, Cc, OC);
    G_->matmul_backward(dgi->f(), dgW->f(), dgb->f(), ddy->f(), dinp->f(), dW->f(), N, Cc, OC);
    snprintf(nm, sizeof nm, "matmul_backward dinp %s", tag); cmp(nm, gi, dgi, tol);
    snprintf(nm, sizeof nm, "matmul_backward dW %s", tag); cmp(nm, gW, dgW, tol);
    snprintf(nm, sizeof nm, "matmul_backward dbias %s", tag); cmp(nm, gb, dgb, 1e-4);  // fp32 always
    // gemm: all transposes, alpha/beta, padded leading dimensions
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++) {
            int M = 37, Nn = 45, K = 29;
            int ar = tA ? K : M, ac = tA ? M : K, br = tB ? Nn : K, bc = tB ? K : Nn;
            int lda = ac + 3, ldb = bc + 5, ldc = Nn + 2;
            auto A = randv((size_t)ar * lda), Bm = randv((size_t)br * ldb), Cm = randv((size_t)M * ldc);
            Dev *dA = up(A), *dB = up(Bm), *dC = up(Cm);
            C_->gemm(tA, tB, M, Nn, K, 0.7f, A.data(), lda, Bm.data(), ldb, 0.3f, Cm.data(), ldc);
            G_->gemm(tA, tB, M, Nn, K, 0.7f, dA->f(), lda, dB->f(), ldb, 0.3f, dC->f(), ldc);
            snprintf(nm, sizeof nm, "gemm tA=%d tB=%d %s", tA, tB, tag); cmp(nm, Cm, dC, tol);
            delete dA; delete dB; delete dC;
        }
    delete dinp; delete dW; delete dbias; delete dout_; delete ddy; delete dgi; delete dgW; delete dgb;
    cuda_set_precision(1);
}

static void t_norms() {
    int N = 53, Cc = 130;
    auto x = randv((size_t)N * Cc, 2), gain = randv(Cc), dy = randv((size_t)N * Cc);
    Dev *dx = up(x), *dgain = up(gain), *ddy = up(dy);
    for (int withgain = 1; withgain >= 0; withgain--) {
        std::vector<float> out((size_t)N * Cc), rstd(N);
        Dev dout_(sizeof(float) * N * Cc), drstd(sizeof(float) * N);
        const float *gc = withgain ? gain.data() : NULL, *gg = withgain ? dgain->f() : NULL;
        C_->rmsnorm_forward(out.data(), rstd.data(), x.data(), gc, N, Cc);
        G_->rmsnorm_forward(dout_.f(), drstd.f(), dx->f(), gg, N, Cc);
        cmp(withgain ? "rmsnorm_forward out" : "rmsnorm_forward out (no gain)", out, &dout_, 1e-4);
        cmp("rmsnorm_forward rstd", rstd, &drstd, 1e-4);
        auto gx = randv((size_t)N * Cc), gg0 = randv(Cc);
        Dev *dgx = up(gx), *dgg = up(gg0);
        C_->rmsnorm_backward(gx.data(), withgain ? gg0.data() : NULL, dy.data(), x.data(), gc, rstd.data(), N, Cc);
        G_->rmsnorm_backward(dgx->f(), withgain ? dgg->f() : NULL, ddy->f(), dx->f(), gg, drstd.f(), N, Cc);
        cmp("rmsnorm_backward dinp", gx, dgx, 1e-4);
        if (withgain) cmp("rmsnorm_backward dgain", gg0, dgg, 1e-4);
        delete dgx; delete dgg;
    }
    {
        std::vector<float> out((size_t)N * Cc), rn(N);
        Dev dout_(sizeof(float) * N * Cc), drn(sizeof(float) * N);
        C_->l2norm_forward(out.data(), rn.data(), x.data(), 0.125f, N, Cc);
        G_->l2norm_forward(dout_.f(), drn.f(), dx->f(), 0.125f, N, Cc);
        cmp("l2norm_forward out", out, &dout_, 1e-4);
        cmp("l2norm_forward rn", rn, &drn, 1e-4);
        auto gx = randv((size_t)N * Cc);
        Dev *dgx = up(gx);
        C_->l2norm_backward(gx.data(), dy.data(), out.data(), rn.data(), 0.125f, N, Cc);
        G_->l2norm_backward(dgx->f(), ddy->f(), dout_.f(), drn.f(), 0.125f, N, Cc);
        cmp("l2norm_backward dinp", gx, dgx, 1e-4);
        delete dgx;
    }
    delete dx; delete dgain; delete ddy;
}

static void t_elementwise() {
    size_t n = 10007;
    auto x = randv(n, 4), dy = randv(n), g0 = randv(n);
    Dev *dx = up(x), *ddy = up(dy);
    std::vector<float> y(n);
    Dev dyv(sizeof(float) * n);
    C_->silu_forward(y.data(), x.data(), n);
    G_->silu_forward(dyv.f(), dx->f(), n);
    cmp("silu_forward", y, &dyv, 1e-4);
    { auto g = g0; Dev *dg = up(g);
      C_->silu_backward(g.data(), dy.data(), x.data(), n);
      G_->silu_backward(dg->f(), ddy->f(), dx->f(), n);
      cmp("silu_backward", g, dg, 1e-4); delete dg; }
    { auto xi = x; Dev *dxi = up(xi);  // in place, as the decoder calls it
      C_->silu_forward(xi.data(), xi.data(), n);
      G_->silu_forward(dxi->f(), dxi->f(), n);
      cmp("silu_forward in place", xi, dxi, 1e-4); delete dxi; }
    C_->sigmoid_forward(y.data(), x.data(), n);
    G_->sigmoid_forward(dyv.f(), dx->f(), n);
    cmp("sigmoid_forward", y, &dyv, 1e-4);
    { auto g = g0; Dev *dg = up(g);
      C_->sigmoid_backward(g.data(), dy.data(), y.data(), n);
      G_->sigmoid_backward(dg->f(), ddy->f(), dyv.f(), n);
      cmp("sigmoid_backward", g, dg, 1e-4); delete dg; }
    delete dx; delete ddy;
}

static void t_embedding_ce() {
    int N = 1000, Cc = 64, V = 256;
    std::vector<int> x(N);
    for (auto &v : x) v = (int)(urand() * V);
    auto table = randv((size_t)V * Cc);
    Dev *dxx = up(x), *dtab = up(table);
    std::vector<float> out((size_t)N * Cc);
    Dev dout_(sizeof(float) * N * Cc);
    C_->embedding_forward(out.data(), x.data(), table.data(), N, Cc);
    G_->embedding_forward(dout_.f(), dxx->i(), dtab->f(), N, Cc);
    cmp("embedding_forward", out, &dout_, 0);
    auto dy = randv((size_t)N * Cc), gt = randv((size_t)V * Cc);
    Dev *ddy = up(dy), *dgt = up(gt), *dgt2 = up(gt);
    C_->embedding_backward(gt.data(), dy.data(), x.data(), N, Cc);
    G_->embedding_backward(dgt->f(), ddy->f(), dxx->i(), N, Cc);
    G_->embedding_backward(dgt2->f(), ddy->f(), dxx->i(), N, Cc);
    cmp("embedding_backward", gt, dgt, 1e-6);
    { auto a = down<float>(dgt, gt.size()), b = down<float>(dgt2, gt.size());
      report("embedding_backward twice bit-equal", memcmp(a.data(), b.data(), a.size() * 4) ? 1 : 0, 0); }
    delete dxx; delete dtab; delete ddy; delete dgt; delete dgt2;

    int Nc = 77;
    auto logits = randv((size_t)Nc * V, 3);
    std::vector<int> tg(Nc);
    for (auto &v : tg) v = (int)(urand() * V);
    Dev *dl = up(logits), *dtg = up(tg), dloss(sizeof(float) * Nc), dprob(sizeof(float) * Nc * V);
    std::vector<float> loss(Nc), prob((size_t)Nc * V);
    C_->softmax_ce_forward(loss.data(), prob.data(), logits.data(), tg.data(), Nc, V);
    G_->softmax_ce_forward(dloss.f(), dprob.f(), dl->f(), dtg->i(), Nc, V);
    cmp("softmax_ce_forward losses", loss, &dloss, 1e-4);
    cmp("softmax_ce_forward probs", prob, &dprob, 1e-4);
    auto g = randv((size_t)Nc * V);
    Dev *dg = up(g);
    C_->softmax_ce_backward(g.data(), prob.data(), tg.data(), 0.01f, Nc, V);
    G_->softmax_ce_backward(dg->f(), dprob.f(), dtg->i(), 0.01f, Nc, V);
    cmp("softmax_ce_backward", g, dg, 1e-4);
    delete dl; delete dtg; delete dg;
}

static void t_engram() {
    int B = 3, T = 41, O = 3, D = 16, N = B * T;
    int orders[3] = {2, 3, 4};
    int64_t R = 1000;
    std::vector<int> x(N);
    for (auto &v : x) v = (int)(urand() * 256);
    Dev *dxx = up(x), drows(sizeof(int32_t) * O * N);
    std::vector<int32_t> rows((size_t)O * N);
    C_->engram_rows(rows.data(), x.data(), B, T, orders, O, R);
    G_->engram_rows((int32_t *)drows.p, dxx->i(), B, T, orders, O, R);  // orders: host array
    cmp_exact_i("engram_rows (FNV-1a)", std::vector<int>(rows.begin(), rows.end()), &drows);
    auto tables = randv((size_t)O * R * D);
    Dev *dtab = up(tables), dm(sizeof(float) * N * O * D);
    std::vector<float> m((size_t)N * O * D);
    C_->engram_gather(m.data(), tables.data(), rows.data(), N, O, R, D);
    G_->engram_gather(dm.f(), dtab->f(), (int32_t *)drows.p, N, O, R, D);
    cmp("engram_gather", m, &dm, 0);
    auto gm = randv((size_t)N * O * D), gt = randv((size_t)O * R * D);
    Dev *dgm = up(gm), *dgt = up(gt);
    C_->engram_scatter(gt.data(), gm.data(), rows.data(), N, O, R, D);
    G_->engram_scatter(dgt->f(), dgm->f(), (int32_t *)drows.p, N, O, R, D);
    cmp("engram_scatter", gt, dgt, 1e-6);
    delete dgt;
    // heavy collision: every position of every order on row 5 — twice, bit-identical
    int Nh = 4096;
    std::vector<int32_t> hrows((size_t)O * Nh, 5);
    auto hgm = randv((size_t)Nh * O * D), ht = randv((size_t)O * R * D);
    Dev *dhr = up(hrows), *dhg = up(hgm), *dt1 = up(ht);
    C_->engram_scatter(ht.data(), hgm.data(), hrows.data(), Nh, O, R, D);
    G_->engram_scatter(dt1->f(), dhg->f(), (int32_t *)dhr->p, Nh, O, R, D);
    auto a = down<float>(dt1, ht.size());
    report("engram_scatter collide vs CPU", relerr(ht.data(), a.data(), a.size()), 1e-6);
    {   // determinism proper: two runs from the same start must agree bit for bit
        std::vector<float> start = randv((size_t)O * R * D);
        Dev *s1 = up(start), *s2 = up(start);
        G_->engram_scatter(s1->f(), dhg->f(), (int32_t *)dhr->p, Nh, O, R, D);
        G_->engram_scatter(s2->f(), dhg->f(), (int32_t *)dhr->p, Nh, O, R, D);
        auto r1 = down<float>(s1, start.size()), r2 = down<float>(s2, start.size());
        report("engram_scatter collide twice bit-equal", memcmp(r1.data(), r2.data(), r1.size() * 4) ? 1 : 0, 0);
        delete s1; delete s2;
    }
    delete dxx; delete dtab; delete dgm; delete dhr; delete dhg; delete dt1;
}

// q, k l2-normalised rows (q also scaled by D^-1/2), v ~ N(0,1), beta in (0,1), g in [-5, 0]
static void kda_inputs(int B, int T, int H, int D, std::vector<float> &q, std::vector<float> &k,
                       std::vector<float> &v, std::vector<float> &beta, std::vector<float> &g) {
    size_t n = (size_t)B * T * H * D;
    q = randv(n); k = randv(n); v = randv(n); g.resize(n); beta.resize((size_t)B * T * H);
    for (size_t r = 0; r < n / D; r++) {
        double sq = 0, sk = 0;
        for (int c = 0; c < D; c++) { sq += q[r * D + c] * q[r * D + c]; sk += k[r * D + c] * k[r * D + c]; }
        for (int c = 0; c < D; c++) {
            q[r * D + c] = (float)(q[r * D + c] / sqrt(sq) / sqrt((double)D));
            k[r * D + c] = (float)(k[r * D + c] / sqrt(sk));
        }
    }
    for (auto &x : g) x = -5.0f / (1.0f + expf(-(nrand() * 2 - 2)));
    for (auto &x : beta) x = 1.0f / (1.0f + expf(-nrand()));
}

static void t_kda(int T, int C) {
    int B = 2, H = 2, D = 64;
    char nm[80];
    std::vector<float> q, k, v, beta, g;
    kda_inputs(B, T, H, D, q, k, v, beta, g);
    size_t n = (size_t)B * T * H * D;
    Dev *dq = up(q), *dk = up(k), *dv = up(v), *db = up(beta), *dg = up(g), dO(sizeof(float) * n);
    std::vector<float> o(n), ws(C_->kda_ws_size(B, T, H, D, C));
    Dev dws(sizeof(float) * G_->kda_ws_size(B, T, H, D, C));
    C_->kda_forward(o.data(), ws.data(), q.data(), k.data(), v.data(), beta.data(), g.data(), B, T, H, D, C);
    G_->kda_forward(dO.f(), dws.f(), dq->f(), dk->f(), dv->f(), db->f(), dg->f(), B, T, H, D, C);
    snprintf(nm, sizeof nm, "kda_forward T=%d C=%d", T, C); cmp(nm, o, &dO, 1e-4);
    auto dy = randv(n), gq = randv(n), gk = randv(n), gv = randv(n), gb = randv(beta.size()), gg = randv(n);
    Dev *ddy = up(dy), *dgq = up(gq), *dgk = up(gk), *dgv = up(gv), *dgb = up(gb), *dgg = up(gg);
    C_->kda_backward(gq.data(), gk.data(), gv.data(), gb.data(), gg.data(), dy.data(), q.data(), k.data(),
                     v.data(), beta.data(), g.data(), ws.data(), B, T, H, D, C);
    G_->kda_backward(dgq->f(), dgk->f(), dgv->f(), dgb->f(), dgg->f(), ddy->f(), dq->f(), dk->f(), dv->f(),
                     db->f(), dg->f(), dws.f(), B, T, H, D, C);
    const char *names[5] = {"dq", "dk", "dv", "dbeta", "dg"};
    std::vector<float> *cs[5] = {&gq, &gk, &gv, &gb, &gg};
    Dev *gs[5] = {dgq, dgk, dgv, dgb, dgg};
    for (int i = 0; i < 5; i++) {
        snprintf(nm, sizeof nm, "kda_backward %s T=%d C=%d", names[i], T, C);
        cmp(nm, *cs[i], gs[i], 1e-4);
    }
    delete dq; delete dk; delete dv; delete db; delete dg; delete ddy;
    for (int i = 0; i < 5; i++) delete gs[i];
}

static void t_kda_step() {
    int H = 3, D = 64, T = 20;
    std::vector<float> q, k, v, beta, g;
    kda_inputs(1, T, H, D, q, k, v, beta, g);
    std::vector<float> S((size_t)H * D * D, 0), o((size_t)H * D);
    Dev dS(sizeof(float) * H * D * D), dO(sizeof(float) * H * D);
    Dev *dq = up(q), *dk = up(k), *dv = up(v), *db = up(beta), *dg = up(g);
    for (int t = 0; t < T; t++) {
        size_t r = (size_t)t * H * D;
        C_->kda_step(o.data(), S.data(), q.data() + r, k.data() + r, v.data() + r, beta.data() + (size_t)t * H, g.data() + r, H, D);
        G_->kda_step(dO.f(), dS.f(), dq->f() + r, dk->f() + r, dv->f() + r, db->f() + (size_t)t * H, dg->f() + r, H, D);
    }
    cmp("kda_step o (20 steps)", o, &dO, 1e-4);
    cmp("kda_step S (20 steps)", S, &dS, 1e-4);
    delete dq; delete dk; delete dv; delete db; delete dg;
}

// N tokens; one >= 0: every token routed to expert `one` (the others get no rows)
static void t_moe(int k, int ties, int N = 100, int one = -1) {
    MoEShape s = {N, 64, 4, k, 16, 96};
    char nm[80], tag[48];
    snprintf(tag, sizeof tag, "k=%d N=%d%s%s", k, N, ties ? " ties" : "", one >= 0 ? " one-expert" : "");
    int d = s.d, E = s.E, r = s.r, f = s.f;
    auto n = randv((size_t)N * d), z = randv((size_t)N * E);
    if (ties)  // every other token: all logits equal, or the top two equal
        for (int t = 0; t < N; t += 2)
            for (int e = 0; e < E; e++) z[(size_t)t * E + e] = (t % 4 == 0) ? 0.5f : (e < 2 ? 1.0f : z[(size_t)t * E + e] * 0.1f);
    if (one >= 0)
        for (int t = 0; t < N; t++) z[(size_t)t * E + one] += 30;
    std::vector<float> U1 = randv((size_t)E * f * r, 0.2f), s1 = randv((size_t)E * r), V1 = randv((size_t)E * d * r, 0.2f),
                       U2 = randv((size_t)E * d * r, 0.2f), s2 = randv((size_t)E * r), V2 = randv((size_t)E * f * r, 0.2f);
    Dev *dn = up(n), *dz = up(z), *dU1 = up(U1), *ds1 = up(s1), *dV1 = up(V1), *dU2 = up(U2), *ds2 = up(s2), *dV2 = up(V2);
    MoEParams pc = {U1.data(), s1.data(), V1.data(), U2.data(), s2.data(), V2.data()};
    MoEParams pg = {dU1->f(), ds1->f(), dV1->f(), dU2->f(), ds2->f(), dV2->f()};
    std::vector<float> out((size_t)N * d), ws(C_->moe_ws_size(s));
    Dev dout_(sizeof(float) * N * d), dws(sizeof(float) * G_->moe_ws_size(s));
    float auxc = 0, auxg = 0;
    std::vector<int> loadc(E), loadg(E);
    Dev daux(sizeof(float)), dload(sizeof(int) * E);  // aux, load: backend memory, written on the device
    C_->moe_forward(out.data(), &auxc, loadc.data(), ws.data(), n.data(), z.data(), pc, s);
    G_->moe_forward(dout_.f(), daux.f(), dload.i(), dws.f(), dn->f(), dz->f(), pg, s);
    G_->download(&auxg, daux.p, sizeof(float));
    G_->download(loadg.data(), dload.p, sizeof(int) * E);
    std::vector<float> outg = down<float>(&dout_, out.size());
    snprintf(nm, sizeof nm, "moe_forward out %s", tag); cmp(nm, out, &dout_, 1e-4);
    snprintf(nm, sizeof nm, "moe_forward aux %s", tag); report(nm, fabs(auxc - auxg) / fmax(fabs(auxc), 1e-30), 1e-5);
    { int bad = 0; for (int e = 0; e < E; e++) bad += loadc[e] != loadg[e];
      snprintf(nm, sizeof nm, "moe_forward load %s", tag); report(nm, bad, 0, "(exact)"); }
    auto dy = randv((size_t)N * d), gn = randv((size_t)N * d), gz = randv((size_t)N * E);
    std::vector<float> gU1 = randv(U1.size()), gs1 = randv(s1.size()), gV1 = randv(V1.size()),
                       gU2 = randv(U2.size()), gs2 = randv(s2.size()), gV2 = randv(V2.size());
    Dev *ddy = up(dy), *dgn = up(gn), *dgz = up(gz), *dgU1 = up(gU1), *dgs1 = up(gs1), *dgV1 = up(gV1),
        *dgU2 = up(gU2), *dgs2 = up(gs2), *dgV2 = up(gV2);
    std::vector<float> init[8] = {gn, gz, gU1, gs1, gV1, gU2, gs2, gV2};  // the starting gradients
    MoEGrads gc = {gU1.data(), gs1.data(), gV1.data(), gU2.data(), gs2.data(), gV2.data()};
    MoEGrads gg = {dgU1->f(), dgs1->f(), dgV1->f(), dgU2->f(), dgs2->f(), dgV2->f()};
    C_->moe_backward(gn.data(), gz.data(), gc, dy.data(), 0.3f, ws.data(), n.data(), z.data(), pc, s);
    G_->moe_backward(dgn->f(), dgz->f(), gg, ddy->f(), 0.3f, dws.f(), dn->f(), dz->f(), pg, s);
    const char *names[8] = {"dn", "dz", "dU1", "ds1", "dV1", "dU2", "ds2", "dV2"};
    std::vector<float> *cs[8] = {&gn, &gz, &gU1, &gs1, &gV1, &gU2, &gs2, &gV2};
    Dev *gsd[8] = {dgn, dgz, dgU1, dgs1, dgV1, dgU2, dgs2, dgV2};
    std::vector<float> first[8];
    for (int i = 0; i < 8; i++) {
        snprintf(nm, sizeof nm, "moe_backward %s %s", names[i], tag);
        cmp(nm, *cs[i], gsd[i], 1e-4);
        first[i] = down<float>(gsd[i], cs[i]->size());
    }
    // determinism: forward + backward again from the same starting gradients (backward consumed
    // the forward's h), every output bit-identical
    for (int i = 0; i < 8; i++) G_->upload(gsd[i]->p, init[i].data(), sizeof(float) * init[i].size());
    G_->moe_forward(dout_.f(), daux.f(), dload.i(), dws.f(), dn->f(), dz->f(), pg, s);
    G_->moe_backward(dgn->f(), dgz->f(), gg, ddy->f(), 0.3f, dws.f(), dn->f(), dz->f(), pg, s);
    {
        float aux2 = 0;
        G_->download(&aux2, daux.p, sizeof(float));
        std::vector<float> out2 = down<float>(&dout_, out.size());
        int bad = memcmp(&aux2, &auxg, sizeof(float)) != 0;
        bad += memcmp(out2.data(), outg.data(), sizeof(float) * out.size()) != 0;
        for (int i = 0; i < 8; i++) {
            std::vector<float> again = down<float>(gsd[i], cs[i]->size());
            bad += memcmp(again.data(), first[i].data(), sizeof(float) * again.size()) != 0;
        }
        snprintf(nm, sizeof nm, "moe fwd+bwd rerun %s", tag);
        report(nm, bad, 0, "(bit-identical)");
    }
    for (int i = 0; i < 8; i++) delete gsd[i];
    delete dn; delete dz; delete dU1; delete ds1; delete dV1; delete dU2; delete ds2; delete dV2; delete ddy;
}

static void t_retract() {
    int rows = 96, r = 16;
    // near-orthonormal: Gram–Schmidt of a Gaussian, then a 5% perturbation
    std::vector<float> X = randv((size_t)rows * r);
    for (int j = 0; j < r; j++) {
        for (int i = 0; i < j; i++) {
            double dot = 0;
            for (int q = 0; q < rows; q++) dot += (double)X[q * r + i] * X[q * r + j];
            for (int q = 0; q < rows; q++) X[q * r + j] -= (float)(dot * X[q * r + i]);
        }
        double nn = 0;
        for (int q = 0; q < rows; q++) nn += (double)X[q * r + j] * X[q * r + j];
        for (int q = 0; q < rows; q++) X[q * r + j] = (float)(X[q * r + j] / sqrt(nn));
    }
    for (auto &x : X) x += 0.05f * nrand() / sqrtf((float)rows);
    Dev *dX = up(X);
    double ec = C_->orth_error(X.data(), rows, r), eg = G_->orth_error(dX->f(), rows, r);
    report("orth_error (perturbed frame)", fabs(ec - eg) / ec, 1e-6);
    std::vector<float> scr(C_->retract_scratch_size(rows, r));
    Dev dscr(sizeof(float) * G_->retract_scratch_size(rows, r));
    C_->retract(X.data(), rows, r, 3, scr.data());
    G_->retract(dX->f(), rows, r, 3, dscr.f());
    cmp("retract (3 Newton-Schulz iters)", X, dX, 1e-4);
    double ec2 = C_->orth_error(X.data(), rows, r), eg2 = G_->orth_error(dX->f(), rows, r);
    char note[80];
    snprintf(note, sizeof note, "(cpu %.2e gpu %.2e)", ec2, eg2);
    report("orth_error after retract < 1e-4", eg2, 1e-4, note);
    delete dX;
}

// ---- the optimizer ops (kernels/cpu/optim_ops.h): the same status, buffers and hyper-parameters
// on both sides; the GPU's OptStatus is uploaded/downloaded whole.
static OptStatus st_down(Dev *d) { OptStatus s; G_->download(&s, d->p, sizeof s); return s; }
static void t_optim() {
    // segments: two chunks, a small one, an empty one, a table-sized one
    const int nseg = 4;
    OptSeg segs[nseg] = {{0, 70000}, {70000, 123}, {70123, 0}, {70123, 4096}};
    size_t n = 70123 + 4096;
    auto g = randv(n, 0.01f);
    Dev *dg = up(g), dss(sizeof(double) * nseg), dbad(sizeof(int32_t) * nseg), dst(sizeof(OptStatus));
    OptStatus sc;
    memset(&sc, 0, sizeof sc);
    sc.t = 3;
    G_->upload(dst.p, &sc, sizeof sc);
    // the step's scalars and loss live on the device (StepHyper, a double); the CPU reads host copies
    StepHyper hh;
    memset(&hh, 0, sizeof hh);
    hh.lr = 3e-3; hh.lr_muon = 0.02; hh.mult = 1; hh.wd = 0.1; hh.beta1 = 0.9; hh.beta2 = 0.95; hh.eps = 1e-8;
    hh.muon_momentum = 0.95; hh.clip = 0.5; hh.retract_every = 2; hh.nan_limit = 0;
    double loss = 1.5;
    Dev dhp(sizeof(StepHyper)), dloss(sizeof(double));
    G_->upload(dhp.p, &hh, sizeof hh);
    G_->upload(dloss.p, &loss, sizeof loss);
    const StepHyper *ghp = (const StepHyper *)dhp.p;
    const double *gloss = (const double *)dloss.p;
    double ss[nseg];
    int32_t bad[nseg];
    C_->opt_sumsq(ss, bad, g.data(), segs, nseg);
    G_->opt_sumsq((double *)dss.p, (int32_t *)dbad.p, dg->f(), segs, nseg);
    double gss[nseg];
    int32_t gbad[nseg];
    G_->download(gss, dss.p, sizeof gss);
    G_->download(gbad, dbad.p, sizeof gbad);
    double e = 0;
    for (int i = 0; i < nseg; i++) e = fmax(e, fabs(gss[i] - ss[i]) / fmax(ss[i], 1e-300)), e += gbad[i] != bad[i];
    report("opt_sumsq (per segment, double)", e, 1e-12);
    // decide with the clip active and a retraction due (t 3 -> 4, every 2)
    C_->opt_decide(&sc, ss, bad, nseg, &loss, &hh);
    G_->opt_decide((OptStatus *)dst.p, (double *)dss.p, (int32_t *)dbad.p, nseg, gloss, ghp);
    OptStatus sg = st_down(&dst);
    int same = sg.t == sc.t && sg.skip == sc.skip && sg.clipped == sc.clipped && sg.retract == sc.retract &&
               sg.first_bad == sc.first_bad && sg.consecutive_skips == sc.consecutive_skips;
    report("opt_decide flags (t, skip, clip, retract)", same ? 0 : 1, 0);
    report("opt_decide gnorm, scale", fmax(fabs(sg.gnorm - sc.gnorm) / sc.gnorm, fabs(sg.scale - sc.scale) / sc.scale), 1e-12);
    C_->opt_clip(g.data(), n, &sc);
    G_->opt_clip(dg->f(), n, (OptStatus *)dst.p);
    cmp("opt_clip", g, dg, 1e-6);
    // AdamW over everything
    auto p = randv(n), m = randv(n, 0.01f), v = randv(n, 0.01f);
    for (auto &x : v) x = fabsf(x);
    Dev *dp = up(p), *dm = up(m), *dv = up(v);
    C_->opt_adamw(p.data(), g.data(), m.data(), v.data(), n, 1, &hh, &sc);
    G_->opt_adamw(dp->f(), dg->f(), dm->f(), dv->f(), n, 1, ghp, (OptStatus *)dst.p);
    cmp("opt_adamw p", p, dp, 1e-5); cmp("opt_adamw m", m, dm, 1e-5); cmp("opt_adamw v", v, dv, 1e-5);
    // lazy Adam rows: 3 tables of R = 50 rows of D = 16 at offset 70123 (the 4th segment is 4096
    // reals = only 256 rows: use R*O*D = 2400), duplicates and out-of-range rows
    int O = 3, N = 40, D = 16;
    int64_t R = 50;
    std::vector<int32_t> rows((size_t)O * N);
    for (size_t i = 0; i < rows.size(); i++) rows[i] = (int32_t)((i * 7919u) % 60) - 5;  // some < 0, some >= R
    std::vector<int64_t> rs((size_t)O * R, 2);
    Dev *drows = up(rows), *drs = up(rs);
    std::vector<unsigned char> wsc(C_->opt_adam_rows_ws_size(O, N, R));
    Dev dws(G_->opt_adam_rows_ws_size(O, N, R));
    size_t to = 70123;
    C_->opt_adam_rows(p.data() + to, g.data() + to, m.data() + to, v.data() + to, rs.data(), rows.data(), O, N, R, D,
                      wsc.data(), &hh, &sc);
    G_->opt_adam_rows(dp->f() + to, dg->f() + to, dm->f() + to, dv->f() + to, (int64_t *)drs->p, (int32_t *)drows->p,
                      O, N, R, D, dws.p, ghp, (OptStatus *)dst.p);
    cmp("opt_adam_rows p", p, dp, 1e-5); cmp("opt_adam_rows m", m, dm, 1e-5); cmp("opt_adam_rows v", v, dv, 1e-5);
    std::vector<int64_t> grs = down<int64_t>(drs, rs.size());
    size_t nd = 0;
    for (size_t i = 0; i < rs.size(); i++) nd += grs[i] != rs[i];
    report("opt_adam_rows row_steps (exact)", nd ? 1 : 0, 0);
    // Muon: wide and tall, plain and colrow; fp32 products (NS amplifies rounding: 2e-3)
    int shapes[2][2] = {{48, 80}, {96, 40}};
    for (int k = 0; k < 4; k++) {
        int rr = shapes[k & 1][0], cc = shapes[k & 1][1], nm = 2;
        size_t mn = (size_t)rr * cc * nm;
        auto mp = randv(mn), mg = randv(mn), mb = randv(mn, 0.1f);
        Dev *dmp = up(mp), *dmg = up(mg), *dmb = up(mb);
        std::vector<float> scr(C_->opt_muon_scratch_size(rr, cc));
        Dev dscr(sizeof(float) * G_->opt_muon_scratch_size(rr, cc));
        C_->opt_muon(mp.data(), mg.data(), mb.data(), nm, rr, cc, k >= 2, scr.data(), &hh, &sc);
        G_->opt_muon(dmp->f(), dmg->f(), dmb->f(), nm, rr, cc, k >= 2, dscr.f(), ghp, (OptStatus *)dst.p);
        char nmm[64];
        snprintf(nmm, sizeof nmm, "opt_muon %dx%d%s p", rr, cc, k >= 2 ? " colrow" : "");
        cmp(nmm, mp, dmp, 2e-3);
        snprintf(nmm, sizeof nmm, "opt_muon %dx%d%s momentum", rr, cc, k >= 2 ? " colrow" : "");
        cmp(nmm, mb, dmb, 1e-6);
        delete dmp; delete dmg; delete dmb;
    }
    // the gated retraction (the status says retract) and its orthogonality error
    {
        int rr = 96, r = 16;
        auto X = randv((size_t)rr * r, 0.1f);
        Dev *dX = up(X);
        std::vector<float> scr(C_->opt_retract_scratch_size(rr, r));
        Dev dscr(sizeof(float) * G_->opt_retract_scratch_size(rr, r));
        C_->opt_retract(X.data(), rr, r, 3, scr.data(), &sc);
        G_->opt_retract(dX->f(), rr, r, 3, dscr.f(), (OptStatus *)dst.p);
        cmp("opt_retract (status: retract)", X, dX, 1e-4);
        sg = st_down(&dst);
        report("opt_retract orth_err", fabs(sg.orth_err - sc.orth_err) / fmax(sc.orth_err, 1e-30), 1e-3);
        delete dX;
    }
    // a skipped step (non-finite gradient): the decision names the segment and nothing moves
    g[70000 + 5] = NAN;
    G_->upload(dg->f() + 70000 + 5, &g[70000 + 5], sizeof(float));
    C_->opt_sumsq(ss, bad, g.data(), segs, nseg);
    G_->opt_sumsq((double *)dss.p, (int32_t *)dbad.p, dg->f(), segs, nseg);
    C_->opt_decide(&sc, ss, bad, nseg, &loss, &hh);
    G_->opt_decide((OptStatus *)dst.p, (double *)dss.p, (int32_t *)dbad.p, nseg, gloss, ghp);
    sg = st_down(&dst);
    report("opt_decide skip: first_bad, counters", sg.skip == 1 && sg.first_bad == 1 && sg.first_bad == sc.first_bad &&
                                                       sg.t == sc.t && sg.total_skips == sc.total_skips ? 0 : 1, 0);
    std::vector<float> p0 = down<float>(dp, n), m0 = down<float>(dm, n), v0 = down<float>(dv, n);
    std::vector<int64_t> rs0 = down<int64_t>(drs, rs.size());
    G_->opt_clip(dg->f(), n, (OptStatus *)dst.p);
    G_->opt_adamw(dp->f(), dg->f(), dm->f(), dv->f(), n, 1, ghp, (OptStatus *)dst.p);
    G_->opt_adam_rows(dp->f() + to, dg->f() + to, dm->f() + to, dv->f() + to, (int64_t *)drs->p, (int32_t *)drows->p,
                      O, N, R, D, dws.p, ghp, (OptStatus *)dst.p);
    int moved = down<float>(dp, n) != p0 || down<float>(dm, n) != m0 || down<float>(dv, n) != v0 ||
                down<int64_t>(drs, rs.size()) != rs0;
    report("skipped step leaves p, m, v, row_steps", moved ? 1 : 0, 0);
    // nan_limit: a second skip in a row with nan_limit 2 halts the run; a halted decision changes
    // nothing (counters included) even when the loss and the gradients are finite again
    hh.nan_limit = 2;
    G_->upload(dhp.p, &hh, sizeof hh);
    C_->opt_decide(&sc, ss, bad, nseg, &loss, &hh);
    G_->opt_decide((OptStatus *)dst.p, (double *)dss.p, (int32_t *)dbad.p, nseg, gloss, ghp);
    sg = st_down(&dst);
    report("opt_decide nan_limit halts", sg.halted == 1 && sc.halted == 1 && sg.consecutive_skips == sc.consecutive_skips ? 0 : 1, 0);
    int32_t nobad[nseg] = {0, 0, 0, 0};
    G_->upload(dbad.p, nobad, sizeof nobad);
    C_->opt_decide(&sc, ss, nobad, nseg, &loss, &hh);
    G_->opt_decide((OptStatus *)dst.p, (double *)dss.p, (int32_t *)dbad.p, nseg, gloss, ghp);
    OptStatus sh = st_down(&dst);
    report("halted decision: a no-op, counters kept", sh.skip == 1 && sh.t == sg.t && sh.total_skips == sg.total_skips &&
                                                           sh.consecutive_skips == sg.consecutive_skips && sc.t == sh.t ? 0 : 1, 0);
    delete dg; delete dp; delete dm; delete dv; delete drows; delete drs;
}

// ---- the fused element-wise ops of the looped block (kernels/cpu/fused.h): the same inputs on
// both sides; strided outputs start from the same random buffer, so the untouched columns are
// compared too. The whole-array reductions also run twice on the GPU: bit-identical.
static void t_fused() {
    const int N = 67, H = 4, dh = 16, d = H * dh, E = 5, P = 3 * d + 11;
    const size_t Nd = (size_t)N * d;
    auto proj = randv((size_t)N * P, 2);
    Dev *dpr = up(proj);
    auto A = randv(H, 0.3f), bias = randv(d), row = randv(d), x = randv(Nd), y = randv(Nd), z = randv(Nd);
    Dev *dA = up(A), *db = up(bias), *drow = up(row), *dx = up(x), *dy = up(y), *dz = up(z);
    {  // add_row_forward
        std::vector<float> o(Nd); Dev dout_(sizeof(float) * Nd);
        C_->add_row_forward(o.data(), x.data(), row.data(), N, d);
        G_->add_row_forward(dout_.f(), dx->f(), drow->f(), N, d);
        cmp("add_row_forward", o, &dout_, 1e-6);
    }
    {  // silu_rows_forward from strided rows
        std::vector<float> o(Nd), sg(Nd); Dev dout_(sizeof(float) * Nd), dsg(sizeof(float) * Nd);
        C_->silu_rows_forward(o.data(), sg.data(), proj.data() + d, P, N, d);
        G_->silu_rows_forward(dout_.f(), dsg.f(), dpr->f() + d, P, N, d);
        cmp("silu_rows_forward out", o, &dout_, 1e-5);
        cmp("silu_rows_forward sigmoid", sg, &dsg, 1e-5);
    }
    {  // sigmoid_split_forward: gates with a bias + copied columns; and without either
        std::vector<float> sg((size_t)N * 3), cp((size_t)N * E), bt((size_t)N * H);
        Dev dsg(sizeof(float) * N * 3), dcp(sizeof(float) * N * E), dbt(sizeof(float) * N * H);
        C_->sigmoid_split_forward(sg.data(), cp.data(), proj.data() + 3 * d, P, bias.data(), N, 3, E);
        G_->sigmoid_split_forward(dsg.f(), dcp.f(), dpr->f() + 3 * d, P, db->f(), N, 3, E);
        cmp("sigmoid_split_forward gates", sg, &dsg, 1e-5);
        cmp("sigmoid_split_forward copy", cp, &dcp, 0);
        C_->sigmoid_split_forward(bt.data(), NULL, proj.data() + 5, P, NULL, N, H, 0);
        G_->sigmoid_split_forward(dbt.f(), NULL, dpr->f() + 5, P, NULL, N, H, 0);
        cmp("sigmoid_split_forward no bias", bt, &dbt, 1e-5);
    }
    {  // decay_gate_forward / backward
        std::vector<float> gs(Nd), g(Nd); Dev dgs(sizeof(float) * Nd), dg(sizeof(float) * Nd);
        C_->decay_gate_forward(gs.data(), g.data(), z.data(), A.data(), bias.data(), -5.0f, N, H, dh);
        G_->decay_gate_forward(dgs.f(), dg.f(), dz->f(), dA->f(), db->f(), -5.0f, N, H, dh);
        cmp("decay_gate_forward gs", gs, &dgs, 1e-5);
        cmp("decay_gate_forward g", g, &dg, 1e-5);
        auto dgv = randv(Nd), dA0 = randv(H), db0 = randv(d);
        std::vector<float> dzc(Nd);
        Dev *ddg = up(dgv), *ddA = up(dA0), *ddb = up(db0), ddz(sizeof(float) * Nd);
        C_->decay_gate_backward(dzc.data(), dA0.data(), db0.data(), dgv.data(), gs.data(), z.data(), A.data(),
                                bias.data(), -5.0f, N, H, dh);
        G_->decay_gate_backward(ddz.f(), ddA->f(), ddb->f(), ddg->f(), dgs.f(), dz->f(), dA->f(), db->f(), -5.0f,
                                N, H, dh);
        cmp("decay_gate_backward dz", dzc, &ddz, 1e-5);
        cmp("decay_gate_backward dA (+=)", dA0, ddA, 1e-4);
        cmp("decay_gate_backward dbias (+=)", db0, ddb, 1e-4);
        delete ddg; delete ddA; delete ddb;
    }
    {  // gate_mul_forward / backward
        auto gt = randv(Nd), on = randv(Nd), dog = randv(Nd);
        Dev *dgt = up(gt), *don = up(on), *ddog = up(dog);
        std::vector<float> og(Nd), dn(Nd), dp(Nd);
        Dev dog_(sizeof(float) * Nd), ddn(sizeof(float) * Nd), ddp(sizeof(float) * Nd);
        C_->gate_mul_forward(gt.data(), og.data(), on.data(), bias.data(), N, d);
        G_->gate_mul_forward(dgt->f(), dog_.f(), don->f(), db->f(), N, d);
        cmp("gate_mul_forward gate (in place)", gt, dgt, 1e-5);
        cmp("gate_mul_forward og", og, &dog_, 1e-5);
        C_->gate_mul_backward(dn.data(), dp.data(), dog.data(), gt.data(), on.data(), Nd);
        G_->gate_mul_backward(ddn.f(), ddp.f(), ddog->f(), dgt->f(), don->f(), Nd);
        cmp("gate_mul_backward don", dn, &ddn, 1e-5);
        cmp("gate_mul_backward dpre", dp, &ddp, 1e-5);
        delete dgt; delete don; delete ddog;
    }
    {  // mem_gate_forward / backward
        auto nn = randv(Nd), kn = randv(Nd), val = randv(Nd), de = randv(Nd), dkn = randv(Nd), dval = randv(Nd);
        Dev *dnn = up(nn), *dkn_in = up(kn), *dval_in = up(val), *dde = up(de), *ddkn = up(dkn), *ddval = up(dval);
        std::vector<float> gate(N), e(Nd), dnnv(Nd);
        Dev dgate(sizeof(float) * N), de_(sizeof(float) * Nd), ddnn(sizeof(float) * Nd);
        float sc = 1.0f / sqrtf((float)d);
        C_->mem_gate_forward(gate.data(), e.data(), nn.data(), kn.data(), val.data(), sc, N, d);
        G_->mem_gate_forward(dgate.f(), de_.f(), dnn->f(), dkn_in->f(), dval_in->f(), sc, N, d);
        cmp("mem_gate_forward gate", gate, &dgate, 1e-5);
        cmp("mem_gate_forward e", e, &de_, 1e-5);
        C_->mem_gate_backward(dnnv.data(), dkn.data(), dval.data(), de.data(), gate.data(), nn.data(), kn.data(),
                              val.data(), sc, N, d);
        G_->mem_gate_backward(ddnn.f(), ddkn->f(), ddval->f(), dde->f(), dgate.f(), dnn->f(), dkn_in->f(),
                              dval_in->f(), sc, N, d);
        cmp("mem_gate_backward dnn", dnnv, &ddnn, 1e-4);
        cmp("mem_gate_backward dkn (+=)", dkn, ddkn, 1e-4);
        cmp("mem_gate_backward dval (+=)", dval, ddval, 1e-4);
        delete dnn; delete dkn_in; delete dval_in; delete dde; delete ddkn; delete ddval;
    }
    {  // mix_forward (all arms / some absent, alpha / none) and mix_arm_backward (plain, capped)
        std::vector<float> w((size_t)N * 3);
        for (auto &v : w) v = urand();  // gates in (0, 1): the cap 0.5 bites about half the rows
        std::vector<float> al = {0.7f};
        Dev *dw = up(w), *dal = up(al);
        for (int variant = 0; variant < 2; variant++) {
            std::vector<float> body(Nd), h(Nd);
            Dev dbody(sizeof(float) * Nd), dh(sizeof(float) * Nd);
            const float *ca = variant ? NULL : y.data(), *ga = variant ? NULL : dy->f();
            C_->mix_forward(body.data(), h.data(), x.data(), w.data(), ca, z.data(), y.data(), 0.5f,
                            variant ? NULL : al.data(), N, d);
            G_->mix_forward(dbody.f(), dh.f(), dx->f(), dw->f(), ga, dz->f(), dy->f(), 0.5f, variant ? NULL : dal->f(),
                            N, d);
            cmp(variant ? "mix_forward body (no kda, alpha 1)" : "mix_forward body", body, &dbody, 1e-5);
            cmp(variant ? "mix_forward h (no kda, alpha 1)" : "mix_forward h", h, &dh, 1e-5);
        }
        for (int j = 0; j < 2; j++) {
            auto dw0 = randv((size_t)N * 3);
            std::vector<float> darm(Nd);
            Dev *ddw = up(dw0), ddarm(sizeof(float) * Nd);
            C_->mix_arm_backward(darm.data(), dw0.data(), x.data(), y.data(), w.data(), j, j, 0.5f, N, d);
            G_->mix_arm_backward(ddarm.f(), ddw->f(), dx->f(), dy->f(), dw->f(), j, j, 0.5f, N, d);
            cmp(j ? "mix_arm_backward darm (capped)" : "mix_arm_backward darm", darm, &ddarm, 1e-5);
            cmp(j ? "mix_arm_backward dw (capped)" : "mix_arm_backward dw", dw0, ddw, 1e-4);
            delete ddw;
        }
        {  // rezero_backward: dalpha += dh . body, dbody = alpha dh; the sum twice: bit-identical
            std::vector<float> dbody(Nd), da = {0.25f};
            Dev ddbody(sizeof(float) * Nd), *dda = up(da), *dda2 = up(da);
            C_->rezero_backward(dbody.data(), da.data(), x.data(), y.data(), al.data(), Nd);
            G_->rezero_backward(ddbody.f(), dda->f(), dx->f(), dy->f(), dal->f(), Nd);
            G_->rezero_backward(ddbody.f(), dda2->f(), dx->f(), dy->f(), dal->f(), Nd);
            cmp("rezero_backward dbody", dbody, &ddbody, 1e-6);
            cmp("rezero_backward dalpha (+=)", da, dda, 1e-5);
            float a1 = down<float>(dda, 1)[0], a2 = down<float>(dda2, 1)[0];
            report("rezero_backward dalpha twice", memcmp(&a1, &a2, sizeof a1) ? 1.0 : 0.0, 0, "(bit-identical)");
            delete dda; delete dda2;
        }
        delete dw; delete dal;
    }
    {  // running mean forward (copy at i = 0, mean at i = 2) and backward
        std::vector<float> o(Nd); Dev dout_(sizeof(float) * Nd);
        C_->running_mean_forward(o.data(), NULL, y.data(), 0, Nd);
        G_->running_mean_forward(dout_.f(), NULL, dy->f(), 0, Nd);
        cmp("running_mean_forward i=0", o, &dout_, 0);
        C_->running_mean_forward(o.data(), x.data(), y.data(), 2, Nd);
        G_->running_mean_forward(dout_.f(), dx->f(), dy->f(), 2, Nd);
        cmp("running_mean_forward i=2", o, &dout_, 1e-6);
        auto bar = randv(Nd);
        std::vector<float> dyc(Nd);
        Dev *dbar = up(bar), ddy(sizeof(float) * Nd);
        C_->running_mean_backward(dyc.data(), bar.data(), 2, Nd);
        G_->running_mean_backward(ddy.f(), dbar->f(), 2, Nd);
        cmp("running_mean_backward dy", dyc, &ddy, 1e-6);
        cmp("running_mean_backward dbar", bar, dbar, 1e-6);
        delete dbar;
    }
    {  // sum_forward (a double on the backend), twice: bit-identical
        size_t n = 100003;
        auto v = randv(n);
        Dev *dv = up(v), ds(sizeof(double) * 2);
        double sc_ = 0;
        C_->sum_forward(&sc_, v.data(), n);
        G_->sum_forward((double *)ds.p, dv->f(), n);
        G_->sum_forward((double *)ds.p + 1, dv->f(), n);
        std::vector<double> sg = down<double>(&ds, 2);
        report("sum_forward", fabs(sg[0] - sc_) / fmax(fabs(sc_), 1e-30), 1e-12);
        report("sum_forward twice", memcmp(&sg[0], &sg[1], sizeof(double)) ? 1.0 : 0.0, 0, "(bit-identical)");
        delete dv;
    }
    {  // ce_logits_backward
        int V = 256;
        auto probs = randv((size_t)N * V);
        std::vector<int> tg(N);
        for (auto &t : tg) t = (int)(urand() * V);
        std::vector<float> dl((size_t)N * V);
        Dev *dprobs = up(probs), *dtg = up(tg), ddl(sizeof(float) * N * V);
        C_->ce_logits_backward(dl.data(), probs.data(), tg.data(), 0.01f, N, V);
        G_->ce_logits_backward(ddl.f(), dprobs->f(), dtg->i(), 0.01f, N, V);
        cmp("ce_logits_backward", dl, &ddl, 1e-6);
        delete dprobs; delete dtg;
    }
    {  // strided backward writers into a random [N, P] buffer: sigmoid, silu, l2norm+silu
        auto base = randv((size_t)N * P), sg = randv(Nd), yn = randv(Nd), rn = randv((size_t)N * H);
        for (auto &v : sg) v = urand();
        Dev *dsg = up(sg), *dyn = up(yn), *drn = up(rn);
        auto o1 = base; Dev *d1 = up(base);
        C_->sigmoid_rows_backward(o1.data() + 3 * d, P, x.data(), sg.data(), N, H);
        G_->sigmoid_rows_backward(d1->f() + 3 * d, P, dx->f(), dsg->f(), N, H);
        cmp("sigmoid_rows_backward (strided)", o1, d1, 1e-6);
        C_->silu_rows_backward(o1.data() + 2 * d, P, x.data(), proj.data() + 2 * d, P, sg.data(), N, d);
        G_->silu_rows_backward(d1->f() + 2 * d, P, dx->f(), dpr->f() + 2 * d, P, dsg->f(), N, d);
        cmp("silu_rows_backward (strided)", o1, d1, 1e-6);
        C_->l2norm_silu_backward(o1.data() + d, P, x.data(), yn.data(), rn.data(), 0.25f, proj.data() + d, P,
                                 sg.data(), N, H, dh);
        G_->l2norm_silu_backward(d1->f() + d, P, dx->f(), dyn->f(), drn->f(), 0.25f, dpr->f() + d, P, dsg->f(), N,
                                 H, dh);
        cmp("l2norm_silu_backward (strided)", o1, d1, 1e-5);
        // bias_backward over strided columns, copy_rows into them, add_inplace
        auto bb = randv(E);
        Dev *dbb = up(bb);
        C_->bias_backward(bb.data(), proj.data() + 3 * d, P, N, E);
        G_->bias_backward(dbb->f(), dpr->f() + 3 * d, P, N, E);
        cmp("bias_backward (strided, +=)", bb, dbb, 1e-5);
        C_->copy_rows(o1.data() + 3 * d + H, P, z.data(), d, N, E);
        G_->copy_rows(d1->f() + 3 * d + H, P, dz->f(), d, N, E);
        cmp("copy_rows (strided)", o1, d1, 1e-6);
        auto acc = randv(Nd);
        Dev *dacc = up(acc);
        C_->add_inplace(acc.data(), x.data(), Nd);
        G_->add_inplace(dacc->f(), dx->f(), Nd);
        cmp("add_inplace", acc, dacc, 0);
        delete dsg; delete dyn; delete drn; delete d1; delete dbb; delete dacc;
    }
    delete dpr; delete dA; delete db; delete drow; delete dx; delete dy; delete dz;
}

int main(void) {
    char why[256] = "";
    C_ = backend_cpu();
    G_ = backend_cuda(0, why, sizeof why);
    if (!G_) { fprintf(stderr, "parity: no CUDA backend: %s\n", why); return 2; }
    cuda_set_precision(1);  // fp32 parity; the bf16 rows switch it for themselves
    printf("CUDA parity against the CPU backend (normwise relative error)\n");
    t_matmul(1);
    t_matmul(0);
    t_norms();
    t_elementwise();
    t_embedding_ce();
    t_engram();
    t_kda(64, 16);   // T a multiple of the chunk
    t_kda(50, 16);   // and not
    t_kda(100, 64);
    t_kda_step();
    t_moe(2, 0);
    t_moe(1, 0);
    t_moe(2, 1);
    t_moe(2, 0, 700);     // experts of several 64-row tiles, more assignments than sort chunks
    t_moe(1, 0, 333, 2);  // every token on expert 2: experts 0, 1, 3 empty
    t_retract();
    t_fused();
    t_optim();
    printf("parity: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
