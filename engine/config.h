// config.h — every configuration key of SPEC (§1 model, §4 optimizer, §5 data), its default,
// its allowed range, and whether it is an architecture key (fixed once a model exists) or a live
// one (may change on a running model).
#pragma once
#include <stdint.h>
#include "err.h"

#define DM_MAX_ORDERS 8

typedef struct {
    // model shape (architecture keys)
    int d, H, L, E, k, r, f;
    int64_t engram_rows;         // rows per order table
    int engram_dim;              // width of one table row
    int engram_orders[DM_MAX_ORDERS];
    int n_orders;
    int seq;                     // T
    int kda_chunk;               // chunk length of the chunked KDA
    int loss_final;              // loss = rec (0) | final (1)
    double lam_max;              // cap of the memory gate
    double g_min;                // KDA log-decay floor (-5)
    int engram_ram;              // host-RAM tables (model.h: rows staged per step)
    // training (live keys)
    int batch;
    double moe_aux;
    int retract_every, retract_iters;
    int opt_adamw;               // opt = mix (0) | adamw (1)
    int muon_colrow;
    double lr, lr_muon, beta1, beta2, eps, wd, muon_momentum;
    int warmup;
    int lr_cosine;               // lr_schedule = cosine (1) | constant (0)
    double lr_min_frac;
    int64_t steps;               // schedule horizon (0 = set by the first :train)
    double clip;
    int nan_limit;
    uint64_t seed;
    double eval_frac;
    int64_t eval_bytes, anchor_fit_bytes;
    int eval_every, ckpt_every, log_every;
    int precision_fp32;          // CUDA: precision = bf16 (0) | fp32 (1)
    int cuda_graph;              // replay the training step as one captured graph (where the backend has graphs)
} Config;

typedef enum { KEY_INT, KEY_I64, KEY_U64, KEY_REAL, KEY_BOOL, KEY_ENUM, KEY_ORDERS } KeyType;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;
    double min, max;             // inclusive range for numeric keys
    const char *choices;         // KEY_ENUM: "a|b" (value = index), KEY_BOOL: "off|on"
    int arch;                    // 1 = architecture key: refused on a live model
    const char *help;
} ConfigKey;

extern const ConfigKey dm_config_keys[];
extern const int dm_n_config_keys;

void config_defaults(Config *c);                 // = preset nano
const ConfigKey *config_find_key(const char *name);
// lr x wd (and lr_muon x wd under Muon), each rate times mult, at most 2 (config.c says why).
int config_validate_decay(const Config *c, double mult, dm_err *err);
// 1 for the keys that rule reads (lr, lr_muon, wd, opt): it is checked when one of them is set.
int config_decay_key(const char *k);
// 1 with the words of a note in buf when that product is above 1 (a decay that flips the sign).
int config_decay_note(const Config *c, char *buf, size_t n);
// The values a key takes, as its errors say them ("a number in [0, 10]", "one of off|on").
void config_key_range(const ConfigKey *k, char *buf, size_t n);
// key=value; 0 on success, else fills err (names the key and the allowed range)
int config_set(Config *c, const char *key, const char *value, dm_err *err);
// S as a plain decimal integer (digits only: no blank, sign, hex, exponent or fraction) that is
// at most max; 0 on success, 1 otherwise (the callers word the error)
int config_parse_digits(const char *s, unsigned long long max, unsigned long long *v);
// whole-config checks that involve several keys (d % H, k <= E, r <= min(d, f), ...)
int config_validate(const Config *c, dm_err *err);
// the eval window holds at least one sequence (eval_bytes >= seq). Never a refusal of a setting:
// :set, :preset, :run, :init and :load take a config without it (the keys come one at a time, in
// any order, and the weights do not depend on it) and the REPL says so in a note; what needs the
// window (:eval, :anchors, a :train that evals) refuses (engine_eval_window)
int config_validate_eval(const Config *c, dm_err *err);
// "value" of one key as text (for :show config and config.dm)
void config_get(const Config *c, const ConfigKey *k, char *buf, size_t n);
// apply "key=value key=value" lines (optionally starting with ":set"; '#' comments) from text
int config_apply_text(Config *c, const char *text, const char *origin, dm_err *err);
// presets: nano, mini, small, base, large (embedded copies of configs/*.dm)
int config_preset(Config *c, const char *name, dm_err *err);
// The text of preset NAME (configs/NAME.dm: `:set key=value` lines), NULL when there is none.
const char *config_preset_text(const char *name);
extern const char *dm_preset_names[];
// architecture keys that differ between two configs, comma-separated into buf; returns count
int config_arch_diff(const Config *a, const Config *b, char *buf, size_t n);
// the same for the live keys, as "name a -> b" (what a :load replaced)
int config_live_diff(const Config *a, const Config *b, char *buf, size_t n);
// Every key whose value b changes, as "name a -> b" (a :load with no model live: what the
// checkpoint's config replaced; a key set to its default value counts too, so no filter by
// default)
int config_set_diff(const Config *a, const Config *b, char *buf, size_t n);
