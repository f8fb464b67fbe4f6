// Host-visible interface of the GEMM kernels (plain C++: the FFI handlers and the nanobind module
// include it). A handler fills GemmArgs from XLA's buffers and attributes, finds the kernel's
// GemmKernelInfo by name (generated gemm_catalog.h) and calls its launch function; everything
// that depends on the kernel's internals (tensor-map boxes, shared memory, the stream-K
// workspace layout) is the kernel's policies' business (cuda/gemm/launch.cuh).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "jax_hopper_constants.h"

namespace jax_hopper {

// A row-major (batch, rows, cols) array in device memory.
struct Array3 {
  void* data;
  int64_t batch, rows, cols;
};

struct GemmArgs {
  // a: (Ba, M, K), or MN-major (Ba, K, M); b: (Bb, N, K), or MN-major (Bb, K, N), or for the
  // glu family the (K, 2, N) weight; Ba, Bb: 1 (shared) or `batch`.
  Array3 a, b;
  Array3 out;       // (batch, M, N) in out_dtype
  Array3 residual;  // (batch or 1, M, N) in out_dtype; data == nullptr when there is none
  const float* bias;  // (N,), or (2, N) for glu; nullptr when there is none
  DType out_dtype;
  int32_t m, n, k, batch;  // n: output columns
  Activation activation;
  float alpha, beta;
  int32_t cluster_m, cluster_n;  // CTAs per cluster along M and N (one of them 1)
  int32_t group_size, raster_n;  // tile order: groups of group_size along M (or N)
  StreamKPlan plan;              // made by gemm_plan (at lowering), checked by the launcher
  void* workspace;               // the stream-K workspace, plan_workspace_bytes(...) big
  int64_t workspace_bytes;
  // The split's ready flags (split_flag_count(plan, ...) of them): zero before the launch and
  // left zero after it, so they outlive the call (ffi/gemm/split_flags.h) and need no clearing
  // launch; nullptr when the plan splits nothing.
  int32_t* split_flags;
  int64_t split_flag_count;
  // The grouped family: the tile table (cuda/gemm/scheduler/grouped.cuh) and its slots; b's
  // batch entries are the groups, a and out have one.
  const int32_t* group_tiles;
  int32_t tile_slots;
  // The grouped contraction: where each group's rows end (prefix sums, (batch,) int32;
  // cuda/gemm/scheduler/grouped_contraction.cuh), and where they start ((batch,) int32), or
  // nullptr where each starts at the end of the one before.
  const int32_t* group_ends;
  const int32_t* group_starts;
  // The fp8 families' float32 scales in device memory: per tensor, (1, 1, 1) each or (batch, 1,
  // 1) for one per batch entry; per block
  // (fp8_block), a (Ba, M, ceil(K/128)) and b (Bb, ceil(N/128), ceil(K/128)), Ba and Bb 1
  // (shared) or `batch` (cuda/gemm/mainloop/scaling.cuh).
  Array3 a_scale, b_scale;
  int device;
  cudaStream_t stream;
};

// What a host-side step reports: ok, an argument the kernel cannot take, or a CUDA error.
struct GemmStatus {
  enum Code { kOk, kInvalid, kCuda } code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
  static GemmStatus invalid(std::string m) { return {kInvalid, std::move(m)}; }
  static GemmStatus cuda(const char* what, cudaError_t e) {
    return {kCuda, std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
  }
};

// One compiled kernel (defined by its generated translation unit, listed in gemm_catalog.h).
struct GemmKernelInfo {
  const char* name;
  GemmFamily family;
  DType dtype, b_dtype;  // of a and of b
  GemmSchedule schedule;
  int32_t block_m, block_n, block_k, stages;
  int32_t ctas_per_sm;  // resident at once on an SM (the launch bounds)
  bool a_mn_major, b_mn_major;
  int32_t smem_bytes;
  int64_t slot_bytes;  // stream-K workspace bytes per CTA that takes a split range
  int32_t min_piece_blocks;  // the shortest piece of a small-M split (stream_k_plan.h)
  bool last_arrival_split;       // splits by plan_last_arrival_split (LastArrivalSplitScheduler)
  bool split_tail;               // and splits a partial last wave so (plan_split_tail)
  bool pads_k_blocks;            // its mainloop reads k-blocks past K as zeros (kPadsKBlocks)
  // Product columns the tiles cover for `n` output columns (glu: gate and up, 2n).
  int64_t (*product_cols)(int64_t n);
  // Clusters of `cluster_size` CTAs that fit on `device` at once (cached per device).
  GemmStatus (*resident_clusters)(int device, int cluster_size, int* clusters);
  GemmStatus (*launch)(const GemmArgs& args);
};

// Cluster tiles along one dimension: tiles of `block` over `extent`, grouped `cluster` at a time.
constexpr int64_t cluster_tiles_1d(int64_t extent, int64_t block, int64_t cluster) {
  return ((extent + block - 1) / block + cluster - 1) / cluster;
}

// The work plan of a problem on `resident` co-resident clusters: whole tiles round robin, and
// with stream_k the split of the last partial wave (or of K, for fewer tiles than clusters).
inline StreamKPlan gemm_plan(const GemmKernelInfo& kernel, int64_t batch, int64_t m, int64_t n,
                             int64_t k, int cluster_m, int cluster_n, bool stream_k,
                             int resident) {
  const int64_t cluster_tiles = cluster_tiles_1d(m, kernel.block_m, cluster_m) *
                                cluster_tiles_1d(kernel.product_cols(n), kernel.block_n, cluster_n) *
                                batch;
  const int32_t k_blocks = static_cast<int32_t>((k + kernel.block_k - 1) / kernel.block_k);
  // A kernel without a workspace slot (PersistentScheduler) computes every tile whole.
  const bool split = stream_k && kernel.slot_bytes > 0;
  if (split && kernel.last_arrival_split)
    return plan_last_arrival_split(cluster_tiles, k_blocks, resident, kernel.min_piece_blocks,
                                   kernel.pads_k_blocks, kernel.split_tail);
  return plan_stream_k(cluster_tiles, k_blocks, resident, split ? resident : 0,
                       kernel.min_piece_blocks, kMaxSplit, kernel.pads_k_blocks);
}

inline int64_t plan_workspace_bytes(const GemmKernelInfo& kernel, const StreamKPlan& plan,
                                    int cluster_size) {
  return int64_t(plan.sk_clusters) * cluster_size * kernel.slot_bytes;
}

}  // namespace jax_hopper
