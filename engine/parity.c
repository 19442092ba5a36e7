// parity.c — `:check parity`: the same step on two backends, compared tensor by tensor.
// Why a separate model per backend (and not the live one): the check must not move the live
// model or its optimizer, and the reference backend (the CPU) is the arbiter of what is right.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parity.h"
#include "../kernels/guard.h"
#include "rng.h"

// max |a - b| / max |b|. A non-finite entry on either side that the other side does not match
// exactly (NaN never matches) is an infinite error: fmax would silently skip a NaN, and a
// tensor of NaNs would then compare as equal.
static int all_zero(const real *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != 0) return 0;
    return 1;
}
static double rel_err(const real *a, const real *b, size_t n) {
    double mx = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i], y = (double)b[i];
        if (!isfinite(x) || !isfinite(y)) {
            if (!(x == y)) return INFINITY;
            continue;
        }
        mx = fmax(mx, fabs(y));
        diff = fmax(diff, fabs(x - y));
    }
    if (mx == 0) return diff == 0 ? 0 : INFINITY;
    return diff / mx;
}

// The device's choices [N, k] against the reference's [N, k]: assignments of dev not in ref's row.
static long route_diff_count(const int *dev, const int *ref, int N, int k) {
    long moved = 0;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int own = 0;
            for (int l = 0; l < k; l++) own |= ref[(size_t)t * k + l] == dev[(size_t)t * k + j];
            moved += !own;
        }
    return moved;
}

// The weights with every entry moved by one float ulp, up or down at random (a fixed seed): an
// input as valid as the original, different only where rounding would differ.
static void perturb_ulp(real *w, size_t n) {
    Rng r = {0x5eedf100ull};
    for (size_t i = 0; i < n; i++) w[i] *= (real)1 + (real)((rng_next(&r) & 1) ? 1 : -1) * (real)0x1p-23;
}

// The device model's forward and backward. A device workspace that cannot grow comes back here
// (kernels/guard.h) as an error; the check's models are its own, so nothing else is touched.
static int device_step(Model *md, const int *x, const int *y, int B, int T, dm_err *err) {
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {
        if (md->be->sync) md->be->sync();
        return dm_fail(err, "check parity: %s: lower batch or seq", g.msg);
    }
    model_forward(md, x, y, B, T, md->cfg.L, FWD_TRAIN);
    model_backward(md);
    dm_guard_close(&g);
    return 0;
}

// One forward + backward of the reference on x, y (its bf16 emulation on when asked, the device's
// routing followed when m->route_force is set).
static void ref_step(Model *m, const Backend *ref, int ref_bf16, const int *x, const int *y, int B, int T) {
    if (ref_bf16) ref->emulate_bf16(1);
    model_forward(m, x, y, B, T, m->cfg.L, FWD_TRAIN);
    model_backward(m);
    if (ref_bf16) ref->emulate_bf16(0);
}

