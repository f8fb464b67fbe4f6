// Epilogue policy: fp32 accumulators of a 64 x BN strip of a consumer warpgroup -> the
// family's ops in registers (Ops: linear.cuh, gated.cuh) -> + beta * residual -> out dtype ->
// 128B-swizzled shared staging -> TMA store. bias is fp32 (the wrapper casts it); residual is in
// the out dtype. The residual is loaded by TMA into the staging buffer, in the same swizzled
// layout the output takes there: each thread reads its residual values at exactly the bytes it
// then overwrites with its results. The staging buffer is reused pass after pass; the stores of
// the last pass drain while the next tile's mainloop runs (we only wait for their shared-memory
// reads). Owns the staging buffers and one residual-load barrier per consumer warpgroup.
// Output (output.cuh) says where a strip goes; a strip that may store only some of its rows (the
// grouped GEMM's, at a group's end) is copied from the staging buffer to global memory by the
// warpgroup's threads, row by row, instead of by TMA, which clips only at the array's edge; the
// swap-AB kernels' strips (TransposedOutput) are staged transposed (epilogue_store_transposed).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/epilogue/activation.cuh"
#include "cuda/gemm/epilogue/gated.cuh"
#include "cuda/gemm/epilogue/linear.cuh"
#include "cuda/gemm/epilogue/output.cuh"
#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/tile_order.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/tma/tensor_map.h"

namespace jax_hopper {

template <typename T> struct OutType;
template <> struct OutType<__nv_bfloat16> {
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  }
  __device__ static float2 load2(const uint8_t* src) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
  }
  __device__ static void store1(uint8_t* dst, float a) {
    *reinterpret_cast<__nv_bfloat16*>(dst) = __float2bfloat16_rn(a);
  }
  __device__ static float load1(const uint8_t* src) {
    return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(src));
  }
};
template <> struct OutType<__half> {
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  }
  __device__ static float2 load2(const uint8_t* src) {
    return __half22float2(*reinterpret_cast<const __half2*>(src));
  }
  __device__ static void store1(uint8_t* dst, float a) {
    *reinterpret_cast<__half*>(dst) = __float2half_rn(a);
  }
  __device__ static float load1(const uint8_t* src) {
    return __half2float(*reinterpret_cast<const __half*>(src));
  }
};
template <> struct OutType<float> {
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  }
  __device__ static float2 load2(const uint8_t* src) {
    return *reinterpret_cast<const float2*>(src);
  }
  __device__ static void store1(uint8_t* dst, float a) { *reinterpret_cast<float*>(dst) = a; }
  __device__ static float load1(const uint8_t* src) { return *reinterpret_cast<const float*>(src); }
};

// Staging: two boxes of 64 rows x 128 bytes (16 KB) per warpgroup.
constexpr int kEpiBoxBytes = 64 * 128;
constexpr int kEpiBoxesPerPass = 2;
constexpr int kEpiBytesPerWarpgroup = kEpiBoxBytes * kEpiBoxesPerPass;
// A transposed strip (epilogue_store_transposed) is staged up to kTransposedPassRows of its BN
// output rows at a time, of 64 columns at most 4 bytes each (two 128-byte boxes): the most
// rows, whole 1024-byte swizzle atoms (8 rows), that divide BN (one pass for the decode tiles'
// BN <= 64, two of 48 for 96, three of 64 for 192).
constexpr int kTransposedPassRows = 64;
constexpr int transposed_rows(int bn, int rows = kTransposedPassRows) {
  return bn <= rows ? bn : bn % rows == 0 ? rows : transposed_rows(bn, rows - 8);
}
template <int BN>
constexpr int kTransposedRows = transposed_rows(BN);
template <int BN>
constexpr int kTransposedStripBytes = 2 * kTransposedRows<BN> * 128;

// Boxes per staging pass for a strip of `boxes` boxes: the most that divide it and fit (a
// 192-column strip of 16-bit outputs is three boxes: one per pass).
constexpr int epi_boxes_per_pass(int boxes, int fit = kEpiBoxesPerPass) {
  return boxes % fit == 0 ? fit : epi_boxes_per_pass(boxes, fit - 1);
}

