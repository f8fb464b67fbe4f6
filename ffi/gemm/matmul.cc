// XLA FFI handlers of hopper_matmul (the matmul and matmul_swap kernel families): out =
// act(alpha * op(A) op(B) + bias) + beta * residual, any operand majors.
#include <algorithm>

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// Whether an operand's extent may serve a problem extent: equal, or apart by less than the
// 16-byte pitch granule, the padding jax_hopper's CUDA lowering adds where TMA cannot address a
// row (jax_hopper/gemm/pitch.py). A shorter operand reads as zeros past its end (TMA's
// out-of-bounds fill); a longer one's extra rows or columns are never stored.
bool within_pitch_pad(int64_t operand, int64_t problem, DType t) {
  const int64_t granule = kTmaPitchBytes / dtype_bytes(t);
  return operand > problem - granule && operand < problem + granule;
}

// a (Ba, M, K) or MN-major (Ba, K, M); b (Bb, N, K) or MN-major (Bb, K, N); Ba, Bb 1 or batch.
// M and N are the output's; K the longer operand's (within_pitch_pad).
ffi::Error matmul_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  const int64_t am = kernel.a_mn_major ? g.a.cols : g.a.rows;
  const int64_t ak = kernel.a_mn_major ? g.a.rows : g.a.cols;
  const int64_t bn = kernel.b_mn_major ? g.b.cols : g.b.rows;
  const int64_t bk = kernel.b_mn_major ? g.b.rows : g.b.cols;
  const int64_t batch = g.out.batch, k = std::max(ak, bk);
  if (!within_pitch_pad(am, g.out.rows, kernel.dtype) ||
      !within_pitch_pad(bn, g.out.cols, kernel.b_dtype) ||
      !within_pitch_pad(std::min(ak, bk), k, kernel.dtype) ||
      (g.a.batch != 1 && g.a.batch != batch) || (g.b.batch != 1 && g.b.batch != batch))
    return invalid("hopper_matmul: operand shapes do not match the output");
  *s = GemmShape{g.out.rows, g.out.cols, k, batch, g.out.cols,
                 "with one entry per output column"};
  return ffi::Error::Success();
}

// The swap-AB kernels (GemmConfig.swap_ab) take the same a and b, and run out^T = b^T a^T:
// the kernel's A is b (its N rows, either major), its B is a, K-major (Ba, M, K); out stays
// (batch, M, N), stored transposed by the epilogue.
ffi::Error matmul_swap_shapes(const GemmKernelInfo& kernel, const GemmArgs& g, GemmShape* s) {
  const int64_t bn = kernel.a_mn_major ? g.a.cols : g.a.rows;
  const int64_t bk = kernel.a_mn_major ? g.a.rows : g.a.cols;
  const int64_t am = g.b.rows, ak = g.b.cols;
  const int64_t batch = g.out.batch, k = std::max(ak, bk);
  if (kernel.b_mn_major || am != g.out.rows || !within_pitch_pad(bn, g.out.cols, kernel.dtype) ||
      !within_pitch_pad(std::min(ak, bk), k, kernel.dtype) ||
      (g.a.batch != 1 && g.a.batch != batch) || (g.b.batch != 1 && g.b.batch != batch))
    return invalid("hopper_matmul (swap_ab): operand shapes do not match the output");
  *s = GemmShape{g.out.cols, g.out.rows, k, batch, g.out.cols,
                 "with one entry per output column", true};
  return ffi::Error::Success();
}

ffi::Error matmul_swap_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a,
                            ffi::AnyBuffer b, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                            ffi::Result<ffi::AnyBuffer> out,
                            ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  return run_gemm(GemmFamily::kMatmulSwap, "hopper_matmul", matmul_swap_shapes, stream, flags, b,
                  a, bias, residual, out, workspace, attrs);
}

// The swap-AB kernels on a weight stored (K, N) whose rows TMA cannot address, read in place
// (matmul_swap_odd, cuda/gemm/mainloop/ss_shifted.cuh): the same operands and shapes.
ffi::Error matmul_swap_odd_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a,
                                ffi::AnyBuffer b, ffi::AnyBuffer bias, ffi::AnyBuffer residual,
                                ffi::Result<ffi::AnyBuffer> out,
                                ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  return run_gemm(GemmFamily::kMatmulSwapOdd, "hopper_matmul", matmul_swap_shapes, stream, flags,
                  b, a, bias, residual, out, workspace, attrs);
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
XLA_FFI_DEFINE_HANDLER_SYMBOL(MatmulSwapOddHandler, matmul_swap_odd_impl, gemm_binding(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
