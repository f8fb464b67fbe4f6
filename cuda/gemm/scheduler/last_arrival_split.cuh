// Tile scheduler policy: the last-arrival split (plan_last_arrival_split, stream_k_plan.h), for
// kernels whose tiles are weight streams (the swap-AB family). With fewer tiles than SMs every
// tile is cut into equal k-ranges ("pieces"), one per CTA. Nothing waits on another CTA: each
// piece publishes its fp32 partial to its own workspace slot and counts itself in on its tile's
// counter, and the last to arrive adds every piece's partial in piece order (so the sum does not
// depend on which piece came last: bitwise reproducible) and runs the epilogue. The collector
// split (stream_k.cuh) instead has the piece with k-block 0 wait for the others' flags, then
// read their partials, while the pieces that finished first sit idle. NOTES: on the same pieces
// (1 x 4096 x 4096, 32 tiles in 4) this ran 22.9 against 25.1 us (H100, 2026-11-24, forced
// plans in one process). Whole-tile plans run on a persistent grid; in the kernels that split
// their tail (plan_split_tail) each CTA takes its piece of a last-wave tile after its whole
// tiles. Clusters of one CTA (the swap-AB family's).
// NOTES: every piece storing its partial and stopping, a second kernel (launched behind the
// GEMM with programmatic dependent launch, one thread per float4 of a tile) summing them and
// running the epilogue, took the last arrivals' fix-up off the busiest SMs (128 x 768 x 4096:
// busiest SM 1.1x the average instead of 1.4x; ncu_h100_20261128_split_reduce.txt) but gained
// only 1.015x in device time over 14 split shapes (0.992-1.062; GPU tests and sanitizer
// clean), and cost 0.939x chained (one more launch per call where the host paces short calls)
// (H100, 2026-11-28, ab_h100_20261128_split_reduce.json; branch next/split-reduce, 35025ef).
// Not kept.
// Its host side, work list and workspace are StreamKScheduler's; the counters take the ready
// flags' memory (two per split tile, fewer than the plan's two per piece). Needs no shared
// memory.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/fixup.cuh"
#include "cuda/gemm/scheduler/stream_k.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/ptx/fence.cuh"

namespace jax_hopper {

template <int BM, int BN>
struct LastArrivalSplitScheduler : StreamKScheduler<BM, BN> {
  using Base = StreamKScheduler<BM, BN>;
  using typename Base::Params;

  JH_HOST_DEVICE static int32_t pieces(const StreamKPlan& s) {
    return s.sk_clusters == 0 ? 1 : s.k_blocks / s.sk_quota;
  }

  // StreamKScheduler's checks, and the plan's shape: whole tiles, or every tile in equal
  // pieces, one per CTA, or whole waves and the rest in equal pieces (plan_last_arrival_split).
  // StreamKScheduler's check that the pieces cover the split tiles' k-blocks end to end then
  // makes each piece one tile's.
  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    if (g.cluster_m * g.cluster_n != 1) return "the last-arrival split runs clusters of one CTA";
    std::string e = Base::host_params(g, product_cols, block_k, p);  // sk_quota >= 1 after it
    const StreamKPlan& s = g.plan;
    if (e.empty() && s.sk_clusters != 0 &&
        (s.sk_extra != 0 || s.k_blocks % s.sk_quota != 0 || s.dp_tiles % s.grid_clusters != 0 ||
         (s.dp_tiles == 0 && s.sk_clusters != s.grid_clusters)))
      e = "the plan is not a last-arrival split of the problem (plan_last_arrival_split)";
    return e;
  }

  // Nothing waits for another CTA: any grid runs, however few of its CTAs fit at once.
  static bool needs_coresidency(const Params&) { return false; }

  // After a piece's mainloop (CTA `cluster`, the piece of its tile at u.k_begin): false if
  // another piece of the tile is still to come (this one only published), true for a whole tile
  // and for the tile's last piece, whose acc then holds the sum of all pieces.
  template <int kRegs>
  __device__ static bool fixup(float* acc, const Params& p, const WorkUnit& u, int32_t cluster,
                               uint32_t, uint32_t, uint32_t wg, uint32_t wg_thread,
                               uint32_t barrier_id) {
    // The last arrival reads the other pieces' partials kBatch registers of kPerRound pieces at
    // a time (all their values in flight at once), so a tile of n pieces costs
    // kRegs / kBatch x ceil(n / kPerRound) L2 round trips.
    constexpr int kBatch = fixup_batch(kRegs);
    static_assert(kFixupBatch % kBatch == 0, "a strip's partial is whole rounds of loads");
    constexpr int kPerRound = kFixupBatch / kBatch;
    const int32_t n = pieces(p.plan);
    if (n == 1 || u.tile < p.plan.dp_tiles) return true;  // a whole tile
    const int32_t mine = u.k_begin / p.plan.sk_quota;
    const int32_t first = cluster - mine;  // the CTA of the tile's piece 0
    store_partial<kRegs>(thread_part(partial_slot<kRegs>(p.partials, cluster, wg), wg_thread), acc);
    ptx::named_barrier_sync(barrier_id, 128);
    bool last = false;
    if (wg_thread == 0) {
      int32_t* count = &p.partials.ready[(u.tile - p.plan.dp_tiles) * 2 + wg];
      __threadfence();  // release: the warpgroup's partial before its arrival
      last = atomicAdd(count, 1) == n - 1;
      if (last) {
        *count = 0;  // every piece has arrived: zero again for the next launch
        __threadfence();  // acquire: the other pieces' partials after their arrivals
      }
    }
    if (!ptx::named_barrier_or(barrier_id, 128, last)) return false;
    // acc = partial 0 + partial 1 + ... in piece order, this piece's own read back as well (it
    // stored it above): nothing of the accumulators is copied aside, which a wide token tile's
    // registers would not hold. Consecutive pieces' slots of the same warpgroup are this far
    // apart.
    constexpr int32_t kStride = 2 * kRegs * 128;
    const float* wg_base =
        thread_part(partial_slot<kRegs>(p.partials, first, 0), wg_thread) + wg * kRegs * 128;
#pragma unroll
    for (int c = 0; c < kRegs; c += kBatch) {
#pragma unroll
      for (int i = 0; i < kBatch; ++i) acc[c + i] = 0.0f;
      for (int32_t q0 = 0; q0 < n; q0 += kPerRound) {
        float v[kPerRound][kBatch];
#pragma unroll
        for (int j = 0; j < kPerRound; ++j)
          if (q0 + j < n) load_partial<kBatch>(v[j], wg_base + (q0 + j) * kStride + c * 128);
#pragma unroll
        for (int j = 0; j < kPerRound; ++j)
          if (q0 + j < n) {
#pragma unroll
            for (int i = 0; i < kBatch; ++i) acc[c + i] += v[j][i];
          }
      }
      // Keeps nvcc from hoisting the next chunk's loads above this one's adds (add_batch).
      asm volatile("" ::: "memory");
    }
    return true;
  }
};

}  // namespace jax_hopper