// Where one consumer warpgroup's strip goes: output rows row0.., columns col0.., batch entry
// `batch`; the residual's batch entry (0 when one residual is broadcast over the batch); the
// strip's first `rows` rows (1..64) are stored.
struct EpilogueTile {
  int32_t row0, col0, batch, residual_batch, rows;
};

// The output as a plain row-major array, for strips copied without TMA: its first byte, the
// bytes between rows, and its columns.
struct GlobalOut {
  uint8_t* data;
  int64_t row_bytes;
  int32_t cols;
};

// One consumer warpgroup's staging buffer, its residual-load barrier and that barrier's phase,
// and its named barrier.
struct EpilogueSync {
  uint8_t* staging;
  uint64_t* residual_loaded;
  uint32_t* residual_phase;
  uint32_t wg_thread, barrier_id;
};

// Rows [0, t.rows) of a staged pass (kBoxes boxes of 64 rows x 128 swizzled bytes, its first
// column col0) to global memory: 8 threads write one row's 128 bytes of a box (16 bytes each),
// columns past the output's edge are skipped (the output's row pitch is whole 16-byte chunks).
template <int kBoxes, int kOutBytes>
__device__ __forceinline__ void copy_rows(const uint8_t* staging, const GlobalOut& out,
                                          const EpilogueTile& t, int32_t col0,
                                          uint32_t wg_thread) {
  constexpr int kChunkCols = 16 / kOutBytes;
  // Not unrolled: the later passes' accumulators are still live here.
#pragma unroll 1
  for (int i = wg_thread; i < kBoxes * 64 * 8; i += 128) {
    const int32_t box = i / 512, r = (i % 512) / 8, chunk = i % 8;
    const int32_t col = col0 + box * (128 / kOutBytes) + chunk * kChunkCols;
    if (r >= t.rows || col >= out.cols) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(staging + box * kEpiBoxBytes + r * 128 +
                                                    ((chunk ^ (r & 7)) << 4));
    *reinterpret_cast<uint4*>(out.data + int64_t(t.row0 + r) * out.row_bytes +
                              int64_t(col) * kOutBytes) = v;
  }
}

// Opens a staging pass of kBoxes boxes (kBoxBytes each; box b holds columns col0 + b * kBoxCols
// on): once the previous pass's (or tile's) TMA stores have read the staging buffer, the
// residual's boxes are TMA-loaded where the results will go, the warpgroup meets, and waits for
// them.
template <bool RESIDUAL, int kBoxes, int kBoxBytes, int kBoxCols>
__device__ __forceinline__ void begin_staging(const CUtensorMap* tma_r, const EpilogueTile& t,
                                              const EpilogueSync& s, int32_t col0) {
  if (s.wg_thread == 0) {
    ptx::bulk_wait_group_read<0>();
    if constexpr (RESIDUAL) {
      ptx::mbarrier_arrive_expect_tx(s.residual_loaded, kBoxes * kBoxBytes);
#pragma unroll
      for (int b = 0; b < kBoxes; ++b)
        ptx::tma_load_3d(tma_r, s.residual_loaded, s.staging + b * kBoxBytes,
                         col0 + b * kBoxCols, t.row0, t.residual_batch);
    }
  }
  ptx::named_barrier_sync(s.barrier_id, 128);
  if constexpr (RESIDUAL) {
    ptx::mbarrier_wait(s.residual_loaded, *s.residual_phase);
    *s.residual_phase ^= 1;
  }
}

// Closes a staging pass: the warpgroup's shared-memory writes are fenced against the TMA's
// reads, then one thread stores the kBoxes boxes as begin_staging laid them out.
template <int kBoxes, int kBoxBytes, int kBoxCols>
__device__ __forceinline__ void store_staging(const CUtensorMap* tma_d, const EpilogueTile& t,
                                              const EpilogueSync& s, int32_t col0) {
  ptx::fence_proxy_async_smem();
  ptx::named_barrier_sync(s.barrier_id, 128);
  if (s.wg_thread == 0) {
#pragma unroll
    for (int b = 0; b < kBoxes; ++b)
      ptx::tma_store_3d(tma_d, s.staging + b * kBoxBytes, col0 + b * kBoxCols, t.row0, t.batch);
    ptx::bulk_commit_group();
  }
}

