// Mainloop policy for operands both from shared memory ("SS"): 16-bit (bf16, fp16; either
// major) or fp8 (e4m3, e5m2, mixed; K-major). The producer's TMA loads of A and B tiles into a
// STAGES-deep ring, and a consumer warpgroup's wgmma m64nBNk16 (k32 for fp8) over its rows of
// the BM x BN tile, fp32 accumulators in registers. A k-block is one 128-byte swizzle row either
// way (64 16-bit or 128 8-bit elements), so the ring's layout and the descriptors' byte steps
// are the same for both; Scaling (cuda/gemm/mainloop/scaling.cuh) applies fp8's per-tensor
// scales to the accumulators.
// TILE_WARPGROUPS consumer warpgroups share a tile (the kernel's consumer schedule): 2 in the
// cooperative schedule (a 64-row slice each, one wgmma per k16 step), 1 in ping-pong (all BM
// rows, BM / 64 wgmmas per k16 step on the same B descriptor).
// Owns the ring (shared memory) and its barriers: full[s] counts the bytes in, empty[s] the
// consumer warpgroups (of every CTA the stage is multicast into) out.
// ALoad, BLoad (cuda/gemm/mainloop/operand_load.cuh): how each operand tile is addressed; the
// gated weight of hopper_glu is a B loader, not a flag.
// jax_hopper/layout/ derives the same descriptor numbers; tests/test_layout_smem.py checks the
// model against the constants used below (LBO 16 / 8192, SBO 1024, k-steps 32 / 2048 bytes).
// For fp8, a K-major k32 step is 32 bytes as well.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/mainloop/operand_load.cuh"
#include "cuda/gemm/mainloop/scaling.cuh"
#include "cuda/gemm/named_barriers.cuh"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/ptx/wgmma_desc.cuh"

namespace jax_hopper {

template <DType TA, DType TB, int BM_, int BN_, int BK_, int STAGES_, int TILE_WARPGROUPS,
          class ALoad, class BLoad, class Scaling>
struct MainloopSS {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
  static_assert(TILE_WARPGROUPS == 1 || TILE_WARPGROUPS == 2, "one or two warpgroups per tile");
  // Rows of the tile one consumer warpgroup computes, in 64-row wgmma slices (A is loaded in
  // 64-row boxes).
  static constexpr int kSlices = BM / 64 / TILE_WARPGROUPS;
  static_assert(kSlices >= 1 && kSlices * 64 * TILE_WARPGROUPS == BM,
                "each consumer warpgroup of a tile takes whole 64-row slices");
  static constexpr int kBytes = dtype_bytes(TA);
  static_assert(dtype_bytes(TB) == kBytes && ALoad::kBytes == kBytes && BLoad::kBytes == kBytes,
                "both operands and their loaders of one element width");
  static_assert(BK == k_block_elems(kBytes), "one 128B swizzle row of elements per k-block");
  using Mma = ptx::WgmmaSS<BN, TA, TB, ALoad::kMnMajor ? 1 : 0, BLoad::kMnMajor ? 1 : 0>;
  static constexpr int kKSteps = BK / Mma::kK;           // wgmmas per k-block, 32 bytes apart
  static constexpr int kSliceRegs = Mma::kRegs;          // accumulators of one 64-row slice
  static constexpr int kAccRegs = kSlices * kSliceRegs;  // per consumer thread
  static constexpr int kABytes = BM * BK * kBytes;
  static constexpr int kBBytes = BN * BK * kBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes;  // 1024-aligned: stages stay aligned
  static constexpr int kBarriers = 2 * STAGES;
  static constexpr int kMinConsumerRegs = 0;  // the schedule's split suffices (kernel.cuh)
  // Shared memory a consumer warpgroup uses while it multiplies, in the region its epilogue
  // stages through (kernel.cuh): none here.
  static constexpr int kScratchBytesPerWarpgroup = 0;
  // A k-block wholly past K loads as zeros (the tensor maps' K extents are the problem's, and
  // TMA fills what lies outside a map), so it adds nothing: a split plan may pad the k-blocks
  // to a multiple of its pieces (plan_stream_k).
  static constexpr bool kPadsKBlocks = true;

