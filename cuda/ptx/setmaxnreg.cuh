// Register rebalancing between warpgroups (sm_90a). Takes effect only when the kernel has a
// register cap at entry (__launch_bounds__(threads, 1)) and each role is one branch.
#pragma once

namespace jax_hopper::ptx {

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

}  // namespace jax_hopper::ptx
