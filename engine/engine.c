// engine.c — the trainer: build, step, determinism check, metrics (the eval and anchors: eval.c;
// checkpoints: engine_ckpt.c).
#include "engine.h"
#include "../kernels/guard.h"
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include "ckpt.h"
#include "ckpt_values.h"
#include "snapshot.h"
#include "engine_internal.h"

void engine_init(Engine *e) {
    memset(e, 0, sizeof *e);
    config_defaults(&e->cfg);
    e->be = backend_cpu();
    snprintf(e->device, sizeof e->device, "cpu");
    e->synced_step = -1;
    e->synced_nrows = -1;
    e->session_fd = -1;
}

// A second note before the first was read joins it (one command can have two things to say,
// e.g. a :load whose checkpoint names another corpus and whose corpus also changed).
void engine_note(Engine *e, const char *fmt, ...) {
    char msg[sizeof e->note];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t used = e->note_new ? strlen(e->note) : 0;
    if (used && used + 8 < sizeof e->note) {  // (cut at the buffer's end, as any note)
        size_t room = sizeof e->note - used;
        memcpy(e->note + used, "; also: ", 8);
        size_t n = strlen(msg) < room - 9 ? strlen(msg) : room - 9;
        memcpy(e->note + used + 8, msg, n);
        e->note[used + 8 + n] = 0;
    }
    else if (!used) snprintf(e->note, sizeof e->note, "%s", msg);
    e->note_new = 1;
}

