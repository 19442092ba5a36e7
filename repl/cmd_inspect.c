// cmd_inspect.c — :probe, :gen, :device, :sessions: looking inside the live model.
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../engine/engine.h"
#include "../engine/probe.h"
#include "../engine/sample.h"
#include "../kernels/backend.h"
#include "shell.h"
#include "../sessions/session.h"

#include "../viz/plot.h"  // viz_hist_png (its PNG writer reports a build without PNG support itself)

// Escapes in a typed text (:gen's prompt, :probe's text=): \n newline, \t tab, \\ a backslash,
// \xHH any byte but 0. The bytes into buf (NUL-terminated), their count into *n.
static int unescape_text(const char *cmd, const char *what, const char *s, char *buf, size_t cap, size_t *n, dm_err *err) {
    size_t pn = 0;
    for (const char *p = s; *p; p++) {
        if (pn + 1 >= cap) return dm_fail(err, "%s: %s is longer than %zu bytes", cmd, what, cap - 1);
        if (p[0] == '\\' && (p[1] == 'n' || p[1] == 't' || p[1] == 'r')) { buf[pn++] = p[1] == 'n' ? '\n' : p[1] == 't' ? '\t' : '\r'; p++; continue; }
        if (p[0] == '\\' && p[1] == '\\') { buf[pn++] = '\\'; p++; continue; }
        if (p[0] == '\\' && p[1] == 'x') {
            int v = 0, k = 0;
            for (; k < 2 && isxdigit((unsigned char)p[2 + k]); k++) v = v * 16 + (isdigit((unsigned char)p[2 + k]) ? p[2 + k] - '0' : (tolower((unsigned char)p[2 + k]) - 'a' + 10));
            if (k != 2 || v == 0) return dm_fail(err, "%s: bad escape '%.4s' in %s (\\xHH with two hex digits, not 00)", cmd, p, what);
            buf[pn++] = (char)v;
            p += 3;
            continue;
        }
        // any other backslash is refused, not fed as two bytes: "\r" before it was, or "\q", read
        // as a backslash and a letter without a word (QA, session 41)
        if (p[0] == '\\')
            return dm_fail(err, "%s: unknown escape '%.2s' in %s (\\n \\t \\r \\\\ \\xHH; \\\\ is a backslash)", cmd, p, what);
        buf[pn++] = *p;
    }
    buf[pn] = 0;
    *n = pn;
    return 0;
}

// One byte in quotes for a per-byte line: 'a', ' ', '\n', '\t', '\xHH' (no byte may break the line)
static void byte_quoted(unsigned char c, char *buf, size_t n) {
    if (c == '\n') snprintf(buf, n, "'\\n'");
    else if (c == '\t') snprintf(buf, n, "'\\t'");
    else if (c == '\\') snprintf(buf, n, "'\\\\'");
    else if (c >= 32 && c < 127) snprintf(buf, n, "'%c'", c);
    else snprintf(buf, n, "'\\x%02x'", c);
}

// A text forward's activation with a few values a byte (a gate, a loss, ctrl's three gates): one
// line per byte read, with the byte it predicts, to line up against the text (QA, session 35: a
// researcher probing the gates on a given text had summary statistics of an eval batch only).
static void list_per_byte(Shell *sh, const ProbeInfo *pi, const double *v, const unsigned char *text, int T) {
    // [1, T] or [1, T, C]: a value per byte read (kda.state is per head, moe.load per expert)
    int C = pi->ndim == 3 ? pi->shape[2] : 1;
    if (pi->ndim < 2 || pi->shape[0] != 1 || pi->shape[1] != T || !strncmp(pi->name, "kda.state", 9)) {
        fprintf(sh->out, "(%s is not a value per byte read: statistics only)\n", pi->name);
        return;
    }
    if (C > 4) {
        fprintf(sh->out, "(per-byte values are listed for activations of at most 4 values a byte; %s has %d: statistics only)\n",
                pi->name, C);
        return;
    }
    static const char *const gates[3] = {"ctrl.attn", "ctrl.mem", "ctrl.ffn"};
    int ctrl = C == 3 && !strncmp(pi->name, "ctrl@", 5);
    fprintf(sh->out, "  %4s  %-6s %-6s", "pos", "byte", "next");
    for (int c = 0; c < C; c++) {
        char col[16];
        snprintf(col, sizeof col, "[%d]", c);
        fprintf(sh->out, " %12s", ctrl ? gates[c] : C == 1 ? "value" : col);
    }
    fputc('\n', sh->out);
    for (int t = 0; t < T; t++) {
        char b[8], nx[8];
        byte_quoted(text[t], b, sizeof b);
        byte_quoted(text[t + 1], nx, sizeof nx);
        fprintf(sh->out, "  %4d  %-6s %-6s", t, b, nx);
        for (int c = 0; c < C; c++) fprintf(sh->out, " %12.6g", v[(size_t)t * C + c]);
        fputc('\n', sh->out);
    }
}

