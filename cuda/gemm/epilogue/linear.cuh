// Epilogue ops of hopper_matmul: act(alpha * acc + bias) in place on the fp32 accumulators of
// one consumer warpgroup's 64 x BN strip (`bias`: the tile's (N,) bias or nullptr), indexed by
// the strip's columns from col0, or kByRow by its rows from index0 (the swap-AB kernels, whose
// strip rows are output columns). Each step is one unrolled pass, chosen once per tile, and a plain GEMM skips them
// all. The residual is added at the store (store.cuh).
#pragma once

#include <cstdint>

#include "cuda/gemm/epilogue/activation.cuh"

namespace jax_hopper {

struct LinearOps {
  template <int BN>
  static constexpr int kOutCols = BN;  // output columns of a BN-column tile
  static constexpr int kBiasRows = 1;   // bias (N,)

  template <int BN, bool kByRow, typename P>
  __device__ static void apply(float* acc, const P& p, const float* bias, int32_t index0,
                               uint32_t wg_thread) {
    if (!kByRow && bias != nullptr) {
      add_column_bias<BN>(acc, p.alpha, bias, index0, p.n, wg_thread);
    } else if (p.alpha != 1.0f || bias != nullptr) {
      for_each_accumulator<BN, kByRow>(acc, index0, wg_thread, [&](float x, int32_t c) {
        x *= p.alpha;
        return (bias != nullptr && c < p.n) ? x + bias[c] : x;
      });
    }
    if (p.activation != Activation::kNone) {
      visit_activation(p.activation, [&](auto act) { apply_activation<BN / 2>(acc, act); });
    }
  }
};

}  // namespace jax_hopper
