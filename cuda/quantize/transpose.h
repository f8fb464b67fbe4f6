// Host-visible interface of the fp8 transpose kernel (plain C++: ffi/quantize/transpose.cc
// includes it). x (batch, rows, cols) of 1-byte elements -> t (batch, cols, rows), the bytes as
// they are: the K-major copy of an fp8 operand stored MN-major, which fp8 wgmma cannot read.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace jax_hopper {

struct TransposeArgs {
  int32_t batch, rows, cols;
  CUtensorMap x_map;  // (cols, rows, batch), box 128 x 128, no swizzle
  CUtensorMap t_map;  // (rows, cols, batch), box 128 x 128, 128B swizzle
};

cudaError_t launch_transpose_fp8(const TransposeArgs& args, cudaStream_t stream);

}  // namespace jax_hopper