  struct Params {
    CUtensorMap a, b;
    int32_t a_batched, b_batched;  // 0: one operand for every batch entry (Load::batched)
    typename Scaling::Params scale;
  };

  struct Shared {
    uint8_t* a;
    uint8_t* b;
    uint64_t* full;
    uint64_t* empty;
  };

  // Where the consumer warpgroups and the producer are in the ring.
  struct Pipe {
    int stage = 0;
    uint32_t phase = 0;
    __device__ void advance() {
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    }
    // Past `n` k-blocks that another consumer warpgroup takes (ping-pong).
    __device__ void skip(int32_t n) {
      const int32_t s = stage + n;
      phase ^= (s / STAGES) & 1;
      stage = s % STAGES;
    }
  };

  static std::string host_params(const GemmArgs& g, Params* p) {
    // A is shared by the CTAs of a cluster along N, B by those along M.
    std::string e = ALoad::make_map(g, g.a, BM / g.cluster_n, &p->a);
    if (e.empty()) e = BLoad::make_map(g, g.b, BN / g.cluster_m, &p->b);
    p->a_batched = ALoad::batched(g, g.a);
    p->b_batched = BLoad::batched(g, g.b);
    if (e.empty()) e = Scaling::host_params(g, &p->scale);
    return e;
  }

  // The ring at smem; the consumer warpgroups' regions (kScratchBytesPerWarpgroup) are not
  // used here.
  __device__ static Shared carve(uint8_t* smem, uint64_t* bars, uint8_t*, int32_t) {
    return Shared{smem, smem + STAGES * kABytes, bars, bars + STAGES};
  }

  // One thread, before the cluster barrier that publishes the initialised barriers.
  __device__ static void init(const Params& p, const Shared& s, uint32_t cluster_size) {
    ptx::tma_prefetch_descriptor(&p.a);
    ptx::tma_prefetch_descriptor(&p.b);
    for (int i = 0; i < STAGES; ++i) {
      ptx::mbarrier_init(&s.full[i], 1);
      // Every consumer warpgroup (of the tile) of every CTA the stage is multicast into must
      // release it.
      ptx::mbarrier_init(&s.empty[i], TILE_WARPGROUPS * cluster_size);
    }
  }

  // Producer (one thread): the k-blocks of unit `u`, tile `tc`.
  // NOTES: keep the k-block loop free of long-latency work. Two integer divisions and a short
  // loop per k-block (each operand's share of a 2-D cluster, from its runtime shape) ran the
  // swap-AB mid-M tiles (512-640 cycles of wgmma a k-block) at 0.64-0.90x (H200, 2026-12-02,
  // ab_h200_20261202_quad_producer.json): one thread's dependent chain is then on their
  // critical path.
  __device__ static void load(const Params& p, const Shared& s, Pipe& pipe, const TileCoord& tc,
                              const WorkUnit& u, uint32_t cluster_m, uint32_t cluster_n,
                              uint32_t rank) {
    const int32_t ba = a_batch(p, tc), bb = b_batch(p, tc);
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      const int32_t k0 = u.k_offset + kb * BK;
      // A fresh barrier passes a wait on parity 1, so the first lap does not block.
      ptx::mbarrier_wait(&s.empty[pipe.stage], pipe.phase ^ 1);
      load_k_block(p, s, pipe.stage, tc, k0, ba, bb, cluster_m, cluster_n, rank);
      pipe.advance();
    }
  }

  // The batch entries of A and B that tile `tc` reads.
  __device__ static int32_t a_batch(const Params& p, const TileCoord& tc) {
    return p.a_batched ? tc.batch : 0;
  }
  __device__ static int32_t b_batch(const Params& p, const TileCoord& tc) {
    return p.b_batched ? tc.batch : 0;
  }

