// Element types the kernels know. Plain C++ so both cuda/ and ffi/ include it.
#pragma once

namespace jax_hopper {

enum class DType : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

inline constexpr int dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

}  // namespace jax_hopper
