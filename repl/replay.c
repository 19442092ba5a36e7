// replay.c — `dmsh --replay FILE.dm` (SPEC §7): the script run in two processes, one after the
// other, and compared bit for bit: the loss of every train step, every eval BPB, the final step,
// and each parameter tensor and optimizer moment. `:check determinism` proves the same inside one
// process; this catches what only a new process changes (an uninitialised buffer, an address-
// dependent order, a thread pool started differently).
//
// Each child is this binary with `-b FILE.dm` and DMSH_DIGEST=PATH in its environment: at exit
// it writes a digest of its state there (replay_write_digest). Sessions are not opened in the
// children (DMSH_DIGEST makes :session a no-op that says so): two runs of one script would
// otherwise meet in the same runs/NAME, the second refused or resuming the first.
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../engine/engine.h"
#include "replay.h"

static uint64_t fnv64(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
    return h;
}

int replay_write_digest(const Engine *e, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    // the test hooks that prove the comparison can fail (the second child alone has
    // DMSH_REPLAY_PERTURB): 1 adds a line; 2 changes a hex digit of the first train row's gnorm
    // and 3 one bit of the first tensor's Adam first moment, each in place, the line's length
    // kept (a comparison of lengths alone, or an m column hashed from the parameters, passed them)
    const char *perturb = getenv("DMSH_REPLAY_PERTURB");
    int pk = perturb ? atoi(perturb) : 0, moved = 0;
    fprintf(f, "step %lld\n", (long long)e->step);
    // %a: the exact bits of each double, readable
    for (int i = 0; i < e->nrows; i++) {
        const MetricRow *r = &e->rows[i];
        if (r->kind == 0) {
            char g[64];
            snprintf(g, sizeof g, "%a", r->gnorm);
            char *x = strchr(g, 'p');  // (the hook above: the digit before the exponent)
            if (pk == 2 && !moved && x && x > g) { x[-1] = x[-1] == '1' ? '3' : '1'; moved = 1; }
            fprintf(f, "train %lld loss %a gnorm %s skipped %d\n", (long long)r->step, r->loss, g, r->skipped);
        }
        else fprintf(f, "eval %lld depth %d bpb %a\n", (long long)r->step, r->depth, r->bpb);
    }
    if (e->live) {
        const Model *m = &e->model;
        size_t n = m->n_params;
        real *p = malloc(sizeof(real) * n), *mm = malloc(sizeof(real) * n), *vv = malloc(sizeof(real) * n),
             *mo = malloc(sizeof(real) * n);
        if (!p || !mm || !vv || !mo) { free(p); free(mm); free(vv); free(mo); fclose(f); return 1; }
        model_params_get(m, p);
        int64_t *rs = callocCheck(((size_t)m->cfg.n_orders * m->cfg.engram_rows + 1) * sizeof(int64_t));
        optim_state_get(&e->opt, m, mm, vv, mo, rs);
        free(rs);
        if (pk == 3) ((unsigned char *)(mm + m->t[0].offset))[0] ^= 1;  // (the hook above)
        for (int i = 0; i < P_COUNT; i++) {
            const ParamTensor *t = &m->t[i];
            size_t b = sizeof(real) * t->numel;
            fprintf(f, "tensor %s %016llx m %016llx v %016llx mom %016llx\n", t->name,
                    (unsigned long long)fnv64(p + t->offset, b, 0xcbf29ce484222325ull),
                    (unsigned long long)fnv64(mm + t->offset, b, 0xcbf29ce484222325ull),
                    (unsigned long long)fnv64(vv + t->offset, b, 0xcbf29ce484222325ull),
                    (unsigned long long)fnv64(mo + t->offset, b, 0xcbf29ce484222325ull));
        }
        free(p); free(mm); free(vv); free(mo);
    }
    if (pk == 1) fprintf(f, "perturbed\n");
    return fclose(f) != 0;
}

// The running child: a SIGINT, SIGTERM or SIGHUP sent to the parent alone is passed on, so the
// child stops at a step boundary as a script does, fails, and the parent cleans up (it would
// otherwise be left running, orphaned, or the replay would carry on and report).
static volatile pid_t g_child;
static void forward_signal(int sig) {
    if (g_child > 0) kill(g_child, sig);
}

