// The GEMM kernel skeleton: persistent, warp-specialised, composed of three policies and a
// consumer schedule
//   Mainloop  (cuda/gemm/mainloop/):  how a k-block is loaded and multiplied; owns the operand
//             ring in shared memory and its full/empty barriers;
//   Epilogue  (cuda/gemm/epilogue/):  what happens to the accumulators; owns the staging buffers
//             and the residual barriers;
//   Scheduler (cuda/gemm/scheduler/): which tiles (and k-ranges) a cluster takes, and how the
//             pieces of a split tile meet;
//   Schedule  (cuda/gemm/schedule/):  how the two consumer warpgroups share the tiles:
//             cooperative (both on every tile, a half each) or ping-pong (alternate tiles, one
//             warpgroup's epilogue under the other's mainloop); or lean (one warpgroup).
// Warpgroup 0 is the producer (one thread issues the TMA loads for every tile of the cluster's
// work list, in order); warpgroups 1 and 2 are the consumers. The lean schedule instead runs
// one warpgroup that feeds itself (Schedule::kSelfFed): a small CTA, several to an SM. An
// optional 2-CTA cluster multicasts the operand the two CTAs share. CTAS_PER_SM CTAs are resident on an SM at once (the
// launch bounds and the register split follow it; the policies' shared memory must fit that
// many times). The generated catalog
// (jax_hopper/kernels/codegen.py) names one instance per compiled combination.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "jax_hopper_constants.h"

namespace jax_hopper {

template <class Mainloop_, class Epilogue_, class Scheduler_, class Schedule_,
          int CTAS_PER_SM = 1>
struct GemmKernel {
  using Mainloop = Mainloop_;
  using Epilogue = Epilogue_;
  using Scheduler = Scheduler_;
  using Schedule = Schedule_;
  static_assert(Epilogue::BN == Mainloop::BN, "the epilogue takes the mainloop's tile");
  static_assert(Mainloop::kSlices * Schedule::kTileWarpgroups * 64 == Mainloop::BM,
                "the schedule's warpgroups per tile cover the mainloop's tile rows");
  static_assert(!Scheduler::kRaggedK || Mainloop::kClearsOutsideK,
                "a scheduler whose k-ranges end mid-block needs a mainloop that zeroes the tail");

  // The schedule's consumer warpgroups, behind a producer warpgroup unless the schedule's
  // warpgroup loads its own k-blocks (kSelfFed: the lean schedule, a small CTA).
  static constexpr int kConsumerWarpgroups = Schedule::kConsumerWarpgroups;
  static constexpr int kProducerWarpgroups = Schedule::kSelfFed ? 0 : 1;
  static constexpr int kThreads = 128 * (kProducerWarpgroups + kConsumerWarpgroups);
  static constexpr int kCtasPerSm = CTAS_PER_SM;
  static_assert(kCtasPerSm >= 1 && kCtasPerSm <= (Schedule::kSelfFed ? 4 : 2),
                "one or two CTAs per SM, up to four of the lean schedule's");
  // The register split between the producer and the consumer warpgroups is the schedule's,
  // unless the mainloop needs more per consumer thread (kMinConsumerRegs): the producer then
  // gets what is left. setmaxnreg.inc only redistributes the CTA's own registers, those of its
  // launch: the register file (65536) over the SM's resident threads, in steps of 8 (168 per
  // thread at one CTA per SM, 80 at two), three times that per producer-consumer-consumer
  // triple (more would leave a consumer's setmaxnreg.inc waiting forever). At two CTAs per SM
  // the consumers take what the triple leaves after the producer's 40 (96 each). A self-fed
  // warpgroup keeps its launch's registers (no setmaxnreg).
  static constexpr int kLaunchRegs = 65536 / (kThreads * kCtasPerSm) / 8 * 8;
  static constexpr int kTripleRegs = 3 * kLaunchRegs;
  static constexpr int kMinProducerRegs = 40;  // what the TMA-issuing producer needs
  static constexpr int kMaxConsumerRegs = (kTripleRegs - kMinProducerRegs) / 2 / 8 * 8;
  static constexpr int kWantedConsumerRegs =
      Mainloop::kMinConsumerRegs > Schedule::kConsumerRegs ? Mainloop::kMinConsumerRegs
                                                           : Schedule::kConsumerRegs;
  static constexpr int kConsumerRegs =
      kWantedConsumerRegs < kMaxConsumerRegs ? kWantedConsumerRegs : kMaxConsumerRegs;
  static constexpr int kProducerRegs = Schedule::kProducerRegs < kTripleRegs - 2 * kConsumerRegs
                                           ? Schedule::kProducerRegs
                                           : kTripleRegs - 2 * kConsumerRegs;
  static_assert(Schedule::kSelfFed
                    ? Mainloop::kMinConsumerRegs <= kLaunchRegs
                    : kConsumerWarpgroups == 2 && kConsumerRegs >= Mainloop::kMinConsumerRegs &&
                          kProducerRegs >= kMinProducerRegs &&
                          kProducerRegs + 2 * kConsumerRegs <= kTripleRegs,
                "the launch's registers");
  // Shared memory: the mainloop's ring, each consumer warpgroup's own region, then every
  // barrier; + 1024 so the base can be rounded up to the 1024-byte alignment the 128B swizzle
  // needs. A consumer warpgroup's region holds its epilogue's staging and, while the
  // warpgroup multiplies, the mainloop's scratch (Mainloop::kScratchBytesPerWarpgroup): the
  // warpgroup does one, then the other, so the two share the bytes (the mainloop waits for
  // the previous epilogue's stores to have read them).
  static constexpr int kRegionsOffset = Mainloop::kSmemBytes;
  static constexpr int kConsumerRegionBytes =
      Epilogue::kSmemBytesPerWarpgroup > Mainloop::kScratchBytesPerWarpgroup
          ? Epilogue::kSmemBytesPerWarpgroup
          : Mainloop::kScratchBytesPerWarpgroup;
  static constexpr int kBarrierOffset =
      kRegionsOffset + kConsumerRegionBytes * kConsumerWarpgroups;
  static constexpr int kBarriers = Mainloop::kBarriers + Epilogue::kBarriers + Schedule::kBarriers;
  static constexpr int kSmemBytes = kBarrierOffset + kBarriers * 8 + 1024;
  static_assert(kSmemBytes <= kSmemLimitBytes, "the policies' shared memory exceeds the limit");
  static_assert(kCtasPerSm * (kSmemBytes + kSmemReservedBytes) <= kSmemPerSmBytes,
                "the policies' shared memory does not fit kCtasPerSm times on an SM");
  static_assert(kRegionsOffset % 1024 == 0 && kConsumerRegionBytes % 1024 == 0 &&
                    kBarrierOffset % 8 == 0,
                "alignment");

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
    const auto ml = Mainloop::carve(smem, bars, smem + kRegionsOffset, kConsumerRegionBytes);
    const auto epi = Epilogue::carve(smem + kRegionsOffset, kConsumerRegionBytes,
                                     bars + Mainloop::kBarriers);
    uint64_t* schedule_bars = bars + Mainloop::kBarriers + Epilogue::kBarriers;

