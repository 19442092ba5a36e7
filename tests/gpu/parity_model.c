// parity_model.c — `:check parity` for every preset's shapes (tiny batch), every arm on and each
// arm off, at precision fp32 (bar 1e-4) and bf16 (bar 3e-2): one training step from identical
// weights on the CPU and on CUDA, the loss and every parameter's gradient (engine/parity.c).
// Then host-RAM Engram tables (engram_ram = on): the same parity with the tables in host memory
// on both sides, and 8 training steps on CUDA with the tables in host memory against 8 with them
// in device memory (fp32: losses within 1e-4; the device's row scatter sums in its own order).
// Built and run by tests/gpu/run.sh on a machine with a GPU; prints one row per case and exits
// non-zero if any case fails.
// Arguments, any order: `quick` (nano and mini only), `own` (each side routes its own top-k: the
// CPU does not follow CUDA's MoE routing; for diagnosis), `seed=N` (the weights' seed, 1234),
// `only=PRESET` (that preset's rows only, its host-RAM rows included), `allon` (only the rows with
// every arm on).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../engine/engine.h"
#include "../../engine/parity.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // a log that ends in a hang or crash still names its last row
    const char *presets[] = {"nano", "mini", "small", "base", "large"};
    const int arms[] = {-1, ARM_KDA, ARM_ENGRAM, ARM_MOE, ARM_REZERO};
    int quick = 0, own = 0, allon = 0;
    unsigned long long seed = 1234;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "quick")) quick = 1;
        else if (!strcmp(argv[i], "own")) own = 1;
        else if (!strcmp(argv[i], "allon")) allon = 1;
        else if (!strncmp(argv[i], "seed=", 5)) seed = strtoull(argv[i] + 5, NULL, 10);
        else if (!strncmp(argv[i], "only=", 5)) only = argv[i] + 5;
        else { fprintf(stderr, "parity_model: unknown argument '%s' (quick, own, allon, seed=N, only=PRESET)\n", argv[i]); return 2; }
    }
    char why[300];
    const Backend *cu = backend_cuda(0, why, sizeof why);
    if (!cu) { fprintf(stderr, "parity_model: %s\n", why); return 2; }
    int fails = 0, rows = 0;
    // zero: tensors whose gradient is 0 on both sides (an arm off: its own); moved: CUDA's
    // token-expert assignments that the CPU's own top-k does not make; gap: the worst of them in
    // the CPU's softmax, relative (a tie within rounding: ~0; see ParityReport). The CPU follows
    // CUDA's routing unless `own`. floor (bf16 rows): the worst tensor's difference between two
    // CPU references from weights one float ulp apart: how much of it is the step's conditioning.
    printf("routing: %s; seed %llu\n", own ? "each side its own top-k (own)" : "the CPU follows CUDA's top-k", seed);
    printf("%-6s %-12s %-5s %10s %10s  %-16s %8s %5s %6s %8s  %s\n", "preset", "arms", "prec", "loss rel", "worst", "worst tensor",
           "floor", "zero", "moved", "gap", "result");
    // One engine per preset, built once (the seed is fixed, so every row of a preset starts from
    // the same weights): building one is seconds at base and large on one core.
    for (int p = 0; p < 5; p++) {
        if ((quick && p > 1) || (only && strcmp(only, presets[p]))) continue;
        Engine e;
        dm_err err = {0};
        engine_init(&e);
        if (config_preset(&e.cfg, presets[p], &err)) { printf("%s: %s\n", presets[p], err.msg); fails++; continue; }
        e.cfg.batch = 2;
        e.cfg.seq = 128;
        // large: its 4M-row tables (768M reals) would take minutes to initialise and say nothing a
        // 4096-row table does not: the ops see row indices
        if (p == 4) e.cfg.engram_rows = 4096;
        if (engine_build(&e, seed, &err)) { printf("%s: %s\n", presets[p], err.msg); fails++; engine_free(&e); continue; }
        // At the seed's initialisation ReZero's alpha is 0: the arms add nothing to the loss and
        // every arm parameter's gradient is exactly 0 on both backends, so a row would compare
        // zeros. alpha = 0.5 (the live model is on the CPU: host memory) makes every arm count.
        e.model.params[e.model.t[P_ALPHA].offset] = (real)0.5;
        for (int a = 0; a < 5; a++)
            for (int prec = 1; prec >= 0; prec--) {
                if (p == 4 && (a > 0 || prec == 0)) continue;  // large: once (its shapes, all arms, fp32)
                if ((quick || allon) && a > 0) continue;
                arms_init(&e.model.arms);
                if (arms[a] >= 0) e.model.arms.on[arms[a]] = 0;
                ParityReport rep;
                cu->set_precision(prec);
                int rc = engine_check_parity(&e, backend_cpu(), cu, 0, 0, prec ? 1e-4 : 3e-2, !prec,
                                             (own ? PARITY_OWN_ROUTE : 0) | (prec ? 0 : PARITY_FLOOR), &rep, &err);
                char an[32];
                snprintf(an, sizeof an, "%s%s", arms[a] < 0 ? "all on" : dm_arm_names[arms[a]], arms[a] < 0 ? "" : " off");
                if (rc) {
                    printf("%-6s %-12s %-5s  error: %s\n", presets[p], an, prec ? "fp32" : "bf16", err.msg);
                    fails++;
                } else {
                    // with every arm on, no tensor may have a zero gradient (a row of zeros checks nothing)
                    int vacuous = arms[a] < 0 && rep.nzero > 0;
                    char gap[16] = "-";  // measured only where the CPU followed CUDA's routing
                    if (rep.route_followed) snprintf(gap, sizeof gap, "%.1e", rep.route_gap);
                    char fl[16] = "-";  // bf16 rows: the worst tensor's floor (the CPU against itself 1 ulp away)
                    if (rep.has_floor) snprintf(fl, sizeof fl, "%.2e", rep.worst_floor);
                    printf("%-6s %-12s %-5s %10.2e %10.2e  %-16s %8s %5d %6ld %8s  %s%s\n", presets[p], an, prec ? "fp32" : "bf16",
                           rep.loss_rel, rep.worst, rep.worst_name, fl, rep.nzero, rep.route_moved, gap,
                           rep.ok && !vacuous ? "PASS" : "FAIL", rep.route_bad ? " (routing not a routing)"
                           : !rep.ok && rep.has_floor && rep.worst <= 2 * rep.worst_floor ? " (within 2x its floor: conditioning)" : "");
                    fails += !rep.ok || vacuous;
                }
                rows++;
                fflush(stdout);
            }
        engine_free(&e);
    }
    // host-RAM tables: parity with the tables in host memory on both sides
    for (int p = 0; p < 3; p += 2) {
        if (only && strcmp(only, presets[p])) continue;
        Engine e;
        dm_err err = {0};
        engine_init(&e);
        config_preset(&e.cfg, presets[p], &err);
        e.cfg.batch = 2;
        e.cfg.seq = 128;
        e.cfg.engram_ram = 1;
        e.cfg.precision_fp32 = 1;
        ParityReport rep;
        cu->set_precision(1);
        int rc = engine_build(&e, seed, &err);
        if (!rc) {
            e.model.params[e.model.t[P_ALPHA].offset] = (real)0.5;  // every arm counts (see above)
            rc = engine_check_parity(&e, backend_cpu(), cu, 0, 0, 1e-4, 0, own ? PARITY_OWN_ROUTE : 0, &rep, &err);
        }
        if (rc) { printf("%-6s %-12s %-5s  error: %s\n", presets[p], "engram_ram", "fp32", err.msg); fails++; }
        else {
            char gap[16] = "-";
            if (rep.route_followed) snprintf(gap, sizeof gap, "%.1e", rep.route_gap);
            printf("%-6s %-12s %-5s %10.2e %10.2e  %-16s %8s %5d %6ld %8s  %s%s\n", presets[p], "engram_ram", "fp32", rep.loss_rel,
                   rep.worst, rep.worst_name, "-", rep.nzero, rep.route_moved, gap, rep.ok && !rep.nzero ? "PASS" : "FAIL",
                   rep.route_bad ? " (routing not a routing)" : "");
            fails += !rep.ok || rep.nzero;
        }
        rows++;
        engine_free(&e);
    }
    // host-RAM tables vs device tables, training on CUDA (fp32), nano, 8 steps
    if (!only || !strcmp(only, "nano")) {
        char corpus[64];
        snprintf(corpus, sizeof corpus, "/tmp/dmsh_pm_%d.txt", (int)getpid());
        FILE *f = fopen(corpus, "w");
        for (int i = 0; f && i < 20000; i++) fprintf(f, "line %d of the corpus: %s\n", i, i % 5 ? "to be" : "or not");
        if (f) fclose(f);
        double loss[2][8];
        int ok = 1;
        cu->set_precision(1);
        for (int ram = 0; ram < 2 && ok; ram++) {
            Engine e;
            dm_err err = {0};
            engine_init(&e);
            config_preset(&e.cfg, "nano", &err);
            e.cfg.engram_ram = ram;
            e.cfg.precision_fp32 = 1;  // engine_build sets the backend's precision from the config
            MetricRow r;
            if (engine_set_device(&e, cu, "cuda:0", &err) || engine_open_data(&e, corpus, NULL, &err) ||
                engine_build(&e, 99, &err)) { printf("engram_ram training: %s\n", err.msg); ok = 0; }
            for (int i = 0; ok && i < 8; i++) {
                if (engine_step(&e, &r, &err)) { printf("engram_ram training: %s\n", err.msg); ok = 0; }
                loss[ram][i] = r.loss;
            }
            engine_free(&e);
        }
        double worst = 0;
        for (int i = 0; ok && i < 8; i++) {
            double d = fabs(loss[1][i] - loss[0][i]) / fabs(loss[0][i]);
            worst = isnan(d) || d > worst ? (isnan(d) ? INFINITY : d) : worst;
        }
        int pass = ok && worst <= 1e-4;
        printf("%-6s %-12s %-5s %10s %10.2e  %-16s %8s %5s %6s %8s  %s\n", "nano", "ram train", "fp32", "8 steps", worst, "loss", "", "", "", "",
               pass ? "PASS" : "FAIL");
        fails += !pass;
        rows++;
        unlink(corpus);
    }
    printf("parity_model: %d of %d cases pass\n", rows - fails, rows);
    return fails ? 1 : 0;
}
