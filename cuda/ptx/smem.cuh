// Shared-memory addresses as the async instructions (TMA, mbarrier, wgmma descriptors) take
// them: 32-bit offsets in the shared window, not generic pointers.
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace jax_hopper::ptx
