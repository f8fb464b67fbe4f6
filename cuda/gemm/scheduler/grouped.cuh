// Tile scheduler policy of the grouped GEMM (hopper_ragged_dot): the rows of A (M, K) fall into
// G consecutive groups of device-side sizes, group g multiplying B's batch entry g. Its tiles
// are those of each group's rows, starting at the group's first row (so a tile never mixes two
// groups' products; one that reaches into the next group's rows computes them and stores only
// its own, GroupedOutput in cuda/gemm/epilogue/output.cuh), then tiles over the rows past every
// group, which store zeros (no k-blocks: the mainloop leaves the accumulators at zero).
//
// The tile table (built on the device from the group sizes, in the same stream, before the
// launch: cuda/gemm/scheduler/tile_table.cu; the launch stays the same whatever the sizes,
// which is what CUDA graphs need) lists those token tiles ("slots"), in row order:
//   tiles[0]                  the number of slots in use;
//   tiles[1 + kGroupTileFields * s + {0, 1, 2}]  slot s: its first row, its rows (1..block),
//                             its group (-1: past every group).
// The cluster tiles are the slots in use times the weight's column tiles, visited in the
// grouped order of tile_order.cuh (so a group's consecutive slots, which share its weights, run
// at once), round robin over a persistent grid. A 2-CTA cluster is along N only: its CTAs
// share an M tile, which always belongs to one group (along M two tiles may not).
//
// SWAPPED (the grouped_swap family, hopper_ragged_dot at a few rows per group): the product is
// computed transposed, out^T = rhs[g]^T lhs_g^T, so the kernel's A is the weights (its tiles of
// BM rows are the output's columns) and its B the tokens: the slots are the kernel's N tiles
// (of BN tokens) and the weight tiles its M tiles; TileCoord's col0 / cols carry the slot.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/persistent.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

template <int BM, int BN, bool SWAPPED = false>
struct GroupedScheduler : WholeTileScheduler {
  struct Params {
    const int32_t* tiles;  // the tile table
    // Over slots (the table's: an upper bound of those in use) and weight tiles, as the
    // kernel's M and N tiles (swapped: N and M).
    TileOrder order;
    int32_t weight_tiles, grid_clusters, k_blocks;
  };

  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    if (g.group_tiles == nullptr || g.tile_slots < 1)
      return "the grouped kernel needs its tile table";
    if (g.cluster_m != 1) return "grouped tiles are clustered along N only (cluster_m must be 1)";
    if (SWAPPED && g.cluster_n != 1) return "the swapped grouped kernel runs without clusters";
    const StreamKPlan& s = g.plan;
    p->tiles = g.group_tiles;
    if constexpr (SWAPPED) {
      p->weight_tiles = static_cast<int32_t>(cluster_tiles_1d(g.m, BM, 1));
      p->order = TileOrder{p->weight_tiles, g.tile_slots, 1, 1, g.group_size, g.raster_n};
    } else {
      p->weight_tiles = static_cast<int32_t>(cluster_tiles_1d(product_cols, BN, g.cluster_n));
      p->order = TileOrder{g.tile_slots, p->weight_tiles, 1, g.cluster_n, g.group_size,
                           g.raster_n};
    }
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

  // A cluster's tiles: c, c + grid, ... of the slots in use times the weight tiles. A unit's
  // `tile` is slot * weight_tiles + weight tile (so coord needs no count); a tile past every
  // group has no k-blocks. The count of slots in use is read again per tile (a cached load)
  // rather than kept: a register held across the mainloop next to 128 accumulators spilled.
  struct Work {
    int32_t next_tile;
    __device__ Work(const Params&, int32_t cluster) : next_tile(cluster) {}
    __device__ bool next(const Params& p, WorkUnit* u) {
      TileOrder o = p.order;
      int32_t& slots = SWAPPED ? o.ctiles_n : o.ctiles_m;
      slots = min(__ldg(p.tiles), slots);
      if (next_tile >= o.ctiles_m * o.ctiles_n) return false;
      // Rank 0's coordinates: without a cluster along M, a cluster's tiles share the slot.
      const TileCoord c = tile_coord(o, next_tile, 0);
      const int32_t slot = SWAPPED ? c.n_block : c.m_block;
      const int32_t weight_tile =
          SWAPPED ? c.m_block : (o.cluster_n > 1 ? c.n_block / o.cluster_n : c.n_block);
      u->tile = slot * p.weight_tiles + weight_tile;
      u->k_begin = 0;
      u->k_end = field(p, slot, 2) >= 0 ? p.k_blocks : 0;
      next_tile += p.grid_clusters;
      return true;
    }
  };

  __device__ static TileCoord coord(const Params& p, const WorkUnit& u, uint32_t rank) {
    const int32_t slot = u.tile / p.weight_tiles;
    const int32_t weight_tile = u.tile - slot * p.weight_tiles;
    TileCoord c;
    c.batch = field(p, slot, 2);
    if constexpr (SWAPPED) {
      c.m_block = weight_tile;
      c.n_block = slot;
      c.row0 = weight_tile * BM;
      c.rows = BM;
      c.col0 = field(p, slot, 0);
      c.cols = field(p, slot, 1);
    } else {
      c.m_block = slot;
      c.n_block = weight_tile * p.order.cluster_n +
                  (p.order.cluster_n > 1 ? static_cast<int32_t>(rank) : 0);
      c.row0 = field(p, slot, 0);
      c.rows = field(p, slot, 1);
      c.col0 = c.n_block * BN;
      c.cols = BN;
    }
    return c;
  }
};

}  // namespace jax_hopper
