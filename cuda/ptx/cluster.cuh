// Thread-block cluster helpers.
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-barrier-cluster
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// All threads of all CTAs in the cluster; release/acquire so shared-memory state (initialised
// barriers, finished remote arrivals) is visible across CTAs.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// cluster_sync in two halves, for a barrier whose latency should pass under other work: every
// thread of every CTA arrives once (release: its earlier accesses to peers' shared memory
// happen before), then waits. Not .aligned: the threads of a warp may arrive apart.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}

// cluster_arrive in a kernel launched with `cluster_size` CTAs per cluster (1: no peer to meet).
__device__ __forceinline__ void cluster_arrive_if(uint32_t cluster_size) {
  if (cluster_size > 1) cluster_arrive();
}

__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

}  // namespace jax_hopper::ptx
