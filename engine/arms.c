// arms.c — arm registry.
#include "arms.h"
#include <stdio.h>
#include <string.h>

const char *dm_arm_names[ARM_COUNT] = {"kda", "engram", "moe", "rezero", "retract", "aux"};

void arms_init(Arms *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < ARM_COUNT; i++) a->on[i] = 1;
}

int arms_find(const char *name) {
    for (int i = 0; i < ARM_COUNT; i++)
        if (strcmp(dm_arm_names[i], name) == 0) return i;
    return -1;
}

void arms_format(const Arms *a, char *buf, unsigned n) {
    unsigned used = 0;
    buf[0] = 0;
    for (int i = 0; i < ARM_COUNT && used < n; i++)
        used += snprintf(buf + used, n - used, "%s%s=%s(%lld/%lld)", i ? " " : "", dm_arm_names[i],
                         a->on[i] ? "on" : "off", (long long)a->fwd[i], (long long)a->bwd[i]);
}

uint16_t arms_off_mask(const Arms *a) {
    uint16_t m = 0;
    for (int i = 0; i < ARM_COUNT; i++)
        if (!a->on[i]) m |= (uint16_t)(1u << i);
    return m;
}

void arms_mask_names(uint16_t mask, char *buf, unsigned n) {
    unsigned used = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < ARM_COUNT && used < n; i++)
        if (mask & (1u << i)) used += (unsigned)snprintf(buf + used, n - used, "%s%s", used ? "," : "", dm_arm_names[i]);
}

void arms_mask_tag(uint16_t mask, char *buf, unsigned n) {
    char names[64];
    arms_mask_names(mask, names, sizeof names);
    snprintf(buf, n, "%s%s%s", names[0] ? " [off: " : "", names, names[0] ? "]" : "");
}
