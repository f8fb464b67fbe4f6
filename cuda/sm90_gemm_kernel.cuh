// The Hopper GEMM: persistent, warp-specialised, TMA-fed, wgmma-computed, optional 2-CTA
// cluster with TMA multicast of the shared operand.
//
//   warpgroup 0 (producer, one thread issues): TMA loads of A and B tiles into a STAGES-deep
//       shared-memory ring; full[s] counts the bytes in, empty[s] counts consumers out.
//   warpgroups 1, 2 (consumers): rows 0-63 and 64-127 of the 128 x BN tile; wgmma m64nBNk16
//       with both operands in 128B-swizzled shared memory, fp32 accumulators in registers,
//       then the epilogue (cuda/sm90_gemm_epilogue.cuh).
// hopper_glu's instances (GATED): a tile's B columns are gate and up columns side by side
// (load_operand) and the epilogue writes act(gate) * up, half the tile's width. A separate
// instance, not a run-time branch: one kernel holding both epilogues spilled accumulators, and
// a run-time column count in the store cost the plain GEMM ~8% (H100, 2026-11-22).
// Both walk the same work list (cuda/stream_k.h): whole tiles, then a stream-K range whose
// split tiles meet through a global fp32 workspace (cuda/sm90_gemm_fixup.cuh).
//
// Operand tiles are stored as 64-element-wide boxes of 8 KB (64 x 128 bytes, 128B swizzle):
//   K-major  (A as (M,K), B as (N,K)):  box j holds rows 64j..64j+63 of the tile, all 64 k;
//                                       the boxes stack into one K-major SW128 layout.
//   MN-major (A as (K,M), B as (K,N)):  box j holds columns 64j..64j+63, all 64 k rows;
//                                       wgmma reads it with the transpose bit set.
// jax_hopper/layout/ derives the same descriptor numbers; tests/test_layout_smem.py checks the
// model against the constants used below (LBO 16 / 8192, SBO 1024, k-steps 32 / 2048 bytes).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>


#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90_gemm_epilogue.cuh"
#include "cuda/sm90_gemm_fixup.cuh"
#include "cuda/sm90_gemm_params.h"
#include "cuda/stream_k.h"
#include "cuda/tile_scheduler.cuh"
#include "cuda/wgmma_desc.cuh"

