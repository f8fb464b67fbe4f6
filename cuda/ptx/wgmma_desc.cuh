// The wgmma shared-memory matrix descriptor as documented bit fields.
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor
// The Python model of the same fields is jax_hopper/layout/smem_layout.py (WgmmaDescFields);
// tests/test_layout_smem.py checks that model against the constants the kernel passes here.
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

// Swizzle codes of bits 62-63 (note: not the CUtensorMapSwizzle numbering).
enum class WgmmaSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

union WgmmaDesc {
  uint64_t bits;
  struct {
    uint64_t start_addr : 14;  // bits  0-13: shared address >> 4
    uint64_t : 2;
    uint64_t lbo : 14;         // bits 16-29: leading dimension byte offset >> 4
    uint64_t : 2;
    uint64_t sbo : 14;         // bits 32-45: stride dimension byte offset >> 4
    uint64_t : 3;
    uint64_t base_offset : 3;  // bits 49-51: pattern phase; 0 when buffers are 1024-aligned
    uint64_t : 10;
    uint64_t swizzle : 2;      // bits 62-63
  } f;
};

__host__ __device__ inline uint64_t make_wgmma_desc(uint32_t smem_addr, uint32_t lbo_bytes,
                                                    uint32_t sbo_bytes, WgmmaSwizzle swz) {
  WgmmaDesc d;
  d.bits = 0;
  d.f.start_addr = (smem_addr & 0x3FFFF) >> 4;
  d.f.lbo = (lbo_bytes & 0x3FFFF) >> 4;
  d.f.sbo = (sbo_bytes & 0x3FFFF) >> 4;
  d.f.swizzle = static_cast<uint32_t>(swz);
  return d.bits;
}

// The descriptor `bytes` further into shared memory: the start-address field is the low bits
// and every shared address is below 2^18 (the field holds address >> 4 in 14 bits), so adding
// bytes >> 4 never carries out of it. Only the low word changes, so a mainloop can make each
// stage's, slice's and k-step's descriptor with one 32-bit add instead of re-encoding it.
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

}  // namespace jax_hopper::ptx