  // One thread: the k-block at element k0 of tile `tc` (batch entries ba of A, bb of B) into
  // stage `stage`, counted in on its full barrier.
  __device__ static void load_k_block(const Params& p, const Shared& s, int stage,
                                      const TileCoord& tc, int32_t k0, int32_t ba, int32_t bb,
                                      uint32_t cluster_m, uint32_t cluster_n, uint32_t rank) {
    uint64_t* full = &s.full[stage];
    ptx::mbarrier_arrive_expect_tx(full, kStageBytes);
    ALoad::load(&p.a, full, s.a + stage * kABytes, BM, tc.row0, k0, ba, cluster_n, rank);
    BLoad::load(&p.b, full, s.b + stage * kBBytes, BN, BLoad::origin(tc.n_block, BN), k0, bb,
                cluster_m, rank);
  }

  // wgmma descriptor of a 64-row (A) or BN-row (B) slice at its first k-step; the kk-th k-step
  // is kk * kStepBytes further (ptx::wgmma_desc_advance).
  //   K-major SW128:  SBO = 8 rows x 128 B = 1024, LBO unused (1), +32 B per k16 (k32) step.
  //   MN-major SW128: LBO = 8192 (next 64-column box), SBO = 1024 (next 8 k rows),
  //                   +16 rows x 128 B = 2048 B per k16 step.
  template <bool MN_MAJOR>
  static constexpr uint32_t kStepBytes = MN_MAJOR ? 2048 : 32;
  template <bool MN_MAJOR>
  __device__ static uint64_t desc(const uint8_t* base) {
    return ptx::make_wgmma_desc(ptx::smem_addr(base), MN_MAJOR ? kBoxBytes : 16, 1024,
                                ptx::WgmmaSwizzle::k128B);
  }

  // The descriptors of consumer warpgroup `part`'s first A slice and of B, in stage 0, encoded
  // once per work unit: every stage, slice and k-step is a byte offset from them, so between a
  // stage landing and its wgmmas issuing there are only adds (the k-block loop of a mainloop
  // that waits for each k-block's product, MainloopSSPromoted, is bound by that path).
  struct Descs {
    uint64_t a, b;
    __device__ Descs at_stage(int stage) const {
      return {ptx::wgmma_desc_advance(a, stage * kABytes),
              ptx::wgmma_desc_advance(b, stage * kBBytes)};
    }
  };
  __device__ static Descs first_descs(const Shared& s, uint32_t part) {
    return {desc<ALoad::kMnMajor>(s.a + part * kSlices * kBoxBytes), desc<BLoad::kMnMajor>(s.b)};
  }

  // Hands stage `stage` back to the producers of every CTA that multicasts into it.
  __device__ static void release(const Shared& s, int stage, uint32_t cluster_size,
                                 uint32_t wg_thread) {
    if (wg_thread != 0) return;
    if (cluster_size == 1) {
      ptx::mbarrier_arrive(&s.empty[stage]);
    } else {
      for (uint32_t c = 0; c < cluster_size; ++c) ptx::mbarrier_arrive_cluster(&s.empty[stage], c);
    }
  }

  // Whether a k-block's rows outside the unit's can be zeroed (below): both operands of one
  // major, so that one rule finds a k row's bytes in each. The grouped contraction's operands
  // are both MN-major (16-bit) or both K-major (fp8).
  static constexpr bool kClearsOutsideK = ALoad::kMnMajor == BLoad::kMnMajor;

