// cmd_state.c — a model into and out of files: :init (a new model, of the config or of the shape
// its words give), :save, :load and :session (a run's directory). In a session each leaves the
// state where dmsh -r resumes, and the state it replaces is saved first when it is in no file.
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "../sessions/session.h"
#include "shell.h"

#define E_ (sh->eng)
#define OUT (sh->out)

// In a session: the live state becomes the one -r resumes (LATEST names it; saved first when it
// is in no file of the session). The command that made it took effect already, so a failed save
// is a note, not a failure: the exit's save tries again.
static void make_resumable(Shell *sh, const char *what) {
    char saved[1300];
    dm_err aerr = {0};
    if (session_autosave(E_, saved, sizeof saved, &aerr))
        fprintf(OUT, "note: %s is not yet where dmsh -r resumes (%s); the exit's save puts it there\n", what, aerr.msg);
    else if (saved[0])
        fprintf(OUT, "saved %s (%s, where dmsh -r resumes)\n", saved, what);
}

// Arms a :load or :init switched (the checkpoint's own, or all on for a new model): said, since
// a user's `:arm X off` before it no longer holds.
static void say_arm_changes(Shell *sh, const int *before, int had, const char *why) {
    if (!E_->live) return;
    if (!had) {  // no model before: the arms the file holds off (QA, session 35: unsaid)
        char off[64] = "";
        arms_mask_names(arms_off_mask(&E_->model.arms), off, sizeof off);
        if (off[0]) fprintf(OUT, "note: arms off in %s: %s (:arm NAME on switches one back)\n", why, off);
        return;
    }
    char buf[256] = "";
    size_t used = 0;
    for (int a = 0; a < ARM_COUNT; a++)
        if (before[a] != E_->model.arms.on[a])
            used += snprintf(buf + used, sizeof buf - used, "%s%s %s -> %s", used ? ", " : "", dm_arm_names[a],
                             before[a] ? "on" : "off", E_->model.arms.on[a] ? "on" : "off");
    if (used) fprintf(OUT, "note: arms switched by %s: %s\n", why, buf);
}

// :init's key=value words: preset=NAME first (its file's keys), then any config key, the
// architecture's too. A live model keeps its shape under :set, so this is how one is rebuilt in
// another (the refusal's hint named :init, which rebuilt the old shape: QA, session 23). All or
// nothing, checked as engine_build will before anything is saved or replaced.
static int init_config(Shell *sh, Words *w, Config *t, int *user_steps, int *decay_word, dm_err *err) {
    *t = E_->cfg;
    *user_steps = 0;
    const char *pn = NULL;
    for (int i = 1; i < w->argc; i++) {
        const char *eq = sh_eq(w, i);
        if (!eq) return dm_fail(err, ":init: unexpected argument '%s' (key=value: seed=N, preset=NAME or a config key)", w->argv[i]);
        for (int j = 1; j < i; j++)
            if (!w->lit[j] && strncmp(w->argv[j], w->argv[i], (size_t)(eq - w->argv[i]) + 1) == 0)
                return dm_fail(err, ":init: option '%.*s' given twice", (int)(eq - w->argv[i]), w->argv[i]);
        if (eq - w->argv[i] == 6 && !strncmp(w->argv[i], "preset", 6)) pn = eq + 1;
    }
    if (pn) {
        Config probe;
        if (config_preset(&probe, pn, err)) return 1;
        char origin[80];
        snprintf(origin, sizeof origin, "configs/%.60s.dm", pn);
        if (config_apply_text(t, config_preset_text(pn), origin, err)) return 1;
    }
    int decay = 0;
    for (int i = 1; i < w->argc; i++) {
        char key[64];
        const char *eq = sh_eq(w, i);
        snprintf(key, sizeof key, "%.*s", (int)(eq - w->argv[i] < 63 ? eq - w->argv[i] : 63), w->argv[i]);
        if (!strcmp(key, "preset")) continue;
        if (config_set(t, key, eq + 1, err)) return 1;
        // the split of the open corpus is :set's (it re-splits and says so); a new model alone
        // would record an eval_frac its batches do not come from
        if (!strcmp(key, "eval_frac") && t->eval_frac != E_->cfg.eval_frac && E_->has_data && !E_->eval_path[0])
            return dm_fail(err, ":init: eval_frac splits the open corpus: `:set eval_frac=%s` first (it re-splits), then :init", eq + 1);
        *user_steps |= !strcmp(key, "steps");
        decay |= config_decay_key(key);
    }
    *decay_word = decay;
    // (the decay rule only when a word sets one of its keys: a loaded older file may be past it)
    if (config_validate(t, err) || (decay && config_validate_decay(t, 1, err)) || model_shape_check(E_->be, t, t->batch, t->seq, err)) return 1;
    if (E_->has_data && t->seq != E_->cfg.seq && data_fits(&E_->data, t->seq, err)) return 1;
    return 0;
}

