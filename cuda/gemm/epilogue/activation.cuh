// Epilogue activations on fp32 accumulators, and the walk over a consumer warpgroup's wgmma
// fragment that the epilogue ops apply them with.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/ptx/math.cuh"
#include "jax_hopper_constants.h"

namespace jax_hopper {

// Compact activations. NOTES: the epilogue is unrolled over all BN/2 accumulators of a thread,
// so whatever runs per element is copied 128 times: libdevice's erff/tanhf inlined there grew
// the kernel past 600 KB of SASS and instruction-cache misses halved the GEMM's speed (H100).
// Out-of-line calls are no better: the accumulators then live on the stack around each call.
// NOTES: the unrolled passes are still most of a kernel's code, and a launch whose code has left L2
// pays for the code's size, not only for what it executes: the 128 x 128 kernel's SASS is 126 KB,
// 45 KB with these passes and the store's five other variants compiled out, which ran one-wave
// kernels 1.9-3 us faster under ncu's cache flush (128 x 128 x 64 9.5-10.1 -> 6.0-7.1 us, 256 x
// 4096 x 1024 14.1 -> 11.8, 512 x 4096 x 4096 31.1 -> 29.2) and no faster warm or in the benchmark
// (H100, 2026-11-25, ncu_h100_20261125_cold_code.txt). __builtin_expect on the passes and the
// store's dtype switch moved them after the store in the PTX but changed no timing.
// x < 0 ? 0 : x rather than fmaxf(x, 0), which would turn NaN into 0 (jnp.maximum keeps NaN).
struct Relu { __device__ float operator()(float x) const { return x < 0.0f ? 0.0f : x; } };

// Activations of the form x / d(x), d(x) = 1 + 2^t(x) (gelu_tanh, silu): d is clamped to 1 + 2^31
// so that four of them share one reciprocal (reciprocals4), and x / d is taken as 0 from
// A::kZeroBelow down, just above where t(x) reaches that clamp (x / d is then under |x| 2^-30.97),
// so that -Inf still gives NaN, as x * sigmoid(...) does in jnp. The clamp is fminf, which returns
// 31 for a NaN t: a NaN element keeps a finite denominator and cannot spoil the other three of its
// group (a comparison-and-select clamp would). Why: the exponential and the reciprocal each take
// the special-function unit (MUFU), 16 a clock per SM against 128 FMAs, so an element's two cost 16
// issue slots' worth of time: as much as the whole 16-instruction tanh-GELU pass (1 - 2/(e^2u+1),
// then 1 + that). One exponential and a quarter of a reciprocal cost 10, under the pass's 11.6
// instructions now (SASS, CUDA 13.0; silu 8.1 instructions and 2 MUFU before, 9.6 and 1.25 now).
// NOTES: against 1 - 2/(e^2u + 1) through __expf and __fdividef, the fused bias + tanh-GELU at
// 8192 x 4096 x 1024 went 127.2 -> 122.7 us, MLP up 2715 -> 2652 us, SwiGLU + bias 2674 -> 2586
// (H100, 2026-12-07, ab_h100_20261207_shared_rcp.json).
template <class A>
struct QuotientActivation {
  // In float 1 + 2^31 is 2^31, so four denominators multiply to at most 2^124 (a little past
  // with ex2's error), below the 2^126 past which rcp.approx.ftz would flush their reciprocal.
  static constexpr float kMaxExponent = 31.0f;
  static_assert(4 * kMaxExponent <= 124.0f, "the product of four denominators stays normal");
  __device__ float denominator(float x) const {
    return 1.0f + ptx::ex2_approx(fminf(A::exponent(x), kMaxExponent));
  }
  // x / d(x), given inv = 1 / d(x).
  __device__ float operator()(float x, float inv) const {
    return x * (x < A::kZeroBelow ? 0.0f : inv);
  }
};

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3):
// no cancellation in 1 + tanh(u) where u is large and negative. t(x) = -2u log2(e).
struct GeluTanh : QuotientActivation<GeluTanh> {
  static constexpr float kZeroBelow = -5.6f;  // t(-5.6) = 30.97; t(-5.6024) = 31
  __host__ __device__ static constexpr float exponent(float x) {
    constexpr float k1 = -2.0f * 0.7978845608028654f * 1.4426950408889634f;
    constexpr float k2 = k1 * 0.044715f;
    return x * (k2 * x * x + k1);
  }
};

