// arms.h — the switchable mechanisms (SPEC §1 "Arms") and their execution counters. An arm that
// is off costs nothing, and its counters say so.
#pragma once
#include <stdint.h>

typedef enum { ARM_KDA, ARM_ENGRAM, ARM_MOE, ARM_REZERO, ARM_RETRACT, ARM_AUX, ARM_COUNT } ArmId;

typedef struct {
    int on[ARM_COUNT];
    int64_t fwd[ARM_COUNT];   // forward executions (per iteration for block arms): training,
                              // eval and generation (:gen: one forward per prompt or sampled byte)
    int64_t bwd[ARM_COUNT];   // backward executions
} Arms;

extern const char *dm_arm_names[ARM_COUNT];
void arms_init(Arms *a);                       // every arm on, counters 0
int arms_find(const char *name);               // -1 when unknown
// "kda=on fwd=4 bwd=4 engram=..." one line
void arms_format(const Arms *a, char *buf, unsigned n);