uint64_t engine_settings_hash(const Engine *e) {
    static char text[16384];  // (one engine per process; not reentrant, never called from threads)
    engine_config_text(&e->cfg, text, sizeof text);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = text; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    for (int a = 0; e->live && a < ARM_COUNT; a++) h = (h ^ (uint64_t)(e->model.arms.on[a] + 1)) * 1099511628211ull;
    return h;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

// What else a checkpoint holds of a state besides its step, rows and settings, and commands
// change without a step: the arms' counters (a :gen's or an :eval's forwards), the anchors, the
// corpus it names, the last orthogonality error. A change to these alone is the same state,
// saved again in its own file (free_ckpt_path looks at the step and settings only).
uint64_t engine_extras_hash(const Engine *e) {
    uint64_t h = 1469598103934665603ull;
    if (!e->live) return h;
    h = fnv(h, e->model.arms.fwd, sizeof e->model.arms.fwd);
    h = fnv(h, e->model.arms.bwd, sizeof e->model.arms.bwd);
    h = fnv(h, &e->has_anchors, sizeof e->has_anchors);
    if (e->has_anchors) {  // (field by field: the struct's padding is not part of the state)
        const Anchors *a = &e->anchors;
        h = fnv(h, &a->unigram_bpb, sizeof a->unigram_bpb);
        h = fnv(h, &a->kn5_bpb, sizeof a->kn5_bpb);
        h = fnv(h, &a->fit_bytes, sizeof a->fit_bytes);
        h = fnv(h, &a->window_bytes, sizeof a->window_bytes);
        h = fnv(h, &a->nseq, sizeof a->nseq);
        h = fnv(h, &a->T, sizeof a->T);
        h = fnv(h, &a->eval_set, sizeof a->eval_set);
    }
    h = fnv(h, e->data_path, strlen(e->data_path) + 1);
    h = fnv(h, e->eval_path, strlen(e->eval_path) + 1);
    h = fnv(h, &e->data_fp, sizeof e->data_fp);
    return fnv(h, &e->last_orth_err, sizeof e->last_orth_err);
}

// The corpus a state names (its files and their fingerprint): a save of the same state with
// another corpus is a new file, never the old one rewritten (a :load of it elsewhere, by its
// path, would read the new corpus: QA, session 28)
uint64_t engine_corpus_hash_of(const char *dp, size_t dn, const char *ep, size_t en, uint64_t fp) {
    static const char nul = 0;
    uint64_t h = 1469598103934665603ull;
    h = fnv(fnv(h, dp, dn), &nul, 1);
    h = fnv(fnv(h, ep, en), &nul, 1);
    return fnv(h, &fp, sizeof fp);
}

uint64_t engine_corpus_hash(const Engine *e) {
    return engine_corpus_hash_of(e->data_path, strlen(e->data_path), e->eval_path, strlen(e->eval_path), e->data_fp);
}

// unsaved: steps, metric rows, settings (:set, :arm: a checkpoint keeps them, and -r resumes
// with what it keeps) or the extras above that the last save or load does not hold
int engine_unsaved(const Engine *e) {
    return e->live && (e->synced_step != e->step || e->synced_nrows != e->nrows ||
                       e->synced_settings != engine_settings_hash(e) || e->synced_extras != engine_extras_hash(e));
}

// after a save or load: this state (step, rows) is the one in PATH
void engine_mark_synced(Engine *e, const char *path) {
    e->synced_step = e->step;
    e->synced_nrows = e->nrows;
    e->synced_settings = engine_settings_hash(e);
    e->synced_extras = engine_extras_hash(e);
    e->synced_corpus = engine_corpus_hash(e);
    char abs[PATH_MAX];
    const char *p = realpath(path, abs) ? abs : path;
    snprintf(e->synced_path, sizeof e->synced_path, "%s", p);
}

void engine_free_model(Engine *e) {
    if (!e->live) return;
    dm_err ignore = {0};
    engine_report(e, NULL, &ignore);  // steps still pending become rows before the model goes
    step_free(&e->run);
    optim_free(&e->opt);
    model_free(&e->model);
    e->live = 0;
}

void engine_free(Engine *e) {
    if (e->session_ino && e->session_fd >= 0) close(e->session_fd);
    engine_free_model(e);
    if (e->has_data) data_close(&e->data);
    free(e->rows);
    free(e->fwd_text);
    memset(e, 0, sizeof *e);
    e->session_fd = -1;
}

// A model whose state the host cannot hold is refused before anything is allocated: every
// buffer of it fits alone (the kernel overcommits), the pages are touched later, and the process
// grew until the OOM killer ended it (QA, session 24: :init engram_rows=2147483647, about 37 GB
// on a 23.5 GB host). On the CPU backend: weights, gradients, three optimizer moments and the
// host copy :init builds them in, plus the tables' per-row step counts.
static int host_memory_check(const Engine *e, dm_err *err) {
    if (!e->be || strncmp(e->be->name, "cpu", 3)) return 0;  // (a GPU's memory: its own checks)
    static Model lay;  // (a tensor table only: large for the stack)
    model_layout(&lay, &e->cfg);
    double need = (double)lay.n_params * sizeof(real) * 6 + (double)e->cfg.n_orders * (double)e->cfg.engram_rows * 8;
    double have = host_memory_available();
    // the live model on this host is freed before the new one is built: its memory counts as
    // free (an :init of the same config was refused, "20.6 GB available": QA, session 24)
    if (have > 0 && e->live && e->model.be && !strncmp(e->model.be->name, "cpu", 3) && e->model.be->mem_stats) {
        size_t cur = 0, peak = 0;
        e->model.be->mem_stats(&cur, &peak);
        have += (double)cur;
    }
    if (have <= 0 || need <= have) return 0;
    return dm_fail(err, "this model needs about %.1f GB of memory (%zu parameters: weights, gradients, three optimizer moments and "
                   "a staging copy), and this machine has %.1f GB available (MemAvailable + SwapFree): lower engram_rows, d, E or f",
                   need / 1e9, lay.n_params, have / 1e9);
}

int engine_build(Engine *e, uint64_t seed, dm_err *err) {
    // a new model is in no file (a synced mark left from the last one would let it overwrite
    // that one's checkpoint, or skip its exit save)
    e->synced_step = -1;
    e->synced_nrows = -1;
    e->synced_path[0] = 0;
    e->fwd_undone = 0;
    e->fwd_moved = 0;
    e->fwd_cut = 0;
    // (not config_validate_eval: the weights do not depend on the eval window; the REPL notes it)
    if (config_validate(&e->cfg, err) || model_shape_check(e->be, &e->cfg, e->cfg.batch, e->cfg.seq, err)) return 1;
    if (!e->be) e->be = backend_cpu();
    if (host_memory_check(e, err)) return 1;
    engine_free_model(e);
    e->cfg.seed = seed;
    if (e->be->set_precision) e->be->set_precision(e->cfg.precision_fp32);
    if (model_create(&e->model, &e->cfg, e->be, seed, err)) return 1;
    if (optim_create(&e->opt, &e->model, err)) { model_free(&e->model); return 1; }
    e->live = 1;
    e->step = e->tokens = 0;
    e->trained_upto = 0;
    e->nrows = 0;
    e->last_orth_err = model_orth_error(&e->model);
    return 0;
}

// 1 when be is the CUDA backend's code emulated on the CPU (tests/cuemu): its device names itself
// "cuemu" (describe; :show device prints the same line). Asked once per move, not per step:
// describe queries the device (and measures its peaks the first time, as :device then does).
static int backend_emulated(const Backend *be) {
    if (!be->describe || !be->name || strcmp(be->name, "cuda")) return 0;
    char desc[512] = "";
    be->describe(desc, sizeof desc);
    return strstr(desc, "cuemu") != NULL;
}

// Which file holds the live state (engine_mark_synced), kept across a rebuild of the same state
typedef struct { int64_t step; int nrows; uint64_t settings, extras, corpus; char path[sizeof ((Engine *)0)->synced_path]; } SyncedMarks;
static void synced_get(const Engine *e, SyncedMarks *m) {
    m->step = e->synced_step; m->nrows = e->synced_nrows;
    m->settings = e->synced_settings; m->extras = e->synced_extras; m->corpus = e->synced_corpus;
    memcpy(m->path, e->synced_path, sizeof m->path);
}
static void synced_put(Engine *e, const SyncedMarks *m) {
    e->synced_step = m->step; e->synced_nrows = m->nrows;
    e->synced_settings = m->settings; e->synced_extras = m->extras; e->synced_corpus = m->corpus;
    memcpy(e->synced_path, m->path, sizeof m->path);
}

int engine_set_device(Engine *e, const Backend *be, const char *name, dm_err *err) {
    if (!e->live) {
        e->be = be;
        e->emulated = backend_emulated(be);
        snprintf(e->device, sizeof e->device, "%s", name);
        // the config's precision now, not at :init: :show device reports the mode it will run
        if (be->set_precision) be->set_precision(e->cfg.precision_fp32);
        return 0;
    }
    // Move: copy the trainable state out, rebuild on the new backend, copy it in. The metric
    // rows stay in the engine; the activations are rebuilt at the next step.
    Snapshot s;
    if (snapshot_take(&s, e, err)) return 1;  // (the model stays where it is)
    SyncedMarks sm;  // the same state, moved (or left where it was): still in the same file
    synced_get(e, &sm);
    const Backend *old = e->be;
    // activations are not moved (nor were they by an earlier move: engine_build clears the mark)
    int had_forward = (e->model.acts.buf && e->model.last_depth > 0) || e->fwd_moved;
    int was_cut = e->fwd_cut && !had_forward;  // a refused step's partial forward: still said so after
    char oldname[16];
    snprintf(oldname, sizeof oldname, "%s", e->device);
    e->be = be;
    if (engine_build(e, e->cfg.seed, err)) {
        dm_err ignore = {0};
        e->be = old;  // back where it was: rebuild there and restore
        if (engine_build(e, e->cfg.seed, &ignore) == 0) {
            snapshot_restore(&s, e);
            // (engine_build's "a new model is in no file" made a failed move of a saved model
            // read as unsaved, and the exit saved it again: QA, session 40)
            synced_put(e, &sm);
        }
        snapshot_free(&s);
        e->fwd_moved = had_forward;  // (rebuilt where it was: the activations are gone all the same)
        e->fwd_cut = was_cut;
        char why[sizeof err->msg];  // (dm_fail formats into err->msg: the cause is copied out first)
        snprintf(why, sizeof why, "%s", err->msg);
        return dm_fail(err, "moving the model to %s failed (%s); it stays on %s", name, why, oldname);
    }
    snapshot_restore(&s, e);
    snapshot_free(&s);
    synced_put(e, &sm);
    snprintf(e->device, sizeof e->device, "%s", name);
    e->emulated = backend_emulated(be);
    e->fwd_moved = had_forward;  // :probe says why the activations are gone
    e->fwd_cut = was_cut;
    return 0;
}

// The path a checkpoint records: absolute, so a :load from another directory reopens the same
// file (a relative one resolved against whatever the working directory was then).
static int stored_path(char *dst, size_t n, const char *path, dm_err *err) {
    char abs[PATH_MAX];
    const char *p = realpath(path, abs) ? abs : path;
    if (strlen(p) >= n)
        return dm_fail(err, "corpus path too long to record in a checkpoint (%zu bytes, at most %zu): %s", strlen(p), n - 1, p);
    // a line break (reached through a symlink's target) cannot be written in a command line:
    // config.dm's :data line broke in two, and its replay failed (QA, session 34); any other byte
    // is written quoted
    if (strpbrk(p, "\n\r"))
        return dm_fail(err, "the corpus path %s resolves to a name with a line break, which config.dm and the transcript cannot write: "
                       "rename it (or link the files from a plain name)", path);
    memcpy(dst, p, strlen(p) + 1);
    return 0;
}

int engine_open_data(Engine *e, const char *path, const char *eval_path, dm_err *err) {
    char dp[sizeof e->data_path], ep[sizeof e->eval_path] = "";
    if (stored_path(dp, sizeof dp, path, err) || (eval_path && stored_path(ep, sizeof ep, eval_path, err))) return 1;
    Data d;
    if (data_open(&d, path, eval_path, e->cfg.eval_frac, e->cfg.seq, err)) return 1;
    uint64_t fp = data_fingerprint(&d, err), sf0 = fp ? data_split_fingerprint(&d, 0, err) : 0;
    uint64_t sf1 = sf0 ? data_split_fingerprint(&d, 1, err) : 0, stream = sf1 ? data_stream_fingerprint(&d, err) : 0;
    if (!stream) {
        data_close(&d);
        return 1;
    }
    // the same file and split with the same bytes, opened again
    int same = e->has_data && !strcmp(e->data_path, dp) && !strcmp(e->eval_path, ep) && fp == e->data_fp;
    // the same training corpus, whatever the eval setting: the model's steps drew from its bytes
    // as before (the held-out note of a later :set eval_frac must not forget them: session 30; nor
    // a :data of the file without the eval= it trained with: QA, session 34)
    int same_stream = e->has_data && !strcmp(e->data_path, dp) && stream == e->stream_fp;
    // and with the same split the anchors stand: they were fit on these training bytes and scored
    // on these held-out ones (dropped, eval lines stopped naming them with no word why, and the
    // next checkpoint lost them: QA, session 32)
    int keep_anchors = same && e->data.n_train == d.n_train && e->data.eval_off == d.eval_off && e->data.n_eval == d.n_eval;
    if (e->has_data) data_close(&e->data);  // only after the new corpus opened: a bad path keeps the old
    e->data_fp = fp;
    e->split_fp[0] = sf0;
    e->split_fp[1] = sf1;
    e->stream_fp = stream;
    e->data_drift_noted = 0;
    e->data = d;
    e->has_data = 1;
    if (!keep_anchors) e->has_anchors = 0;
    if (!same_stream) e->trained_upto = 0;  // (another corpus: no step of this model drew from it; a re-split keeps it)
    memcpy(e->data_path, dp, sizeof dp);
    memcpy(e->eval_path, ep, sizeof ep);
    return 0;
}

void engine_corpus_check(Engine *e) {
    if (!e->has_data) return;
    dm_err derr = {0};
    uint64_t fp = data_fingerprint(&e->data, &derr);  // (a shrunk file is the reads' own error)
    if (!fp || fp == e->data_fp) return;
    engine_note(e, "the corpus %s changed on disk since %s (its bytes differ): the batches and evals since read the new bytes; :data %s opens it as it is now",
                e->data_path, e->data_drift_noted ? "the last time this was said" : ":data opened it", e->data_path);
    // the bytes the run reads now: what the next checkpoint records (a -r then compares the file
    // with those, and says nothing of a change the run already went through)
    e->data_fp = fp;
    for (int s = 0; s < 3; s++) {
        uint64_t x = s < 2 ? data_split_fingerprint(&e->data, s, &derr) : data_stream_fingerprint(&e->data, &derr);
        if (x && s < 2) e->split_fp[s] = x;
        else if (x) e->stream_fp = x;
    }
    e->data_drift_noted = 1;
}

int engine_resplit(Engine *e, double old_frac, dm_err *err) {
    if (!e->has_data || e->eval_path[0] || e->cfg.eval_frac == old_frac) return 0;
    char path[sizeof e->data_path];
    snprintf(path, sizeof path, "%s", e->data_path);
    int64_t upto = e->trained_upto;  // (the same bytes, split elsewhere)
    if (engine_open_data(e, path, NULL, err)) {  // the old corpus stays open on failure
        e->cfg.eval_frac = old_frac;
        e->model.cfg.eval_frac = old_frac;
        e->trained_upto = upto;
        return 1;
    }
    e->trained_upto = upto;
    return 0;
}

int engine_need(const Engine *e, int data, dm_err *err) {
    if (!e->live) return dm_fail(err, "no model: :init builds one (after :preset / :set)");
    if (data && !e->has_data) return dm_fail(err, "no data: :data PATH opens a corpus");
    return 0;
}

// metrics.tsv: one header, one line per row (eval_set: the eval rows' set id in hex, empty when
// unknown — rows of checkpoints older than the id)
void engine_tsv_header(FILE *f) {
    fprintf(f, "kind\tstep\ttokens\tloss\tlr\tgnorm\tms\ttok_s\tskipped\tbpb\twindow\tdepth\teval_set\ttiming\tarms_off\n");
}
// timing (a column after the SPEC's: readers by position or by name see the others where they
// were): "emulated" on a train row timed on the emulated device, whose ms and tok_s are the
// CPU's; arms_off (the last): the arms that were off for the row ("kda,moe"; empty: all on), so
// an ablation's steps and evals are told apart from the run's
void engine_tsv_row(FILE *f, const MetricRow *r) {
    char arms[64];
    arms_mask_names(r->arms_off, arms, sizeof arms);
    if (r->kind == 0)
        fprintf(f, "train\t%lld\t%lld\t%.6f\t%.6g\t%.6g\t%.3f\t%.1f\t%d\t\t\t\t\t%s\t%s\n", (long long)r->step,
                (long long)r->tokens, r->loss, r->lr, r->gnorm, r->ms, r->tok_s, r->skipped, r->emulated ? "emulated" : "", arms);
    else if (r->eval_set)
        fprintf(f, "eval\t%lld\t%lld\t\t\t\t\t\t\t%.6f\t%lld\t%d\t%08x\t\t%s\n", (long long)r->step, (long long)r->tokens,
                r->bpb, (long long)r->window, r->depth, (unsigned)r->eval_set, arms);
    else
        fprintf(f, "eval\t%lld\t%lld\t\t\t\t\t\t\t%.6f\t%lld\t%d\t\t\t%s\n", (long long)r->step, (long long)r->tokens,
                r->bpb, (long long)r->window, r->depth, arms);
}

// Appends the rows metrics.tsv lacks (the new one, and any a failed write left out before) in
// one write; a write that fails part-way is cut back to the last whole row. A full disk for a
// while used to leave half a row, the next row glued onto it, and the rows in between missing
// for good while the run went on.
static void append_tsv(Engine *e) {
    if (!e->session_dir[0]) return;
    if (e->tsv_failed > e->nrows - 1) e->tsv_failed = e->nrows - 1;  // (rows replaced since: a :load)
    int64_t from = e->nrows - 1 - e->tsv_failed;
    char path[1100];
    dm_err derr = {0};
    int ok = 0, why = 0;
    const char *whymsg = NULL;
    if (engine_session_dir_check(e, &derr)) {
        whymsg = derr.msg;
    } else {
        snprintf(path, sizeof path, "%s/metrics.tsv", e->session_dir);
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        // O_NONBLOCK: a fifo in its place would block the open until a reader came (a hang);
        // only a regular file takes rows
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
        struct stat st;
        int regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
        if (fd >= 0 && !regular) { close(fd); fd = -1; errno = EINVAL; }
        if (fd >= 0 && m) {
            // an empty file where rows were written (deleted, or emptied, under the run: a cleanup
            // of runs/*/metrics.tsv): every row again, from memory, said (it went on with the new
            // rows alone, the run's first steps gone from it in silence: QA, session 41)
            if (st.st_size == 0 && from > 0) {
                engine_note(e, "%s was empty (deleted or emptied during the run?): written again with all %d rows", path, e->nrows);
                from = 0;
            }
            if (st.st_size == 0) engine_tsv_header(m);
            for (int64_t k = from; k < e->nrows; k++) engine_tsv_row(m, &e->rows[k]);
            fflush(m);
            size_t done = 0;
            while (done < len) {
                ssize_t w = write(fd, buf + done, len - done);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) { why = w < 0 ? errno : EIO; break; }
                done += (size_t)w;
            }
            ok = done == len;
            if (!ok && done && ftruncate(fd, st.st_size) != 0) {}  // no half row left behind
        } else {
            why = errno;
        }
        if (fd >= 0 && close(fd) != 0 && ok) { ok = 0; why = errno; }
        if (m) fclose(m);
        free(buf);
    }
    if (ok) {
        if (e->tsv_failed)
            engine_note(e, "%s is written again: the %lld rows it had missed are in it now", path, (long long)e->tsv_failed);
        e->tsv_failed = 0;
        return;
    }
    // loud, once per streak: the rows stay in memory (and go into the next checkpoint: -r
    // rewrites metrics.tsv from it); they are written with the next row that can be, and dmsh
    // exits non-zero if some never are
    if (!e->tsv_failed) {
        if (whymsg) engine_note(e, "metric rows not written: %s (they stay in memory and in the next checkpoint)", whymsg);
        else engine_note(e, "cannot write %s: %s (metric rows stay in memory and in the next checkpoint)", path, strerror(why));
    }
    e->tsv_failed++;
}

