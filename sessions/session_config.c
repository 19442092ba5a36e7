// session_config.c — config.dm: the lines that rebuild a session's config and corpus (and the
// same lines at the head of a session switched to before any model), written whole by rename.
#include "session.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// One word of the command language (repl/parse.c): bare when it has no blank, quote, ';', '#'
// or backslash, else in double quotes with '"' and '\\' escaped.
void session_put_word(FILE *f, const char *s) {
    if (*s && !s[strcspn(s, " \t\r\n\"';#\\")]) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

// The lines that rebuild the config and corpus: one :set of every key, then :data (config.dm,
// and the head of a session switched to before any model). One :set, not a line per key: its
// keys are judged together on their final values (engine_set_many), so it replays from any
// config; a line per key passed through states the rules between keys refuse (d=128 under
// :preset base's H=12: "d=128 is not divisible by H=12"), and seq apart from eval_bytes.
//   A horizon the first :train picked (steps_auto) is written steps=0, as the engine holds it: not
// a setting, so the next :init drops it and the next :train picks its own (written as steps=N, a
// config rebuilt from config.dm ran a longer new run past N at the floor lr: QA, session 32).
void session_put_config_lines(FILE *f, const Engine *e) {
    fputs(":set", f);
    for (int i = 0; i < dm_n_config_keys; i++) {
        char v[128];
        config_get(&e->cfg, &dm_config_keys[i], v, sizeof v);
        if (e->steps_auto && !strcmp(dm_config_keys[i].name, "steps")) snprintf(v, sizeof v, "0");
        fprintf(f, " %s=%s", dm_config_keys[i].name, v);  // (no value holds a blank or a quote)
    }
    fputc('\n', f);
    // a relative path no corpus was opened from (an older dmsh's checkpoint: engine_ckpt.c) is
    // relative to a directory a replay need not run in: a comment, not a command that would open
    // whatever file has that name there (QA, session 32)
    if (e->data_path[0] && !e->has_data && (e->data_path[0] != '/' || (e->eval_path[0] && e->eval_path[0] != '/')))
        fputs("# not open (an older dmsh's relative path, from the directory that run was in): ", f);
    if (e->data_path[0]) {
        fputs(":data ", f);
        session_put_word(f, e->data_path);
        if (e->eval_path[0]) {
            fputs(" eval=", f);
            session_put_word(f, e->eval_path);
        }
        fputc('\n', f);
    }
}

int session_write_config(const Engine *e, dm_err *err) {
    if (!e->session_dir[0]) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.dm", e->session_dir);
    // a temp file put in place by rename: never half a config, and never an open of whatever
    // sits at the name (a fifo there blocked this write, after every command, for good)
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int why = errno;
        if (fd >= 0) close(fd);
        return dm_fail(err, "cannot write %s: %s", path, strerror(why));
    }
    fputs("# resolved config of this session (dmsh rewrites it after every command: the settings now)\n", f);
    if (e->steps_auto)
        fprintf(f, "# steps=0: the horizon of %lld steps the first :train picked is that run's, not a setting (a new run\n"
                   "# picks its own; dmsh -r keeps it)\n", (long long)e->cfg.steps);
    session_put_config_lines(f, e);
    // the arms are the model's state, not the config's (a replay of these lines before :init
    // could not switch them): said, so an ablation's config.dm is told from its baseline's
    char off[64] = "";
    if (e->live) arms_mask_names(arms_off_mask(&e->model.arms), off, sizeof off);
    if (off[0]) fprintf(f, "# arms off in the model now: %s (:arm NAME off after :init; a model built from these lines has every arm on)\n", off);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        int why = errno ? errno : EIO;
        unlink(tmp);
        return dm_fail(err, "cannot write %s: %s", path, strerror(why));
    }
    return 0;
}