int cmd_init(Shell *sh, Words *w, dm_err *err) {
    Config tmp, cfg_before = E_->cfg;
    int user_steps, decay_word = 0;
    if (init_config(sh, w, &tmp, &user_steps, &decay_word, err)) return 1;
    uint64_t seed = tmp.seed;
    // in a session, the model :init replaces keeps its state: saved first if it is in no file
    // (its rows leave metrics.tsv below; its checkpoint keeps them, as a :session switch does)
    int rows_before = E_->live && E_->session_dir[0] ? E_->nrows : 0;
    char rows_in[sizeof E_->synced_path] = "";
    if (E_->session_dir[0] && E_->live) {
        char saved[1300];
        if (session_autosave(E_, saved, sizeof saved, err)) return 1;
        if (saved[0]) fprintf(OUT, "saved %s (the model :init replaces)\n", saved);
        snprintf(rows_in, sizeof rows_in, "%s", saved[0] ? saved : E_->synced_path);
    }
    // a horizon the first :train chose belongs to that model's run
    int auto0 = E_->steps_auto;
    if (E_->steps_auto && !user_steps) tmp.steps = 0;
    E_->steps_auto = 0;
    int arms0[ARM_COUNT] = {0}, had = E_->live;
    for (int a = 0; had && a < ARM_COUNT; a++) arms0[a] = E_->model.arms.on[a];
    // what the words changed, said (a preset= sets up to a dozen keys); the seed is on the init
    // line, and a dropped horizon is the rule above
    char changed[1024] = "";
    Config was = cfg_before;
    was.seed = tmp.seed;
    if (!user_steps) was.steps = tmp.steps;
    config_set_diff(&was, &tmp, changed, sizeof changed);
    // where the model this :init replaces is kept, for a build that fails once it is gone
    int kept = had && !engine_unsaved(E_);
    char kept_in[sizeof E_->synced_path];
    snprintf(kept_in, sizeof kept_in, "%s", E_->synced_path);
    long long step_before = (long long)E_->step;
    E_->cfg = tmp;
    if (engine_build(E_, seed, err)) {
        // a build that failed after the live model was let go (an allocation past the host's
        // limit): said, with where that model is, which the refusal's words did not (QA, session 41)
        if (had && !E_->live) {
            size_t l = strlen(err->msg);
            if (kept && kept_in[0])
                snprintf(err->msg + l, sizeof err->msg - l, "; the model it replaced (step %lld) is no longer in memory: :load %s brings it back",
                         step_before, kept_in);
            else
                snprintf(err->msg + l, sizeof err->msg - l, "; the model it replaced (step %lld) is no longer in memory, and was in no file "
                         "(:save before an :init that may not fit, or work in a :session, which saves it first)", step_before);
        }
        E_->cfg = cfg_before;
        E_->steps_auto = auto0;
        // (the build set the backend's precision from the new config: the session's again)
        if (E_->be && E_->be->set_precision) E_->be->set_precision(E_->cfg.precision_fp32);
        return 1;
    }
    if (changed[0]) fprintf(OUT, "config: %s\n", changed);
    // the sign-flip note :set gives, for :init's words too (QA, session 41: `:init lr=4 wd=0.3`,
    // a factor of -0.2 a step, said nothing)
    char dnote[300];
    if (decay_word && config_decay_note(&E_->cfg, dnote, sizeof dnote)) fprintf(OUT, "note: %s\n", dnote);
    if (session_write_config(E_, err)) return 1;
    // a new model starts a new run: metrics.tsv holds its rows only (the last model's are in its
    // checkpoints), as after a :load
    if (E_->session_dir[0] && session_rewrite_metrics(E_, err)) return 1;
    size_t comp, tab;
    model_param_counts(&E_->model, &comp, &tab);
    fprintf(OUT, "init seed %llu: %zu compute params + %zu memory-table (%.2fM + %.2fM), device %s (%s)\n",
            (unsigned long long)seed, comp, tab, comp / 1e6, tab / 1e6, E_->device[0] ? E_->device : "cpu", REAL_NAME);
    // dmsh starts on the CPU wherever it runs (docs/decisions.md); on a machine whose driver lists
    // a GPU, a model built on the CPU without a :device is said (SPEC §0: "on the GPU when there
    // is one"; an audit, session 40). DMSH_NVIDIA_GPUS_DIR: the directory read instead (tests).
    int ngpu = !strcmp(E_->device[0] ? E_->device : "cpu", "cpu") && !E_->device_chosen ? host_nvidia_gpus(getenv("DMSH_NVIDIA_GPUS_DIR")) : 0;
    if (ngpu > 0)
        fprintf(OUT, "note: %d NVIDIA GPU%s visible here, and this model is on the CPU: `:device cuda` moves it there (dmsh starts on "
                "the CPU wherever it runs; `:device cpu` keeps it here without this note)\n", ngpu, ngpu > 1 ? "s" : "");
    say_arm_changes(sh, arms0, had, ":init (a new model starts with every arm on)");
    if (rows_before)  // (said: a researcher reading metrics.tsv lost the first model's record in silence: QA, session 29)
        fprintf(OUT, "note: %s/metrics.tsv now holds the new model's rows; the %d of the model it replaced are in %s (:load brings them back)\n",
                E_->session_dir, rows_before, rows_in[0] ? rows_in : "no checkpoint");
    // a session that holds checkpoints of another model: -r resumes this one from now on (LATEST
    // names its step 0), as after a :load. A process killed after the :init resumed the model it
    // replaced, "from its last checkpoint", with this one's settings called lost (QA, session 23).
    char held[1300];
    long long hstep;
    if (E_->session_dir[0] && (had || !session_latest_ckpt(E_->session_dir, held, sizeof held, &hstep)))
        make_resumable(sh, "the new model");
    return 0;
}

