// Tensor Memory Accelerator (bulk tensor copy) wrappers: one instruction each (3-D: the
// GEMM and the TMA ops view every array as (batch, rows, cols); 4-D for the gated weights).
// Coordinates are in elements, innermost first, and may run past the tensor's edge: loads fill
// zeros there and stores skip it.
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cp-async-bulk-tensor
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/ptx/mbarrier.cuh"

namespace jax_hopper::ptx {

__device__ __forceinline__ uint64_t gmem_addr(const CUtensorMap* map) {
  return reinterpret_cast<uint64_t>(map);
}

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(gmem_addr(map)) : "memory");
}

// ---- loads: complete on `bar` with complete_tx::bytes -------------------------------------

__device__ __forceinline__ void tma_load_3d(const CUtensorMap* map, uint64_t* bar, void* dst,
                                            int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(smem_addr(dst)), "l"(gmem_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Multicast: the box lands at the same CTA-relative address `dst` in every CTA whose bit is set
// in `cta_mask`, and each of those CTAs' barrier at `bar`'s offset receives the bytes.
__device__ __forceinline__ void tma_load_3d_multicast(const CUtensorMap* map, uint64_t* bar,
                                                      void* dst, int32_t c0, int32_t c1,
                                                      int32_t c2, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;"
      ::"r"(smem_addr(dst)), "l"(gmem_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
        "r"(c2), "h"(cta_mask)
      : "memory");
}

// 4-D (the grouped GLU's per-expert gated weights: columns, k, half, expert).
__device__ __forceinline__ void tma_load_4d(const CUtensorMap* map, uint64_t* bar, void* dst,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];"
      ::"r"(smem_addr(dst)), "l"(gmem_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
        "r"(c3)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d_multicast(const CUtensorMap* map, uint64_t* bar,
                                                      void* dst, int32_t c0, int32_t c1,
                                                      int32_t c2, int32_t c3, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], %7;"
      ::"r"(smem_addr(dst)), "l"(gmem_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
        "r"(c2), "r"(c3), "h"(cta_mask)
      : "memory");
}

// ---- stores and reductions: tracked by bulk async-groups ---------------------------------

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int32_t c0,
                                             int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
      ::"l"(gmem_addr(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Element-wise add of the box into global memory (the tensor map's element type decides the
// arithmetic); the building block of split-K.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src,
                                                  int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3, %4}], [%1];"
      ::"l"(gmem_addr(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until at most N committed groups still *read* shared memory (the buffer may be reused).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Wait until at most N committed groups are still in flight at all (writes visible in global).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace jax_hopper::ptx
