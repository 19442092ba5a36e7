// backend_dl.c — dmsh's way to the CUDA backend: libdmcuda.so, loaded by the first :device cuda
// (or :check parity), from the folder dmsh's own binary is in.
//
// Why not linked in: cuBLAS and cudart loaded at every start-up — `dmsh -e :quit` took 0.13 s and
// 221 MB of RSS on the CPU host against 0.00 s and 3 MB without them, paid by every CPU session
// and every dmsh a test spawns. Loaded here, only a session that asks for the GPU pays it.
//
// The library's undefined symbols (the guard of kernels/guard.h, dm_fmt_bytes) bind to this
// executable's (dmsh is linked -rdynamic), so a raise inside a CUDA op reaches the engine's guard
// stack; the library is linked -Bsymbolic so its own symbols never bind to dmsh's.
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../backend.h"

typedef const Backend *(*BackendEntry)(int device, char *why, size_t n);

// the library's path: libdmcuda.so beside the binary (the symlink ./dmsh resolves to build/*/dmsh)
static int library_path(char *path, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return -1;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    return snprintf(path, n, "%s/libdmcuda.so", exe) < (int)n ? 0 : -1;
}

const Backend *backend_cuda(int device, char *why, size_t n) {
    static BackendEntry entry;  // kept once loaded: the library stays for the process
    if (!entry) {
        char path[PATH_MAX + 16];
        if (library_path(path, sizeof path)) {
            snprintf(why, n, "cannot locate this binary (/proc/self/exe) to load the CUDA backend beside it: use :device cpu");
            return NULL;
        }
        // RTLD_NOW: a symbol missing from the library or from dmsh is an error here, not a crash
        // at its first call mid-step
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            if (access(path, F_OK))
                snprintf(why, n, "the CUDA backend %s is missing (make builds it beside dmsh; a dmsh copied "
                         "elsewhere needs it beside it): use :device cpu", path);
            else
                snprintf(why, n, "cannot load the CUDA backend: %s: use :device cpu", e ? e : path);
            return NULL;
        }
        BackendEntry f;
        *(void **)&f = dlsym(h, "backend_cuda");  // (ISO C has no function-pointer cast from void *)
        if (!f) {
            snprintf(why, n, "%s has no backend_cuda (not a dmsh CUDA backend; rebuild with make): use :device cpu", path);
            dlclose(h);
            return NULL;
        }
        entry = f;
    }
    return entry(device, why, n);
}
