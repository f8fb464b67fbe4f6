// XLA FFI handler of hopper_fp8_matmul (the fp8 kernel family): out = act(alpha * a_scale *
// b_scale * A B^T + bias) + beta * residual, A (Ba, M, K) and B (Bb, N, K) fp8, both K-major.
#include <string>

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

ffi::Error fp8_shapes(const GemmKernelInfo&, const GemmArgs& g, GemmShape* s) {
  const int64_t batch = g.out.batch;
  if (g.a.rows != g.out.rows || g.b.rows != g.out.cols || g.a.cols != g.b.cols ||
      (g.a.batch != 1 && g.a.batch != batch) || (g.b.batch != 1 && g.b.batch != batch))
    return invalid("hopper_fp8_matmul: a (Ba, M, K), b (Bb, N, K) and the output disagree");
  *s = GemmShape{g.a.rows, g.b.rows, g.a.cols, batch, g.b.rows,
                 "with one entry per output column"};
  return ffi::Error::Success();
}

// A per-tensor scale: one float32 in device memory (read by the kernel, never by the host).
ffi::Error read_scale(const char* name, const ffi::AnyBuffer& x, const float** out) {
  if (x.element_type() != ffi::DataType::F32 || x.element_count() != 1)
    return invalid(std::string("hopper_fp8_matmul: ") + name + " must be one float32");
  *out = static_cast<const float*>(x.untyped_data());
  return ffi::Error::Success();
}

ffi::Error fp8_impl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer bias,
                    ffi::AnyBuffer residual, ffi::AnyBuffer a_scale, ffi::AnyBuffer b_scale,
                    ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> workspace,
                    GemmAttrs attrs) {
  GemmArgs preset = {};
  JH_RETURN_IF_ERROR(read_scale("a_scale", a_scale, &preset.a_scale));
  JH_RETURN_IF_ERROR(read_scale("b_scale", b_scale, &preset.b_scale));
  return run_gemm(GemmFamily::kFp8, "hopper_fp8_matmul", fp8_shapes, stream, a, b, bias,
                  residual, out, workspace, attrs, &preset);
}

}  // namespace

// The gemm binding with the two scales as fifth and sixth inputs.
XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8Handler, fp8_impl, gemm_binding<2>(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