namespace jax_hopper {

constexpr int kGemmThreads = 384;       // producer warpgroup + two consumer warpgroups
constexpr int kBoxElems = 64;           // 64 x 16-bit = 128 bytes: one 128B swizzle row
constexpr int kBoxBytes = 64 * 128;     // one 64 x 64 box of 16-bit elements
constexpr int kProducerRegs = 56;       // 128 x (56 + 2 x 224) registers fit the 64K file
constexpr int kConsumerRegs = 224;

template <int BM, int BN, int BK, int STAGES>
struct GemmSmem {
  static_assert(BM == 128, "two consumer warpgroups of 64 rows each");
  static_assert(BK == kBoxElems, "one 128B swizzle row of 16-bit elements per k-block");
  static constexpr int kABytes = BM * BK * 2;
  static constexpr int kBBytes = BN * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kEpiOffset = STAGES * kStageBytes;
  static constexpr int kBarOffset = kEpiOffset + 2 * kEpiBytesPerWarpgroup;
  // full[STAGES], empty[STAGES], then one residual-load barrier per consumer warpgroup;
  // + 1024 so the base can be rounded up to the 1024-byte alignment the 128B swizzle needs.
  static constexpr int kTotal = kBarOffset + (2 * STAGES + 2) * 8 + 1024;
};

// Loads one operand tile (`rows` x 64 k) for k-block k0. With a cluster sharing this operand,
// CTA `rank` loads 1/share of it and multicasts it to the whole cluster.
//   K-major:  the tensor map's box is (64 k, rows/share): one TMA per CTA, rows stacked.
//   MN-major: the box is (64 mn, 64 k): rows/64 boxes side by side, every share-th per CTA.
// `gated` (MN-major B of hopper_glu only; the handler rejects any other): the map is the
// (K, 2, n) weight as (n, K, half), the first rows/2 of the tile are gate columns mn0.. (half 0)
// and the next rows/2 the up columns with the same indices (half 1), so one tile holds both
// factors of its rows/2 output columns.
template <bool MN_MAJOR>
__device__ __forceinline__ void load_operand(const CUtensorMap* map, uint64_t* bar, uint8_t* dst,
                                             int rows, int32_t mn0, int32_t k0, int32_t batch,
                                             uint32_t share, uint32_t rank, bool gated) {
  const uint16_t mask = static_cast<uint16_t>((1u << share) - 1);
  const uint32_t part_id = share > 1 ? rank : 0;  // a cluster along the other dim shares nothing
  if constexpr (!MN_MAJOR) {
    const int part = rows / share;
    uint8_t* d = dst + part_id * part * 128;
    if (share > 1)
      ptx::tma_load_3d_multicast(map, bar, d, k0, mn0 + part_id * part, batch, mask);
    else
      ptx::tma_load_3d(map, bar, d, k0, mn0, batch);
  } else {
    const int boxes = rows / kBoxElems, half_boxes = gated ? boxes / 2 : boxes;
    for (int j = part_id; j < boxes; j += share) {
      const int32_t mn = mn0 + (j % half_boxes) * kBoxElems;
      const int32_t outer = gated ? j / half_boxes : batch;
      if (share > 1)
        ptx::tma_load_3d_multicast(map, bar, dst + j * kBoxBytes, mn, k0, outer, mask);
      else
        ptx::tma_load_3d(map, bar, dst + j * kBoxBytes, mn, k0, outer);
    }
  }
}

// wgmma descriptor of a 64-row (A) or BN-row (B) slice at k-block offset kk*16.
//   K-major SW128:  SBO = 8 rows x 128 B = 1024, LBO unused (1), +32 B per k16 step.
//   MN-major SW128: LBO = 8192 (next 64-column box), SBO = 1024 (next 8 k rows),
//                   +16 rows x 128 B = 2048 B per k16 step.
template <bool MN_MAJOR>
__device__ __forceinline__ uint64_t operand_desc(const uint8_t* base, int kk) {
  const uint32_t addr = ptx::smem_addr(base) + (MN_MAJOR ? kk * 2048 : kk * 32);
  return make_wgmma_desc(addr, MN_MAJOR ? kBoxBytes : 16, 1024, WgmmaSwizzle::k128B);
}

template <DType TIN, int BM, int BN, int BK, int STAGES, bool A_MN, bool B_MN, bool GATED>
__global__ void __launch_bounds__(kGemmThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ GemmParams p, const __grid_constant__ CUtensorMap tma_a,
                     const __grid_constant__ CUtensorMap tma_b,
                     const __grid_constant__ CUtensorMap tma_d,
                     const __grid_constant__ CUtensorMap tma_r) {
  using Smem = GemmSmem<BM, BN, BK, STAGES>;
  using Mma = ptx::WgmmaSS<BN, TIN, A_MN ? 1 : 0, B_MN ? 1 : 0>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + STAGES * Smem::kABytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Smem::kBarOffset);
  uint64_t* empty = full + STAGES;
  uint64_t* residual_loaded = empty + STAGES;  // [consumer warpgroup]

  const uint32_t cluster_size = p.cluster_m * p.cluster_n;
  const uint32_t rank = cluster_size > 1 ? ptx::cluster_ctarank() : 0;
  const uint32_t warpgroup = threadIdx.x / 128;
  const int32_t cluster_id = blockIdx.x / cluster_size;
  constexpr int32_t out_tile_n = GATED ? BN / 2 : BN;  // output columns of one tile

