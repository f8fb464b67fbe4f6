// Epilogue ops of hopper_glu, the gated linear unit. The tile's product columns [0, BN/2) are
// gate columns col0.. and [BN/2, BN) the up columns with the same indices (GatedWeightLoad), so
// register i and register i + BN/4 of a thread hold the gate and up values of one output
// element (in the wgmma fragment, 8 column groups further is BN/2 columns further). alpha and
// bias ((2, n): gate row, then up row) apply to both; then registers [0, BN/4) become
// act(gate) * up, the 64 x BN/2 strip the store writes. Without an activation it is the
// bilinear unit.
#pragma once

#include <cstdint>

#include "cuda/gemm/epilogue/activation.cuh"

namespace jax_hopper {

struct GatedOps {
  template <int BN>
  static constexpr int kOutCols = BN / 2;
  static constexpr int kBiasRows = 2;  // bias (2, n): gate, up

  template <int BN, bool kByRow, typename P>
  __device__ static void apply(float* acc, const P& p, const float* bias, int32_t col0,
                               uint32_t wg_thread) {
    static_assert(!kByRow, "gate and up are paired along the strip's columns");
    if (bias != nullptr) {
      // Registers [0, BN/4) are the fragment's columns [0, BN/2): the gate's, biased by row 0;
      // the rest the up columns of the same indices, by row 1. NOTES: loaded column by column,
      // the bias cost 6.0-7.7% of the MLP-up SwiGLU (8192 x 28672 x 4096), preloaded so 0.9-1.0%
      // (H200, 2026-12-06, ab_h200_20261206_glu_column_bias*.json).
      add_column_bias<BN / 2>(acc, p.alpha, bias, col0, p.n, wg_thread);
      add_column_bias<BN / 2>(acc + BN / 4, p.alpha, bias + p.n, col0, p.n, wg_thread);
    } else if (p.alpha != 1.0f) {
      for_each_accumulator<BN>(acc, 0, wg_thread, [&](float x, int32_t) { return x * p.alpha; });
    }
    visit_activation(p.activation, [&](auto act) {
      apply_activation<BN / 4>(acc, act);
#pragma unroll
      for (int i = 0; i < BN / 4; ++i) acc[i] *= acc[i + BN / 4];
    });
  }
};

}  // namespace jax_hopper
