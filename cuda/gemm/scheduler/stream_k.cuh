// Tile scheduler policy: a persistent grid walking the work plan of stream_k_plan.h: whole tiles
// round robin in the grouped tile order (as PersistentScheduler, persistent.cuh), then (where the plan splits) a stream-K or split-K
// range whose pieces meet as fp32 partials in a global workspace (fixup.cuh). A plan that
// splits nothing (stream_k off, or a full last wave) is the plain persistent data-parallel
// schedule: one compiled kernel serves both.
// Owns the workspace layout and the use of the ready flags; needs no shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/fixup.cuh"
#include "cuda/gemm/scheduler/persistent.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

template <int BM, int BN>
struct StreamKScheduler {
  // A CTA's workspace slot: its fp32 partial tile (the flags live outside the workspace), laid
  // out as two 64-row warpgroup strips (fixup.cuh's partial_slot), so a 64-row tile (the lean
  // schedule's one warpgroup) takes a slot of 128 rows and fills the first half.
  static constexpr int64_t kSlotBytes = int64_t(BM < 128 ? 128 : BM) * BN * 4;
  static constexpr bool kRaggedK = false;

  struct Params {
    StreamKPlan plan;
    TileOrder order;
    Partials partials;
  };

  using Persistent = PersistentScheduler<BM, BN>;

  // `product_cols`: the columns the tiles cover; `block_k`: k per k-block. Checks the plan it is
  // given (made by gemm_plan at lowering) against the problem and the workspace.
  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    p->order = Persistent::tile_order(g, product_cols);
    const StreamKPlan& s = g.plan;
    const int64_t slots = int64_t(s.sk_clusters) * g.cluster_m * g.cluster_n;
    if (!Persistent::plan_fits(s, p->order, g, block_k) || slots * kSlotBytes > g.workspace_bytes)
      return "the stream-K plan does not match the problem or its workspace";
    if (s.sk_clusters > 0 && (g.split_flags == nullptr ||
                              g.split_flag_count < split_flag_count(s, g.cluster_m * g.cluster_n)))
      return "the stream-K plan needs " +
             std::to_string(split_flag_count(s, g.cluster_m * g.cluster_n)) +
             " ready flags and the call has " + std::to_string(g.split_flag_count);
    p->plan = s;
    p->partials.tiles = static_cast<float*>(g.workspace);
    p->partials.ready = g.split_flags;
    return "";
  }

  static int32_t grid_clusters(const Params& p) { return p.plan.grid_clusters; }

  // A split plan needs every cluster resident at once (pieces wait for each other).
  static bool needs_coresidency(const Params& p) { return p.plan.sk_clusters > 0; }

  // The cluster's units and their tiles, as the persistent walk (the plan lists the split
  // tail's pieces after the whole tiles).
  using Work = typename Persistent::Work;
  __device__ static TileCoord coord(const Params& p, const WorkUnit& u, uint32_t rank) {
    return Persistent::coord(p, u, rank);
  }

  // After a unit's mainloop: a later piece of a split tile publishes its partial (false: no
  // epilogue); the piece with k-block 0 adds the others' partials in cluster order (bitwise
  // reproducible) and, like a whole tile, goes on to the epilogue (true).
  template <int kRegs>
  __device__ static bool fixup(float* acc, const Params& p, const WorkUnit& u, int32_t cluster,
                               uint32_t csize, uint32_t rank, uint32_t wg, uint32_t wg_thread,
                               uint32_t barrier_id) {
    if (publishes_partial(u)) {
      publish_partial<kRegs>(acc, p.partials, blockIdx.x, wg, wg_thread, barrier_id);
      return false;
    }
    if (collects_partials(p.plan, u))
      add_partials<kRegs>(acc, p.partials, cluster + 1, partials_end(p.plan, cluster, u), csize,
                          rank, wg, wg_thread, barrier_id);
    return true;
  }
};

}  // namespace jax_hopper
