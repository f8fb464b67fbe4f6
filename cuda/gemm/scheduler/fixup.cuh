// Stream-K fix-up (cuda/gemm/scheduler/stream_k_plan.h): the pieces of a split tile meet as fp32 partial sums in a
// global workspace. Each consumer warpgroup moves its own accumulators in fragment order, four
// registers per 16-byte access: thread t's registers 4 j .. 4 j + 3 sit at [j * 512 + 4 t, +4),
// so every warp instruction is one coalesced 512-byte row and no shared memory or index
// arithmetic is needed. Accesses go through L2 only (.cg): the data was written by another SM.
#pragma once

#include <cstdint>

#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/flag.cuh"

namespace jax_hopper {

// The workspace: one slot per CTA of the clusters that take a stream-K range. A slot holds that
// CTA's fp32 partial tile (per consumer warpgroup: register i of thread t at [i * 128 + t]).
// The ready flags, two per CTA (split_flag_count), set when a consumer warpgroup's partial is
// complete, are not in the workspace (XLA hands it over uninitialised at every call) but in
// memory that outlives the call and is zero before every launch: zeroed once when allocated
// (ffi/gemm/split_flags.h), and each flag cleared again by the one warpgroup that waits for it,
// after the wait. A CTA publishes at most one partial per launch (only the first unit of its
// range can start past k-block 0), so no flag is raised twice in a launch, and once the
// launch ends every flag is zero again: no clearing launch before the next.
// NOTES: the small-M split's pieces (equal, one per cluster) meeting at the last arrival
// instead, as the swap-AB kernels' do (last_arrival_split.cuh; the last piece to finish sums
// all, its own read back from L2), measured no gain on the dense tiles: 0.98-1.06x, geomean
// 1.007 on 7 bf16 and 2 fp8 small-M shapes (H100, 2026-11-24,
// ab_h100_20261124_last_arrival_stream_k.json); not kept. Their pieces take long enough to
// finish together, and the last arrival reads one more 64-128 KB partial.
// NOTES: a cudaMemsetAsync of the flags in XLA's workspace before every split launch did that
// before; without it, split plans ran 1.03-1.14x faster (1 / 16 / 64 / 256 x 4096 x 4096:
// 1.095 / 1.085 / 1.099 / 1.135; 8192^3's stream-K tail 1.045), whole-tile plans unchanged
// (H100, 2026-11-24, ab_h100_20261124_split_flags.json).
struct Partials {
  float* tiles;
  int32_t* ready;
};

template <int kRegs>
__device__ __forceinline__ float* partial_slot(const Partials& p, uint32_t cta, uint32_t wg) {
  static_assert(kRegs % 4 == 0, "partials move four registers per access");
  return p.tiles + (static_cast<int64_t>(cta) * 2 + wg) * kRegs * 128;
}

// This thread's part of a warpgroup's slot (the layout above): registers i.. at slot + i * 128.
template <class F>  // float or const float
__device__ __forceinline__ F* thread_part(F* slot, uint32_t wg_thread) {
  return slot + 4 * wg_thread;
}

// Writes kRegs accumulators to this thread's part of a slot.
template <int kRegs>
__device__ __forceinline__ void store_partial(float* part, const float* acc) {
#pragma unroll
  for (int i = 0; i < kRegs; i += 4)
    __stcg(reinterpret_cast<float4*>(part + i * 128),
           make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]));
}

// Reads kCount partial values (registers i.. of a part, src = part + i * 128), all issued at once.
template <int kCount>
__device__ __forceinline__ void load_partial(float* v, const float* src) {
#pragma unroll
  for (int j = 0; j < kCount; j += 4) {
    const float4 x = __ldcg(reinterpret_cast<const float4*>(src + j * 128));
    v[j] = x.x;
    v[j + 1] = x.y;
    v[j + 2] = x.z;
    v[j + 3] = x.w;
  }
}

