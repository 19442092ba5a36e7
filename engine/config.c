// config.c — the key table, defaults, parsing and validation of the configuration.
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(Config, f)
#define BIG 9.0e15

const ConfigKey dm_config_keys[] = {
    {"d", KEY_INT, OFF(d), 1, 65536, NULL, 1, "model width"},
    {"H", KEY_INT, OFF(H), 1, 1024, NULL, 1, "KDA heads (d must be divisible by H)"},
    {"L", KEY_INT, OFF(L), 1, 64, NULL, 1, "loop depth: iterations of the shared block"},
    {"E", KEY_INT, OFF(E), 1, 64, NULL, 1, "experts (<= 64: the CUDA MoE's per-expert tables)"},
    {"k", KEY_INT, OFF(k), 1, 1024, NULL, 1, "experts per token (<= E)"},
    {"r", KEY_INT, OFF(r), 1, 65536, NULL, 1, "expert rank (<= min(d, f))"},
    {"f", KEY_INT, OFF(f), 1, 1 << 20, NULL, 1, "expert hidden width"},
    {"engram_rows", KEY_I64, OFF(engram_rows), 1, 2147483647, NULL, 1, "rows per Engram order table"},
    {"engram_dim", KEY_INT, OFF(engram_dim), 1, 4096, NULL, 1, "width of an Engram row"},
    {"engram_orders", KEY_ORDERS, OFF(engram_orders), 1, 16, NULL, 1, "n-gram orders, comma-separated (each 1..16)"},
    {"seq", KEY_INT, OFF(seq), 1, 1 << 20, NULL, 1, "sequence length T in bytes"},
    {"kda_chunk", KEY_INT, OFF(kda_chunk), 1, 1024, NULL, 0, "chunk length of the chunked KDA on the CPU (the CUDA kernels run chunks of 16)"},
    {"loss", KEY_ENUM, OFF(loss_final), 0, 1, "rec|final", 0, "rec: mean CE over iterations; final: last only"},
    {"lam_max", KEY_REAL, OFF(lam_max), 0, 1, NULL, 0, "cap of the memory gate"},
    {"g_min", KEY_REAL, OFF(g_min), -8, 0, NULL, 1, "KDA log-decay floor (>= -8: the chunked KDA's fp32 accuracy limit)"},
    {"engram_ram", KEY_BOOL, OFF(engram_ram), 0, 1, "off|on", 1, "Engram tables (and their gradient and Adam state) in host memory, rows staged per step"},
    {"batch", KEY_INT, OFF(batch), 1, 1 << 16, NULL, 0, "sequences per step"},
    {"moe_aux", KEY_REAL, OFF(moe_aux), 0, 100, NULL, 0, "weight of the load-balance loss"},
    {"retract_every", KEY_INT, OFF(retract_every), 1, 1 << 30, NULL, 0, "retract U, V every N steps"},
    {"retract_iters", KEY_INT, OFF(retract_iters), 0, 100, NULL, 0, "Newton-Schulz iterations of the retraction"},
    {"opt", KEY_ENUM, OFF(opt_adamw), 0, 1, "mix|adamw", 0, "mix: Muon + AdamW + Adam tables; adamw: AdamW everywhere"},
    {"muon_colrow", KEY_BOOL, OFF(muon_colrow), 0, 1, "off|on", 0, "Muon+: column then row normalisation"},
    {"lr", KEY_REAL, OFF(lr), 0, 10, NULL, 0, "AdamW and table learning rate"},
    {"lr_muon", KEY_REAL, OFF(lr_muon), 0, 10, NULL, 0, "Muon learning rate"},
    {"beta1", KEY_REAL, OFF(beta1), 0, 0.999999, NULL, 0, "Adam beta1"},
    {"beta2", KEY_REAL, OFF(beta2), 0, 0.999999, NULL, 0, "Adam beta2"},
    {"eps", KEY_REAL, OFF(eps), 1e-30, 1, NULL, 0, "Adam epsilon (> 0: a zero gradient would divide 0 by 0)"},
    {"wd", KEY_REAL, OFF(wd), 0, 10, NULL, 0, "decoupled weight decay on 2-D matrices"},
    {"muon_momentum", KEY_REAL, OFF(muon_momentum), 0, 0.999999, NULL, 0, "Muon momentum (Nesterov)"},
    {"warmup", KEY_INT, OFF(warmup), 0, 1 << 30, NULL, 0, "linear warmup steps"},
    {"lr_schedule", KEY_ENUM, OFF(lr_cosine), 0, 1, "constant|cosine", 0, "after warmup"},
    {"lr_min_frac", KEY_REAL, OFF(lr_min_frac), 0, 1, NULL, 0, "cosine floor as a fraction of lr"},
    {"steps", KEY_I64, OFF(steps), 0, BIG, NULL, 0, "schedule horizon (0: set by the first :train; until then the steps after the warmup run at the full lr); a new one on a trained model moves the next step's lr (the cosine is recomputed over it, not continued)"},
    {"clip", KEY_REAL, OFF(clip), 0, 1e9, NULL, 0, "global gradient-norm clip (0 = off)"},
    {"nan_limit", KEY_INT, OFF(nan_limit), 1, 1 << 30, NULL, 0, "consecutive skipped steps that stop a run"},
    {"seed", KEY_U64, OFF(seed), 0, 1.8e19, NULL, 0, "RNG seed (init and data windows)"},
    {"eval_frac", KEY_REAL, OFF(eval_frac), 0.0001, 0.9, NULL, 0, "held-out fraction when no eval= file"},
    {"eval_bytes", KEY_I64, OFF(eval_bytes), 2, BIG, NULL, 0, "bytes of the fixed eval window"},
    {"anchor_fit_bytes", KEY_I64, OFF(anchor_fit_bytes), 1, BIG, NULL, 0, "training bytes the anchors fit on"},
    {"eval_every", KEY_INT, OFF(eval_every), 0, 1 << 30, NULL, 0, "eval period of :train (0 = off)"},
    {"ckpt_every", KEY_INT, OFF(ckpt_every), 0, 1 << 30, NULL, 0, "checkpoint period of :train (0 = off)"},
    {"log_every", KEY_INT, OFF(log_every), 1, 1 << 30, NULL, 0, "log period of :train"},
    {"precision", KEY_ENUM, OFF(precision_fp32), 0, 1, "bf16|fp32", 0, "CUDA matrix-product precision"},
    {"cuda_graph", KEY_BOOL, OFF(cuda_graph), 0, 1, "off|on", 0, "replay the training step as one CUDA graph after warm-up (off: launch every op, for debugging)"},
};
const int dm_n_config_keys = sizeof(dm_config_keys) / sizeof(dm_config_keys[0]);

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    c->d = 128; c->H = 2; c->L = 2; c->E = 2; c->k = 1; c->r = 32; c->f = 512;
    c->engram_rows = 4096; c->engram_dim = 16;
    c->engram_orders[0] = 2; c->engram_orders[1] = 3; c->engram_orders[2] = 4; c->n_orders = 3;
    c->seq = 128; c->kda_chunk = 64; c->loss_final = 0; c->lam_max = 1.0; c->g_min = -5.0;
    c->batch = 8; c->moe_aux = 0.01; c->retract_every = 1; c->retract_iters = 3;
    c->lr = 3e-3; c->lr_muon = 0.02; c->beta1 = 0.9; c->beta2 = 0.95; c->eps = 1e-8; c->wd = 0.1;
    c->muon_momentum = 0.95; c->warmup = 100; c->lr_cosine = 1; c->lr_min_frac = 0.1; c->steps = 0;
    c->clip = 1.0; c->nan_limit = 20; c->seed = 1337; c->eval_frac = 0.1; c->eval_bytes = 262144;
    c->anchor_fit_bytes = 8 << 20; c->eval_every = 500; c->ckpt_every = 0; c->log_every = 1;
    c->cuda_graph = 1;
}

