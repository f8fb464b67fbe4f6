// XLA FFI handler of hopper_ragged_dot (the grouped kernel family): out rows of group g =
// act(alpha * lhs rows @ rhs[g] + bias[g]) + beta * residual, the groups' row ranges given by
// the tile table the wrapper builds on the device (cuda/gemm/scheduler/grouped.cuh).
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

ffi::Error grouped_impl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                        ffi::AnyBuffer bias, ffi::AnyBuffer residual, ffi::AnyBuffer tiles,
                        ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> workspace,
                        GemmAttrs attrs) {
  const int64_t entries = static_cast<int64_t>(tiles.element_count());
  if (tiles.element_type() != ffi::DataType::S32 || tiles.dimensions().size() != 1 ||
      entries < 1 + kGroupTileFields || (entries - 1) % kGroupTileFields != 0 ||
      (entries - 1) / kGroupTileFields > INT32_MAX)
    return invalid("hopper_ragged_dot: the tile table must be int32 (1 + " +
                   std::to_string(kGroupTileFields) + " * slots,)");
  GemmArgs preset = {};
  preset.group_tiles = static_cast<const int32_t*>(tiles.untyped_data());
  preset.tile_slots = static_cast<int32_t>((entries - 1) / kGroupTileFields);
  return run_gemm(GemmFamily::kGrouped, "hopper_ragged_dot", grouped_shapes, stream, a, b, bias,
                  residual, out, workspace, attrs, &preset);
}

}  // namespace

// The gemm binding with the tile table as a fifth input.
XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedHandler, grouped_impl, gemm_binding<1>(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
