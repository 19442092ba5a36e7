// commands.c — the command table and its handlers. Handlers are thin: parse words, call the
// engine, print. :help and docs/commands.md come from this table.
#include <math.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../engine/ckpt.h"
#include "../engine/engine.h"
#include "../engine/parity.h"
#include "../engine/snapshot.h"
#include "../sessions/session.h"
#include "panel.h"
#include "shell.h"

int cmd_probe(Shell *sh, Words *w, dm_err *err);
int cmd_gen(Shell *sh, Words *w, dm_err *err);
int cmd_device(Shell *sh, Words *w, dm_err *err);
int cmd_sessions(Shell *sh, Words *w, dm_err *err);
int cmd_plot(Shell *sh, Words *w, dm_err *err);
int cmd_check(Shell *sh, Words *w, dm_err *err);   // cmd_verify.c
int cmd_stress(Shell *sh, Words *w, dm_err *err);
int cmd_bench(Shell *sh, Words *w, dm_err *err);
int cmd_init(Shell *sh, Words *w, dm_err *err);    // cmd_state.c
int cmd_save(Shell *sh, Words *w, dm_err *err);
int cmd_load(Shell *sh, Words *w, dm_err *err);
int cmd_session(Shell *sh, Words *w, dm_err *err);
int cmd_preset(Shell *sh, Words *w, dm_err *err);  // cmd_config.c
int cmd_set(Shell *sh, Words *w, dm_err *err);
int help_key(Shell *sh, const char *name);
char **complete_plot(Shell *sh, int argi, const char *prefix);

#define E_ (sh->eng)
#define OUT (sh->out)


// The end of a step line timed on the emulated device (tests/cuemu): its ms and tok/s are the
// CPU running the CUDA code, and nothing else on the line says so (:bench and :show device do).
// Last on the line: the fields before it stay where every reader of the line finds them.
// Before it, the arms that were off for the step ("[off: kda]"): an ablation's lines are told
// apart from the run's. (One static buffer: one call per printed line.)
static const char *emulated_tag(const MetricRow *r) {
    static char buf[160];
    char arms[64] = "";
    if (r->kind == 0 && r->arms_off) arms_mask_names(r->arms_off, arms, sizeof arms);
    snprintf(buf, sizeof buf, "%s%s%s%s", arms[0] ? " [off: " : "", arms, arms[0] ? "]" : "",
             r->kind == 0 && r->emulated ? " [cuemu: ms and tok/s emulated on the CPU, not a GPU's]" : "");
    return buf;
}

// An eval's tag: the forward-changing arms that were off when it scored ("[off: kda]"), so an
// ablation's BPB is never read as the model's (QA, session 30: the headline and :show metrics
// said nothing; only the ran: line showed it)
static const char *eval_tag(uint16_t arms_off) {
    static char buf[80];
    arms_mask_tag(arms_off & ARMS_FORWARD_MASK, buf, sizeof buf);
    return buf;
}

// A train row's words as every step line shows them (ms and tok/s given: an interval's or the row's)
static const char *step_words(char *buf, size_t n, const MetricRow *r, double ms, double tok_s) {
    char lb[32], gb[32];
    snprintf(buf, n, "step %lld loss %s lr %.3e gnorm %s ms %.1f tok/s %.0f skipped %d", (long long)r->step, sh_num(lb, r->loss, 4),
             r->lr, sh_num(gb, r->gnorm, 3), ms, tok_s, r->skipped);
    return buf;
}

// :train's log line: step r's loss, lr and gnorm; ms and tok/s over the n steps since the line
// before (ms_sum their times, tok_sum their tokens); eta: its " eta ..." words, NULL when none (a
// run that stopped has none). With the live panel up the line goes to the panel's scrollback
// only (printed when it closes, in order with the evals and checkpoints).
static void train_line(Shell *sh, Panel *panel, const MetricRow *r, double ms_sum, double tok_sum, long long n, const char *eta) {
    double ms = ms_sum / (double)n, tok_s = ms_sum > 0 ? tok_sum / (ms_sum / 1e3) : r->tok_s;
    char et[160] = "", line[500];
    if (eta) snprintf(et, sizeof et, " eta %s", eta);
    char w[300];
    snprintf(line, sizeof line, "%s%s%s", step_words(w, sizeof w, r, ms, tok_s), et, emulated_tag(r));
    if (panel) {
        panel_keep(panel, line);
        return;
    }
    fprintf(OUT, "%s\n", line);
    fflush(OUT);
}

static void print_step(Shell *sh, const MetricRow *r) {
    if (r->kind < 0) return;  // the step was refused before it ran (engine_step): nothing to show
    char w[300];
    fprintf(OUT, "%s%s\n", step_words(w, sizeof w, r, r->ms, r->tok_s), emulated_tag(r));
}

// what the engine has to say about how steps run (e.g. the step graph could not be captured)
static void print_notice(Shell *sh) {
    const char *n = engine_notice(E_);
    if (n) fprintf(OUT, "note: %s\n", n);
}

static void print_eval(Shell *sh, const EvalResult *r) {
    Engine *e = E_;
    char counters[700];
    engine_counters(e, counters, sizeof counters);
    for (int d = r->depth_lo; d <= r->depth_hi; d++) {
        double b = r->bpb[d - 1];
        if (isnan(b)) b = fabs(b);  // a NaN prints as "nan", never "-nan" (its sign means nothing)
        char bb[32];
        fprintf(OUT, "eval step %lld depth %d bpb %s over %lld B (%lld x %lld)%s", (long long)e->step, d, sh_num(bb, b, 4),
                (long long)r->window, (long long)r->nseq, (long long)r->T, eval_tag(arms_off_mask(&e->model.arms)));
        const Anchors *an = engine_anchors_for(e, r->window, r->eval_set);
        if (an)
            fprintf(OUT, " | unigram %.3f %s, 5-gram %.3f %s", an->unigram_bpb, b < an->unigram_bpb ? "beaten" : "NOT beaten",
                    an->kn5_bpb, b < an->kn5_bpb ? "beaten" : "not beaten");
        else if (e->has_anchors && e->anchors.window_bytes == r->window && e->anchors.eval_set == r->eval_set)
            fprintf(OUT, " | anchors fit on %lld training bytes, not anchor_fit_bytes=%lld: :anchors refits them",
                    (long long)e->anchors.fit_bytes, (long long)e->cfg.anchor_fit_bytes);
        fprintf(OUT, "\n");
    }
    // a short last batch is filled with copies (same shapes): they ran, and are said apart
    // (with the engram arm off no copy read a row: the copies are said without a row count)
    char pad[128] = "";
    if (r->pad_seqs && r->engram_pad_rows)
        snprintf(pad, sizeof pad, " (+%lld for %lld padding cop%s of the last batch, not scored)", (long long)r->engram_pad_rows,
                 (long long)r->pad_seqs, r->pad_seqs == 1 ? "y" : "ies");
    else if (r->pad_seqs)
        snprintf(pad, sizeof pad, " (the forwards include %lld padding cop%s of the last batch, not scored)", (long long)r->pad_seqs,
                 r->pad_seqs == 1 ? "y" : "ies");
    fprintf(OUT, "  ran%s: kda=%lld moe=%lld forward iterations, engram=%lld table rows%s | %s\n",
            r->depth_hi > r->depth_lo ? " (one forward for every depth above)" : "", (long long)r->arm_fwd[ARM_KDA],
            (long long)r->arm_fwd[ARM_MOE], (long long)r->engram_rows, pad, counters);
}