const ConfigKey *config_find_key(const char *name) {
    for (int i = 0; i < dm_n_config_keys; i++)
        if (strcmp(dm_config_keys[i].name, name) == 0) return &dm_config_keys[i];
    return NULL;
}

static int choice_index(const char *choices, const char *v) {
    int idx = 0;
    const char *p = choices;
    size_t lv = strlen(v);
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == lv && strncmp(p, v, len) == 0) return idx;
        if (!bar) break;
        p = bar + 1;
        idx++;
    }
    return -1;
}

void config_key_range(const ConfigKey *k, char *buf, size_t n) {
    if (k->type == KEY_ENUM || k->type == KEY_BOOL) snprintf(buf, n, "one of %s", k->choices);
    else if (k->type == KEY_ORDERS) snprintf(buf, n, "1..%d distinct orders in %g..%g, e.g. 2,3,4", DM_MAX_ORDERS, k->min, k->max);
    else if (k->type == KEY_REAL) snprintf(buf, n, "a number in [%g, %g]", k->min, k->max);
    else if (k->type == KEY_U64) snprintf(buf, n, "an integer in [0, 18446744073709551615] (decimal digits)");
    else snprintf(buf, n, "an integer in [%.0f, %.0f] (decimal digits)", k->min, k->max);
}

