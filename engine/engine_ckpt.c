// engine_ckpt.c — checkpoints of the whole trainer state: engine_save writes every section
// (SPEC §6), engine_load verifies a file against a model of its config before it replaces the
// live one.
#include "engine.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt.h"
#include "ckpt_state.h"
#include "ckpt_values.h"
#include "engine_internal.h"

static void tensor_layout(const Model *m, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < P_COUNT && used < n; i++)
        used += snprintf(buf + used, n - used, "%s %d %d %d %zu\n", m->t[i].name, m->t[i].shape[0], m->t[i].shape[1],
                         m->t[i].shape[2], m->t[i].offset);
}


int engine_save(Engine *e, const char *path, dm_err *err) { return engine_save_mode(e, path, CK_REPLACE, err); }

int engine_save_mode(Engine *e, const char *path, int mode, dm_err *err) {
    if (engine_need(e, 0, err)) return 1;
    if (engine_report(e, NULL, err)) return 1;  // counters and rows of every step taken
    engine_corpus_check(e);
    char *cfgtext = mallocCheck(16384);
    engine_config_text(&e->cfg, cfgtext, 16384);
    CkptState st = {0};
    st.real_size = sizeof(real);
    st.n_arms = ARM_COUNT;
    st.step = e->step; st.tokens = e->tokens; st.opt_t = e->opt.t; st.total_skips = e->opt.total_skips;
    st.consecutive_skips = e->opt.consecutive_skips;
    st.n_params = e->model.n_params;
    st.n_rows_tables = (uint64_t)e->cfg.n_orders * e->cfg.engram_rows;
    st.last_orth_err = e->last_orth_err;
    for (int a = 0; a < ARM_COUNT; a++) {
        st.arms_on[a] = e->model.arms.on[a];
        st.arms_fwd[a] = e->model.arms.fwd[a];
        st.arms_bwd[a] = e->model.arms.bwd[a];
    }
    size_t P = sizeof(real) * e->model.n_params;
    // the parameters are backend memory: a host copy to write (the same file wherever the tables
    // live); so is the optimizer state. Four copies the size of the parameters: a host short of
    // them is this save's error, not the process's end (mallocCheck exited, and a :quit's or a
    // checkpoint's save took the trained state with it: QA, session 41)
    size_t RS = sizeof(int64_t) * st.n_rows_tables;
    real *params = malloc(P ? P : 1), *om = malloc(P ? P : 1), *ov = malloc(P ? P : 1), *omom = malloc(P ? P : 1);
    int64_t *ors = malloc(RS ? RS : 1);
    if (!params || !om || !ov || !omom || !ors) {
        free(params); free(om); free(ov); free(omom); free(ors); free(cfgtext);
        return dm_fail(err, "%s: cannot save checkpoint: no host memory for its copy of the state (%.0f MB: the parameters and "
                       "three optimizer moments); nothing was written (the previous file, if any, is untouched)", path,
                       (4.0 * P + RS) / 1048576.0);
    }
    model_params_get(&e->model, params);
    optim_state_get(&e->opt, &e->model, om, ov, omom, ors);
    char *layout = mallocCheck(8192);
    tensor_layout(&e->model, layout, 8192);
    // the rows' eval-set ids on their own (a reader of the raw rows cannot tell the old padding
    // from an id)
    uint32_t *eset = mallocCheck(sizeof(uint32_t) * (size_t)(e->nrows ? e->nrows : 1));
    uint64_t fpv = e->data_fp;  // which bytes the run was trained on (data_fingerprint)
    uint64_t sfp[2] = {e->split_fp[0], e->split_fp[1]};  // and of each split alone: a -r says which one changed
    int64_t split[2] = {e->has_data ? e->data.n_train : 0, e->has_data ? e->data.n_eval : 0};  // and how they were split
    // and how far into it the model's steps drew windows: the split at the save need not be the
    // one they ran at (a -r, :set eval_frac=0.05, exit wrote 190000 of 200000 bytes for steps at
    // 180000, and the next -r's held-out note quoted that: QA, session 39)
    int64_t trained = e->trained_upto;
    for (int i = 0; i < e->nrows; i++) eset[i] = e->rows[i].eval_set;
    int32_t steps_auto = e->steps_auto;
    CkptSection sec[] = {
        {"layout", layout, strlen(layout)},
        {"config", cfgtext, strlen(cfgtext)},
        {"state", &st, sizeof st},
        {"params", params, P},
        {"optim.m", om, P},
        {"optim.v", ov, P},
        {"optim.mom", omom, P},
        {"optim.row_steps", ors, RS},
        {"metrics", e->rows, sizeof(MetricRow) * (size_t)e->nrows},
        {"metrics.eval_set", eset, sizeof(uint32_t) * (size_t)e->nrows},
        {"data", e->data_path, strlen(e->data_path)},
        {"data.eval", e->eval_path, strlen(e->eval_path)},  // empty: the held-out tail of data
        {"data.fingerprint", &fpv, e->has_data ? sizeof fpv : 0},
        {"data.split", split, e->has_data ? sizeof split : 0},  // train, held-out bytes
        {"data.fingerprint.splits", sfp, e->has_data ? sizeof sfp : 0},  // (absent in older files)
        {"data.trained", &trained, e->has_data ? sizeof trained : 0},  // (absent in older files: data.split's training bytes)
        {"anchors", &e->anchors, e->has_anchors ? sizeof e->anchors : 0},  // (on these bytes: data.fingerprint)
        // 1: config's steps was chosen by the first :train, not by the user, so an :init after a
        // resume or a :load drops it as it would have in the process that saved (absent in older
        // files: the user's)
        {"schedule.auto", &steps_auto, sizeof steps_auto},
    };
    int rc = ckpt_write_mode(path, sec, (int)(sizeof sec / sizeof sec[0]), mode, err);
    if (!rc) engine_mark_synced(e, path);
    free(cfgtext);
    free(layout);
    free(eset);
    free(params);
    free(om); free(ov); free(omom); free(ors);
    return rc;
}

