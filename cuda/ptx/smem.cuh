// Shared-memory addresses as the async instructions (TMA, mbarrier, wgmma descriptors) take
// them: 32-bit offsets in the shared window, not generic pointers; and 16-byte loads and stores
// through such an address (ld/st.shared: a generic pointer the compiler cannot place in shared
// memory becomes a generic LD/ST, resolved at run time).
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The generic pointer `p` into this CTA's dynamic shared memory, re-derived from the shared array
// itself, so that the compiler knows its address space: accesses through it compile to STS / LDS
// with 32-bit addresses instead of generic ST / LD with 64-bit ones. NOTES: the epilogue's staging
// pointer, carved in kernel.cuh, reached epilogue_store as a plain pointer, and its 524288
// staging writes at 8192 x 4096 x 512 were ST.E, two integer adds each (ncu source counters,
// H100, 2026-12-07; cuBLAS's kernels use STS). Aligning the whole carve-out this way (in
// kernel.cuh) did the same but moved other kernels' register allocation: 4-152 bytes of
// spills in the grouped ping-pong and block-scaled contraction instances (CUDA 13.0).
__device__ __forceinline__ uint8_t* in_shared_window(void* p) {
  extern __shared__ uint8_t smem_raw[];
  return smem_raw + (smem_addr(p) - smem_addr(smem_raw));
}

// This CTA's dynamic shared memory rounded up to 1024 bytes, the 128B swizzle's period, so that a
// box's swizzle phase starts at zero (jax_hopper/layout/tma_model.py assumes it). The *shared*
// address is what the swizzle sees, so that is what gets aligned; the launch adds 1024 bytes of
// slack. The GEMM kernel aligns its carve-out on the generic address instead (kernel.cuh): the
// same bytes, since the shared window's base is 1024-aligned, but this form moved register
// allocation there (in_shared_window's NOTES).
__device__ __forceinline__ uint8_t* aligned_dynamic_smem() {
  extern __shared__ uint8_t smem_raw[];
  return smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024;
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace jax_hopper::ptx