  // Zeroes the k rows of stage `stage` outside [lo, hi), which TMA filled with a neighbouring
  // group's rows (or zeros past the operand): the consumer warpgroup `part` zeroes its own A
  // slices and its share of the B tile, fences its generic-proxy stores against wgmma's
  // async-proxy reads, and meets the tile's other warpgroup (if any) before either multiplies.
  __device__ static void clear_k_outside(const Shared& s, int stage, int32_t lo, int32_t hi,
                                         uint32_t part, uint32_t wg_thread) {
    static_assert(kClearsOutsideK, "both operands of one major");
    if constexpr (ALoad::kMnMajor)
      clear_k_rows(s, stage, lo, hi, part, wg_thread);
    else
      clear_k_columns(s, stage, lo, hi, part, wg_thread);
    ptx::fence_proxy_async_smem();
    if constexpr (TILE_WARPGROUPS == 1)
      ptx::named_barrier_sync(kFirstConsumerBarrier + threadIdx.x / 128 - 1, 128);
    else
      ptx::named_barrier_sync(kTileBarrier, 128 * TILE_WARPGROUPS);
  }

  // MN-major: k row r of box j is bytes [r * 128, +128) of the box (the swizzle permutes
  // 16-byte chunks within a line, never across lines), so whole lines are zeroed: [0, lo) and
  // [hi, 64) of every box; B's boxes go to the warpgroups in turn.
  __device__ static void clear_k_rows(const Shared& s, int stage, int32_t lo, int32_t hi,
                                      uint32_t part, uint32_t wg_thread) {
    constexpr int kBBoxes = BN / kBoxElems / TILE_WARPGROUPS;
    const int32_t lines = lo + kBoxElems - hi;
    const int32_t chunks = (kSlices + kBBoxes) * lines * 8;  // 16-byte chunks to zero
    const uint32_t a = ptx::smem_addr(s.a + stage * kABytes + part * kSlices * kBoxBytes);
    const uint32_t b = ptx::smem_addr(s.b + stage * kBBytes + part * kBoxBytes);
    for (int32_t i = wg_thread; i < chunks; i += 128) {
      const int32_t box = i / (lines * 8), rest = i - box * lines * 8;
      const int32_t line = rest / 8 < lo ? rest / 8 : hi + rest / 8 - lo;
      const uint32_t base = box < kSlices ? a + box * kBoxBytes
                                          : b + (box - kSlices) * TILE_WARPGROUPS * kBoxBytes;
      ptx::st_shared_v4(base + line * 128 + (rest % 8) * 16, make_uint4(0, 0, 0, 0));
    }
  }

  // The bytes [a, b) of a 4-byte word (clamped to [0, 4]) as a mask; little-endian, so byte j
  // is bits [8j, +8).
  __device__ static uint32_t byte_mask(int32_t a, int32_t b) {
    a = max(a, 0);
    b = min(b, 4);
    if (a >= b) return 0u;
    return static_cast<uint32_t>((1ull << (8 * b)) - (1ull << (8 * a)));
  }

