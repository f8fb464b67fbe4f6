// The GEMM kernel skeleton: persistent, warp-specialised, composed of three policies
//   Mainloop  (cuda/gemm/mainloop/):  how a k-block is loaded and multiplied; owns the operand
//             ring in shared memory and its full/empty barriers;
//   Epilogue  (cuda/gemm/epilogue/):  what happens to the accumulators; owns the staging buffers
//             and the residual barriers;
//   Scheduler (cuda/gemm/scheduler/): which tiles (and k-ranges) a cluster takes, and how the
//             pieces of a split tile meet.
// Cooperative schedule: warpgroup 0 is the producer (one thread issues the TMA loads);
// warpgroups 1 and 2 are the consumers, each computing rows 0-63 or 64-127 of every 128 x BN
// tile and running the epilogue on its strip. An optional 2-CTA cluster multicasts the operand
// the two CTAs share. The generated catalog (jax_hopper/kernels/codegen.py) names one instance
// per compiled (mainloop, epilogue, scheduler) triple.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "jax_hopper_constants.h"

namespace jax_hopper {

template <class Mainloop_, class Epilogue_, class Scheduler_>
struct GemmKernel {
  using Mainloop = Mainloop_;
  using Epilogue = Epilogue_;
  using Scheduler = Scheduler_;
  static_assert(Epilogue::BN == Mainloop::BN, "the epilogue takes the mainloop's tile");

  static constexpr int kThreads = 384;    // producer warpgroup + two consumer warpgroups
  static constexpr int kProducerRegs = 56;  // 128 x (56 + 2 x 224) registers fit the 64K file
  static constexpr int kConsumerRegs = 224;
  // Shared memory: the mainloop's ring, the epilogue's staging, then every barrier; + 1024 so
  // the base can be rounded up to the 1024-byte alignment the 128B swizzle needs.
  static constexpr int kEpilogueOffset = Mainloop::kSmemBytes;
  static constexpr int kBarrierOffset = kEpilogueOffset + Epilogue::kSmemBytes;
  static constexpr int kSmemBytes =
      kBarrierOffset + (Mainloop::kBarriers + Epilogue::kBarriers) * 8 + 1024;
  static_assert(kSmemBytes <= kSmemLimitBytes, "the policies' shared memory exceeds the limit");
  static_assert(kEpilogueOffset % 1024 == 0 && kBarrierOffset % 8 == 0, "alignment");

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    typename Scheduler::Params scheduler;
    int32_t cluster_m, cluster_n;
  };

  __device__ static void run(const Params& p) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kBarrierOffset);
    const auto ml = Mainloop::carve(smem, bars);
    const auto epi = Epilogue::carve(smem + kEpilogueOffset, bars + Mainloop::kBarriers);

    const uint32_t cluster_size = p.cluster_m * p.cluster_n;
    const uint32_t rank = cluster_size > 1 ? ptx::cluster_ctarank() : 0;
    const uint32_t warpgroup = threadIdx.x / 128;
    const int32_t cluster_id = blockIdx.x / cluster_size;

    if (threadIdx.x == 0) {
      Mainloop::init(p.mainloop, ml, cluster_size);
      Epilogue::init(p.epilogue, epi);
      ptx::fence_mbarrier_init();
    }
    if (cluster_size > 1) ptx::cluster_sync(); else __syncthreads();

    if (warpgroup == 0) {
      // -------------------------------------------------------------- producer
      ptx::setmaxnreg_dec<kProducerRegs>();
      if (threadIdx.x == 0) {
        typename Mainloop::Pipe pipe;
        typename Scheduler::Work work(p.scheduler, cluster_id);
        for (WorkUnit u; work.next(p.scheduler, &u);) {
          const TileCoord tc = Scheduler::coord(p.scheduler, u, rank);
          Mainloop::load(p.mainloop, ml, pipe, tc, u.k_begin, u.k_end, p.cluster_m, p.cluster_n,
                         rank);
        }
      }
    } else {
      // -------------------------------------------------------------- consumers
      ptx::setmaxnreg_inc<kConsumerRegs>();
      const uint32_t wg = warpgroup - 1;  // which 64-row half of the tile
      const uint32_t wg_thread = threadIdx.x % 128;
      const uint32_t barrier_id = 1 + wg;  // the warpgroup's named barrier (0 is __syncthreads)
      float acc[Mainloop::kAccRegs];
      typename Mainloop::Pipe pipe;
      typename Epilogue::State state;
      typename Scheduler::Work work(p.scheduler, cluster_id);
      for (WorkUnit u; work.next(p.scheduler, &u);) {
        const TileCoord tc = Scheduler::coord(p.scheduler, u, rank);
        Mainloop::mma(ml, pipe, u.k_begin, u.k_end, wg, wg_thread, cluster_size, acc);
        if (!Scheduler::template fixup<Mainloop::kAccRegs>(acc, p.scheduler, u, cluster_id,
                                                           cluster_size, rank, wg, wg_thread,
                                                           barrier_id))
          continue;
        Epilogue::store(acc, p.epilogue, epi, state, tc, tc.m_block * Mainloop::BM, wg,
                        wg_thread, barrier_id);
      }
      Epilogue::drain(wg_thread);
    }
    // No CTA may exit while a peer can still arrive on its barriers or multicast into it.
    if (cluster_size > 1) ptx::cluster_sync(); else __syncthreads();
  }
};

// The __global__ entry: one per compiled GemmKernel (the SASS function name contains
// "sm90_gemm_kernel", which the SASS test and scripts/sanitize.sh look for).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ typename Kernel::Params p) {
  Kernel::run(p);
}

}  // namespace jax_hopper