static const CkptSection *need_sec(const CkptFile *f, const char *name, uint64_t size, const char *path, dm_err *err) {
    const CkptSection *s = ckpt_find(f, name);
    if (!s) { dm_fail(err, "%s: section '%s' missing", path, name); return NULL; }
    if (size != UINT64_MAX && s->size != size) {
        dm_fail(err, "%s: section '%s' holds %llu bytes, this model needs %llu", path, name,
                (unsigned long long)s->size, (unsigned long long)size);
        return NULL;
    }
    return s;
}

// Counters no run reaches (2^56: a step of 2^20 tokens for 2^36 steps); with room below int64's
// end, so the sums a step adds cannot overflow (a hand-made 2^63 - 1 did, in engine_step)
#define CK_COUNT_MAX (1LL << 56)

// Metric rows as a run writes them: a train or eval row of a step up to the state's, a finite
// lr, shares in [0, 1], an eval row's depth in 1..L and window >= 0, the flags 0 or 1 (:plot
// sums and indexes by them). A loss or gnorm may be NaN: the firewall records the step it skipped.
static int check_rows(const char *path, const void *data, size_t n, int64_t step, int L, dm_err *err) {
    for (size_t i = 0; i < n; i++) {
        MetricRow r;
        memcpy(&r, (const char *)data + i * sizeof r, sizeof r);
        const char *bad = NULL;
        if (r.kind != 0 && r.kind != 1) bad = "kind";
        else if (r.step < 0 || r.step > step) bad = "step";
        else if (r.tokens < 0 || r.tokens > CK_COUNT_MAX) bad = "tokens";
        else if (!isfinite(r.lr) || r.lr < 0) bad = "lr";  // (ms and tok_s are clock readings, never used: not checked)
        else if (r.skipped != 0 && r.skipped != 1) bad = "skipped";
        else if (r.arms_off >> ARM_COUNT) bad = "arms_off";
        else if (r.kind == 1 && (r.depth < 1 || r.depth > L || r.window < 0)) bad = "depth or window";
        else if (r.kind == 0 && r.emulated != 0 && r.emulated != 1) bad = "emulated";
        for (int x = 0; !bad && x < 16; x++)
            if (!(r.expert_frac[x] >= 0 && r.expert_frac[x] <= 1)) bad = "expert_frac";
        if (bad)
            return dm_fail(err, "%s: section 'metrics' row %zu (step %lld) has an impossible %s: not loaded", path, i,
                           (long long)r.step, bad);
    }
    return 0;
}

