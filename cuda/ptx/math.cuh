// The special-function unit's approximations (MUFU), without the range handling the CUDA math
// library wraps them in: the callers keep their arguments in range themselves.
#pragma once

namespace jax_hopper::ptx {

// 2^x, relative error about 2^-22; results below the normal range flush to 0.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1/x, within one unit in the last place; a reciprocal below the normal range (|x| past 2^126)
// flushes to 0.
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace jax_hopper::ptx
