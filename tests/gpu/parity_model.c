// parity_model.c — `:check parity` for every preset's shapes (tiny batch), every arm on and each
// arm off, at precision fp32 (bar 1e-4) and bf16 (bar 3e-2): one training step from identical
// weights on the CPU and on CUDA, the loss and every parameter's gradient (engine/parity.c).
// Built and run by tests/gpu/run.sh on a machine with a GPU; prints one row per case and exits
// non-zero if any case fails.
#include <stdio.h>
#include <string.h>
#include "../../engine/engine.h"
#include "../../engine/parity.h"

int main(int argc, char **argv) {
    const char *presets[] = {"nano", "mini", "small", "base", "large"};
    const int arms[] = {-1, ARM_KDA, ARM_ENGRAM, ARM_MOE, ARM_REZERO};
    int quick = argc > 1 && !strcmp(argv[1], "quick");
    char why[300];
    const Backend *cu = backend_cuda(0, why, sizeof why);
    if (!cu) { fprintf(stderr, "parity_model: %s\n", why); return 2; }
    int fails = 0, rows = 0;
    printf("%-6s %-12s %-5s %10s %10s  %-16s %s\n", "preset", "arms", "prec", "loss rel", "worst", "worst tensor", "result");
    for (int p = 0; p < 5; p++)
        for (int a = 0; a < 5; a++)
            for (int prec = 1; prec >= 0; prec--) {
                if (p == 4 && (a > 0 || prec == 0)) continue;  // large: 820M reals on the CPU side; once
                if (quick && (a > 0 || p > 1)) continue;
                Engine e;
                dm_err err = {0};
                engine_init(&e);
                if (config_preset(&e.cfg, presets[p], &err)) { printf("%s: %s\n", presets[p], err.msg); fails++; continue; }
                e.cfg.batch = 2;
                e.cfg.seq = 128;
                if (engine_build(&e, 1234, &err)) { printf("%s: %s\n", presets[p], err.msg); fails++; continue; }
                if (arms[a] >= 0) e.model.arms.on[arms[a]] = 0;
                ParityReport rep;
                cu->set_precision(prec);
                int rc = engine_check_parity(&e, backend_cpu(), cu, 0, 0, prec ? 1e-4 : 3e-2, &rep, &err);
                char an[32];
                snprintf(an, sizeof an, "%s%s", arms[a] < 0 ? "all on" : dm_arm_names[arms[a]], arms[a] < 0 ? "" : " off");
                if (rc) {
                    printf("%-6s %-12s %-5s  error: %s\n", presets[p], an, prec ? "fp32" : "bf16", err.msg);
                    fails++;
                } else {
                    printf("%-6s %-12s %-5s %10.2e %10.2e  %-16s %s\n", presets[p], an, prec ? "fp32" : "bf16", rep.loss_rel,
                           rep.worst, rep.worst_name, rep.ok ? "PASS" : "FAIL");
                    fails += !rep.ok;
                }
                rows++;
                fflush(stdout);
                engine_free(&e);
            }
    printf("parity_model: %d of %d cases pass\n", rows - fails, rows);
    return fails ? 1 : 0;
}
