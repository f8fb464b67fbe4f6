// What the GEMM family handlers (matmul.cc, glu.cc) share: the attributes every GEMM custom call
// carries, decoded into one struct, the binding, and run_gemm, which validates the attributes,
// looks the kernel up by name in the generated catalog (gemm_catalog.h) and launches it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "cuda/gemm/gemm.h"
#include "ffi/common.h"

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

// The operand shapes of one family: fills args.a/b/out/residual, m, n, k, batch from the
// buffers (`kernel` says the operand majors) or says why they do not fit.
using GemmShapeCheck = ffi::Error (*)(const GemmKernelInfo& kernel, const ffi::AnyBuffer& a,
                                      const ffi::AnyBuffer& b, const ffi::AnyBuffer& bias,
                                      const ffi::AnyBuffer& residual, const ffi::AnyBuffer& out,
                                      GemmArgs* args);

// `preset`: arguments the family's handler has already filled in (the grouped tile table).
ffi::Error run_gemm(GemmFamily family, const char* op, GemmShapeCheck check, cudaStream_t stream,
                    ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer bias,
                    ffi::AnyBuffer residual, ffi::Result<ffi::AnyBuffer> out,
                    ffi::Result<ffi::AnyBuffer> workspace, const GemmAttrs& attrs,
                    const GemmArgs* preset = nullptr);

// (batch, rows, cols) of a rank-3 buffer.
inline Array3 array3(const ffi::AnyBuffer& x) {
  auto d = x.dimensions();
  return Array3{x.untyped_data(), d[0], d[1], d[2]};
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

// The binding of every GEMM handler: inputs a, b, bias (float32, (0,) if none), residual
// ((0, 0, 0) if none); results out (batch, m, n) and the stream-K workspace (uint8).
inline auto gemm_binding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()
      .Arg<ffi::AnyBuffer>()
      .Arg<ffi::AnyBuffer>()
      .Arg<ffi::AnyBuffer>()
      .Ret<ffi::AnyBuffer>()
      .Ret<ffi::AnyBuffer>()
      .Attrs<GemmAttrs>();
}

}  // namespace jax_hopper
