// XLA FFI handlers of hopper_ragged_contract (the grouped_contraction kernel family) and
// hopper_ragged_fp8_contract (grouped_contraction_fp8, _fp8_block): out[g] = x_g^T y_g, where
// group g owns rows [ends[g - 1], ends[g]) of x (R, P) and y (R, Q), or [starts[g], ends[g])
// given the group bounds (cuda/gemm/scheduler/grouped_contraction.cuh). The weight gradients
// of hopper_ragged_dot and fp8_ragged_dot.
#include <cstdint>
#include <string>

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// 16-bit: x (1, R, P) is A read MN-major (K = R, M = P), y (1, R, Q) is B read MN-major
// (N = Q). fp8: both K-major, their transposes x^T (1, P, R) and y^T (1, Q, R). The output
// (G, P, Q) has one entry per group. No bias or residual.
ffi::Error contraction_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  const bool mn = kernel.a_mn_major;
  const int64_t k = mn ? g.a.rows : g.a.cols, p = mn ? g.a.cols : g.a.rows;
  const int64_t kb = mn ? g.b.rows : g.b.cols, q = mn ? g.b.cols : g.b.rows;
  if (kernel.b_mn_major != mn || g.a.batch != 1 || g.b.batch != 1 || k != kb ||
      g.out.rows != p || g.out.cols != q)
    return invalid(mn ? "hopper_ragged_contract: x (1, R, P), y (1, R, Q) and the output "
                        "(G, P, Q) disagree"
                      : "hopper_ragged_fp8_contract: x^T (1, P, R), y^T (1, Q, R) and the "
                        "output (G, P, Q) disagree");
  if (g.residual.data != nullptr) return invalid("a grouped contraction takes no residual");
  *s = GemmShape{p, q, k, g.out.batch, 0, "(none: no bias)"};
  return ffi::Error::Success();
}

// The group ends (G,) int32, one per output entry, or the bounds (2, G) int32 (the starts,
// then the ends), into `preset`.
ffi::Error read_ends(const char* op, const ffi::AnyBuffer& ends, ffi::Result<ffi::AnyBuffer>& out,
                     GemmArgs* preset) {
  const auto od = out->dimensions(), ed = ends.dimensions();
  const bool bounds = ed.size() == 2 && ed[0] == 2;
  if (ends.element_type() != ffi::DataType::S32 || (ed.size() != 1 && !bounds) ||
      od.size() != 3 || ed[ed.size() - 1] != od[0])
    return invalid(std::string(op) + ": the group ends must be int32 (G,), or the bounds "
                   "int32 (2, G) (starts, then ends), one per output entry");
  const auto* data = static_cast<const int32_t*>(ends.untyped_data());
  preset->group_starts = bounds ? data : nullptr;
  preset->group_ends = bounds ? data + od[0] : data;
  return ffi::Error::Success();
}

ffi::Error contraction_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer x,
                            ffi::AnyBuffer y, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                            ffi::AnyBuffer ends, ffi::Result<ffi::AnyBuffer> out,
                            ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  constexpr const char* kOp = "hopper_ragged_contract";
  GemmArgs preset = {};
  JH_RETURN_IF_ERROR(read_ends(kOp, ends, out, &preset));
  return run_gemm(GemmFamily::kGroupedContraction, kOp, contraction_shapes, stream, flags, x, y,
                  bias, residual, out, workspace, attrs, &preset);
}

// fp8: x^T and y^T K-major. Family grouped_contraction_fp8: one float32 scale each
// (TensorScaling). Family grouped_contraction_fp8_block: x_scale (1, P, ceil(R/128)) and
// y_scale (1, ceil(Q/128), ceil(R/128)) (BlockScaling checks them against the problem).
template <GemmFamily kFamily>
ffi::Error contraction_fp8_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer xt,
                                ffi::AnyBuffer yt, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                                ffi::AnyBuffer ends, ffi::AnyBuffer x_scale,
                                ffi::AnyBuffer y_scale, ffi::Result<ffi::AnyBuffer> out,
                                ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  constexpr const char* kOp = "hopper_ragged_fp8_contract";
  constexpr int kRank = kFamily == GemmFamily::kGroupedContractionFp8Block ? 3 : 1;
  GemmArgs preset = {};
  JH_RETURN_IF_ERROR(read_ends(kOp, ends, out, &preset));
  JH_RETURN_IF_ERROR(read_scales(kOp, "x_scale", x_scale, kRank, &preset.a_scale));
  JH_RETURN_IF_ERROR(read_scales(kOp, "y_scale", y_scale, kRank, &preset.b_scale));
  return run_gemm(kFamily, kOp, contraction_shapes, stream, flags, xt, yt, bias, residual, out,
                  workspace, attrs, &preset);
}

}  // namespace

// The gemm binding with the group ends as a fifth input (and, fp8, the two scales after it).
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedContractionHandler, contraction_impl, gemm_binding<1>(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedContractionFp8Handler,
                              contraction_fp8_impl<GemmFamily::kGroupedContractionFp8>,
                              gemm_binding<3>(), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedContractionFp8BlockHandler,
                              contraction_fp8_impl<GemmFamily::kGroupedContractionFp8Block>,
                              gemm_binding<3>(), {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
