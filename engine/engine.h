// engine.h — the one Engine every command operates on: config, model, optimizer, data,
// metrics, session. The library the REPL and the tests call; it never prints to a terminal:
// results come back as values and errors as dm_err.
#pragma once
#include <stdio.h>
#include <signal.h>
#include <stdint.h>
#include "config.h"
#include "data.h"
#include "model.h"
#include "ngram.h"
#include "optim.h"
#include "step.h"

typedef struct {
    int64_t step, tokens;       // step index (0-based) of the row, tokens seen after it
    double loss, lr, gnorm, ms, tok_s;
    int16_t skipped;            // 1: the firewall skipped this step's update
    uint16_t arms_off;          // the arms that were off (bit ArmId: arms_off_mask) when the row was
                                // made; 0 in checkpoints older than it (the two once were one int)
    float expert_frac[16];      // share of routed assignments per expert this step (E <= 16; else 0)
    // eval rows (kind = 1): bpb at depth over window bytes
    int kind;                   // 0 train, 1 eval (-1: engine_step refused the step, no row)
    double bpb;
    int64_t window;
    union {                     // (one int for two: checkpoints store the rows raw, all 152 bytes taken)
        int depth;              // eval rows: the depth scored
        int emulated;           // train rows: 1 when ms and tok_s were timed on an emulated device
                                // (tests/cuemu: the CUDA code on the CPU), never a GPU's times;
                                // 0 otherwise (and in older checkpoints: their train rows hold 0)
    };
    uint32_t eval_set;          // eval rows: the identity of the bytes scored (eval_set_end); 0 unknown
} MetricRow;
// Checkpoints store the rows raw: eval_set sits in what was the tail padding, so the size (and
// every older checkpoint's layout) is unchanged. Its value travels in section metrics.eval_set.
_Static_assert(sizeof(MetricRow) == 152, "MetricRow's layout is part of the checkpoint format");

typedef struct {
    double bpb[64];             // per depth (1-based index d-1); NAN where not computed
    int depth_lo, depth_hi;     // depths computed
    int64_t nseq, T, window;    // the window: nseq x T bytes
    uint32_t eval_set;          // the identity of its bytes (eval_set_end)
    int64_t arm_fwd[ARM_COUNT]; // arm forward executions during this eval
    int64_t engram_rows;        // Engram table rows the window's tokens read (tokens x orders)
    int64_t pad_seqs;           // copies that filled a short last batch (the forward ran them too)
    int64_t engram_pad_rows;    // ... and the table rows they read
} EvalResult;