int config_parse_digits(const char *s, unsigned long long max, unsigned long long *v) {
    // strtod/strtoull also take blanks, a sign, hex, exponents and fractions (" 7", "-0", "+5",
    // "0x10", "1e3", "7.0"): each read as an integer the user did not type, so only digits pass
    if (!*s || s[strspn(s, "0123456789")] != '\0') return 1;
    errno = 0;
    unsigned long long u = strtoull(s, NULL, 10);
    if (errno || u > max) return 1;
    *v = u;
    return 0;
}

int config_set(Config *c, const char *key, const char *value, dm_err *err) {
    const ConfigKey *k = config_find_key(key);
    if (!k) return dm_fail(err, "unknown key '%s' (see :show config for the keys)", key);
    char range[128];
    config_key_range(k, range, sizeof range);
    char *base = (char *)c + k->offset;
    char *end = NULL;
    errno = 0;
    switch (k->type) {
    case KEY_U64: {  // every 64-bit value, in decimal digits only (a double would round it)
        unsigned long long u;
        if (config_parse_digits(value, UINT64_MAX, &u))
            return dm_fail(err, "bad value '%s' for %s: expected %s", value, key, range);
        *(uint64_t *)base = (uint64_t)u;
        return 0;
    }
    case KEY_INT: case KEY_I64: {  // every integer key has min >= 0: no sign to read
        unsigned long long u;
        if (config_parse_digits(value, (unsigned long long)k->max, &u) || (double)u < k->min)
            return dm_fail(err, "bad value '%s' for %s: expected %s", value, key, range);
        if (k->type == KEY_INT) *(int *)base = (int)u;
        else *(int64_t *)base = (int64_t)u;
        return 0;
    }
    case KEY_REAL: {
        // a plain decimal number: no blanks, hex ("0x1p-3") or inf/nan words, and no minus sign
        // on a key that cannot be negative ("-0" for lr would show as lr=-0)
        double v = strtod(value, &end);
        int chars_ok = *value && value[strspn(value, "0123456789.eE+-")] == '\0' && (k->min < 0 || value[0] != '-');
        if (!chars_ok || *end || errno || !isfinite(v) || v < k->min || v > k->max)
            return dm_fail(err, "bad value '%s' for %s: expected %s", value, key, range);
        *(double *)base = v == 0 ? 0.0 : v;  // -0 (g_min=-0) is zero: stored and shown as 0
        return 0;
    }
    case KEY_BOOL: case KEY_ENUM: {
        // a switch is off or on, as everywhere else (:arm, :plot log=, :check floor=): 1 and
        // true were taken too, while the error for "yes" named off|on alone
        int i = choice_index(k->choices, value);
        if (i < 0) return dm_fail(err, "bad value '%s' for %s: expected %s", value, key, range);
        *(int *)base = i;
        return 0;
    }
    case KEY_ORDERS: {
        int tmp[DM_MAX_ORDERS], n = 0;
        const char *p = value;
        while (*p) {
            // digits only, as the integer keys (strtol would take " 2", "+2")
            long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
            if (v < 0 || v < k->min || v > k->max || n == DM_MAX_ORDERS || (*end && (*end != ',' || !end[1])))
                return dm_fail(err, "bad value '%s' for %s: expected %s", value, key, range);
            for (int j = 0; j < n; j++)
                if (tmp[j] == v) return dm_fail(err, "bad value '%s' for %s: order %ld repeated", value, key, v);
            tmp[n++] = (int)v;
            p = *end ? end + 1 : end;
        }
        if (n == 0) return dm_fail(err, "bad value '%s' for %s: expected %s", value, key, range);
        memcpy(c->engram_orders, tmp, sizeof(int) * n);
        c->n_orders = n;
        return 0;
    }
    }
    return dm_fail(err, "internal: key type");
}

