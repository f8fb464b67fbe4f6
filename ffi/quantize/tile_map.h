// What the quantize and transpose handlers share: a (batch, rows, cols) buffer's shape check and
// its TMA map with the kernels' 128 x 128 box.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "cuda/quantize/quantize.h"
#include "cuda/tma/tensor_map.h"
#include "ffi/common.h"

namespace jax_hopper {

inline bool dims_are(const ffi::AnyBuffer& x, std::initializer_list<int64_t> want) {
  const auto d = x.dimensions();
  if (d.size() != want.size()) return false;
  size_t i = 0;
  for (int64_t w : want)
    if (d[i++] != w) return false;
  return true;
}

// A (batch, rows, cols) array of `elem_bytes`-byte elements as a TMA map with a 128 x 128 box.
inline ffi::Error tile_map(const char* op, void* base, int64_t batch, int64_t rows, int64_t cols,
                           size_t elem_bytes, CUtensorMapSwizzle swizzle, CUtensorMap* out) {
  TensorMapSpec s = {};
  if (!tma_bits_type(elem_bytes, &s.dtype)) return invalid(std::string(op) + ": element size");
  s.rank = 3;
  s.base = base;
  s.dims[0] = static_cast<uint64_t>(cols);
  s.dims[1] = static_cast<uint64_t>(rows);
  s.dims[2] = static_cast<uint64_t>(batch);
  s.strides_bytes[1] = static_cast<uint64_t>(cols) * elem_bytes;
  s.strides_bytes[2] = static_cast<uint64_t>(rows * cols) * elem_bytes;
  s.box[0] = s.box[1] = kQuantTile;
  s.box[2] = 1;
  s.swizzle = swizzle;
  return tensor_map_error(encode_tensor_map(s, out));
}

}  // namespace jax_hopper
