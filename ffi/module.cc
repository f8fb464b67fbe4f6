// The nanobind module: FFI handler capsules for jax.ffi.register_ffi_target, and the compiled
// GEMM instance list so Python can check it against jax_hopper/gemm/configs.py.
#include <nanobind/nanobind.h>

#include <cuda_runtime.h>

#include "cuda/sm90_gemm.h"
#include "ffi/handlers.h"
#include "sm90_gemm_instances.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_jax_hopper, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jax_hopper_gemm"] = capsule(jax_hopper::GemmHandler);
    d["jax_hopper_tma_copy"] = capsule(jax_hopper::TmaCopyHandler);
    d["jax_hopper_tma_smem_bytes"] = capsule(jax_hopper::TmaSmemBytesHandler);
    d["jax_hopper_tma_multicast"] = capsule(jax_hopper::TmaMulticastHandler);
    d["jax_hopper_tma_reduce_add"] = capsule(jax_hopper::TmaReduceAddHandler);
    return d;
  });
  m.def("gemm_instances", []() {
    nb::list out;
    for (const jax_hopper::GemmInstance& g : jax_hopper::kGemmInstances) {
      nb::dict d;
      d["name"] = g.name;
      d["dtype"] = g.dtype == jax_hopper::DType::kBF16 ? "bfloat16" : "float16";
      d["block_m"] = g.bm;
      d["block_n"] = g.bn;
      d["block_k"] = g.bk;
      d["stages"] = g.stages;
      d["a_mn_major"] = g.a_mn;
      d["b_mn_major"] = g.b_mn;
      d["smem_bytes"] = jax_hopper::sm90_gemm_smem_bytes(g.bm, g.bn, g.bk, g.stages);
      out.append(d);
    }
    return out;
  });
  m.def("cuda_runtime_version", []() { return CUDART_VERSION; });
}