// Decoupled decay scales a matrix by 1 - lr*wd each step. Above lr*wd = 2 that factor's size
// passes 1: the weights flip sign and grow every step whatever the gradient says (lr=10 wd=10
// multiplied them by -99 a step: QA, session 32): refused. Between 1 and 2 they flip sign and
// shrink, and such a run has been seen to train (QA: lr_muon=0.2 wd=6): :set says so on a note
// (config_decay_note). Checked where a user sets values (:set, :preset, :init's words, :stress's
// multiplier), not on a checkpoint's own config: a file written before the rule still loads.
static double decay_product(const Config *c, double mult, const char **which) {
    double a = c->lr * mult * c->wd, b = c->opt_adamw ? 0 : c->lr_muon * mult * c->wd;
    *which = b > a ? "lr_muon" : "lr";
    return b > a ? b : a;
}
int config_decay_key(const char *k) { return !strcmp(k, "lr") || !strcmp(k, "lr_muon") || !strcmp(k, "wd") || !strcmp(k, "opt"); }
int config_validate_decay(const Config *c, double mult, dm_err *err) {
    const char *w;
    double p = decay_product(c, mult, &w);
    if (mult != 1 && p > 2) {  // :stress: the multiplier is what the user chose here
        const char *w1;
        double p1 = decay_product(c, 1, &w1);
        if (p1 <= 2)
            return dm_fail(err, "lr_mult=%g makes %s x wd = %g x %g = %g > 2: the decoupled decay would multiply the weights by %g "
                           "each step, flipping their sign and growing them whatever the gradient; lr_mult=%g at most (or a lower "
                           "wd)", mult, w, p / c->wd, c->wd, p, 1 - p, p1 > 0 ? 2 / p1 : 0.0);
        return 0;  // (already past it at lr_mult=1: a loaded older file, whose config is its own)
    }
    if (p > 2)
        return dm_fail(err, "%s x wd = %g x %g = %g > 2: the decoupled decay would multiply the weights by %g each step (1 - %s x "
                       "wd), flipping their sign and growing them whatever the gradient; lower %s or wd", w,
                       p / c->wd, c->wd, p, 1 - p, w, w);
    return 0;
}
int config_decay_note(const Config *c, char *buf, size_t n) {
    // each rate past 1 is named: lr's decays the AdamW tensors, lr_muon's the Muon matrices (the
    // larger one alone named lr_muon after a :set of lr had put lr's past 1 too: QA, session 41)
    double a = c->lr * c->wd, b = c->opt_adamw ? 0 : c->lr_muon * c->wd;
    if (a > 1 && b > 1)
        snprintf(buf, n, "lr x wd = %g and lr_muon x wd = %g > 1: the decoupled decay multiplies the AdamW tensors by %g and the Muon "
                 "matrices by %g each step (1 - rate x wd): their sign flips every step", a, b, 1 - a, 1 - b);
    else if (a > 1 || b > 1)
        snprintf(buf, n, "%s x wd = %g > 1: the decoupled decay multiplies the weights by %g each step (1 - %s x wd): their sign "
                 "flips every step", a > 1 ? "lr" : "lr_muon", a > 1 ? a : b, 1 - (a > 1 ? a : b), a > 1 ? "lr" : "lr_muon");
    else
        return 0;
    return 1;
}

int config_validate(const Config *c, dm_err *err) {
    if (c->d % c->H) return dm_fail(err, "d=%d is not divisible by H=%d: choose H dividing d", c->d, c->H);
    if (c->k > c->E) return dm_fail(err, "k=%d > E=%d: a token cannot pick more experts than exist", c->k, c->E);
    int mn = c->d < c->f ? c->d : c->f;
    if (c->r > mn) return dm_fail(err, "r=%d > min(d, f)=%d: the expert rank must be at most min(d, f)", c->r, mn);
    if (c->warmup < 0) return dm_fail(err, "warmup must be >= 0");
    if ((c->engram_rows >> 31) != 0) return dm_fail(err, "engram_rows=%lld exceeds 2^31-1 (row indices are int32)", (long long)c->engram_rows);
    // the engine counts a step's tokens in int (N = batch x seq): refused here, before any
    // allocation could succeed on a machine large enough and the count wrap
    if ((long long)c->batch * c->seq > 2147483647LL)
        return dm_fail(err, "batch x seq = %d x %d = %lld tokens a step exceeds 2^31-1 (token counts are int32): lower batch or seq",
                       c->batch, c->seq, (long long)c->batch * c->seq);
    return 0;
}

int config_validate_eval(const Config *c, dm_err *err) {
    // SPEC §5: nseq = min(eval_bytes, n_heldout - 1) / seq; below seq the window holds no
    // sequence and every :eval, eval_every and :anchors would fail (or score nothing)
    if (c->eval_bytes < c->seq)
        return dm_fail(err, "eval_bytes=%lld is shorter than one sequence (seq=%d): the eval window holds none (:set eval_bytes=%d or more)",
                       (long long)c->eval_bytes, c->seq, c->seq);
    return 0;
}

