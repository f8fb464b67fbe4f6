// Host-side launch of one GEMM kernel instance: shared-memory opt-in, a persistent grid sized
// by how many clusters fit on the device and planned by cuda/stream_k.h, cluster dims through
// cudaLaunchKernelEx.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/sm90_gemm.h"
#include "cuda/sm90_gemm_kernel.cuh"

namespace jax_hopper {

template <DType TIN, int BM, int BN, int BK, int STAGES, bool A_MN, bool B_MN, bool GATED>
cudaError_t launch_sm90_gemm(const GemmLaunch& l) {
  using Smem = GemmSmem<BM, BN, BK, STAGES>;
  static_assert(Smem::kTotal == sm90_gemm_smem_bytes(BM, BN, BK, STAGES), "smem formula");
  auto kernel = sm90_gemm_kernel<TIN, BM, BN, BK, STAGES, A_MN, B_MN, GATED>;
  const GemmParams& p = *l.params;

  // Per-device state: the >48 KB shared-memory opt-in and the number of co-resident clusters
  // (one entry per cluster size 1, 2). Computed once; the handler then launches the same work
  // every time, which is what CUDA-graph capture needs.
  constexpr int kMaxDevices = 64;
  static std::atomic<int> resident[kMaxDevices][3];
  if (l.device < 0 || l.device >= kMaxDevices) return cudaErrorInvalidDevice;
  const int csize = p.cluster_m * p.cluster_n;
  if (csize < 1 || csize > 2) return cudaErrorInvalidConfiguration;

  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = csize;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(kGemmThreads, 1, 1);
  cfg.dynamicSmemBytes = Smem::kTotal;
  cfg.stream = l.stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;

  int clusters = resident[l.device][csize].load(std::memory_order_relaxed);
  if (clusters == 0) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Smem::kTotal);
    if (e != cudaSuccess) return e;
    if (csize > 1) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 0);
      if (e != cudaSuccess) return e;
    }
    int sms = 0;
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, l.device);
    if (e != cudaSuccess) return e;
    cfg.gridDim = dim3(sms - sms % csize, 1, 1);
    e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (e != cudaSuccess) return e;
    if (clusters < 1) return cudaErrorInvalidConfiguration;
    resident[l.device][csize].store(clusters, std::memory_order_relaxed);
  }

  const int64_t cluster_tiles =
      sm90_gemm_cluster_tiles(BM, BN, p.cluster_m, p.cluster_n, p.batch, p.m, product_cols(p));
  const int64_t slot_bytes = sm90_gemm_slot_bytes(BM, BN);
  const int64_t slots = l.workspace_bytes / slot_bytes;
  GemmParams planned = p;
  planned.plan = plan_stream_k(cluster_tiles, (p.k + BK - 1) / BK, clusters,
                               static_cast<int32_t>(slots / csize));
  planned.partials = static_cast<float*>(l.workspace);
  planned.partial_ready =
      reinterpret_cast<int32_t*>(static_cast<uint8_t*>(l.workspace) + slots * (slot_bytes - 8));
  if (planned.plan.sk_clusters > 0) {
    // XLA's buffer holds garbage; a partial is ready only once its CTA says so in this launch.
    const cudaError_t e = cudaMemsetAsync(planned.partial_ready, 0,
                                          static_cast<size_t>(planned.plan.sk_clusters) * csize * 8,
                                          l.stream);
    if (e != cudaSuccess) return e;
  }
  cfg.gridDim = dim3(static_cast<unsigned>(planned.plan.grid_clusters * csize), 1, 1);
  return cudaLaunchKernelEx(&cfg, kernel, planned, *l.a, *l.b, *l.d, *l.r);
}

}  // namespace jax_hopper