void engine_add_row(Engine *e, const MetricRow *r) {
    if (e->nrows == e->caprows) {
        e->caprows = e->caprows ? 2 * e->caprows : 1024;
        e->rows = realloc(e->rows, sizeof(MetricRow) * e->caprows);
        if (!e->rows) { fprintf(stderr, "%s:%d: out of memory for metrics\n", __FILE__, __LINE__); exit(1); }
    }
    MetricRow *row = &e->rows[e->nrows++];
    *row = *r;
    if (row->kind == 0) row->emulated = e->emulated;  // (the backend that ran the step: a move reports first)
    append_tsv(e);
}

int engine_step(Engine *e, MetricRow *row, dm_err *err) {
    if (engine_step_enqueue(e, err)) {
        memset(row, 0, sizeof *row);
        row->kind = -1;  // refused before it ran: no row
        return 1;
    }
    int rc = engine_report(e, row, err);  // step.c: the split, the record ring and the step graph
    if (row->kind == 0) row->emulated = e->emulated;  // as engine_add_row marked its copy
    return rc;
}

// Live keys the model copy must follow (the model reads its own cfg for loss, lam_max, ...).
static void sync_model_cfg(Engine *e) {
    if (!e->live) return;
    Config arch = e->model.cfg;
    e->model.cfg = e->cfg;
    // architecture keys stay as built
    e->model.cfg.d = arch.d; e->model.cfg.H = arch.H; e->model.cfg.L = arch.L; e->model.cfg.E = arch.E;
    e->model.cfg.k = arch.k; e->model.cfg.r = arch.r; e->model.cfg.f = arch.f;
    e->model.cfg.engram_rows = arch.engram_rows; e->model.cfg.engram_dim = arch.engram_dim;
    e->model.cfg.n_orders = arch.n_orders;
    memcpy(e->model.cfg.engram_orders, arch.engram_orders, sizeof arch.engram_orders);
}

