// How the SS mainloop scales its accumulators once a unit's k-blocks are summed: the 16-bit
// families do not; fp8 operands carry one float32 scale per tensor (a = a_scale * A_fp8), so the
// product is (a_scale * b_scale) * (A_fp8 B_fp8), applied to the fp32 accumulators before the
// epilogue (alpha, bias, activation) and before a stream-K fix-up sums the pieces (each piece
// is scaled alike). The scales are device arrays, read by the kernel: traced values, never
// compiled into the call.
#pragma once

#include <string>

#include "cuda/gemm/gemm.h"

namespace jax_hopper {

struct NoScaling {
  struct Params {};
  struct Value {};
  static std::string host_params(const GemmArgs&, Params*) { return {}; }
  __device__ static Value load(const Params&) { return {}; }
  template <int kRegs>
  __device__ static void apply(Value, float*) {}
};

struct TensorScaling {
  struct Params {
    const float* a;
    const float* b;
  };
  using Value = float;
  static std::string host_params(const GemmArgs& g, Params* p) {
    if (g.a_scale == nullptr || g.b_scale == nullptr)
      return "per-tensor scaled operands need a_scale and b_scale";
    *p = Params{g.a_scale, g.b_scale};
    return {};
  }
  // Issued before the mainloop waits on its first stage, so the loads' latency is hidden.
  __device__ static Value load(const Params& p) { return __ldg(p.a) * __ldg(p.b); }
  template <int kRegs>
  __device__ static void apply(Value s, float* acc) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) acc[i] *= s;
  }
};

}  // namespace jax_hopper
