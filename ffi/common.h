// Shared by every FFI handler: error plumbing, the dtype mapping, attribute helpers.
// This is the only folder that includes xla/ffi; kernels in cuda/ see plain structs.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "jax_hopper_constants.h"
#include "xla/ffi/api/ffi.h"

namespace jax_hopper {

namespace ffi = xla::ffi;

// NOTES: CUDA failures become ffi::Error with the CUDA message, so Python sees an exception
// instead of a crash or a silently wrong buffer.
#define JH_CUDA_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                        \
    cudaError_t jh_err_ = (expr);                                                             \
    if (jh_err_ != cudaSuccess) {                                                             \
      return ::xla::ffi::Error::Internal(std::string(#expr) + " failed: " +                  \
                                         cudaGetErrorName(jh_err_) + ": " +                   \
                                         cudaGetErrorString(jh_err_));                        \
    }                                                                                         \
  } while (0)

#define JH_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::xla::ffi::Error jh_e_ = (expr);          \
    if (jh_e_.failure()) return jh_e_;         \
  } while (0)

inline ffi::Error invalid(const std::string& msg) { return ffi::Error::InvalidArgument(msg); }

// The one mapping from XLA's element types to the kernels' DType (generated from
// jax_hopper/kernels/catalog.py).
inline bool to_dtype(ffi::DataType t, DType* out) {
  switch (t) {
    case ffi::DataType::BF16: *out = DType::kBF16; return true;
    case ffi::DataType::F16:  *out = DType::kF16;  return true;
    case ffi::DataType::F32:  *out = DType::kF32;  return true;
    case ffi::DataType::F8E4M3FN: *out = DType::kE4M3; return true;
    case ffi::DataType::F8E5M2:   *out = DType::kE5M2; return true;
    default: return false;
  }
}

inline bool tma_float_type(DType t, CUtensorMapDataType* out) {
  switch (t) {
    case DType::kBF16: *out = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; return true;
    case DType::kF16:  *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;  return true;
    case DType::kF32:  *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;  return true;
    default: return false;  // fp8: TMA has no fp8 arithmetic type
  }
  return false;
}

// A tensor map that cannot be encoded is a bad argument (the encoder says which rule failed).
inline ffi::Error tensor_map_error(const std::string& why) {
  return why.empty() ? ffi::Error::Success() : invalid(why);
}

}  // namespace jax_hopper
