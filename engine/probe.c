// probe.c — see probe.h. Activation names follow the forward pass (engine/forward.c):
//   h0 m key val (once per forward), and per iteration i: u n ctrl (and its three gates apart:
//   ctrl.attn ctrl.mem ctrl.ffn) z kda.q kda.k kda.v kda.beta
//   kda.g kda.o kda.out kda.state mem.gate mem.e moe.out moe.load body h y ybar probs loss
// kda.state is the Frobenius norm of each (sequence, head) state after the last byte,
// recomputed from the kept q, k, v, beta, g with the recurrent step (the chunked kernel keeps
// only chunk-boundary states).
#include "probe.h"
#include <limits.h>
#include <math.h>
#include <string.h>
#include "../kernels/cpu/kda.h"
#include "../kernels/guard.h"

typedef enum { SRC_ACT, SRC_ITER, SRC_PARAM } Src;

static const char *global_acts[] = {"h0", "m", "key", "val"};
static const char *iter_acts[] = {"u", "n", "ctrl", "ctrl.attn", "ctrl.mem", "ctrl.ffn", "z", "kda.q", "kda.k", "kda.v", "kda.beta", "kda.g", "kda.o",
                                  "kda.out", "kda.state", "mem.gate", "mem.e", "moe.out", "moe.load", "body", "h",
                                  "y", "ybar", "probs", "loss"};
#define NG (int)(sizeof global_acts / sizeof global_acts[0])
#define NI (int)(sizeof iter_acts / sizeof iter_acts[0])

static int have_forward(const Engine *e) { return e->live && e->model.acts.buf && e->model.last_depth > 0; }

// The arm an activation comes from (-1: every forward makes it): the last forward holds it only
// when that arm ran in it (Model.last_on, not today's switches)
static int act_arm(const char *nm) {
    if (!strncmp(nm, "kda.", 4)) return ARM_KDA;
    if (!strncmp(nm, "mem.", 4) || !strcmp(nm, "m") || !strcmp(nm, "key") || !strcmp(nm, "val")) return ARM_ENGRAM;
    if (!strncmp(nm, "moe.", 4) || !strcmp(nm, "z")) return ARM_MOE;
    return -1;
}
static int act_ran(const Model *m, const char *nm) {
    int a = act_arm(nm);
    return a < 0 || m->last_on[a];
}

char **probe_names(const Engine *e) {
    int L = have_forward(e) ? e->model.last_depth : 0;
    int n = (have_forward(e) ? NG + NI * L : 0) + (e->live ? P_COUNT : 0);
    char **out = callocCheck(sizeof(char *) * (n + 1));
    int k = 0;
    if (have_forward(e)) {
        const Model *m = &e->model;
        for (int i = 0; i < NG; i++)
            if (act_ran(m, global_acts[i])) out[k++] = strdup(global_acts[i]);
        for (int it = 1; it <= L; it++)
            for (int i = 0; i < NI; i++) {
                if (!act_ran(m, iter_acts[i])) continue;
                char buf[64];
                snprintf(buf, sizeof buf, "%s@%d", iter_acts[i], it);
                out[k++] = strdup(buf);
            }
    }
    if (e->live)
        for (int i = 0; i < P_COUNT; i++) out[k++] = strdup(e->model.t[i].name);
    out[k] = NULL;
    return out;
}

int probe_unlisted(const Engine *e, char *buf, size_t n) {
    buf[0] = 0;
    if (!have_forward(e)) return 0;
    size_t used = 0;
    int count = 0;
    static const char *groups[ARM_COUNT] = {[ARM_KDA] = "kda.*@i", [ARM_ENGRAM] = "m key val mem.*@i", [ARM_MOE] = "z@i moe.*@i"};
    for (int a = 0; a < ARM_COUNT; a++) {
        if (!groups[a] || e->model.last_on[a]) continue;
        used += snprintf(buf + used, used < n ? n - used : 0, "%s%s (%s)", count++ ? ", " : "", groups[a], dm_arm_names[a]);
    }
    return count;
}

void probe_names_free(char **names) {
    for (int i = 0; names && names[i]; i++) free(names[i]);
    free(names);
}

static void set_shape(ProbeInfo *pi, int ndim, int a, int b, int c) {
    pi->ndim = ndim;
    pi->shape[0] = a; pi->shape[1] = b; pi->shape[2] = c;
    pi->n = (size_t)a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
}