int cmd_save(Shell *sh, Words *w, dm_err *err) {
    if (sh_check_keys(w, 1, NULL, err)) return 1;
    char path[PATH_MAX], note[2 * PATH_MAX + 128] = "";  // two whole paths: the link and its target
    const char *p = sh_positional(w, 0);
    if (p) {  // a path given is the user's to overwrite (said when it held a checkpoint)
        char owner[1100];
        if (session_foreign_ckpt_dir(E_, p, owner, sizeof owner))
            return dm_fail(err, "%s: inside the checkpoints of session %s (its resume reads them): not written; "
                           "choose another path", p, owner);
        struct stat st;
        int existed = stat(p, &st) == 0;
        // a link is replaced by the file (the save renames a temp file onto the name), and the
        // file it pointed to stays as it was: said so (it read "replaced the checkpoint")
        char target[PATH_MAX] = "";
        ssize_t tl = lstat(p, &st) == 0 && S_ISLNK(st.st_mode) ? readlink(p, target, sizeof target - 1) : -1;
        if (tl >= 0) target[tl] = 0;
        if (tl == (ssize_t)sizeof target - 1) snprintf(target, sizeof target, "a target too long to name");
        // (a longer path was cut to fit and another file written: "saved .../model.ck": QA, session 24)
        if (strlen(p) >= sizeof path)
            return dm_fail(err, ":save: the path is %zu bytes long, at most %zu: not written", strlen(p), sizeof path - 1);
        // in the session's own ckpt/, a name -r reads (a hidden one or a .tmp was written, named by
        // LATEST, then passed over by -r, which resumed an older state: QA, session 24)
        const char *bn = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        size_t bl = strlen(bn);
        if ((bn[0] == '.' || (bl >= 4 && !strcmp(bn + bl - 4, ".tmp"))) && session_own_ckpt(E_, p))
            return dm_fail(err, "%s: in this session's ckpt/ a checkpoint needs a name dmsh -r reads (not hidden, not .tmp: "
                           "those are temp files): choose another", p);
        snprintf(path, sizeof path, "%s", p);
        if (engine_save(E_, path, err)) return 1;
        if (tl >= 0)
            snprintf(note, sizeof note, "%s was a link to %s: the link is replaced by this checkpoint, the file it named is unchanged",
                     p, target);
        else if (existed) snprintf(note, sizeof note, "replaced the checkpoint that was at %s", p);
        // a name of the user's in the session's own ckpt/: -r resumes from it from now on, as
        // after a :save without a path (LATEST was written only by the exit's save)
        if (session_own_ckpt(E_, path)) make_resumable(sh, "this state");
    } else if (!E_->session_dir[0]) {  // the working directory (a --replay child: its own scratch)
        if (session_save_default(E_, path, sizeof path, note, sizeof note, err)) return 1;
    } else if (session_save(E_, path, sizeof path, note, sizeof note, err)) {
        return 1;
    }
    fprintf(OUT, "saved %s (step %lld)\n", path, (long long)E_->step);
    if (note[0]) fprintf(OUT, "note: %s\n", note);
    return 0;
}