int engine_set_many(Engine *e, int n, const char *const *keys, const char *const *values, dm_err *err) {
    if (engine_report(e, NULL, err)) return 1;  // pending steps ran with the old values: report them first
    // all or nothing, and the rules between keys (d divisible by H, k <= E, r <= min(d, f)) are
    // checked once on the final values: `:set d=3 H=3 r=3` is valid whatever the order
    Config t = e->cfg;
    int user_steps = 0, decay = 0;  // (decay: a key of the decay rule is set: only then is it checked)
    for (int i = 0; i < n; i++) {
        const ConfigKey *k = config_find_key(keys[i]);
        if (k && k->arch && e->live) {  // a live model's shape: only its own value again
            char cur[128], nv[128];
            config_get(&e->cfg, k, cur, sizeof cur);
            Config u = e->cfg;
            if (config_set(&u, keys[i], values[i], err)) return 1;
            config_get(&u, k, nv, sizeof nv);
            // engram_ram is a placement, not a shape: a checkpoint loads into either, so the
            // trained weights can move (QA, session 32: only the fresh :init was named)
            if (strcmp(cur, nv) != 0 && !strcmp(keys[i], "engram_ram"))
                return dm_fail(err, "'engram_ram' places the live model's tables (engram_ram=%s): `:save F; :init engram_ram=%s; :load F` "
                               "moves this model's weights there (a checkpoint loads into either placement); `:init engram_ram=%s` "
                               "alone builds a new model", cur, nv, nv);
            if (strcmp(cur, nv) != 0)
                return dm_fail(err, "'%s' is an architecture key and the model is live (%s=%s): `:init %s=%s` builds a new model with it "
                               "(the live one is replaced; in a session, saved first)", keys[i], keys[i], cur, keys[i], nv);
            continue;
        }
        if (config_set(&t, keys[i], values[i], err)) return 1;
        user_steps |= !strcmp(keys[i], "steps");
        decay |= config_decay_key(keys[i]);
    }
    if (config_validate(&t, err) || (decay && config_validate_decay(&t, 1, err)) || (e->live && model_shape_check(e->be, &t, t.batch, t.seq, err))) return 1;
    if (e->has_data && t.seq != e->cfg.seq && data_fits(&e->data, t.seq, err)) return 1;
    // eval_bytes < seq is taken (config_validate_eval): a script or a preset may set the two keys
    // on lines of their own, in any order, and a state between them is no error
    e->cfg = t;
    if (user_steps) e->steps_auto = 0;  // the user's horizon from now on
    sync_model_cfg(e);
    if (e->be && e->be->set_precision) e->be->set_precision(e->cfg.precision_fp32);  // live: next product
    return 0;
}

