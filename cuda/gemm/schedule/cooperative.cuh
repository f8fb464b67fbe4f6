// Consumer schedule "cooperative": both consumer warpgroups work on every tile of the cluster's
// work list, warpgroup w on rows 64 w .. 64 w + 63, and each runs the epilogue on its strip.
// The tensor cores idle while both run their epilogues; the large tiles (128 x 256: 128
// accumulators per thread) this allows amortise that.
// NOTES: a grouped tile that ends in warpgroup 0's rows leaves warpgroup 1 nothing to store.
// Letting warpgroup 1 skip its wgmmas there (reading the tile's rows from the scheduler before
// the mainloop, then only waiting for and releasing each stage) gains nothing: 0.88-1.03x,
// geomean 0.98, over nine bf16 MoE cases with the two builds timed apart from XLA (H100,
// 2026-11-27, ab_h100_20261127_grouped_idle_wg.log). (The 0.90-0.95x of 2026-11-24 had the
// base always right after XLA's ragged_dot.) Likely why, not profiled: the half tile still
// loads whole 48 KB stages, and at twice the rate of a full tile that is more than L2 gives.
// NOTES: the warpgroups taking their fix-ups and epilogues in turn (two turn mbarriers, as the
// ping-pong schedule's), so that warpgroup 0 would start the next tile while warpgroup 1 stored,
// ran 0.900-1.006x on the device, geomean 0.971, worst where it was meant to win (K = 1024 0.95x,
// bias + tanh-GELU 0.90x; H100, 2026-12-07, ab_h100_20261207_stagger.json; branch
// staggered-epilogues). Likely why, not profiled: a stage is released only once both warpgroups
// have read it, so warpgroup 0 leads by at most the free stages, while each turn puts the other
// warpgroup's whole epilogue on the tile's path.
// NOTES: each strip's second staging pass (and the wait for the first pass's TMA reads) deferred
// into the next tile's first k-block, its 16-bit results packed two to a register (at most 32
// beside the accumulators; all 64 spilled) and stored from a hook MainloopSS::mma called after
// that k-block's wgmmas issued, ran 1.007-1.009x at K = 512-1024, 0.997-1.001x elsewhere and
// 0.983x for hopper_glu (whose one-pass strip waited whole), geomean 0.9998, for 15% more
// machine code (H100, 2026-12-07, ab_h100_20261207_deferred_store.json; docs/benchmarks.md).
// The store's exposed time is not what separates short K from cuBLAS. Not kept.
#pragma once

#include <cstdint>

#include "cuda/gemm/named_barriers.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/cluster.cuh"

namespace jax_hopper {

struct CooperativeSchedule {
  static constexpr int kTileWarpgroups = 2;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr bool kSelfFed = false;
  static constexpr int kBarriers = 0;
  static constexpr int kProducerRegs = 56, kConsumerRegs = 224;  // setmaxnreg per thread

  __device__ static void init(uint64_t*) {}

  // Consumer warpgroup `wg` (0 or 1) of the CTA of rank `rank` in cluster `cluster_id`.
  template <class K>
  __device__ static void consume(const typename K::Params& p,
                                 const typename K::Mainloop::Shared& ml,
                                 const typename K::Epilogue::Shared& epi, uint64_t*,
                                 int32_t cluster_id, uint32_t cluster_size, uint32_t rank,
                                 uint32_t wg) {
    using Mainloop = typename K::Mainloop;
    using Scheduler = typename K::Scheduler;
    const uint32_t wg_thread = threadIdx.x % 128;
    const uint32_t barrier_id = kFirstConsumerBarrier + wg;  // the warpgroup's named barrier
    float acc[Mainloop::kAccRegs];
    typename Mainloop::Pipe pipe;
    typename K::Epilogue::State state;
    typename Scheduler::Work work(p.scheduler, cluster_id);
    WorkUnit u;
    bool have = work.next(p.scheduler, &u);
    if (!have) ptx::cluster_arrive_if(cluster_size);
    while (have) {
      Mainloop::mma(p.mainloop, ml, pipe, u, wg, wg_thread, cluster_size, acc,
                    [&] { return Scheduler::coord(p.scheduler, u, rank); }, [] {});
      WorkUnit next;
      const bool more = work.next(p.scheduler, &next);
      // The last mainloop released the last stage: nothing of a peer's is touched after it.
      if (!more) ptx::cluster_arrive_if(cluster_size);
      if (Scheduler::template fixup<Mainloop::kAccRegs>(acc, p.scheduler, u, cluster_id,
                                                        cluster_size, rank, wg, wg_thread,
                                                        barrier_id)) {
        // Where the tile goes, only now: nothing of it stays live across the mainloop next to
        // the accumulators.
        const TileCoord tc = Scheduler::coord(p.scheduler, u, rank);
        K::Epilogue::store(acc, p.epilogue, epi, state, tc,
                           tc.row0 + static_cast<int32_t>(wg) * 64, wg,
                           wg_thread, barrier_id);
      }
      u = next;
      have = more;
    }
    K::Epilogue::drain(wg_thread);
  }
};

}  // namespace jax_hopper