// ---- handlers -----------------------------------------------------------------------------

static int cmd_help(Shell *sh, Words *w, dm_err *err) {
    if (w->argc > 2) return dm_fail(err, "usage: :help [cmd|key] (one at a time)");
    if (w->argc > 1) {
        const char *name = w->argv[1];
        if (help_key(sh, name)) return 0;  // a config key (`:help lr`), before the command prefixes
        // an arm's name: what it is and what switching it off does (`:help rezero` was "unknown
        // command", and what "off" means was in the SPEC alone: QA, session 35)
        static const char *const arm_help[ARM_COUNT] = {
            "KDA linear attention, the attention term c.w_attn*a of the block's body. Off: the term is dropped (the other gates are "
            "not renormalised); the kda.* tensors and row 0 of ctrl.w/ctrl.b are not stepped.",
            "Engram hashed n-gram memory, the memory term min(c.w_mem, lam_max)*e. Off: the table lookup and the term are skipped; "
            "mem.*, engram.tables and row 1 of ctrl.w/ctrl.b are not stepped.",
            "the mixture of low-rank spectral experts, the FFN term c.w_ffn*g. Off: the term is 0 and no load-balance loss is "
            "added; the expert factors, s1/s2, ctrl.router and row 2 of ctrl.w/ctrl.b are not stepped, nothing is retracted.",
            "the ReZero scale: h = h + alpha*body, alpha learned from 0. Off: alpha is fixed at 1 (not stepped): the whole body "
            "each iteration, far from a trained alpha, so an eval of a model trained with it on is much worse.",
            "the polar retraction of the experts' U, V onto orthonormal frames every retract_every steps (retract_iters "
            "Newton-Schulz iterations). Off: skipped; :show arms counts the retractions run.",
            "the auxiliary losses: the MoE load-balance loss moe_aux * E * sum_e f_e P_e added to the objective (never to the "
            "logged loss, which is the cross-entropy). Off: not added.",
        };
        int arm = arms_find(name[0] == ':' ? name + 1 : name);
        if (arm >= 0) {
            fprintf(OUT, "arm %s (:arm %s on|off; :help arm for the switch and its counters)\n  %s\n", dm_arm_names[arm],
                    dm_arm_names[arm], arm_help[arm]);
            return 0;
        }
        char buf[64];
        if (name[0] != ':') { snprintf(buf, sizeof buf, ":%s", name); name = buf; }
        const Command *c = sh_resolve(name, err);
        if (!c) {  // neither: say keys are asked for the same way
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return dm_fail(err, "%s; nor is '%s' a config key (:show config lists them)", msg, w->argv[1]);
        }
        fprintf(OUT, "%s\n  %s\n", c->usage, c->help);
        return 0;
    }
    for (int i = 0; dm_commands[i].name; i++) {
        // the first sentence: up to the first ". " (a '.' inside "NAME.dm" or "1..L" is not an end)
        const char *h = dm_commands[i].help, *end = strstr(h, ". ");
        int n = end ? (int)(end - h) : (int)strlen(h);
        if (!end && n > 0 && h[n - 1] == '.') n--;
        fprintf(OUT, "  %-44s %.*s\n", dm_commands[i].usage, n, h);
    }
    fprintf(OUT, "Shortcuts: :s step, :t train, :e eval, :p plot, :h help, :q quit. A unique prefix works (:eval-d).\n");
    return 0;
}

static void show_params(Shell *sh) {
    Model *m = &E_->model;
    size_t comp, tab;
    model_param_counts(m, &comp, &tab);
    static const char *gname[] = {"muon", "adamw", "adamw-1d", "adam-table"};
    for (int i = 0; i < P_COUNT; i++) {
        ParamTensor *t = &m->t[i];
        char shape[64];
        if (t->ndim == 1) snprintf(shape, sizeof shape, "[%d]", t->shape[0]);
        else if (t->ndim == 2) snprintf(shape, sizeof shape, "[%d, %d]", t->shape[0], t->shape[1]);
        else snprintf(shape, sizeof shape, "[%d, %d, %d]", t->shape[0], t->shape[1], t->shape[2]);
        // the optimizer that really steps it (engine/optim.c): opt=adamw puts the Muon group on AdamW
        int g = t->group == GROUP_MUON && (m->cfg.opt_adamw || t->n_mats == 0) ? GROUP_ADAMW : (int)t->group;
        // an arm that is off: the optimizer skips the tensor (its gate row alone for ctrl.w/ctrl.b)
        int a = param_arm(i);
        char frozen[96] = "";
        if (a >= 0 && !m->arms.on[a]) snprintf(frozen, sizeof frozen, " (frozen: %s off)", dm_arm_names[a]);
        if (i == P_CTRL_W || i == P_CTRL_B) {  // row j = arm j's gate (0 kda, 1 engram, 2 moe)
            char rows[16] = "", arms[32] = "";
            for (int j = 0; j < 3; j++)
                if (!m->arms.on[j]) {
                    snprintf(rows + strlen(rows), sizeof rows - strlen(rows), "%s%d", rows[0] ? "," : "", j);
                    snprintf(arms + strlen(arms), sizeof arms - strlen(arms), "%s%s", arms[0] ? "," : "", dm_arm_names[j]);
                }
            if (rows[0]) snprintf(frozen, sizeof frozen, " (row%s %s frozen: %s off)", strchr(rows, ',') ? "s" : "", rows, arms);
        }
        fprintf(OUT, "  %-16s %-18s %10zu  %s%s%s\n", t->name, shape, t->numel, gname[g], t->orthonormal ? " (orthonormal)" : "", frozen);
    }
    fprintf(OUT, "params: %zu compute + %zu memory-table = %zu total (%.2fM + %.2fM)%s\n", comp, tab, comp + tab,
            comp / 1e6, tab / 1e6, tab > comp ? " — mostly table rows: a lookup table with a model attached" : "");
}

