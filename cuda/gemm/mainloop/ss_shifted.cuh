// Mainloop policy "SS, shifted": MainloopSS for a 16-bit MN-major A whose rows TMA cannot
// address in place (a weight stored (K, N) with N not a multiple of 8: its rows start 2N bytes
// apart, and a TMA box must start on a whole 16 bytes), read once, without a padded copy.
// The producer brings A through a view whose pitch TMA can address: the array as (K/8, 8N),
// row k' holding k rows 8k' .. 8k' + 7 side by side. Box r (BM + 8 columns by 8 view rows, no
// swizzle) starts at the 16-byte boundary at or before element r N + n0 of view row k0/8: the
// k rows k0 + r, k0 + 8 + r, ..., k0 + 56 + r of columns n0 - s_r .., where s_r = r N mod 8 is
// the same for all eight (the view's pitch is whole 16 bytes). Each consumer warpgroup then
// shifts its own 64-column slices by s_r into a scratch box in the 128B-swizzled MN-major
// layout that wgmma reads (row k at its own place: the other operand is read as it is), fences
// the generic-proxy stores against wgmma's async proxy, meets its warpgroup at its named
// barrier, and multiplies. Two scratch boxes a warpgroup take k-blocks in turn, so the shift of
// one runs while the previous one's wgmmas are in flight. The scratch lies in the warpgroup's
// own region of the kernel's shared memory, which its epilogue stages through once the
// products are done (kernel.cuh): the ring keeps the bytes the scratch would take.
// Columns past N in a box run into the next k row's elements: they make output rows past N,
// which the lowering pads the output for and slices off. View rows past K/8 and columns past
// 8N read as zeros.
// NOTES (H200, 2026-12-02): the first build boxed each 64-column slice apart (16 boxes of 72
// columns a stage), shifted with 32-bit shared loads (4-way bank conflicts across a warp's
// residues) into one scratch box rewritten only after the previous k-block's wgmmas were done:
// ~1.8 TB/s. One box per residue, conflict-free 16-byte loads with the residue uniform across a
// warp, and two scratch boxes ran 1.23-1.60x that per call (ab_h200_20261202_odd_double.json),
// within 4% of the aligned weight's kernel under ncu (ncu_h200_20261202_odd_double.txt).
// Boxed straight into the swizzled layout at each row's own start instead (no shift) the loads
// were illegal instructions: a box's innermost start coordinate must be a multiple of 16 bytes.
// Tried (H200, 2026-12-02): the shift moved off the consumers onto the producer warpgroup's
// three idle warps (kernel hook; each warp a third of a k-block's 32 passes, 3-6 passes' loads
// in flight under the producer's 56-88 registers, a scratch ring of 2-3 sets with its own
// barriers, so the shift of k-block t + 1 would run beside the wgmmas of t). Correct (40 odd-
// weight tests, memcheck and racecheck clean on the odd group) but 0.31-0.68x the device time
// of this design on all 15 shapes, decode included (16 x 32001 x 4096 234.8 against 74.6 us;
// ab_h200_20261202_shifters.json with a ring each for the staged A, B and the scratch,
// ab_h200_20261202_shifters2.json with this ring and a scratch ring). ncu of the latter
// (ncu_h200_20261202_shifters_decode.txt): 0.17 shared-memory wavefronts a cycle an SM, 64%
// of the warps' stall cycles on long scoreboard (waits, not bandwidth). Likely, not profiled
// further: a k-block's shift on three warps (two to four rounds of loads each) takes longer
// than on the eight consumer warps (one round, all loads in flight), and one shift at a time
// then paces everything. Not kept; more shifting warps would need a fourth warpgroup (512
// threads: 128 registers a thread at launch). Nor is it the proxy fence after each shift: this
// design without it (a timing-only scratch build) ran 1.000-1.019x (16 / 224 / 384 x 32001 x
// 4096, 300 x 8996 x 5408; ab_h200_20261202_nofence.json). Nor, it seems, the shift at all:
// timed apart in two scratch builds (results wrong; ab_h200_20261202_shift_apart.json), this
// design without the shift ran 384 x 32001 x 4096 in 226.3 us, without the wgmmas 256.8, both
// 272.0 (the nofence run's main); 224 rows 158.8 / 167.4 / 203.8, 16 rows 68.5 / 70.4 / 75.1,
// where the aligned weight's 192-token tile took 156.3 us at 384 rows (under ncu,
// ncu_h200_20261202_odd_wide.txt). What both keep is the producer's staged loads: eight
// unswizzled boxes of 8 rows a k-block, each 272-byte row across three or four 128-byte L2
// lines (the aligned tile: two swizzled 64 x 64 boxes, two lines a row).
// Then (H200, 2026-12-03) the scratch moved from beside the ring into each consumer
// warpgroup's staging region (kernel.cuh), one more stage on every odd tile (the 192-token
// tile 3 -> 4, as many as the aligned one): device time against the build before on 12 odd
// shapes (ab_h200_20261203_odd_region.json) 1.178x at 160 x 32001 x 4096 and 1.134x at 384
// (both on 192 tokens; 384 rows 274.7 -> 242.2 us), 1.027x at 300 x 8996 x 5408, 0.99-1.03x
// on the 16- to 128-token tiles (decode unchanged). Under ncu at 384 x 32001 x 4096
// (ncu_h200_20261203_odd_region.txt) 235.2 us, tensor pipe 49.5% (43.8), long-scoreboard
// stalls 0.70 a warp per instruction (2.66): most of the wait on the staged loads was the
// ring running dry at 3 stages, not their L2 lines (the multicast to a token-tile pair, which
// would halve those, is no longer the next step). What remains: the warpgroup's named barrier
// after each shift 3.38, short scoreboard (the shift's shared loads) 2.42, wait 2.29; the
// shared-memory pipe at 56% of its peak. Candidates, not tried: fewer shared loads a shift (each source chunk is read
// twice now, as one thread's hi and the next one's lo; two output chunks a thread from three
// loads would cut the loads by a quarter, but with each pass on one residue (the warp-uniform
// branch in take()) its eight rows' stores then meet in four 16-byte bank groups, two-way
// conflicts, unless a lane's chunks rotate with its row or a pass mixes two residues), and
// fewer barriers a k-block.
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

  static constexpr int kRows = kInterleaveRows;  // k rows a view row holds (8)
  static constexpr int kStagedCols = BM + kRows;  // a box's columns: the tile's and the shift
  static_assert(kStagedCols <= 256, "a TMA box is at most 256 elements wide");
  static constexpr int kStagedRowBytes = kStagedCols * 2;          // whole 16 bytes
  static constexpr int kStagedBoxBytes = kRows * kStagedRowBytes;  // 8 view rows
  // A k-block of A as staged: kRows boxes, one per residue r.
  static constexpr int kStagedABytes = kRows * kStagedBoxBytes;
  static constexpr int kStageBytes = kStagedABytes + kBBytes;
  // Each consumer warpgroup's scratch, in its region (kernel.cuh): two sets (k-blocks in
  // turn) of its kSlices 64-column boxes, swizzled.
  static constexpr int kScratchSetBytes = kSlices * kBoxBytes;
  static constexpr int kScratchBytesPerWarpgroup = 2 * kScratchSetBytes;
  static constexpr int kSmemBytes = (STAGES * kStageBytes + 1023) / 1024 * 1024;  // the ring
  static_assert(kStagedABytes % 1024 == 0 && kStagedBoxBytes % 128 == 0 && kBBytes % 128 == 0,
                "stage and box alignment");
  static constexpr bool kPadsKBlocks = true;

  struct Params : Base::Params {
    int32_t a_cols;  // N: the columns of a row of A (the view's rows hold kRows of them)
  };

  struct Shared : Base::Shared {
    uint8_t* scratch;      // consumer warpgroup 0's; warpgroup w's is region_bytes w further
    int32_t region_bytes;
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

  __device__ static Shared carve(uint8_t* smem, uint64_t* bars, uint8_t* regions,
                                 int32_t region_bytes) {
    Shared s;
    s.a = smem;
    s.b = smem + STAGES * kStagedABytes;
    s.full = bars;
    s.empty = bars + STAGES;
    s.scratch = regions;
    s.region_bytes = region_bytes;
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
      for (int r = 0; r < kRows; ++r) {
        const int32_t first = r * p.a_cols + tc.row0;  // element (k0 + r, n0) of the view row
        ptx::tma_load_3d(&p.a, full, a + r * kStagedBoxBytes, first / kRows * kRows,
                         k0 / kRows, ba);
      }
      BLoad::load(&p.b, full, s.b + pipe.stage * kBBytes, BN, BLoad::origin(tc.n_block, BN), k0,
                  bb, 1, 0);
      pipe.advance();
    }
  }

  // Elements [S, S + 8) of the 16 in `lo` and `hi` (16-bit, little-endian words).
  template <int S>
  __device__ static uint4 take(const uint4& lo, const uint4& hi) {
    const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    uint32_t o[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      o[q] = S % 2 == 0 ? w[S / 2 + q] : __funnelshift_r(w[S / 2 + q], w[S / 2 + q + 1], 16);
    return make_uint4(o[0], o[1], o[2], o[3]);
  }
  __device__ static uint4 take(int32_t shift, const uint4& lo, const uint4& hi) {
    switch (shift) {
      case 0: return take<0>(lo, hi);
      case 1: return take<1>(lo, hi);
      case 2: return take<2>(lo, hi);
      case 3: return take<3>(lo, hi);
      case 4: return take<4>(lo, hi);
      case 5: return take<5>(lo, hi);
      case 6: return take<6>(lo, hi);
      default: return take<7>(lo, hi);
    }
  }

  // Consumer warpgroup `part`: its slices of stage `stage` into its scratch set at `scratch`, k row
  // 8 i + r's 64 columns shifted by s_r to the start and 16-byte chunk c stored at c ^ r (128B
  // swizzle). Warp w takes the residues 2w and 2w + 1 (s_r is uniform across the warp: the
  // shift's branch does not diverge), a quarter warp one k row (its 8 chunks: conflict-free
  // 16-byte loads and stores); a chunk reads the two aligned chunks it straddles.
  __device__ static void shift_into_scratch(const Params& p, const Shared& s, int stage,
                                            uint32_t scratch, uint32_t part, uint32_t wg_thread) {
    constexpr int kPasses = kSlices * 4;  // a pass: 4 warps x 4 k rows; 4 passes a 64-row slice
    const int32_t warp = wg_thread / 32, c = wg_thread % 8, quarter = wg_thread / 8 % 4;
    const uint32_t staged = ptx::smem_addr(s.a + stage * kStagedABytes);
    uint4 lo[kPasses], hi[kPasses];
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int32_t slice = pass / 4, r = 2 * warp + pass % 4 / 2, i = 4 * (pass % 2) + quarter;
      const uint32_t src = staged + r * kStagedBoxBytes + i * kStagedRowBytes +
                           ((part * kSlices + slice) * kBoxElems + 8 * c) * 2;
      lo[pass] = ptx::ld_shared_v4(src);
      hi[pass] = ptx::ld_shared_v4(src + 16);
    }
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int32_t slice = pass / 4, r = 2 * warp + pass % 4 / 2, i = 4 * (pass % 2) + quarter;
      const int32_t row = kRows * i + r;
      ptx::st_shared_v4(scratch + slice * kBoxBytes + row * 128 + ((c ^ r) * 16),
                        take((r * p.a_cols) % kRows, lo[pass], hi[pass]));
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(kFirstConsumerBarrier + part, 128);
  }

  // As MainloopSS::mma: A from the warpgroup's scratch, shifted in from each stage into the
  // set the wgmmas of two k-blocks before read (done: each k-block waits for the one before).
  template <class CoordFn, class IssuedFn>
  __device__ static void mma(const Params& p, const Shared& s, Pipe& pipe, const WorkUnit& u,
                             uint32_t part, uint32_t wg_thread, uint32_t cluster_size,
                             float* acc, const CoordFn&, const IssuedFn& issued) {
    uint8_t* const scratch = s.scratch + part * s.region_bytes;
    const uint64_t a_desc = Base::template desc<true>(scratch);
    const uint64_t b_desc = Base::template desc<BLoad::kMnMajor>(s.b);
    // The scratch is the warpgroup's staging too: its previous epilogue's TMA stores (issued by
    // its thread 0) must have read it before the first shift writes it.
    if (wg_thread == 0) ptx::bulk_wait_group_read<0>();
    ptx::named_barrier_sync(kFirstConsumerBarrier + part, 128);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;
    int prev_stage = -1, set = 0;
    for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
      ptx::mbarrier_wait(&s.full[pipe.stage], pipe.phase);
      shift_into_scratch(p, s, pipe.stage, ptx::smem_addr(scratch) + set * kScratchSetBytes, part,
                         wg_thread);
      Base::issue_k_block({ptx::wgmma_desc_advance(a_desc, set * kScratchSetBytes),
                           ptx::wgmma_desc_advance(b_desc, pipe.stage * kBBytes)},
                          acc);
      ptx::wgmma_wait_group<1>();
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
      if (prev_stage >= 0) Base::release(s, prev_stage, cluster_size, wg_thread);
      prev_stage = pipe.stage;
      set ^= 1;
      pipe.advance();
    }
    issued();
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
    if (prev_stage >= 0) Base::release(s, prev_stage, cluster_size, wg_thread);
  }
};

}  // namespace jax_hopper
