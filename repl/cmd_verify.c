// cmd_verify.c — :check (determinism, grad, parity), :stress, :bench: the built-in
// verifications and measurements (SPEC §7, §8). Each leaves the live model as it found it,
// except :stress, which trains it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "../engine/parity.h"
#include "../engine/snapshot.h"
#include "../engine/stress.h"
#include "bench.h"
#include "shell.h"

#define E_ (sh->eng)
#define OUT (sh->out)

int engine_check_grad(Engine *e, const int *arms_on, FILE *out, int *ok, dm_err *err);

// :check parity — one step from identical weights on the CPU and on CUDA (engine/parity.c):
// the loss and every parameter's gradient; bar 1e-4 at precision=fp32, 3e-2 at bf16 (SPEC §8).
static int check_parity(Shell *sh, Words *w, dm_err *err) {
    Engine *e = E_;
    int dev = 0;
    if (!strncmp(e->device, "cuda:", 5)) dev = atoi(e->device + 5);
    long long B = 0, T = 0;
    if (sh_kv(w, "batch") && sh_parse_int(sh_kv(w, "batch"), 1, 4096, "batch", &B, err)) return 1;
    if (sh_kv(w, "seq") && sh_parse_int(sh_kv(w, "seq"), 1, 1 << 20, "seq", &T, err)) return 1;
    int fp32 = e->cfg.precision_fp32;
    if (sh_kv(w, "precision")) {
        const char *p = sh_kv(w, "precision");
        if (strcmp(p, "fp32") && strcmp(p, "bf16")) return dm_fail(err, "precision=%s: fp32 or bf16", p);
        fp32 = !strcmp(p, "fp32");
    }
    int flags = PARITY_FLOOR;
    if (sh_kv(w, "route")) {
        const char *r = sh_kv(w, "route");
        if (strcmp(r, "device") && strcmp(r, "own")) return dm_fail(err, "route=%s: device (the CPU follows CUDA's top-k) or own", r);
        if (!strcmp(r, "own")) flags |= PARITY_OWN_ROUTE;
    }
    if (sh_kv(w, "floor")) {  // the extra CPU step costs as much as the reference's
        const char *f = sh_kv(w, "floor");
        if (strcmp(f, "on") && strcmp(f, "off")) return dm_fail(err, "floor=%s: on or off", f);
        if (!strcmp(f, "off")) flags &= ~PARITY_FLOOR;
    }
    // (the options first: a malformed one gets its own error on any machine)
    char why[PATH_MAX + 400];  // (the reason may name the library's path)
    const Backend *cu = backend_cuda(dev, why, sizeof why);
    if (!cu) {  // (the backend's reason ends in advice for :device, which parity cannot take)
        char *adv = strstr(why, ": use :device cpu");
        if (adv) *adv = 0;
        return dm_fail(err, ":check parity compares the CPU with CUDA, which is not available: %s", why);
    }
    if (cu->set_precision) cu->set_precision(fp32);
    ParityReport rep;
    int rc = engine_check_parity(e, backend_cpu(), cu, (int)B, (int)T, fp32 ? 1e-4 : 3e-2, !fp32, flags, &rep, err);
    if (cu->set_precision) cu->set_precision(e->cfg.precision_fp32);  // the session's setting again
    if (rc) return 1;
    // what was compared: the live model on its next training batch, or stand-ins (say which)
    fprintf(OUT, "parity cpu vs cuda:%d at %s (bar %.0e): %s, %s\n", dev,
            fp32 ? "fp32" : "bf16 (the CPU reference rounds the same product operands to bf16)", rep.bar,
            e->live ? "the live model's weights" : "no model: the seed's initialisation of the current config",
            e->has_data ? "the next training batch" : "random bytes (no data open)");
    // the objective the step differentiates: CE, plus the MoE aux term when it is on (the log
    // line's loss is the CE alone)
    Arms ar;  // the switches the check ran with: the live model's, else a new model's (all on)
    if (e->live) ar = e->model.arms;
    else arms_init(&ar);
    int aux = ar.on[ARM_AUX] && ar.on[ARM_MOE];
    fprintf(OUT, "  %s %.6f vs %.6f (rel %.1e)\n", aux ? "objective (CE + moe_aux x aux)" : "objective (CE)", rep.loss_ref,
            rep.loss_dev, rep.loss_rel);
    // floor: the CPU against itself from weights one float ulp away (engine/parity.h): a device
    // error near it is this step's conditioning, one far above it is the device's
    if (rep.has_floor) fprintf(OUT, "  %-16s %-8s %-8s\n", "tensor", "rel", "floor");
    for (int i = 0; i < rep.nrows; i++) {
        char fl[16] = "";
        if (rep.has_floor) snprintf(fl, sizeof fl, " %.2e", rep.rows[i].floor);
        fprintf(OUT, "  %-16s %.2e%s %s%s\n", rep.rows[i].name, rep.rows[i].rel, fl, rep.rows[i].rel <= rep.bar ? "ok" : "FAIL",
                rep.rows[i].zero ? " (zero on both: compares nothing)" : "");
    }
    fprintf(OUT, "parity: %s — worst %.2e (%s)", rep.ok ? "PASS" : "FAIL", rep.worst, rep.worst_name);
    if (rep.has_floor) fprintf(OUT, "; the CPU against itself 1 ulp away: %.2e there", rep.worst_floor);
    fprintf(OUT, "\n");
    if (rep.route_bad)
        fprintf(OUT, "FAIL: CUDA's MoE routing is not a routing (an expert out of range, or one twice for a token): "
                "the reference routed itself\n");
    else if (rep.route_total && !rep.route_moved)
        fprintf(OUT, "routing: the same %ld token-expert assignments on both\n", rep.route_total);
    else if (rep.route_followed)  // the routing's own check: every choice the CPU would not make was a tie
        fprintf(OUT, "routing: the CPU followed CUDA's top-k; %ld of %ld assignments differ from the CPU's own, worst "
                "gap %.2e in its softmax (bar %.0e): %s\n", rep.route_moved, rep.route_total, rep.route_gap, rep.bar,
                rep.route_gap <= rep.bar ? "ties within rounding" : "FAIL");
    else if (rep.route_total)
        fprintf(OUT, "routing: each side its own top-k (route=own); %ld of %ld assignments differ%s\n", rep.route_moved,
                rep.route_total, rep.route_moved ? ": the gradients downstream of them compare different computations" : "");
    // a row of zeros passes without checking anything; say so (right after :init ReZero's alpha
    // is 0, and no arm's parameter has a gradient yet)
    if (rep.nzero)
        fprintf(OUT, "note: %d of %d tensors have a zero gradient on both backends and were not compared%s\n", rep.nzero,
                rep.nrows, ar.on[ARM_REZERO] && e->step == 0
                               ? " (ReZero's alpha is 0 until the first step: :step 1 first, or :arm rezero off)" : "");
    if (rep.ok) return 0;
    if (rep.worst <= rep.bar)  // what failed is the routing
        return dm_fail(err, "parity check failed: CUDA's MoE routing %s", rep.route_bad ? "is not a routing"
                            : "picked an expert the CPU's softmax does not put within the bar of its top-k");
    if (rep.has_floor && rep.worst <= 2 * rep.worst_floor)  // a failure the step's own noise explains: say so, still fail
        fprintf(OUT, "note: %s's difference is within 2x what the CPU shows against itself from weights one ulp away "
                "(%.2e): this step's %s %s is that ill-conditioned here (a sum with heavy cancellation); the CUDA "
                "kernels are not shown wrong, nor right, by it\n", rep.worst_name, rep.worst_floor, rep.worst_name,
                strcmp(rep.worst_name, "loss") ? "gradient" : "value");
    return dm_fail(err, "parity check failed: %s differs by %.2e (bar %.0e)", rep.worst_name, rep.worst, rep.bar);
}