template <int BN, typename TOut, bool RESIDUAL, bool CLIP_ROWS>
__device__ __forceinline__ void epilogue_store(const float* acc, float beta,
                                               const CUtensorMap* tma_d, const CUtensorMap* tma_r,
                                               const EpilogueTile& t, const EpilogueSync& s,
                                               const GlobalOut& out) {
  uint8_t* staging = ptx::in_shared_window(s.staging);
  const uint32_t wg_thread = s.wg_thread;
  constexpr int kOutBytes = sizeof(TOut);
  constexpr int kBoxCols = 128 / kOutBytes;          // columns per 128-byte swizzle row
  static_assert(BN % kBoxCols == 0, "a strip is whole 128-byte boxes wide");
  constexpr int kBoxes = epi_boxes_per_pass(BN / kBoxCols);
  constexpr int kColsPerPass = kBoxCols * kBoxes;
  static_assert(BN % kColsPerPass == 0, "BN must cover whole staging passes");

  constexpr int kJPerPass = kColsPerPass / 8;        // 8-column fragment groups per pass
  const uint32_t warp = wg_thread / 32, lane = wg_thread % 32;

  // One flat, fully unrolled loop over the fragment's 8-column groups j (a nested pass/j loop
  // was not unrolled by nvcc and put the accumulators in local memory).
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int pass = j / kJPerPass;
    if (j % kJPerPass == 0)
      begin_staging<RESIDUAL, kBoxes, kEpiBoxBytes, kBoxCols>(tma_r, t, s,
                                                              t.col0 + pass * kColsPerPass);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // wgmma m64nN accumulator fragment: rows lane/4 (+8) of the warp's 16, columns
      // 8j + 2*(lane%4) + {0,1}.
      const int32_t r = warp * 16 + lane / 4 + 8 * half;
      const int32_t c = j * 8 + 2 * (lane % 4);
      // 128B swizzle (Swizzle<3,4,3> on byte offsets): the 16-byte chunk index within a
      // 128-byte row is XORed with the row index mod 8 -> the 8 rows a warp writes hit
      // 8 different bank groups. jax_hopper/layout/swizzle.py holds the same arithmetic.
      const int32_t box = (c % kColsPerPass) / kBoxCols;
      const int32_t byte = (c % kBoxCols) * kOutBytes;
      const int32_t off =
          box * kEpiBoxBytes + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
      float x0 = acc[4 * j + 2 * half], x1 = acc[4 * j + 2 * half + 1];
      if constexpr (RESIDUAL) {
        const float2 r2 = OutType<TOut>::load2(staging + off);
        x0 += beta * r2.x;
        x1 += beta * r2.y;
      }
      OutType<TOut>::store2(staging + off, x0, x1);
    }
    if (j % kJPerPass == kJPerPass - 1) {
      if (CLIP_ROWS && t.rows < 64) {
        ptx::named_barrier_sync(s.barrier_id, 128);
        copy_rows<kBoxes, kOutBytes>(staging, out, t, t.col0 + pass * kColsPerPass, wg_thread);
        // The next pass's residual load (TMA) overwrites what these threads just read.
        ptx::fence_proxy_async_smem();
        ptx::named_barrier_sync(s.barrier_id, 128);
      } else {
        store_staging<kBoxes, kEpiBoxBytes, kBoxCols>(tma_d, t, s, t.col0 + pass * kColsPerPass);
      }
    }
  }
}

