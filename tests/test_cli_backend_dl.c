// test_cli_backend_dl.c — kernels/cuda/backend_dl.c, dmsh's loader of libdmcuda.so, given files
// beside the binary that are not dmsh's CUDA backend (QA, session 38): a shared library without
// backend_cuda (the guard missing: a call through NULL, a segfault), one whose backend_cuda needs
// a symbol nobody defines (RTLD_LAZY instead of RTLD_NOW: "symbol lookup error" and exit 127 at
// its first call, the session gone), and a file that is no library at all (the loader's reason
// kept in the message). Each must be one refusal naming the file and why, and the process goes on.
//
// The loader itself needs no CUDA: it is compiled into this program, which copies itself into a
// scratch folder beside each fake library (built here with cc -shared) and runs the copy with
// --load, so this part runs on every machine, nvcc or not. Where dmsh itself has the loader (it
// was built with nvcc), the same libraries go beside a copy of dmsh too: the REPL's error lines.
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "cli_harness.h"
#include "../kernels/cuda/backend_dl.c"

static char self[512];  // this program (/proc/self/exe), copied beside each fake library

// A fake libdmcuda.so in DIR/SUB/ (the folder made): SRC built with cc -shared, or (compile = 0)
// SRC's text as the file: not a library
static void place_library(const char *sub, const char *src, int compile) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/%s && rm -f %s/%s/libdmcuda.so", dir, sub, dir, sub);
    assert_int_equal(system(cmd), 0);
    write_file("fake.c", src);
    if (compile)
        snprintf(cmd, sizeof cmd, "cd %s && ${CC:-cc} -shared -fPIC -o %s/libdmcuda.so fake.c", dir, sub);
    else
        snprintf(cmd, sizeof cmd, "cd %s && cp fake.c %s/libdmcuda.so", dir, sub);
    assert_int_equal(system(cmd), 0);
}

// What the dynamic loader itself says of FILE (RTLD_NOW), past its "PATH: " prefix: the reason
// backend_dl.c must keep ("" when it loads)
static void loader_reason(const char *sub, char *buf, size_t n) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/libdmcuda.so", dir, sub);
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    const char *e = h ? "" : dlerror();
    if (h) dlclose(h);
    const char *colon = strstr(e, ": ");
    snprintf(buf, n, "%s", colon ? colon + 2 : e);
}

// The copy of this program in DIR/SUB loads the library beside it: its one line, and it must
// have exited by itself (not a signal, not the loader's exit 127)
static void load_beside_copy(const char *sub, const char *want) {
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "cd %s && cp '%s' %s/t && ./%s/t --load > out.txt 2> err.txt", dir, self, sub, sub);
    int st = system(cmd);
    slurp_to("out.txt", out, sizeof out);
    slurp_to("err.txt", err_, sizeof err_);
    if (!WIFEXITED(st) || WEXITSTATUS(st) || strcmp(out, want))
        print_error("%s: status %#x\nstdout: %s\nstderr: %s\nwanted: %s\n", sub, st, out, err_, want);
    assert_true(WIFEXITED(st));            // a library without backend_cuda: not a call through NULL
    assert_int_equal(WEXITSTATUS(st), 0);  // a missing symbol: not the loader's "symbol lookup error" (127)
    assert_string_equal(out, want);
}

// The fakes: a library without the entry point; an entry point that needs a function no one
// defines (a libdmcuda.so of another build calling an engine symbol this dmsh lacks)
static const char *NOSYM = "int dm_fake_backend(void) { return 1; }\n";
static const char *UNDEF = "extern int dm_no_such_function(void);\n"
                           "const void *backend_cuda(int d, char *why, unsigned long n) {\n"
                           "    (void)d; (void)why; (void)n; return (const void *)(long)dm_no_such_function();\n}\n";
static const char *JUNK = "not a library\n";