typedef struct Engine {
    Config cfg;
    const Backend *be;          // where :init builds the model (backend_cpu() until :device)
    char device[16];            // "cpu", "cuda:0", ...
    int device_chosen;          // a :device ran (or -r went back to one): no "a GPU is visible" note
    char resume_dev[16];        // -r: the device the session's transcript last chose, when not this
                                // one ("" otherwise): repl/main.c moves the resumed model there
    int emulated;               // be is the CUDA code emulated on the CPU (tests/cuemu): its train
                                // rows are marked (MetricRow.emulated)
    int live;                   // model + optimizer exist
    Model model;
    Optim opt;
    Data data;
    int has_data;
    char data_path[1024], eval_path[1024];
    uint64_t data_fp;           // data_fingerprint of the open corpus (0: none)
    uint64_t split_fp[2];       // data_split_fingerprint of its training and held-out splits
    uint64_t stream_fp;         // data_stream_fingerprint: the training corpus's bytes, split aside
    int data_drift_noted;       // the corpus's bytes changed on disk since :data opened it (said;
                                // data_fp then follows the new bytes)
    int64_t step, tokens;       // steps taken (the next step's index), bytes trained on
    int64_t trained_upto;       // the longest training split (bytes from the start of the open
                                // corpus) the live model's steps drew windows from: a held-out
                                // split that starts below it is not held out (0: none known)
    Anchors anchors;
    int has_anchors;
    MetricRow *rows;
    int nrows, caprows;
    double last_orth_err;
    int64_t synced_step;        // the step of the state last saved or loaded (-1: none)
    int synced_nrows;           // the metric rows it held (rows added since are in no file yet)
    char synced_path[4096];     // the file it was saved to / loaded from (realpath when known)
    uint64_t synced_settings;   // engine_settings_hash of that state (a :set or :arm since is unsaved)
    uint64_t synced_extras;     // engine_extras_hash of it (a :gen's counts or an :anchors since is unsaved)
    uint64_t synced_corpus;     // engine_corpus_hash of it (another corpus since: a save is a new file)
    int steps_auto;             // cfg.steps was set by the first :train, not by the user: a new
                                // model (:init) starts without it, as a fresh process would
    char note[800];             // a pending message for the user (engine_notice), e.g. a resume
    int note_new;               // that left no corpus open
    int64_t tsv_failed;         // the last rows metrics.tsv lacks (a write failed; they stay in
                                // memory and go in with the next write that works)
    int64_t intr_honored;       // interrupts a command acted on (the transcript comments out only those lines)
    int fwd_kind;               // the activations in memory: 0 none (or stale), 1 training step, 2 eval,
                                // 3 a text (:probe NAME text=...)
    int fwd_undone;             // a restore (:bench) dropped the activations of steps it undid
    int fwd_moved;              // a :device move left the last forward's activations behind
    int fwd_cut;                // a refused step or eval (kernels/guard.h) left a partial forward's
    int fwd_pad;                // of those (an eval's last batch): sequences that are padding copies
    uint32_t fwd_text_fp;       // fwd_kind 3: FNV-1a of the text (two texts probed at one step get two
                                // histogram files, not one overwritten)
    unsigned char *fwd_text;    // fwd_kind 3: the text's bytes (fwd_text_n), for a later probe's per-byte listing
    int fwd_text_n;
    int64_t fwd_step;           // ... of step fwd_step (train: the step's index; eval: e->step then)
    // session (runs/NAME); empty: none
    char session_dir[1024];
    // the session directory's identity (engine_session): an O_PATH descriptor (-1: none), and its
    // device and inode, so a directory renamed or deleted under a running session is noticed
    int session_fd;
    uint64_t session_dev, session_ino;
    volatile sig_atomic_t *interrupt;   // set by Ctrl-C; checked at step boundaries
    StepRunner run;             // the training step's staging, record ring and graph (step.c)
} Engine;