// The swap-AB kernels' store (TransposedOutput), one pass: the strip's 64 rows are output
// columns t.col0.., its BN (<= kTransposedPassRows) columns output rows t.row0... Staged as
// output rows of one 128-byte swizzle row each (kBoxCols columns: one box of BN rows for 16-bit
// outputs, two for float32), in the layout the TMA store reads; the residual is loaded into the
// same bytes first, as in epilogue_store. BN <= 64 rows of at most 256 bytes fit the
// warpgroup's staging; a wider strip is stored pass by pass (TmaStoreEpilogue::store_transposed).
// Each thread writes single elements: a warp's 8 fragment rows are 8 adjacent columns of one
// output row (one 16-byte chunk), its 4 column pairs 4 output rows, whose chunks the swizzle
// puts in different banks.
template <int BN, typename TOut, bool RESIDUAL>
__device__ __forceinline__ void epilogue_store_transposed(const float* acc, float beta,
                                                          const CUtensorMap* tma_d,
                                                          const CUtensorMap* tma_r,
                                                          const EpilogueTile& t,
                                                          const EpilogueSync& s) {
  uint8_t* staging = ptx::in_shared_window(s.staging);
  const uint32_t wg_thread = s.wg_thread;
  constexpr int kOutBytes = sizeof(TOut);
  constexpr int kBoxCols = 128 / kOutBytes;  // output columns per 128-byte swizzle row
  constexpr int kBoxes = 64 / kBoxCols;
  constexpr int kBoxBytes = BN * 128;        // BN output rows
  static_assert(BN <= kTransposedPassRows && kBoxes * kBoxBytes <= kTransposedStripBytes<BN>,
                "the pass fits its staging");
  static_assert(kBoxBytes % 1024 == 0, "boxes stay aligned to the 128B swizzle's 1024 bytes");
  begin_staging<RESIDUAL, kBoxes, kBoxBytes, kBoxCols>(tma_r, t, s, t.col0);
  const int32_t warp = wg_thread / 32, lane = wg_thread % 32;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    // Register i = 4j + 2h + e: strip row 16 warp + lane/4 + 8h (an output column), strip
    // column 8j + 2 (lane%4) + e (an output row). The swizzle as in epilogue_store.
    const int32_t col = warp * 16 + lane / 4 + 8 * ((i / 2) % 2);
    const int32_t row = (i / 4) * 8 + 2 * (lane % 4) + i % 2;
    const int32_t byte = (col % kBoxCols) * kOutBytes;
    const int32_t off = (col / kBoxCols) * kBoxBytes + row * 128 +
                        (((byte >> 4) ^ (row & 7)) << 4) + (byte & 15);
    float x = acc[i];
    if constexpr (RESIDUAL) x += beta * OutType<TOut>::load1(staging + off);
    OutType<TOut>::store1(staging + off, x);
  }
  store_staging<kBoxes, kBoxBytes, kBoxCols>(tma_d, t, s, t.col0);
}

template <int BN_, typename Ops, typename Output = DenseOutput>
struct TmaStoreEpilogue {
  static constexpr int BN = BN_;                                 // product columns of a tile
  static constexpr int kOutCols = Ops::template kOutCols<BN>;    // output columns of a tile
  // Staging, each consumer warpgroup its own: a transposed pass (at most 64 rows of 256 bytes)
  // needs no more than the row path's passes.
  static constexpr int kSmemBytesPerWarpgroup =
      Output::kTransposed ? kTransposedStripBytes<BN> : kEpiBytesPerWarpgroup;
  static_assert(kSmemBytesPerWarpgroup <= kEpiBytesPerWarpgroup &&
                    kSmemBytesPerWarpgroup % 1024 == 0,
                "whole 1024-byte swizzle atoms");
  static constexpr int kBarriers = 2;                            // residual loaded, per warpgroup

  struct Params {
    CUtensorMap d, r;  // r: the residual's map, or a copy of d when there is none (never read)
    GlobalOut out;     // the output itself, for strips stored without TMA
    const float* bias;
    float alpha, beta;
    Activation activation;
    DType out_dtype;
    int32_t n;  // output columns (transposed: the tile rows)
    int32_t has_residual, residual_batched;
  };

  struct Shared {
    uint8_t* staging;        // consumer warpgroup 0's; warpgroup w's is region_bytes w further
    int32_t region_bytes;    // at least kSmemBytesPerWarpgroup (the kernel's consumer regions)
    uint64_t* residual_loaded;
  };

