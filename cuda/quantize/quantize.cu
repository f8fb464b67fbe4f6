// fp8 quantize(-transpose): one CTA per 128 x 128 tile of x. Thread 0 TMA-loads the tile into
// shared memory; the CTA takes the absolute maxima its scaling modes need (per row, per column,
// per tile), turns each into a scale (amax / fp8 max) and a multiplier (fp8 max / amax), writes
// q = saturate(x * multiplier) into a staging tile (and the transposed copy into a second one,
// 128B-swizzled) and TMA-stores both. Per tensor the scale comes from the amax it is given, and
// the tile's own maximum can be recorded (delayed scaling). Partial tiles load as zeros (which
// leave every maximum as it is) and store only their in-bounds part.
// PTX ISA: cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (through cuda_fp8.h), cp.async.bulk.tensor.
// NOTES (H100, 2026-11-25; ab_h100_20261125_quantize_persistent.json, _drain_read.json,
// _quantize_tensor.json): a persistent grid (two 98 KB CTAs per SM for 16-bit inputs, each keeping
// its next tile's TMA load in flight while it quantizes the current one) ran 0.87-0.96x this
// kernel on 6 of 7 cases; likely (not profiled) because with 16 warps per SM instead of 24 the
// per-tile arithmetic, not the HBM stream, sets the pace. Neutral (0.97-1.04x), not kept: tiles
// taken back to front (to reuse what the amax reduction left in L2), an end wait for the stores'
// reads only, and per-tensor scaling skipping the row pass whose maxima it does not use. XLA's
// per-tensor amax before this kernel already streams at 2.3-2.8 TB/s on the large arrays.
#include "cuda/quantize/quantize.h"
#include "cuda/quantize/staging.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math_constants.h>

#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"
#include "cuda/ptx/tma.cuh"

