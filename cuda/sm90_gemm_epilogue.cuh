// GEMM epilogue: fp32 accumulators of one consumer warpgroup (a 64 x BN strip) -> alpha, bias,
// activation, residual in registers -> out dtype -> 128B-swizzled shared staging -> TMA store.
// The staging buffer is reused pass after pass; the stores of the last pass drain while the
// next tile's mainloop runs (we only wait for their shared-memory reads before reuse).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90_gemm_params.h"

namespace jax_hopper {

template <typename T> struct OutType;
template <> struct OutType<__nv_bfloat16> {
  __device__ static float load(const void* p, int64_t i) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  }
};
template <> struct OutType<__half> {
  __device__ static float load(const void* p, int64_t i) {
    return __half2float(static_cast<const __half*>(p)[i]);
  }
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  }
};
template <> struct OutType<float> {
  __device__ static float load(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  __device__ static void store2(uint8_t* dst, float a, float b) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  }
};

__device__ __forceinline__ float activate(float x, Activation act) {
  switch (act) {
    case Activation::kRelu: return fmaxf(x, 0.0f);
    case Activation::kGeluTanh: {
      const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(u));
    }
    case Activation::kGeluErf: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case Activation::kSilu: return x / (1.0f + __expf(-x));
    default: return x;
  }
}

// Staging: two boxes of 64 rows x 128 bytes (16 KB) per warpgroup.
constexpr int kEpiBoxBytes = 64 * 128;
constexpr int kEpiBoxesPerPass = 2;
constexpr int kEpiBytesPerWarpgroup = kEpiBoxBytes * kEpiBoxesPerPass;

template <int BN, typename TOut>
__device__ __forceinline__ void epilogue_store(const float* acc, const GemmParams& p,
                                               const CUtensorMap* tma_d, uint8_t* staging,
                                               int32_t row0, int32_t col0, int32_t batch,
                                               uint32_t wg_thread, uint32_t barrier_id) {
  constexpr int kOutBytes = sizeof(TOut);
  constexpr int kBoxCols = 128 / kOutBytes;          // columns per 128-byte swizzle row
  constexpr int kColsPerPass = kBoxCols * kEpiBoxesPerPass;
  constexpr int kPasses = BN / kColsPerPass;
  static_assert(BN % kColsPerPass == 0, "BN must cover whole staging passes");

  const uint32_t warp = wg_thread / 32, lane = wg_thread % 32;
  const bool has_bias = p.bias != nullptr, has_res = p.residual != nullptr;
  const int64_t res_base =
      p.residual_batched ? static_cast<int64_t>(batch) * p.m * p.n : 0;

#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    // The previous pass's (or tile's) TMA stores must have read the staging buffer.
    if (wg_thread == 0) ptx::bulk_wait_group_read<0>();
    ptx::named_barrier_sync(barrier_id, 128);
#pragma unroll
    for (int j = pass * kColsPerPass / 8; j < (pass + 1) * kColsPerPass / 8; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // wgmma m64nN accumulator fragment: thread holds rows lane/4 (+8) of its warp's 16,
        // columns 8j + 2*(lane%4) + {0,1}.
        const int32_t r = warp * 16 + lane / 4 + 8 * half;
        const int32_t c = j * 8 + 2 * (lane % 4);
        float v[2] = {acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]};
        const int32_t gr = row0 + r;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int32_t gc = col0 + c + e;
          float x = p.alpha * v[e];
          if (has_bias && gc < p.n) x += OutType<TOut>::load(p.bias, gc);
          x = activate(x, p.activation);
          if (has_res && gr < p.m && gc < p.n)
            x += p.beta * OutType<TOut>::load(p.residual, res_base + int64_t(gr) * p.n + gc);
          v[e] = x;
        }
        // 128B swizzle (Swizzle<3,4,3> on byte offsets): the 16-byte chunk index within a
        // 128-byte row is XORed with the row index mod 8 -> the 8 rows a warp writes hit
        // 8 different bank groups. jax_hopper/layout/swizzle.py holds the same arithmetic.
        const int32_t box = (c % kColsPerPass) / kBoxCols;
        const int32_t byte = (c % kBoxCols) * kOutBytes;
        const int32_t off =
            box * kEpiBoxBytes + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
        OutType<TOut>::store2(staging + off, v[0], v[1]);
      }
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(barrier_id, 128);
    if (wg_thread == 0) {
#pragma unroll
      for (int b = 0; b < kEpiBoxesPerPass; ++b)
        ptx::tma_store_3d(tma_d, staging + b * kEpiBoxBytes,
                          col0 + pass * kColsPerPass + b * kBoxCols, row0, batch);
      ptx::bulk_commit_group();
    }
  }
}

}  // namespace jax_hopper
