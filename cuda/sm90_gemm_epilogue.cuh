// GEMM epilogue: fp32 accumulators of one consumer warpgroup (a 64 x BN strip) -> alpha, bias,
// activation (or the gated unit) in registers -> + beta * residual -> out dtype -> 128B-swizzled
// shared staging -> TMA store. bias is fp32 (the wrapper casts it); residual is in the out dtype.
// The residual is loaded by TMA into the staging buffer, in the same swizzled layout the output
// takes there: each thread reads its residual values at exactly the bytes it then overwrites
// with its results. The staging buffer is reused pass after pass; the stores of the last pass
// drain while the next tile's mainloop runs (we only wait for their shared-memory reads).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90_gemm_params.h"

namespace jax_hopper {

template <typename T> struct OutType;
template <> struct OutType<__nv_bfloat16> {
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  }
  __device__ static float2 load2(const uint8_t* src) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
  }
};
template <> struct OutType<__half> {
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  }
  __device__ static float2 load2(const uint8_t* src) {
    return __half22float2(*reinterpret_cast<const __half2*>(src));
  }
};
template <> struct OutType<float> {
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  }
  __device__ static float2 load2(const uint8_t* src) {
    return *reinterpret_cast<const float2*>(src);
  }
};

// Compact activations. NOTES: the epilogue is unrolled over all BN/2 accumulators of a thread,
// so whatever runs per element is copied 128 times: libdevice's erff/tanhf inlined there grew
// the kernel past 600 KB of SASS and instruction-cache misses halved the GEMM's speed (H100).
// Out-of-line calls are no better: the accumulators then live on the stack around each call.
__device__ __forceinline__ float tanh_fast(float u) {
  // 1 - 2/(e^{2u}+1): ~1e-7 absolute error, saturates correctly for |u| large.
  return 1.0f - __fdividef(2.0f, __expf(2.0f * u) + 1.0f);
}

__device__ __forceinline__ float erf_fast(float z) {
  // Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7, odd extension for z < 0.
  const float a = fabsf(z);
  const float t = __fdividef(1.0f, 1.0f + 0.3275911f * a);
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f +
                                                                       t * 1.061405429f))));
  return copysignf(1.0f - poly * __expf(-a * a), z);
}

// x < 0 ? 0 : x rather than fmaxf(x, 0), which would turn NaN into 0 (jnp.maximum keeps NaN).
struct Relu { __device__ float operator()(float x) const { return x < 0.0f ? 0.0f : x; } };
struct GeluTanh {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.0f + tanh_fast(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
};
struct GeluErf {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.0f + erf_fast(x * 0.7071067811865476f));
  }
};
struct Silu {
  __device__ float operator()(float x) const { return __fdividef(x, 1.0f + __expf(-x)); }
};

// Calls f(value, global_col) for each accumulator of this thread and stores the result back.
// wgmma m64nN fragment: register i = 4j + 2h + e holds strip row 16*warp + lane/4 + 8h,
// column 8j + 2*(lane%4) + e.
template <int BN, typename F>
__device__ __forceinline__ void for_each_accumulator(float* acc, int32_t col0, uint32_t wg_thread,
                                                     F f) {
  const int32_t c = col0 + 2 * (wg_thread % 4);
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = f(acc[i], c + (i / 4) * 8 + i % 2);
}

template <int BN, typename Act>
__device__ __forceinline__ void apply_activation(float* acc, uint32_t wg_thread, Act act) {
  for_each_accumulator<BN>(acc, 0, wg_thread, [&](float x, int32_t) { return act(x); });
}

// act(alpha * acc + bias), in place on the fp32 accumulators of one consumer warpgroup's
// 64 x BN strip starting at column col0; each step is one unrolled pass, chosen once per tile,
// and a plain GEMM skips them all. The residual is added at the store (epilogue_store).
template <int BN>
__device__ __forceinline__ void apply_epilogue_ops(float* acc, const GemmParams& p, int32_t col0,
                                                   uint32_t wg_thread) {
  if (p.alpha != 1.0f || p.bias != nullptr) {
    const float* bias = static_cast<const float*>(p.bias);
    for_each_accumulator<BN>(acc, col0, wg_thread, [&](float x, int32_t c) {
      x *= p.alpha;
      return (bias != nullptr && c < p.n) ? x + bias[c] : x;
    });
  }
  switch (p.activation) {
    case Activation::kRelu: apply_activation<BN>(acc, wg_thread, Relu{}); break;
    case Activation::kGeluTanh: apply_activation<BN>(acc, wg_thread, GeluTanh{}); break;
    case Activation::kGeluErf: apply_activation<BN>(acc, wg_thread, GeluErf{}); break;
    case Activation::kSilu: apply_activation<BN>(acc, wg_thread, Silu{}); break;
    default: break;
  }
}

// Gated linear unit (hopper_glu): the tile's product columns [0, BN/2) are gate columns
// col0.. and [BN/2, BN) the up columns with the same indices (load_operand), so register i and
// register i + BN/4 of a thread hold the gate and up values of one output element (in the
// fragment layout above, 8 column groups further is BN/2 columns further). alpha and bias
// ((2, n): gate row, then up row) apply to both; then registers [0, BN/4) become act(gate) * up,
// the 64 x BN/2 strip the store writes. Without an activation it is the bilinear unit.
template <int BN, typename Act>
__device__ __forceinline__ void gate_by(float* acc, Act act) {
#pragma unroll
  for (int i = 0; i < BN / 4; ++i) acc[i] = act(acc[i]) * acc[i + BN / 4];
}