int engine_set(Engine *e, const char *key, const char *value, dm_err *err) {
    return engine_set_many(e, 1, &key, &value, err);
}

// Ctrl-C (SIGINT, SIGTERM in scripts): long commands check it between their units of work
static int interrupted(const Engine *e) { return e->interrupt && *e->interrupt; }

void engine_counters(const Engine *e, char *buf, size_t n) {
    char arms[512];
    arms_format(&e->model.arms, arms, sizeof arms);
    // measured now, on the weights as they are: the value the last retraction left goes stale
    // as soon as an update runs without one (retract arm off, retract_every > 1, moe arm off)
    double orth = e->live ? model_orth_error(&e->model) : e->last_orth_err;
    char ov[48];
    if (orth < 0) snprintf(ov, sizeof ov, "n/a (no device memory for it)");
    else snprintf(ov, sizeof ov, "%.2e", orth);
    snprintf(buf, n, "%s skipped=%lld orth_err=%s", arms, (long long)e->opt.total_skips, ov);
}

void engine_config_text(const Config *c, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < dm_n_config_keys && used < n; i++) {
        char v[128];
        config_get(c, &dm_config_keys[i], v, sizeof v);
        used += snprintf(buf + used, n - used, ":set %s=%s\n", dm_config_keys[i].name, v);
    }
}

