// The grouped GEMM's tile table (cuda/gemm/scheduler/grouped.cuh), built by one CTA from the
// device-side group sizes just before the GEMM, in its stream: 4.2-4.4 us of GPU time on the
// H100, where XLA's three fusions of the same ops (a clip, two prefix sums, a search of each
// slot's group, the stack of the fields; ragged_tiles.py) took 14.1-14.4 us (ncu, 2026-11-24,
// benchmarks/results/ncu_h100_20261124_tile_table.txt).
//
// The groups are taken 256 at a time: a block-wide prefix sum of the chunk's sizes gives each
// group's rows, a second one of their tile counts each group's first slot, and each thread
// writes its group's slots; carries hold the rows and slots of the chunks before. Then the
// slots of the rows past every group, and zeros up to `slots`.
#include <cub/block/block_scan.cuh>

#include "cuda/gemm/scheduler/tile_table.h"
#include "jax_hopper_constants.h"

namespace jax_hopper {
namespace {

constexpr int kTableThreads = 256;

__device__ __forceinline__ void write_slot(int32_t* table, int64_t slot, int32_t slots,
                                           int64_t row0, int64_t rows, int32_t group) {
  if (slot >= slots) return;  // cannot happen for valid sizes (grouped_tile_slots' bound)
  int32_t* e = table + 1 + int64_t(kGroupTileFields) * slot;
  e[0] = static_cast<int32_t>(row0);
  e[1] = static_cast<int32_t>(rows);
  e[2] = group;
}

// Tiles of `rows` rows in blocks of `block`, made even when paired.
__device__ __forceinline__ int64_t tile_count(int64_t rows, int32_t block, bool paired) {
  const int64_t tiles = (rows + block - 1) / block;
  return paired ? tiles + (tiles & 1) : tiles;
}

__global__ void __launch_bounds__(kTableThreads)
    grouped_tile_table_kernel(const int32_t* __restrict__ sizes, int32_t groups, int32_t m,
                              int32_t block, bool paired, int32_t slots,
                              int32_t* __restrict__ table) {
  using Scan = cub::BlockScan<int64_t, kTableThreads>;
  __shared__ typename Scan::TempStorage scan;
  int64_t rows_before = 0, slots_before = 0;  // of the chunks before; rows_before <= m
  for (int32_t base = 0; base < groups; base += kTableThreads) {
    const int32_t g = base + static_cast<int32_t>(threadIdx.x);
    const int64_t size = g < groups ? min(max(sizes[g], 0), m) : 0;
    int64_t upto = 0, chunk_rows = 0;
    Scan(scan).InclusiveSum(size, upto, chunk_rows);
    __syncthreads();  // the scan's storage is reused
    const int64_t end = min(rows_before + upto, int64_t(m));
    const int64_t start = min(rows_before + upto - size, int64_t(m));
    const int64_t tiles = tile_count(end - start, block, paired);
    int64_t first = 0, chunk_tiles = 0;
    Scan(scan).ExclusiveSum(tiles, first, chunk_tiles);
    __syncthreads();
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t row0 = start + t * block;
      write_slot(table, slots_before + first + t, slots, row0,
                 max(min(end - row0, int64_t(block)), int64_t(0)), g);
    }
    rows_before = min(rows_before + chunk_rows, int64_t(m));
    slots_before += chunk_tiles;
  }
  const int64_t used = slots_before + tile_count(m - rows_before, block, paired);
  for (int64_t s = slots_before + threadIdx.x; s < slots; s += kTableThreads) {
    const int64_t row0 = rows_before + (s - slots_before) * block;
    if (s < used)
      write_slot(table, s, slots, row0, max(min(m - row0, int64_t(block)), int64_t(0)), -1);
    else
      write_slot(table, s, slots, 0, 0, 0);
  }
  if (threadIdx.x == 0) table[0] = static_cast<int32_t>(min(used, int64_t(slots)));
}

}  // namespace

cudaError_t launch_grouped_tile_table(const int32_t* sizes, int32_t groups, int32_t m,
                                      int32_t block, bool paired, int32_t slots, int32_t* table,
                                      cudaStream_t stream) {
  grouped_tile_table_kernel<<<1, kTableThreads, 0, stream>>>(sizes, groups, m, block, paired,
                                                             slots, table);
  return cudaGetLastError();
}

}  // namespace jax_hopper