static void test_loader_refuses_fakes(void **s) {
    (void)s;
    char want[1600], reason[600];
    // none beside it: missing
    assert_int_equal(sh_in_dir("mkdir -p none%s", ""), 0);
    snprintf(want, sizeof want, "refused: the CUDA backend %s/none/libdmcuda.so is missing (make builds it beside dmsh; "
             "a dmsh copied elsewhere needs it beside it): use :device cpu\n", dir);
    load_beside_copy("none", want);
    // a library, but not a dmsh CUDA backend: no backend_cuda in it
    place_library("nosym", NOSYM, 1);
    snprintf(want, sizeof want, "refused: %s/nosym/libdmcuda.so has no backend_cuda (not a dmsh CUDA backend; "
             "rebuild with make): use :device cpu\n", dir);
    load_beside_copy("nosym", want);
    // a symbol it needs defined nowhere: refused at the load, with the loader's reason
    place_library("undef", UNDEF, 1);
    loader_reason("undef", reason, sizeof reason);
    assert_non_null(strstr(reason, "dm_no_such_function"));
    snprintf(want, sizeof want, "refused: cannot load the CUDA backend %s/undef/libdmcuda.so: %s: use :device cpu\n", dir, reason);
    load_beside_copy("undef", want);
    // not a library at all: the loader's reason kept (glibc: "file too short")
    place_library("junk", JUNK, 0);
    loader_reason("junk", reason, sizeof reason);
    assert_true(reason[0] != 0);
    snprintf(want, sizeof want, "refused: cannot load the CUDA backend %s/junk/libdmcuda.so: %s: use :device cpu\n", dir, reason);
    load_beside_copy("junk", want);
}

// The same through dmsh (when it was built with the loader): one error line each, not a crash
static void test_dmsh_refuses_fakes(void **s) {
    (void)s;
    char real[sizeof dmsh], want[1600], reason[600];
    snprintf(real, sizeof real, "%s", dmsh);
    assert_int_equal(sh_in_dir("mkdir -p lone && cp %s lone/dmsh", dmsh), 0);
    snprintf(dmsh, sizeof dmsh, "%s/lone/dmsh", dir);
    run(":device cuda\n", out, sizeof out, err_, sizeof err_);
    if (strstr(err_, "built without CUDA")) {  // no nvcc at build time: the stub, no loader in dmsh
        print_message("dmsh has no CUDA loader (built without nvcc): only the loader's own test ran\n");
        snprintf(dmsh, sizeof dmsh, "%s", real);
        return;
    }
    place_library("lone", NOSYM, 1);
    snprintf(want, sizeof want, "s.dm:1: error: %s/lone/libdmcuda.so has no backend_cuda (not a dmsh CUDA backend", dir);
    expect_error(":device cuda\n", want);
    place_library("lone", UNDEF, 1);
    loader_reason("lone", reason, sizeof reason);
    snprintf(want, sizeof want, "s.dm:1: error: cannot load the CUDA backend %s/lone/libdmcuda.so: %s: use :device cpu", dir, reason);
    expect_error(":device cuda\n", want);
    assert_non_null(strstr(err_, "undefined symbol: dm_no_such_function"));
    place_library("lone", JUNK, 0);
    loader_reason("lone", reason, sizeof reason);
    snprintf(want, sizeof want, "s.dm:1: error: cannot load the CUDA backend %s/lone/libdmcuda.so: %s: use :device cpu", dir, reason);
    expect_error(":device cuda\n", want);
    snprintf(dmsh, sizeof dmsh, "%s", real);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--load")) {  // a copy beside a fake library: what the loader says
        char why[1200] = "";
        const Backend *be = backend_cuda(0, why, sizeof why);
        printf("%s: %s\n", be ? "loaded" : "refused", why);
        return be ? 3 : 0;
    }
    (void)SMALL;  // (cli_harness.h's small model: no model here)
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return 1;
    self[len] = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loader_refuses_fakes),
        cmocka_unit_test(test_dmsh_refuses_fakes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
