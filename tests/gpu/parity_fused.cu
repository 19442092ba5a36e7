// parity_fused.cu — the fused element-wise rows of the CUDA parity program (tests/gpu/parity.cu).
#include "parity_common.cuh"

// ---- the fused element-wise ops of the looped block (kernels/cpu/fused.h): the same inputs on
// both sides; strided outputs start from the same random buffer, so the untouched columns are
// compared too. The whole-array reductions also run twice on the GPU: bit-identical.
void t_fused() {
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
    {  // decay_gate_backward over several row slices (its sums run in two stages from 2048 rows on)
        const int N2 = 4501, H2 = 3, dh2 = 16, d2 = H2 * dh2;  // 3 slices, the last one short; 48 channels: a partial block of 32
        const size_t n2 = (size_t)N2 * d2;
        auto gs2 = randv(n2), z2 = randv(n2), dg2 = randv(n2), A2 = randv(H2, 0.3f), b2 = randv(d2);
        for (auto &v : gs2) v = 0.5f + 0.45f * v;  // a gate's values, in (0, 1)
        auto dA2 = randv(H2), db2 = randv(d2);
        std::vector<float> dzc(n2);
        Dev *dgs2 = up(gs2), *dz2 = up(z2), *ddg2 = up(dg2), *dA2d = up(A2), *db2d = up(b2), *ddA2 = up(dA2),
            *ddb2 = up(db2), ddz(sizeof(float) * n2);
        C_->decay_gate_backward(dzc.data(), dA2.data(), db2.data(), dg2.data(), gs2.data(), z2.data(), A2.data(),
                                b2.data(), -5.0f, N2, H2, dh2);
        G_->decay_gate_backward(ddz.f(), ddA2->f(), ddb2->f(), ddg2->f(), dgs2->f(), dz2->f(), dA2d->f(), db2d->f(),
                                -5.0f, N2, H2, dh2);
        cmp("decay_gate_backward 4501 rows dz", dzc, &ddz, 1e-5);
        cmp("decay_gate_backward 4501 rows dA (+=)", dA2, ddA2, 1e-4);
        cmp("decay_gate_backward 4501 rows dbias (+=)", db2, ddb2, 1e-4);
        delete dgs2; delete dz2; delete ddg2; delete dA2d; delete db2d; delete ddA2; delete ddb2;
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
        {  // rezero_backward with ReZero off, as the engine calls it: alpha and dalpha NULL, so
            // dbody = 1 dh (exact on both sides). dbody starts random: it is written, not added to.
            auto dbody = randv(Nd);
            Dev *ddbody = up(dbody);
            C_->rezero_backward(dbody.data(), NULL, x.data(), y.data(), NULL, Nd);
            G_->rezero_backward(ddbody->f(), NULL, dx->f(), dy->f(), NULL, Nd);
            cmp("rezero_backward alpha NULL (off) dbody", dbody, ddbody, 0);
            delete ddbody;
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
    {  // sum_forward (a double on the backend), twice: bit-identical. n = 2000003 is past 256 threads
        // x 8 elements x RED_MAX_BLOCKS (2048) = 524288, so the grid is clamped and each thread's
        // stride loop runs several times (an unclamped grid writes past the partials' scratch:
        // cuemu's heap check / AddressSanitizer stop it). The float terms summed in double partial
        // sums of magnitude ~1e3 lose almost nothing in either order (1e-12 is 4 digits of room).
        size_t n = 2000003;
        auto v = randv(n);
        Dev *dv = up(v), ds(sizeof(double) * 2);
        double sc_ = 0;
        C_->sum_forward(&sc_, v.data(), n);
        G_->sum_forward((double *)ds.p, dv->f(), n);
        G_->sum_forward((double *)ds.p + 1, dv->f(), n);
        std::vector<double> sg = down<double>(&ds, 2);
        report("sum_forward n=2000003", fabs(sg[0] - sc_) / fmax(fabs(sc_), 1e-30), 1e-12);
        report("sum_forward twice", memcmp(&sg[0], &sg[1], sizeof(double)) ? 1.0 : 0.0, 0, "(bit-identical)");
        // and rezero_backward's dot over as many elements (the same clamped reduction): dalpha is
        // a float, so 1e-5 as above; dbody = alpha dh, one float product on both sides
        auto w = randv(n), dbody = randv(n);
        std::vector<float> da = {0.25f}, al = {0.7f};
        Dev *dw = up(w), *ddb = up(dbody), *dda = up(da), *dal = up(al);
        C_->rezero_backward(dbody.data(), da.data(), v.data(), w.data(), al.data(), n);
        G_->rezero_backward(ddb->f(), dda->f(), dv->f(), dw->f(), dal->f(), n);
        cmp("rezero_backward n=2000003 dbody", dbody, ddb, 1e-6);
        cmp("rezero_backward n=2000003 dalpha (+=)", da, dda, 1e-5);
        delete dv; delete dw; delete ddb; delete dda; delete dal;
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
