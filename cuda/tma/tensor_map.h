// Host-side CUtensorMap encoding (plain C++: the GEMM policies and the TMA op handlers use it).
// cuTensorMapEncodeTiled is a driver API function; it is reached through
// cudaGetDriverEntryPointByVersion so the extension never links libcuda (and imports on a
// machine without a GPU driver).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

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
// CUDA_ERROR_INVALID_VALUE) and encodes it. Returns "" on success, else why it failed.
std::string encode_tensor_map(const TensorMapSpec& spec, CUtensorMap* out);

// A map with the 128B swizzle over `base`: extents d[0] (innermost) to d[rank - 1], the byte
// strides of dims 1.., and a box of box0 x box1 x 1 x ... elements (the GEMM's every map).
inline std::string encode_sw128(CUtensorMapDataType dtype, void* base, int rank,
                                const uint64_t* d, const uint64_t* strides, uint32_t box0,
                                uint32_t box1, CUtensorMap* out) {
  TensorMapSpec s = {};
  s.dtype = dtype;
  s.rank = rank;
  s.base = base;
  for (int i = 0; i < rank; ++i) {
    s.dims[i] = d[i];
    s.strides_bytes[i] = i > 0 ? strides[i - 1] : 0;
    s.box[i] = i == 0 ? box0 : i == 1 ? box1 : 1;
  }
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return encode_tensor_map(s, out);
}

// Rank 3: extents d0 to d2, the byte strides of dims 1 and 2.
inline std::string encode_sw128_3d(CUtensorMapDataType dtype, void* base, uint64_t d0,
                                   uint64_t d1, uint64_t d2, uint64_t stride1, uint64_t stride2,
                                   uint32_t box0, uint32_t box1, CUtensorMap* out) {
  const uint64_t d[3] = {d0, d1, d2}, strides[2] = {stride1, stride2};
  return encode_sw128(dtype, base, 3, d, strides, box0, box1, out);
}

// Tensor-map element type for TMA. Copies only move bytes, so any element type maps to the
// unsigned type of its width; arithmetic ops (reduce-add) ask for the real float type.
inline bool tma_bits_type(size_t elem_bytes, CUtensorMapDataType* out) {
  switch (elem_bytes) {
    case 1: *out = CU_TENSOR_MAP_DATA_TYPE_UINT8;  return true;
    case 2: *out = CU_TENSOR_MAP_DATA_TYPE_UINT16; return true;
    case 4: *out = CU_TENSOR_MAP_DATA_TYPE_UINT32; return true;
    case 8: *out = CU_TENSOR_MAP_DATA_TYPE_UINT64; return true;
    default: return false;
  }
}

}  // namespace jax_hopper