  // Per consumer warpgroup: the parity of its next residual load.
  struct State {
    uint32_t residual_phase = 0;
  };

  static std::string host_params(const GemmArgs& g, Params* p) {
    // The output box is 64 rows (one consumer warpgroup's strip; transposed, a pass of the
    // tile's BN columns) by one 128-byte swizzle row; the residual is read box for box like the
    // output it is added to.
    const uint32_t cols = static_cast<uint32_t>(128 / dtype_bytes(g.out_dtype));
    const uint32_t rows = Output::kTransposed ? kTransposedRows<BN> : 64;
    std::string e = map_out(g.out, g.out_dtype, cols, rows, &p->d);
    p->has_residual = g.residual.data != nullptr;
    if (e.empty()) {
      if (p->has_residual)
        e = map_out(g.residual, g.out_dtype, cols, rows, &p->r);
      else
        p->r = p->d;
    }
    p->out = GlobalOut{static_cast<uint8_t*>(g.out.data), g.out.cols * dtype_bytes(g.out_dtype),
                       g.n};
    p->bias = g.bias;
    p->alpha = g.alpha;
    p->beta = g.beta;
    p->activation = g.activation;
    p->out_dtype = g.out_dtype;
    p->n = Output::kTransposed ? g.m : g.n;
    p->residual_batched = p->has_residual && g.residual.batch == g.batch && g.batch > 1;
    return e;
  }

  __device__ static Shared carve(uint8_t* regions, int32_t region_bytes, uint64_t* bars) {
    return Shared{regions, region_bytes, bars};
  }

  __device__ static void init(const Params& p, const Shared& s) {
    ptx::tma_prefetch_descriptor(&p.d);
    if (p.has_residual) ptx::tma_prefetch_descriptor(&p.r);
    for (int wg = 0; wg < 2; ++wg) ptx::mbarrier_init(&s.residual_loaded[wg], 1);
  }

  // A 64-row strip of tile `tc` (output rows row0..) from consumer warpgroup `wg`, through its
  // staging buffer and residual barrier; `barrier_id`: the warpgroup's named barrier.
  __device__ static void store(float* acc, const Params& p, const Shared& s, State& st,
                               const TileCoord& tc, int32_t row0, uint32_t wg,
                               uint32_t wg_thread, uint32_t barrier_id) {
    if constexpr (Output::kTransposed)
      store_transposed(acc, p, s, st, tc, row0, wg, wg_thread, barrier_id);
    else
      store_rows(acc, p, s, st, tc, row0, wg, wg_thread, barrier_id);
  }

  // Before the CTA exits: its last TMA stores have landed.
  // NOTES: waiting for the reads of the staging buffer only (wait_group.read; the grid's end
  // makes the writes visible) let CTAs leave 0.4-0.8 us earlier (a globaltimer probe) but did
  // not shorten any kernel under ncu: the grid still ends when the writes land (H100,
  // 2026-11-25, ncu_h100_20261125_cold_code.txt).
  __device__ static void drain(uint32_t wg_thread) {
    if (wg_thread == 0) ptx::bulk_wait_group<0>();
  }

