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

// A named barrier that also ORs a predicate over the `threads` arriving: every thread gets
// whether any of them passed true (one thread's decision, broadcast without shared memory).
__device__ __forceinline__ bool named_barrier_or(uint32_t id, uint32_t threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

// Signals a named barrier without waiting: `threads` counts the arriving and the syncing threads.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace jax_hopper::ptx
