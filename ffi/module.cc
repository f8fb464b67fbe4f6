// The nanobind module: FFI handler capsules for jax.ffi.register_ffi_target (and the state type
// for jax.ffi.register_ffi_type), the compiled GEMM kernels (so Python can check them against
// jax_hopper/kernels/catalog.py), the work plan of a call (made once, while it is lowered), and
// the stream-K planner itself for the CPU tests.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "ffi/gemm/split_flags.h"
#include "ffi/handlers.h"
#include "gemm_catalog.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

// A GEMM handler's two targets (jax.ffi.register_ffi_target takes a dict of stages): every GEMM
// custom call keeps its stream-K ready flags as state (ffi/gemm/split_flags.h), made by the
// instantiate stage; `name_split`, for plans that split tiles, also has the initialize stage,
// which allocates and zeroes them. XLA runs an initialize stage before every execution, with a
// call frame of its own (every operand and attribute), so plans that split no tile (and need
// no flags) take `name`, without it (jax_hopper/gemm/primitive.py, gemm_target).
template <typename T>
void add_gemm_targets(nb::dict& d, const char* name, T* execute) {
  nb::dict plain, split;
  plain["instantiate"] = split["instantiate"] = capsule(jax_hopper::GemmInstantiate);
  plain["execute"] = split["execute"] = capsule(execute);
  split["initialize"] = capsule(jax_hopper::GemmInitialize);
  d[name] = plain;
  d[(std::string(name) + "_split").c_str()] = split;
}

nb::dict plan_dict(const jax_hopper::StreamKPlan& s) {
  nb::dict d;
  d["grid_clusters"] = s.grid_clusters;
  d["dp_tiles"] = s.dp_tiles;
  d["sk_clusters"] = s.sk_clusters;
  d["k_blocks"] = s.k_blocks;
  d["sk_quota"] = s.sk_quota;
  d["sk_extra"] = s.sk_extra;
  return d;
}

// plan_dict, and per launched cluster its units in order as (tile, k_begin, k_end,
// collects_from), where collects_from lists the clusters whose partials the unit adds in the
// collector split (stream_k.cuh).
nb::dict plan_with_units(const jax_hopper::StreamKPlan& s) {
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
  nb::dict d = plan_dict(s);
  d["units"] = clusters;
  return d;
}

const jax_hopper::GemmKernelInfo& find(const std::string& kernel) {
  const jax_hopper::GemmKernelInfo* info = jax_hopper::find_gemm_kernel(kernel);
  if (info == nullptr) throw std::invalid_argument("no compiled GEMM kernel named " + kernel);
  return *info;
}

}  // namespace