// The checks that need no model: the state's counters, the build's real, the config and, with a
// model live, its architecture. c gets the checkpoint's config.
static int ckpt_head_check(const Engine *e, const CkptFile *f, const char *path, CkptState *st, Config *c, dm_err *err) {
    const CkptSection *sc = need_sec(f, "config", UINT64_MAX, path, err), *ss;
    if (!sc || !(ss = need_sec(f, "state", sizeof(CkptState), path, err))) return 1;
    memcpy(st, ss->data, sizeof *st);
    if (st->real_size != 4 && st->real_size != 8)
        return dm_fail(err, "%s: the state section names reals of %u bytes (4 or 8 are written): not a checkpoint this dmsh can read",
                       path, st->real_size);
    if (st->real_size != sizeof(real))
        return dm_fail(err, "%s: written by a %s build, this dmsh is %s (make DM_REAL=%s)", path,
                       st->real_size == 8 ? "double" : "float", REAL_NAME, st->real_size == 8 ? "double" : "float");
    // CRCs prove the bytes are the ones written, not that a hand-made file makes sense
    if (st->step < 0 || st->step > (1LL << 50) || st->tokens < 0 || st->tokens > CK_COUNT_MAX || st->opt_t < 0 ||
        st->opt_t > (1LL << 50) || st->total_skips < 0 || st->total_skips > (1LL << 50) || st->consecutive_skips < 0 ||
        st->consecutive_skips > st->total_skips)
        return dm_fail(err, "%s: impossible counters in the state section (step %lld, tokens %lld, optimizer steps %lld, skips %lld): not loaded",
                       path, (long long)st->step, (long long)st->tokens, (long long)st->opt_t, (long long)st->total_skips);
    for (int a = 0; a < ARM_COUNT && a < (int)st->n_arms; a++)
        if ((st->arms_on[a] != 0 && st->arms_on[a] != 1) || st->arms_fwd[a] < 0 || st->arms_fwd[a] > CK_COUNT_MAX ||
            st->arms_bwd[a] < 0 || st->arms_bwd[a] > CK_COUNT_MAX)
            return dm_fail(err, "%s: impossible arm state in the state section (%s: on %d, forward %lld, backward %lld): not loaded", path,
                           dm_arm_names[a], st->arms_on[a], (long long)st->arms_fwd[a], (long long)st->arms_bwd[a]);
    if (!(isfinite(st->last_orth_err) && (st->last_orth_err >= 0 || st->last_orth_err == -1)))
        return dm_fail(err, "%s: impossible orthogonality error %g in the state section: not loaded", path, st->last_orth_err);
    // the corpus split it was written with (train and held-out bytes): summed when loaded, so
    // bounded here (a fuzzed INT64_MAX overflowed that sum: QA, session 27)
    const CkptSection *ssp = ckpt_find(f, "data.split");
    if (ssp && ssp->size == 2 * sizeof(int64_t)) {
        int64_t was[2];
        memcpy(was, ssp->data, sizeof was);
        if (was[0] < 0 || was[1] < 0 || was[0] > CK_COUNT_MAX || was[1] > CK_COUNT_MAX)
            return dm_fail(err, "%s: impossible corpus split in the data.split section (%lld training, %lld held-out bytes): not loaded",
                           path, (long long)was[0], (long long)was[1]);
    }
    char *text = mallocCheck(sc->size + 1);
    memcpy(text, sc->data, sc->size);
    text[sc->size] = 0;
    config_defaults(c);
    int bad = config_apply_text(c, text, path, err);
    free(text);
    if (bad) return 1;
    if (e->live) {
        // where the tables live is the session's placement, as the device is, not the weights'
        // (the same numbers either way, tests/test_engram_ram.c): the live model's stays
        c->engram_ram = e->model.cfg.engram_ram;
        char diff[512];
        if (config_arch_diff(&e->model.cfg, c, diff, sizeof diff))
            return dm_fail(err, "%s: architecture differs from the live model: %s (it loads where no model is live: "
                           "`dmsh -e ':load %s'`; or `:init` with its shape, then :load)", path, diff, path);
    }
    return 0;
}

