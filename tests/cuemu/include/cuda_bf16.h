// cuemu's stand-in for <cuda_bf16.h>: the storage type and the conversions the backend uses.
// Round to nearest even, NaN kept quiet (the conversions of the real header).
#pragma once
#include "cuemu.h"
struct __nv_bfloat16 {
    uint16_t __x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.__x = (uint16_t)((u >> 16) | 0x40u); return r; }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.__x = (uint16_t)(u >> 16);
    return r;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