  if (threadIdx.x == 0) {
    ptx::tma_prefetch_descriptor(&tma_a);
    ptx::tma_prefetch_descriptor(&tma_b);
    ptx::tma_prefetch_descriptor(&tma_d);
    if (p.residual != nullptr) ptx::tma_prefetch_descriptor(&tma_r);
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      // Every consumer warpgroup of every CTA the stage is multicast into must release it.
      ptx::mbarrier_init(&empty[s], 2 * cluster_size);
    }
    for (int wg = 0; wg < 2; ++wg) ptx::mbarrier_init(&residual_loaded[wg], 1);
    ptx::fence_mbarrier_init();
  }
  if (cluster_size > 1) ptx::cluster_sync(); else __syncthreads();

  if (warpgroup == 0) {
    // ---------------------------------------------------------------- producer
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      // A is shared by the CTAs of a cluster along N, B by those of a cluster along M.
      const uint32_t share_a = p.cluster_n, share_b = p.cluster_m;
      int stage = 0;
      uint32_t phase = 0;
      WorkList work(p.plan, cluster_id);
      for (WorkUnit u; work.next(p.plan, &u);) {
        const TileCoord tc = tile_coord<BM, BN>(p, u.tile, rank);
        const int32_t ba = p.a_batched ? tc.batch : 0, bb = p.b_batched ? tc.batch : 0;
        for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
          // A fresh barrier passes a wait on parity 1, so the first lap does not block.
          ptx::mbarrier_wait(&empty[stage], phase ^ 1);
          ptx::mbarrier_arrive_expect_tx(&full[stage], Smem::kStageBytes);
          load_operand<A_MN>(&tma_a, &full[stage], smem_a + stage * Smem::kABytes, BM,
                             tc.m_block * BM, kb * BK, ba, share_a, rank, false);
          load_operand<B_MN>(&tma_b, &full[stage], smem_b + stage * Smem::kBBytes, BN,
                             tc.n_block * out_tile_n, kb * BK, bb, share_b, rank, GATED);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    // ---------------------------------------------------------------- consumers
    ptx::setmaxnreg_inc<kConsumerRegs>();
    const uint32_t wg = warpgroup - 1;      // which 64-row half of the tile
    const uint32_t wg_thread = threadIdx.x % 128;
    uint8_t* staging = smem + Smem::kEpiOffset + wg * kEpiBytesPerWarpgroup;
    float acc[Mma::kRegs];
    uint32_t residual_phase = 0;  // parity of this warpgroup's next residual load
    int stage = 0;
    uint32_t phase = 0;

    auto release = [&](int s) {
      if (wg_thread != 0) return;
      if (cluster_size == 1) {
        ptx::mbarrier_arrive(&empty[s]);
      } else {
        for (uint32_t c = 0; c < cluster_size; ++c) ptx::mbarrier_arrive_cluster(&empty[s], c);
      }
    };

    WorkList work(p.plan, cluster_id);
    for (WorkUnit u; work.next(p.plan, &u);) {
      const TileCoord tc = tile_coord<BM, BN>(p, u.tile, rank);
#pragma unroll
      for (int i = 0; i < Mma::kRegs; ++i) acc[i] = 0.0f;
      int prev_stage = -1;
      for (int32_t kb = u.k_begin; kb < u.k_end; ++kb) {
        ptx::mbarrier_wait(&full[stage], phase);
        const uint8_t* a_tile = smem_a + stage * Smem::kABytes + wg * kBoxBytes;
        const uint8_t* b_tile = smem_b + stage * Smem::kBBytes;
#pragma unroll
        for (int i = 0; i < Mma::kRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          Mma::mma(operand_desc<A_MN>(a_tile, kk), operand_desc<B_MN>(b_tile, kk), acc, 1);
        ptx::wgmma_commit_group();
        // NOTES: keep this k-block's wgmmas in flight while waiting for the previous one, so the
        // tensor cores never drain between k-blocks; its stage is free once that wait returns.
        // Waiting for the current block instead (wait_group 0) lets the producer run one stage
        // further ahead but measured 494 vs 574 TFLOP/s at 4096^3 and within noise at 8192^3
        // (H100, 2-CTA clusters, 2026-11-22).
        ptx::wgmma_wait_group<1>();
#pragma unroll
        for (int i = 0; i < Mma::kRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
        if (prev_stage >= 0) release(prev_stage);
        prev_stage = stage;
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      ptx::wgmma_wait_group<0>();
#pragma unroll
      for (int i = 0; i < Mma::kRegs; ++i) ptx::wgmma_fence_operand(acc[i]);
      if (prev_stage >= 0) release(prev_stage);

      if (publishes_partial(u)) {
        publish_partial<Mma::kRegs>(acc, p, blockIdx.x, wg, wg_thread, 1 + wg);
        continue;
      }
      if (collects_partials(p.plan, u))
        add_partials<Mma::kRegs>(acc, p, cluster_id + 1, partials_end(p.plan, cluster_id, u),
                                 cluster_size, rank, wg, wg_thread, 1 + wg);
      const int32_t row0 = tc.m_block * BM + wg * 64, col0 = tc.n_block * out_tile_n;
      const EpilogueTile tile{row0, col0, tc.batch, p.residual_batched ? tc.batch : 0};
      const EpilogueSync sync{staging, &residual_loaded[wg], &residual_phase, wg_thread, 1 + wg};
      if constexpr (GATED) {
        apply_gated_epilogue_ops<BN>(acc, p, col0, wg_thread);
        store_strip<BN / 2>(acc, p, &tma_d, &tma_r, tile, sync);
      } else {
        apply_epilogue_ops<BN>(acc, p, col0, wg_thread);
        store_strip<BN>(acc, p, &tma_d, &tma_r, tile, sync);
      }
    }
    if (wg_thread == 0) ptx::bulk_wait_group<0>();
  }
  // No CTA may exit while a peer can still arrive on its barriers or multicast into it.
  if (cluster_size > 1) ptx::cluster_sync(); else __syncthreads();
}

}  // namespace jax_hopper
