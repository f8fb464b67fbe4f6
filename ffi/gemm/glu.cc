// XLA FFI handler of hopper_glu (the glu kernel family): out = act(gate) * up of the gate and up
// halves of a (K, 2, N) weight, in one GEMM launch.
#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// x (batch, M, K) K-major; w (K, 2, N), shared by the batch; bias (2, N); out (batch, M, N).
ffi::Error glu_shapes(const GemmKernelInfo&, const GemmArgs& g, GemmShape* s) {
  const int64_t n = g.out.cols, k = g.a.cols, batch = g.out.batch;
  if (g.b.batch != k || g.b.rows != 2 || g.b.cols != n || (n * 2) % 16 != 0)
    return invalid("hopper_glu: the weight must be (K, 2, N) with N a multiple of 8");
  if (g.a.rows != g.out.rows || (g.a.batch != 1 && g.a.batch != batch))
    return invalid("hopper_glu: x and the output disagree on (batch, M)");
  if (2 * n > INT32_MAX)  // the tiles cover 2N product columns
    return invalid("hopper_glu: a dimension is beyond 2^31 - 1");
  *s = GemmShape{g.out.rows, n, k, batch, 2 * n, "(2, N)"};
  return ffi::Error::Success();
}

ffi::Error glu_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer x, ffi::AnyBuffer w,
                    ffi::AnyBuffer bias, ffi::AnyBuffer residual, ffi::Result<ffi::AnyBuffer> out,
                    ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  return run_gemm(GemmFamily::kGlu, "hopper_glu", glu_shapes, stream, flags, x, w, bias, residual,
                  out, workspace, attrs);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GluHandler, glu_impl, gemm_binding(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
