// Where the epilogue's strip of a tile goes (a policy of TmaStoreEpilogue, store.cuh): which
// batch entry of the output and of the residual, which bias, and whether a strip can hold rows
// it must not store.
//   DenseOutput:   (batch, M, N) output, the tile's batch entry; bias (N,) shared by the batch;
//                  every row of a strip inside M is the tile's (TMA clips at M).
//   TransposedOutput: hopper_matmul computed swapped (out^T = b^T a^T, the swap-AB kernels):
//                  the tile's rows are output columns and its columns output rows, so a strip
//                  is stored transposed (store.cuh), and the (N,) bias is per tile row.
//   GroupedOutput: the grouped GEMM's (1, M, N) output (cuda/gemm/scheduler/grouped.cuh): a
//                  tile starts at its group's first row and may reach into the next group's,
//                  so a strip stores only its first `rows`; the bias is per group
//                  ((G, Ops::kBiasRows, N)); the rows past every group (batch -1) get none.
#pragma once

#include <cstdint>

#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

struct DenseOutput {
  static constexpr bool kClipRows = false;
  static constexpr bool kTransposed = false;

  __device__ static int32_t batch(const TileCoord& tc) { return tc.batch; }

  template <class P>
  __device__ static int32_t residual_batch(const P& p, const TileCoord& tc) {
    return p.residual_batched ? tc.batch : 0;
  }

  template <class Ops, class P>
  __device__ static const float* bias(const P& p, const TileCoord&) {
    return p.bias;
  }
};

struct TransposedOutput : DenseOutput {
  static constexpr bool kTransposed = true;
};

struct GroupedOutput {
  static constexpr bool kClipRows = true;
  static constexpr bool kTransposed = false;

  __device__ static int32_t batch(const TileCoord&) { return 0; }

  template <class P>
  __device__ static int32_t residual_batch(const P&, const TileCoord&) {
    return 0;
  }

  template <class Ops, class P>
  __device__ static const float* bias(const P& p, const TileCoord& tc) {
    return p.bias != nullptr && tc.batch >= 0
               ? p.bias + int64_t(tc.batch) * Ops::kBiasRows * p.n
               : nullptr;
  }
};

}  // namespace jax_hopper
