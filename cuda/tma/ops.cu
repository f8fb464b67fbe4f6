// TMA demonstration kernels: copy, raw shared-memory dump, cluster multicast and reduce-add.
// Each CTA moves one box (one slice of a box, for multicast) with a single thread: these kernels
// exist to pin down what the Tensor Memory Accelerator does, not to be fast.
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cp-async-bulk-tensor
#include <cstdint>

#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/tma/ops.h"
#include "jax_hopper_constants.h"

namespace jax_hopper {
namespace {

// One warp: lane 0 issues everything; a full warp keeps the .aligned cluster barrier legal.
constexpr int kIssueThreads = 32;
// The shared-memory dump copies with plain 16-byte stores, so it uses more threads.
constexpr int kDumpThreads = 128;
// Dynamic shared memory up to 48 KiB needs no opt-in; above that, up to kSmemLimitBytes.
constexpr uint32_t kDefaultSmemCap = 48 * 1024;

struct BoxCoord {
  int32_t col, row, batch;  // element coordinates of the box's first element, innermost first
};

// Boxes are numbered (batch, row box, col box) row-major, matching the smem_bytes output.
__device__ __forceinline__ BoxCoord box_coord(const TmaBoxGrid& g, int64_t box) {
  BoxCoord c;
  c.col = static_cast<int32_t>(box % g.col_boxes) * g.box_cols;
  box /= g.col_boxes;
  c.row = static_cast<int32_t>(box % g.row_boxes) * g.box_rows;
  c.batch = static_cast<int32_t>(box / g.row_boxes);
  return c;
}

// Thread 0 initialises the barrier; the CTA barrier publishes it before anyone (the TMA unit
// included) arrives on it or waits.
__device__ __forceinline__ void init_barrier(uint64_t* bar) {
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
}

// Out-of-bounds parts of the box land as zeros and still count towards complete_tx, so the
// barrier always expects the whole box.
__device__ __forceinline__ void load_box(const CUtensorMap* src, uint64_t* bar, uint8_t* smem,
                                         const BoxCoord& c, uint32_t box_bytes) {
  ptx::mbarrier_arrive_expect_tx(bar, box_bytes);
  ptx::tma_load_3d(src, bar, smem, c.col, c.row, c.batch);
}

// NOTES: wait_group (not only .read) before exit, so the writes into global memory have
// completed, not only the reads of shared memory.
__device__ __forceinline__ void finish_bulk_stores() {
  ptx::bulk_commit_group();
  ptx::bulk_wait_group<0>();
}

// Load a box, then write it back at the same coordinates of dst: a plain store (a copy), or an
// element-wise add into dst (cp.reduce.async.bulk.tensor; the map's element type picks the
// arithmetic). Stores skip the out-of-bounds part of the box.
template <bool kReduce>
__global__ void __launch_bounds__(kIssueThreads)
    tma_store_back_kernel(const __grid_constant__ CUtensorMap src,
                          const __grid_constant__ CUtensorMap dst, const TmaBoxGrid g) {
  __shared__ uint64_t bar;
  uint8_t* box = ptx::aligned_dynamic_smem();
  init_barrier(&bar);
  if (threadIdx.x != 0) return;
  ptx::tma_prefetch_descriptor(&dst);
  const BoxCoord c = box_coord(g, blockIdx.x);
  load_box(&src, &bar, box, c, g.box_bytes);
  ptx::mbarrier_wait(&bar, 0);
  if constexpr (kReduce) {
    ptx::tma_reduce_add_3d(&dst, box, c.col, c.row, c.batch);
  } else {
    ptx::tma_store_3d(&dst, box, c.col, c.row, c.batch);
  }
  finish_bulk_stores();
}

// Load a box, then copy its shared-memory bytes verbatim to global memory: the swizzled layout
// as the hardware wrote it, for comparison with the Python model.
__global__ void __launch_bounds__(kDumpThreads)
    tma_smem_bytes_kernel(const __grid_constant__ CUtensorMap src, uint8_t* __restrict__ out,
                          const TmaBoxGrid g) {
  __shared__ uint64_t bar;
  uint8_t* box = ptx::aligned_dynamic_smem();
  init_barrier(&bar);
  if (threadIdx.x == 0) load_box(&src, &bar, box, box_coord(g, blockIdx.x), g.box_bytes);
  // Completing the phase makes the TMA's (async-proxy) writes visible to every waiting thread.
  ptx::mbarrier_wait(&bar, 0);
  const uint4* from = reinterpret_cast<const uint4*>(box);
  uint4* to = reinterpret_cast<uint4*>(out + static_cast<int64_t>(blockIdx.x) * g.box_bytes);
  for (uint32_t i = threadIdx.x; i < g.box_bytes / 16; i += blockDim.x) to[i] = from[i];
}

// A cluster of N CTAs per box. CTA r loads rows [r, r + 1) * box_rows / N of the box once from
// global memory and multicasts them to every CTA of the cluster, so each CTA ends up with the
// whole box while global memory is read once; each CTA then stores the box into its own copy
// (dst batch index r * batch + b). Slices sit 1024 bytes apart so each keeps swizzle phase zero.
__global__ void __launch_bounds__(kIssueThreads)
    tma_multicast_kernel(const __grid_constant__ CUtensorMap src,
                         const __grid_constant__ CUtensorMap dst, const TmaBoxGrid g) {
  __shared__ uint64_t bar;
  uint8_t* smem = ptx::aligned_dynamic_smem();
  const uint32_t rank = ptx::cluster_ctarank(), n = ptx::cluster_nctarank();
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, 1);
    ptx::fence_mbarrier_init();
  }
  // Peers write into this CTA's shared memory and signal its barrier: it must be initialised
  // cluster-wide before any CTA issues its load.
  ptx::cluster_sync();
  if (threadIdx.x == 0) {
    const BoxCoord c = box_coord(g, blockIdx.x / n);
    const int32_t slice_rows = g.box_rows / static_cast<int32_t>(n);
    const uint32_t slice_bytes = g.box_bytes / n;
    const uint32_t slice_pitch = (slice_bytes + 1023) / 1024 * 1024;
    const uint16_t all_ctas = static_cast<uint16_t>((1u << n) - 1);
    // This CTA issues one slice but receives all n: it expects the whole box. A peer's slice may
    // land before this arrive; the transaction count then runs negative, which the phase allows.
    ptx::mbarrier_arrive_expect_tx(&bar, g.box_bytes);
    ptx::tma_load_3d_multicast(&src, &bar, smem + rank * slice_pitch, c.col,
                               c.row + static_cast<int32_t>(rank) * slice_rows, c.batch, all_ctas);
    ptx::mbarrier_wait(&bar, 0);
    const int32_t copy = static_cast<int32_t>(rank) * g.batch + c.batch;
    for (uint32_t s = 0; s < n; ++s)
      ptx::tma_store_3d(&dst, smem + s * slice_pitch, c.col,
                        c.row + static_cast<int32_t>(s) * slice_rows, copy);
    finish_bulk_stores();
  }
  // No CTA leaves while its cluster peers may still address its shared memory.
  ptx::cluster_sync();
}