void engine_init(Engine *e);
void engine_free(Engine *e);
int engine_build(Engine *e, uint64_t seed, dm_err *err);          // :init
// :device — choose the backend. Without a live model it only records the choice; with one, the
// trainable state (parameters, optimizer moments, counters, arms) moves to the new backend and
// training continues from the same step. On failure the model stays where it was.
int engine_set_device(Engine *e, const Backend *be, const char *name, dm_err *err);
int engine_open_data(Engine *e, const char *path, const char *eval_path, dm_err *err);
// One optimizer step; fills the row (also appended to metrics). Returns 1 with err when the
// NaN firewall stops the run. = engine_step_enqueue + engine_report.
int engine_step(Engine *e, MetricRow *row, dm_err *err);
// The step in two halves (step.h). Enqueue: the whole step, no host wait on a device (after
// warm-up one graph replay); it reports by itself first when STEP_RING steps are pending.
// Report: one download of the records of every pending step -> metric rows (appended, *last =
// the newest; last may be NULL), optimizer counters, and 1 with err when a step hit nan_limit:
// the steps enqueued after that one did nothing and are dropped (e->step is the one after it).
// Every engine function that reads the training state (eval, save, set, determinism, ...)
// reports first; a caller that enqueues reports before reading e->opt / e->rows itself.
int engine_step_enqueue(Engine *e, dm_err *err);
int engine_report(Engine *e, MetricRow *last, dm_err *err);
int engine_pending(const Engine *e);
// A one-line message about how steps run (e.g. "the step graph could not be captured: WHY;
// running eagerly"), once: NULL when there is nothing new to say.
const char *engine_notice(Engine *e);
// Leave a message for the next engine_notice (the newest wins).
void engine_note(Engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// 1 when the current state (step and metric rows) is in no checkpoint file yet
int engine_unsaved(const Engine *e);
// A hash of what a checkpoint keeps besides the weights and rows: the config text and the arms.
uint64_t engine_settings_hash(const Engine *e);
uint64_t engine_extras_hash(const Engine *e);  // the arms' counters, anchors, corpus, orth error
uint64_t engine_corpus_hash(const Engine *e);  // the corpus files named and their fingerprint
// the same of a corpus a checkpoint records (its paths, unterminated, and its fingerprint)
uint64_t engine_corpus_hash_of(const char *dp, size_t dn, const char *ep, size_t en, uint64_t fp);
// The eval window's sequences (SPEC §5) into *nseq; 1 with the reason and the fix when it holds
// none (eval_bytes < seq, or a held-out split shorter than one sequence). :eval, :anchors and a
// :train that evals check it first.
int engine_eval_window(const Engine *e, int64_t *nseq, dm_err *err);
// The window an eval would score now (the open corpus, the config's seq and eval_bytes): its
// bytes and identity, as on its eval rows (eval_set_end). 1 (err set) without data or a window.
int engine_eval_set_now(const Engine *e, int64_t *window, uint32_t *set, dm_err *err);
// Eval on the fixed window: depth k (1..L) or all depths (depth = 0).
int engine_eval(Engine *e, int depth, EvalResult *r, dm_err *err);
int engine_anchors(Engine *e, dm_err *err);
// The anchors as a reference for an eval of (window, set): NULL unless they were scored on those
// bytes and fit as the config now asks (anchor_fit_bytes: a :set after :anchors makes them
// another fit). set 0 (rows from before set ids) matches any set of the window's size.
const Anchors *engine_anchors_for(const Engine *e, int64_t window, uint32_t set);
// What a checkpoint's run reached, for :sessions (its state, metric rows and config sections
// alone are read): the last training loss, the last eval at its deepest depth (and the arms off
// in it), the shape, the arms off now. have_loss / have_eval 0 when it holds none.
typedef struct {
    long long step, loss_step, eval_step;
    int have_loss, have_eval, eval_depth;
    double loss, bpb;
    int64_t window;
    uint16_t arms_off, eval_arms_off, loss_arms_off;  // (the loss's step's arms off too: QA, session 41)
    char shape[160];            // "d=128 L=2 E=2 k=1"
} CkptSummary;
int engine_ckpt_summary(const char *path, CkptSummary *s, dm_err *err);
int engine_save(Engine *e, const char *path, dm_err *err);
// mode: CK_REPLACE (engine_save) or CK_NEW (engine/ckpt.h: 2 when the file appeared meanwhile)
int engine_save_mode(Engine *e, const char *path, int mode, dm_err *err);
int engine_load(Engine *e, const char *path, dm_err *err);
// What engine_load refuses before building anything (a file that is no checkpoint, another
// build's real, impossible counters, another architecture than the live model's): a :load checks
// it before it saves the state it would replace.
int engine_load_check(const Engine *e, const char *path, dm_err *err);
// The step a checkpoint holds, from its state section (ckpt_peek: a listing's cheap read; the
// other sections' bytes are not verified, engine_load_check does that).
int engine_ckpt_step(const char *path, long long *step, dm_err *err);
// Set a key; on a live model architecture keys are refused (their own value again is a no-op).
int engine_set(Engine *e, const char *key, const char *value, dm_err *err);
// Set n keys at once, all or nothing; the rules between keys are checked on the final values.
int engine_set_many(Engine *e, int n, const char *const *keys, const char *const *values, dm_err *err);
// After eval_frac changed (from old_frac) with a corpus open and no eval file: reopen the corpus
// with the new split (the split is made when it opens). On failure eval_frac goes back.
int engine_resplit(Engine *e, double old_frac, dm_err *err);
// Run n steps twice from the current state; compare losses and every parameter bit for bit.
// The state after is the state after n steps. *ok = 1 when identical; msg describes.
int engine_check_determinism(Engine *e, int n, int *ok, char *msg, size_t nmsg, dm_err *err);
void engine_add_row(Engine *e, const MetricRow *r);
// metrics.tsv's header and row format (the engine's appender and sessions/ rewrite share them)
void engine_tsv_header(FILE *f);
void engine_tsv_row(FILE *f, const MetricRow *r);
// "kda=on(4/4) engram=..." + skipped + orth error
void engine_counters(const Engine *e, char *buf, size_t n);
// Resolved config as commands that rebuild it (config.dm)
void engine_config_text(const Config *c, char *buf, size_t n);
int engine_session(Engine *e, const char *dir, dm_err *err);  // use/create runs dir
// Before a session write: the directory still has its name. Renamed while the run held it (mv
// runs/X runs/Y): the run follows it (session_dir becomes its new path, said in a note). Deleted:
// 1 with err set (nothing is written under the name, which may now be another run's).
int engine_session_dir_check(Engine *e, dm_err *err);
// The open corpus's sampled bytes against its fingerprint (an eval and a save call it): a file
// rewritten in place since (the same size: nothing else notices) is said in a note, once per
// change; the fingerprint then follows the new bytes.
void engine_corpus_check(Engine *e);
