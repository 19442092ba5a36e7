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
// parameters. Returns a malloc'd NULL-terminated array of malloc'd strings. Activations of an
// arm that was off in the last forward are left out (probe_get refuses them).
char **probe_names(const Engine *e);
// The activation groups probe_names leaves out, each with the arm that was off in the last
// forward, into buf ("kda.*@i (kda)"); their count (0: buf empty).
int probe_unlisted(const Engine *e, char *buf, size_t n);
void probe_names_free(char **names);
// Copy a probe's values into *vals (malloc'd). Errors: no model, no forward yet, unknown name
// (with the nearest names).
int probe_get(Engine *e, const char *name, double **vals, ProbeInfo *info, dm_err *err);
void probe_stats(const double *v, size_t n, ProbeStats *s);
// Which state a probe's values describe, for its stats line, histogram title and file name. A
// parameter is the state now: desc "step 1", tag "step1". An activation is the last forward's:
// training step N's forward ran on the parameters before step N's update, so after `:step 1`
// it is "forward of step 0" (tag "fwd0"), not step 1; an eval at step N is "eval forward at
// step N" ("eval1"). Distinct tags keep the files of different states apart.
void probe_source(const Engine *e, const ProbeInfo *pi, char *desc, size_t ndesc, char *tag, size_t ntag);
// One forward of the text's n bytes (no update, no metric row): the bytes but the last, each
// predicting the next (B = 1, T = n - 1 <= seq), every depth scored; its activations are what the
// next :probe reads (Engine.fwd_kind 3), and the arms' forward counts take it as :gen's do.
int probe_forward_text(Engine *e, const unsigned char *text, int n, dm_err *err);
// A name text= can probe: an activation (checked as probe_get does, before any forward), not a
// parameter; 1 (err set) otherwise. :probe checks it before the text's forward.
int probe_check_text_name(const Engine *e, const char *name, dm_err *err);
