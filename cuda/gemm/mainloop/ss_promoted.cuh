// Mainloop policy "SS, promoted": MainloopSS's ring and producer with a consumer for
// block-scaled fp8 (BlockScaling, cuda/gemm/mainloop/scaling.cuh). A k-block is one scale block
// (128 elements of K), and the scale of a product element varies with its row (A's scale) and
// its 128-column block (B's), so a k-block's wgmmas cannot accumulate into the running sum:
// each 64 x 128 unit of the warpgroup's rows (a 64-row slice by a 128-column chunk of the tile)
// is multiplied into fresh registers (the first k32 step overwrites them), waited for, and
// added into the fp32 accumulators times a_scale[row] * b_scale[chunk] on the CUDA cores.
// That promotion also bounds the tensor cores' fp8 accumulation (narrower than fp32) to one
// k-block, so the result is as accurate as dequantising first.
// Units go one at a time: one unit's registers (64 per thread) next to the tile's accumulators
// fit the consumer's budget where a whole second tile's worth would not. While a warpgroup
// waits and promotes, the tile's other warpgroup (cooperative) or the other tile's
// (ping-pong) keeps the tensor cores busy.
// A unit's three scales are loaded after its wgmmas are issued, so the loads (L1 hits after a
// row's first k-block: 32 k-blocks of scales share a 128-byte line) overlap the multiply.
// NOTES (H100, 2026-11-24, bench_fp8.py --scaling block --sweep): 660-800 TFLOP/s on the
// large shapes, 0.5-0.6x our per-tensor kernel on the same data (fp8_block_h100_20261124.json);
// 128 x 128 beat 128 x 256 on 5 of 6 shapes (804 vs 777 at 8192^3), ping-pong was slowest.
// Tried and dropped: (1) two units in flight per warpgroup (promote one while the next
// multiplies) makes ptxas serialise every wgmma (C7514: CUDA cores reading accumulators of a
// wgmma between the start and end of its pipeline stage), and with 128 accumulators it
// spilled; (2) loading the next k-block's scales one k-block ahead ran slower (686 vs 804 at
// 8192^3, fp8_block_h100_20261124_prefetch.json).
// ncu (H100, 2026-11-24, 128 x 128 cooperative at 8192^3, before the turns below;
// ncu_h100_20261124_fp8_block_vs_tensor.txt): tensor pipe 49% vs 69% for the per-tensor kernel
// on the same tile; in the consumer loop the per-unit wgmma wait (WARPGROUP.DEPBAR) takes 28%
// of the stall samples, the scale addressing (predicated LDG, parameter reloads, 64-bit
// address arithmetic) most of the rest: about 1050 cycles per k-block against 512 of tensor
// work. Then each row's and chunk's scale pointer was taken once per work unit instead of
// recomputed from the kernel parameters at every load (predicated, 64-bit arithmetic): +19% to
// +33% on the large shapes, 8192^3 785 -> 1027 TFLOP/s (ab_h100_20261124_fp8block_pointers.json).
// ncu after that (ncu_h100_20261124_fp8_block_source.txt): the 128 x 128 k-block loop was 166
// SASS instructions per thread, 64 of them the FFMAs and about 60 re-encoding wgmma descriptors
// per thread (the warpgroup index was not known to be warp-uniform), 17 scale-address math.
// Then the descriptors were encoded once per unit (MainloopSS::first_descs; every stage, slice
// and k-step is a 32-bit add), the warpgroup index broadcast from lane 0 (kernel.cuh), and the
// scale pointers stepped once per k-block: 0.99-1.11x, geomean 1.033 over 6 shapes (8192^3
// 975 -> 996 TFLOP/s, 256 x 4096 x 4096 273 -> 302), ab_h100_20261124_descs_fp8block.json.
// Next: scales staged in shared memory by the producer (one TMA load of a k-block's A scales,
// which needs them stored (K/128, M)), fewer instructions between a unit's wait and the next
// unit's issue.
#pragma once

#include <cstdint>

#include "cuda/gemm/mainloop/scaling.cuh"
#include "cuda/gemm/named_barriers.cuh"
#include "cuda/gemm/mainloop/ss.cuh"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"