// gelu(x) = x Phi(x), Phi the normal distribution: with h = erfc(|x| / sqrt(2)) / 2, Phi(x) is
// h for x < 0 and 1 - h otherwise, so the negative tail has no cancellation (1 + erf(x / sqrt 2)
// had). erfc(a) = t P(t) e^(-a^2), t = 1 / (1 + p a): Abramowitz & Stegun 7.1.26, |error| <=
// 1.5e-7 (relative under 3e-5 for a < 2, 4% by a = 10); the 1/2 is folded into P. 15.2 SASS
// instructions an element (2 MUFU), where 1 + erf(...) through __fdividef, __expf and copysignf
// took 23.2 (CUDA 13.0). Its reciprocal is not shared (QuotientActivation's way): the two MUFU
// operations are 16 issue slots' worth, and sharing would bring them to 10 but the instructions
// to about 17.7.
// NOTES: bias + this GELU at 8192 x 4096 x 1024 161.1 -> 128.8 us against 0.5 x (1 + erf) (H100,
// 2026-12-07, ab_h100_20261207_shared_rcp.json).
struct GeluErf {
  __device__ float operator()(float x) const {
    const float a = fabsf(x) * 0.7071067811865476f;
    const float t = ptx::rcp_approx(fmaf(0.3275911f, a, 1.0f));
    const float half_poly =
        t * (0.127414796f + t * (-0.142248368f + t * (0.7107068705f + t * (-0.7265760135f +
                                                                          t * 0.5307027145f))));
    // e^(-a^2) = 2^(-x^2 log2(e) / 2)
    const float h = half_poly * ptx::ex2_approx(x * x * -0.7213475204444817f);
    return x * (x < 0.0f ? h : 1.0f - h);
  }
};

// silu(x) = x / (1 + e^-x): t(x) = -x log2(e).
struct Silu : QuotientActivation<Silu> {
  static constexpr float kZeroBelow = -21.48f;  // t(-21.48) = 30.99; t(-21.4876) = 31
  __host__ __device__ static constexpr float exponent(float x) { return x * -1.4426950408889634f; }
};

// Each quotient activation's zero threshold sits where its exponent is just under the clamp:
// above it no denominator is clamped (the quotient is as computed), below it the true value is
// under |x| 2^-30, the absolute error the GPU test allows.
template <class A>
constexpr bool zero_below_fits_clamp() {
  constexpr float t = A::exponent(A::kZeroBelow);
  return t >= 30.0f && t <= QuotientActivation<A>::kMaxExponent;
}
static_assert(zero_below_fits_clamp<GeluTanh>(), "gelu_tanh's kZeroBelow is off its clamp");
static_assert(zero_below_fits_clamp<Silu>(), "silu's kZeroBelow is off its clamp");

// 1 / d for four denominators in [1, 2^31] with one MUFU.RCP: the reciprocal of their product
// (about 2^124 at most, so it and its reciprocal are normal floats) times the other three.
// A few units in the last place of error, against the reciprocal's one.
__device__ __forceinline__ void reciprocals4(float (&d)[4]) {
  const float d01 = d[0] * d[1], d23 = d[2] * d[3];
  const float r = ptx::rcp_approx(d01 * d23);
  const float r01 = d23 * r, r23 = d01 * r;  // 1 / (d0 d1), 1 / (d2 d3)
  const float d0 = d[0], d2 = d[2];
  d[0] = d[1] * r01;
  d[1] = d0 * r01;
  d[2] = d[3] * r23;
  d[3] = d2 * r23;
}

