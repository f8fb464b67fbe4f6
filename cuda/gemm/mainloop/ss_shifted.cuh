// Mainloop policy "SS, shifted": MainloopSS for a 16-bit MN-major A whose rows TMA cannot
// address in place (a weight stored (K, N) with N not a multiple of 8: its rows start 2N bytes
// apart, and a TMA box must start on a whole 16 bytes), read once, without a padded copy.
// The producer brings A through a view whose pitch TMA can address: the array as (K/8, 8N),
// row k' holding k rows 8k' .. 8k' + 7 side by side. Box (j, r) (72 columns by 8 view rows, no
// swizzle) starts at the 16-byte boundary at or before element r N + n0 + 64 j of view row k0/8:
// the k rows k0 + r, k0 + 8 + r, ..., k0 + 56 + r of columns n0 + 64 j - s_r .., where
// s_r = r N mod 8 is the same for all eight (the view's pitch is whole 16 bytes). Each consumer
// warpgroup then shifts its own 64-column boxes by s_r into a scratch box in the 128B-swizzled
// MN-major layout that wgmma reads (row k at its own place: the other operand is read as it
// is), fences the generic-proxy stores against wgmma's async proxy, meets its warpgroup at its
// named barrier, and multiplies. The scratch box is rewritten once the previous k-block's
// wgmmas are done (wait_group 0): at decode, where these tiles run, the tensor cores idle
// on the weight's stream anyway.
// Columns past N in a box run into the next k row's elements: they make output rows past N,
// which the lowering pads the output for and slices off. View rows past K/8 and columns past
// 8N read as zeros.
// NOTES (H200, 2026-12-02, odd_weight_h200_20261202_shifted.json): in a decode loop against
// 768 x 50257 and 4096 x 32001 weights, 0.81-1.12x jnp.dot, about 1.9x the padded copy it
// replaces; ~1.8 TB/s where the same weight padded once streams at ~2.7 (not profiled: the
// 16 boxes of 144-byte rows a stage, most across two L2 lines, or the shift between a stage
// landing and its wgmmas). Boxed straight into the swizzled layout at each row's own start
// instead (no shift) the loads were illegal instructions: a box's innermost start coordinate
// must be a multiple of 16 bytes.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/mainloop/ss.cuh"
#include "cuda/gemm/named_barriers.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/tma/tensor_map.h"

namespace jax_hopper {

template <DType T, int BM_, int BN_, int BK_, int STAGES_, int TILE_WARPGROUPS, class BLoad>
struct MainloopSSShifted
    : MainloopSS<T, T, BM_, BN_, BK_, STAGES_, TILE_WARPGROUPS, OperandLoad<true, 2>, BLoad,
                 NoScaling> {
  using Base = MainloopSS<T, T, BM_, BN_, BK_, STAGES_, TILE_WARPGROUPS, OperandLoad<true, 2>,
                          BLoad, NoScaling>;
  using typename Base::Pipe;
  using Base::BK;
  using Base::BM;
  using Base::BN;
  using Base::kAccRegs;
  using Base::kBBytes;
  using Base::kSlices;
  using Base::STAGES;
  static_assert(dtype_bytes(T) == 2 && BK == 64, "16-bit operands, a k-block of 64 k rows");

  static constexpr int kRows = kInterleaveRows;       // k rows a view row holds (8)
  static constexpr int kStagedCols = kBoxElems + kRows;  // a box's columns: 64 and the shift
  static constexpr int kStagedRowBytes = kStagedCols * 2;  // 144: whole 16 bytes
  static constexpr int kStagedBoxBytes = kRows * kStagedRowBytes;  // 8 view rows: 1152
  // A k-block of A as staged: BM / 64 column boxes, each of kRows boxes (one per residue r).
  static constexpr int kStagedABytes = BM / kBoxElems * kRows * kStagedBoxBytes;
  static constexpr int kStageBytes = kStagedABytes + kBBytes;
  // Each consumer warpgroup's scratch: its kSlices 64-column boxes, swizzled.
  static constexpr int kScratchBytes = TILE_WARPGROUPS * kSlices * kBoxBytes;
  static constexpr int kRingBytes = (STAGES * kStageBytes + 1023) / 1024 * 1024;
  static constexpr int kSmemBytes = kRingBytes + kScratchBytes;  // the scratch 1024-aligned
  static_assert(kStagedABytes % 1024 == 0 && kBBytes % 128 == 0, "stage alignment");
  static constexpr bool kPadsKBlocks = true;

  struct Params : Base::Params {
    int32_t a_cols;  // N: the columns of a row of A (the view's rows hold kRows of them)
  };

  struct Shared : Base::Shared {
    uint8_t* scratch;
  };

  // A (batch, K, N), N odd: its map over the (batch, K / kRows, kRows N) view, box
  // (kStagedCols, kRows), no swizzle; B's as MainloopSS's.
  static std::string host_params(const GemmArgs& g, Params* p) {
    const Array3& a = g.a;
    if (a.rows % kRows != 0)
      return "an MN-major operand whose rows are " + std::to_string(a.cols * 2) +
             " bytes apart needs a multiple of " + std::to_string(kRows) + " rows, got " +
             std::to_string(a.rows);
    TensorMapSpec s = {};
    s.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT16;
    s.rank = 3;
    s.base = a.data;
    s.dims[0] = static_cast<uint64_t>(a.cols) * kRows;
    s.dims[1] = static_cast<uint64_t>(a.rows) / kRows;
    s.dims[2] = static_cast<uint64_t>(a.batch);
    s.strides_bytes[1] = s.dims[0] * 2;
    s.strides_bytes[2] = static_cast<uint64_t>(a.rows) * a.cols * 2;
    s.box[0] = kStagedCols;
    s.box[1] = kRows;
    s.box[2] = 1;
    s.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    std::string e = encode_tensor_map(s, &p->a);
    if (e.empty()) e = BLoad::make_map(g, g.b, BN / g.cluster_m, &p->b);
    p->a_batched = OperandLoad<true, 2>::batched(g, a);
    p->b_batched = BLoad::batched(g, g.b);
    p->a_cols = static_cast<int32_t>(a.cols);
    return e;
  }

  __device__ static Shared carve(uint8_t* smem, uint64_t* bars) {
    Shared s;
    s.a = smem;
    s.b = smem + STAGES * kStagedABytes;
    s.full = bars;
    s.empty = bars + STAGES;
    s.scratch = smem + kRingBytes;
    return s;
  }

  // Producer (one thread), as MainloopSS::load.
  __device__ static void load(const Params& p, const Shared& s, Pipe& pipe, const TileCoord& tc,
                              const WorkUnit& u, uint32_t, uint32_t, uint32_t) {
    const int32_t ba = Base::a_batch(p, tc), bb = Base::b_batch(p, tc);
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      const int32_t k0 = u.k_offset + kb * BK;
      ptx::mbarrier_wait(&s.empty[pipe.stage], pipe.phase ^ 1);
      uint64_t* full = &s.full[pipe.stage];
      ptx::mbarrier_arrive_expect_tx(full, kStageBytes);
      uint8_t* a = s.a + pipe.stage * kStagedABytes;
      for (int q = 0; q < BM / kBoxElems * kRows; ++q) {
        const int j = q / kRows, r = q % kRows;
        const int32_t first = r * p.a_cols + tc.row0 + j * kBoxElems;  // element of (k0 + r, n0)
        ptx::tma_load_3d(&p.a, full, a + q * kStagedBoxBytes, first / kRows * kRows,
                         k0 / kRows, ba);
      }
      BLoad::load(&p.b, full, s.b + pipe.stage * kBBytes, BN, BLoad::origin(tc.n_block, BN), k0,
                  bb, 1, 0);
      pipe.advance();
    }
  }

