// probe.h — named activations of the last forward and every parameter, for :probe. Values are
// copied out as doubles (so statistics are exact whatever the build's precision).
#pragma once
#include "engine.h"

typedef struct {
    char name[64];
    int ndim;
    int shape[4];
    size_t n;
    int activation;         // 1: from the last forward (Engine.fwd_kind/fwd_step say which)
} ProbeInfo;

typedef struct {
    size_t n, nonfinite;
    double mean, std, rms, min, max, absmax;   // over the finite values
} ProbeStats;

// All probe names: activations (per iteration as NAME@i, 1-based) of the last forward, then
// parameters. Returns a malloc'd NULL-terminated array of malloc'd strings.
char **probe_names(const Engine *e);
void probe_names_free(char **names);
// Copy a probe's values into *vals (malloc'd). Errors: no model, no forward yet, unknown name
// (with the nearest names).
int probe_get(Engine *e, const char *name, double **vals, ProbeInfo *info, dm_err *err);
void probe_stats(const double *v, size_t n, ProbeStats *s);