// Run `self -b script` with DMSH_DIGEST=digest; its stdout goes to /dev/null (the first run's
// lines are the user's to read: it is shown), stderr stays.
// DMSH_REPLAY_DIR: where a :save without a path goes in the child (its session is not opened,
// so it would otherwise write dmsh-step-N.ckpt into the working directory, twice).
static int run_child(const char *self, const char *script, const char *shown, const char *digest,
                     const char *savedir, int quiet, int perturb) {
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        // a parent killed outright (SIGKILL: nothing to pass on) takes the child with it: it
        // trained on to the end, orphaned, and left a checkpoint in TMPDIR (QA, session 27).
        // (the parent may be gone before the prctl: then its new parent is another process)
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
        setenv("DMSH_DIGEST", digest, 1);
        setenv("DMSH_REPLAY_DIR", savedir, 1);
        setenv("DMSH_REPLAY_NAME", shown, 1);  // the name its messages give the script (a copy's original)
        if (!perturb) unsetenv("DMSH_REPLAY_PERTURB");
        if (quiet && !freopen("/dev/null", "w", stdout)) _exit(127);
        execl(self, self, "--norc", "-b", script, (char *)NULL);
        fprintf(stderr, "dmsh: --replay: cannot run %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    g_child = pid;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) { g_child = 0; return -1; }
    g_child = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && (got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) { free(s); s = NULL; }
            else s = t;
        }
    }
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

// A child's save directory and everything in it: :train's checkpoints, and :plot's PNGs in a
// plots/ folder of their own (a flat removal left that folder, and the directory, behind in
// TMPDIR on every replay that plotted). FTW_PHYS: a link is removed, never followed.
static int remove_entry(const char *p, const struct stat *st, int type, struct FTW *f) {
    (void)st; (void)f;
    if (type == FTW_DP) rmdir(p);  // best effort: go on past a failure
    else unlink(p);
    return 0;
}
static void remove_save_dir(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// A script that is not a regular file (a pipe, /dev/stdin, a process substitution) can be read
// once: the first child would consume it and the second run an empty script, a false "NOT
// bit-identical". It is copied into `copy` (created 0600) and both children run the copy.
static int copy_script(const char *script, const char *tmp, char *copy, size_t n) {
    snprintf(copy, n, "%s/dmsh-replay-%d-XXXXXX.dm", tmp, (int)getpid());
    int fd = mkstemps(copy, 3);
    if (fd < 0) return -1;
    FILE *in = fopen(script, "r"), *out = fdopen(fd, "w");
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out); else close(fd);
        unlink(copy);
        return -1;
    }
    char buf[65536];
    size_t got;
    int bad = 0;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, got, out) != got) bad = 1;
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(out) != 0;
    if (bad) { unlink(copy); return -1; }
    return 0;
}

// What a --replay killed with SIGKILL left in TMPDIR (its digests, the script copy, the save
// directories with every checkpoint its child wrote: 64 MB at a tiny config; QA, session 33): the
// names carry the replay's pid, and the next --replay removes those of a pid that no longer
// exists and of this user (never a running replay's, never another user's).
static void sweep_dead(const char *tmp) {
    DIR *dir = opendir(tmp);
    if (!dir) return;
    struct dirent *de;
    while ((de = readdir(dir))) {
        const char *n = de->d_name;
        int save = !strncmp(n, "dmsh-replay-save-", 17);
        const char *rest = save ? n + 17 : !strncmp(n, "dmsh-replay-", 12) ? n + 12 : NULL;
        if (!rest) continue;
        char *end;
        long pid = strtol(rest, &end, 10);
        if (pid <= 0 || end == rest || *end != '-') continue;  // (an older build's name: left)
        // exactly the names made above: PID-XXXXXX (six of mkstemp's letters and digits), and
        // for the script copy .dm after them; anything else is not ours (a review found a user's
        // dmsh-replay-999999-my-notes.txt removed)
        const char *x = end + 1;
        int ok = 1;
        for (int k = 0; k < 6; k++) ok &= (x[k] >= 'a' && x[k] <= 'z') || (x[k] >= 'A' && x[k] <= 'Z') || (x[k] >= '0' && x[k] <= '9');
        if (!ok || !(x[6] == 0 || (!save && !strcmp(x + 6, ".dm")))) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", tmp, n);
        struct stat st;
        if (lstat(p, &st) || st.st_uid != getuid()) continue;
        if (save && S_ISDIR(st.st_mode)) remove_save_dir(p);
        else if (!save && S_ISREG(st.st_mode)) unlink(p);
    }
    closedir(dir);
}