namespace jax_hopper {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kQuantTile / kWarps;  // the row pass: a warp per row, 4 columns a lane
constexpr int kColHalves = kThreads / kQuantTile;   // the column pass: a thread per column and half
constexpr int kChunkRows = 16;                      // rows of one 16-byte chunk of qt
static_assert(kQuantTile == 128 && kQuantTile == 4 * 32, "the row pass gives a lane 4 columns");
static_assert(kQuantTile % (kColHalves * kChunkRows) == 0, "whole chunks per column half");

constexpr uint32_t kStageBytes = kQuantTile * kQuantTile;  // one fp8 tile
// Shared memory: the x tile, q's and qt's staging tiles (each a multiple of 1024 bytes, so qt's
// starts 1024-aligned as the 128B swizzle needs), per-row maxima, per-column-half maxima,
// per-warp maxima and the barrier; plus slack to align the base to 1024.
constexpr uint32_t smem_bytes_for(int in_bytes) {
  return static_cast<uint32_t>(in_bytes) * kQuantTile * kQuantTile + 2 * kStageBytes +
         4 * (kQuantTile + kColHalves * kQuantTile + kWarps) + 8 + 1024;
}

template <typename T>
struct In;
template <>
struct In<float> {
  __device__ static float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
  __device__ static float load1(const float* p) { return *p; }
};
// The 16-bit inputs: pairs converted by the overloads below.
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ float2 to_float2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
__device__ __forceinline__ float to_float(__half h) { return __half2float(h); }
template <typename T, typename T2>
struct In16 {
  __device__ static float4 load4(const T* p) {
    const T2* h = reinterpret_cast<const T2*>(p);
    const float2 a = to_float2(h[0]), b = to_float2(h[1]);
    return make_float4(a.x, a.y, b.x, b.y);
  }
  __device__ static float load1(const T* p) { return to_float(*p); }
};
template <>
struct In<__nv_bfloat16> : In16<__nv_bfloat16, __nv_bfloat162> {};
template <>
struct In<__half> : In16<__half, __half2> {};

// |v| as its bit pattern: for non-negative floats the unsigned order is the numeric one, and
// NaN patterns sit above +Inf, so an unsigned max propagates NaN (fmaxf would drop it).
__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

struct Scale {
  float scale;  // dequantise: x ~= q * scale
  float mul;    // quantise: q = saturate(x * mul)
};

// Mirrors jax_hopper/quantize/fp8.py (scales_from_amax): amax clamped to [kFp8MinAmax,
// kFp8MaxAmax] unless it is NaN or +Inf (NaN stays NaN; +Inf gives mul 0 and so NaN for Inf * 0). Only products with a reciprocal (the
// rounded 1 / fp8 max, the IEEE 1 / amax): XLA rewrites divisions into those, and the kernel and
// the reference must agree bit for bit.
template <__nv_fp8_interpretation_t kFmt>
__device__ __forceinline__ Scale make_scale(float amax) {
  constexpr float kMax = kFmt == __NV_E4M3 ? fp8_max(DType::kE4M3) : fp8_max(DType::kE5M2);
  const float a = amax < kFp8MinAmax                           ? kFp8MinAmax
                  : amax > kFp8MaxAmax && amax != CUDART_INF_F ? kFp8MaxAmax
                                                               : amax;
  constexpr float kInvMax = 1.0f / kMax;
  return {a * kInvMax, kMax * (1.0f / a)};
}

// x * mul, but NaN for an infinite x: satfinite turns an Inf into the fp8 maximum, which under a
// given amax (its mul finite) would bring an Inf back finite. (With the tile's own amax an Inf
// makes mul 0 and the product NaN already.) The test is on x, not the product: a finite x far
// beyond a given amax may overflow the product, and that saturates.
__device__ __forceinline__ float scaled(float x, float mul) {
  return isinf(x) ? __int_as_float(0x7fffffff) : x * mul;
}

template <__nv_fp8_interpretation_t kFmt>
__device__ __forceinline__ uint16_t cvt2(float lo, float hi, float mul) {
  return __nv_cvt_float2_to_fp8x2(make_float2(scaled(lo, mul), scaled(hi, mul)), __NV_SATFINITE,
                                  kFmt);
}

template <typename TIn, __nv_fp8_interpretation_t kFmt>
__global__ void __launch_bounds__(kThreads)
    quantize_fp8_kernel(const __grid_constant__ QuantizeArgs p) {
  uint8_t* smem = ptx::aligned_dynamic_smem();
  const TIn* x = reinterpret_cast<const TIn*>(smem);
  uint8_t* q = smem + sizeof(TIn) * kQuantTile * kQuantTile;
  uint8_t* qt = q + kStageBytes;
  uint32_t* row_amax = reinterpret_cast<uint32_t*>(qt + kStageBytes);
  uint32_t* col_amax = row_amax + kQuantTile;  // [half][column]
  uint32_t* warp_amax = col_amax + kColHalves * kQuantTile;
  uint64_t* bar = reinterpret_cast<uint64_t*>(warp_amax + kWarps);

  const int32_t col_tiles = (p.cols + kQuantTile - 1) / kQuantTile;
  const int32_t row_tiles = (p.rows + kQuantTile - 1) / kQuantTile;
  const int32_t bx = static_cast<int32_t>(blockIdx.x % col_tiles);
  const int32_t by = static_cast<int32_t>(blockIdx.x / col_tiles % row_tiles);
  const int32_t b = static_cast<int32_t>(blockIdx.x / col_tiles / row_tiles);
  const int32_t c0 = bx * kQuantTile, r0 = by * kQuantTile;
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  if (tid == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_mbarrier_init();
    ptx::mbarrier_arrive_expect_tx(bar, sizeof(TIn) * kQuantTile * kQuantTile);
    ptx::tma_load_3d(&p.x_map, bar, smem, c0, r0, b);
  }
  __syncthreads();  // the barrier's init is visible before anyone waits on it
  ptx::mbarrier_wait(bar, 0);

  // Maxima. Row pass: warp w owns rows w * 16 ..; lane l columns 4 l .. 4 l + 3.
  uint32_t tile_bits = 0;
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = static_cast<int>(warp) * kRowsPerWarp + i;
    const float4 v = In<TIn>::load4(x + r * kQuantTile + 4 * lane);
    uint32_t m = max(max(abs_bits(v.x), abs_bits(v.y)), max(abs_bits(v.z), abs_bits(v.w)));
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) row_amax[r] = m;
    tile_bits = max(tile_bits, m);
  }
  if (lane == 0) warp_amax[warp] = tile_bits;
  // Column pass (qt scaled per column block): thread t owns column t % 128, rows of half t / 128.
  const int col = static_cast<int>(tid % kQuantTile), half = static_cast<int>(tid / kQuantTile);
  constexpr int kHalfRows = kQuantTile / kColHalves;
  if (p.transpose && p.t_mode == QuantMode::kRow) {
    uint32_t m = 0;
    for (int r = half * kHalfRows; r < (half + 1) * kHalfRows; ++r)
      m = max(m, abs_bits(In<TIn>::load1(x + r * kQuantTile + col)));
    col_amax[half * kQuantTile + col] = m;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) tile_bits = max(tile_bits, warp_amax[w]);
  // Recorded for delayed scaling, whose scale comes from earlier amaxes: the tile's maximum was
  // taken above in every mode, so recording it costs one atomic per tile.
  if (p.amax_out != nullptr && tid == 0) atomicMax(&p.amax_out[b], tile_bits);
  const float whole = p.mode == QuantMode::kTensor ? p.amax[b] : __uint_as_float(tile_bits);
  const Scale common = make_scale<kFmt>(whole);  // the tile's (or tensor's) scale

  // q: the row mapping again.
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = static_cast<int>(warp) * kRowsPerWarp + i;
    const Scale s = p.mode == QuantMode::kRow ? make_scale<kFmt>(__uint_as_float(row_amax[r]))
                                              : common;
    const float4 v = In<TIn>::load4(x + r * kQuantTile + 4 * lane);
    const uint32_t packed = cvt2<kFmt>(v.x, v.y, s.mul) |
                            (static_cast<uint32_t>(cvt2<kFmt>(v.z, v.w, s.mul)) << 16);
    *reinterpret_cast<uint32_t*>(q + r * kQuantTile + 4 * lane) = packed;
    if (p.mode == QuantMode::kRow && lane == 0 && r0 + r < p.rows)
      p.scale[(static_cast<int64_t>(b) * p.rows + r0 + r) * col_tiles + bx] = s.scale;
  }
  if (tid == 0 && p.mode == QuantMode::kTile)
    p.scale[(static_cast<int64_t>(b) * row_tiles + by) * col_tiles + bx] = common.scale;

  // qt: thread t writes column t % 128 of x (row t % 128 of qt), 16 rows of x per 16-byte chunk,
  // into the 128B-swizzled staging tile (staging.cuh).
  if (p.transpose) {
    const Scale s =
        p.t_mode == QuantMode::kRow
            ? make_scale<kFmt>(__uint_as_float(max(col_amax[col], col_amax[kQuantTile + col])))
            : common;
    for (int g = half * (kHalfRows / kChunkRows); g < (half + 1) * (kHalfRows / kChunkRows); ++g) {
      uint32_t words[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const TIn* src = x + (g * kChunkRows + 4 * w) * kQuantTile + col;
        words[w] = cvt2<kFmt>(In<TIn>::load1(src), In<TIn>::load1(src + kQuantTile), s.mul) |
                   (static_cast<uint32_t>(cvt2<kFmt>(In<TIn>::load1(src + 2 * kQuantTile),
                                                    In<TIn>::load1(src + 3 * kQuantTile),
                                                    s.mul))
                    << 16);
      }
      *reinterpret_cast<uint4*>(qt + swizzled_chunk(col, g)) =
          make_uint4(words[0], words[1], words[2], words[3]);
    }
    if (p.t_mode == QuantMode::kRow && half == 0 && c0 + col < p.cols)
      p.scale_t[(static_cast<int64_t>(b) * p.cols + c0 + col) * row_tiles + by] = s.scale;
    if (tid == 0 && p.t_mode == QuantMode::kTile)
      p.scale_t[(static_cast<int64_t>(b) * col_tiles + bx) * row_tiles + by] = common.scale;
  }

  // The staging tiles were written by the generic proxy; TMA reads them through the async one.
  ptx::fence_proxy_async_smem();
  __syncthreads();
  if (tid == 0) {
    ptx::tma_store_3d(&p.q_map, q, c0, r0, b);
    if (p.transpose) ptx::tma_store_3d(&p.qt_map, qt, r0, c0, b);
    ptx::bulk_commit_group();
    ptx::bulk_wait_group<0>();
  }
}

