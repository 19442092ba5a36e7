// complete.c — what Tab offers at the prompt (SPEC §6 "Interactive niceties"). A pure function
// of the line before the cursor: no readline here, so the rules are unit-tested (test_complete)
// and the file sits in libdm.a, which every build links (headless ones too).
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../engine/arms.h"
#include "../engine/config.h"
#include "complete.h"

typedef struct {
    char **v;
    int n, cap;
} List;

static void add(List *l, const char *word, const char *cand) {
    if (strncmp(cand, word, strlen(word)) != 0) return;  // only what extends the typed word
    if (l->n + 2 > l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = strdup(cand);
}

static void addf(List *l, const char *word, const char *fmt, ...) {
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    add(l, word, buf);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char **finish(List *l) {
    if (!l->n) { free(l->v); return NULL; }
    qsort(l->v, l->n, sizeof *l->v, cmp_str);
    int m = 0;
    for (int i = 0; i < l->n; i++) {
        if (m && strcmp(l->v[m - 1], l->v[i]) == 0) { free(l->v[i]); continue; }
        l->v[m++] = l->v[i];
    }
    l->v[m] = NULL;
    return l->v;
}

char *dm_quote_path(const char *name, char q) {
    size_t n = strlen(name);
    char *r = malloc(5 * n + 2), *o = r;  // worst case: every char a ' in single quotes
    if (!r) return NULL;
    *o++ = q;
    for (const char *p = name; *p; p++) {
        if (q == '"' && (*p == '"' || *p == '\\')) *o++ = '\\';
        if (q == '\'' && *p == '\'') {
            memcpy(o, "'\"'\"'", 5);  // close, a double-quoted ', reopen
            o += 5;
            continue;
        }
        *o++ = *p;
    }
    *o = 0;
    return r;
}

char *dm_unquote_word(const char *word, char q) {
    char *r = strdup(word), *o = r;
    if (!r) return NULL;
    for (const char *p = word; *p; p++) {
        if (q == '"' && *p == '\\' && (p[1] == '"' || p[1] == '\\')) p++;
        *o++ = *p;
    }
    *o = 0;
    return r;
}

void dm_complete_free(char **v) {
    for (int i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

// A path: `pre` is what precedes the path inside the word ("eval=" or ""), `path` what the user
// typed of it. Directory entries that extend the last component; directories get '/' so the
// next Tab descends. Hidden entries only when the component starts with '.'.
static void add_paths(List *l, const char *word, const char *pre, const char *path) {
    const char *slash = strrchr(path, '/');
    char typed_dir[1024] = "", open_dir[1100];
    const char *base = path;
    if (slash) {
        snprintf(typed_dir, sizeof typed_dir, "%.*s", (int)(slash - path + 1), path);
        base = slash + 1;
    }
    const char *home = getenv("HOME");
    if (typed_dir[0] == '~' && typed_dir[1] == '/' && home)
        snprintf(open_dir, sizeof open_dir, "%s%s", home, typed_dir + 1);
    else
        snprintf(open_dir, sizeof open_dir, "%s", typed_dir[0] ? typed_dir : ".");
    DIR *d = opendir(open_dir);
    if (!d) return;
    size_t bl = strlen(base);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        if (nm[0] == '.' && base[0] != '.') continue;
        if (strncmp(nm, base, bl) != 0) continue;
        char full[2400];
        snprintf(full, sizeof full, "%s/%s", open_dir, nm);
        struct stat st;
        int isdir = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
        addf(l, word, "%s%s%s%s", pre, typed_dir, nm, isdir ? "/" : "");
    }
    closedir(d);
}

// An enumerated value: each of `choices` ("a|b|c") after `pre`.
static void add_choices(List *l, const char *word, const char *pre, const char *choices) {
    const char *p = choices;
    while (*p) {
        size_t n = strcspn(p, "|");
        addf(l, word, "%s%.*s", pre, (int)n, p);
        p += n + (p[n] == '|');
    }
}

// Fallback :probe names when no provider is linked (the activations SPEC §6 lets :probe name).
static const char *probe_static[] = {"h@1", "h@2", "n@1", "n@2", "kda.out@1", "kda.out@2", "kda.state@1", "kda.state@2",
                                     "mem.gate@1", "mem.gate@2", "moe.load@1", "moe.load@2", "emb", "head", NULL};
void *dm_complete_eng;  // the live engine, for the provider (set by the prompt)
char **(*dm_probe_provider)(void *eng);

// key= options each command accepts (its positional arguments are handled in dm_complete).
static const struct {
    const char *cmd, *keys;
} options[] = {
    {":train", "eval_every|ckpt_every|ckpt_keep|log_every|stop_after"},
    {":init", "seed|preset"},  // (and every config key: below)
    {":eval", "depth"},
    {":data", "eval"},
    {":plot", "out|x|log|size"},
    {":gen", "n|temp|top_k|seed"},
    {":bench", "steps"},
    {":stress", "lr_mult|steps"},
};
// :check's options are its verification's: determinism steps=, grad off=, parity batch= ...
static const char *check_options(const char *what) {
    if (!strcmp(what, "determinism")) return "steps";
    if (!strcmp(what, "grad")) return "off";
    if (!strcmp(what, "parity")) return "batch|seq|precision|route|floor";
    return NULL;
}

// Same resolution as sh_resolve (exact, unique prefix, the one-letter shortcuts) without its
// messages; sh_resolve lives in parse.c, outside the library.
static const Command *resolve(const Command *table, const char *w) {
    for (int i = 0; table[i].name; i++)
        if (!strcmp(table[i].name, w)) return &table[i];
    size_t wl = strlen(w);
    const Command *hit = NULL;
    int nhit = 0;
    for (int i = 0; table[i].name; i++)
        if (wl > 1 && !strncmp(table[i].name, w, wl)) { hit = &table[i]; nhit++; }
    if (nhit == 1) return hit;
    static const char *sc[][2] = {{":s", ":step"}, {":t", ":train"}, {":e", ":eval"},
                                  {":p", ":plot"}, {":h", ":help"}, {":q", ":quit"}};
    for (unsigned i = 0; i < sizeof sc / sizeof sc[0]; i++)
        if (!strcmp(w, sc[i][0]))
            for (int j = 0; table[j].name; j++)
                if (!strcmp(table[j].name, sc[i][1])) return &table[j];
    return NULL;
}

#define MAXW 64

char **dm_complete(const Command *table, const char *line, const char *word) {
    List l = {0};
    if (!word) word = "";
    // The command under the cursor starts after the last ';' outside quotes; a '#' outside
    // quotes makes the rest a comment (nothing to complete). Words split on blanks.
    // Quotes as parse.c reads them: "..." (with \" and \\) and '...' (everything literal); a
    // single-quoted path with a blank completed nothing when only '"' was followed (QA, session 33).
    const char *seg = line;
    char q = 0;
    for (const char *p = line; *p; p++) {
        if (q == '"' && *p == '\\' && p[1]) { p++; continue; }
        if (q) { if (*p == q) q = 0; }
        else if (*p == '"' || *p == '\'') q = *p;
        else if (*p == ';') seg = p + 1;
        else if (*p == '#') return NULL;
    }
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", seg);
    char *words[MAXW];
    int nw = 0;
    q = 0;
    for (char *p = buf; *p && nw < MAXW;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        words[nw++] = p;
        while (*p && (q || (*p != ' ' && *p != '\t'))) {
            if (q == '"' && *p == '\\' && p[1]) p++;
            else if (q) { if (*p == q) q = 0; }
            else if (*p == '"' || *p == '\'') q = *p;
            p++;
        }
        if (*p) *p++ = 0;
    }
    size_t sl = strlen(seg);
    int at_blank = sl == 0 || seg[sl - 1] == ' ' || seg[sl - 1] == '\t';
    int argi = at_blank ? nw : nw - 1;  // index of the word under the cursor (0 = command)

    if (argi <= 0) {
        // command names; a word typed without ':' still finds them (readline replaces it)
        for (int i = 0; table[i].name; i++) {
            if (word[0] == ':' || !word[0]) add(&l, word, table[i].name);
            else if (!strncmp(table[i].name + 1, word, strlen(word))) add(&l, table[i].name, table[i].name);
        }
        return finish(&l);
    }
    const Command *c = resolve(table, words[0]);
    if (!c) return NULL;
    const char *cmd = c->name;
    // which positional argument the cursor is on: words without '=' before it
    int pos = 0;
    for (int i = 1; i < argi; i++)
        if (!strchr(words[i], '=')) pos++;
    const char *eq = strchr(word, '=');
    // key="partial: readline hands over only what follows the quote (the key and the quote stay
    // in the line), so the key is read from the line's word (QA, session 29: eval="/pa completed
    // nothing, though eval=/pa did)
    if (argi < nw) {
        const char *lw = words[argi];
        size_t kl = strspn(lw, "abcdefghijklmnopqrstuvwxyz_");
        if (kl && lw[kl] == '=' && (lw[kl + 1] == '"' || lw[kl + 1] == '\'')) {
            if ((!strncmp(lw, "eval", kl) && kl == 4) || (!strncmp(lw, "out", kl) && kl == 3)) add_paths(&l, word, "", word);
            return finish(&l);
        }
    }

    if (eq) {  // a value: key=...
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - word), word);
        char pre[140];
        snprintf(pre, sizeof pre, "%s=", key);
        if (!strcmp(cmd, ":set") || (!strcmp(cmd, ":init") && strcmp(key, "preset"))) {
            const ConfigKey *k = config_find_key(key);
            if (k && k->choices) add_choices(&l, word, pre, k->choices);
        } else if (!strcmp(cmd, ":init")) {
            for (int i = 0; dm_preset_names[i]; i++) addf(&l, word, "preset=%s", dm_preset_names[i]);
        } else if (!strcmp(cmd, ":check") && !strcmp(key, "precision")) {
            add_choices(&l, word, pre, "fp32|bf16");
        } else if (!strcmp(cmd, ":check") && !strcmp(key, "route")) {
            add_choices(&l, word, pre, "device|own");
        } else if (!strcmp(cmd, ":check") && !strcmp(key, "floor")) {
            add_choices(&l, word, pre, "on|off");
        } else if (!strcmp(key, "eval") || !strcmp(key, "out")) {
            add_paths(&l, word, pre, eq + 1);
        } else if (!strcmp(cmd, ":plot") && !strcmp(key, "x")) {
            add_choices(&l, word, pre, "step|tokens|time");
        } else if ((!strcmp(cmd, ":plot") || !strcmp(cmd, ":probe")) && !strcmp(key, "log")) {
            add_choices(&l, word, pre, "on|off");
        }
        return finish(&l);
    }

    if (!strcmp(cmd, ":set") || !strcmp(cmd, ":init")) {
        for (int i = 0; i < dm_n_config_keys; i++)
            if (strcmp(cmd, ":init") || strcmp(dm_config_keys[i].name, "seed")) addf(&l, word, "%s=", dm_config_keys[i].name);
    } else if (!strcmp(cmd, ":preset") && pos == 0) {
        for (int i = 0; dm_preset_names[i]; i++) add(&l, word, dm_preset_names[i]);
    } else if (!strcmp(cmd, ":arm")) {
        if (pos == 0)
            for (int i = 0; i < ARM_COUNT; i++) add(&l, word, dm_arm_names[i]);
        if (pos == 1) add_choices(&l, word, "", "on|off");
    } else if (!strcmp(cmd, ":plot") && pos == 0) {
        // METRIC[,METRIC]: complete the part after the last comma, keep the rest
        const char *comma = strrchr(word, ',');
        char pre[256] = "";
        if (comma) snprintf(pre, sizeof pre, "%.*s", (int)(comma - word + 1), word);
        add_choices(&l, word, pre, "bpb|loss|lr|gnorm|tok_s|depths|experts");
    } else if (!strcmp(cmd, ":probe")) {
        if (pos == 0) {
            char **names = dm_probe_provider && dm_complete_eng ? dm_probe_provider(dm_complete_eng) : NULL;
            if (names) {
                for (int i = 0; names[i]; i++) add(&l, word, names[i]);
                for (int i = 0; names[i]; i++) free(names[i]);
                free(names);
            } else {
                for (int i = 0; probe_static[i]; i++) add(&l, word, probe_static[i]);
            }
        }
        int text = argi > 2 && !strncmp(words[2], "text=", 5);  // (text= comes before hist)
        if (pos == 1) {
            add(&l, word, "hist");
            if (!text) add(&l, word, "text=");
        }
        int h = argi > 2 && !strcmp(words[2], "hist") ? 2 : text && argi > 3 && !strcmp(words[3], "hist") ? 3 : 0;
        if (h && pos == 2)   // the options not given yet
            for (int o = 0; o < 2; o++) {
                const char *opt = o ? "bins=" : "log=";
                int given = 0;
                for (int i = h + 1; i < argi; i++) given |= !strncmp(words[i], opt, strlen(opt));
                if (!given) add(&l, word, opt);
            }
    } else if (!strcmp(cmd, ":show") && pos == 0) {
        add_choices(&l, word, "", "config|model|params|arms|data|device|metrics");
    } else if (!strcmp(cmd, ":check") && pos == 0) {
        add_choices(&l, word, "", "determinism|grad|parity");
    } else if (!strcmp(cmd, ":check") && pos == 1 && argi > 1 && check_options(words[1])) {
        const char *p = check_options(words[1]);
        while (*p) {
            size_t n = strcspn(p, "|");
            addf(&l, word, "%.*s=", (int)n, p);
            p += n + (p[n] == '|');
        }
    } else if (!strcmp(cmd, ":device") && pos == 0) {
        add_choices(&l, word, "", "cpu|cuda|cuda:0");
    } else if (!strcmp(cmd, ":help") && pos == 0) {
        for (int i = 0; table[i].name; i++) add(&l, word, word[0] == ':' ? table[i].name : table[i].name + 1);
    } else if (!strcmp(cmd, ":session") && pos == 0) {
        add_paths(&l, "", "", "runs/");  // existing sessions, by name
        for (int i = 0; i < l.n; i++) {     // "runs/NAME/" -> "NAME"
            char *s = l.v[i];
            memmove(s, s + 5, strlen(s + 5) + 1);
            size_t n = strlen(s);
            if (n && s[n - 1] == '/') s[n - 1] = 0;
        }
        int m = 0;  // keep those that extend the typed word
        for (int i = 0; i < l.n; i++) {
            if (strncmp(l.v[i], word, strlen(word)) == 0) l.v[m++] = l.v[i];
            else free(l.v[i]);
        }
        l.n = m;
    } else if ((!strcmp(cmd, ":data") || !strcmp(cmd, ":load") || !strcmp(cmd, ":run") || !strcmp(cmd, ":save")) &&
               pos == 0) {
        add_paths(&l, word, "", word);
    }
    // a command's options, less those already on the line (a second eval= was offered: QA,
    // session 33)
    for (unsigned i = 0; i < sizeof options / sizeof options[0]; i++)
        if (!strcmp(options[i].cmd, cmd)) {
            const char *p = options[i].keys;
            while (*p) {
                size_t n = strcspn(p, "|");
                int given = 0;
                for (int w = 1; w < argi; w++) given |= !strncmp(words[w], p, n) && words[w][n] == '=';
                if (!given) addf(&l, word, "%.*s=", (int)n, p);
                p += n + (p[n] == '|');
            }
        }
    return finish(&l);
}
