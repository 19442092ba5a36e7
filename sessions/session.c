// session.c — see session.h.
#include "session.h"
#include <dirent.h>
#include <stdlib.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// One word of the command language (repl/parse.c): bare when it has no blank, quote, ';', '#'
// or backslash, else in double quotes with '"' and '\\' escaped.
static void put_word(FILE *f, const char *s) {
    if (*s && !s[strcspn(s, " \t\r\n\"';#\\")]) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int session_write_config(const Engine *e, dm_err *err) {
    if (!e->session_dir[0]) return 0;
    char path[1200], *text = mallocCheck(16384);
    snprintf(path, sizeof path, "%s/config.dm", e->session_dir);
    engine_config_text(&e->cfg, text, 16384);
    FILE *f = fopen(path, "w");
    if (!f) { free(text); return dm_fail(err, "cannot write %s: %s", path, strerror(errno)); }
    fprintf(f, "# resolved config of this session (dmsh writes it on :init and :session)\n%s", text);
    if (e->data_path[0]) {
        fputs(":data ", f);
        put_word(f, e->data_path);
        if (e->eval_path[0]) {
            fputs(" eval=", f);
            put_word(f, e->eval_path);
        }
        fputc('\n', f);
    }
    fclose(f);
    free(text);
    return 0;
}

int session_rewrite_metrics(const Engine *e, dm_err *err) {
    if (!e->session_dir[0]) return 0;
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/metrics.tsv", e->session_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    // the rows in the engine's own format into a temp file, then rename
    unlink(tmp);
    FILE *f = fopen(tmp, "w");
    if (!f) return dm_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    engine_tsv_header(f);
    for (int i = 0; i < e->nrows; i++) engine_tsv_row(f, &e->rows[i]);
    fclose(f);
    if (rename(tmp, path)) return dm_fail(err, "cannot replace %s: %s", path, strerror(errno));
    return 0;
}

int session_open(Engine *e, const char *dir, dm_err *err) {
    if (engine_session(e, dir, err)) return 1;
    if (session_write_config(e, err)) return 1;
    if (e->nrows && session_rewrite_metrics(e, err)) return 1;
    return 0;
}

// Lines typed before a session exists (:preset, :set, :data, :init, ...): kept, and written at
// the head of a new session's transcript, so replaying it rebuilds the run from the start.
static char *pre_lines;
static size_t pre_len, pre_cap;
enum { PRE_MAX = 1 << 20 };

static void append_line(FILE *f, const char *line) {
    size_t n = strlen(line);
    fprintf(f, "%s%s", line, n && line[n - 1] == '\n' ? "" : "\n");
}

void session_transcript(const Engine *e, const char *line) {
    if (!e->session_dir[0]) {
        size_t n = strlen(line);
        if (pre_len + n + 2 > PRE_MAX) return;  // a pathological amount of typing: keep the head
        if (pre_len + n + 2 > pre_cap) {
            size_t cap = pre_cap ? 2 * pre_cap : 4096;
            while (cap < pre_len + n + 2) cap *= 2;
            char *p = realloc(pre_lines, cap);
            if (!p) return;
            pre_lines = p;
            pre_cap = cap;
        }
        memcpy(pre_lines + pre_len, line, n);
        pre_len += n;
        if (!n || line[n - 1] != '\n') pre_lines[pre_len++] = '\n';
        return;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/transcript.dm", e->session_dir);
    FILE *f = fopen(path, "a");
    if (!f) return;
    if (pre_len) {  // the first line since the session opened: what came before it goes first
        fwrite(pre_lines, 1, pre_len, f);
        pre_len = 0;
    }
    append_line(f, line);
    fclose(f);
    dm_err err = {0};
    session_write_config(e, &err);  // config.dm follows :set / :data (best effort, as the transcript)
}

int session_latest_ckpt(const char *dir, char *path, size_t n, long long *step) {
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    DIR *d = opendir(ck);
    if (!d) return 1;
    long long best = -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long s;
        char tail[8];
        if (sscanf(de->d_name, "step-%lld.ckp%1s", &s, tail) == 2 && !strcmp(de->d_name + strlen(de->d_name) - 5, ".ckpt") && s > best) best = s;
    }
    closedir(d);
    if (best < 0) return 1;
    snprintf(path, n, "%s/step-%lld.ckpt", ck, best);
    *step = best;
    return 0;
}

int session_resume(Engine *e, const char *dir, dm_err *err) {
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) return dm_fail(err, "%s: not a session directory", dir);
    char path[1200];
    long long step;
    if (session_latest_ckpt(dir, path, sizeof path, &step))
        return dm_fail(err, "%s: no checkpoint in %s/ckpt (nothing to resume; :save writes one)", dir, dir);
    if (engine_load(e, path, err)) return 1;
    if (engine_session(e, dir, err)) return 1;
    return session_rewrite_metrics(e, err);
}

int session_autosave(Engine *e, char *path, size_t n, dm_err *err) {
    path[0] = 0;
    if (!e->session_dir[0] || !e->live || e->step == 0) return 0;
    snprintf(path, n, "%s/ckpt/step-%lld.ckpt", e->session_dir, (long long)e->step);
    struct stat st;
    if (stat(path, &st) != 0) return engine_save(e, path, err);
    if (e->synced_step == e->step) { path[0] = 0; return 0; }  // this state, saved (or loaded) already
    // step-N.ckpt holds another state of step N (the run went back with :load and came here
    // again): keep both, this one under a name -r does not pick, and say so
    char other[1200];
    snprintf(other, sizeof other, "%s", path);
    for (int k = 1; k < 1000; k++) {
        snprintf(path, n, "%s/ckpt/step-%lld-exit%d.ckpt", e->session_dir, (long long)e->step, k);
        if (stat(path, &st) != 0) break;
    }
    if (engine_save(e, path, err)) return 1;
    fprintf(stderr, "dmsh: %s holds another state of step %lld (kept); this one saved as:\n", other, (long long)e->step);
    return 0;
}