#ifndef DM_DOUBLE
// Run the double engine's :check grad. Its messages go to a file: its error line becomes this
// command's one error (it printed "-e #2: error: gradient check failed ...", and this command
// then said it again in a second line); any other line it wrote is passed on to stderr. Its
// table comes through a pipe to this shell's output. No /bin/sh between: `2>&N` with the file's
// descriptor past 9 was a dash syntax error (QA, session 35: a parent that left descriptors open).
// The child has its own process group: a Ctrl-C is this process's to act on (it ended the child's
// check with the child's own "interrupted at step 0 ... the script stops here"): the child is
// stopped and the check said interrupted.
static int run_double_engine(char *const argv[], FILE *out, volatile sig_atomic_t *intr, dm_err *err) {
    // (an anonymous file: no TMPDIR to exist or quote, nothing left behind if this process dies)
    int fd = memfd_create("dmsh-gradcheck-stderr", MFD_CLOEXEC);
    if (fd < 0) {
        FILE *tf = tmpfile();
        fd = tf ? fcntl(fileno(tf), F_DUPFD_CLOEXEC, 0) : -1;
        if (tf) fclose(tf);
    }
    if (fd < 0) return dm_fail(err, ":check grad: no file for the double engine's messages: %s", strerror(errno));
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        int e = errno;
        close(fd);
        return dm_fail(err, ":check grad: no pipe for the double engine's output: %s", strerror(e));
    }
    fflush(out);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);  // (in both: a Ctrl-C between the fork and either call reaches neither group)
        if (dup2(pfd[1], 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        execv(argv[0], argv);
        dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    if (pid > 0) setpgid(pid, pid);
    if (pid < 0) {
        int e = errno;
        close(pfd[0]);
        close(fd);
        return dm_fail(err, ":check grad: could not start the double-precision engine: %s", strerror(e));
    }
    // its whole group is stopped (anything it started holds the pipe too), SIGKILL 2 s later
    int stopped = 0, killed = 0, st = 0;
    struct timespec t_stop = {0, 0}, now;
    for (;;) {
        if (!stopped && intr && *intr) { kill(-pid, SIGTERM); stopped = 1; clock_gettime(CLOCK_MONOTONIC, &t_stop); }
        if (stopped && !killed && !clock_gettime(CLOCK_MONOTONIC, &now) &&
            (now.tv_sec - t_stop.tv_sec) + 1e-9 * (now.tv_nsec - t_stop.tv_nsec) > 2.0) { kill(-pid, SIGKILL); killed = 1; }
        struct pollfd pf = {pfd[0], POLLIN, 0};
        int r = poll(&pf, 1, 50);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        char buf[4096];
        ssize_t n = read(pfd[0], buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR)) break;
        if (n > 0) { fwrite(buf, 1, (size_t)n, out); fflush(out); }
    }
    close(pfd[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    static char text[16384];
    off_t end = lseek(fd, 0, SEEK_END), from = end > (off_t)sizeof text - 1 ? end - (off_t)sizeof text + 1 : 0;
    ssize_t n = end > 0 ? pread(fd, text, (size_t)(end - from), from) : 0;
    text[n > 0 ? n : 0] = 0;
    close(fd);
    if (stopped)  // (a child stopped by SIGTERM leaves 143 whether or not its check had finished)
        return dm_fail(err, ":check grad: interrupted: the double-precision engine was stopped, nothing checked (rows above, if any, are from before the stop)");
    size_t len = strlen(text);
    while (len && text[len - 1] == '\n') text[--len] = 0;
    char *last = strrchr(text, '\n');
    if (st == 0) {
        if (len) fprintf(stderr, "%s\n", text);
        return 0;
    }
    if (last) {  // the lines before its error
        *last++ = 0;
        fprintf(stderr, "%s\n", text);
    } else last = text;
    const char *why = last, *e_ = strstr(last, "error: ");
    if (last[0] == '-' && e_) why = e_ + 7;  // (its "-e #2: error: " prefix: the command line it was given)
    if (WIFSIGNALED(st)) return dm_fail(err, ":check grad: the double-precision engine was killed by signal %d%s%s", WTERMSIG(st), why[0] ? ": " : "", why);
    if (!why[0]) return dm_fail(err, ":check grad: the double-precision engine failed (exit status %d) without a message", WIFEXITED(st) ? WEXITSTATUS(st) : st);
    return dm_fail(err, "%s", why);
}
#endif

int cmd_check(Shell *sh, Words *w, dm_err *err) {
    static const char *const keys[] = {"steps", "off", "batch", "seq", "precision", "route", "floor", NULL};
    if (sh_check_keys(w, 1, keys, err)) return 1;
    const char *what = sh_positional(w, 0);
    if (!what) return dm_fail(err, "usage: :check determinism [steps=N] | grad [off=ARM,...] | parity [batch=N seq=N precision=fp32|bf16 route=device|own floor=on|off]");
    if (!strcmp(what, "determinism")) {
        // it runs the live model at its own batch, seq, precision and arms: options that would
        // change them are refused, not silently ignored
        static const char *const only_steps[] = {"off", "batch", "seq", "precision", "route", "floor"};
        for (int i = 0; i < 6; i++)
            if (sh_kv(w, only_steps[i]))
                return dm_fail(err, ":check determinism takes steps=N only (it runs the live model as it is: %s= does not apply; :set / :arm change the model)",
                               only_steps[i]);
        long long n = 3;
        if (sh_kv(w, "steps") && sh_parse_int(sh_kv(w, "steps"), 1, 100000, "steps", &n, err)) return 1;
        int ok;
        char msg[700];
        if (engine_check_determinism(E_, (int)n, &ok, msg, sizeof msg, err)) return 1;
        // the test hook that proves a FAIL fails the command (as DMSH_REPLAY_PERTURB does for
        // --replay; tests/test_cli_verify.c): the check runs as always, then its verdict is the
        // one a nondeterministic backend would give, and says why
        const char *hook = getenv("DMSH_DETERMINISM_PERTURB");
        if (ok && hook && !strcmp(hook, "1")) {
            ok = 0;
            size_t l = strlen(msg);
            snprintf(msg + l, sizeof msg - l, " [DMSH_DETERMINISM_PERTURB=1: turned to FAIL]");
        }
        fprintf(OUT, "determinism: %s — %s\n", ok ? "PASS" : "FAIL", msg);
        return ok ? 0 : dm_fail(err, "determinism check failed: %s", msg);
    }
    if (!strcmp(what, "grad")) {
        // it runs its own tiny shape (with the live config's k, L, loss and gates): only off=
        // applies, the rest would be ignored silently
        static const char *const not_grad[] = {"steps", "batch", "seq", "precision", "route", "floor"};
        for (int i = 0; i < 6; i++)
            if (sh_kv(w, not_grad[i]))
                return dm_fail(err, ":check grad takes off=ARM,... only (%s= does not apply: it checks a tiny model of its own in double precision)",
                               not_grad[i]);
        // off=NAME,... : every name an arm (a typo would check the arm with it on, silently)
        const char *offs = sh_kv(w, "off");
        // (an empty name too: `off=` or `off=kda,,moe` ran the check, a typo taken as "no arm")
        if (offs && (!*offs || *offs == ',' || offs[strlen(offs) - 1] == ',' || strstr(offs, ",,")))
            return dm_fail(err, "off=%s: an empty arm name (off=ARM,ARM...: kda, engram, moe, rezero, retract, aux)", offs);
        for (const char *q = offs; q && *q;) {
            size_t l = strcspn(q, ",");
            int known = 0;
            for (int a = 0; a < ARM_COUNT; a++) known |= strlen(dm_arm_names[a]) == l && !strncmp(q, dm_arm_names[a], l);
            if (!known && l) return dm_fail(err, "off=: unknown arm '%.*s' (arms: kda, engram, moe, rezero, retract, aux)", (int)l, q);
            q += l + (q[l] == ',');
        }
#ifndef DM_DOUBLE
        // Finite differences need double precision (float round-off alone is ~1e-7 of the loss);
        // the float binary hands the check to the double engine built beside it.
        char exe[1024], dbl[1200];
        ssize_t ne = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[ne > 0 ? ne : 0] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(dbl, sizeof dbl, "%s/../double/dmsh", exe);
        if (access(dbl, X_OK) != 0)
            return dm_fail(err, ":check grad runs on the double-precision engine, looked for as %s (../double/dmsh from this "
                                "binary): build it with `make DM_REAL=double build/double/dmsh`, then run this again", dbl);
        // the live config's choices of computation, which the check takes (engine_check_grad)
        size_t nchk = strlen(offs ? offs : "") + 256;  // (off= as long as it was typed)
        char set[600], *chk = mallocCheck(nchk);
        size_t used = (size_t)snprintf(set, sizeof set, ":set");
        static const char *const takes[] = {"E", "L", "k", "loss", "lam_max", "g_min", "moe_aux", "engram_orders"};
        for (int i = 0; i < 8; i++) {
            char v[128];
            config_get(&E_->cfg, config_find_key(takes[i]), v, sizeof v);
            used += snprintf(set + used, sizeof set - used, " %s=%s", takes[i], v);
        }
        // the live model's off arms, and off= (checked above), as one list with no empty name (the
        // double engine refuses one: a trailing comma here failed every :check grad)
        used = (size_t)snprintf(chk, nchk, ":check grad");
        int nlisted = 0;
        for (int a = 0; E_->live && a < ARM_COUNT; a++)
            if (!E_->model.arms.on[a]) used += snprintf(chk + used, nchk - used, "%s%s", nlisted++ ? "," : " off=", dm_arm_names[a]);
        if (offs) snprintf(chk + used, nchk - used, "%s%s", nlisted ? "," : " off=", offs);
        fprintf(OUT, "(running the double-precision engine: %s)\n", dbl);
        fflush(OUT);
        char *argv[] = {dbl, "--norc", "--no-tui", "-e", set, "-e", chk, NULL};
        int rc = run_double_engine(argv, OUT, E_->interrupt, err);
        free(chk);
        if (rc && E_->interrupt && *E_->interrupt) E_->intr_honored++;
        return rc;
#else
        int ok, on[ARM_COUNT];
        for (int a = 0; a < ARM_COUNT; a++) on[a] = E_->live ? E_->model.arms.on[a] : 1;
        const char *off = sh_kv(w, "off");
        for (int a = 0; off && a < ARM_COUNT; a++) {
            const char *p = strstr(off, dm_arm_names[a]);
            size_t l = strlen(dm_arm_names[a]);
            if (p && (p == off || p[-1] == ',') && (p[l] == 0 || p[l] == ',')) on[a] = 0;
        }
        if (engine_check_grad(E_, on, OUT, &ok, err)) return 1;
        return ok ? 0 : dm_fail(err, "gradient check failed (see the table above)");
#endif
    }
    if (!strcmp(what, "parity")) {
        static const char *const not_parity[] = {"steps", "off"};
        for (int i = 0; i < 2; i++)
            if (sh_kv(w, not_parity[i]))
                return dm_fail(err, ":check parity takes batch= seq= precision= route= floor= (%s= does not apply: it runs one step of the live model's arms)",
                               not_parity[i]);
        return check_parity(sh, w, err);
    }
    return dm_fail(err, "unknown check '%s' (determinism, grad, parity)", what);
}

int cmd_stress(Shell *sh, Words *w, dm_err *err) {
    static const char *const keys[] = {"lr_mult", "steps", NULL};
    if (sh_check_keys(w, 0, keys, err)) return 1;
    // both are the protocol (SPEC §7): no silent default multiplier or length
    if (!sh_kv(w, "lr_mult") || !sh_kv(w, "steps")) return dm_fail(err, "usage: :stress lr_mult=X steps=N (both required)");
    double mult;
    long long n;
    if (sh_parse_real(sh_kv(w, "lr_mult"), 1e-6, 1e6, "lr_mult", &mult, err)) return 1;
    if (sh_parse_int(sh_kv(w, "steps"), 1, 1LL << 30, "steps", &n, err)) return 1;
    StressReport r;
    int rc = engine_stress(E_, mult, n, &r, err);
    if (!r.done) {  // no step ran: no report (a refused first step said "steps=1 ... final loss 0.0000";
        // Ctrl-C before the first, "steps=0 ... final loss nan")
        if (!rc) fprintf(OUT, "stress lr_mult=%g: interrupted before its first step, nothing to report\n", mult);
        return rc;
    }
    char jd[128] = "";
    if (r.judged < r.done - r.nonfinite)  // QA: 10 steps from 5.5 to 102 said "loss spikes 0"
        snprintf(jd, sizeof jd, " (judged %lld of %lld steps: a step needs 10 earlier finite losses)", r.judged, r.done);
    // (skipped: this run's, as every other number here; the model's total was printed, so a run
    // without a skip said "skipped 3" after an earlier one: QA, session 24)
    char bad[96] = "";
    if (r.gnorm_bad == r.done) snprintf(bad, sizeof bad, " (no norm was finite)");
    else if (r.gnorm_bad) snprintf(bad, sizeof bad, " (of the finite norms: %lld not finite)", r.gnorm_bad);
    // cut short: the numbers are over the steps that ran, and a run of other length (spikes and
    // p99.9 depend on it): said in the line's head, never read as a finished protocol (QA, session 29)
    char cutw[160] = "";
    if (r.done < n)
        snprintf(cutw, sizeof cutw, ", %s after %lld step%s (the model keeps them; the numbers are over them)",
                 r.interrupted ? "interrupted" : "stopped", r.done, r.done == 1 ? "" : "s");
    // an arm that is off ran nothing: "off", not a measured-looking 0 (QA, session 30)
    char amax[3][24];
    uint16_t off = arms_off_mask(&E_->model.arms);
    const int ids[3] = {ARM_KDA, ARM_ENGRAM, ARM_MOE};
    for (int k = 0; k < 3; k++)
        if (off >> ids[k] & 1) snprintf(amax[k], sizeof amax[k], "off");
        else snprintf(amax[k], sizeof amax[k], "%.3g", r.amax[k]);
    // the bar beside the step-to-step noise it is judged against: a count made of noise reads as one
    char nz[160] = "";
    if (isfinite(r.noise)) snprintf(nz, sizeof nz, " (bar +0.1 nat over the running median; the loss's step-to-step scatter: sigma %.3g)", r.noise);
    char gb[32], lb[32];
    fprintf(OUT, "stress lr_mult=%g steps=%lld%s: loss spikes %lld%s%s, non-finite losses %lld, gnorm p99.9 %s%s, final loss %s, arm maxima |kda| %s |engram| %s |moe| %s, skipped %lld (the model's total %lld)\n",
            mult, n, cutw, r.spikes, jd, nz, r.nonfinite, sh_num(gb, r.gnorm_p999, 3), bad, sh_num(lb, r.final_loss, 4),
            amax[0], amax[1], amax[2], r.skipped, (long long)E_->opt.total_skips);
    return rc;
}

double model_flops_per_step(const Config *c, int B, int T, const Arms *arms);

// FLOP/s of the backend's matrix product on 1024^3 (best of 3), the CPU's stand-in for a peak
// rate; 0 when the memory is not there. Operands are drawn, not zeros.
static double gemm_rate_1024(const Backend *be) {
    const int n = 1024;
    size_t bytes = sizeof(real) * (size_t)n * n;
    real *h = malloc(bytes), *A = be->alloc(bytes), *B = be->alloc(bytes), *C = be->alloc(bytes);
    double best = 0;
    if (h && A && B && C) {
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < (size_t)n * n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; h[i] = (real)((x >> 40) * 0x1p-24 - 0.5); }
        be->upload(A, h, bytes);
        be->upload(B, h, bytes);
        for (int r = 0; r < 3; r++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            be->gemm(0, 1, n, n, n, 1, A, n, B, n, 0, C, n);
            if (be->sync) be->sync();
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            double rate = 2.0 * n * n * n / dt;
            if (rate > best) best = rate;
        }
    }
    free(h);
    if (A) be->free(A);
    if (B) be->free(B);
    if (C) be->free(C);
    return best;
}

// the process's peak back after :bench measured its own: the larger of the two. steps_peak is
// the steps' own, read before the MFU reference product: its three 1024^3 buffers are :bench's
// scratch, not what the model used (a QA pass found :show device's peak 3.3 -> 15.9 MB after a
// :bench of a tiny model, session 30)
static void peak_back(const Backend *be, size_t peak0, size_t steps_peak) {
    if (!be->mem_stats || !be->mem_peak_set) return;
    be->mem_peak_set(steps_peak > peak0 ? steps_peak : peak0);
}

int cmd_bench(Shell *sh, Words *w, dm_err *err) {
    static const char *const keys[] = {"steps", NULL};
    if (sh_check_keys(w, 0, keys, err)) return 1;
    long long n = 5;
    if (sh_kv(w, "steps") && sh_parse_int(sh_kv(w, "steps"), 1, 100000, "steps", &n, err)) return 1;
    Engine *e = E_;
    if (!e->live || !e->has_data) return dm_fail(err, !e->live ? "no model: :init builds one" : "no data: :data PATH opens a corpus");
    Snapshot s;
    if (snapshot_take(&s, e, err)) return 1;
    char sess[1024];
    snprintf(sess, sizeof sess, "%s", e->session_dir);
    e->session_dir[0] = 0;
    int warm = 2, rc = 0;
    double *ms = mallocCheck(sizeof(double) * n);
    MetricRow r;
    // the peak of these steps, not of the process (an earlier, larger model; the 1024^3
    // product's buffers of an earlier :bench: QA, session 24); the process's own is put back
    const Backend *be = e->model.be;
    size_t cur = 0, peak = 0, peak0 = 0;
    if (be->mem_stats && be->mem_peak_set) {
        be->mem_stats(&cur, &peak0);
        be->mem_peak_set(0);
    }
    int intr = 0;
    for (int i = 0; i < warm && !rc && !(intr = e->interrupt && *e->interrupt); i++) rc = engine_step(e, &r, err);
    long long first = e->step, done = 0;
    for (long long i = 0; i < n && !rc && !intr && !(intr = e->interrupt && *e->interrupt); i++) { rc = engine_step(e, &r, err); ms[i] = r.ms; done++; }
    if (intr && !rc) {  // Ctrl-C: the state goes back as always; nothing is reported as a timing
        e->intr_honored++;
        snapshot_restore(&s, e);
        snapshot_free(&s);
        snprintf(e->session_dir, sizeof e->session_dir, "%s", sess);
        free(ms);
        if (be->mem_stats) be->mem_stats(&cur, &peak);
        peak_back(be, peak0, peak);
        return dm_fail(err, "interrupted after %lld timed steps: no timing reported; the state is restored (step %lld)", done,
                       (long long)e->step);
    }
    for (long long a = done; a < n; a++) ms[a] = 0;  // (a failed step ended the timing: the rest is never reported, only sorted)
    double med = bench_median(ms, n);
    double fl = model_flops_per_step(&e->cfg, e->cfg.batch, e->cfg.seq, &e->model.arms);
    if (be->mem_stats) be->mem_stats(&cur, &peak);
    double flops = fl / (med / 1e3);
    if (!rc) {
        // an emulated device (tests/cuemu) says so on the line itself: its times are the CPU's
        // (the engine's mark, as on the step lines and in metrics.tsv)
        const char *emu = e->emulated ? " [cuemu: the CUDA code emulated on the CPU, not a GPU time]" : "";
        // model FLOP/s in the unit of the device's scale (SPEC §8: TFLOP/s on a GPU, whose peak is quoted so)
        int dev = be->peak_tflops != NULL;
        // (at least 3 significant digits in plain decimals: a tiny model's TFLOP/s printed "0.000"
        // beside a non-zero MFU; at most 9 decimals)
        double rate = flops / (dev ? 1e12 : 1e9);
        int dec = rate > 0 && isfinite(rate) ? 2 - (int)floor(log10(rate)) : 2;
        dec = dec < (dev ? 3 : 2) ? (dev ? 3 : 2) : dec > 9 ? 9 : dec;
        // the arms that were off (the step lines' tag): an ablation's speed is not the model's
        char off[80];
        arms_mask_tag(arms_off_mask(&e->model.arms), off, sizeof off);
        fprintf(OUT, "bench %s%s%s (%s): %.2f ms/step (median of steps %lld..%lld, %d warm), %.0f tok/s, %.*f %s model",
                e->device, emu, off, REAL_NAME, med, first, first + n - 1, warm, e->cfg.batch * e->cfg.seq / (med / 1e3),
                dec, rate, dev ? "TFLOP/s" : "GFLOP/s");
        // MFU as a percentage on both backends, with its denominator named
        if (be->peak_tflops) {
            double pk = be->peak_tflops();
            if (pk > 0)
                fprintf(OUT, ", MFU %.1f%% of the measured bf16 peak (%.3g TFLOP/s%s)", 100 * flops / (pk * 1e12), pk,
                        e->cfg.precision_fp32 ? "; this run is precision=fp32" : "");
            else fprintf(OUT, ", MFU n/a (the bf16 peak could not be measured: no free device memory)");
        } else {  // the CPU: the backend's own product on 1024^3 now, as make bench (SPEC §8's MFU)
            double g = gemm_rate_1024(be);
            if (g > 0) fprintf(OUT, ", MFU %.1f%% of the %.4g GFLOP/s a 1024^3 product reached just now", 100 * flops / g, g / 1e9);
        }
        fprintf(OUT, "; %s memory %.1f MB now, %.1f MB peak\n", dev ? "device" : "backend", cur / 1e6, peak / 1e6);
    }
    free(ms);
    snapshot_restore(&s, e);
    snapshot_free(&s);
    snprintf(e->session_dir, sizeof e->session_dir, "%s", sess);
    peak_back(be, peak0, peak);
    return rc;
}