int cmd_probe(Shell *sh, Words *w, dm_err *err) {
    Engine *e = sh->eng;
    if (w->argc == 1) {
        if (!e->live) return dm_fail(err, "no model: :init builds one");
        char **names = probe_names(e);
        int col = 0;
        for (int i = 0; names[i]; i++) {
            int len = (int)strlen(names[i]) + 2;
            if (col + len > 100) { fputc('\n', sh->out); col = 0; }
            fprintf(sh->out, "%s  ", names[i]);
            col += len;
        }
        fputc('\n', sh->out);
        if (!e->model.acts.buf) fprintf(sh->out, "(activations appear after the first :step or :eval)\n");
        char off[300];
        if (probe_unlisted(e, off, sizeof off)) fprintf(sh->out, "(not listed, their arm was off in the last forward: %s)\n", off);
        probe_names_free(names);
        return 0;
    }
    // NAME [text="..."] [hist [log=on|off] [bins=N]]: the options after hist belong to the histogram
    int hist = 0, logy = 0, bins = 60, first = 2;
    const char *text = NULL;
    if (w->argc > 2 && sh_eq(w, 2) && sh_eq(w, 2) - w->argv[2] == 4 && !strncmp(w->argv[2], "text", 4)) {
        text = sh_eq(w, 2) + 1;
        first = 3;
    }
    if (w->argc > first && (sh_eq(w, first) || strcmp(w->argv[first], "hist")))
        return dm_fail(err, "usage: :probe NAME [text=\"...\"] [hist [log=on|off] [bins=N]]");
    hist = w->argc > first;
    for (int i = first + 1; i < w->argc; i++) {
        const char *eq = sh_eq(w, i), *a = w->argv[i];
        if (eq && eq - a == 3 && !strncmp(a, "log", 3)) {
            if (strcmp(eq + 1, "on") && strcmp(eq + 1, "off")) return dm_fail(err, ":probe: log=%s: expected on or off", eq + 1);
            logy = !strcmp(eq + 1, "on");
        } else if (eq && eq - a == 4 && !strncmp(a, "bins", 4)) {
            char *end;
            long b = strtol(eq + 1, &end, 10);
            if (!isdigit((unsigned char)eq[1]) || *end || b < 1 || b > 1000)
                return dm_fail(err, ":probe: bins=%s: expected a whole number 1..1000", eq + 1);
            bins = (int)b;
        } else {
            return dm_fail(err, ":probe: unknown histogram option '%s' (options: log=on|off bins=N)", a);
        }
    }
    // text=: one forward of those bytes first (its activations are then what :probe reads)
    char tbuf[4096];
    size_t tn = 0;
    if (text && unescape_text(":probe", "text=", text, tbuf, sizeof tbuf, &tn, err)) return 1;
    // (the name first: a misspelt one ran the forward, and its counts, before it was refused)
    if (text && (probe_check_text_name(e, w->argv[1], err) || probe_forward_text(e, (const unsigned char *)tbuf, (int)tn, err)))
        return 1;
    double *v;
    ProbeInfo pi;
    if (probe_get(e, w->argv[1], &v, &pi, err)) return 1;
    ProbeStats st;
    probe_stats(v, pi.n, &st);
    char shape[64] = "[";
    for (int i = 0; i < pi.ndim; i++) {
        char t[16];
        snprintf(t, sizeof t, "%s%d", i ? ", " : "", pi.shape[i]);
        strncat(shape, t, sizeof shape - strlen(shape) - 1);
    }
    strncat(shape, "]", sizeof shape - strlen(shape) - 1);
    // where the values come from (probe.h): the stats line, the PNG's title and its file name
    // all name the same state
    char from[160], tag[96];
    probe_source(e, &pi, from, sizeof from, tag, sizeof tag);
    fprintf(sh->out, "%s %s n=%zu mean %.6g std %.6g rms %.6g min %.6g max %.6g absmax %.6g nonfinite %.4g%% (%s)\n",
            pi.name, shape, pi.n, st.mean, st.std, st.rms, st.min, st.max, st.absmax,
            pi.n ? 100.0 * st.nonfinite / pi.n : 0.0, from);
    if (text && pi.activation) list_per_byte(sh, &pi, v, (const unsigned char *)tbuf, (int)tn - 1);
    // a later probe of the same text's forward lists its values too (it gave the stats line alone)
    else if (pi.activation && e->fwd_kind == 3 && e->fwd_text && e->fwd_text_n >= 2)
        list_per_byte(sh, &pi, v, e->fwd_text, e->fwd_text_n - 1);
    int rc = 0;
    if (hist) {
        char path[1400], title[300], msg[300];
        char dir[1100], pdir[1200];
        session_default_dir(e, dir, sizeof dir);
        char safe[64];
        snprintf(safe, sizeof safe, "%s", pi.name);
        for (char *p = safe; *p; p++) if (*p == '@' || *p == '/') *p = '_';
        snprintf(pdir, sizeof pdir, "%splots", dir);
        mkdir(pdir, 0755);  // (exists in a session; an error shows when the PNG is written)
        // the tag, not e->step: after :step 1 an activation is the forward of step 0, and an
        // :eval at step 1 would otherwise overwrite it under the same name (hist-h_1-step1)
        // (a log-count histogram is its own file: the linear one of the same state stays)
        snprintf(path, sizeof path, "%s/hist-%s-%s%s.png", pdir, safe, tag, logy ? "-log" : "");
        snprintf(title, sizeof title, "%s %s (%s)", pi.name, shape, from);
        // a file of that name is replaced (one forward, one name), but said: two checkpoints of the
        // same step, or two texts of one hash, share it
        struct stat pst;
        int had = stat(path, &pst) == 0;
        if (viz_hist_png(path, v, pi.n, bins, logy, title, msg, sizeof msg)) rc = dm_fail(err, "%s", msg);
        else fprintf(sh->out, "wrote %s%s\n", path, had ? " (over the earlier file of that name)" : "");
    }
    free(v);
    return rc;
}