static int cmd_show(Shell *sh, Words *w, dm_err *err) {
    if (w->argc > 2) return dm_fail(err, "usage: :show [config|model|params|arms|data|device|metrics] (one at a time)");
    const char *what = w->argc > 1 ? w->argv[1] : "config";
    Engine *e = E_;
    if (!strcmp(what, "config")) {
        for (int i = 0; i < dm_n_config_keys; i++) {
            char v[128];
            config_get(&e->cfg, &dm_config_keys[i], v, sizeof v);
            // (engram_ram is refused on a live model like the architecture, but it is where the
            // tables live, not their shape: a checkpoint loads into either, as :help KEY says)
            fprintf(OUT, "  %-16s %-14s %s%s\n", dm_config_keys[i].name, v, dm_config_keys[i].help,
                    !strcmp(dm_config_keys[i].name, "engram_ram") ? " [placement]" : dm_config_keys[i].arch ? " [architecture]" : "");
        }
        return 0;
    }
    if (!strcmp(what, "model")) {
        if (!e->live) return dm_fail(err, "no model: :init builds one");
        const Config *c = &e->model.cfg;
        fprintf(OUT, "dormouse: d=%d, one block iterated L=%d times (weights shared), loss=%s\n", c->d, c->L, c->loss_final ? "final" : "rec");
        static const struct { const char *prefix, *part; } parts[] = {
            {"emb", "byte embedding"}, {"iter_emb", "block: IterEmb, RMSNorm, controller"}, {"blk_norm", NULL},
            {"ctrl.", NULL}, {"kda.", "KDA attention arm"}, {"mem.", "Engram memory read"},
            {"moe.", "TSCT experts"}, {"alpha", "ReZero + readout (OutProj per iteration, RMSNorm)"},
            {"outproj", NULL}, {"out_norm", NULL}, {"head", "head"}, {"engram.tables", "Engram tables (memory rows)"}};
        size_t tot[12] = {0};
        int owner = -1;
        for (int i = 0; i < P_COUNT; i++) {
            const char *nm = e->model.t[i].name;
            for (int k = 0; k < 12; k++)
                if (!strncmp(nm, parts[k].prefix, strlen(parts[k].prefix))) { owner = k; while (owner > 0 && !parts[owner].part) owner--; break; }
            if (owner >= 0) tot[owner] += e->model.t[i].numel;
        }
        char detail[12][96] = {{0}};
        snprintf(detail[0], 96, "[256, %d]", c->d);
        snprintf(detail[1], 96, "gates w_attn, w_mem, w_ffn; router over E=%d", c->E);
        if (e->be && e->be->kda_fixed_chunk)  // the device's kernels fix it: say which one runs
            snprintf(detail[4], 96, "H=%d heads of %d, chunk %d (%s's; kda_chunk=%d is the CPU's)", c->H, c->d / c->H,
                     e->be->kda_fixed_chunk < c->seq ? e->be->kda_fixed_chunk : c->seq, e->be->name, c->kda_chunk);
        else if (c->kda_chunk > c->seq)  // the chunk that runs: one of seq bytes (QA, session 32)
            snprintf(detail[4], 96, "H=%d heads of %d, chunk %d (kda_chunk=%d > seq)", c->H, c->d / c->H, c->seq, c->kda_chunk);
        else snprintf(detail[4], 96, "H=%d heads of %d, chunk %d", c->H, c->d / c->H, c->kda_chunk);
        snprintf(detail[5], 96, "gate on RMSNorm(n).RMSNorm(key), lam_max=%g", c->lam_max);
        snprintf(detail[6], 96, "E=%d top-%d, rank %d, hidden %d", c->E, c->k, c->r, c->f);
        snprintf(detail[7], 96, "%d x [%d, %d]", c->L, c->d, c->d);
        snprintf(detail[10], 96, "[256, %d], untied", c->d);
        snprintf(detail[11], 96, "%d orders x %lld rows x %d", c->n_orders, (long long)c->engram_rows, c->engram_dim);
        for (int k = 0; k < 12; k++)
            if (parts[k].part) fprintf(OUT, "  %-52s %10zu  %s\n", parts[k].part, tot[k], detail[k]);
        size_t comp, tab;
        model_param_counts(&e->model, &comp, &tab);
        fprintf(OUT, "  %-52s %10zu + %zu table (%.2fM + %.2fM)%s\n", "total", comp, tab, comp / 1e6, tab / 1e6,
                tab > comp ? " — mostly table rows: a lookup table with a model attached" : "");
        fprintf(OUT, "  (:show params lists every tensor with its shape and optimizer)\n");
        return 0;
    }
    if (!strcmp(what, "params")) {
        if (!e->live) return dm_fail(err, "no model: :init builds one");
        show_params(sh);
        return 0;
    }
    if (!strcmp(what, "data")) {
        if (!e->has_data) return dm_fail(err, "no data: :data PATH opens a corpus");
        int64_t nseq = 0;
        dm_err why = {0};  // a window of no sequence says why (it printed "0 B (0 x 32)" alone)
        engine_eval_window(e, &nseq, &why);
        fprintf(OUT, "%s\neval window: %lld B (%lld x %d) from the start of %s%s%s\n", e->data.desc,
                (long long)(nseq * e->cfg.seq), (long long)nseq, e->cfg.seq,
                e->eval_path[0] ? "the eval file" : "the held-out split", why.msg[0] ? ": " : "", why.msg);
        return 0;
    }
    if (!strcmp(what, "arms")) {
        if (!e->live) return dm_fail(err, "no model: :init builds one");
        for (int a = 0; a < ARM_COUNT; a++)
            fprintf(OUT, "  %-8s %-3s forward %lld backward %lld\n", dm_arm_names[a], e->model.arms.on[a] ? "on" : "off",
                    (long long)e->model.arms.fwd[a], (long long)e->model.arms.bwd[a]);
        return 0;
    }
    if (!strcmp(what, "device")) {
        char desc[512] = "";
        const Backend *be = e->live ? e->model.be : e->be;
        if (be->describe) be->describe(desc, sizeof desc);
        size_t cur = 0, peak = 0;
        if (be->mem_stats) be->mem_stats(&cur, &peak);
        fprintf(OUT, "device %s (%s engine)%s\n  %s\n  backend memory: %.1f MB held, %.1f MB peak\n", e->device, REAL_NAME,
                e->live ? "" : " — no model yet: :init builds it here", desc, cur / 1e6, peak / 1e6);
        return 0;
    }
    if (!strcmp(what, "metrics")) {
        fprintf(OUT, "%d metric rows, step %lld, %lld tokens, %lld skipped steps%s%s\n", e->nrows, (long long)e->step,
                (long long)e->tokens, (long long)e->opt.total_skips, e->session_dir[0] ? ", session " : "",
                e->session_dir[0] ? e->session_dir : "");
        int shown = 0;
        for (int i = e->nrows - 1; i >= 0 && shown < 5; i--)
            if (e->rows[i].kind == 0) shown++;
        for (int i = 0, skip = 0; i < e->nrows; i++) {
            const MetricRow *r = &e->rows[i];
            if (r->kind != 0) continue;
            int ntrain_after = 0;
            for (int j = i + 1; j < e->nrows; j++) ntrain_after += e->rows[j].kind == 0;
            if (ntrain_after >= shown) { skip++; continue; }
            char w[300];
            fprintf(OUT, "  %s%s\n", step_words(w, sizeof w, r, r->ms, r->tok_s), emulated_tag(r));
        }
        for (int i = e->nrows - 1, k = 0; i >= 0 && k < 1; i--)
            if (e->rows[i].kind == 1) {
                char bb[32];
                fprintf(OUT, "  last eval: step %lld depth %d bpb %s over %lld B%s\n", (long long)e->rows[i].step,
                        e->rows[i].depth, sh_num(bb, e->rows[i].bpb, 4), (long long)e->rows[i].window, eval_tag(e->rows[i].arms_off));
                k++;
            }
        return 0;
    }
    return dm_fail(err, "unknown :show target '%s' (config, model, params, arms, data, device, metrics)", what);
}