// p [n] is backend memory (activations, parameters): downloaded into host scratch first
static double *copy_real(const Backend *be, const real *p, size_t n) {
    real *h = mallocCheck(sizeof(real) * (n ? n : 1));
    be->download(h, p, sizeof(real) * n);
    double *v = mallocCheck(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = h[i];
    free(h);
    return v;
}
static real *host_copy(const Backend *be, const real *p, size_t n) {
    real *h = mallocCheck(sizeof(real) * (n ? n : 1));
    be->download(h, p, sizeof(real) * n);
    return h;
}

// "unknown probe" with the names sharing its first letters. Before any forward the activations
// are not listed by probe_names, so their names (NAME@i per iteration) are offered as well.
// A text= forward is still to run (fresh): its names are offered the same way, not the last forward's.
static int unknown_probe(const Engine *e, const char *name, size_t base, int fresh, dm_err *err) {
    char **names = probe_names(e), hint[300] = "", buf[64];
    size_t used = 0, pre = base > 3 ? 3 : base;
    int shown = 0, nact = have_forward(e) && !fresh ? 0 : NG + NI;
    for (int i = 0; shown < 6 && used < sizeof hint; i++) {
        const char *cand;
        if (i < nact && i < NG) cand = global_acts[i];
        else if (i < nact) { snprintf(buf, sizeof buf, "%s@i", iter_acts[i - NG]); cand = buf; }
        else if (fresh || !(cand = names[i - nact])) break;  // (a text's forward: its names alone, no parameter)
        if (!strncmp(cand, name, pre)) used += snprintf(hint + used, sizeof hint - used, "%s%s", shown++ ? ", " : "", cand);
    }
    probe_names_free(names);
    return dm_fail(err, "unknown probe '%s'%s%s (:probe lists every name)", name, shown ? "; near: " : "", hint);
}

// an activation of an arm the last forward ran without: nothing of it is in memory (never zeros;
// the router logits z are computed with moe off, in the controller's pass, but nothing reads them)
static int arm_was_off(const Engine *e, const char *name, int a, dm_err *err) {
    const char *arm = dm_arm_names[a];
    const char *what = strcmp(name, "z") && strncmp(name, "z@", 2) ? "did not run" : "was not used";
    if (e->model.arms.on[a])
        return dm_fail(err, "'%s' %s in the last forward: the %s arm was off in it (it is on now: :step or :eval runs one)", name, what, arm);
    return dm_fail(err, "'%s' %s in the last forward: the %s arm is off (:arm %s on, then :step or :eval)", name, what, arm, arm);
}

// An activation's name: global (index into global_acts) or per iteration (which, with it its
// 1-based iteration), checked before any forward is needed: an unknown name is unknown whether or
// not a forward has run, and a bad iteration suffix is reported as such. fresh: the name is for a
// forward about to run at the model's full depth (text=), so the hints quote 1..L, not the last
// forward's depth
static int act_name(const Engine *e, const char *name, int fresh, int *global_, int *which_, int *it_, dm_err *err) {
    const Model *m = &e->model;
    const Config *c = &m->cfg;
    int global = -1, which = -1;
    for (int i = 0; i < NG; i++)
        if (!strcmp(name, global_acts[i])) global = i;
    const char *at = strrchr(name, '@');
    size_t base = at ? (size_t)(at - name) : strlen(name);
    if (global < 0)
        for (int i = 0; i < NI; i++)
            if (strlen(iter_acts[i]) == base && !strncmp(name, iter_acts[i], base)) which = i;
    if (global < 0 && which < 0) return unknown_probe(e, name, base, fresh, err);
    // the depth a suffix may name: the last forward's, else the one the next forward runs
    int L = have_forward(e) && !fresh ? m->last_depth : c->L;
    if (which >= 0 && !at) return dm_fail(err, "'%s' is per iteration: name one, e.g. %s@1 (1..%d)", name, iter_acts[which], L);
    int it = 0;
    if (which >= 0) {
        // a plain positive decimal: atoi would read h@1x and h@01 as h@1, h@abc as 0 and
        // wrap 20 digits to -1
        const char *s = at + 1;
        size_t len = strlen(s);
        if (!len || s[0] < '1' || s[0] > '9' || strspn(s, "0123456789") != len)
            return dm_fail(err, "bad iteration '%s' in %s: expected 1..%d (a decimal number, no leading zeros)", s, name, L);
        it = len > 9 ? INT_MAX : atoi(s);  // more than 9 digits: out of any range below
    }
    // beyond the model's L no forward can help: said before "run a forward first" (QA: @7 on an
    // L=2 model was told to :step, then refused for the range)
    if (which >= 0 && it > c->L)
        return dm_fail(err, "'%s': iteration %s out of range 1..%d (the model has L=%d)", name, at + 1, c->L, c->L);
    *global_ = global; *which_ = which; *it_ = it;
    return 0;
}

int probe_check_text_name(const Engine *e, const char *name, dm_err *err) {
    if (!e->live) return dm_fail(err, "no model: :init builds one");
    if (model_find_param(&e->model, name) >= 0)
        return dm_fail(err, "'%s' is a parameter: text= runs a forward, whose activations a probe reads (:probe %s alone for its values)", name, name);
    int g, w, it;
    return act_name(e, name, 1, &g, &w, &it, err);
}

int probe_get(Engine *e, const char *name, double **vals, ProbeInfo *info, dm_err *err) {
    if (!e->live) return dm_fail(err, "no model: :init builds one");
    Model *m = &e->model;
    const Config *c = &m->cfg;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", name);
    int pi = model_find_param(m, name);
    if (pi >= 0) {
        ParamTensor *t = &m->t[pi];
        set_shape(info, t->ndim, t->shape[0], t->shape[1], t->shape[2]);
        if (pi == P_TABLES && m->tab) {  // engram_ram: host memory
            double *v = mallocCheck(sizeof(double) * (t->numel ? t->numel : 1));
            for (size_t i = 0; i < t->numel; i++) v[i] = m->tab[i];
            *vals = v;
        } else {
            *vals = copy_real(m->be, m->params + t->offset, t->numel);
        }
        return 0;
    }
    info->activation = 1;
    int global, which, it;
    if (act_name(e, name, 0, &global, &which, &it, err)) return 1;
    if (!have_forward(e)) {
        if (e->fwd_moved)  // activations are not copied by a :device move (the weights are)
            return dm_fail(err, "the last forward's activations did not move with the model (:device): :step or :eval first for '%s'", name);
        if (e->fwd_cut)  // a step or eval refused part-way (a device workspace that could not grow)
            return dm_fail(err, "the last forward was cut short (a step or eval refused for device memory): its activations are partial: :step or :eval first for '%s'", name);
        if (e->fwd_undone)  // a :bench (or another restore) undid the steps they came from
            return dm_fail(err, "the activations in memory belong to steps that were undone (:bench restores the state): :step or :eval first for '%s'", name);
        return dm_fail(err, "no forward yet for activation '%s': :step or :eval first, or :probe %s text=\"...\" (parameters are probeable now)", name, name);
    }
    Acts *a = &m->acts;
    int B = a->B, T = a->T, N = B * T, d = c->d, H = c->H, dh = d / H, E = c->E;
    int OD = c->n_orders * c->engram_dim;
    const real *src = NULL;
    if (global >= 0) {
        if (!act_ran(m, global_acts[global])) return arm_was_off(e, name, act_arm(global_acts[global]), err);
        src = global == 0 ? a->h0 : global == 1 ? a->m : global == 2 ? a->key : a->val;
        set_shape(info, 3, B, T, global == 1 ? OD : d);
        *vals = copy_real(m->be, src, info->n);
        return 0;
    }
    if (it > m->last_depth)
        return dm_fail(err, "'%s': iteration %s out of range 1..%d (the last forward ran %d)", name, strrchr(name, '@') + 1, m->last_depth, m->last_depth);
    IterActs *t = &a->it[it - 1];
    const char *nm = iter_acts[which];
    // the switches the last forward ran with, not today's: an arm switched back on since has no
    // activations of its own in memory (they would be an older forward's)
    if (!act_ran(m, nm)) return arm_was_off(e, name, act_arm(nm), err);
    if (!strcmp(nm, "kda.state")) {
        set_shape(info, 2, B, H, 0);
        double *v = mallocCheck(sizeof(double) * B * H);
        real *S = callocCheck(sizeof(real) * H * dh * dh), *o = mallocCheck(sizeof(real) * H * dh);
        // host copies of the kept activations, stepped with the CPU's recurrent kernel
        real *q = host_copy(m->be, t->q, (size_t)N * d), *k = host_copy(m->be, t->k, (size_t)N * d);
        real *v_ = host_copy(m->be, t->v, (size_t)N * d), *g = host_copy(m->be, t->g, (size_t)N * d);
        real *beta = host_copy(m->be, t->beta, (size_t)N * H);
        for (int b = 0; b < B; b++) {
            memset(S, 0, sizeof(real) * H * dh * dh);
            for (int s = 0; s < T; s++) {
                size_t row = (size_t)b * T + s;
                kda_step(o, S, q + row * d, k + row * d, v_ + row * d, beta + row * H, g + row * d, H, dh);
            }
            for (int h = 0; h < H; h++) {
                double ss = 0;
                for (int j = 0; j < dh * dh; j++) ss += (double)S[(size_t)h * dh * dh + j] * S[(size_t)h * dh * dh + j];
                v[b * H + h] = sqrt(ss);
            }
        }
        free(S); free(o); free(q); free(k); free(v_); free(g); free(beta);
        *vals = v;
        return 0;
    }
    if (!strcmp(nm, "moe.load")) {
        set_shape(info, 1, E, 0, 0);
        double *v = mallocCheck(sizeof(double) * E);
        for (int x = 0; x < E; x++) v[x] = m->expert_load[(it - 1) * E + x];
        *vals = v;
        return 0;
    }
    if (!strcmp(nm, "probs") || !strcmp(nm, "loss")) {
        if (isnan(m->depth_loss[it - 1])) return dm_fail(err, "'%s': depth %d was not scored in the last forward", name, it);
        if (!strcmp(nm, "probs")) { src = t->probs; set_shape(info, 3, B, T, 256); }
        else { src = t->losses; set_shape(info, 2, B, T, 0); }
        *vals = copy_real(m->be, src, info->n);
        return 0;
    }
    // one gate of ctrl [N, 3] (w_attn, w_mem, w_ffn), [B, T]: a gate that has shut shows as such
    // (QA, session 32: w_ffn closed at nano, and ctrl's pooled histogram could only hint at it)
    static const char *gate[3] = {"ctrl.attn", "ctrl.mem", "ctrl.ffn"};
    for (int gi = 0; gi < 3; gi++)
        if (!strcmp(nm, gate[gi])) {
            set_shape(info, 2, B, T, 0);
            double *all = copy_real(m->be, t->ctrl, (size_t)N * 3), *v = mallocCheck(sizeof(double) * (size_t)N);
            for (size_t j = 0; j < (size_t)N; j++) v[j] = all[j * 3 + gi];
            free(all);
            *vals = v;
            return 0;
        }
    struct { const char *n; const real *p; int w; } tab[] = {
        {"u", t->u, d}, {"n", t->n, d}, {"ctrl", t->ctrl, 3}, {"z", t->z, E}, {"kda.q", t->q, d}, {"kda.k", t->k, d},
        {"kda.v", t->v, d}, {"kda.beta", t->beta, H}, {"kda.g", t->g, d}, {"kda.o", t->o, d}, {"kda.out", t->a, d},
        {"mem.gate", t->mgate, 1}, {"mem.e", t->e, d}, {"moe.out", t->gout, d}, {"body", t->body, d}, {"h", t->h, d},
        {"y", t->y, d}, {"ybar", t->ybar, d},
    };
    for (unsigned i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(nm, tab[i].n)) {
            if (tab[i].w == 1) set_shape(info, 2, B, T, 0);
            else set_shape(info, 3, B, T, tab[i].w);
            *vals = copy_real(m->be, tab[i].p, (size_t)N * tab[i].w);
            // the forward keeps q with the readout's dh^-1/2 already in it (one multiply fewer
            // per step); the probe shows q as SPEC §2 defines it, unit norm per head
            if (!strcmp(nm, "kda.q"))
                for (size_t j = 0; j < (size_t)N * d; j++) (*vals)[j] *= sqrt((double)dh);
            return 0;
        }
    return dm_fail(err, "internal: probe '%s' has no source", name);
}

void probe_stats(const double *v, size_t n, ProbeStats *s) {
    memset(s, 0, sizeof *s);
    s->n = n;
    double sum = 0, sq = 0;
    size_t k = 0;
    s->min = INFINITY; s->max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) { s->nonfinite++; continue; }
        sum += v[i]; sq += v[i] * v[i]; k++;
        if (v[i] < s->min) s->min = v[i];
        if (v[i] > s->max) s->max = v[i];
    }
    if (!k) { s->mean = s->std = s->rms = s->min = s->max = s->absmax = NAN; return; }
    s->mean = sum / k;
    double var = 0;
    for (size_t i = 0; i < n; i++) if (isfinite(v[i])) var += (v[i] - s->mean) * (v[i] - s->mean);
    s->std = sqrt(var / k);
    s->rms = sqrt(sq / k);
    s->absmax = fmax(fabs(s->min), fabs(s->max));
}

