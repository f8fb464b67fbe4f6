// Consumer schedule "ping-pong": the consumer warpgroups take alternate units of the cluster's
// work list (warpgroup 0 the even ones, 1 the odd), each computing its whole tile, so one
// warpgroup's epilogue (and stream-K fix-up) runs while the other's wgmmas keep the tensor
// cores busy. The producer loads every unit in list order into the one ring.
//
// Order barriers: a warpgroup starts a unit's mainloop only once the other has finished the
// previous unit's. Beyond keeping the tensor cores to one warpgroup at a time, this is what
// makes the ring's parity waits sound: a stage's full barrier then never runs two phases ahead
// of the warpgroup waiting on it. turn[w] (count 128: every thread of the other warpgroup
// arrives once its last wait on the ring is behind it) completes once per unit the other
// warpgroup finished; warpgroup 0's first unit waits for nothing. A warpgroup arrives as soon
// as its unit's last k-block is issued (the mainloop's issued()), not once those wgmmas are
// done, so the other's first wgmmas queue behind them and the tensor cores do not drain
// between units.
#pragma once

#include <cstdint>

#include "cuda/gemm/named_barriers.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"

namespace jax_hopper {

struct PingPongSchedule {
  static constexpr int kTileWarpgroups = 1;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr bool kSelfFed = false;
  static constexpr int kBarriers = 2;  // turn[0], turn[1]
  // setmaxnreg per thread. A warpgroup holds a whole tile's accumulators plus the epilogue's
  // working set; with 224 (the cooperative split) the K-major x K-major instances spilled 12
  // bytes (CUDA 13.0), with 232 none do.
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;

  __device__ static void init(uint64_t* turn) {
    for (int w = 0; w < 2; ++w) ptx::mbarrier_init(&turn[w], 128);
  }

  // Consumer warpgroup `wg` (0 or 1) of the CTA of rank `rank` in cluster `cluster_id`.
  template <class K>
  __device__ static void consume(const typename K::Params& p,
                                 const typename K::Mainloop::Shared& ml,
                                 const typename K::Epilogue::Shared& epi, uint64_t* turn,
                                 int32_t cluster_id, uint32_t cluster_size, uint32_t rank,
                                 uint32_t wg) {
    using Mainloop = typename K::Mainloop;
    using Scheduler = typename K::Scheduler;
    constexpr int kSlices = Mainloop::kSlices, kSliceRegs = Mainloop::kSliceRegs;
    const uint32_t wg_thread = threadIdx.x % 128;
    const uint32_t barrier_id = kFirstConsumerBarrier + wg;  // the warpgroup's named barrier
    float acc[Mainloop::kAccRegs];
    typename Mainloop::Pipe pipe;
    typename K::Epilogue::State state;
    typename Scheduler::Work work(p.scheduler, cluster_id);
    uint32_t unit = 0, mine = 0;  // units of the list so far; of them, this warpgroup's
    for (WorkUnit u; work.next(p.scheduler, &u); ++unit) {
      if ((unit & 1) != wg) {
        pipe.skip(u.k_end - u.k_begin);
        continue;
      }
      // Warpgroup 1's n-th unit follows warpgroup 0's n-th; warpgroup 0's n-th (n >= 1)
      // follows warpgroup 1's (n-1)-th.
      if (wg == 1 || mine > 0) ptx::mbarrier_wait(&turn[wg], (wg == 1 ? mine : mine - 1) & 1);
      ++mine;
      const TileCoord tc = Scheduler::coord(p.scheduler, u, rank);
      Mainloop::mma(p.mainloop, ml, pipe, u, 0, wg_thread, cluster_size, acc, [&] { return tc; },
                    [&] { ptx::mbarrier_arrive(&turn[wg ^ 1]); });
      // The fix-up and the epilogue go 64-row slice by slice (the stream-K workspace and the
      // staging buffer are laid out per 64-row strip); a unit either publishes its partial
      // (every slice) or goes on to the epilogue.
      bool store = true;
#pragma unroll
      for (int i = 0; i < kSlices; ++i)
        store = Scheduler::template fixup<kSliceRegs>(acc + i * kSliceRegs, p.scheduler, u,
                                                      cluster_id, cluster_size, rank, i,
                                                      wg_thread, barrier_id);
      if (!store) continue;
#pragma unroll
      for (int i = 0; i < kSlices; ++i)
        K::Epilogue::store(acc + i * kSliceRegs, p.epilogue, epi, state, tc,
                           tc.row0 + i * 64, wg, wg_thread, barrier_id);
    }
    // Its arrival on the cluster's exit barrier (kernel.cuh): after the whole list, since a
    // warpgroup cannot tell its last unit before it walks past the other's.
    ptx::cluster_arrive_if(cluster_size);
    K::Epilogue::drain(wg_thread);
  }
};

}  // namespace jax_hopper
