// Flags in global memory between CTAs of one grid (stream-K partial tiles): a release store
// after the data, an acquire load before reading it. PTX ISA, memory consistency model:
// https://docs.nvidia.com/cuda/parallel-thread-execution/#memory-consistency-model
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

__device__ __forceinline__ void store_release_gpu(int32_t* flag, int32_t value) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ int32_t load_acquire_gpu(const int32_t* flag) {
  int32_t value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

}  // namespace jax_hopper::ptx