namespace jax_hopper {

template <DType TA, DType TB, int BM_, int BN_, int BK_, int STAGES_, int TILE_WARPGROUPS,
          class ALoad, class BLoad>
struct MainloopSSPromoted
    : MainloopSS<TA, TB, BM_, BN_, BK_, STAGES_, TILE_WARPGROUPS, ALoad, BLoad, BlockScaling> {
  using Base =
      MainloopSS<TA, TB, BM_, BN_, BK_, STAGES_, TILE_WARPGROUPS, ALoad, BLoad, BlockScaling>;
  using typename Base::Params;
  using typename Base::Pipe;
  using typename Base::Shared;
  using Base::BK;
  using Base::BN;
  using Base::kABytes;
  using Base::kBBytes;
  using Base::kSliceRegs;
  using Base::kSlices;

  static_assert(!ALoad::kMnMajor && !BLoad::kMnMajor, "block-scaled fp8 operands are K-major");
  static_assert(BK == BlockScaling::kBlock, "a k-block is one scale block");
  static constexpr int kUnitN = BlockScaling::kBlock;  // one B scale per unit
  static_assert(BN % kUnitN == 0, "the tile's columns are whole scale blocks");
  static constexpr int kChunks = BN / kUnitN;
  using UnitMma = ptx::WgmmaSS<kUnitN, TA, TB, 0, 0>;
  static constexpr int kUnitRegs = UnitMma::kRegs;
  static constexpr int kKSteps = BK / UnitMma::kK;
  static constexpr int kChunkBytes = kUnitN * 128;  // a chunk's K-major rows of B
  static constexpr uint32_t kStepBytes = Base::template kStepBytes<false>;  // per k32 step
  // A 128 x 256 tile's warpgroup holds 128 accumulators and a 64-register unit: with the
  // cooperative schedule's 224 registers it spilled (8 bytes, CUDA 13.0); 232 (the producer
  // keeps 40, as in ping-pong) does not.
  static constexpr int kMinConsumerRegs = 232;
  // With several units per k-block (128 x 256 tiles), the cooperative schedule's two
  // warpgroups take turns issuing units (0, 1, 0, 1, ...): the tensor cores then run one
  // warpgroup's unit after the other's instead of both interleaved, so each warpgroup's wait
  // and promotion overlaps the other's unit instead of coinciding with it. Per work unit,
  // warpgroup 0 starts without waiting and 1 ends without signalling, so the turns balance
  // unit by unit (both walk the same work units).
  // NOTES (H100, 2026-11-24, A/B against the unordered kernel in one process, 9 reps,
  // ab_h100_20261124_fp8block_order.json): 128 x 256 +4..+12% on the four large shapes
  // (8192^3 765 -> 843 TFLOP/s); 128 x 128 (one unit per k-block) -4..-7%: there the turns only
  // add a hand-off, so it stays unordered.
  static constexpr bool kOrdered = TILE_WARPGROUPS == 2 && kChunks > 1;

  // As MainloopSS::mma, for the same schedules: acc = rows [part * kSlices * 64, +kSlices * 64)
  // of the tile `coord()` over unit u's k-blocks, each k-block scaled per element.
  template <class CoordFn>
  __device__ static void mma(const Params& p, const Shared& s, Pipe& pipe, const WorkUnit& u,
                             uint32_t part, uint32_t wg_thread, uint32_t cluster_size,
                             float* acc, const CoordFn& coord) {
    const TileCoord tc = coord();
    // This thread's first accumulator row (the wgmma m64 fragment: warp w holds rows 16 w ..
    // +15, lane l rows l / 4 and l / 4 + 8; register r of a unit is in the second when r / 2 is
    // odd) and the tile's first 128-column block of B.
    const int32_t row = tc.row0 + static_cast<int32_t>(part) * kSlices * 64 +
                        static_cast<int32_t>(wg_thread / 32) * 16 +
                        static_cast<int32_t>(wg_thread % 32) / 4;
    const int32_t b_block = tc.n_block * kChunks;
    // Each row's (two per slice: rows r and r + 8 of the fragment) and chunk's scales, from
    // the unit's first k-block on; each k-block steps every pointer by one.
    const int32_t k_first = u.k_offset / BK + u.k_begin;
    const float* a_scales[kSlices][2];
    const float* b_scales[kChunks];
#pragma unroll
    for (int i = 0; i < kSlices; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        a_scales[i][h] = BlockScaling::a_row(p.scale, tc.batch, row + i * 64 + 8 * h) + k_first;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      b_scales[c] = BlockScaling::b_row(p.scale, tc.batch, b_block + c) + k_first;
    const typename Base::Descs d0 = Base::first_descs(s, part);
#pragma unroll
    for (int i = 0; i < Base::kAccRegs; ++i) acc[i] = 0.0f;
    float unit[kUnitRegs];
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      ptx::mbarrier_wait(&s.full[pipe.stage], pipe.phase);
      const typename Base::Descs d = d0.at_stage(pipe.stage);
#pragma unroll
      for (int i = 0; i < kSlices; ++i) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
#pragma unroll
          for (int r = 0; r < kUnitRegs; ++r) ptx::wgmma_fence_operand(unit[r]);
          const bool first = kb == u.k_begin && i == 0 && c == 0;
          const bool last = kb == u.k_end - 1 && i == kSlices - 1 && c == kChunks - 1;
          if (kOrdered && (part == 1 || !first))
            ptx::named_barrier_sync(kIssueTurnBarrier + part, 256);
          ptx::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kKSteps; ++kk)
            UnitMma::mma(ptx::wgmma_desc_advance(d.a, i * kBoxBytes + kk * kStepBytes),
                         ptx::wgmma_desc_advance(d.b, c * kChunkBytes + kk * kStepBytes), unit,
                         kk == 0 ? 0 : 1);
          ptx::wgmma_commit_group();
          if (kOrdered && (part == 0 || !last))
            ptx::named_barrier_arrive(kIssueTurnBarrier + (1 - part), 256);
          const float sb = __ldg(b_scales[c]);
          const float s0 = sb * __ldg(a_scales[i][0]);
          const float s1 = sb * __ldg(a_scales[i][1]);
          ptx::wgmma_wait_group<0>();
#pragma unroll
          for (int r = 0; r < kUnitRegs; ++r) ptx::wgmma_fence_operand(unit[r]);
          // The stage's last reader is done: hand it back before the arithmetic.
          if (i == kSlices - 1 && c == kChunks - 1)
            Base::release(s, pipe.stage, cluster_size, wg_thread);
          float* out = acc + i * kSliceRegs + c * kUnitRegs;
#pragma unroll
          for (int r = 0; r < kUnitRegs; ++r) out[r] += unit[r] * ((r / 2) % 2 ? s1 : s0);
        }
      }
#pragma unroll
      for (int i = 0; i < kSlices; ++i) ++a_scales[i][0], ++a_scales[i][1];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) ++b_scales[c];
      pipe.advance();
    }
  }
};

}  // namespace jax_hopper
