// mbarrier wrappers: one PTX instruction each.
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-mbarrier
#pragma once

#include <cstdint>

#include "cuda/ptx/smem.cuh"

namespace jax_hopper::ptx {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrive_count));
}

// Makes the initialised barriers visible to the async proxy and to the other CTAs of the cluster;
// a cluster (or CTA) barrier must follow before any use.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrive and announce `bytes` that TMA will deliver to this CTA for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive on the barrier at the same shared offset in CTA `cta` of the cluster (mapa translates
// the address); used to release a stage that a peer CTA's producer multicasts into.
// NOTES: no .release.cluster qualifier: it compiles to MEMBAR.ALL.GPU before every arrive
// (seen in SASS), and the stage's reads were by wgmma, already complete at wgmma.wait_group.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n\t.reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}"
      ::"r"(smem_addr(bar)), "r"(cta) : "memory");
}

// Spin until the phase with parity `phase` completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n\t.reg .pred done;\n\t"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n\t}"
      ::"r"(smem_addr(bar)), "r"(phase) : "memory");
}

}  // namespace jax_hopper::ptx