// Writes this warpgroup's accumulators to CTA `cta`'s slot, then raises its flag. The flag is
// raised by one thread after a barrier over the warpgroup, with a fence so that all 128 threads'
// writes are visible at GPU scope before it.
template <int kRegs>
__device__ __forceinline__ void publish_partial(const float* acc, const Partials& p,
                                                uint32_t cta, uint32_t wg, uint32_t wg_thread,
                                                uint32_t barrier_id) {
  store_partial<kRegs>(thread_part(partial_slot<kRegs>(p, cta, wg), wg_thread), acc);
  ptx::named_barrier_sync(barrier_id, 128);
  if (wg_thread == 0) {
    __threadfence();
    ptx::store_release_gpu(&p.ready[cta * 2 + wg], 1);
  }
}

// Adds kBatch partial values per L2 round trip: all loads of a batch are issued before their
// adds. The empty asm after a batch keeps nvcc from hoisting the next batch's loads above it
// (in an unrolled loop over the accumulators it would hoist all of them, and spill).
template <int kBatch>
__device__ __forceinline__ void add_batch(float* acc, const float* src) {
  float v[kBatch];
  load_partial<kBatch>(v, src);
#pragma unroll
  for (int j = 0; j < kBatch; ++j) acc[j] += v[j];
  asm volatile("" ::: "memory");
}

// Partial values in flight per thread per L2 round trip: 16 KB per warpgroup. The fix-up is
// latency-bound: a clock64 trace of 256 x 4096 x 4096 (128 x 128 tiles in 2 pieces; H100,
// 2026-11-25, trace_h100_20261125_fixup.txt) spent 2.8 us reading a 32 KB partial per
// warpgroup in eight round trips of 8 values, 23 GB/s per SM. 32 per round trip (and 16-byte
// accesses) ran split plans 1.02-1.11x faster (ab_h100_20261125_fixup_batches.json; on the
// 128 x 192 and 128 x 256 tiles' stream-K tails 1.01-1.04x, ab_h100_20261125_fixup_wide.json).
constexpr int kFixupBatch = 32;
// The batch of a strip of kRegs registers: the most registers up to kFixupBatch, whole 16-byte
// accesses, that divide the strip (24 for the 48 of a 96-token swap-AB tile).
constexpr int fixup_batch(int regs, int batch = kFixupBatch) {
  return regs % batch == 0 ? batch : fixup_batch(regs, batch - 4);
}

// Waits for the partials of this warpgroup's strip from clusters [first, end) (CTA c * csize +
// rank of each), clearing each flag it waited for, and adds them to the accumulators in cluster
// order, a fixed order so results are bitwise reproducible.
// NOTES: adding one value per L2 round trip made split tiles cost more than they saved
// (4096^3 fell from 646 to 472 TFLOP/s, H100, 2026-11-22), hence batches. Both loop orders
// below add the same values in the same order; each is the one that ptxas fits into the 168
// registers of its kernel without spilling (with batches of 8 and 16 the other spilled 8-20
// bytes, CUDA 13.0).
template <int kRegs>
__device__ __forceinline__ void add_partials(float* acc, const Partials& p, int32_t first,
                                             int32_t end, uint32_t csize, uint32_t rank,
                                             uint32_t wg, uint32_t wg_thread,
                                             uint32_t barrier_id) {
  if (wg_thread == 0) {
    for (int32_t c = first; c < end; ++c) {
      int32_t* ready = &p.ready[(c * csize + rank) * 2 + wg];
      while (ptx::load_acquire_gpu(ready) == 0) __nanosleep(64);
      *ready = 0;  // for the next launch (see Partials)
    }
  }
  ptx::named_barrier_sync(barrier_id, 128);
  const float* slot = thread_part(partial_slot<kRegs>(p, first * csize + rank, wg), wg_thread);
  // Consecutive clusters' slots of the same rank and warpgroup are this far apart.
  const int32_t stride = static_cast<int32_t>(csize) * 2 * kRegs * 128;
  constexpr int kBatch = fixup_batch(kRegs);
  if constexpr (kRegs > 64) {
    for (int32_t c = 0; c < end - first; ++c) {
#pragma unroll
      for (int i = 0; i < kRegs; i += kBatch)
        add_batch<kBatch>(acc + i, slot + c * stride + i * 128);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRegs; i += kBatch) {
      for (int32_t c = 0; c < end - first; ++c)
        add_batch<kBatch>(acc + i, slot + c * stride + i * 128);
    }
  }
}

}  // namespace jax_hopper