static int cmd_data(Shell *sh, Words *w, dm_err *err) {
    static const char *const keys[] = {"eval", NULL};
    if (sh_check_keys(w, 1, keys, err)) return 1;
    const char *path = sh_positional(w, 0);
    if (!path) return dm_fail(err, "usage: :data PATH [eval=PATH2]");
    int64_t n_train0 = E_->has_data ? E_->data.n_train : -1;
    if (engine_open_data(E_, path, sh_kv(w, "eval"), err)) return 1;
    fprintf(OUT, "%s\n", E_->data.desc);
    if (E_->data.n_train != n_train0) sh_note_heldout_trained(sh);  // (the same split again: said when it was made)
    // eval= naming a file the training corpus holds (itself, or one inside its directory): what
    // it scores is not held-out, and nothing said so (QA, session 34)
    const char *both = data_eval_in_train(&E_->data);
    if (both)
        fprintf(OUT, "note: the eval file %s is also in the training corpus: evals score bytes the training windows read (their BPB "
                "is not held-out)\n", both);
    return 0;
}

static int run_steps(Shell *sh, long long n, int quiet_every, dm_err *err) {
    Engine *e = E_;
    // :step leaves the schedule's horizon alone (SPEC §4: the first :train sets it); with no
    // horizon the lr stays constant after warmup
    for (long long i = 0; i < n; i++) {
        if (e->interrupt && *e->interrupt) {
            e->intr_honored++;
            fprintf(OUT, "interrupted at step %lld (state intact)\n", (long long)e->step);
            return 0;
        }
        MetricRow r;
        if (engine_step(e, &r, err)) { print_step(sh, &r); return 1; }
        print_notice(sh);
        if (!quiet_every || (e->step % quiet_every) == 0 || i == n - 1 || r.skipped) print_step(sh, &r);
    }
    return 0;
}

static int cmd_step(Shell *sh, Words *w, dm_err *err) {
    if (sh_check_keys(w, 1, NULL, err)) return 1;
    long long n = 1;
    if (w->argc > 1 && sh_parse_int(w->argv[1], 1, 1LL << 40, "step count", &n, err)) return 1;
    if (!E_->live || !E_->has_data) return dm_fail(err, !E_->live ? "no model: :init builds one" : "no data: :data PATH opens a corpus");
    return run_steps(sh, n, 0, err);
}

static int do_eval(Shell *sh, int depth, dm_err *err) {
    EvalResult r;
    if (engine_eval(E_, depth, &r, err)) return 1;
    print_notice(sh);  // what the eval found before it scored (a corpus that changed on disk)
    print_eval(sh, &r);
    return 0;
}