int engine_load_check(const Engine *e, const char *path, dm_err *err) {
    CkptFile f;
    if (ckpt_read(path, &f, err)) return 1;
    CkptState st;
    Config c;
    int rc = ckpt_head_check(e, &f, path, &st, &c, err);
    ckpt_close(&f);
    return rc;
}

int engine_load(Engine *e, const char *path, dm_err *err) {
    double frac0 = e->cfg.eval_frac;  // the split of the corpus open now
    CkptFile f;
    if (ckpt_read(path, &f, err)) return 1;
    int rc = 1;
    CkptState st;
    Config c;
    if (ckpt_head_check(e, &f, path, &st, &c, err)) goto done;

    // A checkpoint loads as written, eval_bytes < seq too (an older build took it): it is no
    // architecture key and weights and optimizer state do not depend on it. Not raised to seq
    // either: the loaded state would then differ from its file (unsaved at once, and a -r resume
    // would carry another value than the one saved) and the bytes later evals score would change
    // without the user asking. The REPL says the window holds no sequence and names the fix;
    // :eval and a :train that evals refuse until it is fixed (engine_eval_window).

    // its layout and its parameter count against its config's, before a model of that config is
    // built (a config edited to d=8192 built a 3 GB model from an 8 MB file, then said "written
    // by an older build")
    if (config_validate(&c, err)) goto done;
    {
        Model lay;
        model_layout(&lay, &c);
        char *want = mallocCheck(8192);
        tensor_layout(&lay, want, 8192);
        const CkptSection *sl = ckpt_find(&f, "layout"), *sp0 = ckpt_find(&f, "params");
        int same = sl && sl->size == strlen(want) && memcmp(sl->data, want, sl->size) == 0;
        free(want);
        if (!same) {  // (an older build's tensor table, or a config section edited by hand)
            dm_fail(err, "%s: its parameter layout is not the one its config makes in this dmsh (a file of an older build, or "
                    "an edited config): not loaded", path);
            goto done;
        }
        if (!sp0 || sp0->size != sizeof(real) * (uint64_t)lay.n_params) {
            dm_fail(err, "%s: its config makes %zu parameters, its params section holds %llu: the file is inconsistent, not loaded", path,
                    lay.n_params, sp0 ? (unsigned long long)(sp0->size / sizeof(real)) : 0ULL);
            goto done;
        }
    }
    // verify every size against a model of that config before touching the live one
    Engine fresh;
    engine_init(&fresh);
    fresh.cfg = c;
    fresh.be = e->be;  // the checkpoint loads onto the current device
    if (engine_build(&fresh, c.seed, err)) goto done;
    size_t P = sizeof(real) * fresh.model.n_params;
    const CkptSection *sp, *sm, *sv, *smo, *srs, *smet;
    if (!(sp = need_sec(&f, "params", P, path, err)) || !(sm = need_sec(&f, "optim.m", P, path, err)) ||
        !(sv = need_sec(&f, "optim.v", P, path, err)) || !(smo = need_sec(&f, "optim.mom", P, path, err)) ||
        !(srs = need_sec(&f, "optim.row_steps", sizeof(int64_t) * (uint64_t)c.n_orders * c.engram_rows, path, err)) ||
        !(smet = need_sec(&f, "metrics", UINT64_MAX, path, err))) {
        engine_free(&fresh);
        goto done;
    }
    if (ckpt_check_values(path, sp->data, sm->data, sv->data, smo->data, fresh.model.n_params, srs->data,
                          (size_t)c.n_orders * c.engram_rows, st.step > st.opt_t ? st.step : st.opt_t, err) ||
        (smet->size % sizeof(MetricRow) && dm_fail(err, "%s: section 'metrics' has a partial row", path)) ||
        check_rows(path, smet->data, smet->size / sizeof(MetricRow), st.step, c.L, err)) {
        engine_free(&fresh);
        goto done;
    }
    model_params_put(&fresh.model, sp->data);  // backend memory (and host tables under engram_ram)
    optim_state_put(&fresh.opt, &fresh.model, sm->data, sv->data, smo->data, srs->data);
    optim_set_counters(&fresh.opt, st.opt_t, st.total_skips, st.consecutive_skips);
    for (int a = 0; a < ARM_COUNT && a < (int)st.n_arms; a++) {
        fresh.model.arms.on[a] = st.arms_on[a];
        fresh.model.arms.fwd[a] = st.arms_fwd[a];
        fresh.model.arms.bwd[a] = st.arms_bwd[a];
    }
    // swap in: model, optimizer, counters, metrics; data and session stay
    engine_free_model(e);
    e->cfg = c;
    e->model = fresh.model;
    e->opt = fresh.opt;
    e->live = 1;
    e->step = st.step;
    e->tokens = st.tokens;
    e->last_orth_err = st.last_orth_err;
    // whether the horizon is the user's travels with the state (kept from before the load, an
    // earlier :train's choice made the :init after it drop the checkpoint's own horizon)
    const CkptSection *sau = ckpt_find(&f, "schedule.auto");
    int32_t sa = 0;
    if (sau && sau->size == sizeof sa) memcpy(&sa, sau->data, sizeof sa);
    e->steps_auto = sa == 1 && c.steps > 0;
    e->nrows = 0;
    free(fresh.rows);
    int nr = (int)(smet->size / sizeof(MetricRow));
    if (nr > e->caprows) {
        e->rows = reallocCheck(e->rows, sizeof(MetricRow) * nr);
        e->caprows = nr;
    }
    if (nr) memcpy(e->rows, smet->data, smet->size);
    // eval-set ids: from their section; a checkpoint written before it existed has none (and
    // arbitrary padding bytes in their place): 0, "unknown", which :plot joins by window alone
    const CkptSection *ses = ckpt_find(&f, "metrics.eval_set");
    int have_es = ses && ses->size == sizeof(uint32_t) * (uint64_t)nr;
    for (int i = 0; i < nr; i++) {
        uint32_t id = 0;
        if (have_es) memcpy(&id, (const char *)ses->data + sizeof(uint32_t) * (size_t)i, sizeof id);
        e->rows[i].eval_set = id;
    }
    e->nrows = nr;
    e->has_anchors = 0;
    // reopen the checkpoint's corpus when none is open (a resumed session continues on it)
    const CkptSection *sd = ckpt_find(&f, "data"), *se = ckpt_find(&f, "data.eval");
    // a path holding a NUL names another file than the one written (it would end there: a
    // crafted "/tmp/\0x" opened all of /tmp: QA, session 29); no dmsh writes one
    int nul_d = sd && memchr(sd->data, 0, sd->size), nul_e = se && memchr(se->data, 0, se->size);
    if (!e->has_data && (nul_d || nul_e)) {
        engine_note(e, "the checkpoint's %s holds a NUL byte (not a path dmsh writes), so no corpus is open; :data PATH opens one",
                    nul_d ? "corpus path" : "eval file path");
    } else if (!e->has_data && sd && sd->size && sd->size < sizeof e->data_path) {
        char dp[1024], ep[1024] = "";
        memcpy(dp, sd->data, sd->size);
        dp[sd->size] = 0;
        if (se && se->size && se->size < sizeof ep) {  // the eval file the run was opened with
            memcpy(ep, se->data, se->size);
            ep[se->size] = 0;
        }
        dm_err derr = {0};
        if (dp[0] != '/' || (ep[0] && ep[0] != '/')) {
            // a relative path: written by a dmsh before paths were stored absolute (and before the
            // fingerprint), relative to the directory that run was in, which this one need not be;
            // opened from here it trained a resumed run on another file in silence (QA, session 32)
            snprintf(e->data_path, sizeof e->data_path, "%s", dp);
            snprintf(e->eval_path, sizeof e->eval_path, "%s", ep);
            engine_note(e, "the checkpoint (an older dmsh's) names its %s '%s' relative to the directory that run was in, and holds no "
                        "fingerprint to check a file against: no corpus is opened; :data PATH opens the one it trained on",
                        dp[0] != '/' ? "corpus" : "eval file", dp[0] != '/' ? dp : ep);
        } else if (engine_open_data(e, dp, ep[0] ? ep : NULL, &derr)) {
            snprintf(e->data_path, sizeof e->data_path, "%s", dp);
            snprintf(e->eval_path, sizeof e->eval_path, "%s", ep);
            engine_note(e, "the checkpoint's corpus did not open, so no corpus is open (%s); :data PATH opens one", derr.msg);
        }
    } else if (!e->has_data && sd && sd->size >= sizeof e->data_path) {
        engine_note(e, "the checkpoint's corpus path is %llu bytes, longer than this dmsh takes (%zu), so no corpus is open; :data PATH opens one",
                    (unsigned long long)sd->size, sizeof e->data_path - 1);
    } else if (e->has_data && sd && sd->size && (sd->size != strlen(e->data_path) || memcmp(sd->data, e->data_path, sd->size))) {
        engine_note(e, "this checkpoint was trained on %.*s%s; the corpus already open stays (%s): :data switches",
                    (int)(sd->size < 400 ? sd->size : 400), (const char *)sd->data,
                    ((const char *)sd->data)[0] != '/' ? " (as an older dmsh recorded it: relative to the directory that run was in)" : "",
                    e->data_path);
    }
    // the checkpoint's eval_frac (a live key it keeps) splits the corpus open: the config and the
    // split the batches and evals come from are one (after :set eval_frac=0.2, :load they disagreed)
    if (e->has_data && !e->eval_path[0] && e->cfg.eval_frac != frac0) {
        dm_err rerr = {0};
        if (engine_resplit(e, frac0, &rerr)) engine_note(e, "the corpus keeps its split at eval_frac %g: %s", frac0, rerr.msg);
    }
    e->trained_upto = 0;  // (the loaded model's, set below when the file says it)
    // the same path with other bytes (a regenerated or edited file): the windows from here are
    // not the original run's, which a resume must not hide
    const CkptSection *sfp = ckpt_find(&f, "data.fingerprint");
    if (e->has_data && sfp && sfp->size == sizeof(uint64_t)) {
        uint64_t want;
        memcpy(&want, sfp->data, sizeof want);
        int same_path = sd && sd->size == strlen(e->data_path) && !memcmp(sd->data, e->data_path, sd->size);
        // (the fingerprint covers the split too: a split that differs is said as such, not as
        // a changed file)
        const CkptSection *ssp = ckpt_find(&f, "data.split");
        int64_t was[2] = {0, 0};
        if (ssp && ssp->size == sizeof was) memcpy(was, ssp->data, sizeof was);
        int resplit = ssp && ssp->size == sizeof was && was[0] + was[1] == e->data.n_train + e->data.n_eval &&
                      (was[0] != e->data.n_train || was[1] != e->data.n_eval);
        // its run drew windows from the first was[0] bytes of this corpus (as far as a file can say)
        // (data.trained when the file has it and it fits in this corpus; else the split's training bytes)
        const CkptSection *str = ckpt_find(&f, "data.trained");
        int64_t upto = was[0];
        if (str && str->size == sizeof upto) memcpy(&upto, str->data, sizeof upto);
        if (upto < 0 || upto > was[0] + was[1]) upto = was[0];
        if (same_path && was[0] + was[1] == e->data.n_train + e->data.n_eval && e->step > 0) e->trained_upto = upto;
        int eval_was_same = se && se->size == strlen(e->eval_path) && !memcmp(se->data, e->eval_path, se->size);
        if (!se) eval_was_same = !e->eval_path[0];
        if (same_path && want != e->data_fp && !eval_was_same)
            engine_note(e, "this checkpoint's run held out %s%.*s; now %s%s: the batches and the eval window from here are not the original run's",
                        se && se->size ? "the file " : "the last eval_frac of the corpus", (int)(se && se->size < 400 ? se->size : 0),
                        se ? (const char *)se->data : "", e->eval_path[0] ? "eval=" : "the last eval_frac of the corpus",
                        e->eval_path);
        else if (same_path && want != e->data_fp && resplit)
            engine_note(e, "the corpus %s is split differently from when this checkpoint was written (train %lld / held-out %lld bytes then, %lld / %lld now: eval_frac or eval= differ): the batches and the eval window from here are not the original run's",
                        e->data_path, (long long)was[0], (long long)was[1], (long long)e->data.n_train, (long long)e->data.n_eval);
        else if (same_path && want != e->data_fp) {
            // which split changed, and how (the note said "size or bytes differ" of the corpus
            // when only the eval= file had changed, and the batches were the original run's: QA,
            // session 34)
            const CkptSection *ssf = ckpt_find(&f, "data.fingerprint.splits");
            uint64_t wsf[2] = {0, 0};
            int have_sf = ssf && ssf->size == sizeof wsf, have_split = ssp && ssp->size == sizeof was;
            if (have_sf) memcpy(wsf, ssf->data, sizeof wsf);
            // s 1: the training bytes are the same, the held-out ones not; 0: the training bytes
            // changed; -1: a file older than the split fingerprints, with eval=, whose sizes do
            // not tell which (said as such: review, session 34)
            int ev = e->eval_path[0] != 0;
            int s = have_sf ? wsf[0] == e->split_fp[0]
                    : !ev || !have_split ? 0
                    : was[0] != e->data.n_train ? 0
                    : was[1] != e->data.n_eval ? 1 : -1;
            // (sizes of what changed: the eval file, or the held-out tail; the training file with
            // eval=; else the whole corpus)
            int64_t then = s == 1 ? was[1] : ev ? was[0] : was[0] + was[1];
            int64_t now = s == 1 ? e->data.n_eval : ev ? e->data.n_train : e->data.n_train + e->data.n_eval;
            char how[96] = "its size or bytes differ";
            if (have_split && then != now) snprintf(how, sizeof how, "%lld B then, %lld B now", (long long)then, (long long)now);
            else if (have_split) snprintf(how, sizeof how, "the same size, other bytes");
            if (s < 0)
                engine_note(e, "the corpus %s or the eval file %s changed since this checkpoint was written (an older checkpoint: it cannot "
                            "tell which; their sizes are the same): the batches or the eval window from here may not be the original run's",
                            e->data_path, e->eval_path);
            else if (s)
                engine_note(e, "the held-out bytes (%s%s) changed since this checkpoint was written (%s): the eval window from here is not the "
                            "original run's; the training batches are", e->eval_path[0] ? "eval=" : "the last eval_frac of ",
                            e->eval_path[0] ? e->eval_path : e->data_path, how);
            else
                engine_note(e, "the corpus %s changed since this checkpoint was written (%s): the batches from here are not the original run's",
                            e->data_path, how);
        }
        // the anchors come back when they were computed on these very bytes (each user still
        // checks its eval window); a -r lost them, and its evals and plots their lines
        const CkptSection *san = ckpt_find(&f, "anchors");
        if (want == e->data_fp && san && san->size == sizeof e->anchors) {
            memcpy(&e->anchors, san->data, sizeof e->anchors);
            e->has_anchors = 1;
        }
    }
    engine_mark_synced(e, path);
    // the state in this file is of the corpus it records, not of the one open now if they differ
    // (or of none, when it did not open): a save at this step then goes to a new file (a -r on a
    // changed corpus, then an :eval, rewrote the only record of what steps 0..N trained on with
    // the new corpus's: QA, session 34; with no corpus open, with none: review, session 34)
    if (sfp && sfp->size == sizeof(uint64_t) && sd) {
        uint64_t want;
        memcpy(&want, sfp->data, sizeof want);
        e->synced_corpus = engine_corpus_hash_of((const char *)sd->data, sd->size, se ? (const char *)se->data : "", se ? se->size : 0, want);
    }
    rc = 0;
done:
    // a refusal after the trial build: that build put the backend in the file's precision (a
    // device-wide mode); the live model runs in its own again (QA, session 32: a refused fp32 file
    // left a bf16 session's products in pedantic fp32 while :show config said bf16)
    if (rc && e->be && e->be->set_precision) e->be->set_precision(e->cfg.precision_fp32);
    ckpt_close(&f);
    return rc;
}