void probe_source(const Engine *e, const ProbeInfo *pi, char *desc, size_t ndesc, char *tag, size_t ntag) {
    long long s = pi->activation ? (long long)e->fwd_step : (long long)e->step;
    if (!pi->activation) { snprintf(desc, ndesc, "step %lld", s); snprintf(tag, ntag, "step%lld", s); }
    else if (e->fwd_kind == 1) { snprintf(desc, ndesc, "forward of step %lld", s); snprintf(tag, ntag, "fwd%lld", s); }
    else if (e->fwd_kind == 2 && e->fwd_pad > 0) {
        // the eval's last batch, filled up with copies: its statistics include them
        snprintf(desc, ndesc, "eval forward at step %lld: its last batch, with %d padding cop%s at its end", s, e->fwd_pad,
                 e->fwd_pad == 1 ? "y" : "ies");
        snprintf(tag, ntag, "eval%lld", s);
    } else if (e->fwd_kind == 2) { snprintf(desc, ndesc, "eval forward at step %lld", s); snprintf(tag, ntag, "eval%lld", s); }
    else if (e->fwd_kind == 3) {
        snprintf(desc, ndesc, "forward of a text at step %lld: %d byte%s read, %s the next", s, e->model.acts.T,
                 e->model.acts.T == 1 ? "" : "s", e->model.acts.T == 1 ? "predicting" : "each predicting");
        snprintf(tag, ntag, "text%lld-%08x", s, (unsigned)e->fwd_text_fp);
    }
    else { snprintf(desc, ndesc, "last forward"); snprintf(tag, ntag, "fwd"); }
    // the arms that forward ran without: its activations are an ablation's (QA, session 35)
    uint16_t off = 0;
    for (int a = 0; pi->activation && a < ARM_COUNT; a++)
        if (!e->model.last_on[a]) off |= (uint16_t)(1u << a);
    char names[64] = "";
    arms_mask_names(off & ARMS_FORWARD_MASK, names, sizeof names);
    size_t l = strlen(desc);
    if (names[0] && l + 1 < ndesc) snprintf(desc + l, ndesc - l, "; arms off in it: %s", names);
    // (and in the tag, so the PNG of an ablated forward is its own file: the eval of the same step
    // with every arm on was overwritten by it, both said "wrote" the same name: QA, session 41)
    size_t tl = strlen(tag), k = 0;
    for (const char *c = names; *c; c++)  // ("kda, moe" -> "kda+moe": a file name without blanks)
        if (*c != ' ') names[k++] = *c == ',' ? '+' : *c;
    names[k] = 0;
    if (names[0] && tl + 1 < ntag) snprintf(tag + tl, ntag - tl, "-off-%s", names);
}

