// Consumer schedule "lean": one warpgroup per CTA that loads its own k-blocks (thread 0 keeps
// the ring ahead of the wgmmas: MainloopSS::mma_self_fed) and stores its tiles, with no
// producer warpgroup, no register hand-over (setmaxnreg) and no empty barriers; tiles of 64
// rows (one wgmma slice). A short call's time is mostly one CTA's serial chain (start-up,
// first loads, fix-up, store); a CTA this small fits several times on an SM (the swap-AB lean
// tiles: four), so the chains of its neighbours overlap, as in the short split-K kernels XLA
// runs at small M.
// NOTES: small CTAs of the warp-specialised skeleton (a producer warpgroup beside one
// consumer, three to an SM) ran 0.95-1.08x the default's device time on decode shapes (H100,
// 2026-11-28, gemm_h100_20261128_single_wg.json); a standalone one-warpgroup probe of this
// shape, 0.84x of it at 1 x 4096 x 4096 and 0.43x at 64 x 256 x 64
// (probe_h100_20261128_lean.txt). Its 5-stage 64 x 16 tile ran 1.06-1.29x the one-CTA swap
// tiles' device time on calls streaming up to 17 MB of weight and slower on longer streams
// (H200, 2026-11-28, ab_h200_20261128_lean_rule*.json): heuristics.lean_swap_tile.
#pragma once

#include <cstdint>

#include "cuda/gemm/named_barriers.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

struct LeanSchedule {
  static constexpr int kTileWarpgroups = 1;
  static constexpr int kConsumerWarpgroups = 1;
  static constexpr bool kSelfFed = true;
  static constexpr int kBarriers = 0;
  static constexpr int kProducerRegs = 0, kConsumerRegs = 0;  // no setmaxnreg

  __device__ static void init(uint64_t*) {}

  // The whole CTA (one warpgroup) over the work list of CTA `cta` (a cluster of one).
  template <class K>
  __device__ static void run(const typename K::Params& p, const typename K::Mainloop::Shared& ml,
                             const typename K::Epilogue::Shared& epi, int32_t cta) {
    using Mainloop = typename K::Mainloop;
    using Scheduler = typename K::Scheduler;
    static_assert(Mainloop::kSlices == 1 && !Scheduler::kRaggedK,
                  "a 64-row tile, k-ranges of whole k-blocks");
    const uint32_t wg_thread = threadIdx.x;
    constexpr uint32_t kBarrier = kFirstConsumerBarrier;  // the CTA's 128 threads
    float acc[Mainloop::kAccRegs];
    typename Mainloop::Pipe pipe, fill;
    typename K::Epilogue::State state;
    typename Scheduler::Work work(p.scheduler, cta);
    for (WorkUnit u; work.next(p.scheduler, &u);) {
      const TileCoord tc = Scheduler::coord(p.scheduler, u, 0);
      Mainloop::mma_self_fed(p.mainloop, ml, pipe, fill, u, tc, wg_thread, acc,
                             [&] { return tc; });
      if (Scheduler::template fixup<Mainloop::kAccRegs>(acc, p.scheduler, u, cta, 1, 0, 0,
                                                        wg_thread, kBarrier))
        K::Epilogue::store(acc, p.epilogue, epi, state, tc, tc.row0, 0, wg_thread, kBarrier);
    }
    K::Epilogue::drain(wg_thread);
  }
};

}  // namespace jax_hopper