    const uint32_t cluster_size = p.cluster_m * p.cluster_n;
    const uint32_t rank = cluster_size > 1 ? ptx::cluster_ctarank() : 0;
    // Broadcast from lane 0, so the compiler knows it is the same across the warp: what is
    // derived from it (a consumer warpgroup's descriptors, barrier ids) then lives in uniform
    // registers instead of being recomputed per thread in the mainloop.
    const uint32_t warpgroup = __shfl_sync(0xFFFFFFFFu, threadIdx.x / 128, 0);
    const int32_t cluster_id = blockIdx.x / cluster_size;

    if (threadIdx.x == 0) {
      Mainloop::init(p.mainloop, ml, cluster_size);
      Epilogue::init(p.epilogue, epi);
      Schedule::init(schedule_bars);
      ptx::fence_mbarrier_init();
    }
    if (cluster_size > 1) ptx::cluster_sync(); else __syncthreads();

    if constexpr (Schedule::kSelfFed) {
      // One warpgroup that loads its own k-blocks and stores its tiles; its clusters are of
      // one CTA (the last-arrival split's), so nothing outside the CTA waits on it.
      Schedule::template run<GemmKernel>(p, ml, epi, cluster_id);
    } else {
      if (warpgroup == 0) {
        // -------------------------------------------------------------- producer
        ptx::setmaxnreg_dec<kProducerRegs>();
        // NOTES: from this one thread ptxas wraps each TMA in a loop over the lanes that might
        // hold other operands (R2UR, ELECT, BRA.U.ANY). The loop on the whole of warp 0 with
        // one lane elected (elect.sync) to issue each stage's loads, the lean warpgroup's too,
        // removed those loops (BRA.U.ANY 5014 -> 2225, R2UR 24888 -> 10162 over the build) but
        // not time: device time 0.998x over 17 cases, the aligned ones 0.978-1.035x, and the
        // odd-weight (shifted) decode kernels 0.95-0.98x on a re-check (H200, 2026-12-04,
        // ab_h200_20261204_warp_producer*.log). The producer does not pace these kernels.
        if (threadIdx.x == 0) {
          typename Mainloop::Pipe pipe;
          typename Scheduler::Work work(p.scheduler, cluster_id);
          for (WorkUnit u; work.next(p.scheduler, &u);) {
            const TileCoord tc = Scheduler::coord(p.scheduler, u, rank);
            Mainloop::load(p.mainloop, ml, pipe, tc, u, p.cluster_m, p.cluster_n, rank);
          }
        }
        ptx::cluster_arrive_if(cluster_size);
      } else {
        // -------------------------------------------------------------- consumers
        ptx::setmaxnreg_inc<kConsumerRegs>();
        Schedule::template consume<GemmKernel>(p, ml, epi, schedule_bars, cluster_id, cluster_size,
                                               rank, warpgroup - 1);
      }
      // No CTA may exit while a peer can still arrive on its barriers or multicast into it. Every
      // thread has arrived on the cluster barrier once past its last such access (the producer
      // after its last load; the consumers where their schedule says, the cooperative one after
      // its last mainloop); waiting only here lets the barrier's latency pass under the last
      // epilogue.
      if (cluster_size > 1) ptx::cluster_wait(); else __syncthreads();
    }
  }
};

// The __global__ entry: one per compiled GemmKernel (the SASS function name contains
// "sm90_gemm_kernel", which the SASS test and scripts/sanitize.sh look for).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, Kernel::kCtasPerSm)
    sm90_gemm_kernel(const __grid_constant__ typename Kernel::Params p) {
  Kernel::run(p);
}

}  // namespace jax_hopper
