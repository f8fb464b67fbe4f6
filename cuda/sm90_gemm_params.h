// Plain parameter struct shared by the GEMM FFI handler (ffi/) and the kernel (cuda/).
#pragma once

#include <cstdint>

#include "cuda/dtype.h"
#include "cuda/stream_k.h"

namespace jax_hopper {

// Epilogue activation; the numbering is mirrored by jax_hopper/gemm/epilogue.py.
enum class Activation : int { kNone = 0, kRelu = 1, kGeluTanh = 2, kGeluErf = 3, kSilu = 4 };

struct GemmParams {
  int32_t m, n, k, batch;
  // 0 when the operand has no batch dimension and is shared by every batch entry.
  int32_t a_batched, b_batched;
  DType out_dtype;
  // out = act(alpha * A.B + bias) + beta * residual, computed in fp32, rounded once.
  float alpha, beta;
  Activation activation;
  // Gated linear unit (hopper_glu): B holds two halves, gate and up, as a (K, 2, n) array, the
  // tiles cover both (product columns 2n), and out = act(gate) * up of n columns; bias is
  // (2, n). Otherwise 0.
  int32_t gated;
  const void* bias;       // (n,) float32, or nullptr
  const void* residual;   // (batch or 1, m, n) row-major in out_dtype, or nullptr
  int32_t residual_batched;
  // Schedule: clusters of cluster_m x cluster_n CTAs (one of them 1), tiles visited in groups of
  // group_size along M (raster_n == 0) or along N (raster_n == 1) for L2 reuse.
  int32_t cluster_m, cluster_n;
  int32_t group_size, raster_n;
  // Filled by the launcher (cuda/sm90_gemm_launch.cuh): who computes which tiles and k-blocks.
  StreamKPlan plan;
  // Stream-K workspace, one slot per CTA of the first plan.sk_clusters clusters: that CTA's
  // fp32 partial tile (per consumer warpgroup: register i of thread t at [i * 128 + t]) and
  // two flags, set when a consumer warpgroup's partial is complete.
  float* partials;
  int32_t* partial_ready;
};

// Columns of the product A.B that the tiles cover: a gated tile of BN product columns is BN/2
// gate columns beside the BN/2 up columns that pair with them, giving BN/2 output columns.
JH_HOST_DEVICE inline int32_t product_cols(const GemmParams& p) {
  return p.gated ? 2 * p.n : p.n;
}

}  // namespace jax_hopper
