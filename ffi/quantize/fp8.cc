// XLA FFI handler of quantize_fp8 (jax_hopper/quantize/fp8.py): x (batch, rows, cols) bf16 / f16 /
// f32 -> q (batch, rows, cols) fp8 with its block scales, and optionally the transposed copy qt
// (batch, cols, rows) with its own, and optionally x's amax per batch entry (amax_out). Python
// validates first and gives per-tensor amaxes; these checks are the last line before the kernel.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/quantize/quantize.h"
#include "ffi/common.h"
#include "ffi/handlers.h"
#include "ffi/quantize/tile_map.h"

namespace jax_hopper {
namespace {

constexpr const char* kOp = "quantize_fp8";

ffi::Error decode_mode(const char* name, int64_t code, QuantMode* out) {
  if (code < 0 || code > static_cast<int64_t>(QuantMode::kTile))
    return invalid(std::string(kOp) + ": " + name + " code " + std::to_string(code) +
                   " is not a QuantMode (0 tensor, 1 row, 2 tile)");
  *out = static_cast<QuantMode>(code);
  return ffi::Error::Success();
}

// The shape a copy's scales must have: (batch, rows, col tiles) per row, (batch, row tiles, col
// tiles) per tile, (batch, 0, 0) per tensor (Python holds those).
ffi::Error check_scales(const char* name, const ffi::AnyBuffer& s, QuantMode mode, int64_t batch,
                        int64_t rows, int64_t cols) {
  const int64_t rt = (rows + kQuantTile - 1) / kQuantTile, ct = (cols + kQuantTile - 1) / kQuantTile;
  const bool ok = s.element_type() == ffi::DataType::F32 &&
                  (mode == QuantMode::kRow    ? dims_are(s, {batch, rows, ct})
                   : mode == QuantMode::kTile ? dims_are(s, {batch, rt, ct})
                                              : dims_are(s, {batch, 0, 0}));
  return ok ? ffi::Error::Success()
            : invalid(std::string(kOp) + ": " + name + " must be float32 of the shape its " +
                      "scaling mode gives (batch, rows, ceil(cols/128)) per row, (batch, " +
                      "ceil(rows/128), ceil(cols/128)) per tile, (batch, 0, 0) per tensor");
}

ffi::Error quantize_impl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer amax,
                         ffi::Result<ffi::AnyBuffer> q, ffi::Result<ffi::AnyBuffer> scale,
                         ffi::Result<ffi::AnyBuffer> qt, ffi::Result<ffi::AnyBuffer> scale_t,
                         ffi::Result<ffi::AnyBuffer> amax_out, int64_t mode_code, bool transpose,
                         int64_t t_mode_code) {
  QuantizeArgs a = {};
  JH_RETURN_IF_ERROR(decode_mode("mode", mode_code, &a.mode));
  JH_RETURN_IF_ERROR(decode_mode("t_mode", t_mode_code, &a.t_mode));
  if ((a.mode == QuantMode::kTensor) != (a.t_mode == QuantMode::kTensor))
    return invalid(std::string(kOp) + ": per-tensor scaling applies to both copies or neither");
  a.transpose = transpose;
  const auto d = x.dimensions();
  if (d.size() != 3) return invalid(std::string(kOp) + ": x must be (batch, rows, cols)");
  if (!to_dtype(x.element_type(), &a.in) || dtype_bytes(a.in) == 1)
    return invalid(std::string(kOp) + ": x must be bfloat16, float16 or float32");
  if (!to_dtype(q->element_type(), &a.out) || dtype_bytes(a.out) != 1)
    return invalid(std::string(kOp) + ": q must be float8_e4m3fn or float8_e5m2");
  const int64_t batch = d[0], rows = d[1], cols = d[2];
  if (batch < 1 || rows < 1 || cols < 1 || batch > INT32_MAX || rows > INT32_MAX ||
      cols > INT32_MAX)
    return invalid(std::string(kOp) + ": every dimension of x must be in 1 .. 2^31 - 1");
  // TMA rows start 16 bytes apart: q's rows (cols bytes) and qt's (rows bytes).
  if (cols % 16 || (transpose && rows % 16))
    return invalid(std::string(kOp) + ": the kernel needs cols (and rows, with the transposed " +
                   "copy) a multiple of 16");
  if (!dims_are(*q, {batch, rows, cols}))
    return invalid(std::string(kOp) + ": q must have x's shape");
  if (transpose ? !dims_are(*qt, {batch, cols, rows}) || qt->element_type() != q->element_type()
                : !dims_are(*qt, {batch, 0, 0}))
    return invalid(std::string(kOp) + ": qt must be (batch, cols, rows) in q's dtype with the " +
                   "transposed copy, (batch, 0, 0) without");
  JH_RETURN_IF_ERROR(check_scales("scale", *scale, a.mode, batch, rows, cols));
  JH_RETURN_IF_ERROR(check_scales("scale_t", *scale_t, transpose ? a.t_mode : QuantMode::kTensor,
                                  batch, cols, rows));
  if (a.mode == QuantMode::kTensor &&
      (amax.element_type() != ffi::DataType::F32 || !dims_are(amax, {batch})))
    return invalid(std::string(kOp) + ": per-tensor scaling needs amax, float32 (batch,)");
  const bool record = dims_are(*amax_out, {batch});
  if (amax_out->element_type() != ffi::DataType::F32 || (!record && !dims_are(*amax_out, {0})))
    return invalid(std::string(kOp) + ": amax_out must be float32, (batch,) to record x's " +
                   "amax or (0,) not to");
  if (record) a.amax_out = static_cast<uint32_t*>(amax_out->untyped_data());
  a.batch = static_cast<int32_t>(batch);
  a.rows = static_cast<int32_t>(rows);
  a.cols = static_cast<int32_t>(cols);
  a.amax = static_cast<const float*>(amax.untyped_data());
  a.scale = static_cast<float*>(scale->untyped_data());
  a.scale_t = static_cast<float*>(scale_t->untyped_data());
  JH_RETURN_IF_ERROR(tile_map(kOp, x.untyped_data(), batch, rows, cols, dtype_bytes(a.in),
                              CU_TENSOR_MAP_SWIZZLE_NONE, &a.x_map));
  JH_RETURN_IF_ERROR(tile_map(kOp, q->untyped_data(), batch, rows, cols, 1,
                              CU_TENSOR_MAP_SWIZZLE_NONE, &a.q_map));
  // The kernel writes qt's staging tile 128B-swizzled (bank-conflict free); the map undoes it.
  if (transpose)
    JH_RETURN_IF_ERROR(tile_map(kOp, qt->untyped_data(), batch, cols, rows, 1,
                                CU_TENSOR_MAP_SWIZZLE_128B, &a.qt_map));
  // The kernel maxes each tile's amax into amax_out (as unsigned bits): it starts from +0.
  if (record)
    JH_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.amax_out, 0, sizeof(float) * batch, stream));
  JH_CUDA_RETURN_IF_ERROR(launch_quantize_fp8(a, stream));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(QuantizeFp8Handler, quantize_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x (batch, rows, cols)
                                  .Arg<ffi::AnyBuffer>()  // amax (batch,) per tensor, else (0,)
                                  .Ret<ffi::AnyBuffer>()  // q (batch, rows, cols)
                                  .Ret<ffi::AnyBuffer>()  // scale
                                  .Ret<ffi::AnyBuffer>()  // qt (batch, cols, rows) or (batch, 0, 0)
                                  .Ret<ffi::AnyBuffer>()  // scale_t
                                  .Ret<ffi::AnyBuffer>()  // amax_out (batch,) or (0,)
                                  .Attr<int64_t>("mode")  // QuantMode of q
                                  .Attr<bool>("transpose")
                                  .Attr<int64_t>("t_mode"),  // QuantMode of qt
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