template <typename TIn, __nv_fp8_interpretation_t kFmt>
cudaError_t launch(const QuantizeArgs& args, cudaStream_t stream) {
  const uint32_t smem = smem_bytes_for(sizeof(TIn));
  auto* kernel = quantize_fp8_kernel<TIn, kFmt>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const int64_t blocks = int64_t(args.batch) * ((args.rows + kQuantTile - 1) / kQuantTile) *
                         ((args.cols + kQuantTile - 1) / kQuantTile);
  kernel<<<static_cast<uint32_t>(blocks), kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <typename TIn>
cudaError_t launch_out(const QuantizeArgs& args, cudaStream_t stream) {
  return args.out == DType::kE4M3 ? launch<TIn, __NV_E4M3>(args, stream)
                                  : launch<TIn, __NV_E5M2>(args, stream);
}

}  // namespace

uint32_t quantize_smem_bytes(int in_bytes) { return smem_bytes_for(in_bytes); }

cudaError_t launch_quantize_fp8(const QuantizeArgs& args, cudaStream_t stream) {
  switch (args.in) {
    case DType::kBF16: return launch_out<__nv_bfloat16>(args, stream);
    case DType::kF16: return launch_out<__half>(args, stream);
    case DType::kF32: return launch_out<float>(args, stream);
    default: return cudaErrorInvalidValue;  // the handler admits only these three
  }
}

}  // namespace jax_hopper