struct Identity { __device__ float operator()(float x) const { return x; } };

template <int BN>
__device__ __forceinline__ void apply_gated_epilogue_ops(float* acc, const GemmParams& p,
                                                         int32_t col0, uint32_t wg_thread) {
  if (p.alpha != 1.0f || p.bias != nullptr) {
    const float* bias = static_cast<const float*>(p.bias);
    for_each_accumulator<BN>(acc, 0, wg_thread, [&](float x, int32_t c) {
      const int32_t half = c >= BN / 2 ? 1 : 0, col = col0 + c - half * (BN / 2);
      x *= p.alpha;
      return (bias != nullptr && col < p.n) ? x + bias[half * p.n + col] : x;
    });
  }
  switch (p.activation) {
    case Activation::kRelu: gate_by<BN>(acc, Relu{}); break;
    case Activation::kGeluTanh: gate_by<BN>(acc, GeluTanh{}); break;
    case Activation::kGeluErf: gate_by<BN>(acc, GeluErf{}); break;
    case Activation::kSilu: gate_by<BN>(acc, Silu{}); break;
    default: gate_by<BN>(acc, Identity{}); break;
  }
}

// Staging: two boxes of 64 rows x 128 bytes (16 KB) per warpgroup.
constexpr int kEpiBoxBytes = 64 * 128;
constexpr int kEpiBoxesPerPass = 2;
constexpr int kEpiBytesPerWarpgroup = kEpiBoxBytes * kEpiBoxesPerPass;

// Boxes per staging pass for a strip of `boxes` boxes: the most that divide it and fit (a
// 192-column strip of 16-bit outputs is three boxes: one per pass).
constexpr int epi_boxes_per_pass(int boxes, int fit = kEpiBoxesPerPass) {
  return boxes % fit == 0 ? fit : epi_boxes_per_pass(boxes, fit - 1);
}

// Where one consumer warpgroup's strip goes: output rows row0.., columns col0.., batch entry
// `batch`; the residual's batch entry (0 when one residual is broadcast over the batch).
struct EpilogueTile {
  int32_t row0, col0, batch, residual_batch;
};

// One consumer warpgroup's staging buffer, its residual-load barrier and that barrier's phase,
// and its named barrier.
struct EpilogueSync {
  uint8_t* staging;
  uint64_t* residual_loaded;
  uint32_t* residual_phase;
  uint32_t wg_thread, barrier_id;
};

template <int BN, typename TOut, bool RESIDUAL>
__device__ __forceinline__ void epilogue_store(const float* acc, const GemmParams& p,
                                               const CUtensorMap* tma_d, const CUtensorMap* tma_r,
                                               const EpilogueTile& t, const EpilogueSync& s) {
  uint8_t* staging = s.staging;
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
    if (j % kJPerPass == 0) {
      // The previous pass's (or tile's) TMA stores must have read the staging buffer.
      if (wg_thread == 0) {
        ptx::bulk_wait_group_read<0>();
        if constexpr (RESIDUAL) {
          // This pass's residual boxes land where its results will go.
          ptx::mbarrier_arrive_expect_tx(s.residual_loaded, kBoxes * kEpiBoxBytes);
#pragma unroll
          for (int b = 0; b < kBoxes; ++b)
            ptx::tma_load_3d(tma_r, s.residual_loaded, staging + b * kEpiBoxBytes,
                             t.col0 + pass * kColsPerPass + b * kBoxCols, t.row0,
                             t.residual_batch);
        }
      }
      ptx::named_barrier_sync(s.barrier_id, 128);
      if constexpr (RESIDUAL) {
        ptx::mbarrier_wait(s.residual_loaded, *s.residual_phase);
        *s.residual_phase ^= 1;
      }
    }
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
        x0 += p.beta * r2.x;
        x1 += p.beta * r2.y;
      }
      OutType<TOut>::store2(staging + off, x0, x1);
    }
    if (j % kJPerPass == kJPerPass - 1) {
      ptx::fence_proxy_async_smem();
      ptx::named_barrier_sync(s.barrier_id, 128);
      if (wg_thread == 0) {
#pragma unroll
        for (int b = 0; b < kBoxes; ++b)
          ptx::tma_store_3d(tma_d, staging + b * kEpiBoxBytes,
                            t.col0 + pass * kColsPerPass + b * kBoxCols, t.row0, t.batch);
        ptx::bulk_commit_group();
      }
    }
  }
}

// The store of one 64 x BN strip, for the out dtype and residual chosen at run time.
template <int BN>
__device__ __forceinline__ void store_strip(const float* acc, const GemmParams& p,
                                            const CUtensorMap* tma_d, const CUtensorMap* tma_r,
                                            const EpilogueTile& t, const EpilogueSync& s) {
  const bool res = p.residual != nullptr;
  switch (p.out_dtype) {
    case DType::kBF16:
      res ? epilogue_store<BN, __nv_bfloat16, true>(acc, p, tma_d, tma_r, t, s)
          : epilogue_store<BN, __nv_bfloat16, false>(acc, p, tma_d, tma_r, t, s);
      break;
    case DType::kF16:
      res ? epilogue_store<BN, __half, true>(acc, p, tma_d, tma_r, t, s)
          : epilogue_store<BN, __half, false>(acc, p, tma_d, tma_r, t, s);
      break;
    case DType::kF32:
      res ? epilogue_store<BN, float, true>(acc, p, tma_d, tma_r, t, s)
          : epilogue_store<BN, float, false>(acc, p, tma_d, tma_r, t, s);
      break;
  }
}

}  // namespace jax_hopper
