// rng.h — splitmix64-based RNG: the same seed gives the same numbers on every machine.
#pragma once
#include <math.h>
#include <stdint.h>

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef struct { uint64_t s; } Rng;

static inline uint64_t rng_next(Rng *r) { r->s += 0x9E3779B97F4A7C15ULL; return splitmix64(r->s); }
// uniform in (0, 1): 53 random bits, never exactly 0 (safe for log)
static inline double rng_uniform(Rng *r) { return ((rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static inline double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
