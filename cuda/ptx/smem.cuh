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
