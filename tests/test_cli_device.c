// test_cli_device.c — dmsh as a process, on which device a model is built and resumed on (an
// audit of SPEC §0, session 40: "the model ... stay[s] resident (on the GPU when there is one)").
// dmsh starts on the CPU wherever it runs (docs/decisions.md); on a machine whose NVIDIA driver
// lists a GPU, an :init on the CPU that no :device chose says so. (-r going back to the device
// the session last chose: test_cli_saves test_resume_names_the_device here, and on the emulated
// GPU tests/cuemu/dmsh_device.sh check 8.)
#include "cli_harness.h"

// DMSH_NVIDIA_GPUS_DIR stands in for /proc/driver/nvidia/gpus (a directory per GPU)
static void gpus_dir(int n) {
    char p[600];
    snprintf(p, sizeof p, "%s/gpus", dir);
    assert_int_equal(sh_in_dir("rm -rf gpus && mkdir gpus%s", ""), 0);
    for (int i = 0; i < n; i++) {
        char c[100];
        snprintf(c, sizeof c, "mkdir gpus/0000:%02d:00.0", i);
        assert_int_equal(sh_in_dir("%s", c), 0);
    }
    setenv("DMSH_NVIDIA_GPUS_DIR", p, 1);
}

static void test_gpu_visible_note(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:init seed=1\n:init seed=2\n", SMALL);
    gpus_dir(1);
    expect_ok(script);
    // (each :init on the CPU says it, after the init line)
    const char *note = "note: 1 NVIDIA GPU visible here, and this model is on the CPU: `:device cuda` moves it there (dmsh starts on "
                       "the CPU wherever it runs; `:device cpu` keeps it here without this note)\n";
    expect_out(note);
    assert_non_null(strstr(strstr(out, note) + 1, note));
    assert_non_null(strstr(out, "device cpu (float)\nnote: 1 NVIDIA GPU visible") || strstr(out, "device cpu (double)\nnote: 1 NVIDIA GPU visible"));
    gpus_dir(2);
    expect_ok(script);
    expect_out("note: 2 NVIDIA GPUs visible here, and this model is on the CPU");
    // the CPU chosen: no note; no GPU listed (an empty directory, or none): no note
    snprintf(script, sizeof script, ":device cpu\n%s:init seed=1\n", SMALL);
    expect_ok(script);
    assert_null(strstr(out, "GPU"));
    snprintf(script, sizeof script, "%s:init seed=1\n", SMALL);
    gpus_dir(0);
    expect_ok(script);
    assert_null(strstr(out, "GPU"));
    setenv("DMSH_NVIDIA_GPUS_DIR", "/nonexistent/gpus", 1);
    expect_ok(script);
    assert_null(strstr(out, "GPU"));
    unsetenv("DMSH_NVIDIA_GPUS_DIR");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_visible_note),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
