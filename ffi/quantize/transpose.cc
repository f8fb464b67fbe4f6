// XLA FFI handler of transpose_fp8 (jax_hopper/quantize/transpose.py): x (batch, rows, cols) fp8
// -> t (batch, cols, rows), the same bytes. Python pads rows and columns TMA cannot address
// first; these checks are the last line before the kernel.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/quantize/transpose.h"
#include "ffi/common.h"
#include "ffi/handlers.h"
#include "ffi/quantize/tile_map.h"

namespace jax_hopper {
namespace {

constexpr const char* kOp = "transpose_fp8";

ffi::Error transpose_impl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> t) {
  DType dtype;
  if (!to_dtype(x.element_type(), &dtype) || dtype_bytes(dtype) != 1)
    return invalid(std::string(kOp) + ": x must be float8_e4m3fn or float8_e5m2");
  if (t->element_type() != x.element_type())
    return invalid(std::string(kOp) + ": t must have x's dtype");
  const auto d = x.dimensions();
  if (d.size() != 3) return invalid(std::string(kOp) + ": x must be (batch, rows, cols)");
  const int64_t batch = d[0], rows = d[1], cols = d[2];
  if (batch < 1 || rows < 1 || cols < 1 || batch > INT32_MAX || rows > INT32_MAX ||
      cols > INT32_MAX)
    return invalid(std::string(kOp) + ": every dimension of x must be in 1 .. 2^31 - 1");
  // TMA rows start 16 bytes apart: x's rows are cols bytes long, t's rows bytes.
  if (rows % 16 || cols % 16)
    return invalid(std::string(kOp) + ": the kernel needs rows and cols multiples of 16");
  if (!dims_are(*t, {batch, cols, rows}))
    return invalid(std::string(kOp) + ": t must be (batch, cols, rows)");
  TransposeArgs a = {};
  a.batch = static_cast<int32_t>(batch);
  a.rows = static_cast<int32_t>(rows);
  a.cols = static_cast<int32_t>(cols);
  JH_RETURN_IF_ERROR(tile_map(kOp, x.untyped_data(), batch, rows, cols, 1,
                              CU_TENSOR_MAP_SWIZZLE_NONE, &a.x_map));
  // The kernel writes its staging tile 128B-swizzled (bank-conflict free); the map undoes it.
  JH_RETURN_IF_ERROR(tile_map(kOp, t->untyped_data(), batch, cols, rows, 1,
                              CU_TENSOR_MAP_SWIZZLE_128B, &a.t_map));
  JH_CUDA_RETURN_IF_ERROR(launch_transpose_fp8(a, stream));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(TransposeFp8Handler, transpose_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()   // x (batch, rows, cols)
                                  .Ret<ffi::AnyBuffer>(),  // t (batch, cols, rows)
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
