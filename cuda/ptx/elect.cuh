// Electing one lane of a converged warp (sm_90).
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-elect-sync
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

// True in exactly one lane of the (whole, converged) warp. Under `if (threadIdx.x == 0)` ptxas
// wraps each instruction that takes uniform-register operands (a TMA's) in a loop over the
// active lanes' distinct values (R2UR, ELECT, BRA.U.ANY); under an election from a converged
// warp whose values are warp-uniform it does not (seen in SASS, CUDA 13.0: kernel.cuh's NOTES).
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
