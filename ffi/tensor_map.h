// Host-side CUtensorMap encoding. cuTensorMapEncodeTiled is a driver API function; it is reached
// through cudaGetDriverEntryPointByVersion so the extension never links libcuda (and imports on a
// machine without a GPU driver).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "ffi/common.h"

namespace jax_hopper {

struct TensorMapSpec {
  CUtensorMapDataType dtype;
  int rank;                     // 1..5, dims[0] innermost (contiguous)
  void* base;                   // 16-byte aligned
  uint64_t dims[5];             // elements per dimension
  uint64_t strides_bytes[5];    // stride of dims[1..rank-1] in bytes (strides_bytes[0] unused)
  uint32_t box[5];              // box extent per dimension, 1..256
  CUtensorMapSwizzle swizzle;
};

// Validates the spec against TMA's rules (so a bad layout is an error message, not a driver
// CUDA_ERROR_INVALID_VALUE) and encodes it.
ffi::Error encode_tensor_map(const TensorMapSpec& spec, CUtensorMap* out);

}  // namespace jax_hopper