  // K-major: a line is one row of the tile over the whole k-block, its 16-byte chunk c (k bytes
  // [16c, +16)) stored at chunk c ^ (line % 8) (128B swizzle; every line counted from a
  // 1024-byte-aligned stage). Only the chunks holding bytes outside [lo, hi) (in bytes) are
  // visited: [0, c_lo) and [c_hi, 8), all 8 where those meet. Each zeroes its bytes outside and
  // keeps the rest. Warpgroup `part` takes its A lines and 1/TILE_WARPGROUPS of B's.
  // NOTES: visiting every chunk of every line (12 passes of a warpgroup over 192 lines, most
  // skipped) through generic stores was 19% of the stall samples of Mixtral up's fp8 weight
  // gradient with groups starting anywhere (two clears per tile), 825 TFLOP/s against 1121
  // with every group on 128 rows (ncu and timing, H100, 2026-11-27). Moving the clear onto the
  // producer warpgroup's three idle warps, which then pass each stage on to the consumers
  // through a second per-stage barrier, ran 0.97-1.01x this (ab_h100_20261127_relay.json).
  __device__ static void clear_k_columns(const Shared& s, int stage, int32_t lo, int32_t hi,
                                         uint32_t part, uint32_t wg_thread) {
    constexpr int kALines = kSlices * 64, kBLines = BN / TILE_WARPGROUPS;
    const int32_t lo_b = lo * kBytes, hi_b = hi * kBytes;
    const int32_t c_lo = (lo_b + 15) / 16, c_hi = hi_b / 16;  // chunks kept whole: [c_lo, c_hi)
    const int32_t skip = max(c_hi - c_lo, 0), per_line = 8 - skip;
    const uint32_t a = ptx::smem_addr(s.a + stage * kABytes + part * kALines * 128);
    const uint32_t b = ptx::smem_addr(s.b + stage * kBBytes + part * kBLines * 128);
    for (int32_t i = wg_thread; i < (kALines + kBLines) * per_line; i += 128) {
      const int32_t line = i / per_line, j = i - line * per_line;
      const int32_t c = j < c_lo ? j : j + skip, first = 16 * c;
      const uint32_t chunk = (line < kALines ? a + line * 128 : b + (line - kALines) * 128) +
                             (c ^ (line % 8)) * 16;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (lo_b < first + 16 && first < hi_b) {  // some bytes kept
        v = ptx::ld_shared_v4(chunk);
        const int32_t a0 = lo_b - first, b0 = hi_b - first;
        v.x &= byte_mask(a0, b0);
        v.y &= byte_mask(a0 - 4, b0 - 4);
        v.z &= byte_mask(a0 - 8, b0 - 8);
        v.w &= byte_mask(a0 - 12, b0 - 12);
      }
      ptx::st_shared_v4(chunk, v);
    }
  }