  // Consumer warpgroup `part`: its slices' boxes of stage `stage` into its scratch, each k row's
  // 64 columns shifted to the start and 16-byte chunk c stored at c ^ (row % 8) (128B swizzle).
  __device__ static void shift_into_scratch(const Params& p, const Shared& s, int stage,
                                            uint32_t part, uint32_t wg_thread) {
    constexpr int kChunks = kSlices * kBoxElems * 8;  // 16-byte chunks of the scratch boxes
    const uint32_t staged = ptx::smem_addr(s.a + stage * kStagedABytes) +
                            part * kSlices * kRows * kStagedBoxBytes;
    const uint32_t scratch = ptx::smem_addr(s.scratch) + part * kSlices * kBoxBytes;
    for (int32_t idx = wg_thread; idx < kChunks; idx += 128) {
      const int32_t box = idx / (kBoxElems * 8), row = idx / 8 % kBoxElems, c = idx % 8;
      const int32_t r = row % kRows, i = row / kRows;
      const int32_t shift = (r * p.a_cols) % kRows;  // elements
      const uint32_t src = staged + (box * kRows + r) * kStagedBoxBytes + i * kStagedRowBytes +
                           (shift / 2 + 4 * c) * 4;
      uint32_t w[5];
#pragma unroll
      for (int q = 0; q < 5; ++q) w[q] = ptx::ld_shared_u32(src + 4 * q);
      const uint32_t bits = (shift & 1) * 16;
      uint4 v;
      v.x = __funnelshift_r(w[0], w[1], bits);
      v.y = __funnelshift_r(w[1], w[2], bits);
      v.z = __funnelshift_r(w[2], w[3], bits);
      v.w = __funnelshift_r(w[3], w[4], bits);
      ptx::st_shared_v4(scratch + box * kBoxBytes + row * 128 + ((c ^ (row % 8)) * 16), v);
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(kFirstConsumerBarrier + part, 128);
  }

  // As MainloopSS::mma: A from the warpgroup's scratch, shifted in from each stage.
  template <class CoordFn>
  __device__ static void mma(const Params& p, const Shared& s, Pipe& pipe, const WorkUnit& u,
                             uint32_t part, uint32_t wg_thread, uint32_t cluster_size,
                             float* acc, const CoordFn&) {
    const uint64_t a_desc = Base::template desc<true>(s.scratch + part * kSlices * kBoxBytes);
    const uint64_t b_desc = Base::template desc<BLoad::kMnMajor>(s.b);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;
    int prev_stage = -1;
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      ptx::mbarrier_wait(&s.full[pipe.stage], pipe.phase);
      // The previous k-block's wgmmas read the scratch: done before it is rewritten.
      ptx::wgmma_wait_group<0>();
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
      if (prev_stage >= 0) Base::release(s, prev_stage, cluster_size, wg_thread);
      shift_into_scratch(p, s, pipe.stage, part, wg_thread);
      Base::issue_k_block({a_desc, ptx::wgmma_desc_advance(b_desc, pipe.stage * kBBytes)}, acc);
      prev_stage = pipe.stage;
      pipe.advance();
    }
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
    if (prev_stage >= 0) Base::release(s, prev_stage, cluster_size, wg_thread);
  }
};

}  // namespace jax_hopper