int probe_forward_text(Engine *e, const unsigned char *text, int n, dm_err *err) {
    if (!e->live) return dm_fail(err, "no model: :init builds one");
    if (n < 2) return dm_fail(err, "text= needs at least 2 bytes: each byte read predicts the next");
    int T = n - 1;
    if (T > e->cfg.seq)
        return dm_fail(err, "text= is %d bytes: at most seq+1 = %d (the forward reads a sequence of at most seq bytes)", n, e->cfg.seq + 1);
    Model *m = &e->model;
    if (model_reserve_try(m, 1, T, err)) return 1;
    int *x = mallocCheck(sizeof(int) * T), *y = mallocCheck(sizeof(int) * T);
    for (int t = 0; t < T; t++) { x[t] = text[t]; y[t] = text[t + 1]; }
    Arms pre = m->arms;
    DmGuard g;
    dm_guard_open(&g);
    if (setjmp(g.jb)) {  // a device workspace that could not grow: nothing but activations written
        if (m->be->sync) m->be->sync();
        m->arms = pre;  // (not counted)
        e->fwd_kind = 0;
        m->last_depth = 0;
        e->fwd_cut = 1;
        free(x); free(y);
        return dm_fail(err, "the text's forward was not run: %s", g.msg);
    }
    model_forward(m, x, y, 1, T, m->cfg.L, FWD_ALL_DEPTHS);
    dm_guard_close(&g);
    e->fwd_kind = 3;
    // (kept: a later probe of this forward lists its values byte by byte too: QA, session 41)
    unsigned char *keep = realloc(e->fwd_text, (size_t)n);
    if (keep) { memcpy(keep, text, (size_t)n); e->fwd_text = keep; e->fwd_text_n = n; }
    else e->fwd_text_n = 0;
    e->fwd_text_fp = 2166136261u;
    for (int i = 0; i < n; i++) e->fwd_text_fp = (e->fwd_text_fp ^ text[i]) * 16777619u;
    e->fwd_step = e->step;
    e->fwd_undone = e->fwd_moved = e->fwd_cut = 0;
    e->fwd_pad = 0;
    free(x); free(y);
    return 0;
}
