// cmd_config.c — the config commands: :preset, :set, and :help KEY (a key's meaning, values,
// default, value now, and whether a live model takes it; from the key table, engine/config.c).
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../engine/engine.h"
#include "shell.h"

#define E_ (sh->eng)
#define OUT (sh->out)

// :preset NAME runs configs/NAME.dm's `:set` lines as one :set: its keys (the shape, seq, batch,
// the Engram tables) and nothing else, through the same checks (all or nothing; on a live
// model only its own shape; seq against the open corpus). Keys it does not name keep their
// values: a preset once reset every other key to its default, and on a live model the
// optimizer kept running on the values :show config no longer showed.
int cmd_preset(Shell *sh, Words *w, dm_err *err) {
    if (w->argc != 2) return dm_fail(err, "usage: :preset NAME (nano, mini, small, base, large)");
    Config probe;
    if (config_preset(&probe, w->argv[1], err)) return 1;  // the name, and the file as a whole
    const char *text = config_preset_text(w->argv[1]);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", text ? text : "");
    const char *keys[64], *vals[64];
    int n = 0;
    char *line_save = NULL;
    for (char *ln = strtok_r(buf, "\n", &line_save); ln; ln = strtok_r(NULL, "\n", &line_save)) {
        char *hash = strchr(ln, '#');
        if (hash) *hash = 0;
        char *save = NULL;
        for (char *t = strtok_r(ln, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
            char *eq = strchr(t, '=');
            if (!eq || n == 64) continue;  // ":set" (config_preset checked the rest)
            *eq = 0;
            keys[n] = t;
            vals[n++] = eq + 1;
        }
    }
    if (E_->live) {  // a live model keeps its shape: say which keys, and what rebuilds it
        Config t = E_->cfg;
        char diff[512];
        if (!config_apply_text(&t, text ? text : "", w->argv[1], err) && config_arch_diff(&E_->model.cfg, &t, diff, sizeof diff))
            return dm_fail(err, "preset %s not applied (nothing changed): the live model keeps its shape (%s differ): `:init preset=%s` builds a new model of it",
                           w->argv[1], diff, w->argv[1]);
    }
    if (engine_set_many(E_, n, keys, vals, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return dm_fail(err, "preset %s not applied (nothing changed): %s", w->argv[1], msg);
    }
    const Config *c = &E_->cfg;
    // every key it set (the Engram keys too: `:preset large` turns engram_ram on)
    char orders[64];
    const ConfigKey *ko = config_find_key("engram_orders");
    config_get(c, ko, orders, sizeof orders);
    fprintf(OUT, "preset %s: d=%d H=%d L=%d E=%d k=%d r=%d f=%d seq=%d batch=%d engram_rows=%lld engram_dim=%d engram_orders=%s "
            "engram_ram=%s\n", w->argv[1], c->d, c->H, c->L, c->E, c->k, c->r, c->f, c->seq, c->batch, (long long)c->engram_rows,
            c->engram_dim, orders, c->engram_ram ? "on" : "off");
    return 0;
}

int cmd_set(Shell *sh, Words *w, dm_err *err) {
    if (w->argc < 2) return dm_fail(err, "usage: :set key=value ...");
    // all or nothing (engine_set_many): every pair, then the rules between keys on the result
    const char *keys[SH_MAX_WORDS] = {0}, *vals[SH_MAX_WORDS] = {0};
    int n = 0;
    for (int i = 1; i < w->argc; i++) {
        char *eq = (char *)sh_eq(w, i);  // a quoted "lr=0.5" is one word, not a key=value
        if (!eq) return dm_fail(err, "expected key=value, got '%s'%s", w->argv[i], w->lit[i] ? " (quote only the value: key=\"...\")" : "");
        *eq = 0;  // (the words are this command's own buffer)
        keys[n] = w->argv[i];
        vals[n++] = eq + 1;
        for (int j = 0; j < n - 1; j++)
            if (!strcmp(keys[j], keys[n - 1])) {  // `lr=0.5 lr=0.6`: one of them would be dropped (QA, session 24)
                for (int q = 0; q < n; q++) ((char *)vals[q])[-1] = '=';
                return dm_fail(err, ":set: key '%.*s' given twice", (int)(vals[n - 1] - 1 - keys[n - 1]), keys[n - 1]);
            }
    }
    Config old = E_->cfg, old_model = E_->model.cfg;
    int rc = engine_set_many(E_, n, keys, vals, err);
    for (int i = 0; i < n; i++) ((char *)vals[i])[-1] = '=';  // the words as typed again (transcript)
    if (rc) return 1;
    // keys that change nothing as the config stands: said, so no one tunes them (QA, session 32);
    // only for a value this :set changed (a config.dm replayed sets every key to what it was)
    int decay_keys = 0;
    for (int i = 0; i < n; i++) {
        char key[64];  // (the words hold key=value again)
        snprintf(key, sizeof key, "%.*s", (int)(vals[i] - 1 - keys[i]), keys[i]);
        const ConfigKey *k = config_find_key(key);
        char was[128] = "", now[128] = "";
        if (k) { config_get(&old, k, was, sizeof was); config_get(&E_->cfg, k, now, sizeof now); }
        if (!strcmp(was, now)) continue;
        decay_keys |= config_decay_key(key);
        if (E_->cfg.opt_adamw && (!strcmp(key, "lr_muon") || !strcmp(key, "muon_momentum") || !strcmp(key, "muon_colrow")))
            fprintf(OUT, "note: %s has no effect with opt=adamw (AdamW everywhere: no matrix takes a Muon step; opt=mix uses it)\n", key);
        // keys of an arm that is off, and the CUDA backend's on the CPU (QA, session 35: the
        // Muon keys were said, these accepted in silence)
        const int *on = E_->model.arms.on;
        const char *idle = !E_->live ? NULL
                         : (!strcmp(key, "retract_every") || !strcmp(key, "retract_iters")) && (!on[ARM_RETRACT] || !on[ARM_MOE])
                             ? (!on[ARM_MOE] ? "the moe arm is off, so nothing is retracted" : "the retract arm is off")
                         : !strcmp(key, "moe_aux") && (!on[ARM_AUX] || !on[ARM_MOE]) ? (!on[ARM_MOE] ? "the moe arm is off" : "the aux arm is off")
                         : NULL;
        if (idle) fprintf(OUT, "note: %s has no effect while %s (:show arms)\n", key, idle);
        if ((!strcmp(key, "precision") || !strcmp(key, "cuda_graph")) && strncmp(E_->device, "cuda", 4))
            fprintf(OUT, "note: %s has no effect on the CPU backend: it is the CUDA backend's (:device cuda)\n", key);
        if (!strcmp(key, "eval_frac") && E_->has_data && E_->eval_path[0])
            fprintf(OUT, "note: eval_frac has no effect while an eval= file is the held-out set (%s): :data PATH without eval= uses it\n",
                    E_->eval_path);
    }
    char dnote[300];
    if (decay_keys && config_decay_note(&E_->cfg, dnote, sizeof dnote)) fprintf(OUT, "note: %s\n", dnote);
    // a schedule key changed on a model that has taken steps: the next step's lr moves, since the
    // schedule is a function of the step and the horizon, not continued from where it was (":set
    // steps=N to extend" sent a finished run's lr from 0.1x back to 0.55x unsaid: QA, session 35)
    // (steps=0 too, either way: no horizon runs the steps after the warmup at the full lr, so a
    // horizon set on a model stepped without one, or taken away from a decayed one, moved the lr
    // as much, unsaid: QA, session 41)
    if (E_->live && E_->step > 0 && E_->cfg.lr == old.lr) {
        double m0 = lr_schedule_mult(&old, E_->step), m1 = lr_schedule_mult(&E_->cfg, E_->step);
        char how[160];
        if (E_->cfg.steps > 0)
            snprintf(how, sizeof how, "the schedule is a function of the step and steps=%lld, recomputed over it, not continued from where it was",
                     (long long)E_->cfg.steps);
        else
            snprintf(how, sizeof how, "steps=0 is no horizon: the steps after the warmup run at the full lr until a :train sets one");
        if (fabs(m1 - m0) > 1e-6 * fabs(m0))
            fprintf(OUT, "note: step %lld's lr goes from %.3e to %.3e (%.3gx to %.3gx of lr): %s%s\n", (long long)E_->step, E_->cfg.lr * m0,
                    E_->cfg.lr * m1, m0, m1, how,
                    m1 > m0 && E_->cfg.steps != old.steps && E_->cfg.steps > 0 && old.steps > 0 ? " (a warm restart of the decay)" : "");
    }
    if (E_->cfg.eval_frac != old.eval_frac && E_->has_data && !E_->eval_path[0]) {
        if (engine_resplit(E_, old.eval_frac, err)) {  // all or nothing: the other keys go back too
            E_->cfg = old;
            E_->model.cfg = old_model;
            return 1;
        }
        fprintf(OUT, "%s\n", E_->data.desc);
        sh_note_heldout_trained(sh);
    }
    return 0;
}

// A held-out split that grew into bytes this model trained on is no longer held out (SPEC §5:
// never read by training): said after :set eval_frac (QA, session 29) and :data (a file the model
// trained on with eval=, opened without it: QA, session 34)
void sh_note_heldout_trained(Shell *sh) {
    if (E_->live && E_->has_data && !E_->eval_path[0] && E_->data.n_train < E_->trained_upto)
        fprintf(OUT, "note: the held-out split now starts at byte %lld, inside the first %lld bytes of this corpus, which this "
                "model's steps drew training windows from: evals from here score bytes it may have trained on (their BPB is "
                "not held-out)\n", (long long)E_->data.n_train, (long long)E_->trained_upto);
}

// When a live key's new value is first used: most from the next step; these by another command
// (":help eval_bytes" said "from the next step", which no step reads: QA, session 33)
static const char *live_when(const char *name) {
    static const struct { const char *key, *when; } w[] = {
        {"eval_bytes", "at the next eval and :anchors (the eval window)"},
        {"anchor_fit_bytes", "at the next :anchors"},
        {"eval_frac", "at once (the open corpus is split again) or at the next :data"},
        {"eval_every", "from the next :train"},
        {"ckpt_every", "from the next :train"},
        {"log_every", "from the next :train"},
    };
    for (unsigned i = 0; i < sizeof w / sizeof w[0]; i++)
        if (!strcmp(w[i].key, name)) return w[i].when;
    return "from the next step";
}

// :help KEY: 1 when NAME is a config key (and its help was printed), 0 otherwise.
int help_key(Shell *sh, const char *name) {
    const ConfigKey *k = config_find_key(name);
    if (!k) return 0;
    Config def;
    config_defaults(&def);
    char range[160], now[128], dflt[128];
    config_key_range(k, range, sizeof range);
    config_get(&E_->cfg, k, now, sizeof now);
    config_get(&def, k, dflt, sizeof dflt);
    fprintf(OUT, "%s: %s\n  values: %s; default %s; now %s\n", k->name, k->help, range, dflt, now);
    if (!strcmp(k->name, "engram_ram"))  // a placement: a checkpoint loads into either
        fprintf(OUT, "  placement key: :set it before :init; a live model's tables move with :save F, :init engram_ram=VALUE, :load F\n");
    else if (k->arch)
        fprintf(OUT, "  architecture key: :set it before :init; a live model is rebuilt with it by :init %s=VALUE\n", k->name);
    else
        fprintf(OUT, "  live: :set %s=VALUE on a live model takes effect %s (kept in the session's transcript and "
                "checkpoints)\n", k->name, live_when(k->name));
    return 1;
}