static int cmd_train(Shell *sh, Words *w, dm_err *err) {
    static const char *const keys[] = {"eval_every", "ckpt_every", "ckpt_keep", "log_every", "stop_after", NULL};
    if (sh_check_keys(w, 1, keys, err)) return 1;
    const char *ns = sh_positional(w, 0);
    if (!ns) return dm_fail(err, "usage: :train N [eval_every=..] [ckpt_every=..] [ckpt_keep=..] [log_every=..] [stop_after=K]");
    long long n = 0, ev = E_->cfg.eval_every, ck = E_->cfg.ckpt_every, keep = 0, lg = E_->cfg.log_every;
    if (sh_parse_int(ns, 1, 1LL << 40, "step count", &n, err)) return 1;
    // stop_after=K: this run of N steps (its horizon, evals, checkpoints) stopped after its first K:
    // what a transcript records for a :train cut short, so that its replay rebuilds the steps taken
    long long k_stop = n;
    if (sh_kv(w, "stop_after") && sh_parse_int(sh_kv(w, "stop_after"), 1, n, "stop_after", &k_stop, err)) return 1;
    if (sh_kv(w, "eval_every") && sh_parse_int(sh_kv(w, "eval_every"), 0, 1LL << 40, "eval_every", &ev, err)) return 1;
    if (sh_kv(w, "ckpt_every") && sh_parse_int(sh_kv(w, "ckpt_every"), 0, 1LL << 40, "ckpt_every", &ck, err)) return 1;
    if (sh_kv(w, "ckpt_keep") && sh_parse_int(sh_kv(w, "ckpt_keep"), 0, 1 << 30, "ckpt_keep", &keep, err)) return 1;
    if (sh_kv(w, "log_every") && sh_parse_int(sh_kv(w, "log_every"), 1, 1LL << 40, "log_every", &lg, err)) return 1;
    if (keep > 0 && ck == 0)  // (it would do nothing, silently)
        return dm_fail(err, "ckpt_keep=%lld has nothing to keep: this :train writes no checkpoint (ckpt_every is 0); "
                       "add ckpt_every=K", keep);
    Engine *e = E_;
    if (!e->live || !e->has_data) return dm_fail(err, !e->live ? "no model: :init builds one" : "no data: :data PATH opens a corpus");
    // an eval this run would reach on a window of no sequence: refused now, before its steps (it
    // ran them and failed at the first eval). A run that ends before its first eval is not.
    long long first_eval = ev > 0 ? (e->step / ev + 1) * ev : 0;
    int64_t nseq;
    dm_err werr = {0};
    if (ev > 0 && first_eval <= e->step + k_stop && engine_eval_window(e, &nseq, &werr))
        return dm_fail(err, "its first eval (step %lld, eval_every=%lld) would fail, so no step ran: %s; or eval_every=0 trains without evals",
                       first_eval, ev, werr.msg);
    int chose_horizon = e->cfg.steps == 0;
    if (chose_horizon) {
        e->cfg.steps = e->step + n;
        e->steps_auto = 1;
        e->model.cfg.steps = e->cfg.steps;
        // a horizon inside the warmup: every step of this run is a warmup step (the numbers are
        // the schedule's own, engine/optim.c: no cosine before the horizon, the floor from it on)
        if (e->cfg.lr_cosine && e->cfg.steps <= e->cfg.warmup) {
            long long S = e->cfg.steps;
            double m0 = lr_schedule_mult(&e->cfg, e->step), m1 = lr_schedule_mult(&e->cfg, S - 1);
            char ramp[96];
            if (S - 1 > e->step) snprintf(ramp, sizeof ramp, "climbs from %.2gx to %.2gx of lr", m0, m1);
            else snprintf(ramp, sizeof ramp, "is %.2gx of lr", m0);
            fprintf(OUT, "schedule: this run (steps %lld..%lld) is all warmup (warmup=%d, steps=%lld): the lr %s and does not decay; "
                    "steps from %lld on run at the floor %.2gx (lr_min_frac). With a warmup below %lld (:set warmup=N) the lr reaches its full value, then decays\n",
                    (long long)e->step, S - 1, e->cfg.warmup, S, ramp, S, lr_schedule_mult(&e->cfg, S), S);
        } else if (e->cfg.lr_cosine) {
            fprintf(OUT, "schedule: cosine to %.2gx lr at step %lld (steps=%lld; :set steps=N to change)",
                    e->cfg.lr_min_frac, (long long)e->cfg.steps, (long long)e->cfg.steps);
            // :steps past the warmup before any horizon ran at the full lr (no horizon, no decay);
            // the cosine over the new horizon starts at the warmup's end, so the next lr is below
            // the last one at once (0.47x after 5 such steps of a 14-step horizon, unsaid: QA,
            // session 40)
            double m1 = lr_schedule_mult(&e->cfg, e->step);
            // (what the steps before ran at is not known here: a horizon set and taken away again
            // ran them on its cosine, and "ran at the full lr" was untrue: QA, session 41)
            if (e->step > e->cfg.warmup && m1 < 0.999)
                fprintf(OUT, "; the lr drops from 1x to %.2gx of lr at once: with no horizon (steps=0) the steps after the warmup "
                        "(from step %d) run at the full lr, and this horizon's cosine is at %.2gx by step %lld",
                        m1, e->cfg.warmup, m1, (long long)e->step);
            fputc('\n', OUT);
        }
    } else if (e->cfg.lr_cosine && e->step + n > e->cfg.steps) {
        // what a longer horizon does, said before it is taken: the cosine is recomputed over it
        // from step 0, so the lr climbs back (QA, session 35: "to extend" hid a warm restart)
        Config ext = e->cfg;
        ext.steps = e->step + n;
        fprintf(OUT, "note: the schedule ends at steps=%lld; steps past it run at the floor lr (%.2gx): :set steps=N gives it a new "
                "end, the cosine recomputed over it (steps=%lld: step %lld at %.2gx of lr, a warm restart of the decay)\n",
                (long long)e->cfg.steps, e->cfg.lr_min_frac, (long long)ext.steps, (long long)e->step, lr_schedule_mult(&ext, e->step));
    }
    fflush(OUT);  // (the schedule line, before the run's first step)
    long long end = e->step + k_stop;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long long start = e->step;
    // In a terminal the live panel (panel.h) replaces the step lines; whatever else the run
    // prints (evals, checkpoints, an error's step line) goes to the panel's log area. All of it,
    // the step lines too, is printed when it closes. Every way out goes through the close below.
    Panel *panel = sh->interactive ? panel_open() : NULL;
    FILE *out0 = sh->out;
    if (panel) sh->out = panel_output(panel);
    double *losses = NULL, bpb = NAN, eta = -1;
    // the eta: the steps left at the steps' own rate so far, and the evals and checkpoints still
    // to come at what those already run took (QA, session 31: steps only, it said "eta 0s" with
    // the run's last eval still to come, 30 % short before it); one not yet timed is named
    double t_ev = 0, t_ck = 0;
    long long n_ev = 0, n_ck = 0, untimed_ev = 0, untimed_ck = 0;
    char eta_txt[120] = "";
    // a step line's ms and tok/s are over the steps since the line before (the last step's own
    // read as the run's rate, and one slow step, a page fault or a busy core, set the line;
    // QA, session 26); metrics.tsv keeps every step's own
    double iv_ms = 0, iv_tok = 0;
    long long iv_n = 0;
    int nloss = 0, closs = 0, skipped = 0, rc = 0, stopped = 0;
    MetricRow last = {0};
    CkptKeep kept = {.keep = (int)keep};  // ckpt_keep: this run's checkpoints on disk
    long long ck_failed = 0, ck_fail_step = -1;  // checkpoints that failed; the step of the last one, while no later one was written
    char ck_fail_msg[sizeof err->msg];
    while (e->step < end && !stopped && !rc) {
        long long chunk = lg - (e->step % lg);
        if (chunk > end - e->step) chunk = end - e->step;
        if (ev > 0 && chunk > ev - (e->step % ev)) chunk = ev - (e->step % ev);
        if (ck > 0 && chunk > ck - (e->step % ck)) chunk = ck - (e->step % ck);
        // The chunk ends on a log (or eval / checkpoint) step: its steps are only enqueued (on a
        // GPU, graph replays the host does not wait for) and reported together at its end, one
        // download for the whole chunk (engine.h: engine_step_enqueue / engine_report).
        int row0 = e->nrows, stop = 0;
        for (long long i = 0; i < chunk; i++) {
            if (e->interrupt && *e->interrupt) { stopped = 1; e->intr_honored++; break; }
            if (engine_step_enqueue(e, err)) { rc = 1; break; }
        }
        dm_err rerr = {0};
        if (engine_report(e, NULL, rc ? &rerr : err)) stop = 1;  // an enqueue error keeps its message
        print_notice(sh);
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double el = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (e->step > start) {
            // (the eval and checkpoint of this chunk's last step are still to come here)
            long long ev_left = ev > 0 ? end / ev - (e->step - 1) / ev : 0, ck_left = ck > 0 ? end / ck - (e->step - 1) / ck : 0;
            eta = (el - t_ev - t_ck) / (e->step - start) * (end - e->step) + (n_ev ? t_ev / n_ev * ev_left : 0) +
                  (n_ck ? t_ck / n_ck * ck_left : 0);
            untimed_ev = n_ev ? 0 : ev_left;
            untimed_ck = n_ck ? 0 : ck_left;
            char a[40] = "", b[48] = "";
            if (untimed_ev) snprintf(a, sizeof a, "%lld eval%s", untimed_ev, untimed_ev == 1 ? "" : "s");
            if (untimed_ck) snprintf(b, sizeof b, "%lld checkpoint%s", untimed_ck, untimed_ck == 1 ? "" : "s");
            snprintf(eta_txt, sizeof eta_txt, "%.0fs%s%s%s%s%s", eta, a[0] || b[0] ? " + " : "", a, a[0] && b[0] ? " and " : "", b,
                     a[0] || b[0] ? " not yet timed" : "");
        }
        // the panel's tok/s: over this chunk's steps, as a step line's over its interval (the
        // chunk's last step alone set it: QA, session 31)
        double ch_ms = 0, ch_tok = 0, chunk_tok_s = 0;
        for (int k = row0; k < e->nrows; k++)
            if (e->rows[k].kind == 0 && !(stop && k == e->nrows - 1)) {
                ch_ms += e->rows[k].ms;
                ch_tok += e->rows[k].tok_s * e->rows[k].ms / 1e3;
            }
        if (ch_ms > 0) chunk_tok_s = ch_tok / (ch_ms / 1e3);
        for (int k = row0; k < e->nrows; k++) {
            MetricRow r = e->rows[k];
            if (r.kind != 0) continue;
            if (stop && k == e->nrows - 1) {  // the step that stopped the run, after the steps before it
                if (iv_n > 0) train_line(sh, panel, &last, iv_ms, iv_tok, iv_n, NULL);
                iv_n = 0;
                print_step(sh, &r);
                break;
            }
            last = r;
            if (panel) {  // drawn once the chunk's rows are in (below): its newest row
                if (nloss == closs) { closs = closs ? 2 * closs : 1024; losses = reallocCheck(losses, closs * sizeof *losses); }
                losses[nloss++] = r.loss;
                skipped += r.skipped;
            }
            iv_ms += r.ms;
            iv_tok += r.tok_s * r.ms / 1e3;
            iv_n++;
            if ((r.step + 1) % lg == 0 || r.step + 1 == end || r.skipped) {
                train_line(sh, panel, &r, iv_ms, iv_tok, iv_n, eta >= 0 ? eta_txt : NULL);
                iv_ms = iv_tok = 0;
                iv_n = 0;
            }
        }
        if (panel && nloss) {
            // the newest step (QA, session 21: every row of a chunk went to the panel in turn, and
            // its 0.1 s redraw limit left it on the chunk's FIRST row: log_every - 1 steps behind,
            // through the eval or checkpoint that follows); drawn even inside that limit when an
            // eval, a checkpoint or the end comes next, which hold the screen for a while
            int held = e->step >= end || (ev > 0 && e->step % ev == 0) || (ck > 0 && e->step % ck == 0);
            char off[64] = "";
            if (last.arms_off) arms_mask_names(last.arms_off, off, sizeof off);
            // what holds the screen next, said on it (an eval of a large model lasts minutes, and
            // the panel looked stuck: QA, session 31)
            int will_ev = !stop && !stopped && ev > 0 && e->step % ev == 0, will_ck = !stop && !stopped && ck > 0 && e->step % ck == 0;
            const char *busy = will_ev && will_ck ? "evaluating, then saving a checkpoint..." : will_ev ? "evaluating..."
                               : will_ck ? "saving a checkpoint..." : NULL;
            size_t dcur = 0, dpeak = 0;  // (the device's memory: the RSS is the host's)
            if (e->model.be && e->model.be->mem_stats && strcmp(e->device, "cpu")) e->model.be->mem_stats(&dcur, &dpeak);
            PanelInfo pi = {.device = e->device, .dev_mib = dcur / 1048576.0, .step = last.step + 1, .start_step = start, .end_step = end, .loss = losses, .nloss = nloss,
                            .loss_last = last.loss, .bpb = bpb, .tok_s = chunk_tok_s, .eta_s = eta, .skipped = skipped,
                            .lr = last.lr, .gnorm = last.gnorm, .emulated = last.emulated, .force = held, .off = off, .busy = busy,
                            .eta_more = eta_txt[0] && strchr(eta_txt, '+') ? strchr(eta_txt, '+') - 1 : NULL};
            panel_update(panel, &pi);
        }
        if (stop) rc = 1;
        if (stopped || rc) break;
        if (ev > 0 && e->step % ev == 0) {
            EvalResult er;
            struct timespec a0, a1;
            clock_gettime(CLOCK_MONOTONIC, &a0);
            int erc = engine_eval(e, e->cfg.L, &er, err);
            clock_gettime(CLOCK_MONOTONIC, &a1);
            t_ev += (a1.tv_sec - a0.tv_sec) + (a1.tv_nsec - a0.tv_nsec) / 1e9;
            n_ev++;
            if (erc) {
                // Ctrl-C inside the eval stops the run as one between steps does (said below);
                // it used to end the :train as an error with no step in it
                if (e->interrupt && *e->interrupt) { stopped = 2; err->code = 0; err->msg[0] = 0; }
                else rc = 1;
                break;
            }
            print_notice(sh);
            print_eval(sh, &er);
            bpb = er.bpb[e->cfg.L - 1];
        }
        if (ck > 0 && e->step % ck == 0) {
            char path[1200], note[1600] = "", before[sizeof e->synced_path];  // where :save puts it: the session's ckpt/, else the working directory
            snprintf(before, sizeof before, "%s", e->synced_path);
            struct timespec a0;
            clock_gettime(CLOCK_MONOTONIC, &a0);
            // A checkpoint that fails (a full disk, a lost permission) no longer ends the run: one
            // failed write ended an hours-long :train, and the exit's save on the same disk then
            // lost every step since the last good checkpoint (QA, session 41). Said on its own
            // line, counted; the next checkpoint tries again, and a run whose last one failed
            // ends in an error (below), so a script stops there and its exit save tries once more.
            int cfail = e->session_dir[0] ? session_save(e, path, sizeof path, note, sizeof note, err)
                                          : session_save_default(e, path, sizeof path, note, sizeof note, err);
            if (cfail) {
                ck_failed++;
                ck_fail_step = (long long)e->step;
                snprintf(ck_fail_msg, sizeof ck_fail_msg, "%s", err->msg);
                err->code = 0;
                err->msg[0] = 0;
                struct timespec a1;
                clock_gettime(CLOCK_MONOTONIC, &a1);
                t_ck += (a1.tv_sec - a0.tv_sec) + (a1.tv_nsec - a0.tv_nsec) / 1e9;
                n_ck++;
                fprintf(OUT, "checkpoint at step %lld FAILED: %s%s\n", ck_fail_step, ck_fail_msg,
                        e->step + ck <= end ? "; training goes on (the next checkpoint tries again)" : e->step < end ? "; training goes on" : "");
                fflush(OUT);
                continue;
            }
            ck_fail_step = -1;
            // ckpt_keep: this run's oldest goes once a newer one is in place; a file the save found
            // already holding the state (its note), or the one the state came from (the same file:
            // session_same_dir compares any two paths), is not this run's
            char said[700];
            int fresh = !strstr(note, " already held this exact state") && !session_same_dir(path, before);
            ckpt_keep_after(&kept, path, fresh, said, sizeof said);
            struct timespec a1;
            clock_gettime(CLOCK_MONOTONIC, &a1);
            t_ck += (a1.tv_sec - a0.tv_sec) + (a1.tv_nsec - a0.tv_nsec) / 1e9;
            n_ck++;
            fprintf(OUT, "checkpoint %s%s%s%s\n", path, said[0] ? " (" : "", said, said[0] ? ")" : "");
            if (note[0]) fprintf(OUT, "note: %s\n", note);
        }
        // every line of the run as it happens, the eval's and checkpoint's too (to a pipe or a
        // file only the step line was flushed: a tail -f saw the evals at the run's end, and a
        // SIGKILL lost them from the log: QA, session 24)
        fflush(OUT);
    }
    // a run stopped between log lines (Ctrl-C, a signal, an error) says where it got: the line of
    // its last step over the steps since the line before (with a large log_every the steps it
    // ran were in metrics.tsv only: QA, session 30)
    if (iv_n > 0) train_line(sh, panel, &last, iv_ms, iv_tok, iv_n, NULL);
    if (panel) {  // the screen goes back as it was, and under it the run's lines as --no-tui
        sh->out = out0;  // prints them (its step lines, evals, checkpoints: panel_text.h)
        panel_close(panel);
        free(losses);
    }
    if (chose_horizon && e->step == start && (rc || stopped)) {
        // no step of this run ran (its first was refused, or Ctrl-C came first): the horizon it
        // chose is not the model's; kept, it bound the next :train (and went into checkpoints)
        e->cfg.steps = e->model.cfg.steps = 0;
        e->steps_auto = 0;
        if (e->cfg.lr_cosine)  // the schedule line above announced it
            fprintf(OUT, "schedule: withdrawn (no step of this run ran): steps=0 again, the next :train sets it\n");
    }
    ckpt_keep_free(&kept);
    if (ck_failed && ck_fail_step < 0)
        fprintf(OUT, "note: %lld of this run's checkpoints failed; a later one was written\n", ck_failed);
    else if (ck_failed && (rc || stopped))  // (the stop's own words follow)
        fprintf(OUT, "note: %lld of this run's checkpoints failed, the last at step %lld (%s)\n", ck_failed, ck_fail_step, ck_fail_msg);
    else if (ck_failed) {
        rc = 1;
        dm_fail(err, "%lld of this :train's checkpoints failed, the last at step %lld (%s): the steps since the last one written are "
                "in no file (free space, or :save PATH elsewhere)", ck_failed, ck_fail_step, ck_fail_msg);
    }
    if (stopped == 1) fprintf(OUT, "interrupted at step %lld (state intact)\n", (long long)e->step);
    if (stopped == 2) {
        sh->cut_in_eval = (long long)e->step;  // (the transcript says so: its replay runs that eval)
        fprintf(OUT, "interrupted at step %lld, in its eval (state intact; the eval stopped part-way: no eval row recorded)\n",
                (long long)e->step);
    }
    return rc;
}