// One numeric :gen option KEY=VAL into *out, within lo..hi (integer: whole numbers only). VAL
// must start with a digit (temp: or '.'): strtod/strtoll read "" as 0 (temp= ran greedy,
// top_k= sampled every byte) and skip blanks and signs.
static int gen_num(const char *key, const char *val, double lo, double hi, int integer, const char *range, double *out, dm_err *err) {
    if (!*val) return dm_fail(err, ":gen: %s= needs a value: %s", key, range);
    char *end;
    int num = isdigit((unsigned char)val[0]) || (!integer && val[0] == '.' && isdigit((unsigned char)val[1]));
    double x = integer ? (double)strtoll(val, &end, 10) : strtod(val, &end);
    if (!num || *end || !(x >= lo && x <= hi)) return dm_fail(err, "bad %s '%s': %s", key, val, range);
    *out = x;
    return 0;
}

int cmd_gen(Shell *sh, Words *w, dm_err *err) {
    Engine *e = sh->eng;
    const char *prompt = NULL;
    long long n = 256, top_k = 0;
    uint64_t seed = e->cfg.seed;
    double temp = 0.8;
    for (int i = 1; i < w->argc; i++) {
        char *a = w->argv[i];
        const char *eq = sh_eq(w, i);
        if (!eq) {  // the prompt (a quoted "n=5" is a prompt too)
            if (prompt) return dm_fail(err, "usage: :gen \"prompt\" [n=256 temp=0.8 top_k=0 seed=N]");
            prompt = a;
            continue;
        }
        for (int j = 1; j < i && eq && eq != a; j++)  // `n=5 ... n=50`: one of them would be dropped
            if (!w->lit[j] && !strncmp(w->argv[j], a, (size_t)(eq - a) + 1) && strspn(a, "abcdefghijklmnopqrstuvwxyz_") == (size_t)(eq - a))
                return dm_fail(err, ":gen: option '%.*s' given twice", (int)(eq - a), a);
        double x;
        if (!strncmp(a, "n=", 2)) { if (gen_num("n", a + 2, 1, 1000000, 1, "1..1000000", &x, err)) return 1; n = (long long)x; }
        else if (!strncmp(a, "temp=", 5)) { if (gen_num("temp", a + 5, 0, 100, 0, "0..100 (0 = greedy)", &temp, err)) return 1; }
        else if (!strncmp(a, "top_k=", 6)) { if (gen_num("top_k", a + 6, 0, 256, 1, "0..256 (0 = all bytes)", &x, err)) return 1; top_k = (long long)x; }
        else if (!strncmp(a, "seed=", 5)) {  // the values :set seed takes
            Config tmp = e->cfg;
            if (config_set(&tmp, "seed", a + 5, err)) return 1;
            seed = tmp.seed;
        }
        else if (strchr(a, '=') && strspn(a, "abcdefghijklmnopqrstuvwxyz_-") == (size_t)(strchr(a, '=') - a) && a[0] != '=')
            return dm_fail(err, ":gen: unknown option '%.*s' (options: n= temp= top_k= seed=)", (int)(strchr(a, '=') - a), a);
        else if (!prompt) prompt = a;
        else return dm_fail(err, "usage: :gen \"prompt\" [n=256 temp=0.8 top_k=0 seed=N]");
    }
    if (!e->live) return dm_fail(err, "no model: :init builds one");
    // no prompt: the start of a line (the byte a text's lines follow), fed and printed like a
    // typed one (:help gen says so: n forwards, the newline's and all but the last sample's)
    if (!prompt || !*prompt) prompt = "\n";
    // escapes in the prompt, as a user types them (unescape_text)
    char pbuf[4096];
    size_t pn = 0;
    if (unescape_text(":gen", "the prompt", prompt, pbuf, sizeof pbuf, &pn, err)) return 1;
    prompt = pbuf;
    Decoder d;
    if (decoder_init(&d, &e->model, err)) return 1;
    real lg[256];
    // non-finite logits (NaN weights) would make any "sample" a made-up byte: refuse instead
    int bad = 0;
    for (const unsigned char *p = (const unsigned char *)prompt; *p && !bad; p++) {
        if (decoder_feed(&d, *p, lg, err)) { decoder_free(&d); return 1; }
        for (int j = 0; j < 256; j++) bad |= !isfinite((double)lg[j]);
    }
    if (bad) {
        decoder_free(&d);
        return dm_fail(err, ":gen: the model's logits are not finite after the prompt (its parameters hold NaN or inf: :probe NAME shows nonfinite %%)");
    }
    Rng r = {seed};
    // an ablation's samples (an :arm X off left on) are said before them (QA, session 35)
    char off[64] = "";
    arms_mask_names(arms_off_mask(&e->model.arms) & ARMS_FORWARD_MASK, off, sizeof off);
    if (off[0]) fprintf(sh->out, "note: sampled with arms off: %s (:arm NAME on switches one back)\n", off);
    char shown[5];  // the prompt's bytes as the samples below (sample_byte_text says how)
    for (const unsigned char *p = (const unsigned char *)prompt; *p; p++) {
        sample_byte_text(*p, shown);
        fputs(shown, sh->out);
    }
    for (long long i = 0; i < n; i++) {
        for (int j = 0; j < 256; j++) bad |= !isfinite((double)lg[j]);
        if (bad) {
            fputc('\n', sh->out);
            decoder_free(&d);
            return dm_fail(err, ":gen: the model's logits became non-finite after %lld sampled bytes (NaN or inf in its parameters or state)", i);
        }
        if (e->interrupt && *e->interrupt) {  // Ctrl-C: stop here, what was sampled stands
            e->intr_honored++;
            fprintf(sh->out, "\n(interrupted after %lld bytes)", i);
            break;
        }
        int b = sample_byte(lg, temp, (int)top_k, &r);
        sample_byte_text(b, shown);
        fputs(shown, sh->out);
        // a forward gives the logits of the byte after it: the last sample needs none
        if (i + 1 < n && decoder_feed(&d, b, lg, err)) {
            fputc('\n', sh->out);
            decoder_free(&d);
            return 1;
        }
    }
    fputc('\n', sh->out);
    decoder_free(&d);
    return 0;
}

