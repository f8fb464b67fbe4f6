// Host side of one compiled GEMM kernel: its GemmKernelInfo (what the catalog table lists), the
// per-device set-up (shared-memory opt-in, how many clusters fit at once), and the launch: the
// policies turn GemmArgs into the kernel's Params, then cudaLaunchKernelEx with the cluster dims
// on XLA's stream. Included by each generated instance (jax_hopper/kernels/codegen.py).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/gemm/epilogue/store.cuh"
#include "cuda/gemm/gemm.h"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/mainloop/ss.cuh"
#include "cuda/gemm/mainloop/ss_promoted.cuh"
#include "cuda/gemm/mainloop/ss_shifted.cuh"
#include "cuda/gemm/schedule/cooperative.cuh"
#include "cuda/gemm/schedule/lean.cuh"
#include "cuda/gemm/schedule/pingpong.cuh"
#include "cuda/gemm/scheduler/last_arrival_split.cuh"
#include "cuda/gemm/scheduler/grouped.cuh"
#include "cuda/gemm/scheduler/grouped_contraction.cuh"
#include "cuda/gemm/scheduler/persistent.cuh"
#include "cuda/gemm/scheduler/stream_k.cuh"

namespace jax_hopper {

template <class Kernel>
int64_t gemm_product_cols(int64_t n) {
  // A tile of BN product columns writes kOutCols output columns (fewer for the gated unit).
  return n * Kernel::Epilogue::BN / Kernel::Epilogue::kOutCols;
}

// NOTES: programmatic dependent launch (the kernel launched with programmatic stream
// serialization, griddepcontrol.wait after its barrier set-up, launch_dependents at once) was
// measured on chained calls from an XLA program: 1.000-1.014x on decode shapes, 0.995-1.009x
// elsewhere, geomean 1.0045 (H100, 2026-11-24, ab_h100_20261124_pdl.json): within the noise.
// Those chained calls are bound by the host, so it was measured again on the device time
// (timing.device_time, H100, 2026-11-27, ab_h100_20261127_pdl_device.json): 0.998-1.014x over
// 9 shapes from 1 x 4096 x 4096 to 4096^3, geomean 1.003: the kernels already run back to
// back (gaps under 0.2 us), and what a short kernel spends before its first data is mostly
// its first loads (set-up 0.22 us, first data 1.18 us: ncu_h100_20261125_cold_code.txt),
// which have to wait for the previous grid's end anyway. Not kept.
template <class Kernel>
cudaLaunchConfig_t gemm_launch_config(int cluster_size, cudaStream_t stream,
                                      cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster_size;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(Kernel::kThreads, 1, 1);
  cfg.dynamicSmemBytes = Kernel::kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Per-device state, computed once: the >48 KB shared-memory opt-in and the number of
// co-resident clusters for cluster sizes 1 and 2. The launch then does the same work every
// time, which is what CUDA-graph capture needs.
template <class Kernel>
GemmStatus gemm_resident_clusters(int device, int cluster_size, int* clusters) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> resident[kMaxDevices][3];
  if (device < 0 || device >= kMaxDevices)
    return GemmStatus::cuda("device ordinal", cudaErrorInvalidDevice);
  if (cluster_size < 1 || cluster_size > 2)
    return GemmStatus::invalid("clusters of " + std::to_string(cluster_size) +
                               " CTAs are not supported (1 or 2)");
  *clusters = resident[device][cluster_size].load(std::memory_order_relaxed);
  if (*clusters > 0) return {};
  auto kernel = sm90_gemm_kernel<Kernel>;
  int previous = 0;
  cudaError_t e = cudaGetDevice(&previous);
  if (e != cudaSuccess) return GemmStatus::cuda("cudaGetDevice", e);
  if (previous != device && (e = cudaSetDevice(device)) != cudaSuccess)
    return GemmStatus::cuda("cudaSetDevice", e);
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           Kernel::kSmemBytes);
  if (e == cudaSuccess && cluster_size > 1)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 0);
  int sms = 0;
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) {
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = gemm_launch_config<Kernel>(cluster_size, nullptr, &attr);
    cfg.gridDim = dim3(sms - sms % cluster_size, 1, 1);
    e = cudaOccupancyMaxActiveClusters(clusters, kernel, &cfg);
  }
  if (previous != device) cudaSetDevice(previous);
  if (e != cudaSuccess) return GemmStatus::cuda("querying the resident clusters", e);
  if (*clusters < 1) return GemmStatus::cuda("no cluster fits", cudaErrorInvalidConfiguration);
  resident[device][cluster_size].store(*clusters, std::memory_order_relaxed);
  return {};
}

