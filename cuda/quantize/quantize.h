// Host-visible interface of the fp8 quantize(-transpose) kernel (plain C++: the FFI handler
// ffi/quantize/handler.cc includes it). x is viewed as (batch, rows, cols); one CTA quantizes one
// 128 x 128 tile of it into q (same layout) and, optionally, into the transposed copy qt
// (batch, cols, rows), each with its own scaling (jax_hopper/quantize/fp8.py documents the modes).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "jax_hopper_constants.h"

namespace jax_hopper {

// The tile one CTA quantizes: a scale block of kFp8ScaleBlock x kFp8ScaleBlock elements, so every
// row block (1 x 128), column block (128 x 1) and tile block (128 x 128) lies inside one CTA.
constexpr int kQuantTile = kFp8ScaleBlock;

struct QuantizeArgs {
  DType in, out;                  // bf16 / f16 / f32 in, e4m3 / e5m2 out
  int32_t batch, rows, cols;
  QuantMode mode;                 // q's scaling
  bool transpose;                 // also write qt
  QuantMode t_mode;               // qt's scaling (kTensor exactly when mode is kTensor)
  const float* amax;              // kTensor: (batch,) the absolute maximum to scale each batch entry by
  uint32_t* amax_out;             // or null: (batch,) each batch entry's own max |x| as float bits,
                                  // atomically maxed in (the handler zeroes it before the launch)
  float* scale;                   // kRow: (batch, rows, col tiles); kTile: (batch, row tiles, col tiles)
  float* scale_t;                 // kRow: (batch, cols, row tiles); kTile: (batch, col tiles, row tiles)
  CUtensorMap x_map, q_map, qt_map;  // x and q: (cols, rows, batch), box 128 x 128, no swizzle;
                                     // qt: (rows, cols, batch), box 128 x 128, 128B swizzle
};

// Dynamic shared memory the kernel asks for with input elements of `in_bytes` bytes.
uint32_t quantize_smem_bytes(int in_bytes);

cudaError_t launch_quantize_fp8(const QuantizeArgs& args, cudaStream_t stream);

}  // namespace jax_hopper