int cmd_device(Shell *sh, Words *w, dm_err *err) {
    if (w->argc != 2) return dm_fail(err, "usage: :device cpu|cuda[:N]");
    const char *a = w->argv[1];
    Engine *e = sh->eng;
    int was_live = e->live;
    if (!strcmp(a, "cpu")) {
        if (e->be == backend_cpu() || (!e->be && (!e->device[0] || !strcmp(e->device, "cpu")))) {
            fprintf(sh->out, "device cpu (already: nothing moved)\n");
            e->device_chosen = 1;
            return 0;
        }
        if (engine_set_device(e, backend_cpu(), "cpu", err)) return 1;
        e->device_chosen = 1;
        fprintf(sh->out, "device cpu%s\n", was_live ? " (the live model moved here; training continues from its step)" : "");
        return 0;
    }
    if (!strncmp(a, "cuda", 4) && (a[4] == 0 || a[4] == ':')) {
        int dev = 0;
        if (a[4] == ':') {
            char *end = NULL;
            long v = isdigit((unsigned char)a[5]) ? strtol(a + 5, &end, 10) : -1;  // digits: not "cuda:-0", "cuda: 1"
            if (v < 0 || *end || v > 64) return dm_fail(err, "device '%s': use cuda or cuda:N (N = 0, 1, ...)", a);
            dev = (int)v;
        }
        char why[PATH_MAX + 400], name[16];  // (the reason may name the library's path)
        const Backend *be = backend_cuda(dev, why, sizeof why);
        if (!be) return dm_fail(err, "%s", why);
        snprintf(name, sizeof name, "cuda:%d", dev);
        // already there: said, as for the CPU (it moved the model out and back for nothing)
        int here = e->be == be && !strcmp(e->device, name);
        if (!here && engine_set_device(e, be, name, err)) return 1;
        e->device_chosen = 1;
        char desc[512] = "";
        if (be->describe) be->describe(desc, sizeof desc);
        fprintf(sh->out, "device %s%s\n  %s\n", name,
                here ? " (already: nothing moved)" : was_live ? " (the live model moved here; training continues from its step)" : "", desc);
        return 0;
    }
    return dm_fail(err, "unknown device '%s' (cpu, cuda, cuda:N)", a);
}

