// Tile scheduler policy: a persistent grid taking whole tiles round robin in the grouped tile
// order (tile_order.cuh): cluster c computes tiles c, c + grid, c + 2 grid, ... No tile is
// split, so no workspace and no fix-up. The plan (stream_k_plan.h, made at lowering without
// stream-K) says how many clusters to launch. StreamKScheduler (stream_k.cuh) walks the same
// order and adds the split tail.
// Owns nothing in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

// What every scheduler that computes each tile whole has: no stream-K workspace, no need for
// every cluster at once, and no fix-up.
struct WholeTileScheduler {
  static constexpr int64_t kSlotBytes = 0;
  static constexpr bool kRaggedK = false;  // k-ranges are whole k-blocks from k = 0

  template <class P>
  static bool needs_coresidency(const P&) { return false; }

  // Every unit is a whole tile: straight to the epilogue.
  template <int kRegs, class P>
  __device__ static bool fixup(float*, const P&, const WorkUnit&, int32_t, uint32_t, uint32_t,
                               uint32_t, uint32_t, uint32_t) {
    return true;
  }
};

template <int BM, int BN>
struct PersistentScheduler : WholeTileScheduler {
  struct Params {
    StreamKPlan plan;
    TileOrder order;
  };

  // The grouped order of the problem's cluster tiles; `product_cols`: the columns they cover.
  static TileOrder tile_order(const GemmArgs& g, int64_t product_cols) {
    return TileOrder{static_cast<int32_t>(cluster_tiles_1d(g.m, BM, g.cluster_m)),
                     static_cast<int32_t>(cluster_tiles_1d(product_cols, BN, g.cluster_n)),
                     g.cluster_m, g.cluster_n, g.group_size, g.raster_n};
  }

  // Whether `s` (made by gemm_plan at lowering) plans this problem: its k-blocks (those of K,
  // or a few more of zeros: plan_stream_k's padding) and grid, and the split it plans ends
  // exactly at the last tile.
  static bool plan_fits(const StreamKPlan& s, const TileOrder& order, const GemmArgs& g,
                        int block_k) {
    const int64_t tiles = int64_t(order.ctiles_m) * order.ctiles_n * g.batch;
    const int64_t k_blocks = (g.k + block_k - 1) / block_k;
    return s.grid_clusters >= 1 && s.k_blocks >= k_blocks &&
           s.k_blocks <= k_blocks + kMaxPadKBlocks &&
           s.dp_tiles >= 0 && s.dp_tiles <= tiles && s.sk_clusters >= 0 &&
           s.sk_clusters <= s.grid_clusters &&
           (s.sk_clusters == 0
                ? s.dp_tiles == tiles
                : s.sk_extra >= 0 && s.sk_extra < s.sk_clusters && s.sk_quota >= 1 &&
                      int64_t(s.sk_quota) * s.sk_clusters + s.sk_extra ==
                          (tiles - s.dp_tiles) * s.k_blocks);
  }

  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    p->order = tile_order(g, product_cols);
    if (!plan_fits(g.plan, p->order, g, block_k) || g.plan.sk_clusters != 0)
      return "the plan does not match the problem, or splits tiles this kernel computes whole";
    p->plan = g.plan;
    return "";
  }

  static int32_t grid_clusters(const Params& p) { return p.plan.grid_clusters; }

  // A cluster's units in order (the plan is passed to each call, not kept: in the kernel it
  // stays in the parameter bank instead of taking registers next to the accumulators).
  struct Work {
    WorkList list;
    template <class P>
    __device__ Work(const P& p, int32_t cluster) : list(p.plan, cluster) {}
    template <class P>
    __device__ bool next(const P& p, WorkUnit* u) { return list.next(p.plan, u); }
  };

  template <class P>
  __device__ static TileCoord coord(const P& p, const WorkUnit& u, uint32_t rank) {
    TileCoord c = tile_coord(p.order, u.tile, rank);
    c.row0 = c.m_block * BM;
    c.rows = BM;
    return c;
  }
};

}  // namespace jax_hopper