void config_get(const Config *c, const ConfigKey *k, char *buf, size_t n) {
    const char *base = (const char *)c + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(buf, n, "%d", *(const int *)base); break;
    case KEY_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)base); break;
    case KEY_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)base); break;
    case KEY_REAL: {  // the shortest text that reads back as the same double (0.003, not 0.0030000000000000001)
        double v = *(const double *)base;
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, v);
            if (strtod(buf, NULL) == v) break;
        }
        break;
    }
    case KEY_BOOL: case KEY_ENUM: {
        int idx = *(const int *)base;
        const char *p = k->choices;
        for (int i = 0; i < idx && p; i++) { p = strchr(p, '|'); if (p) p++; }
        const char *bar = p ? strchr(p, '|') : NULL;
        size_t len = p ? (bar ? (size_t)(bar - p) : strlen(p)) : 0;
        snprintf(buf, n, "%.*s", (int)len, p ? p : "");
        break;
    }
    case KEY_ORDERS: {
        size_t used = 0;
        buf[0] = 0;
        for (int i = 0; i < c->n_orders && used < n; i++)
            used += snprintf(buf + used, n - used, i ? ",%d" : "%d", c->engram_orders[i]);
        break;
    }
    }
}

int config_apply_text(Config *c, const char *text, const char *origin, dm_err *err) {
    int line = 0;
    const char *p = text;
    while (*p) {
        line++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char buf[1024];
        if (len >= sizeof buf) return dm_fail(err, "%s:%d: line too long", origin, line);
        memcpy(buf, p, len);
        buf[len] = 0;
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *save = NULL;
        for (char *w = strtok_r(buf, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
            if (strcmp(w, ":set") == 0) continue;
            char *eq = strchr(w, '=');
            if (!eq) return dm_fail(err, "%s:%d: expected key=value, got '%s'", origin, line, w);
            *eq = 0;
            dm_err e2 = {0};
            if (config_set(c, w, eq + 1, &e2)) return dm_fail(err, "%s:%d: %s", origin, line, e2.msg);
        }
        p = eol ? eol + 1 : p + len;
    }
    return config_validate(c, err);
}

// generated from configs/*.dm by the Makefile (build/presets_gen.c)
extern const char *dm_preset_texts[];
extern const char *dm_preset_names[];

const char *config_preset_text(const char *name) {
    for (int i = 0; dm_preset_names[i]; i++)
        if (strcmp(dm_preset_names[i], name) == 0) return dm_preset_texts[i];
    return NULL;
}

int config_preset(Config *c, const char *name, dm_err *err) {
    for (int i = 0; dm_preset_names[i]; i++)
        if (strcmp(dm_preset_names[i], name) == 0) {
            Config t;
            config_defaults(&t);
            char origin[64];
            snprintf(origin, sizeof origin, "configs/%s.dm", name);
            if (config_apply_text(&t, dm_preset_texts[i], origin, err)) return 1;
            *c = t;
            return 0;
        }
    char list[256] = "";
    for (int i = 0; dm_preset_names[i]; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, dm_preset_names[i], sizeof list - strlen(list) - 1);
    }
    return dm_fail(err, "unknown preset '%s' (presets: %s)", name, list);
}

// the keys of one kind (architecture or live) whose values differ, as "name (a vs b)" or "name a -> b"
static int keys_diff(const Config *a, const Config *b, int arch, const char *fmt, char *buf, size_t n) {
    int count = 0;
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < dm_n_config_keys; i++) {
        const ConfigKey *k = &dm_config_keys[i];
        if (k->arch != arch) continue;
        char va[128], vb[128];
        config_get(a, k, va, sizeof va);
        config_get(b, k, vb, sizeof vb);
        if (strcmp(va, vb) != 0) {
            if (used < n) used += snprintf(buf + used, n - used, fmt, count ? ", " : "", k->name, va, vb);
            count++;
        }
    }
    return count;
}
int config_set_diff(const Config *a, const Config *b, char *buf, size_t n) {
    int count = 0;
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < dm_n_config_keys; i++) {
        const ConfigKey *k = &dm_config_keys[i];
        char va[128], vb[128];
        config_get(a, k, va, sizeof va);
        config_get(b, k, vb, sizeof vb);
        if (strcmp(va, vb) != 0) {
            if (used < n) used += snprintf(buf + used, n - used, "%s%s %s -> %s", count ? ", " : "", k->name, va, vb);
            count++;
        }
    }
    return count;
}
int config_arch_diff(const Config *a, const Config *b, char *buf, size_t n) {
    return keys_diff(a, b, 1, "%s%s (%s vs %s)", buf, n);
}
int config_live_diff(const Config *a, const Config *b, char *buf, size_t n) {
    return keys_diff(a, b, 0, "%s%s %s -> %s", buf, n);
}