// a file name as one line of text: bytes below 0x20 and DEL as '?'
static void printable(const char *in, char *out, size_t n) {
    size_t i = 0;
    for (; in[i] && i + 1 < n; i++) out[i] = (unsigned char)in[i] < 0x20 || in[i] == 0x7f ? '?' : in[i];
    out[i] = 0;
}

int cmd_sessions(Shell *sh, Words *w, dm_err *err) {
    if (w->argc > 1) return dm_fail(err, "usage: :sessions (no arguments; it lists runs/ here)");
    // sorted by name (readdir's order is the file system's: it changes as sessions come and go)
    struct dirent **list = NULL;
    int nl = scandir("runs", &list, NULL, alphasort);
    if (nl < 0) {  // (say which: a file named runs is not "no runs/ here")
        struct stat rst;
        if (stat("runs", &rst) == 0 && !S_ISDIR(rst.st_mode)) fprintf(sh->out, "no sessions (runs here is a file, not a directory)\n");
        else fprintf(sh->out, "no sessions (runs/ does not exist here)\n");
        return 0;
    }
    int n = 0;
    for (int li = 0; li < nl; li++) {
        const struct dirent *de = list[li];
        if (de->d_name[0] == '.') continue;
        char p[600], path[1200];
        snprintf(p, sizeof p, "runs/%s", de->d_name);
        struct stat dst;
        if (stat(p, &dst) != 0 || !S_ISDIR(dst.st_mode)) continue;  // a session is a directory
        long long step;
        char nm[300];  // (a name with a line break or an escape sequence in it: '?' there, one line each)
        printable(de->d_name, nm, sizeof nm);
        if (!session_latest_ckpt(p, path, sizeof path, &step)) {  // the one dmsh -r resumes from
            char base[300];
            printable(strrchr(path, '/') ? strrchr(path, '/') + 1 : path, base, sizeof base);
            // the step is the file's own (a name says nothing: a user's step-9.ckpt may hold step
            // 4, and mine.ckpt none); only the headers and the state section are read
            dm_err pe = {0};
            if (engine_ckpt_step(path, &step, &pe)) {
                size_t pl = strlen(path);
                const char *why = !strncmp(pe.msg, path, pl) && !strncmp(pe.msg + pl, ": ", 2) ? pe.msg + pl + 2 : pe.msg;
                char pw[sizeof pe.msg];
                printable(why, pw, sizeof pw);
                fprintf(sh->out, "  runs/%s  (latest checkpoint: %s: unreadable, %s; dmsh -r falls back to the newest other one that loads)\n",
                        nm, base, pw);
            } else
                fprintf(sh->out, "  runs/%s  (latest checkpoint: %s, step %lld)\n", nm, base, step);
            char why[2048];  // the fallback above, when LATEST names a file that is gone
            if (session_latest_broken(p, why, sizeof why)) {
                printable(why, why, sizeof why);  // (it quotes LATEST's text)
                fprintf(sh->out, "    note: %s (dmsh -r resumes from %s)\n", why, base);
            }
            // what the run reached, to set runs side by side (QA, session 35: an ablation
            // study compared its runs by :load and :eval of each)
            CkptSummary cs;
            dm_err se = {0};
            if (engine_ckpt_summary(path, &cs, &se)) {  // (said: a line missing in silence read as no run)
                char sw[sizeof se.msg];
                printable(se.msg, sw, sizeof sw);
                fprintf(sh->out, "    (what it reached cannot be read: %s)\n", sw);
            } else {
                char loss[160] = "no training step", ev[220] = "no eval", off[64] = "", eoff[80], loff[80];
                // (the step's arms off, as the eval's: an ablated run's loss read as comparable
                // with another run's: QA, session 41)
                arms_mask_tag(cs.loss_arms_off, loff, sizeof loff);
                if (cs.have_loss) snprintf(loss, sizeof loss, "loss %.4f%s (step %lld)", cs.loss, loff, cs.loss_step);
                arms_mask_tag(cs.eval_arms_off, eoff, sizeof eoff);
                if (cs.have_eval)
                    snprintf(ev, sizeof ev, "held-out bpb %.4f%s (depth %d, step %lld, over %lld B)", cs.bpb, eoff, cs.eval_depth,
                             cs.eval_step, (long long)cs.window);
                arms_mask_names(cs.arms_off, off, sizeof off);
                fprintf(sh->out, "    %s; %s; %s%s%s\n", loss, ev, cs.shape[0] ? cs.shape : "shape unreadable (its config section)",
                        off[0] ? "; arms off: " : "", off);
            }
        } else {
            char why[2048];
            int lost = session_latest_broken(p, why, sizeof why);
            printable(why, why, sizeof why);
            fprintf(sh->out, "  runs/%s  (no checkpoint%s%s)\n", nm, lost ? ": " : "", lost ? why : "");
        }
        n++;
    }
    for (int li = 0; li < nl; li++) free(list[li]);
    free(list);
    if (!n) fprintf(sh->out, "no sessions in runs/\n");
    return 0;
}
