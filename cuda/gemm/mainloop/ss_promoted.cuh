// Mainloop policy "SS, promoted": MainloopSS's ring and producer with a consumer for
// block-scaled fp8 (BlockScaling, or SwappedBlockScaling for the swap-AB kernels:
// cuda/gemm/mainloop/scaling.cuh). A k-block is one scale block (128 elements of K), and the
// scale of a product element varies with its row (A's scale) and its 128-column block (B's;
// swapped, with its 128-row block and its column), so a k-block's wgmmas cannot accumulate
// into the running sum:
// each unit of the warpgroup's rows (a 64-row slice by a column chunk inside one scale block)
// is multiplied into fresh registers (the first k32 step overwrites them), waited for, and
// added into the fp32 accumulators times a_scale[row] * b_scale[chunk] on the CUDA cores.
// That promotion also bounds the tensor cores' fp8 accumulation (narrower than fp32) to one
// k-block, so the result is as accurate as dequantising first.
// A warpgroup's k-block is units (64 rows by 128 or 64 columns, MainloopSSPromoted::kUnitN)
// alternating between two register buffers: unit t multiplies while unit t - 1 is waited for
// and promoted, so the CUDA cores' work overlaps the warpgroup's own tensor work; only the last
// unit of a step (8 k-blocks on the cooperative tiles, 1 on ping-pong) is promoted with nothing
// of its warpgroup in flight. The tile's other warpgroup (cooperative) or the other tile's
// (ping-pong) keeps the tensor cores busy meanwhile.
// A k-block's scales are loaded once, after its first unit's wgmmas are issued, so the loads
// (L1 hits after a row's first k-block: 32 k-blocks of scales share a 128-byte line) overlap
// the multiply.
// NOTES (H100, 2026-11-24, bench_fp8.py --scaling block --sweep): 660-800 TFLOP/s on the
// large shapes, 0.5-0.6x our per-tensor kernel on the same data (fp8_block_h100_20261124.json);
// 128 x 128 beat 128 x 256 on 5 of 6 shapes (804 vs 777 at 8192^3), ping-pong was slowest.
// Tried and dropped: (1) two 128-column units in flight per warpgroup spilled with 128
// accumulators, and ptxas serialised every wgmma (C7514) while a unit's wgmmas stayed in flight
// across the k-loop's back edge (see mma); (2) loading the next k-block's scales one k-block
// ahead ran slower (686 vs 804 at 8192^3, fp8_block_h100_20261124_prefetch.json).
// ncu (H100, 2026-11-24, 128 x 128 cooperative at 8192^3, before the changes below;
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
// Then the two buffers (one unit's promotion overlapping the next unit's wgmmas) replaced one
// 128-column unit at a time, and with them the two warpgroups' turns at issuing on 128 x 256
// tiles (+4..+12% when they came, ab_h100_20261124_fp8block_order.json): 1.06-1.10x on all six
// shapes, geomean 1.082 (8192^3 984 -> 1056 TFLOP/s, 0.79-0.83x our per-tensor kernel; M = 256
// 340 -> 360), ab_h100_20261125_fp8block_units.json. 64-column units on the 128 x 128 tile too
// (no pairs of k-blocks) gained 1.01-1.10x on the large shapes but lost 0.87x at M = 256
// (ab_h100_20261125_fp8block_units64.json): A is read from shared memory once per 64 columns.
// With the buffers, 2-CTA clusters stay within -4..+2% of none (fp8_block_h100_20261125_units.json).
// ncu then (ncu_h100_20261125_fp8_block_units.txt): tensor pipe 68% (128 x 256) and 63%
// (128 x 128) against 90% for the per-tensor kernel; the scale products formed at the promotion
// instead of at the loads (see issue) gained 0.99-1.05x, geomean 1.028
// (ab_h100_20261125_fp8block_scale_loads.json). The two cooperative warpgroups taking turns to
// start each step (so that one's last promotion would overlap the other's last unit) ran
// 0.88-1.04x, geomean 0.969 (ab_h100_20261125_fp8block_step_turns.json): not kept. What remains
// is mostly the wgmma waits and the narrower wgmmas' issue (shared memory at 69% of its peak
// at 128 x 256, ncu). A from registers (ldmatrix once per k-block, wgmma RS for the four
// 64-column units) needs 16 more registers per consumer thread: at 232 the 128 x 256 consumer
// spilled 16 bytes, and 240 leaves the producer 24, where it spilled 52 (CUDA 13.0).
// A from registers with 32-column units instead (16-register buffers: no spills; each unit's
// wgmmas read only B from shared memory, a third less than the 64-column SS units) ran slower
// on 128 x 256 and ping-pong tiles: 0.86-0.89x on the four large shapes with two buffers,
// 0.88-0.90x with three (wait_group 2), so neither shared-memory bandwidth nor the depth of
// work in flight is what limits these tiles, and a narrower wgmma costs more than the A reads
// it saves (ab_h100_20261125_fp8block_rs.json, _rs3.json; H100, 2026-11-25). Wider units need
// registers the 128 accumulators take (2 x 64 more at 128 columns).
// Ablations in a standalone harness (the kernels launched without jax; H100, 2026-11-25,
// fp8_block_h100_20261125_ablation.txt) then showed what the promotion's scales cost on 128 x
// 256: without any scale (acc += unit) the kernel ran 1.08-1.20x faster. Each unit loaded its
// own three scales (four units of a k-block, twelve loads for four values); loading a k-block's
// scales once, after its first unit's issue, into a set per k-block parity, and stepping 8
// k-blocks per k-loop step instead of 1, brought it to 1.06-1.18x the build before, within 0-5%
// of the scale-free variant. A single set loaded after the previous k-block's last promotion
// gained only half of that: the loads then have less time to land. Through jax, against
// f17303d: 1.06-1.12x on 7 of 8 shapes, geomean 1.075 (8192^3 1013 -> 1136 TFLOP/s;
// ab_h100_20261125_fp8block_kscales.json).
// One 128-column unit buffer on the tiles where two do not fit (128 x 256 cooperative, 128 x
// 128 ping-pong: 128 + 64 registers; DeepGEMM's shape of promotion, each unit waited for and
// promoted while the tile's other warpgroup keeps the tensor cores busy, half the wgmmas, a
// quarter less shared memory read a k-block) ran 0.935-0.999x these two 64-column buffers on
// the device, geomean 0.964 over 11 shapes (H200, 2026-12-04,
// ab_h200_20261204_fp8block_unit128.json): the warpgroup's own overlap is worth more than the
// wider wgmmas. Not kept.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda/gemm/mainloop/scaling.cuh"
#include "cuda/gemm/mainloop/ss.cuh"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"