int cmd_load(Shell *sh, Words *w, dm_err *err) {
    if (w->argc != 2) return dm_fail(err, "usage: :load PATH");
    int arms0[ARM_COUNT] = {0}, had = E_->live;
    for (int a = 0; had && a < ARM_COUNT; a++) arms0[a] = E_->model.arms.on[a];
    Config cfg0 = E_->cfg;
    // in a session, the model :load replaces keeps its state, as with :init: saved first if it is
    // in no file (metrics.tsv is rewritten to the loaded rows below; before, the steps since the
    // last save were in no file at all). A file that does not read as a checkpoint, or one of
    // another shape, is refused first, so a mistyped path writes nothing.
    if (E_->session_dir[0] && E_->live && engine_unsaved(E_)) {
        if (engine_load_check(E_, w->argv[1], err)) return 1;
        char saved[1300];
        if (session_autosave(E_, saved, sizeof saved, err)) return 1;
        if (saved[0]) fprintf(OUT, "saved %s (the state before this :load)\n", saved);
    }
    int rows0 = E_->nrows;
    char left[sizeof E_->synced_path];  // the file that holds the state left behind, and its rows
    snprintf(left, sizeof left, "%s", had ? E_->synced_path : "");
    if (engine_load(E_, w->argv[1], err)) return 1;
    fprintf(OUT, "loaded %s: step %lld, %lld tokens\n", w->argv[1], (long long)E_->step, (long long)E_->tokens);
    say_arm_changes(sh, arms0, had, "the checkpoint (it keeps its own)");
    char diff[1024];
    if (had && config_live_diff(&cfg0, &E_->cfg, diff, sizeof diff))
        fprintf(OUT, "note: settings set by the checkpoint (it keeps its own): %s\n", diff);
    // no model was live: the checkpoint's config is the model's, and what was set before it is
    // replaced, said (it was silent: a :set d=64 lr=0.01 before the :load just went away)
    if (!had && config_set_diff(&cfg0, &E_->cfg, diff, sizeof diff))
        fprintf(OUT, "note: the checkpoint's config replaces the settings before it: %s\n", diff);
    // in a session, metrics.tsv follows the loaded rows (the rows after them belong to the state
    // left behind, which its own checkpoints keep)
    if (E_->session_dir[0] && session_rewrite_metrics(E_, err)) return 1;
    // (said: an analysis of metrics.tsv after a :load to compare checkpoints found half a run:
    // QA, session 35)
    if (E_->session_dir[0] && had && rows0 != E_->nrows)
        fprintf(OUT, "note: metrics.tsv now holds the loaded state's %d rows (it held %d%s%s%s)\n", E_->nrows, rows0,
                left[0] ? "; the state left behind keeps its rows in " : "", left, left[0] ? ", :load it to have them back" : "");
    // and -r resumes the loaded state from now on, not only after a clean exit: LATEST names it
    // (a file from elsewhere is copied into ckpt/ first). A crash after a :load resumed the branch
    // the user had left, as "its last checkpoint" (QA, session 23).
    if (E_->session_dir[0]) make_resumable(sh, "the loaded state");
    return 0;
}