 private:
  __device__ static void store_rows(float* acc, const Params& p, const Shared& s, State& st,
                                    const TileCoord& tc, int32_t row0, uint32_t wg,
                                    uint32_t wg_thread, uint32_t barrier_id) {
    // The strip's rows to store: all 64 (TMA clips at M), or up to the end of the tile's rows.
    const int32_t rows = Output::kClipRows ? min(64, tc.rows - (row0 - tc.row0)) : 64;
    if (Output::kClipRows && rows <= 0) return;
    const int32_t col0 = tc.n_block * kOutCols;
    Ops::template apply<BN, false>(acc, p, Output::template bias<Ops>(p, tc), col0, wg_thread);
    const EpilogueTile t{row0, col0, Output::batch(tc), Output::residual_batch(p, tc), rows};
    const EpilogueSync sync{s.staging + wg * s.region_bytes, &s.residual_loaded[wg],
                            &st.residual_phase, wg_thread, barrier_id};
    // The out dtype and the residual are chosen at run time.
    const bool res = p.has_residual;
    constexpr bool kClip = Output::kClipRows;
    switch (p.out_dtype) {
      case DType::kBF16:
        res ? epilogue_store<kOutCols, __nv_bfloat16, true, kClip>(acc, p.beta, &p.d, &p.r, t, sync, p.out)
            : epilogue_store<kOutCols, __nv_bfloat16, false, kClip>(acc, p.beta, &p.d, &p.r, t, sync, p.out);
        break;
      case DType::kF16:
        res ? epilogue_store<kOutCols, __half, true, kClip>(acc, p.beta, &p.d, &p.r, t, sync, p.out)
            : epilogue_store<kOutCols, __half, false, kClip>(acc, p.beta, &p.d, &p.r, t, sync, p.out);
        break;
      case DType::kF32:
        res ? epilogue_store<kOutCols, float, true, kClip>(acc, p.beta, &p.d, &p.r, t, sync, p.out)
            : epilogue_store<kOutCols, float, false, kClip>(acc, p.beta, &p.d, &p.r, t, sync, p.out);
        break;
      default:  // fp8 is an input type only; run_gemm refuses it as the out dtype
        break;
    }
  }

  // TransposedOutput: the strip's rows row0.. are output columns, the tile's columns
  // (n_block) output rows, stored kTransposedPassRows at a time; the bias goes by strip row.
  __device__ static void store_transposed(float* acc, const Params& p, const Shared& s, State& st,
                                          const TileCoord& tc, int32_t row0, uint32_t wg,
                                          uint32_t wg_thread, uint32_t barrier_id) {
    constexpr int kRows = kTransposedRows<BN>;
    static_assert(BN % kRows == 0 && kRows % 8 == 0, "whole passes of swizzle atoms");
    // A pass's strip columns 8 j.. are its accumulators 4 j.. (wgmma's fragment order).
    constexpr int kPassRegs = kRows / 2;
    Ops::template apply<BN, true>(acc, p, Output::template bias<Ops>(p, tc), row0, wg_thread);
    const EpilogueSync sync{s.staging + wg * s.region_bytes, &s.residual_loaded[wg],
                            &st.residual_phase, wg_thread, barrier_id};
    const bool res = p.has_residual;
#pragma unroll
    for (int pass = 0; pass < BN / kRows; ++pass) {
      const float* a = acc + pass * kPassRegs;
      const EpilogueTile t{tc.n_block * BN + pass * kRows, row0, Output::batch(tc),
                           Output::residual_batch(p, tc), kRows};
      switch (p.out_dtype) {
        case DType::kBF16:
          res ? epilogue_store_transposed<kRows, __nv_bfloat16, true>(a, p.beta, &p.d, &p.r, t, sync)
              : epilogue_store_transposed<kRows, __nv_bfloat16, false>(a, p.beta, &p.d, &p.r, t, sync);
          break;
        case DType::kF16:
          res ? epilogue_store_transposed<kRows, __half, true>(a, p.beta, &p.d, &p.r, t, sync)
              : epilogue_store_transposed<kRows, __half, false>(a, p.beta, &p.d, &p.r, t, sync);
          break;
        case DType::kF32:
          res ? epilogue_store_transposed<kRows, float, true>(a, p.beta, &p.d, &p.r, t, sync)
              : epilogue_store_transposed<kRows, float, false>(a, p.beta, &p.d, &p.r, t, sync);
          break;
        default:
          break;
      }
    }
  }

  static std::string map_out(const Array3& x, DType t, uint32_t cols, uint32_t rows,
                             CUtensorMap* out) {
    const uint64_t eb = dtype_bytes(t);
    CUtensorMapDataType bits;
    tma_bits_type(eb, &bits);
    return encode_sw128_3d(bits, x.data, x.cols, x.rows, x.batch, x.cols * eb,
                           x.rows * x.cols * eb, cols, rows, out);
  }
};

}  // namespace jax_hopper
