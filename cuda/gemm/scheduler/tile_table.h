// Host-visible interface of the grouped GEMM's tile-table builder (plain C++: the FFI handler
// ffi/gemm/tile_table.cc includes it). The table's layout is the grouped scheduler's
// (cuda/gemm/scheduler/grouped.cuh); jax_hopper/gemm/ragged_tiles.py holds the same rules in
// jnp (the reference lowering, and what the GPU tests compare the kernel with).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jax_hopper {

// The slots a table needs for any group sizes: every group's last tile and the tile of the
// rows past the groups may be partial, so ceil(M / block) + G; paired (2-CTA clusters along M:
// every group's count and the rows past them made even), G + 1 more, rounded up to pairs.
constexpr int64_t grouped_tile_slots(int64_t m, int64_t groups, int64_t block, bool paired) {
  const int64_t slots = (m + block - 1) / block + groups;
  return paired ? slots + groups + 1 + (slots + groups + 1) % 2 : slots;
}

// Writes the table of `slots` slots (1 + kGroupTileFields * slots int32) for the (groups,)
// int32 `sizes` over m rows in tiles of `block` rows, every entry (unused slots are zeros), on
// `stream`: one CTA, no host synchronisation. Sizes are made valid as ragged_tiles.py says
// (negative -> 0, groups cut at m); `paired`: each group's tiles, and those of the rows past
// the groups, an even count (an odd one gets a tile of 0 rows more).
cudaError_t launch_grouped_tile_table(const int32_t* sizes, int32_t groups, int32_t m,
                                      int32_t block, bool paired, int32_t slots, int32_t* table,
                                      cudaStream_t stream);

}  // namespace jax_hopper
