// arms.h — the switchable mechanisms (SPEC §1 "Arms") and their execution counters. An arm that
// is off costs nothing, and its counters say so.
#pragma once
#include <stdint.h>

typedef enum { ARM_KDA, ARM_ENGRAM, ARM_MOE, ARM_REZERO, ARM_RETRACT, ARM_AUX, ARM_COUNT } ArmId;

typedef struct {
    int on[ARM_COUNT];
    int64_t fwd[ARM_COUNT];   // forward executions (per iteration for block arms): training,
                              // eval and generation (:gen: one forward per prompt byte and
                              // per sampled byte but the last, P + n - 1)
    int64_t bwd[ARM_COUNT];   // backward executions
} Arms;

extern const char *dm_arm_names[ARM_COUNT];
void arms_init(Arms *a);                       // every arm on, counters 0
int arms_find(const char *name);               // -1 when unknown
// "kda=on(4/4) engram=on(4/4) ..." one line: on/off and (forward/backward) counts
void arms_format(const Arms *a, char *buf, unsigned n);
// The arms that are off as a bit mask (bit ArmId), which each metric row keeps: an eval or a step
// of an ablation is not a point of the run's main curve.
uint16_t arms_off_mask(const Arms *a);
// "kda,moe" for a mask ("" for 0)
void arms_mask_names(uint16_t mask, char *buf, unsigned n);
// " [off: kda,moe]" for a mask ("" for 0): the tag a line of an ablation carries
void arms_mask_tag(uint16_t mask, char *buf, unsigned n);
// the arms that change what a forward computes (an eval with one of them off is another model's)
#define ARMS_FORWARD_MASK ((1u << ARM_KDA) | (1u << ARM_ENGRAM) | (1u << ARM_MOE) | (1u << ARM_REZERO))
