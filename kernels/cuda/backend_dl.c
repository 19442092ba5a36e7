// backend_dl.c — dmsh's way to the CUDA backend: libdmcuda.so from the folder dmsh's own binary
// is in, loaded by the first :device cuda (or :check parity).
//
// Why not linked in: cuBLAS and cudart loaded at every start-up — `dmsh -e :quit` took 0.13 s and
// 221 MB of RSS on the CPU host against 0.00 s and 3 MB without them, paid by every CPU session
// and every dmsh a test spawns. Loaded here, only a session that asks for the GPU pays it.
//
// The file is opened when dmsh starts (a constructor: one open, no loading) and loaded through
// that descriptor later: a `make` that relinks the library while a dmsh runs (hours, then its
// first :device cuda) replaces the file at its name, and this dmsh still gets the library of
// its own build, not a newer one whose Backend table it does not match.
//
// The library's undefined symbols (the guard of kernels/guard.h, dm_fmt_bytes) bind to this
// executable's (dmsh is linked -rdynamic), so a raise inside a CUDA op reaches the engine's guard
// stack; the library is linked -Bsymbolic so its own symbols never bind to dmsh's.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../backend.h"

typedef const Backend *(*BackendEntry)(int device, char *why, size_t n);

static char lib_path[PATH_MAX + 16];  // <dmsh's folder>/libdmcuda.so ("" when not found out)
static int lib_fd = -1, lib_errno;    // the open file, or why it could not be opened

__attribute__((constructor)) static void open_library(void) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);  // (./dmsh: the file it links to)
    if (len <= 0) return;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = 0;
    if (snprintf(lib_path, sizeof lib_path, "%s/libdmcuda.so", exe) >= (int)sizeof lib_path) {
        lib_path[0] = 0;
        return;
    }
    lib_fd = open(lib_path, O_RDONLY | O_CLOEXEC);
    if (lib_fd < 0) lib_errno = errno;
}

const Backend *backend_cuda(int device, char *why, size_t n) {
    static BackendEntry entry;  // kept once loaded: the library stays for the process
    if (!entry) {
        if (!lib_path[0]) {
            snprintf(why, n, "cannot locate this binary (/proc/self/exe) to load the CUDA backend beside it: use :device cpu");
            return NULL;
        }
        if (lib_fd < 0) {
            if (lib_errno == ENOENT)
                snprintf(why, n, "the CUDA backend %s is missing (make builds it beside dmsh; a dmsh copied elsewhere needs "
                         "it beside it): use :device cpu", lib_path);
            else
                snprintf(why, n, "cannot open the CUDA backend %s: %s: use :device cpu", lib_path, strerror(lib_errno));
            return NULL;
        }
        char fdp[64];
        snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", lib_fd);
        // RTLD_NOW: a symbol missing from the library or from dmsh is an error here, not a crash
        // at its first call mid-step
        void *h = dlopen(fdp, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            const char *colon = e ? strstr(e, ": ") : NULL;  // (dlerror starts with the fd path: the real one instead)
            snprintf(why, n, "cannot load the CUDA backend %s%s: use :device cpu", lib_path, colon ? colon : "");
            return NULL;
        }
        BackendEntry f;
        *(void **)&f = dlsym(h, "backend_cuda");  // (ISO C has no function-pointer cast from void *)
        if (!f) {
            snprintf(why, n, "%s has no backend_cuda (not a dmsh CUDA backend; rebuild with make): use :device cpu", lib_path);
            dlclose(h);
            return NULL;
        }
        entry = f;
    }
    return entry(device, why, n);
}
