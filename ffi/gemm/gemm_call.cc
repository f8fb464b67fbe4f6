#include "ffi/gemm/gemm_call.h"

#include <string>

#include "gemm_catalog.h"

namespace jax_hopper {

ffi::Error check_attrs(const char* op, const GemmAttrs& a) {
  const std::string o(op);
  if (a.activation < 0 || a.activation >= kActivationCount)
    return invalid(o + ": activation code " + std::to_string(a.activation) + " outside 0.." +
                   std::to_string(kActivationCount - 1));
  const bool cluster_ok = (a.cluster_m == 1 && a.cluster_n == 1) ||
                          (a.cluster_m == 2 && a.cluster_n == 1) ||
                          (a.cluster_m == 1 && a.cluster_n == 2);
  if (!cluster_ok)
    return invalid(o + ": cluster (" + std::to_string(a.cluster_m) + ", " +
                   std::to_string(a.cluster_n) + ") must be (1, 1), (2, 1) or (1, 2)");
  if (a.group_size < 1 || a.group_size > 1024)
    return invalid(o + ": group_size " + std::to_string(a.group_size) + " outside 1..1024");
  if (a.raster_n != 0 && a.raster_n != 1) return invalid(o + ": raster_n must be 0 or 1");
  for (int64_t v : {a.grid_clusters, a.dp_tiles, a.sk_clusters, a.k_blocks, a.sk_quota,
                    a.sk_extra})
    if (v < 0 || v > INT32_MAX) return invalid(o + ": a stream-K plan field is out of range");
  return ffi::Error::Success();
}

ffi::Error run_gemm(GemmFamily family, const char* op, GemmShapeCheck check, cudaStream_t stream,
                    SplitFlags* flags, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer bias,
                    ffi::AnyBuffer residual, ffi::Result<ffi::AnyBuffer> out,
                    ffi::Result<ffi::AnyBuffer> workspace, const GemmAttrs& attrs,
                    const GemmArgs* preset) {
  const std::string o(op);
  const GemmKernelInfo* kernel = find_gemm_kernel(attrs.kernel);
  if (kernel == nullptr)
    return invalid(o + ": no compiled kernel named '" + std::string(attrs.kernel) +
                   "' (the extension and jax_hopper.kernels.catalog disagree: rebuild)");
  if (kernel->family != family)
    return invalid(o + ": kernel " + kernel->name + " belongs to another family");
  JH_RETURN_IF_ERROR(check_attrs(op, attrs));

  DType tin, tb, tout;
  if (!to_dtype(a.element_type(), &tin) || tin != kernel->dtype ||
      !to_dtype(b.element_type(), &tb) || tb != kernel->b_dtype)
    return invalid(o + ": a and b must be of the kernel's input dtypes (" + kernel->name + ")");
  if (!to_dtype(out->element_type(), &tout) || dtype_bytes(tout) < 2)
    return invalid(o + ": unsupported out dtype (bfloat16, float16 or float32)");
  if (a.dimensions().size() != 3 || b.dimensions().size() != 3 || out->dimensions().size() != 3)
    return invalid(o + ": the handler expects rank-3 operands and output");

  GemmArgs g = preset != nullptr ? *preset : GemmArgs{};
  g.a = array3(a);
  g.b = array3(b);
  g.out = array3(*out);
  g.residual = residual.element_count() > 0 ? array3(residual) : Array3{};
  GemmShape shape = {};
  JH_RETURN_IF_ERROR(check(*kernel, g, &shape));
  if (bias.element_count() > 0 && (bias.element_type() != ffi::DataType::F32 ||
                                   bias.element_count() != static_cast<size_t>(shape.bias_count)))
    return invalid(o + ": bias must be float32 " + shape.bias_rule);
  for (int64_t d : {shape.m, shape.n, shape.k, shape.batch})
    if (d > INT32_MAX) return invalid(o + ": a dimension is beyond 2^31 - 1");
  g.m = static_cast<int32_t>(shape.m);
  g.n = static_cast<int32_t>(shape.n);
  g.k = static_cast<int32_t>(shape.k);
  g.batch = static_cast<int32_t>(shape.batch);
  const int64_t out_rows = shape.out_transposed ? g.n : g.m;
  const int64_t out_cols = shape.out_transposed ? g.m : g.n;
  if (residual.element_count() > 0 &&
      (residual.element_type() != out->element_type() || residual.dimensions().size() != 3 ||
       g.residual.rows != out_rows || g.residual.cols != out_cols ||
       (g.residual.batch != 1 && g.residual.batch != g.batch)))
    return invalid(o + ": residual must be (batch or 1, M, N) in the out dtype");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return ffi::Error::Success();

  g.out_dtype = tout;
  g.bias = bias.element_count() > 0 ? static_cast<const float*>(bias.untyped_data()) : nullptr;
  g.activation = static_cast<Activation>(attrs.activation);
  g.alpha = attrs.alpha;
  g.beta = attrs.beta;
  g.cluster_m = static_cast<int32_t>(attrs.cluster_m);
  g.cluster_n = static_cast<int32_t>(attrs.cluster_n);
  g.group_size = static_cast<int32_t>(attrs.group_size);
  g.raster_n = static_cast<int32_t>(attrs.raster_n);
  g.plan = StreamKPlan{static_cast<int32_t>(attrs.grid_clusters),
                       static_cast<int32_t>(attrs.dp_tiles),
                       static_cast<int32_t>(attrs.sk_clusters),
                       static_cast<int32_t>(attrs.k_blocks), static_cast<int32_t>(attrs.sk_quota),
                       static_cast<int32_t>(attrs.sk_extra)};
  g.workspace = workspace->untyped_data();
  g.workspace_bytes = static_cast<int64_t>(workspace->size_bytes());
  g.stream = stream;
  JH_CUDA_RETURN_IF_ERROR(cudaGetDevice(&g.device));
  g.split_flags = flags->on_device(g.device);
  g.split_flag_count = g.split_flags != nullptr ? flags->count() : 0;

  const GemmStatus s = kernel->launch(g);
  if (s.code == GemmStatus::kInvalid) return invalid(o + " (" + kernel->name + "): " + s.message);
  if (!s.ok()) return ffi::Error::Internal(o + " (" + kernel->name + "): " + s.message);
  return ffi::Error::Success();
}

}  // namespace jax_hopper
