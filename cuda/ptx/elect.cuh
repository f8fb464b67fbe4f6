// Electing one lane of a converged warp (sm_90).
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-elect-sync
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

// True in exactly one lane of the (whole, converged) warp. Code under it runs on that lane with
// the warp's other values known to be warp-uniform, so ptxas moves them into uniform registers
// once, instead of looping over the active lanes' distinct values (BRA.U.ANY) before each
// instruction that takes a uniform operand, as under `if (threadIdx.x == 0)`.
__device__ __forceinline__ bool elect_one_sync() {
  uint32_t elected = 0;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "elect.sync _|p, 0xFFFFFFFF;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(elected));
  return elected != 0;
}

}  // namespace jax_hopper::ptx