template <class Kernel>
GemmStatus launch_gemm(const GemmArgs& g) {
  using Mainloop = typename Kernel::Mainloop;
  using Epilogue = typename Kernel::Epilogue;
  using Scheduler = typename Kernel::Scheduler;
  typename Kernel::Params p;
  p.cluster_m = g.cluster_m;
  p.cluster_n = g.cluster_n;
  std::string e = Mainloop::host_params(g, &p.mainloop);
  if (e.empty()) e = Epilogue::host_params(g, &p.epilogue);
  if (e.empty())
    e = Scheduler::host_params(g, gemm_product_cols<Kernel>(g.n), Mainloop::BK, &p.scheduler);
  if (e.empty() && !Mainloop::kPadsKBlocks &&
      int64_t(g.plan.k_blocks) * Mainloop::BK >= int64_t(g.k) + Mainloop::BK)
    e = "the plan pads K with k-blocks of zeros, which this kernel's mainloop cannot read";
  if (!e.empty()) return GemmStatus::invalid(e);

  const int csize = g.cluster_m * g.cluster_n;
  int resident = 0;
  GemmStatus s = gemm_resident_clusters<Kernel>(g.device, csize, &resident);
  if (!s.ok()) return s;
  if (Scheduler::needs_coresidency(p.scheduler) && Scheduler::grid_clusters(p.scheduler) > resident)
    return GemmStatus::invalid("the stream-K plan needs " +
                               std::to_string(Scheduler::grid_clusters(p.scheduler)) +
                               " clusters at once; this GPU holds " + std::to_string(resident) +
                               " (was the call lowered for another GPU?)");
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = gemm_launch_config<Kernel>(csize, g.stream, &attr);
  cfg.gridDim = dim3(static_cast<unsigned>(Scheduler::grid_clusters(p.scheduler) * csize), 1, 1);
  // A grid without the cluster attribute runs as clusters of one CTA all the same (PTX: every
  // CTA is in a cluster; %cluster_nctarank reads 1), so one-CTA clusters launch as a plain grid:
  // 0.99-1.09x per chained call on decode shapes against the attribute (H100, 2026-11-25,
  // ab_h100_20261125_plain_launch.json). The occupancy query keeps it (it needs a cluster size).
  if (csize == 1) cfg.numAttrs = 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, sm90_gemm_kernel<Kernel>, p);
  if (err != cudaSuccess) return GemmStatus::cuda("cudaLaunchKernelEx", err);
  return {};
}

template <class Kernel>
constexpr GemmKernelInfo gemm_kernel_info(const char* name, GemmFamily family, DType a_dtype,
                                          DType b_dtype, GemmSchedule schedule, bool a_mn_major,
                                          bool b_mn_major,
                                          int32_t min_piece_blocks = kMinPieceBlocks,
                                          bool last_arrival_split = false,
                                          bool split_tail = false) {
  using M = typename Kernel::Mainloop;
  return GemmKernelInfo{name, family, a_dtype, b_dtype, schedule, M::BM, M::BN, M::BK, M::STAGES,
                        Kernel::kCtasPerSm, a_mn_major,
                        b_mn_major, Kernel::kSmemBytes, Kernel::Scheduler::kSlotBytes,
                        min_piece_blocks, last_arrival_split, split_tail, M::kPadsKBlocks,
                        &gemm_product_cols<Kernel>, &gemm_resident_clusters<Kernel>,
                        &launch_gemm<Kernel>};
}

}  // namespace jax_hopper
