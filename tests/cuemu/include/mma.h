// cuemu's stand-in for <mma.h> (nvcuda::wmma, 16 x 16 x 16, bf16 operands, fp32 accumulator).
// A warp's fragment is held WHOLE by lane 0 of the warp, which does the warp's whole operation
// (load, multiply, store: one thread instead of 32 doing the same work); the other lanes' copies
// are never read, as long as the code only reaches fragments through these calls (kernels/cuda/
// never indexes fragment elements). Products are summed in fp32 in k order; the tensor cores'
// internal order differs (the bf16 parity bars allow for it).
#pragma once
#include "cuemu.h"
#include "cuda_bf16.h"
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    T x[16 * 16];  // [row][col] of the tile, whatever the memory layout
    static const int num_elements = 256;
};
inline bool emu_lane0() {
    return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32 == 0;
}
inline float emu_f(float v) { return v; }
inline float emu_f(__nv_bfloat16 v) { return __bfloat162float(v); }
// what the PTX wmma.load / wmma.store require of their operands (CUDA C++ Programming Guide,
// "Warp Matrix Functions"): mptr 256-bit (32-byte) aligned, ldm a multiple of 16 bytes. A GPU
// faults or reads the wrong elements otherwise; here the run ends naming the call.
template <typename T> inline void emu_wmma_operand(const char *fn, const T *p, unsigned ld) {
    if ((uintptr_t)p % 32)
        emu_die("wmma::%s: pointer %p is not 32-byte (256-bit) aligned, as the GPU requires", fn, (const void *)p);
    if ((ld * sizeof(T)) % 16)
        emu_die("wmma::%s: ldm %u is not a multiple of 16 bytes (%zu elements of %zu bytes)", fn, ld, 16 / sizeof(T), sizeof(T));
}
template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ld) {
    if (!emu_lane0()) return;
    emu_wmma_operand("load_matrix_sync", p, ld);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = std::is_same<L, col_major>::value ? p[(size_t)c * ld + r] : p[(size_t)r * ld + c];
}
template <typename T> inline void fill_fragment(fragment<accumulator, 16, 16, 16, T> &f, T v) {
    if (!emu_lane0()) return;
    for (int i = 0; i < 256; i++) f.x[i] = v;
}
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
    if (!emu_lane0()) return;
    float out[256];
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[r * 16 + j];
            for (int q = 0; q < 16; q++) s += emu_f(a.x[r * 16 + q]) * emu_f(b.x[q * 16 + j]);
            out[r * 16 + j] = s;
        }
    for (int i = 0; i < 256; i++) d.x[i] = out[i];
}
template <typename T>
inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ld, layout_t l) {
    if (!emu_lane0()) return;
    emu_wmma_operand("store_matrix_sync", p, ld);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) (l == mem_col_major ? p[(size_t)c * ld + r] : p[(size_t)r * ld + c]) = f.x[r * 16 + c];
}
}  // namespace wmma
}  // namespace nvcuda
