// Consumer schedule "cooperative": both consumer warpgroups work on every tile of the cluster's
// work list, warpgroup w on rows 64 w .. 64 w + 63, and each runs the epilogue on its strip.
// The tensor cores idle while both run their epilogues; the large tiles (128 x 256: 128
// accumulators per thread) this allows amortise that.
#pragma once

#include <cstdint>

#include "cuda/gemm/named_barriers.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

struct CooperativeSchedule {
  static constexpr int kTileWarpgroups = 2;
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
    for (WorkUnit u; work.next(p.scheduler, &u);) {
      // Where a tile may end in warpgroup 0's rows (a group's last tile), warpgroup 1 then only
      // passes the stages on (Mainloop::pass): warpgroup 0's wgmmas get the tensor cores to
      // themselves, and there is nothing for warpgroup 1 to store.
      if constexpr (Scheduler::kPartialTiles) {
        if (Scheduler::coord(p.scheduler, u, rank).rows <= static_cast<int32_t>(wg) * 64) {
          Mainloop::pass(ml, pipe, u, wg_thread, cluster_size);
          continue;
        }
      }
      Mainloop::mma(p.mainloop, ml, pipe, u, wg, wg_thread, cluster_size, acc,
                    [&] { return Scheduler::coord(p.scheduler, u, rank); });
      if (!Scheduler::template fixup<Mainloop::kAccRegs>(acc, p.scheduler, u, cluster_id,
                                                         cluster_size, rank, wg, wg_thread,
                                                         barrier_id))
        continue;
      // Where the tile goes, only now: nothing of it stays live across the mainloop next to
      // the accumulators.
      const TileCoord tc = Scheduler::coord(p.scheduler, u, rank);
      K::Epilogue::store(acc, p.epilogue, epi, state, tc,
                         tc.row0 + static_cast<int32_t>(wg) * 64, wg,
                         wg_thread, barrier_id);
    }
    K::Epilogue::drain(wg_thread);
  }
};

}  // namespace jax_hopper
