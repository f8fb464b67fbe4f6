// XLA FFI handlers of hopper_ragged_dot (the grouped kernel family): out rows of group g =
// act(alpha * lhs rows @ rhs[g] + bias[g]) + beta * residual, and of hopper_ragged_glu (the
// grouped_glu family: act(gate) * up of expert g's gated weight), the groups' row ranges given
// by the tile table the wrapper builds on the device (cuda/gemm/scheduler/grouped.cuh), and of
// hopper_ragged_fp8_dot (the grouped_fp8 family: fp8 operands with per-tensor or per-expert
// scales; grouped_fp8_block: block scales).
#include <string>

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// lhs (1, M, K) K-major; rhs (G, N, K), or MN-major (G, K, N); bias (G, N) or none; out and
// residual (1, M, N). GemmArgs' batch is G (rhs's entries); lhs and out have one.
ffi::Error grouped_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  const int64_t groups = g.b.batch;
  const int64_t n = kernel.b_mn_major ? g.b.cols : g.b.rows;
  const int64_t k = kernel.b_mn_major ? g.b.rows : g.b.cols;
  if (kernel.a_mn_major || g.a.batch != 1 || g.out.batch != 1 || g.a.rows != g.out.rows ||
      g.a.cols != k || g.out.cols != n)
    return invalid("hopper_ragged_dot: lhs (1, M, K), rhs (G, K, N) or (G, N, K) and the "
                   "output (1, M, N) disagree");
  *s = GemmShape{g.out.rows, n, k, groups, groups * n, "(G, N)"};
  return ffi::Error::Success();
}

// The grouped GLU: lhs (1, M, K); the experts' gated weights (G K, 2, N), expert g's (K, 2, N)
// the g-th; bias (G, 2, N) or none; out and residual (1, M, N).
ffi::Error grouped_glu_shapes(const GemmKernelInfo&, const GemmArgs& g, GemmShape* s) {
  const int64_t k = g.a.cols, n = g.out.cols;
  if (g.a.batch != 1 || g.out.batch != 1 || g.a.rows != g.out.rows || k == 0 ||
      g.b.batch % k != 0 || g.b.rows != 2 || g.b.cols != n || n % 8 != 0)
    return invalid("hopper_ragged_glu: lhs (1, M, K), the weights (G K, 2, N) with N a "
                   "multiple of 8 and the output (1, M, N) disagree");
  const int64_t groups = g.b.batch / k;
  if (2 * n > INT32_MAX) return invalid("hopper_ragged_glu: a dimension is beyond 2^31 - 1");
  *s = GemmShape{g.out.rows, n, k, groups, groups * 2 * n, "(G, 2, N)"};
  return ffi::Error::Success();
}

// The tile table (cuda/gemm/scheduler/grouped.cuh) into `preset`, or why it is malformed.
ffi::Error read_tile_table(const char* op, const ffi::AnyBuffer& tiles, GemmArgs* preset) {
  const int64_t entries = static_cast<int64_t>(tiles.element_count());
  if (tiles.element_type() != ffi::DataType::S32 || tiles.dimensions().size() != 1 ||
      entries < 1 + kGroupTileFields || (entries - 1) % kGroupTileFields != 0 ||
      (entries - 1) / kGroupTileFields > INT32_MAX)
    return invalid(std::string(op) + ": the tile table must be int32 (1 + " +
                   std::to_string(kGroupTileFields) + " * slots,)");
  preset->group_tiles = static_cast<const int32_t*>(tiles.untyped_data());
  preset->tile_slots = static_cast<int32_t>((entries - 1) / kGroupTileFields);
  return ffi::Error::Success();
}

template <GemmFamily kFamily>
ffi::Error grouped_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a,
                        ffi::AnyBuffer b, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                        ffi::AnyBuffer tiles, ffi::Result<ffi::AnyBuffer> out,
                        ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  constexpr bool kGated = kFamily == GemmFamily::kGroupedGlu;
  const char* op = kGated ? "hopper_ragged_glu" : "hopper_ragged_dot";
  GemmArgs preset = {};
  JH_RETURN_IF_ERROR(read_tile_table(op, tiles, &preset));
  return run_gemm(kFamily, op, kGated ? grouped_glu_shapes : grouped_shapes, stream, flags, a, b,
                  bias, residual, out, workspace, attrs, &preset);
}

// The grouped fp8 GEMM (hopper_ragged_fp8_dot): lhs (1, M, K) and rhs (G, N, K) fp8, both
// K-major. Family grouped_fp8: lhs_scale one float32, rhs_scale one or one per expert (G,),
// which the kernel reads by each tile's group (TensorScaling). Family grouped_fp8_block:
// lhs_scale (1, M, ceil(K/128)) and rhs_scale (G, ceil(N/128), ceil(K/128)) (BlockScaling
// checks them against the problem, the group as the batch entry).
template <GemmFamily kFamily>
ffi::Error grouped_fp8_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a,
                            ffi::AnyBuffer b, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                            ffi::AnyBuffer tiles, ffi::AnyBuffer a_scale, ffi::AnyBuffer b_scale,
                            ffi::Result<ffi::AnyBuffer> out,
                            ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  constexpr const char* kOp = "hopper_ragged_fp8_dot";
  constexpr int kRank = kFamily == GemmFamily::kGroupedFp8Block ? 3 : 1;
  GemmArgs preset = {};
  JH_RETURN_IF_ERROR(read_tile_table(kOp, tiles, &preset));
  JH_RETURN_IF_ERROR(read_scales(kOp, "lhs_scale", a_scale, kRank, &preset.a_scale));
  JH_RETURN_IF_ERROR(read_scales(kOp, "rhs_scale", b_scale, kRank, &preset.b_scale));
  return run_gemm(kFamily, kOp, grouped_shapes, stream, flags, a, b, bias, residual, out,
                  workspace, attrs, &preset);
}

}  // namespace

// The gemm binding with the tile table as a fifth input (and the two scales after it).
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedHandler, grouped_impl<GemmFamily::kGrouped>,
                              gemm_binding<1>(), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedGluHandler, grouped_impl<GemmFamily::kGroupedGlu>,
                              gemm_binding<1>(), {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedFp8Handler, grouped_fp8_impl<GemmFamily::kGroupedFp8>,
                              gemm_binding<3>(), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedFp8BlockHandler,
                              grouped_fp8_impl<GemmFamily::kGroupedFp8Block>, gemm_binding<3>(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