// ---- determinism -------------------------------------------------------------------------

int engine_check_determinism(Engine *e, int n, int *ok, char *msg, size_t nmsg, dm_err *err) {
    if (engine_need(e, 1, err)) return 1;
    if (engine_report(e, NULL, err)) return 1;
    if (n < 1) return dm_fail(err, "steps must be >= 1");
    size_t P = e->model.n_params;
    Snapshot s0;
    if (snapshot_take(&s0, e, err)) return 1;
    // the state after each pass: parameters, and the optimizer's moments, momentum and row
    // step counts (the next steps depend on them as much as on the weights)
    size_t R = (size_t)e->cfg.n_orders * e->cfg.engram_rows;
    real *p1 = mallocCheck(sizeof(real) * P * 4);
    int64_t *r1 = mallocCheck(sizeof(int64_t) * (R ? R : 1));
    double *l1 = mallocCheck(sizeof(double) * n);
    char sess[1024];
    snprintf(sess, sizeof sess, "%s", e->session_dir);
    e->session_dir[0] = 0;  // the first pass is not part of the run's metrics
    int rc = 0;
    MetricRow row;
    int stop1 = 0;
    for (int i = 0; i < n && !rc && !(stop1 = interrupted(e)); i++) { rc = engine_step(e, &row, err); l1[i] = row.loss; }
    model_params_get(&e->model, p1);  // wherever they live
    optim_state_get(&e->opt, &e->model, p1 + P, p1 + 2 * P, p1 + 3 * P, r1);
    snapshot_restore(&s0, e);
    snprintf(e->session_dir, sizeof e->session_dir, "%s", sess);
    if (stop1 && !rc) {  // Ctrl-C in the first pass: the state is back where it started
        e->intr_honored++;
        snapshot_free(&s0);
        free(p1); free(r1); free(l1);
        return dm_fail(err, "interrupted in the first pass: nothing checked; the model is back at step %lld", (long long)e->step);
    }
    int first_diff = -1, stop2 = 0;
    for (int i = 0; i < n && !rc && !(stop2 = interrupted(e)); i++) {
        rc = engine_step(e, &row, err);
        if (first_diff < 0 && memcmp(&row.loss, &l1[i], sizeof(double)) != 0) first_diff = i;
    }
    if (stop2 && !rc) {  // in the second pass: its steps are the run's (in the metrics), kept
        e->intr_honored++;
        snapshot_free(&s0);
        free(p1); free(r1); free(l1);
        return dm_fail(err, "interrupted in the second pass: nothing checked; the model keeps the steps it took, now at step %lld",
                       (long long)e->step);
    }
    real *p2 = mallocCheck(sizeof(real) * P * 4);
    int64_t *r2 = mallocCheck(sizeof(int64_t) * (R ? R : 1));
    model_params_get(&e->model, p2);
    optim_state_get(&e->opt, &e->model, p2 + P, p2 + 2 * P, p2 + 3 * P, r2);
    size_t pdiff = 0, odiff = 0;
    for (size_t j = 0; j < P; j++) pdiff += memcmp(&p1[j], &p2[j], sizeof(real)) != 0;
    for (size_t j = P; j < 4 * P; j++) odiff += memcmp(&p1[j], &p2[j], sizeof(real)) != 0;
    for (size_t j = 0; j < R; j++) odiff += r1[j] != r2[j];
    free(p2); free(r2);
    *ok = !rc && first_diff < 0 && pdiff == 0 && odiff == 0;
    if (!rc) {
        char ld[64];
        if (first_diff < 0) snprintf(ld, sizeof ld, "identical");
        else snprintf(ld, sizeof ld, "DIFFER from step %lld", (long long)(s0.step + first_diff));
        // the second pass is the run's own (its steps are in the metrics): say where it now is
        snprintf(msg, nmsg, "%d step%s twice from step %lld: losses %s, parameters %s (%zu of %zu differ), optimizer state %s (%zu of %zu moments, momenta and row counts differ); the model kept the second pass, now at step %lld",
                 n, n == 1 ? "" : "s", (long long)s0.step, ld, pdiff ? "DIFFER" : "bit-identical", pdiff, P, odiff ? "DIFFERS" : "bit-identical", odiff,
                 3 * P + R, (long long)e->step);
    }
    snapshot_free(&s0);
    free(p1); free(r1); free(l1);
    return rc;
}

