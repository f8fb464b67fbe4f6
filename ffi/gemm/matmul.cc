// XLA FFI handlers of hopper_matmul (the matmul and matmul_swap kernel families): out =
// act(alpha * op(A) op(B) + bias) + beta * residual, any operand majors.
#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// a (Ba, M, K) or MN-major (Ba, K, M); b (Bb, N, K) or MN-major (Bb, K, N); Ba, Bb 1 or batch.
ffi::Error matmul_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  const int64_t am = kernel.a_mn_major ? g.a.cols : g.a.rows;
  const int64_t ak = kernel.a_mn_major ? g.a.rows : g.a.cols;
  const int64_t bn = kernel.b_mn_major ? g.b.cols : g.b.rows;
  const int64_t bk = kernel.b_mn_major ? g.b.rows : g.b.cols;
  const int64_t batch = g.out.batch;
  if (am != g.out.rows || bn != g.out.cols || ak != bk ||
      (g.a.batch != 1 && g.a.batch != batch) || (g.b.batch != 1 && g.b.batch != batch))
    return invalid("hopper_matmul: operand shapes do not match the output");
  *s = GemmShape{am, bn, ak, batch, bn, "with one entry per output column"};
  return ffi::Error::Success();
}

// The swap-AB kernels (GemmConfig.swap_ab) take the same a and b, and run out^T = b^T a^T:
// the kernel's A is b (its N rows, either major), its B is a, K-major (Ba, M, K); out stays
// (batch, M, N), stored transposed by the epilogue.
ffi::Error matmul_swap_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  const int64_t bn = kernel.a_mn_major ? g.a.cols : g.a.rows;
  const int64_t bk = kernel.a_mn_major ? g.a.rows : g.a.cols;
  const int64_t am = g.b.rows, ak = g.b.cols;
  const int64_t batch = g.out.batch;
  if (kernel.b_mn_major || am != g.out.rows || bn != g.out.cols || ak != bk ||
      (g.a.batch != 1 && g.a.batch != batch) || (g.b.batch != 1 && g.b.batch != batch))
    return invalid("hopper_matmul (swap_ab): operand shapes do not match the output");
  *s = GemmShape{bn, am, ak, batch, bn, "with one entry per output column", true};
  return ffi::Error::Success();
}

ffi::Error matmul_swap_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a,
                            ffi::AnyBuffer b, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                            ffi::Result<ffi::AnyBuffer> out,
                            ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  return run_gemm(GemmFamily::kMatmulSwap, "hopper_matmul", matmul_swap_shapes, stream, flags, b,
                  a, bias, residual, out, workspace, attrs);
}

ffi::Error matmul_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a, ffi::AnyBuffer b,
                       ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> workspace,
                       GemmAttrs attrs) {
  return run_gemm(GemmFamily::kMatmul, "hopper_matmul", matmul_shapes, stream, flags, a, b, bias,
                  residual, out, workspace, attrs);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MatmulHandler, matmul_impl, gemm_binding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(MatmulSwapHandler, matmul_swap_impl, gemm_binding(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