static int cmd_eval(Shell *sh, Words *w, dm_err *err) {
    static const char *const keys[] = {"depth", NULL};
    if (sh_check_keys(w, 0, keys, err)) return 1;
    long long depth = E_->cfg.L;
    const char *dv = sh_kv(w, "depth");
    // a well-formed depth past L: the range is the model's, not the number's form ("(decimal digits)")
    if (dv && sh_parse_int(dv, 1, INT_MAX, "depth", &depth, err) == 0 && depth > E_->cfg.L)
        return dm_fail(err, "depth=%lld out of range: 1..%d (L), or :eval-depths for all", depth, E_->cfg.L);
    if (dv && sh_parse_int(dv, 1, E_->cfg.L, "depth", &depth, err)) return 1;
    return do_eval(sh, (int)depth, err);
}

static int cmd_eval_depths(Shell *sh, Words *w, dm_err *err) {
    if (sh_check_keys(w, 0, NULL, err)) return 1;
    return do_eval(sh, 0, err);
}

static int cmd_anchors(Shell *sh, Words *w, dm_err *err) {
    if (sh_check_keys(w, 0, NULL, err)) return 1;
    if (engine_anchors(E_, err)) return 1;
    Anchors *a = &E_->anchors;
    fprintf(OUT, "anchors over %lld B (%lld x %lld), fit on %lld training bytes%s: unigram %.4f bpb, Kneser-Ney 5-gram %.4f bpb\n",
            (long long)a->window_bytes, (long long)a->nseq, (long long)a->T, (long long)a->fit_bytes,
            a->fit_bytes == ANCHOR_FIT_MAX && E_->cfg.anchor_fit_bytes > ANCHOR_FIT_MAX && E_->data.n_train > ANCHOR_FIT_MAX
                ? " (2^31, the most the counts take)" : "",
            a->unigram_bpb, a->kn5_bpb);
    return 0;
}

