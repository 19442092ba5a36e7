// lost_settings.c — see lost_settings.h.
#include "lost_settings.h"
#include <stdio.h>
#include <string.h>

void lost_settings_reset(LostSettings *l) {
    l->n = 0;
    for (int a = 0; a < ARM_COUNT; a++) l->arm[a] = -1;
}

static int cmd_is(const char *q, const char *name) {
    size_t k = strlen(name);
    return !strncmp(q, name, k) && (q[k] == ' ' || q[k] == '\t' || q[k] == '\n' || q[k] == '\r' || !q[k]);
}

void lost_settings_line(LostSettings *l, const char *q) {
    if (!strncmp(q, "# dmsh -r: resumed", 18) || cmd_is(q, ":load") || cmd_is(q, ":init")) { lost_settings_reset(l); return; }
    if (cmd_is(q, ":set") || cmd_is(q, ":preset")) {
        if (l->n < 64) snprintf(l->lines[l->n++], sizeof l->lines[0], "%.*s", (int)strcspn(q, "#\r\n"), q);
        return;
    }
    if (!cmd_is(q, ":arm")) return;
    char name[32], val[8];
    if (sscanf(q + 4, " %31s %7s", name, val) != 2) return;
    for (int a = 0; a < ARM_COUNT; a++)
        if (!strcmp(name, dm_arm_names[a])) l->arm[a] = !strcmp(val, "on") ? 1 : !strcmp(val, "off") ? 0 : l->arm[a];
}

void lost_settings_note(Engine *e, const LostSettings *l) {
    Config t = e->cfg;
    for (int i = 0; i < l->n; i++) {
        char buf[512], *sv = NULL;
        snprintf(buf, sizeof buf, "%s", l->lines[i]);
        char *tok = strtok_r(buf, " \t", &sv);
        int preset = !strcmp(tok, ":preset");
        dm_err ig = {0};
        while ((tok = strtok_r(NULL, " \t", &sv))) {
            char *eq = strchr(tok, '=');
            // (a preset sets its file's keys only; a line the process refused changes nothing)
            if (preset) { if (config_preset_text(tok)) config_apply_text(&t, config_preset_text(tok), tok, &ig); }
            else if (eq) { *eq = 0; config_set(&t, tok, eq + 1, &ig); }
        }
    }
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
