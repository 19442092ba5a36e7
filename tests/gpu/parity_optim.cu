// parity_optim.cu — the optimizer rows of the CUDA parity program (tests/gpu/parity.cu).
#include "parity_common.cuh"

// ---- the optimizer ops (kernels/cpu/optim_ops.h): the same status, buffers and hyper-parameters
// on both sides; the GPU's OptStatus is uploaded/downloaded whole.
static OptStatus st_down(Dev *d) { OptStatus s; G_->download(&s, d->p, sizeof s); return s; }
// the rows a batch read from O tables of R = 18 rows, N items each: item i reads (7 i mod 23) - 2,
// i.e. -2..20: each table's 40 items name 23 values, so 17 rows come twice (a row updated once per
// occurrence fails), and -2, -1, 18, 19, 20 are out of [0, R) (ignored)
static std::vector<int32_t> rows_dup(int O, int N) {
    std::vector<int32_t> rows((size_t)O * N);
    for (size_t i = 0; i < rows.size(); i++) rows[i] = (int32_t)((i * 7u) % 23) - 2;
    return rows;
}
// An LM's gradients are often ~1e-5 (v-hat ~1e-10, eps 1e-8 no longer invisible) and its weights
// ~1e-2: AdamW (decay on and off) and the lazy table rows in that regime, compared by the UPDATE
// p_after - p_before normwise (on p itself a 4x-wrong update of 1e-5 hides inside any bar). fp32:
// the two sides differ by FMA contraction only (~1e-7 of the update); eps moved inside the sqrt
// makes the update ~4x smaller here.
static void t_optim_small(const StepHyper *hh, const StepHyper *ghp, const OptStatus *sc, OptStatus *gst) {
    size_t n = 20000;
    for (int decay = 1; decay >= 0; decay--) {
        auto p = randv(n, 0.02f), g = randv(n, 1e-5f), m = randv(n, 3e-6f), v = randv(n, 1e-5f);
        for (auto &x : v) x *= x;
        std::vector<float> p0 = p;
        Dev *dp = up(p), *dg = up(g), *dm = up(m), *dv = up(v);
        C_->opt_adamw(p.data(), g.data(), m.data(), v.data(), n, decay, hh, sc);
        G_->opt_adamw(dp->f(), dg->f(), dm->f(), dv->f(), n, decay, ghp, gst);
        std::vector<float> gp = down<float>(dp, n), uc(n), ug(n);
        for (size_t i = 0; i < n; i++) { uc[i] = p[i] - p0[i]; ug[i] = gp[i] - p0[i]; }
        char nm[80];
        snprintf(nm, sizeof nm, "opt_adamw g~1e-5 decay=%d update", decay);
        report(nm, relerr(uc.data(), ug.data(), n), 1e-5);
        snprintf(nm, sizeof nm, "opt_adamw g~1e-5 decay=%d m, v", decay);
        report(nm, worst2(relerr(m.data(), down<float>(dm, n).data(), n), relerr(v.data(), down<float>(dv, n).data(), n)), 1e-5);
        delete dp; delete dg; delete dm; delete dv;
    }
    int O = 3, N = 40, D = 16;
    int64_t R = 18;
    size_t tn = (size_t)O * R * D;
    auto p = randv(tn, 0.02f), g = randv(tn, 1e-5f), m = randv(tn, 3e-6f), v = randv(tn, 1e-5f);
    for (auto &x : v) x *= x;
    std::vector<float> p0 = p;
    std::vector<int32_t> rows = rows_dup(O, N);
    std::vector<int64_t> rs((size_t)O * R, 2);
    Dev *dp = up(p), *dg = up(g), *dm = up(m), *dv = up(v), *drows = up(rows), *drs = up(rs);
    std::vector<unsigned char> wsc(C_->opt_adam_rows_ws_size(O, N, R));
    Dev dws(G_->opt_adam_rows_ws_size(O, N, R));
    C_->opt_adam_rows(p.data(), g.data(), m.data(), v.data(), rs.data(), rows.data(), O, N, R, D, wsc.data(), hh, sc);
    G_->opt_adam_rows(dp->f(), dg->f(), dm->f(), dv->f(), (int64_t *)drs->p, (int32_t *)drows->p, O, N, R, D, dws.p, ghp, gst);
    std::vector<float> gp = down<float>(dp, tn), uc(tn), ug(tn);
    for (size_t i = 0; i < tn; i++) { uc[i] = p[i] - p0[i]; ug[i] = gp[i] - p0[i]; }
    report("opt_adam_rows g~1e-5 update", relerr(uc.data(), ug.data(), tn), 1e-5);
    report("opt_adam_rows g~1e-5 m, v", worst2(relerr(m.data(), down<float>(dm, tn).data(), tn),
                                               relerr(v.data(), down<float>(dv, tn).data(), tn)), 1e-5);
    report("opt_adam_rows g~1e-5 row_steps (exact)", down<int64_t>(drs, rs.size()) != rs ? 1 : 0, 0);
    delete dp; delete dg; delete dm; delete dv; delete drows; delete drs;
}
// One Muon step on both sides (the reference emulating bf16 when lowp), compared by the update
// (normwise, the Muon bars below) and the momentum; zero >= 0: matrix `zero` has g = momentum = 0,
// and its update alone is compared too.
static void muon_case(const char *tag, std::vector<float> mp, const std::vector<float> &mg, std::vector<float> mb,
                      int nm, int rr, int cc, int cr, int lowp, int zero, const StepHyper *hh, const OptStatus *sc,
                      const StepHyper *ghp, OptStatus *gst) {
    size_t n1 = (size_t)rr * cc, mn = n1 * nm;
    std::vector<float> p0 = mp;
    Dev *dmp = up(mp), *dmg = up(mg), *dmb = up(mb);
    std::vector<float> scr(C_->opt_muon_scratch_size(nm, rr, cc));
    Dev dscr(sizeof(float) * G_->opt_muon_scratch_size(nm, rr, cc));
    C_->emulate_bf16(lowp);
    C_->opt_muon(mp.data(), mg.data(), mb.data(), nm, rr, cc, cr, scr.data(), hh, sc);
    C_->emulate_bf16(0);
    G_->opt_muon(dmp->f(), dmg->f(), dmb->f(), nm, rr, cc, cr, dscr.f(), ghp, gst);
    std::vector<float> gp = down<float>(dmp, mn), uc(mn), ug(mn);
    for (size_t i = 0; i < mn; i++) { uc[i] = mp[i] - p0[i]; ug[i] = gp[i] - p0[i]; }
    char nmm[96];
    const char *sfx = cr ? (lowp ? " colrow bf16" : " colrow") : (lowp ? " bf16" : "");
    snprintf(nmm, sizeof nmm, "opt_muon %dx%dx%d %s%s update", nm, rr, cc, tag, sfx);
    report(nmm, relerr(uc.data(), ug.data(), mn), lowp ? 1e-1 : 2e-3);
    if (zero >= 0) {
        snprintf(nmm, sizeof nmm, "opt_muon %s%s: its update", tag, sfx);
        report(nmm, relerr(uc.data() + zero * n1, ug.data() + zero * n1, n1), 1e-6);
    }
    snprintf(nmm, sizeof nmm, "opt_muon %dx%dx%d %s%s momentum", nm, rr, cc, tag, sfx);
    cmp(nmm, mb, dmb, 1e-6);
    delete dmp; delete dmg; delete dmb;
}
void t_optim() {
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
    for (int i = 0; i < nseg; i++) {
        double ei = fabs(gss[i] - ss[i]) / fmax(ss[i], 1e-300);
        e = worst2(e, ei);
        e += gbad[i] != bad[i];
    }
    report("opt_sumsq (per segment, double)", e, 1e-12);
    {  // a NaN in the FIRST chunk of a two-chunk segment: the segment's flag ORs its chunks' (a flag
        // taken from the last chunk alone still skips the step, as "too big" naming another tensor)
        std::vector<float> gn = g;
        gn[5] = NAN;
        Dev *dgn = up(gn), dsn(sizeof(OptStatus)), dssn(sizeof(double) * nseg), dbadn(sizeof(int32_t) * nseg);
        double ssn[nseg], gssn[nseg];
        int32_t badn[nseg], gbadn[nseg];
        C_->opt_sumsq(ssn, badn, gn.data(), segs, nseg);
        G_->opt_sumsq((double *)dssn.p, (int32_t *)dbadn.p, dgn->f(), segs, nseg);
        G_->download(gssn, dssn.p, sizeof gssn);
        G_->download(gbadn, dbadn.p, sizeof gbadn);
        OptStatus scn = sc;
        G_->upload(dsn.p, &scn, sizeof scn);
        C_->opt_decide(&scn, ssn, badn, nseg, &loss, &hh);
        G_->opt_decide((OptStatus *)dsn.p, (double *)dssn.p, (int32_t *)dbadn.p, nseg, gloss, ghp);
        OptStatus sgn = st_down(&dsn);
        int ok = badn[0] && gbadn[0] && !gbadn[1] && !gbadn[3] && sgn.skip && sgn.first_bad == 0 &&
                 scn.first_bad == 0 && !sgn.too_big && !scn.too_big;
        report("opt_sumsq NaN in a segment's first chunk: flagged, named", ok ? 0 : 1, 0);
        delete dgn;
    }
    // decide with the clip active and a retraction due (t 3 -> 4, every 2)
    C_->opt_decide(&sc, ss, bad, nseg, &loss, &hh);
    G_->opt_decide((OptStatus *)dst.p, (double *)dss.p, (int32_t *)dbad.p, nseg, gloss, ghp);
    OptStatus sg = st_down(&dst);
    int same = sg.t == sc.t && sg.skip == sc.skip && sg.clipped == sc.clipped && sg.retract == sc.retract &&
               sg.first_bad == sc.first_bad && sg.consecutive_skips == sc.consecutive_skips;
    report("opt_decide flags (t, skip, clip, retract)", same ? 0 : 1, 0);
    // the rows below compare updates: on a skipped step (or without a retraction) both sides
    // would do nothing and agree vacuously
    report("the decided step applies, clips and retracts", !sc.skip && sc.clipped && sc.retract ? 0 : 1, 0);
    report("opt_decide gnorm, scale", worst2(fabs(sg.gnorm - sc.gnorm) / sc.gnorm, fabs(sg.scale - sc.scale) / sc.scale), 1e-12);
    C_->opt_clip(g.data(), n, &sc);
    G_->opt_clip(dg->f(), n, (OptStatus *)dst.p);
    cmp("opt_clip", g, dg, 1e-6);
    // AdamW over everything
    auto p = randv(n), m = randv(n, 0.01f), v = randv(n, 0.01f);
    for (auto &x : v) x = fabsf(x);
    Dev *dp = up(p), *dm = up(m), *dv = up(v);
    {  // decay = 0 (the engine's 1-D group and the controller's gates): the same inputs, no decay.
        // A decay applied anyway moves p by lr wd |p| = 3e-4 |p|: 30x the bar.
        std::vector<float> p1 = p, m1 = m, v1 = v;
        Dev *a = up(p1), *b = up(m1), *c = up(v1);
        C_->opt_adamw(p1.data(), g.data(), m1.data(), v1.data(), n, 0, &hh, &sc);
        G_->opt_adamw(a->f(), dg->f(), b->f(), c->f(), n, 0, ghp, (OptStatus *)dst.p);
        cmp("opt_adamw decay=0 p", p1, a, 1e-5);
        delete a; delete b; delete c;
    }
    C_->opt_adamw(p.data(), g.data(), m.data(), v.data(), n, 1, &hh, &sc);
    G_->opt_adamw(dp->f(), dg->f(), dm->f(), dv->f(), n, 1, ghp, (OptStatus *)dst.p);
    cmp("opt_adamw p", p, dp, 1e-5); cmp("opt_adamw m", m, dm, 1e-5); cmp("opt_adamw v", v, dv, 1e-5);
    t_optim_small(&hh, ghp, &sc, (OptStatus *)dst.p);
    // lazy Adam rows: 3 tables of R = 18 rows of D = 16 at offset 70123 (inside the 4th segment,
    // 4096 reals: R*O*D = 864), rows_dup's duplicates within each table and out-of-range rows
    int O = 3, N = 40, D = 16;
    int64_t R = 18;
    std::vector<int32_t> rows = rows_dup(O, N);
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
    // Muon: wide and tall, plain and colrow, 2 and 3 matrices per tensor (orthogonalised together
    // on the GPU). Compared: the UPDATE p_after - p_before (the p's themselves are O(1) and the
    // update O(1e-2): a wrong Newton-Schulz would hide inside a tolerance on p), normwise, fp32
    // products 2e-3 (NS amplifies rounding), bf16 1e-1; and the momentum buffer. Why 1e-1: five
    // quintic iterations multiply a small singular direction's noise by up to a^5 ~ 485, so two
    // bf16 runs that differ only in fp32 summation order (the same operands rounded the same way:
    // the reference emulates bf16 here) still differ by up to 4.9e-2 on these random shapes
    // (tests/cuemu, session 15); the old 5e-2 bar had no margin. One iteration fewer gives 0.25-0.35.
    int shapes[2][2] = {{48, 80}, {96, 40}};
    for (int lowp = 0; lowp < 2; lowp++) {
        cuda_set_precision(!lowp);
        for (int k = 0; k < 6; k++) {  // k 4, 5: one matrix (the un-batched product calls)
            int rr = shapes[k & 1][0], cc = shapes[k & 1][1], nm = k >= 4 ? 1 : 2 + (k & 1), cr = k == 2 || k == 3;
            size_t mn = (size_t)rr * cc * nm;
            auto mp = randv(mn), mg = randv(mn), mb = randv(mn, 0.1f);
            std::vector<float> p0 = mp;
            Dev *dmp = up(mp), *dmg = up(mg), *dmb = up(mb);
            std::vector<float> scr(C_->opt_muon_scratch_size(nm, rr, cc));
            Dev dscr(sizeof(float) * G_->opt_muon_scratch_size(nm, rr, cc));
            // at bf16 the reference rounds the same Newton-Schulz operands (Backend.emulate_bf16)
            C_->emulate_bf16(lowp);
            C_->opt_muon(mp.data(), mg.data(), mb.data(), nm, rr, cc, cr, scr.data(), &hh, &sc);
            C_->emulate_bf16(0);
            G_->opt_muon(dmp->f(), dmg->f(), dmb->f(), nm, rr, cc, cr, dscr.f(), ghp, (OptStatus *)dst.p);
            std::vector<float> gp = down<float>(dmp, mn), uc(mn), ug(mn);
            for (size_t i = 0; i < mn; i++) { uc[i] = mp[i] - p0[i]; ug[i] = gp[i] - p0[i]; }
            char nmm[80];
            snprintf(nmm, sizeof nmm, "opt_muon %dx%dx%d%s%s update", nm, rr, cc, cr ? " colrow" : "",
                     lowp ? " bf16" : "");
            report(nmm, relerr(uc.data(), ug.data(), mn), lowp ? 1e-1 : 2e-3);
            if (lowp && k == 0) {  // the bf16 row must not pass by running fp32: the same step on
                // fresh copies of the inputs, once in fp32 and once in bf16, on the GPU
                std::vector<float> zero(mn, 0.0f);
                Dev *pa = up(p0), *ba = up(zero), *pb = up(p0), *bb = up(zero);
                cuda_set_precision(1);
                G_->opt_muon(pa->f(), dmg->f(), ba->f(), nm, rr, cc, 0, dscr.f(), ghp, (OptStatus *)dst.p);
                cuda_set_precision(0);
                G_->opt_muon(pb->f(), dmg->f(), bb->f(), nm, rr, cc, 0, dscr.f(), ghp, (OptStatus *)dst.p);
                std::vector<float> a32 = down<float>(pa, mn), a16 = down<float>(pb, mn);
                double e = relerr(a32.data(), a16.data(), mn);
                char note[64];
                snprintf(note, sizeof note, "(bf16 vs fp32 on the GPU: %.1e)", e);
                report("opt_muon bf16 mode rounds the products", e > 1e-6 ? 0 : 1, 0, note);
                delete pa; delete ba; delete pb; delete bb;
            }
            snprintf(nmm, sizeof nmm, "opt_muon %dx%dx%d%s%s momentum", nm, rr, cc, cr ? " colrow" : "",
                     lowp ? " bf16" : "");
            cmp(nmm, mb, dmb, 1e-6);
            delete dmp; delete dmg; delete dmb;
        }
    }
    // Muon's eps: a matrix whose momentum-corrected gradient U is exactly 0, as every arm's matrix is
    // at step 0 of a fresh run (ReZero's alpha starts at 0, so the arms' gradients and momenta are
    // 0). G / (||G||_F + eps) keeps it 0 through Newton-Schulz, and under colrow the column and row
    // RMS's + eps keep it 0 again; without an eps, 1 / 0 = inf and 0 inf = NaN (the update, and the
    // run from its first step). Matrix 1 of 3 is zero: its update is the decay alone, p (1 - lr wd)
    // - p on both sides (one float product each: 1e-6, the momentum's bar, is rounding room only).
    // And a batch of matrices 10x apart (g and momentum at 0.1, 1, 10): the GPU normalises the
    // batch in one launch, each matrix by its own norm (one norm for all pushes the 10x matrix to
    // norm ~100, where the quintic diverges).
    for (int lowp = 0; lowp < 2; lowp++) {
        cuda_set_precision(!lowp);
        for (int v = 0; v < 4; v++) {  // v & 1: colrow; v & 2: the scales, else the zero matrix
            int rr = 96, cc = 40, nm = 3, cr = v & 1, scales = v & 2;
            size_t n1 = (size_t)rr * cc, mn = n1 * nm;
            auto mp = randv(mn), mg = randv(mn), mb = randv(mn, 0.1f);
            for (size_t i = 0; i < mn; i++) {
                float s = scales ? (i < n1 ? 0.1f : i < 2 * n1 ? 1.0f : 10.0f) : (i / n1 == 1 ? 0.0f : 1.0f);
                mg[i] *= s;
                mb[i] *= s;
            }
            muon_case(scales ? "scales 0.1/1/10" : "zero matrix 1", mp, mg, mb, nm, rr, cc, cr, lowp,
                      scales ? -1 : 1, &hh, &sc, ghp, (OptStatus *)dst.p);
        }
    }
    // the gated retraction (the status says retract) and its orthogonality error, in fp32 mode and
    // in the default bf16 mode: the retraction asks for fp32 products in both (a bf16 Newton-Schulz
    // leaves orth_err ~2e-3 instead of ~5e-8 and the factors ~1e-3 off, which the 1e-4 bar sees)
    for (int lowp = 0; lowp < 2; lowp++) {  // three factors of one tensor (retracted together on the GPU), of different scales
        cuda_set_precision(!lowp);
        const char *md = lowp ? " bf16 mode" : "";
        char nmr[96];
        int rr = 96, r = 16, nm = 3;
        auto X = randv((size_t)nm * rr * r, 0.1f);
        for (size_t i = (size_t)rr * r; i < X.size(); i++) X[i] *= 1 + (float)(i / ((size_t)rr * r));
        // the third: one column 10x, so its Gershgorin guard scales it and the others' do not
        // (per-matrix guards in one batched launch)
        for (int q = 0; q < rr; q++) X[2 * (size_t)rr * r + (size_t)q * r] *= 10;
        Dev *dX = up(X);
        std::vector<float> scr(C_->opt_retract_scratch_size(nm, rr, r));
        Dev dscr(sizeof(float) * G_->opt_retract_scratch_size(nm, rr, r));
        C_->opt_retract(X.data(), nm, rr, r, 3, scr.data(), &sc);
        G_->opt_retract(dX->f(), nm, rr, r, 3, dscr.f(), (OptStatus *)dst.p);
        snprintf(nmr, sizeof nmr, "opt_retract 3 factors (status: retract)%s", md);
        cmp(nmr, X, dX, 1e-4);
        sg = st_down(&dst);
        snprintf(nmr, sizeof nmr, "opt_retract orth_err%s", md);
        report(nmr, fabs(sg.orth_err - sc.orth_err) / fmax(sc.orth_err, 1e-30), 1e-3);
        // a step that applies but does not retract (t off the cadence, retract_every > 1): the
        // same call leaves the factors and orth_err as they are, on both sides
        OptStatus off = sc;
        off.retract = 0;
        Dev doff(sizeof(OptStatus));
        G_->upload(doff.p, &off, sizeof off);
        std::vector<float> X0 = down<float>(dX, X.size()), Xc = X0;
        C_->opt_retract(Xc.data(), nm, rr, r, 3, scr.data(), &off);
        G_->opt_retract(dX->f(), nm, rr, r, 3, dscr.f(), (OptStatus *)doff.p);
        OptStatus go = st_down(&doff);
        snprintf(nmr, sizeof nmr, "opt_retract status off: X, orth_err kept%s", md);
        report(nmr, Xc == X0 && down<float>(dX, X.size()) == X0 && go.orth_err == off.orth_err && off.orth_err == sc.orth_err ? 0 : 1, 0);
        delete dX;
    }
    // factors wider than one 64 x 64 tile of the orthogonality kernel (r = 130: three tiles a side,
    // the last ragged, and tiles wholly below the diagonal, which only write zeros): the small,
    // base and large presets' r (128, 192, 256). Every row above has r = 16, one tile, so on the
    // emulator those tiles never ran (gcov, session 39)
    for (int lowp = 0; lowp < 2; lowp++) {
        cuda_set_precision(!lowp);
        const char *md = lowp ? " bf16 mode" : "";
        char nmr[96];
        int rr = 200, r = 130, nm = 2;
        auto X = randv((size_t)nm * rr * r, 1.0f / sqrtf((float)rr));
        Dev *dX = up(X);
        OptStatus sw = sc;  // (orth_err is a running max over the step's tensors: from 0 here)
        sw.retract = 1;
        sw.orth_err = 0;
        Dev dsw(sizeof(OptStatus));
        G_->upload(dsw.p, &sw, sizeof sw);
        std::vector<float> scr(C_->opt_retract_scratch_size(nm, rr, r));
        Dev dscr(sizeof(float) * G_->opt_retract_scratch_size(nm, rr, r));
        C_->opt_retract(X.data(), nm, rr, r, 3, scr.data(), &sw);
        G_->opt_retract(dX->f(), nm, rr, r, 3, dscr.f(), (OptStatus *)dsw.p);
        snprintf(nmr, sizeof nmr, "opt_retract r=130 (3x3 tiles)%s", md);
        cmp(nmr, X, dX, 1e-4);
        OptStatus gw = st_down(&dsw);
        snprintf(nmr, sizeof nmr, "opt_retract r=130 orth_err%s", md);
        report(nmr, fabs(gw.orth_err - sw.orth_err) / fmax(sw.orth_err, 1e-30), 1e-3);
        delete dX;
    }
    cuda_set_precision(1);
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
    {  // and Muon (p, momentum) and the gated retraction (the factors, orth_err) on that step
        int rr = 48, cc = 80, r = 16;
        auto mp = randv((size_t)rr * cc), mg = randv((size_t)rr * cc), mb = randv((size_t)rr * cc, 0.1f);
        auto X = randv((size_t)rr * r, 0.3f);
        Dev *dmp = up(mp), *dmg = up(mg), *dmb = up(mb), *dX = up(X);
        Dev dscr(sizeof(float) * G_->opt_muon_scratch_size(1, rr, cc)), drscr(sizeof(float) * G_->opt_retract_scratch_size(1, rr, r));
        double oe = st_down(&dst).orth_err;
        G_->opt_muon(dmp->f(), dmg->f(), dmb->f(), 1, rr, cc, 0, dscr.f(), ghp, (OptStatus *)dst.p);
        G_->opt_retract(dX->f(), 1, rr, r, 3, drscr.f(), (OptStatus *)dst.p);
        int mu = down<float>(dmp, mp.size()) != mp || down<float>(dmb, mb.size()) != mb;
        int re = down<float>(dX, X.size()) != X || st_down(&dst).orth_err != oe;
        char note[64];
        snprintf(note, sizeof note, "(muon %s, retract %s)", mu ? "moved" : "kept", re ? "moved" : "kept");
        report("skipped step leaves muon p, momentum, factors", mu || re ? 1 : 0, 0, note);
        delete dmp; delete dmg; delete dmb; delete dX;
    }
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