int replay_main(const char *script) {
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) { fprintf(stderr, "dmsh: --replay: cannot find this binary (/proc/self/exe)\n"); return 2; }
    self[sl] = 0;
    if (access(script, R_OK)) { fprintf(stderr, "dmsh: --replay: cannot read %s: %s\n", script, strerror(errno)); return 2; }
    const char *tmpenv = getenv("TMPDIR");
    const char *tmp = tmpenv && tmpenv[0] ? tmpenv : "/tmp";
    sweep_dead(tmp);
    char d[2][4200], sd[2][4200], copy[4200] = "";
    const char *run_script = script;
    struct stat sst;
    if (stat(script, &sst) == 0 && !S_ISREG(sst.st_mode)) {
        if (S_ISDIR(sst.st_mode)) { fprintf(stderr, "dmsh: --replay: %s is a directory, not a script\n", script); return 2; }
        if (copy_script(script, tmp, copy, sizeof copy)) {
            fprintf(stderr, "dmsh: --replay: cannot copy %s into a temp file in %s: %s\n", script, tmp, strerror(errno));
            return 2;
        }
        run_script = copy;
        fprintf(stderr, "replay %s: not a regular file; both processes run a copy (%s)\n", script, copy);
    }
    // created here (O_EXCL, mode 0600): a name guessed in advance, or a link planted there,
    // cannot redirect what the children write
    for (int k = 0; k < 2; k++) {
        snprintf(d[k], sizeof d[k], "%s/dmsh-replay-%d-XXXXXX", tmp, (int)getpid());
        snprintf(sd[k], sizeof sd[k], "%s/dmsh-replay-save-%d-XXXXXX", tmp, (int)getpid());
        int fd = mkstemp(d[k]);
        if (fd < 0 || !mkdtemp(sd[k])) {
            fprintf(stderr, "dmsh: --replay: cannot create a digest file in %s: %s (set TMPDIR)\n", tmp, strerror(errno));
            if (fd >= 0) { close(fd); unlink(d[k]); }
            if (k) { unlink(d[0]); remove_save_dir(sd[0]); }
            if (copy[0]) unlink(copy);
            return 2;
        }
        close(fd);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    char *dig[2] = {NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        fprintf(stderr, "replay %s: process %d of 2\n", script, k + 1);
        int st = run_child(self, run_script, script, d[k], sd[k], k == 1, k == 1);
        if (st != 0) {
            fprintf(stderr, "dmsh: --replay: process %d of 2 failed (exit %d): the script must run to its end\n", k + 1, st);
            rc = 1;
            break;
        }
        dig[k] = slurp(d[k]);
        if (!dig[k]) { fprintf(stderr, "dmsh: --replay: process %d wrote no digest (%s)\n", k + 1, d[k]); rc = 1; }
    }
    if (!rc) {
        // the first line that differs names what differs
        const char *a = dig[0], *b = dig[1];
        int line = 1, ntrain = 0, ntensor = 0;
        while (*a && *b) {
            size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
            if (la != lb || memcmp(a, b, la)) {
                printf("replay %s: NOT bit-identical across processes at digest line %d:\n  process 1: %.*s\n  process 2: %.*s\n",
                       script, line, (int)la, a, (int)lb, b);
                rc = 1;
                break;
            }
            ntrain += !strncmp(a, "train ", 6);
            ntensor += !strncmp(a, "tensor ", 7);
            a += la + (a[la] == '\n');
            b += lb + (b[lb] == '\n');
            line++;
        }
        if (!rc && (*a || *b)) {
            const char *more = *a ? a : b;
            int ml = (int)strcspn(more, "\n");
            printf("replay %s: NOT bit-identical: process %d's digest has more lines (from line %d: %.*s)\n", script, *a ? 1 : 2,
                   line, ml > 80 ? 80 : ml, more);
            rc = 1;
        }
        if (!rc && ntensor == 0) {  // an empty script (or a broken pipe upstream) compares nothing
            printf("replay %s: nothing to compare: the script built no model (is it empty?)\n", script);
            rc = 1;
        }
        if (!rc)
            printf("replay %s: 2 processes bit-identical: %d train steps (losses, gnorms), every eval, %d tensors with "
                   "their optimizer moments\n",
                   script, ntrain, ntensor);
    }
    for (int k = 0; k < 2; k++) { free(dig[k]); unlink(d[k]); remove_save_dir(sd[k]); }
    if (copy[0]) unlink(copy);
    return rc;
}
