// Tile order: maps a tile index (cluster units, over every batch entry) to block coordinates;
// tiles are grouped so concurrently running CTAs share operand tiles in L2. Which cluster takes
// which index is the scheduler's (cuda/gemm/scheduler/stream_k.cuh).
// NOTES: which SM (and so which of the L2's two partitions) a cluster lands on is the
// hardware's. Clusters taking their index from a counter per partition, with this order grouped
// so that each partition's run of indices reads its own half of the larger operand, were correct
// but no faster: 0.998-1.001x on seven one-wave mid-M shapes, 0.96-1.015x elsewhere (H200,
// 2026-12-03, ab_h200_20261203_l2_sides.log; branch l2-sides). docs/benchmarks.md, "The L2's
// two partitions".
// NOTES: the order also decides how often the L2 looks a line up: concurrent requests from
// neighbouring SMs for the same lines count once (inferred, not documented). A stand-alone
// read stream on 256 x 72 tiles took 75 us with consecutive blocks sharing the weight block, 108
// us sharing the token tile (17.96 M against 28.96 M sectors). The other raster on every
// default config measured 0.880-1.005x (geomean 0.979; H200, 2026-12-03,
// ab_h200_20261203_raster_flip.log), so the defaults keep theirs; docs/benchmarks.md, "What
// paces the one-wave mid-M tiling, and the order of tiles over the SMs".
#pragma once

#include <cstdint>

namespace jax_hopper {

struct TileCoord {
  int32_t batch, m_block, n_block;  // block indices of this CTA's tile
  // First row of A and of the output the tile covers, and how many of its rows it stores:
  // m_block * BM and BM, except in the grouped GEMM, whose tiles start where a group's rows do
  // and store only that group's rows (cuda/gemm/scheduler/grouped.cuh). There `batch` is the
  // group (B's batch entry), -1 for the rows past the groups.
  int32_t row0, rows;
};

struct TileOrder {
  int32_t ctiles_m, ctiles_n;    // cluster tiles per batch entry along M and N
  int32_t cluster_m, cluster_n;  // CTAs per cluster (one of them 1)
  // Groups of `group_size` cluster tiles along M (raster_n == 0) or along N (raster_n == 1).
  int32_t group_size, raster_n;
};

// Tile `t` (cluster units) for the CTA of rank `rank` inside its cluster. A cluster's second
// tile may lie past M or N; it is computed on zero-filled loads and its store is clipped, which
// keeps both CTAs in the same barrier phases. Recomputed per tile (a few integer divisions)
// rather than kept: registers next to the accumulators are scarcer than instructions.
__device__ __forceinline__ TileCoord tile_coord(const TileOrder& o, int32_t t, uint32_t rank) {
  const int32_t per_batch = o.ctiles_m * o.ctiles_n;
  TileCoord c;
  c.batch = t / per_batch;
  const int32_t r = t - c.batch * per_batch;
  // Grouped order: `group_size` rows of tiles along the major direction, walked column by column.
  const int32_t major = o.raster_n ? o.ctiles_n : o.ctiles_m;
  const int32_t minor = o.raster_n ? o.ctiles_m : o.ctiles_n;
  const int32_t in_group = o.group_size * minor;
  const int32_t first = (r / in_group) * o.group_size;
  const int32_t size = min(o.group_size, major - first);
  const int32_t i_major = first + (r % in_group) % size;
  const int32_t i_minor = (r % in_group) / size;
  const int32_t cm = o.raster_n ? i_minor : i_major;
  const int32_t cn = o.raster_n ? i_major : i_minor;
  c.m_block = cm * o.cluster_m + (o.cluster_m > 1 ? static_cast<int32_t>(rank) : 0);
  c.n_block = cn * o.cluster_n + (o.cluster_n > 1 ? static_cast<int32_t>(rank) : 0);
  return c;
}

}  // namespace jax_hopper