namespace jax_hopper {

template <DType TA, DType TB, int BM_, int BN_, int BK_, int STAGES_, int TILE_WARPGROUPS,
          class ALoad, class BLoad, class Scaling>
struct MainloopSSPromoted
    : MainloopSS<TA, TB, BM_, BN_, BK_, STAGES_, TILE_WARPGROUPS, ALoad, BLoad, Scaling> {
  using Base = MainloopSS<TA, TB, BM_, BN_, BK_, STAGES_, TILE_WARPGROUPS, ALoad, BLoad, Scaling>;
  using typename Base::Params;
  using typename Base::Pipe;
  using typename Base::Shared;
  using Base::BK;
  using Base::BM;
  using Base::BN;
  using Base::kAccRegs;
  using Base::kSliceRegs;
  using Base::kSlices;

  static_assert(!ALoad::kMnMajor && !BLoad::kMnMajor, "block-scaled fp8 operands are K-major");
  static constexpr bool kRowScales = Scaling::kPerRowOfA;  // else SwappedBlockScaling
  static_assert(BK == Scaling::kBlock, "a k-block is one scale block");
  static_assert(kRowScales || BM == Scaling::kBlock,
                "swapped, a tile's rows are one 128-row scale block of A");
  // A unit: 64 rows (a slice) x kUnitN columns of one k-block, so that one A scale per row
  // and one B scale cover it; a k-block is kUnits of them. Two units' registers sit beside the
  // accumulators: whole 128-column units where that fits the consumer's budget (a 128 x 128
  // cooperative tile: 64 + 2 x 64), else 64-column ones (128 + 2 x 32); a narrower tile is one
  // unit wide (the swap-AB tiles: 16-64 columns). Narrower wgmmas read A from shared memory
  // once per 64 columns instead of once per 128.
  static constexpr int kWideUnitN = kAccRegs + 2 * 64 <= 192 ? 128 : 64;
  static constexpr int kUnitN = BN < kWideUnitN ? BN : kWideUnitN;
  static_assert(Scaling::kBlock % kUnitN == 0 && BN % kUnitN == 0,
                "a unit is inside one scale block, and the tile's columns are whole units");
  static constexpr int kChunks = BN / kUnitN;       // units across the columns
  static constexpr int kUnits = kSlices * kChunks;  // units per k-block
  // K-blocks per step of the k-loop: a step's last unit is promoted with nothing of its
  // warpgroup in flight, so the longer the step the rarer that stall. With a set of scales per
  // k-block, 8 ran 1.05-1.13x 1 on 128 x 256 tiles, and 0.96-1.05x 2 on 128 x 128 (harness,
  // H100, 2026-11-25; see NOTES above). The ping-pong tile's warpgroup holds two slices (128
  // accumulators and four rows' A scales): it spilled at 2 and at 4.
  static constexpr int kBlocksPerStep = kSlices == 1 ? 8 : 1;
  using UnitMma = ptx::WgmmaSS<kUnitN, TA, TB, 0, 0>;
  static constexpr int kUnitRegs = UnitMma::kRegs;
  static constexpr int kKSteps = BK / UnitMma::kK;
  static constexpr int kChunkBytes = kUnitN * 128;  // a chunk's K-major rows of B
  static constexpr uint32_t kStepBytes = Base::template kStepBytes<false>;  // per k32 step
  static constexpr int kBColumnBlocks = BN / Scaling::kBlock;  // B scales per k-block
  // A k-block's scales in a thread's registers, B's then A's, each read through a pointer of
  // its own stepped one k-block at a time. BlockScaling: B's per 128-column block, then each
  // slice's two rows' (r, r + 8) A scales. SwappedBlockScaling: B's per column the thread's
  // fragment holds (2 (lane % 4) and its neighbour in each 8-column group), then A's for the
  // tile's 128-row block.
  static constexpr int kBScales = kRowScales ? kBColumnBlocks : BN / 4;
  static constexpr int kKBlockScales = kBScales + (kRowScales ? 2 * kSlices : 1);
  using KBlockScales = float[kKBlockScales];
  // The accumulators, two units' registers and the scale pointers: with the cooperative
  // schedule's 224 registers a 128 x 256 tile spilled (CUDA 13.0); 232 (the producer keeps 40,
  // as in ping-pong) does not.
  static constexpr int kMinConsumerRegs = 232;
  // Each k-block reads its scale blocks by index, and past K there are none: no padded plans.
  static constexpr bool kPadsKBlocks = false;

  // As MainloopSS::mma, for the same schedules: acc = rows [part * kSlices * 64, +kSlices * 64)
  // of the tile `coord()` over unit u's k-blocks, each k-block scaled per element. issued()
  // runs at the end: each step waits for its own wgmmas (to promote its last unit) before the
  // next step's first wait on the ring, so nothing of the unit is in flight by then.
  template <class CoordFn, class IssuedFn>
  __device__ static void mma(const Params& p, const Shared& s, Pipe& pipe, const WorkUnit& u,
                             uint32_t part, uint32_t wg_thread, uint32_t cluster_size,
                             float* acc, const CoordFn& coord, const IssuedFn& issued) {
    // Each scale's pointer (KBlockScales' order) at the unit's first k-block; each k-block
    // steps every one by one.
    const float* scale_ptrs[kKBlockScales];
    first_scales(p, coord(), part, wg_thread, u.k_offset / BK + u.k_begin, scale_ptrs);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;

    // Unit t of a step is multiplied into buffer t % 2 while unit t - 1, in the other
    // buffer, waits for its wgmmas (wait_group 1) and is added into the accumulators times its
    // scales: that promotion overlaps this warpgroup's own next unit on the tensor cores. Only
    // a step's last unit is promoted with nothing of this warpgroup's in flight.
    // NOTES: carrying the last unit's wgmmas across the loop's back edge (promoting it after
    // the next step's first issue) makes ptxas serialise every wgmma (C7514, or a wait injected
    // before the read: C7517; CUDA 13.0), and copying its registers out first costs as many
    // instructions as the promotion it would hide.
    // A k-block's scales are loaded right after its first unit is issued, into the set of its
    // parity in the step: the previous k-block's last unit is promoted after that, from the
    // other set.
    float buf[2][kUnitRegs];
    KBlockScales scales[2];
    const typename Base::Descs d0 = Base::first_descs(s, part);
    int32_t kb = u.k_begin;  // the first k-block of the step below
    auto step = [&](auto blocks_const) {  // the next `blocks` k-blocks (a compile-time count)
      constexpr int kStepUnits = decltype(blocks_const)::value * kUnits;
      int stage[decltype(blocks_const)::value];
      typename Base::Descs d = d0;
      auto unit = [&](auto t_const) {  // t a compile-time constant: its buffer is too
        constexpr int t = decltype(t_const)::value, j = t % kUnits;
        if constexpr (j == 0) {
          ptx::mbarrier_wait(&s.full[pipe.stage], pipe.phase);
          // The grouped contraction's first and last k-blocks hold rows of the neighbouring
          // groups (MainloopSS::clear_k_outside); every other unit's head and tail are 0.
          const int32_t b = kb + t / kUnits;
          const bool head = b == u.k_begin && u.k_head_rows != 0;
          const bool tail = b == u.k_end - 1 && u.k_tail_rows != 0;
          if (head || tail)
            Base::clear_k_outside(s, pipe.stage, head ? u.k_head_rows : 0,
                                  tail ? u.k_tail_rows : BK, part, wg_thread);
          stage[t / kUnits] = pipe.stage;
          d = d0.at_stage(pipe.stage);
        }
        issue<j>(d, buf[t % 2]);
        if constexpr (j == 0) load_scales(scales[(t / kUnits) % 2], scale_ptrs);
        if constexpr (j == kUnits - 1) {  // the k-block's units are issued: on to the next
          pipe.advance();
#pragma unroll
          for (int q = 0; q < kKBlockScales; ++q) ++scale_ptrs[q];
        }
        if constexpr (t > 0) {
          ptx::wgmma_wait_group<1>();
          promote<(t - 1) % kUnits>(acc, buf[(t - 1) % 2], scales[((t - 1) / kUnits) % 2]);
          if constexpr ((t - 1) % kUnits == kUnits - 1)  // its stage's last reader is done
            Base::release(s, stage[(t - 1) / kUnits], cluster_size, wg_thread);
        }
      };
      for_each_unit(unit, std::make_integer_sequence<int, kStepUnits>{});
      ptx::wgmma_wait_group<0>();
      Base::release(s, stage[kStepUnits / kUnits - 1], cluster_size, wg_thread);
      promote<kUnits - 1>(acc, buf[(kStepUnits - 1) % 2], scales[(kStepUnits / kUnits - 1) % 2]);
    };
    for (; kb + kBlocksPerStep <= u.k_end; kb += kBlocksPerStep)
      step(std::integral_constant<int, kBlocksPerStep>{});
    if constexpr (kBlocksPerStep > 1) {
      // The remainder: single-unit k-blocks still in pairs where they can be, an odd last one
      // alone.
      constexpr int kRemainderBlocks = kUnits == 1 ? 2 : 1;
      for (; kb + kRemainderBlocks <= u.k_end; kb += kRemainderBlocks)
        step(std::integral_constant<int, kRemainderBlocks>{});
      if constexpr (kRemainderBlocks > 1) {
        if (kb < u.k_end) step(std::integral_constant<int, 1>{});
      }
    }
    issued();
  }

  // Issues unit J of a k-block whose stage's descriptors are `d` into `unit`.
  template <int J>
  __device__ static void issue(const typename Base::Descs& d, float (&unit)[kUnitRegs]) {
    constexpr int i = J / kChunks, c = J % kChunks;
#pragma unroll
    for (int q = 0; q < kUnitRegs; ++q) ptx::wgmma_fence_operand(unit[q]);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      UnitMma::mma(ptx::wgmma_desc_advance(d.a, i * kBoxBytes + kk * kStepBytes),
                   ptx::wgmma_desc_advance(d.b, c * kChunkBytes + kk * kStepBytes), unit,
                   kk == 0 ? 0 : 1);
    ptx::wgmma_commit_group();
  }

  // The pointers of this thread's scales (KBlockScales' order) at k-block `k_first` of tile
  // `tc`, part `part` of its rows.
  __device__ static void first_scales(const Params& p, const TileCoord& tc, uint32_t part,
                                      uint32_t wg_thread, int32_t k_first,
                                      const float* (&ptrs)[kKBlockScales]) {
    const int32_t lane = static_cast<int32_t>(wg_thread % 32);
    if constexpr (kRowScales) {
      // This thread's first accumulator row (the wgmma m64 fragment: warp w holds rows 16 w ..
      // +15, lane l rows l / 4 and l / 4 + 8; register r of a unit is in the second when r / 2
      // is odd), and the tile's first 128-column block of B.
      const int32_t row = tc.row0 + static_cast<int32_t>(part) * kSlices * 64 +
                          static_cast<int32_t>(wg_thread / 32) * 16 + lane / 4;
#pragma unroll
      for (int c = 0; c < kBColumnBlocks; ++c)
        ptrs[c] = p.scale.b_at(tc.batch, tc.n_block * kBColumnBlocks + c) + k_first;
#pragma unroll
      for (int i = 0; i < kSlices; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          ptrs[kBScales + 2 * i + h] =
              p.scale.a_at(tc.batch, row + i * 64 + 8 * h) + k_first;
    } else {
      // The fragment's columns (8 j + 2 (lane % 4) + e: register r of a unit is column
      // 8 (r / 4) + 2 (lane % 4) + r % 2) are rows of B.
      const int32_t col0 = tc.n_block * BN + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          ptrs[2 * j + e] = p.scale.b_at(tc.batch, col0 + 8 * j + e) + k_first;
      ptrs[kBScales] = p.scale.a_at(tc.batch, tc.row0 / Scaling::kBlock) + k_first;
    }
  }

  // A k-block's scales (L1 hits after a row's first k-block: 32 k-blocks of scales share a
  // 128-byte line). Nothing uses them before its first unit's promotion, so they land while
  // that unit multiplies.
  __device__ static void load_scales(KBlockScales& ks, const float* const (&ptrs)[kKBlockScales]) {
#pragma unroll
    for (int q = 0; q < kKBlockScales; ++q) ks[q] = __ldg(ptrs[q]);
  }

  // Calls f(integral_constant<T>) for T = 0, 1, ..., in order.
  template <class F, int... T>
  __device__ static void for_each_unit(F& f, std::integer_sequence<int, T...>) {
    (f(std::integral_constant<int, T>{}), ...);
  }

  // acc (unit J's columns of its slice) += the unit's product times its rows' scales.
  // The scale products are formed here, not at the loads: there they made the warp wait for
  // the loads before its previous unit's promotion (ncu put 8-12% of the consumers' stall
  // samples on that FMUL; H100, 2026-11-25, ncu_h100_20261125_fp8_block_units.txt).
  template <int J>
  __device__ static void promote(float* acc, float (&unit)[kUnitRegs], const KBlockScales& ks) {
#pragma unroll
    for (int q = 0; q < kUnitRegs; ++q) ptx::wgmma_fence_operand(unit[q]);
    constexpr int i = J / kChunks, c = J % kChunks;
    float* out = acc + i * kSliceRegs + c * kUnitRegs;
    if constexpr (kRowScales) {
      const float b = ks[c * kUnitN / Scaling::kBlock];
      const float s0 = b * ks[kBScales + 2 * i], s1 = b * ks[kBScales + 2 * i + 1];
#pragma unroll
      for (int q = 0; q < kUnitRegs; ++q) out[q] += unit[q] * ((q / 2) % 2 ? s1 : s0);
    } else {
      const float a = ks[kBScales];
#pragma unroll
      for (int q = 0; q < kUnitRegs; ++q)
        out[q] += unit[q] * (a * ks[c * (kUnitN / 4) + 2 * (q / 4) + q % 2]);
    }
  }
};

}  // namespace jax_hopper