int engine_session(Engine *e, const char *dir, dm_err *err) {
    char path[1100];
    const char *sub[] = {"", "/ckpt", "/plots"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", dir, sub[i]);
        // mkdir -p for the first component chain
        for (char *p = path + 1; *p; p++)
            if (*p == '/') { *p = 0; mkdir(path, 0755); *p = '/'; }
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return dm_fail(err, "cannot create %s: %s", path, strerror(errno));
        struct stat st;  // EEXIST: a file there would take every save, plot and resume
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return dm_fail(err, "%s exists and is not a directory: move it away, or choose another session", path);
    }
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int why = errno;
        if (fd >= 0) close(fd);
        return dm_fail(err, "cannot open %s: %s", dir, strerror(why));
    }
    if (e->session_ino && e->session_fd >= 0) close(e->session_fd);
    e->session_fd = fd;
    e->session_dev = (uint64_t)st.st_dev;
    e->session_ino = (uint64_t)st.st_ino;
    snprintf(e->session_dir, sizeof e->session_dir, "%s", dir);
    return 0;
}

// The session is held by identity, not by name: every write under session_dir checks the name
// still leads to the directory opened (a run whose directory was renamed wrote under the old
// name into a new run's session, mixing two runs' checkpoints, metrics and transcripts).
int engine_session_dir_check(Engine *e, dm_err *err) {
    if (!e->session_dir[0] || e->session_fd < 0 || !e->session_ino) return 0;  // (an Engine the tests set up by hand)
    struct stat st;
    if (stat(e->session_dir, &st) == 0 && (uint64_t)st.st_dev == e->session_dev && (uint64_t)st.st_ino == e->session_ino)
        return 0;
    char link[64], now[sizeof e->session_dir];
    snprintf(link, sizeof link, "/proc/self/fd/%d", e->session_fd);
    ssize_t n = readlink(link, now, sizeof now - 1);
    if (n >= (ssize_t)sizeof now - 1) n = 0;  // (a new path too long to keep: as if deleted)
    now[n > 0 ? n : 0] = 0;
    struct stat ns;
    if (n > 0 && !strstr(now, " (deleted)") && stat(now, &ns) == 0 && (uint64_t)ns.st_dev == e->session_dev &&
        (uint64_t)ns.st_ino == e->session_ino) {
        engine_note(e, "the session directory %s no longer leads to this run's directory (renamed, or the name now points elsewhere): the run's files go on in %s (nothing more is written under %s)",
                    e->session_dir, now, e->session_dir);
        snprintf(e->session_dir, sizeof e->session_dir, "%s", now);
        return 0;
    }
    return dm_fail(err, "the session directory %s was deleted while this run held it: nothing is written there (:save PATH keeps this state, :session NAME opens another session)",
                   e->session_dir);
}