// A :quit or Ctrl-D at the prompt whose session save failed (a full disk) left at once, the
// trained state in no file, though the prompt could have stayed for the user to free space or
// save elsewhere (QA, session 41; :init and :session already refuse to drop an unsaved state).
int sh_leave_save(Shell *sh) {
    Engine *e = sh->eng;
    if (sh->leave_refused || !e || !e->session_dir[0] || !e->live) return 0;
    dm_err err = {0};
    char saved[1300];
    if (!session_autosave(e, saved, sizeof saved, &err)) {
        if (saved[0]) fprintf(stderr, "dmsh: saved %s\n", saved);
        return 0;
    }
    sh->leave_refused = 1;
    fprintf(stderr, "error: the session's save on the way out failed: %s\n"
                    "dmsh: still here, since the state is in no file: fix that (free space) or `:save PATH` elsewhere; "
                    "`:quit` again saves once more and leaves either way\n", err.msg);
    return 1;
}

int cmd_session(Shell *sh, Words *w, dm_err *err) {
    if (w->argc != 2) return dm_fail(err, "usage: :session NAME (creates runs/NAME)");
    if (!w->argv[1][0]) return dm_fail(err, "usage: :session NAME: the name is empty (it becomes runs/NAME)");
    if (strchr(w->argv[1], '/') || w->argv[1][0] == '.') return dm_fail(err, "session name '%s': use a plain name (it becomes runs/NAME)", w->argv[1]);
    // a line break or an escape byte in a directory name broke every line that names it (the
    // session line, :sessions, -r's; QA, session 27)
    for (const char *c = w->argv[1]; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return dm_fail(err, "session name with a control byte (0x%02x): use a plain name (it becomes runs/NAME)", (unsigned char)*c);
    if (getenv("DMSH_DIGEST")) {  // a `dmsh --replay` process: its twin would meet it in runs/NAME
        fprintf(OUT, "session runs/%s not opened: a --replay run leaves sessions alone\n", w->argv[1]);
        return 0;
    }
    char dir[1100];
    snprintf(dir, sizeof dir, "runs/%s", w->argv[1]);
    // another run's directory: its checkpoints would be overwritten step for step and its
    // metrics.tsv appended to (dmsh -r resumes a run in its own directory)
    char latest[1200];
    long long lstep;
    struct stat mst;
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/metrics.tsv", dir);
    int has_ck = !session_latest_ckpt(dir, latest, sizeof latest, &lstep);
    // (the session we are in, however -r spelled it: runs/X/, ./runs/X)
    int here = session_same_dir(E_->session_dir, dir);
    if (!here && session_in_use(dir, err)) return 1;
    // (a LATEST naming a file that is gone: said, with where -r falls back to, if anywhere)
    char why[2048];
    int lost = session_latest_broken(dir, why, sizeof why);
    if (!here && (has_ck || lost || (stat(mpath, &mst) == 0 && mst.st_size > 0))) {
        if (has_ck)
            return dm_fail(err, "%s already holds a run (%s%s%s): dmsh -r %s resumes it%s; a new run needs a new name", dir, latest,
                           lost ? "; " : "", lost ? why : "", dir, lost ? " from there" : "");
        if (lost)
            return dm_fail(err, "%s already holds a run (%s, and no checkpoint is there: dmsh -r cannot resume it): a new run needs a new name",
                           dir, why);
        return dm_fail(err, "%s already holds a run with no checkpoint (metrics.tsv; it stopped before its first save, so it cannot be resumed): remove %s or choose a new name",
                       dir, dir);
    }
    // leaving a session keeps its state, as leaving dmsh does: `dmsh -r` of the old one resumes
    // where this switch left it (its rows alone would make it a run that cannot be resumed)
    if (E_->session_dir[0] && !here) {
        char saved[1300];
        if (session_autosave(E_, saved, sizeof saved, err)) return 1;
        if (saved[0]) fprintf(OUT, "saved %s\n", saved);
    }
    if (session_open(E_, dir, err)) return 1;
    fprintf(OUT, "session %s\n", dir);
    return 0;
}
