// real.h — the engine's scalar type. Float for training; double (make DM_REAL=double) for the
// finite-difference gradient tests, where float round-off would drown a 1e-6 check.
#pragma once
#include <stddef.h>
#include <float.h>

#ifdef DM_DOUBLE
typedef double real;
#define REAL_NAME "double"
#define REAL_MAX DBL_MAX
#define rsqrt_r(x) (1.0 / sqrt(x))
#define rexp exp
#else
typedef float real;
#define REAL_NAME "float"
#define REAL_MAX FLT_MAX
#define rsqrt_r(x) (1.0f / sqrtf(x))
#define rexp expf
#endif
