// cpu_check.c — a dmsh built with OPT's default -march=native carries the build machine's
// instructions (here AVX-512); copied to a CPU without them it would die with SIGILL somewhere
// in its first loop. This runs before anything else of dmsh (the first constructor), compiled
// for plain x86-64 whatever OPT says, and names what is missing and how to build for this CPU.
#if defined(__x86_64__) && defined(__GNUC__)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DM_BASE __attribute__((target("arch=x86-64")))

// DM_CPU_LACKS=NAME[,NAME...] (tests only): treat the features named as missing, to show the
// message, and which one it names when several are (unused in a build without -march: nothing
// to check)
DM_BASE __attribute__((unused)) static int has(const char *name, int supported) {
    const char *p = getenv("DM_CPU_LACKS");
    size_t n = strlen(name);
    for (; p && *p; p += *p == ',') {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, name, n)) return 0;
        p += k;
    }
    return supported;
}

// (the first missing feature is named)
#define NEED(name) \
    if (!missing && !has(name, __builtin_cpu_supports(name))) missing = name

__attribute__((constructor(101))) DM_BASE static void dm_cpu_check(void) {
    __builtin_cpu_init();
    const char *missing = NULL;
#ifdef __AVX__
    NEED("avx");
#endif
#ifdef __AVX2__
    NEED("avx2");
#endif
#ifdef __FMA__
    NEED("fma");
#endif
#ifdef __F16C__
    NEED("f16c");
#endif
#ifdef __BMI2__
    NEED("bmi2");
#endif
#ifdef __AVX512F__
    NEED("avx512f");
#endif
#ifdef __AVX512BW__
    NEED("avx512bw");
#endif
#ifdef __AVX512DQ__
    NEED("avx512dq");
#endif
#ifdef __AVX512VL__
    NEED("avx512vl");
#endif
#ifdef __AVX512CD__
    NEED("avx512cd");
#endif
#ifdef __AVX512VBMI__
    NEED("avx512vbmi");
#endif
#ifdef __AVX512VNNI__
    NEED("avx512vnni");
#endif
#ifdef __AVX512BF16__
    NEED("avx512bf16");
#endif
    if (!missing) return;
    fprintf(stderr,
            "dmsh: this binary was built for a CPU with %s (OPT's -march=native on the build machine), "
            "which this CPU lacks: rebuild it here (make), or build one that runs on any x86-64 "
            "with AVX2 and FMA (make OPT=\"-O3 -march=x86-64-v3\")\n",
            missing);
    exit(1);
}
#endif
