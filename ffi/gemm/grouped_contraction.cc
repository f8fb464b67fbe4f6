// XLA FFI handler of hopper_ragged_contract (the grouped_contraction kernel family): out[g] =
// x_g^T y_g, where group g owns rows [ends[g - 1], ends[g]) of x (R, P) and y (R, Q)
// (cuda/gemm/scheduler/grouped_contraction.cuh). The weight gradient of hopper_ragged_dot.
#include <cstdint>

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// x (1, R, P) is A read MN-major (K = R, M = P), y (1, R, Q) is B read MN-major (N = Q); the
// output (G, P, Q) has one entry per group. No bias or residual.
ffi::Error contraction_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  if (!kernel.a_mn_major || !kernel.b_mn_major || g.a.batch != 1 || g.b.batch != 1 ||
      g.a.rows != g.b.rows || g.out.rows != g.a.cols || g.out.cols != g.b.cols)
    return invalid("hopper_ragged_contract: x (1, R, P), y (1, R, Q) and the output (G, P, Q) "
                   "disagree");
  if (g.residual.data != nullptr) return invalid("hopper_ragged_contract takes no residual");
  *s = GemmShape{g.out.rows, g.out.cols, g.a.rows, g.out.batch, 0, "(none: no bias)"};
  return ffi::Error::Success();
}

ffi::Error contraction_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer x,
                            ffi::AnyBuffer y, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                            ffi::AnyBuffer ends, ffi::Result<ffi::AnyBuffer> out,
                            ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  const auto od = out->dimensions();
  if (ends.element_type() != ffi::DataType::S32 || ends.dimensions().size() != 1 ||
      od.size() != 3 || static_cast<int64_t>(ends.element_count()) != od[0])
    return invalid("hopper_ragged_contract: the group ends must be int32 (G,), one per output "
                   "entry");
  GemmArgs preset = {};
  preset.group_ends = static_cast<const int32_t*>(ends.untyped_data());
  return run_gemm(GemmFamily::kGroupedContraction, "hopper_ragged_contract", contraction_shapes,
                  stream, flags, x, y, bias, residual, out, workspace, attrs, &preset);
}

}  // namespace

// The gemm binding with the group ends as a fifth input.
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedContractionHandler, contraction_impl, gemm_binding<1>(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
