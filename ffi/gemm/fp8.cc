// XLA FFI handlers of hopper_fp8_matmul: out = act(alpha * (A scaled) (B scaled)^T + bias) +
// beta * residual, A (Ba, M, K) and B (Bb, N, K) fp8, both K-major. Family fp8: one float32
// scale per tensor (or per batch entry); family fp8_block: a_scale (Ba', M, ceil(K/128)) and b_scale
// (Bb', ceil(N/128), ceil(K/128)) (cuda/gemm/mainloop/scaling.cuh checks them against the
// problem); families fp8_swap and fp8_block_swap: per tensor and per block, the product
// computed swapped. The scales are the call's fifth and sixth inputs.
#include <string>

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// Unswapped, the kernel's A is a (Ba, M, K) and its B is b (Bb, N, K). The swap-AB kernels
// (families fp8_swap and fp8_block_swap, GemmConfig.swap_ab) run out^T = b a^T: their A is b
// and their B is a, and out stays (batch, M, N), stored transposed by the epilogue. In `g` the
// kernel's operands.
template <bool kSwap>
ffi::Error fp8_shapes(const GemmKernelInfo&, const GemmArgs& g, GemmShape* s) {
  const int64_t batch = g.out.batch;
  const int64_t rows = kSwap ? g.out.cols : g.out.rows, cols = kSwap ? g.out.rows : g.out.cols;
  if (g.a.rows != rows || g.b.rows != cols || g.a.cols != g.b.cols ||
      (g.a.batch != 1 && g.a.batch != batch) || (g.b.batch != 1 && g.b.batch != batch))
    return invalid(std::string("hopper_fp8_matmul") + (kSwap ? " (swap_ab)" : "") +
                   ": a (Ba, M, K), b (Bb, N, K) and the output disagree");
  *s = GemmShape{rows, cols, g.a.cols, batch, g.out.cols, "with one entry per output column",
                 kSwap};
  return ffi::Error::Success();
}

template <GemmFamily kFamily>
ffi::Error fp8_impl(cudaStream_t stream, SplitFlags* flags, ffi::AnyBuffer a, ffi::AnyBuffer b,
                    ffi::AnyBuffer bias, ffi::AnyBuffer residual, ffi::AnyBuffer a_scale,
                    ffi::AnyBuffer b_scale, ffi::Result<ffi::AnyBuffer> out,
                    ffi::Result<ffi::AnyBuffer> workspace, GemmAttrs attrs) {
  constexpr int kRank =
      kFamily == GemmFamily::kFp8Block || kFamily == GemmFamily::kFp8BlockSwap ? 3 : 1;
  // Swapped, the kernel's operands (and so their scales) are b's, then a's.
  constexpr bool kSwap =
      kFamily == GemmFamily::kFp8Swap || kFamily == GemmFamily::kFp8BlockSwap;
  GemmArgs preset = {};
  constexpr const char* kOp = "hopper_fp8_matmul";
  JH_RETURN_IF_ERROR(
      read_scales(kOp, "a_scale", a_scale, kRank, kSwap ? &preset.b_scale : &preset.a_scale));
  JH_RETURN_IF_ERROR(
      read_scales(kOp, "b_scale", b_scale, kRank, kSwap ? &preset.a_scale : &preset.b_scale));
  return run_gemm(kFamily, kOp, fp8_shapes<kSwap>, stream, flags,
                  kSwap ? b : a, kSwap ? a : b, bias, residual, out, workspace, attrs, &preset);
}

}  // namespace

// The gemm binding with the two scale arrays as fifth and sixth inputs.
XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8Handler, fp8_impl<GemmFamily::kFp8>, gemm_binding<2>(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8BlockHandler, fp8_impl<GemmFamily::kFp8Block>,
                              gemm_binding<2>(), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8SwapHandler, fp8_impl<GemmFamily::kFp8Swap>, gemm_binding<2>(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8BlockSwapHandler, fp8_impl<GemmFamily::kFp8BlockSwap>,
                              gemm_binding<2>(), {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
