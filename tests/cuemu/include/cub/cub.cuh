// cuemu's stand-in for <cub/cub.cuh>: DeviceRadixSort::SortPairs (stable, keys' bits
// [begin_bit, end_bit) only), with cub's two-call temporary-storage protocol.
#pragma once
#include "../cuemu.h"
namespace cub {
cudaError_t emu_sort_pairs_u64(void *tmp, size_t &tmp_bytes, const uint64_t *kin, uint64_t *kout,
                               const int *vin, int *vout, int n, int begin_bit, int end_bit, cudaStream_t s);
struct DeviceRadixSort {
    static cudaError_t SortPairs(void *tmp, size_t &tmp_bytes, const uint64_t *kin, uint64_t *kout, const int *vin,
                                 int *vout, int n, int begin_bit = 0, int end_bit = 64, cudaStream_t s = 0) {
        return emu_sort_pairs_u64(tmp, tmp_bytes, kin, kout, vin, vout, n, begin_bit, end_bit, s);
    }
};
}  // namespace cub
