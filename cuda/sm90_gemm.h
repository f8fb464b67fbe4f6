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
  // Stream-K workspace (the custom call's scratch result): workspace_bytes / sm90_gemm_slot_bytes
  // slots, then their flags.
  void* workspace;
  int64_t workspace_bytes;
};

using GemmLaunchFn = cudaError_t (*)(const GemmLaunch&);

// Defined in cuda/sm90_gemm_launch.cuh; instantiated only for the configurations listed in
// jax_hopper/gemm/configs.py (generated sources, see CMakeLists.txt).
template <DType TIN, int BM, int BN, int BK, int STAGES, bool A_MN, bool B_MN>
cudaError_t launch_sm90_gemm(const GemmLaunch& l);

// Bytes of one stream-K workspace slot: a CTA's fp32 partial tile and its two consumer
// warpgroups' ready flags. jax_hopper/gemm/config.py sizes the workspace with the same formula.
constexpr int64_t sm90_gemm_slot_bytes(int bm, int bn) { return int64_t(bm) * bn * 4 + 8; }

// Shared memory one instance needs, for the handler's error messages and Python's checks.
constexpr int sm90_gemm_smem_bytes(int bm, int bn, int bk, int stages) {
  return stages * (bm + bn) * bk * 2 + 2 * 16384 + (2 * stages + 2) * 8 + 1024;
}

}  // namespace jax_hopper
