// Proxy fences and named barriers.
#pragma once

#include <cstdint>

namespace jax_hopper::ptx {

// Generic-proxy writes to shared memory (st.shared) that TMA will read need this in the writing
// threads before the barrier that hands the buffer over; __syncthreads alone does not order proxies.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Barrier over a subset of warps (e.g. one warpgroup) so the others keep running.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Signals a named barrier without waiting: `threads` counts the arriving and the syncing threads.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace jax_hopper::ptx
