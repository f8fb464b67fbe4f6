// Tile scheduler policy of the grouped GEMM (hopper_ragged_dot): the rows of A (M, K) fall into
// G consecutive groups of device-side sizes, group g multiplying B's batch entry g. Its tiles
// are those of each group's rows, starting at the group's first row (so a tile never mixes two
// groups' products; one that reaches into the next group's rows computes them and stores only
// its own, GroupedOutput in cuda/gemm/epilogue/output.cuh), then tiles over the rows past every
// group, which store zeros (no k-blocks: the mainloop leaves the accumulators at zero).
//
// The tile table (jax_hopper/gemm/ragged_tiles.py builds it on the device from the group sizes,
// in the same stream, before the launch; the launch stays the same whatever the sizes, which is
// what CUDA graphs need) lists those M tiles ("slots"), in row order (or, for vmap's entries
// sharing their experts, expert by expert: ragged_tiles.entry_groups; the order is free):
//   tiles[0]                  the number of slots in use;
//   tiles[1 + kGroupTileFields * s + {0, 1, 2}]  slot s: its first row, its rows (1..BM), its
//                             group (-1: past every group).
// The cluster tiles are the slots in use times the column tiles, visited in the grouped order of
// tile_order.cuh (so a group's consecutive M tiles, which share its B, run at once), round robin
// over a persistent grid. A 2-CTA cluster along N shares an M tile, which always belongs to one
// group; one along M shares B, the group's weights, so it needs a paired table (ragged_tiles.py:
// every group's tile count even), whose slots 2i and 2i + 1 always belong to one group.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/persistent.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

template <int BM, int BN>
struct GroupedScheduler : WholeTileScheduler {
  struct Params {
    const int32_t* tiles;  // the tile table
    TileOrder order;       // ctiles_m: the table's slots in clusters (a bound of those in use)
    int32_t grid_clusters, k_blocks;
  };

  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    if (g.group_tiles == nullptr || g.tile_slots < 1)
      return "the grouped kernel needs its tile table";
    if (g.tile_slots % g.cluster_m != 0)
      return "a 2-CTA cluster along M needs a paired tile table (an even count of slots)";
    const StreamKPlan& s = g.plan;
    p->tiles = g.group_tiles;
    p->order = TileOrder{g.tile_slots / g.cluster_m,
                         static_cast<int32_t>(cluster_tiles_1d(product_cols, BN, g.cluster_n)),
                         g.cluster_m, g.cluster_n, g.group_size, g.raster_n};
    p->k_blocks = static_cast<int32_t>((g.k + block_k - 1) / block_k);
    if (s.grid_clusters < 1 || s.sk_clusters != 0 || s.k_blocks != p->k_blocks)
      return "the plan does not match the problem, or splits tiles this kernel computes whole";
    p->grid_clusters = s.grid_clusters;
    return "";
  }

  static int32_t grid_clusters(const Params& p) { return p.grid_clusters; }

  __device__ static int32_t field(const Params& p, int32_t slot, int f) {
    return __ldg(p.tiles + 1 + kGroupTileFields * slot + f);
  }

  // A cluster's tiles: c, c + grid, ... of the slots in use (in cluster units) times the column
  // tiles. A unit's `tile` is cluster slot * ctiles_n + cluster column tile (so coord needs no
  // count); a tile past every group has no k-blocks (both of a pair along M alike: a paired
  // table never mixes a group's slots with others'). The count of slots in use is read again
  // per tile (a cached load) rather than kept: a register held across the mainloop next to 128
  // accumulators spilled.
  struct Work {
    int32_t next_tile;
    __device__ Work(const Params&, int32_t cluster) : next_tile(cluster) {}
    __device__ bool next(const Params& p, WorkUnit* u) {
      TileOrder o = p.order;
      o.ctiles_m = min(__ldg(p.tiles) / o.cluster_m, p.order.ctiles_m);
      if (next_tile >= o.ctiles_m * o.ctiles_n) return false;
      const TileCoord c = tile_coord(o, next_tile, 0);  // rank 0's slot and column tile
      const int32_t cm = o.cluster_m > 1 ? c.m_block / o.cluster_m : c.m_block;
      const int32_t cn = o.cluster_n > 1 ? c.n_block / o.cluster_n : c.n_block;
      u->tile = cm * o.ctiles_n + cn;
      u->k_begin = 0;
      u->k_end = field(p, c.m_block, 2) >= 0 ? p.k_blocks : 0;
      next_tile += p.grid_clusters;
      return true;
    }
  };

  __device__ static TileCoord coord(const Params& p, const WorkUnit& u, uint32_t rank) {
    TileCoord c;
    const int32_t cm = u.tile / p.order.ctiles_n;
    const int32_t cn = u.tile - cm * p.order.ctiles_n;
    c.m_block = cm * p.order.cluster_m + (p.order.cluster_m > 1 ? static_cast<int32_t>(rank) : 0);
    c.n_block = cn * p.order.cluster_n + (p.order.cluster_n > 1 ? static_cast<int32_t>(rank) : 0);
    c.row0 = field(p, c.m_block, 0);
    c.rows = field(p, c.m_block, 1);
    c.batch = field(p, c.m_block, 2);
    return c;
  }
};

}  // namespace jax_hopper