NB_MODULE(_jax_hopper, m) {
  // FFI types, registered before the targets whose stages use them.
  m.def("types", []() {
    nb::dict d, split_flags;
    split_flags["type_id"] = capsule(&jax_hopper::SplitFlags::id);
    split_flags["type_info"] =
        capsule(const_cast<XLA_FFI_TypeInfo*>(jax_hopper::SplitFlags::type_info()));
    d["jax_hopper_split_flags"] = split_flags;
    return d;
  });
  m.def("registrations", []() {
    nb::dict d;
    add_gemm_targets(d, "jax_hopper_gemm_matmul", jax_hopper::MatmulHandler);
    add_gemm_targets(d, "jax_hopper_gemm_matmul_swap", jax_hopper::MatmulSwapHandler);
    add_gemm_targets(d, "jax_hopper_gemm_matmul_swap_odd", jax_hopper::MatmulSwapOddHandler);
    add_gemm_targets(d, "jax_hopper_gemm_glu", jax_hopper::GluHandler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped", jax_hopper::GroupedHandler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped_glu", jax_hopper::GroupedGluHandler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped_fp8", jax_hopper::GroupedFp8Handler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped_fp8_block", jax_hopper::GroupedFp8BlockHandler);
    d["jax_hopper_grouped_tile_table"] = capsule(jax_hopper::GroupedTileTableHandler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped_contraction",
                     jax_hopper::GroupedContractionHandler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped_contraction_fp8",
                     jax_hopper::GroupedContractionFp8Handler);
    add_gemm_targets(d, "jax_hopper_gemm_grouped_contraction_fp8_block",
                     jax_hopper::GroupedContractionFp8BlockHandler);
    add_gemm_targets(d, "jax_hopper_gemm_fp8", jax_hopper::Fp8Handler);
    add_gemm_targets(d, "jax_hopper_gemm_fp8_block", jax_hopper::Fp8BlockHandler);
    add_gemm_targets(d, "jax_hopper_gemm_fp8_swap", jax_hopper::Fp8SwapHandler);
    add_gemm_targets(d, "jax_hopper_gemm_fp8_block_swap", jax_hopper::Fp8BlockSwapHandler);
    d["jax_hopper_quantize_fp8"] = capsule(jax_hopper::QuantizeFp8Handler);
    d["jax_hopper_transpose_fp8"] = capsule(jax_hopper::TransposeFp8Handler);
    d["jax_hopper_tma_copy"] = capsule(jax_hopper::TmaCopyHandler);
    d["jax_hopper_tma_smem_bytes"] = capsule(jax_hopper::TmaSmemBytesHandler);
    d["jax_hopper_tma_multicast"] = capsule(jax_hopper::TmaMulticastHandler);
    d["jax_hopper_tma_reduce_add"] = capsule(jax_hopper::TmaReduceAddHandler);
    return d;
  });
  m.def("gemm_kernels", []() {
    nb::list out;
    for (const jax_hopper::GemmKernelInfo* k : jax_hopper::kGemmKernels) {
      nb::dict d;
      d["name"] = k->name;
      d["family"] = static_cast<int>(k->family);
      d["dtype"] = static_cast<int>(k->dtype);
      d["b_dtype"] = static_cast<int>(k->b_dtype);
      d["schedule"] = static_cast<int>(k->schedule);
      d["block_m"] = k->block_m;
      d["block_n"] = k->block_n;
      d["block_k"] = k->block_k;
      d["stages"] = k->stages;
      d["ctas_per_sm"] = k->ctas_per_sm;
      d["a_mn_major"] = k->a_mn_major;
      d["b_mn_major"] = k->b_mn_major;
      d["smem_bytes"] = k->smem_bytes;
      d["slot_bytes"] = k->slot_bytes;
      d["pads_k_blocks"] = k->pads_k_blocks;
      out.append(d);
    }
    return out;
  });
  // The lowering plans a call once: how many clusters of the kernel fit on its GPU at a time,
  // then the plan and the workspace it needs, passed to the custom call (the launcher checks).
  m.def("gemm_resident_clusters", [](const std::string& kernel, int cluster_size, int device) {
    int resident = 0;
    const jax_hopper::GemmStatus s =
        find(kernel).resident_clusters(device, cluster_size, &resident);
    if (!s.ok()) throw std::runtime_error(kernel + ": " + s.message);
    return resident;
  });
  m.def("gemm_plan", [](const std::string& kernel, int64_t batch, int64_t m, int64_t n,
                        int64_t k, int cluster_m, int cluster_n, bool stream_k, int resident) {
    const jax_hopper::GemmKernelInfo& info = find(kernel);
    const jax_hopper::StreamKPlan plan =
        jax_hopper::gemm_plan(info, batch, m, n, k, cluster_m, cluster_n, stream_k, resident);
    nb::dict d = plan_dict(plan);
    d["workspace_bytes"] = jax_hopper::plan_workspace_bytes(info, plan, cluster_m * cluster_n);
    return d;
  });
  m.def(
      "stream_k_plan",
      [](int64_t tiles, int32_t k_blocks, int32_t resident_clusters, int32_t max_sk_clusters,
         bool pad_k_blocks) {
        return plan_with_units(jax_hopper::plan_stream_k(
            tiles, k_blocks, resident_clusters, max_sk_clusters, jax_hopper::kMinPieceBlocks,
            jax_hopper::kMaxSplit, pad_k_blocks));
      },
      nb::arg("tiles"), nb::arg("k_blocks"), nb::arg("resident_clusters"),
      nb::arg("max_sk_clusters"), nb::arg("pad_k_blocks") = false);
  m.def(
      "last_arrival_split_plan",
      [](int64_t tiles, int32_t k_blocks, int32_t resident_clusters, int32_t min_piece_blocks,
         bool pad_k_blocks, bool split_tail) {
        return plan_with_units(jax_hopper::plan_last_arrival_split(
            tiles, k_blocks, resident_clusters, min_piece_blocks, pad_k_blocks, split_tail));
      },
      nb::arg("tiles"), nb::arg("k_blocks"), nb::arg("resident_clusters"),
      nb::arg("min_piece_blocks"), nb::arg("pad_k_blocks") = false,
      nb::arg("split_tail") = false);
  m.def("cuda_runtime_version", []() { return CUDART_VERSION; });
}
