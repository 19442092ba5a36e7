// lost_settings.c — see lost_settings.h.
#include "lost_settings.h"
#include <stdio.h>
#include <string.h>

void lost_settings_reset(LostSettings *l) {
    l->n = 0;
    for (int a = 0; a < ARM_COUNT; a++) l->arm[a] = -1;
}

// The REPL's command names (repl/commands.c's table; tests/test_cli.c checks the two agree), so
// a line typed as a unique prefix (`:ar kda off`) or a shortcut reads as its command, as the
// REPL ran it
const char *const lost_settings_commands[] = {":help", ":preset", ":set", ":show", ":data", ":init", ":step", ":train",
                                              ":eval", ":eval-depths", ":anchors", ":arm", ":save", ":load", ":check",
                                              ":stress", ":bench", ":plot", ":probe", ":gen", ":device", ":session",
                                              ":sessions", ":run", ":quit", NULL};

const char *lost_settings_resolve(const char *word, size_t len) {
    static const char *const sc[][2] = {{":s", ":step"}, {":t", ":train"}, {":e", ":eval"}, {":p", ":plot"}, {":h", ":help"}, {":q", ":quit"}};
    const char *hit = NULL;
    int nhit = 0;
    for (int i = 0; lost_settings_commands[i]; i++) {
        if (strlen(lost_settings_commands[i]) == len && !strncmp(lost_settings_commands[i], word, len)) return lost_settings_commands[i];
        if (len > 1 && !strncmp(lost_settings_commands[i], word, len)) { hit = lost_settings_commands[i]; nhit++; }
    }
    if (nhit == 1) return hit;
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
        if (strlen(sc[i][0]) == len && !strncmp(sc[i][0], word, len)) return sc[i][1];
    return NULL;
}

// q's command (its first word, resolved) is name; the words after it start at *rest
static int cmd_is_at(const char *q, const char *name, const char **rest) {
    if (q[0] != ':') return 0;
    size_t len = strcspn(q, " \t\r\n;#");
    const char *c = lost_settings_resolve(q, len);
    if (!c || strcmp(c, name)) return 0;
    if (rest) *rest = q + len;
    return 1;
}
static int cmd_is(const char *q, const char *name) { return cmd_is_at(q, name, NULL); }

// key=val as the last value of key: an earlier pair of it leaves; a value too long to hold
// leaves the key unknown (no pair: never a cut value applied)
static void put(LostSettings *l, const char *key, size_t klen, const char *val) {
    for (int i = 0; i < l->n; i++)
        if (strlen(l->kv[i].key) == klen && !strncmp(l->kv[i].key, key, klen)) {
            memmove(&l->kv[i], &l->kv[i + 1], sizeof l->kv[0] * (size_t)(l->n - i - 1));
            l->n--;
            break;
        }
    size_t vlen = strcspn(val, " \t\r\n");
    if (klen >= sizeof l->kv[0].key || vlen >= sizeof l->kv[0].val || l->n == (int)(sizeof l->kv / sizeof l->kv[0])) return;
    snprintf(l->kv[l->n].key, sizeof l->kv[0].key, "%.*s", (int)klen, key);
    snprintf(l->kv[l->n].val, sizeof l->kv[0].val, "%.*s", (int)vlen, val);
    l->n++;
}

// every key=value word of text (up to a '#'), as put() takes them
static void put_words(LostSettings *l, const char *text) {
    const char *p = text;
    while (*p && *p != '#') {
        p += strspn(p, " \t\r\n");
        size_t w = strcspn(p, " \t\r\n#");
        const char *eq = memchr(p, '=', w);
        if (eq && eq > p) put(l, p, (size_t)(eq - p), eq + 1);
        if (!w) break;
        p += w;
    }
}

void lost_settings_line(LostSettings *l, const char *q) {
    if (!strncmp(q, "# dmsh -r: resumed", 18) || cmd_is(q, ":load") || cmd_is(q, ":init")) { lost_settings_reset(l); return; }
    const char *rest;
    if (cmd_is_at(q, ":set", &rest)) { put_words(l, rest); return; }
    if (cmd_is_at(q, ":preset", &rest)) {  // its file's :set lines (other keys keep their values)
        char name[64];
        if (sscanf(rest, " %63s", name) == 1 && config_preset_text(name)) {
            const char *t = config_preset_text(name);
            while (*t) {
                size_t len = strcspn(t, "\n");
                char line[512];
                snprintf(line, sizeof line, "%.*s", (int)len, t);
                const char *c = line + strspn(line, " \t");
                if (cmd_is(c, ":set")) put_words(l, c + 4);
                t += len + (t[len] == '\n');
            }
        }
        return;
    }
    if (!cmd_is_at(q, ":arm", &rest)) return;
    char name[32], val[8];
    if (sscanf(rest, " %31s %7s", name, val) != 2) return;
    for (int a = 0; a < ARM_COUNT; a++)
        if (!strcmp(name, dm_arm_names[a])) l->arm[a] = !strcmp(val, "on") ? 1 : !strcmp(val, "off") ? 0 : l->arm[a];
}

void lost_settings_note(Engine *e, const LostSettings *l) {
    Config t = e->cfg;
    dm_err ig = {0};
    for (int i = 0; i < l->n; i++) config_set(&t, l->kv[i].key, l->kv[i].val, &ig);  // (a refused value changes nothing)
    char diff[600] = "", arms[200] = "";
    config_live_diff(&e->cfg, &t, diff, sizeof diff);
    size_t u = 0;
    for (int a = 0; a < ARM_COUNT && u < sizeof arms; a++)
        if (l->arm[a] >= 0 && l->arm[a] != (e->model.arms.on[a] != 0))
            u += snprintf(arms + u, sizeof arms - u, "%s%s %s -> %s", u ? ", " : "", dm_arm_names[a],
                          e->model.arms.on[a] ? "on" : "off", l->arm[a] ? "on" : "off");
    if (diff[0] || arms[0])
        engine_note(e, "settings the transcript made after this checkpoint are not in it (the process ended before they were "
                    "saved): %s%s%s (resumed -> the transcript's); :set / :arm them again to continue as it ran",
                    diff, diff[0] && arms[0] ? ", " : "", arms);
}