int engine_check_parity(Engine *e, const Backend *ref, const Backend *dev, int B, int T, double bar, int ref_bf16,
                        int flags, ParityReport *rep, dm_err *err) {
    memset(rep, 0, sizeof *rep);
    rep->bar = bar;
    rep->has_floor = (flags & PARITY_FLOOR) != 0;
    if (ref_bf16 && !ref->emulate_bf16)
        return dm_fail(err, "check parity: the %s backend cannot compute with bf16 operands (a double build?): use precision=fp32", ref->name);
    Config c = e->live ? e->model.cfg : e->cfg;
    if (config_validate(&c, err)) return 1;
    if (B <= 0) B = c.batch;
    if (T <= 0) T = c.seq;
    dm_err se = {0};  // a shape either backend cannot index: refused before either model is allocated
    if (model_shape_check(dev, &c, B, T, &se) || model_shape_check(ref, &c, B, T, &se))
        return dm_fail(err, "check parity: %.1900s", se.msg);
    // only the reference initialises, and only when there is no live model to copy (at the base
    // preset one initialisation is seconds of RNG draws and Gram-Schmidt on one core)
    // the check's own two models: their allocation failing is about the check, not about
    // building the live model (whose advice model_create gives: a smaller preset, engram_ram)
    Model mr, md;
    dm_err me = {0};
    const char *fix = e->live ? "beside the live one: :save, then :check parity in a fresh dmsh before :init (it "
                                "builds its own models)"
                              : "(this config's model does not fit there)";
    if (e->live ? model_create_blank(&mr, &c, ref, &me) : model_create(&mr, &c, ref, c.seed, &me))
        return dm_fail(err, "check parity: cannot allocate its reference model on %s %s", ref->name, fix);
    if (model_create_blank(&md, &c, dev, &me)) {
        model_free(&mr);
        return dm_fail(err, "check parity: cannot allocate its copy of the model on %s %s", dev->name, fix);
    }
    int rc = 1, N = B * T;
    size_t P = mr.n_params, per = (size_t)N * c.k;  // per: assignments per iteration
    real *w = malloc(sizeof(real) * P), *gr = malloc(sizeof(real) * P), *gd = malloc(sizeof(real) * P);
    real *gf = rep->has_floor ? malloc(sizeof(real) * P) : NULL;
    int *x = malloc(sizeof(int) * (size_t)N), *y = malloc(sizeof(int) * (size_t)N);
    int *route = NULL, *own = NULL;
    if (!w || !gr || !gd || !x || !y || (rep->has_floor && !gf)) {
        dm_fail(err, "check parity: out of host memory for %zu parameters", P);
        goto done;
    }
    // identical weights: the live model's, else the reference model's initialisation
    if (e->live) model_params_get(&e->model, w);
    else model_params_get(&mr, w);
    model_params_put(&mr, w);
    model_params_put(&md, w);
    if (e->live) { mr.arms = e->model.arms; md.arms = e->model.arms; }
    if (e->has_data) {
        if (data_batch_checked(&e->data, c.seed, e->step, B, T, x, y, err)) goto done;
    } else {
        Rng r = {c.seed ^ 0x9a17ull};
        for (int i = 0; i < N; i++) { x[i] = (int)(rng_next(&r) & 255); y[i] = (int)(rng_next(&r) & 255); }
    }
    // the activations now, where running out of memory is an error (model_forward would exit)
    if (model_reserve_try(&md, B, T, err) || model_reserve_try(&mr, B, T, err)) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        dm_fail(err, "check parity: %.1900s", why);  // its own models' activations, not the live one's
        goto done;
    }
    // the device first: the reference may follow its routing
    if (device_step(&md, x, y, B, T, err)) goto done;
    int moe = md.arms.on[ARM_MOE], depth = md.last_depth;
    MoEShape ms = {N, c.d, c.E, c.k, c.r, c.f};
    int own_route = (flags & PARITY_OWN_ROUTE) != 0;
    if (moe) {
        if (!dev->moe_route_read || !ref->moe_route_read || (!own_route && !ref->moe_forward_routed)) {
            dm_fail(err, "check parity: the %s backend cannot %s", !dev->moe_route_read ? dev->name : ref->name,
                    own_route || ref->moe_forward_routed ? "report its MoE routing" : "follow another's MoE routing");
            goto done;
        }
        route = malloc(sizeof(int) * per * depth);
        own = malloc(sizeof(int) * per * depth);
        if (!route || !own) { dm_fail(err, "check parity: out of host memory for the routing"); goto done; }
        for (int i = 0; i < depth; i++) dev->moe_route_read(route + per * i, md.acts.it[i].moe_ws, ms);
        rep->route_total = (long)(per * depth);
        rep->route_bad = !moe_route_valid(route, N * depth, c.E, c.k);
        // a routing that is not one would index out of range: the reference then routes itself
        rep->route_followed = !own_route && !rep->route_bad;
        if (rep->route_followed) mr.route_force = route;
    }
    // a bf16 device against the same arithmetic: bf16-rounded operands in the products the
    // device rounds, fp32 everywhere else. Against fp32 instead, a router logit within bf16's
    // rounding of a tie picks the other expert, and KDA carries that token's change to every later
    // token: whole expert tensors differ by 15-70 % at the base preset (simulated) with no defect.
    ref_step(&mr, ref, ref_bf16, x, y, B, T);
    if (rep->route_followed) {
        rep->route_moved = mr.route_diff.moved;
        rep->route_gap = mr.route_diff.gap;
    } else if (moe && !rep->route_bad) {
        for (int i = 0; i < depth; i++) ref->moe_route_read(own + per * i, mr.acts.it[i].moe_ws, ms);
        rep->route_moved = route_diff_count(route, own, N * depth, c.k);
    }
    model_grads_get(&mr, gr);
    model_grads_get(&md, gd);
    rep->loss_ref = model_objective(&mr);
    rep->loss_dev = model_objective(&md);
    // the floor: the reference against itself from weights one ulp away (same routing): how far
    // two equally valid computations of this step lie apart, tensor by tensor. Where the device's
    // error is near it, the difference is the step's conditioning (e.g. a scalar gradient summed
    // with heavy cancellation), not the device. Reported, never used to pass a row.
    if (rep->has_floor) {
        perturb_ulp(w, P);
        model_params_put(&mr, w);
        ref_step(&mr, ref, ref_bf16, x, y, B, T);
        model_grads_get(&mr, gf);
        double lf = model_objective(&mr);
        rep->loss_floor = fabs(lf - rep->loss_ref) / fmax(fabs(rep->loss_ref), 1e-30);
    }
    mr.route_force = NULL;
    rep->loss_rel = fabs(rep->loss_dev - rep->loss_ref) / fmax(fabs(rep->loss_ref), 1e-30);
    if (isnan(rep->loss_rel)) rep->loss_rel = INFINITY;
    rep->worst = rep->loss_rel;
    snprintf(rep->worst_name, sizeof rep->worst_name, "loss");
    for (int i = 0; i < P_COUNT; i++) {
        const ParamTensor *t = &mr.t[i];
        if (t->numel == 0) continue;
        ParityRow *row = &rep->rows[rep->nrows++];
        snprintf(row->name, sizeof row->name, "%s", t->name);
        row->rel = rel_err(gd + t->offset, gr + t->offset, t->numel);
        row->floor = gf ? rel_err(gf + t->offset, gr + t->offset, t->numel) : 0;
        row->zero = all_zero(gd + t->offset, t->numel) && all_zero(gr + t->offset, t->numel);
        rep->nzero += row->zero;
        if (row->rel > rep->worst) {
            rep->worst = row->rel;
            rep->worst_floor = row->floor;
            snprintf(rep->worst_name, sizeof rep->worst_name, "%s", t->name);
        }
    }
    if (!strcmp(rep->worst_name, "loss")) rep->worst_floor = rep->loss_floor;
    rep->ok = rep->worst <= bar && rep->route_gap <= bar && !rep->route_bad;
    rc = 0;
done:
    free(route); free(own);
    free(w); free(gr); free(gd); free(gf); free(x); free(y);
    model_free(&mr);
    model_free(&md);
    return rc;
}
