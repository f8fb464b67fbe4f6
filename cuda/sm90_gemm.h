// Host-visible interface of the GEMM kernels (plain C++: the FFI handler includes it).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/dtype.h"
#include "cuda/sm90_gemm_params.h"

namespace jax_hopper {

struct GemmLaunch {
  const GemmParams* params;
  const CUtensorMap* a;
  const CUtensorMap* b;
  const CUtensorMap* d;
  const CUtensorMap* r;  // the residual; any valid map when there is none (not read)
  int device;
  cudaStream_t stream;
  // Stream-K workspace (the custom call's scratch result), sm90_gemm_workspace_bytes() big.
  void* workspace;
  int64_t workspace_bytes;
};

using GemmLaunchFn = cudaError_t (*)(const GemmLaunch&);

// Defined in cuda/sm90_gemm_launch.cuh; instantiated only for the configurations listed in
// jax_hopper/gemm/configs.py (generated sources, see CMakeLists.txt).
template <DType TIN, int BM, int BN, int BK, int STAGES, bool A_MN, bool B_MN, bool GATED>
cudaError_t launch_sm90_gemm(const GemmLaunch& l);

// Bytes of one stream-K workspace slot: a CTA's fp32 partial tile and its two consumer
// warpgroups' ready flags.
constexpr int64_t sm90_gemm_slot_bytes(int bm, int bn) { return int64_t(bm) * bn * 4 + 8; }

// Output tiles of a problem, in cluster tiles (what the persistent grid hands out).
constexpr int64_t sm90_gemm_cluster_tiles(int bm, int bn, int cluster_m, int cluster_n,
                                          int64_t batch, int64_t m, int64_t n) {
  return ((m + bm - 1) / bm + cluster_m - 1) / cluster_m *
         (((n + bn - 1) / bn + cluster_n - 1) / cluster_n) * batch;
}

// Bytes of the stream-K workspace for a problem: one slot per CTA of the clusters that
// plan_stream_k splits tiles among on a GPU of `sms` SMs, so nothing when it splits nothing.
// The Python lowering sizes the custom call's scratch result with this (for 132 SMs); the
// launcher plans again with the real resident cluster count and never splits among more
// clusters than the workspace has slots for.
inline int64_t sm90_gemm_workspace_bytes(int bm, int bn, int bk, int cluster_m, int cluster_n,
                                         int64_t batch, int64_t m, int64_t n, int64_t k,
                                         int sms) {
  const int csize = cluster_m * cluster_n;
  const int32_t clusters = sms / csize;
  const StreamKPlan s =
      plan_stream_k(sm90_gemm_cluster_tiles(bm, bn, cluster_m, cluster_n, batch, m, n),
                    static_cast<int32_t>((k + bk - 1) / bk), clusters, clusters);
  return int64_t(s.sk_clusters) * csize * sm90_gemm_slot_bytes(bm, bn);
}

// Shared memory one instance needs, for the handler's error messages and Python's checks.
constexpr int sm90_gemm_smem_bytes(int bm, int bn, int bk, int stages) {
  return stages * (bm + bn) * bk * 2 + 2 * 16384 + (2 * stages + 2) * 8 + 1024;
}

}  // namespace jax_hopper
