// The nanobind module: FFI handler capsules for jax.ffi.register_ffi_target, the compiled GEMM
// instance list so Python can check it against jax_hopper/gemm/configs.py, the stream-K work
// plan the kernels follow (so CPU tests can check it), and the workspace size it needs.
#include <nanobind/nanobind.h>

#include <cuda_runtime.h>

#include "cuda/sm90_gemm.h"
#include "cuda/stream_k.h"
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
  m.def("stream_k_plan", [](int64_t tiles, int32_t k_blocks, int32_t resident_clusters,
                            int32_t max_sk_clusters) {
    const jax_hopper::StreamKPlan s =
        jax_hopper::plan_stream_k(tiles, k_blocks, resident_clusters, max_sk_clusters);
    // Per launched cluster, its units in order as (tile, k_begin, k_end, collects_from), where
    // collects_from lists the clusters whose partials the unit adds.
    nb::list clusters;
    for (int32_t c = 0; c < s.grid_clusters; ++c) {
      nb::list units;
      jax_hopper::WorkList work(s, c);
      for (jax_hopper::WorkUnit u; work.next(s, &u);) {
        nb::list from;
        if (jax_hopper::collects_partials(s, u))
          for (int32_t o = c + 1; o < jax_hopper::partials_end(s, c, u); ++o) from.append(o);
        units.append(nb::make_tuple(u.tile, u.k_begin, u.k_end, from));
      }
      clusters.append(units);
    }
    nb::dict d;
    d["grid_clusters"] = s.grid_clusters;
    d["dp_tiles"] = s.dp_tiles;
    d["sk_clusters"] = s.sk_clusters;
    d["units"] = clusters;
    return d;
  });
  m.def("gemm_workspace_bytes", &jax_hopper::sm90_gemm_workspace_bytes, nb::arg("block_m"),
        nb::arg("block_n"), nb::arg("block_k"), nb::arg("cluster_m"), nb::arg("cluster_n"),
        nb::arg("batch"), nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("sms"));
  m.def("cuda_runtime_version", []() { return CUDART_VERSION; });
}
