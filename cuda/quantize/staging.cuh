// The 128 x 128 fp8 staging tile that quantize_fp8_kernel (its transposed copy) and
// transpose_fp8_kernel write in shared memory and TMA-store through a CU_TENSOR_MAP_SWIZZLE_128B
// map, which undoes the swizzle on the way out.
#pragma once

#include <cstdint>

#include "cuda/quantize/quantize.h"

namespace jax_hopper {

// Byte offset of 16-byte chunk g of row `row` (row % 8 permutes the row's 8 chunks): a
// quarter-warp writing one chunk each of 8 consecutive rows hits 8 different bank groups.
__device__ __forceinline__ uint32_t swizzled_chunk(int row, int g) {
  return static_cast<uint32_t>(row * kQuantTile + ((g ^ (row % 8)) << 4));
}

}  // namespace jax_hopper