template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, int64_t ctas, int threads, uint32_t smem, int cluster,
                   cudaStream_t stream, const Args&... args) {
  if (ctas < 1 || ctas > INT32_MAX) return cudaErrorInvalidConfiguration;
  if (smem > kDefaultSmemCap) {
    // Always the same (maximal) value, so concurrent launches with other box sizes cannot race.
    // NOTES: the opt-in limit counts static shared memory too (the kernels' mbarrier, 16 bytes
    // per ptxas): asking for the whole 227 KB as dynamic memory fails with InvalidValue.
    cudaFuncAttributes fa = {};
    cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return e;
    const uint32_t dynamic_cap =
        static_cast<uint32_t>(kSmemLimitBytes) - static_cast<uint32_t>(fa.sharedSizeBytes);
    if (smem > dynamic_cap) return cudaErrorInvalidValue;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_cap);
    if (e != cudaSuccess) return e;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas), 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

}  // namespace

cudaError_t launch_tma_copy(const CUtensorMap& src, const CUtensorMap& dst, const TmaBoxGrid& g,
                            cudaStream_t stream) {
  return launch(tma_store_back_kernel<false>, g.boxes(), kIssueThreads,
                tma_box_smem_bytes(g.box_bytes), 1, stream, src, dst, g);
}

cudaError_t launch_tma_reduce_add(const CUtensorMap& src, const CUtensorMap& dst,
                                  const TmaBoxGrid& g, cudaStream_t stream) {
  return launch(tma_store_back_kernel<true>, g.boxes(), kIssueThreads,
                tma_box_smem_bytes(g.box_bytes), 1, stream, src, dst, g);
}

cudaError_t launch_tma_smem_bytes(const CUtensorMap& src, uint8_t* out, const TmaBoxGrid& g,
                                  cudaStream_t stream) {
  if (g.box_bytes % 16 != 0) return cudaErrorInvalidValue;
  return launch(tma_smem_bytes_kernel, g.boxes(), kDumpThreads, tma_box_smem_bytes(g.box_bytes),
                1, stream, src, out, g);
}

cudaError_t launch_tma_multicast(const CUtensorMap& src, const CUtensorMap& dst,
                                 const TmaBoxGrid& g, int cluster_size, cudaStream_t stream) {
  if ((cluster_size != 2 && cluster_size != 4) || g.box_rows % cluster_size != 0)
    return cudaErrorInvalidValue;
  return launch(tma_multicast_kernel, g.boxes() * cluster_size, kIssueThreads,
                tma_multicast_smem_bytes(g.box_bytes, cluster_size), cluster_size, stream, src,
                dst, g);
}

}  // namespace jax_hopper
