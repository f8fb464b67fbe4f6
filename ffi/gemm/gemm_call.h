// What the GEMM family handlers (matmul.cc, glu.cc) share: the attributes every GEMM custom call
// carries, decoded into one struct, the binding, and run_gemm, which validates the attributes,
// looks the kernel up by name in the generated catalog (gemm_catalog.h) and launches it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "cuda/gemm/gemm.h"
#include "ffi/common.h"
#include "ffi/gemm/split_flags.h"

namespace jax_hopper {

// Attributes of a GEMM custom call (jax_hopper/gemm/primitive.py, _cuda_lowering).
struct GemmAttrs {
  std::string_view kernel;  // a name from jax_hopper/kernels/catalog.py
  int64_t cluster_m, cluster_n, group_size, raster_n;
  int64_t activation;
  float alpha, beta;
  // The work plan made at lowering (cuda/gemm/scheduler/stream_k_plan.h, StreamKPlan).
  int64_t grid_clusters, dp_tiles, sk_clusters, k_blocks, sk_quota, sk_extra;
};

// The problem one family's operands pose: M, N (output columns), K, the batch, and the float32
// bias it takes (bias_count entries, bias_rule in the message when it does not fit); M and N
// are the kernel's tile rows and columns, which out_transposed (the swap-AB family) says are
// the output's columns and rows.
struct GemmShape {
  int64_t m, n, k, batch;
  int64_t bias_count;
  const char* bias_rule;
  bool out_transposed = false;
};

// A family's shape check: from the arrays run_gemm put in `g` (a, b, out, residual; `kernel`
// says the operand majors), the problem, or why the operands do not fit.
using GemmShapeCheck = ffi::Error (*)(const GemmKernelInfo& kernel, const GemmArgs& g,
                                      GemmShape* shape);

// The attributes' own rules (activation code, cluster shape, plan fields in int32), checked
// before anything is launched; `op` names the call in the message.
ffi::Error check_attrs(const char* op, const GemmAttrs& attrs);

// `flags`: the call's stream-K ready flags (split_flags.h); `preset`: arguments the family's
// handler has already filled in (the grouped tile table).
ffi::Error run_gemm(GemmFamily family, const char* op, GemmShapeCheck check, cudaStream_t stream,
                    SplitFlags* flags, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer bias,
                    ffi::AnyBuffer residual, ffi::Result<ffi::AnyBuffer> out,
                    ffi::Result<ffi::AnyBuffer> workspace, const GemmAttrs& attrs,
                    const GemmArgs* preset = nullptr);

// (batch, rows, cols) of a rank-3 buffer.
inline Array3 array3(const ffi::AnyBuffer& x) {
  auto d = x.dimensions();
  return Array3{x.untyped_data(), d[0], d[1], d[2]};
}

// An fp8 scale array: float32 in device memory (read by the kernel, never by the host); `rank`
// 1 (per tensor: one element, or one per batch entry) or 3 (per block). Its size against the
// problem is checked by the kernel's Scaling policy (cuda/gemm/mainloop/scaling.cuh).
inline ffi::Error read_scales(const char* op, const char* name, const ffi::AnyBuffer& x,
                              int rank, Array3* out) {
  const auto d = x.dimensions();
  const bool ok = x.element_type() == ffi::DataType::F32 &&
                  static_cast<int>(d.size()) == rank && x.element_count() > 0;
  if (!ok)
    return invalid(std::string(op) + ": " + name + " must be " +
                   (rank == 1 ? "a (1,) or (batch,) float32 array" : "a rank-3 float32 array"));
  *out = rank == 1 ? Array3{x.untyped_data(), static_cast<int64_t>(x.element_count()), 1, 1}
                   : array3(x);
  return ffi::Error::Success();
}

}  // namespace jax_hopper

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    ::jax_hopper::GemmAttrs, ::xla::ffi::StructMember<std::string_view>("kernel"),
    ::xla::ffi::StructMember<int64_t>("cluster_m"), ::xla::ffi::StructMember<int64_t>("cluster_n"),
    ::xla::ffi::StructMember<int64_t>("group_size"), ::xla::ffi::StructMember<int64_t>("raster_n"),
    ::xla::ffi::StructMember<int64_t>("activation"), ::xla::ffi::StructMember<float>("alpha"),
    ::xla::ffi::StructMember<float>("beta"), ::xla::ffi::StructMember<int64_t>("grid_clusters"),
    ::xla::ffi::StructMember<int64_t>("dp_tiles"), ::xla::ffi::StructMember<int64_t>("sk_clusters"),
    ::xla::ffi::StructMember<int64_t>("k_blocks"), ::xla::ffi::StructMember<int64_t>("sk_quota"),
    ::xla::ffi::StructMember<int64_t>("sk_extra"));

namespace jax_hopper {

// The binding of every GEMM handler: the stream, the call's SplitFlags (made by GemmInstantiate,
// split_flags.h), inputs a, b, bias (float32, (0,) if none), residual
// ((0, 0, 0) if none), then kExtraInputs more of the family's own (the grouped family's tile
// table); results out (batch, m, n) and the stream-K workspace (uint8).
// (Bindings cannot be moved: each step is applied to the previous one's temporary.)
template <int kExtraInputs, class Binding>
auto finish_gemm_binding(Binding&& b) {
  if constexpr (kExtraInputs > 0)
    return finish_gemm_binding<kExtraInputs - 1>(
        std::forward<Binding>(b).template Arg<ffi::AnyBuffer>());
  else
    return std::forward<Binding>(b)
        .template Ret<ffi::AnyBuffer>()
        .template Ret<ffi::AnyBuffer>()
        .template Attrs<GemmAttrs>();
}

template <int kExtraInputs = 0>
auto gemm_binding() {
  return finish_gemm_binding<kExtraInputs>(ffi::Ffi::Bind()
                                               .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                               .Ctx<ffi::State<SplitFlags>>()
                                               .Arg<ffi::AnyBuffer>()
                                               .Arg<ffi::AnyBuffer>()
                                               .Arg<ffi::AnyBuffer>()
                                               .Arg<ffi::AnyBuffer>());
}

}  // namespace jax_hopper