  // The consumer warpgroup with rows [part * kSlices * 64, +kSlices * 64) of the tile: acc =
  // those rows over unit u's k-blocks (scaled); slice i's accumulators at acc[i * kSliceRegs].
  // coord() gives the unit's TileCoord, for a mainloop that needs it (MainloopSSPromoted reads
  // per-row scales); this one passes it to Scaling, which calls it only for scales per entry.
  // issued() runs once the unit's last k-block is issued (so every wait of the unit on the
  // ring is behind this warpgroup), before its wgmmas are waited for: the ping-pong schedule
  // hands the tensor cores to the other warpgroup there.
  template <class CoordFn, class IssuedFn>
  __device__ static void mma(const Params& p, const Shared& s, Pipe& pipe, const WorkUnit& u,
                             uint32_t part, uint32_t wg_thread, uint32_t cluster_size,
                             float* acc, const CoordFn& coord, const IssuedFn& issued) {
    const typename Scaling::Value scale = Scaling::load(p.scale, coord);
    const Descs d0 = first_descs(s, part);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;
    int prev_stage = -1;
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      ptx::mbarrier_wait(&s.full[pipe.stage], pipe.phase);
      if constexpr (kClearsOutsideK) {
        const bool head = kb == u.k_begin && u.k_head_rows != 0;
        const bool tail = kb == u.k_end - 1 && u.k_tail_rows != 0;
        if (head || tail)
          clear_k_outside(s, pipe.stage, head ? u.k_head_rows : 0, tail ? u.k_tail_rows : BK,
                          part, wg_thread);
      }
      issue_k_block(d0.at_stage(pipe.stage), acc);
      // NOTES: keep this k-block's wgmmas in flight while waiting for the previous one, so the
      // tensor cores never drain between k-blocks; its stage is free once that wait returns.
      // Waiting for the current block instead (wait_group 0) lets the producer run one stage
      // further ahead but measured 494 vs 574 TFLOP/s at 4096^3 and within noise at 8192^3
      // (H100, 2-CTA clusters, 2026-11-22).
      // NOTES: the wgmmas of one k-block accumulate into the same registers, one after another;
      // for the swap-AB tiles' short m64n16-m64n64 wgmmas, alternating the k-steps between two
      // accumulator sets (summed after the loop) measured 0.998x on the device over 14 decode
      // and narrow shapes (H100, 2026-11-28, ab_h100_20261128_acc_sets.json): not what paces
      // them.
      ptx::wgmma_wait_group<1>();
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
      if (prev_stage >= 0) release(s, prev_stage, cluster_size, wg_thread);
      prev_stage = pipe.stage;
      pipe.advance();
    }
    issued();
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
    if (prev_stage >= 0) release(s, prev_stage, cluster_size, wg_thread);
    Scaling::template apply<kAccRegs>(scale, acc);
  }

  // The wgmmas of one k-block (its stage's descriptors `d`) into acc, committed as one group.
  __device__ static void issue_k_block(const Descs& d, float* acc) {
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const uint64_t b_desc = ptx::wgmma_desc_advance(d.b, kk * kStepBytes<BLoad::kMnMajor>);
      // The 64-row slices of A are whole boxes apart in both majors (K-major: 64 rows of
      // 128 B; MN-major: the next box of 64 M-columns).
#pragma unroll
      for (int i = 0; i < kSlices; ++i)
        Mma::mma(ptx::wgmma_desc_advance(d.a, i * kBoxBytes + kk * kStepBytes<ALoad::kMnMajor>),
                 b_desc, acc + i * kSliceRegs, 1);
    }
    ptx::wgmma_commit_group();
  }

  // As mma(), for a warpgroup that feeds itself (the lean schedule: no producer warpgroup):
  // its thread 0 keeps the ring up to STAGES k-blocks ahead of the wgmmas. As in mma(), each
  // k-block's wgmmas stay in flight while the previous k-block's are waited for, and that
  // stage is then refilled with the k-block STAGES past it (a warpgroup's wgmma completes only
  // after all four warps issued it, so every warp has passed that stage's full barrier by
  // then). `fill` is where thread 0's loads are in the ring; it moves in step with `pipe`, so
  // both are equal again after each unit.
  template <class CoordFn>
  __device__ static void mma_self_fed(const Params& p, const Shared& s, Pipe& pipe, Pipe& fill,
                                      const WorkUnit& u, const TileCoord& tc, uint32_t wg_thread,
                                      float* acc, const CoordFn& coord) {
    static_assert(TILE_WARPGROUPS == 1, "the warpgroup computes the whole tile");
    const typename Scaling::Value scale = Scaling::load(p.scale, coord);
    const bool loader = wg_thread == 0;
    const int32_t ba = a_batch(p, tc), bb = b_batch(p, tc);
    int32_t next = u.k_begin;  // the next k-block to load
    if (loader) {
      for (; next < u.k_end && next < u.k_begin + STAGES; ++next) {
        load_k_block(p, s, fill.stage, tc, u.k_offset + next * BK, ba, bb, 1, 1, 0);
        fill.advance();
      }
    }
    const Descs d0 = first_descs(s, 0);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;
    // NOTES: unrolled (nvcc's default), this loop with its wait_group 1 had ptxas serialise
    // every wgmma (C7515, or C7518 with thread 0's refill as a branch; CUDA 13.0), so each
    // k-block's wgmmas used to be waited for before the refill (wait_group 0), which drained
    // the tensor pipe every k-block. Kept rolled, the SASS has the k-block's wgmmas chained and
    // one WARPGROUP.DEPBAR.LE gsb0, 0x1 a k-block, as mma()'s.
#pragma unroll 1
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      ptx::mbarrier_wait(&s.full[pipe.stage], pipe.phase);
      issue_k_block(d0.at_stage(pipe.stage), acc);
      ptx::wgmma_wait_group<1>();
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
      // The previous k-block's stage (fill's) is free: the k-block STAGES past it goes there.
      if (loader && kb > u.k_begin && next < u.k_end) {
        load_k_block(p, s, fill.stage, tc, u.k_offset + next * BK, ba, bb, 1, 1, 0);
        fill.advance();
        ++next;
      }
      pipe.advance();
    }
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
    Scaling::template apply<kAccRegs>(scale, acc);
  }
};

}  // namespace jax_hopper