int engine_ckpt_step(const char *path, long long *step, dm_err *err) {
    CkptState st;
    size_t n = 0;
    if (ckpt_peek(path, "state", &st, sizeof st, &n, err)) return 1;
    if (n != sizeof st || (st.real_size != 4 && st.real_size != 8) || st.step < 0 || st.step > (1LL << 50))
        return dm_fail(err, "%s: section 'state' is not one this dmsh wrote (%zu bytes)", path, n);
    *step = (long long)st.step;
    return 0;
}

// one key's value in a config section's text (":set d=128" lines), or "?"
static void config_value(const char *text, const char *key, char *v, size_t n) {
    char pat[40];
    snprintf(pat, sizeof pat, ":set %s=", key);
    const char *p = strstr(text, pat);
    snprintf(v, n, "%.*s", p ? (int)strcspn(p + strlen(pat), "\n") : 1, p ? p + strlen(pat) : "?");
}

int engine_ckpt_summary(const char *path, CkptSummary *s, dm_err *err) {
    memset(s, 0, sizeof *s);
    CkptState st;
    size_t n = 0;
    if (ckpt_peek(path, "state", &st, sizeof st, &n, err)) return 1;
    if (n != sizeof st || st.step < 0) return dm_fail(err, "%s: section 'state' is not one this dmsh wrote (%zu bytes)", path, n);
    s->step = (long long)st.step;
    for (int a = 0; a < ARM_COUNT; a++)
        if (!st.arms_on[a]) s->arms_off |= (uint16_t)(1u << a);
    char *cfg = mallocCheck(16385);
    if (!ckpt_peek(path, "config", cfg, 16384, &n, err)) {
        cfg[n] = 0;
        char d[32], L[32], E[32], k[32];
        config_value(cfg, "d", d, sizeof d); config_value(cfg, "L", L, sizeof L);
        config_value(cfg, "E", E, sizeof E); config_value(cfg, "k", k, sizeof k);
        snprintf(s->shape, sizeof s->shape, "d=%s L=%s E=%s k=%s", d, L, E, k);
    }
    free(cfg);
    size_t sz = 0;
    if (ckpt_peek(path, "metrics", NULL, 0, &sz, err)) return 1;
    if (sz % sizeof(MetricRow)) return dm_fail(err, "%s: section 'metrics' has a partial row", path);
    MetricRow *r = mallocCheck(sz ? sz : 1);
    if (sz && ckpt_peek(path, "metrics", r, sz, &sz, err)) { free(r); return 1; }
    int nr = (int)(sz / sizeof(MetricRow)), last_eval = -1;
    for (int i = 0; i < nr; i++) {
        if (r[i].kind == 0) { s->have_loss = 1; s->loss = r[i].loss; s->loss_step = r[i].step; s->loss_arms_off = r[i].arms_off & ARMS_FORWARD_MASK; }
        if (r[i].kind == 1) last_eval = i;
    }
    for (int i = 0; last_eval >= 0 && i < nr; i++) {  // that eval's deepest depth (its arms: eval_arms_off)
        const MetricRow *q = &r[i], *l = &r[last_eval];
        uint16_t m = l->arms_off & ARMS_FORWARD_MASK;
        if (q->kind != 1 || q->step != l->step || q->window != l->window || q->eval_set != l->eval_set || (q->arms_off & ARMS_FORWARD_MASK) != m) continue;
        if (!s->have_eval || q->depth >= s->eval_depth) {
            s->have_eval = 1; s->eval_depth = q->depth; s->bpb = q->bpb; s->eval_step = q->step; s->window = q->window;
            s->eval_arms_off = m;
        }
    }
    free(r);
    return 0;
}