static int cmd_arm(Shell *sh, Words *w, dm_err *err) {
    if (w->argc != 3 || (strcmp(w->argv[2], "on") && strcmp(w->argv[2], "off")))
        return dm_fail(err, "usage: :arm NAME on|off (arms: kda engram moe rezero retract aux)");
    int a = arms_find(w->argv[1]);
    if (a < 0) return dm_fail(err, "unknown arm '%s' (arms: kda engram moe rezero retract aux)", w->argv[1]);
    if (!E_->live) return dm_fail(err, "no model: :init builds one");
    E_->model.arms.on[a] = !strcmp(w->argv[2], "on");
    fprintf(OUT, "arm %s %s\n", w->argv[1], w->argv[2]);
    return 0;
}

static int cmd_run(Shell *sh, Words *w, dm_err *err) {
    if (w->argc != 2) return dm_fail(err, "usage: :run FILE.dm");
    // a fifo (or a device) would block in the open until a writer came, with no way out but a
    // signal (QA, session 27); dmsh -b reads a pipe
    struct stat st;
    if (stat(w->argv[1], &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return dm_fail(err, "%s: not a regular file (%s): :run reads a script file (dmsh -b FILE reads a pipe)", w->argv[1],
                       S_ISFIFO(st.st_mode) ? "a fifo" : S_ISCHR(st.st_mode) ? "a character device" : S_ISSOCK(st.st_mode) ? "a socket" : "a device");
    sh->depth++;
    int rc = sh_run_file_err(sh, w->argv[1], err);
    sh->depth--;
    return rc;
}

static int cmd_quit(Shell *sh, Words *w, dm_err *err) {
    if (w->argc > 1) return dm_fail(err, "usage: :quit (no arguments)");
    sh->quit = 1;
    return 0;
}

const Command dm_commands[] = {
    {":help", cmd_help, NULL, ":help [cmd|key]", "List the commands, or explain one; a config key (:help lr): what it does, its values, its default, its value now, and whether a live model takes it."},
    {":preset", cmd_preset, NULL, ":preset NAME", "Apply a preset: nano, mini, small, base, large — the :set lines of configs/NAME.dm (shape, Engram tables, seq, batch) as one :set; other keys keep their values. On a live model of another shape it is refused, nothing changed (:init preset=NAME builds a new model of it)."},
    {":set", cmd_set, NULL, ":set key=value ...", "Set config keys. On a live model only live keys (lr, batch, clip, ...) change; architecture keys are refused. :show config lists every key with its value; :help KEY explains one."},
    {":show", cmd_show, NULL, ":show [config|model|params|arms|data|device|metrics]", "Inspect the config, the model's tensors and parameter counts, the arms and their forward/backward counters (:help arm: what one count is), the data and its eval window."},
    {":data", cmd_data, NULL, ":data PATH [eval=PATH2]", "Open a corpus: a file or a directory (regular files and links to them, recursive, sorted, each file once; symlinked directories, fifos and the like are left out and said), memory-mapped. Without eval=, the last eval_frac is held out."},
    {":init", cmd_init, NULL, ":init [seed=N] [preset=NAME] [key=value ...]", "Build the model and optimizer from the current config (SPEC §4 defaults), with preset=NAME's keys and then the key=values given applied to it first (as :preset and :set would, architecture keys included): how a live model is rebuilt in another shape. A live model is replaced (in a session, saved first if it is in no file)."},
    {":step", cmd_step, NULL, ":step [N]", "Take N optimizer steps (default 1), one log line each."},
    {":train", cmd_train, NULL, ":train N [eval_every=..] [ckpt_every=..] [ckpt_keep=..] [log_every=..] [stop_after=K]", "Train N steps with periodic log lines (every log_every-th step; its ms and tok/s are the mean step time and the rate over the steps since the line before, metrics.tsv has each step's own), evals and checkpoints (eval_every=, ckpt_every= and log_every= default to the config keys of those names: 500, 0 = off, and 1 unless :set). ckpt_keep=N keeps the N newest of the checkpoints this run writes: once a newer one is in place the oldest is removed, and its checkpoint line says so (0, the default, keeps all; no file from before this :train is ever removed). A checkpoint that fails (a full disk) is said on its own line and the run goes on, the next one trying again; a :train whose last checkpoint failed ends in an error. Ctrl-C stops at the next step boundary (or part-way through an eval, which then records no row) with the state intact. stop_after=K runs the first K steps of that run (its schedule horizon, evals and checkpoints as for N): a transcript records a :train cut short (Ctrl-C, a signal, a killed process resumed with -r) that way, so its replay rebuilds the steps it took."},
    {":eval", cmd_eval, NULL, ":eval [depth=k]", "Held-out BPB on the fixed eval window at depth k (default L)."},
    {":eval-depths", cmd_eval_depths, NULL, ":eval-depths", "Held-out BPB at every depth 1..L from one forward pass."},
    {":anchors", cmd_anchors, NULL, ":anchors", "Unigram and Kneser-Ney 5-gram BPB on the eval window, fit on the training split."},
    {":arm", cmd_arm, NULL, ":arm NAME on|off", "Switch a mechanism live: kda, engram, moe, rezero, retract, aux (:help NAME: what it is and what off does). Its counters (:show arms; NAME=on(F/B) on eval lines) are the model's totals, kept in its checkpoints: kda, engram, moe and rezero count one per iteration of the block they run in, forward (a training step, each batch of an :eval, a :probe text=, each prompt byte of :gen and each byte it samples but the last) and backward (a training step); retract counts retractions, aux the training steps whose loss held it (forward and backward, with moe on). An arm that is off counts nothing, and training leaves it as it was switched off: its weights, their optimizer moments and its gate (row j of ctrl.w and ctrl.b) are not stepped (moe: also ctrl.router; rezero: alpha; :show params marks them), so :arm NAME on brings the arm back as it was."},
    {":save", cmd_save, NULL, ":save [PATH]", "Write a checkpoint (atomic: temp file, fsync, rename)."},
    {":load", cmd_load, NULL, ":load PATH", "Load a checkpoint; refuses one whose architecture differs from the live model. In a session the state left behind is saved first if it is in no file, metrics.tsv is rewritten to the loaded state's rows (said, with the file that keeps the others) and LATEST names it."},
    {":check", cmd_check, NULL, ":check determinism [steps=N] | grad [off=ARM,...] | parity [batch=N seq=N precision=fp32|bf16 route=device|own floor=on|off]", "Built-in verifications: the same steps twice bit for bit (steps=3 by default); finite-difference gradients of every parameter group on a tiny model in double precision, on the double-precision engine built beside this one (make DM_REAL=double build/double/dmsh; :check grad names it when it is missing) (its shape is printed; the live arms, or off=kda,moe,..., and the live k, L (each at most 3), loss, lam_max, g_min, moe_aux and engram_orders); parity: one step from identical weights on the CPU and CUDA, loss and every gradient (bar 1e-4 fp32, 3e-2 bf16). The CPU follows CUDA's MoE routing (route=own: each its own top-k) and checks that every choice it would not have made was a near tie; the floor column is the CPU against itself from weights one ulp away (how much of a difference is the step's conditioning; floor=off skips it)."},
    {":stress", cmd_stress, NULL, ":stress lr_mult=X steps=N", "Stability protocol: constant LR at X times the base for N steps; counts loss spikes, gnorm p99.9, arm maxima. Trains the live model."},
    {":bench", cmd_bench, NULL, ":bench [steps=N]", "Warm timing of the training step: median ms/step with step indices, tok/s, model FLOP/s (GFLOP/s on the CPU, TFLOP/s on a GPU), MFU (GPU: of the measured bf16 peak; CPU: of a 1024^3 product timed in the same command), backend memory (device memory on a GPU: now and peak). Restores the state after."},
    {":plot", cmd_plot, complete_plot, ":plot METRIC[,METRIC...] [out=FILE.png] [x=step|tokens|time] [log=on|off] [size=WxH]", "Charts to PNG: bpb, loss, lr, gnorm, tok_s, depths (BPB against depth per eval), experts (each expert's share of the routed tokens over training). Several metrics stack as panels on one shared x axis (depths, and experts without a history over training — E > 16, or no step yet — have their own); one with nothing to plot yet (no evals, no routed tokens) is left out of such a list and named in a note. Without out= it writes SESSION/plots/METRIC.png (./plots/ without a session; several metrics: their names joined by -, bpb-loss.png) and prints the path."},
    {":probe", cmd_probe, NULL, ":probe [NAME [text=\"...\"] [hist [log=on|off] [bins=N]]]", "Statistics of a named activation of the last step's or eval's forward (NAME@i per iteration; ctrl@i's three gates apart as ctrl.attn@i, ctrl.mem@i, ctrl.ffn@i; :gen's forwards are not kept; kda.state@i is each [sequence, head] state's Frobenius norm after the last byte, moe.load@i the tokens routed to each expert, summing to B*T*k) or a parameter: shape, mean, std, rms, min, max, absmax, non-finite fraction; hist writes a histogram PNG (SESSION/plots/hist-NAME-WHEN.png, ./plots/ without a session; @ and / in NAME as _; WHEN stepN for a parameter, fwdN, evalN or textN-HHHHHHHH (the step and the text's FNV-1a) for the forward an activation came from) of 60 bins (bins=N, 1..1000) over the values' min..max; log=on puts the counts on a log axis, so a handful of outliers shows beside the bulk (its own file, hist-NAME-WHEN-log.png). Alone: list the names (an activation of an arm that was off in the last forward is left out, and said). text=\"...\": one forward of those bytes first (escapes as :gen's; 2 to seq+1 bytes, each but the last read and predicting the next; no update, no metric row; the arms' counters take it), whose activations later probes read too; an activation with at most 4 values a byte (a gate, ctrl@i's three, loss@i) is listed byte by byte beside its statistics."},
    {":gen", cmd_gen, NULL, ":gen \"prompt\" [n=256 temp=0.8 top_k=0 seed=N]", "Sample n bytes with the recurrent form of the model (KDA state carried: O(1) memory per byte): one forward per prompt byte and per sampled byte but the last (no byte follows it): a prompt of P bytes and n samples take P + n - 1 forwards. Without a prompt (or with \"\") it starts from a newline, as at the start of a line: that byte is fed and printed first (n forwards). seed= defaults to the config's seed: the same :gen on the same model gives the same sample (seed=N for another). In the prompt \\n, \\t, \\r, \\\\ and \\xHH are escapes (another backslash is refused); the output shows \\n and \\t as they are, other control bytes (0x00-0x1f, 0x7f) as \\xHH, and bytes >= 0x80 as they are (UTF-8 prints as text)."},
    {":device", cmd_device, NULL, ":device cpu|cuda[:N]", "Choose the backend; a live model moves with its optimizer state and step. Without a usable GPU it says why and nothing changes."},
    {":session", cmd_session, NULL, ":session NAME", "Use runs/NAME as the session directory (metrics.tsv, ckpt/, plots/)."},
    {":sessions", cmd_sessions, NULL, ":sessions", "List the sessions under runs/ with their latest checkpoint and, from it, what the run reached: its last training loss, its last eval (BPB at that eval's deepest depth, the arms it ran without, its step and window), its shape and the arms off, so runs can be set side by side."},
    {":run", cmd_run, NULL, ":run FILE.dm", "Run a script."},
    {":quit", cmd_quit, NULL, ":quit", "Leave."},
    {NULL, NULL, NULL, NULL, NULL},
};
const int dm_n_commands = sizeof dm_commands / sizeof dm_commands[0] - 1;