// v[i] = act(v[i]) for a thread's N accumulators; a quotient activation four at a time.
template <int N, typename Act>
__device__ __forceinline__ void apply_activation(float* v, Act act) {
  if constexpr (std::is_base_of_v<QuotientActivation<Act>, Act>) {
    static_assert(N % 4 == 0, "a thread's accumulators are whole groups of four (BN >= 16)");
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      float d[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) d[q] = act.denominator(v[i + q]);
      reciprocals4(d);
#pragma unroll
      for (int q = 0; q < 4; ++q) v[i + q] = act(v[i + q], d[q]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = act(v[i]);
  }
}

// Calls f(value, index) for each accumulator of this thread and stores the result back; index
// is the global column (index0 + the fragment column) or, kByRow, the global row (index0 + the
// fragment row: the swap-AB kernels' output columns). wgmma m64nN fragment: register
// i = 4j + 2h + e holds strip row 16*warp + lane/4 + 8h, column 8j + 2*(lane%4) + e.
template <int BN, bool kByRow = false, typename F>
__device__ __forceinline__ void for_each_accumulator(float* acc, int32_t index0,
                                                     uint32_t wg_thread, F f) {
  if constexpr (kByRow) {
    const int32_t r = index0 + 16 * static_cast<int32_t>(wg_thread / 32) + (wg_thread % 32) / 4;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = f(acc[i], r + ((i / 2) % 2) * 8);
  } else {
    const int32_t c = index0 + 2 * (wg_thread % 4);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = f(acc[i], c + (i / 4) * 8 + i % 2);
  }
}

// alpha * acc + bias[column] over a strip's accumulators (columns from col0; those at or past
// n get no bias: they are not stored). Each thread's BN/4 columns (fragment columns 8j +
// 2*(lane%4) + {0,1}) are all loaded before the first is added, so the warpgroup waits for one
// round trip to L2, not one per column.
// NOTES: added column by column in for_each_accumulator (a load before each add) the bias took
// 5-10% of a whole GEMM's time (8192 x 14336 x 4096: 1254.5 us plain, 1386.0 with the bias;
// 4096^3 180.1, 195.4), preloaded under 1% (1304.2, 1307.7; 184.1, 185.2), and the fused bias +
// tanh-GELU went from 1.00x to 1.05x XLA's jnp.dot with the epilogue in jnp (4096^3 0.99x to
// 1.14x; H100, 2026-12-06, timeline_h100_20261206_bias_epilogue.log).
template <int BN>
__device__ __forceinline__ void add_column_bias(float* acc, float alpha, const float* bias,
                                                int32_t col0, int32_t n, uint32_t wg_thread) {
  const int32_t c0 = col0 + 2 * static_cast<int32_t>(wg_thread % 4);
  float b[BN / 4];
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int32_t c = c0 + 8 * j;
    b[2 * j] = c < n ? __ldg(bias + c) : 0.0f;
    b[2 * j + 1] = c + 1 < n ? __ldg(bias + c + 1) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = acc[i] * alpha + b[(i / 4) * 2 + i % 2];
}

struct Identity { __device__ float operator()(float x) const { return x; } };

// Calls f with the functor of activation `a` (Identity for none): one unrolled pass per
// activation is compiled, and the one the call asks for is chosen once per tile.
template <typename F>
__device__ __forceinline__ void visit_activation(Activation a, F f) {
  switch (a) {
    case Activation::kRelu: f(Relu{}); break;
    case Activation::kGeluTanh: f(GeluTanh{}); break;
    case Activation::kGeluErf: f(GeluErf{}); break;
    case Activation::kSilu: f(Silu{}); break;
    default: f(Identity{}); break;
  }
}

}  // namespace jax_hopper
