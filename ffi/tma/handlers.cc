// XLA FFI handlers of the TMA ops (jax_hopper/tma/ops.py): view each buffer as (batch, rows,
// cols), encode one tensor map per operand with the caller's box and swizzle, launch on XLA's
// stream. Python validates first (jax_hopper/tma/boxes.py); these checks are the last line.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/tma/ops.h"
#include "cuda/tma/tensor_map.h"
#include "ffi/common.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

// A row-major buffer as (batch, rows, cols): every dimension before the last two folds into the
// batch (a stacked multicast output (copies, batch, rows, cols) becomes (copies * batch, ...)).
struct Array3 {
  int64_t batch, rows, cols;
  size_t elem_bytes;
  void* data;
};

ffi::Error view3(const char* op, const char* name, const ffi::AnyBuffer& buf, Array3* out) {
  auto d = buf.dimensions();
  if (d.size() < 2) return invalid(std::string(op) + ": " + name + " must have rank >= 2");
  switch (buf.element_type()) {
    case ffi::DataType::S1: case ffi::DataType::S2: case ffi::DataType::S4:
    case ffi::DataType::U1: case ffi::DataType::U2: case ffi::DataType::U4:
    case ffi::DataType::F4E2M1FN:
      return invalid(std::string(op) + ": " + name + " has a packed sub-byte element type");
    default: break;
  }
  out->batch = 1;
  for (size_t i = 0; i + 2 < d.size(); ++i) out->batch *= d[i];
  out->rows = d[d.size() - 2];
  out->cols = d[d.size() - 1];
  out->elem_bytes = ffi::ByteWidth(buf.element_type());
  out->data = buf.untyped_data();
  // TMA coordinates are signed 32-bit.
  if (out->batch > INT32_MAX || out->rows > INT32_MAX || out->cols > INT32_MAX)
    return invalid(std::string(op) + ": " + name + " has a dimension beyond 2^31 - 1");
  return ffi::Error::Success();
}

ffi::Error decode_swizzle(const char* op, int64_t code, CUtensorMapSwizzle* out) {
  switch (code) {
    case 0: *out = CU_TENSOR_MAP_SWIZZLE_NONE; return ffi::Error::Success();
    case 1: *out = CU_TENSOR_MAP_SWIZZLE_32B; return ffi::Error::Success();
    case 2: *out = CU_TENSOR_MAP_SWIZZLE_64B; return ffi::Error::Success();
    case 3: *out = CU_TENSOR_MAP_SWIZZLE_128B; return ffi::Error::Success();
  }
  return invalid(std::string(op) + ": swizzle code " + std::to_string(code) + " outside 0..3");
}

uint64_t round_up_16(uint64_t x) { return (x + 15) / 16 * 16; }

// NOTES: a swizzled box must be exactly one swizzle span wide (box_cols * elem_bytes == 128, 64
// or 32 bytes; any rows). On an H100 a narrower one (5 rows x 16 bytes under 128B) faulted with
// an illegal address in the copy kernel, whose shared memory holds the box packed at its own
// width: the hardware does not lay such rows out at that width. jax_hopper/tma/boxes.py
// (box_grid) has the same rule; swizzle NONE takes any multiple of 16 bytes.
ffi::Error check_swizzle_span(const char* op, CUtensorMapSwizzle swizzle, int64_t box_cols,
                              size_t elem_bytes) {
  uint64_t span;
  const char* name;
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_32B: span = 32; name = "32B"; break;
    case CU_TENSOR_MAP_SWIZZLE_64B: span = 64; name = "64B"; break;
    case CU_TENSOR_MAP_SWIZZLE_128B: span = 128; name = "128B"; break;
    default: return ffi::Error::Success();
  }
  const uint64_t inner = static_cast<uint64_t>(box_cols) * elem_bytes;
  if (inner == span) return ffi::Error::Success();
  return invalid(std::string(op) + ": with swizzle " + name + " the box's inner dimension must " +
                 "be exactly one swizzle span, " + std::to_string(span) + " bytes = " +
                 std::to_string(span / elem_bytes) + " columns of " + std::to_string(elem_bytes) +
                 " bytes (got " + std::to_string(box_cols) + " columns = " + std::to_string(inner) +
                 " bytes); use swizzle 0 (none) for other widths");
}

// 3-D tensor map (cols innermost) with a box of box_rows x box_cols x 1.
ffi::Error box_map(const Array3& a, CUtensorMapDataType type, int64_t box_rows, int64_t box_cols,
                   CUtensorMapSwizzle swizzle, CUtensorMap* out) {
  TensorMapSpec s = {};
  s.dtype = type;
  s.rank = 3;
  s.base = a.data;
  s.dims[0] = static_cast<uint64_t>(a.cols);
  s.dims[1] = static_cast<uint64_t>(a.rows);
  s.dims[2] = static_cast<uint64_t>(a.batch);
  const uint64_t pitch = a.cols * a.elem_bytes, plane = a.rows * pitch;
  // NOTES: a dimension of extent 1 is never stepped over, so its stride is free: rounding it up
  // to TMA's 16-byte rule makes a single row of any width addressable (e.g. a (1, 1) array).
  // jax_hopper/tma/boxes.py applies the same rule.
  s.strides_bytes[1] = a.rows == 1 ? round_up_16(pitch) : pitch;
  s.strides_bytes[2] = a.batch == 1 ? round_up_16(plane) : plane;
  s.box[0] = static_cast<uint32_t>(box_cols);
  s.box[1] = static_cast<uint32_t>(box_rows);
  s.box[2] = 1;
  s.swizzle = swizzle;
  return tensor_map_error(encode_tensor_map(s, out));
}

ffi::Error bits_map(const char* op, const Array3& a, int64_t box_rows, int64_t box_cols,
                    CUtensorMapSwizzle swizzle, CUtensorMap* out) {
  CUtensorMapDataType type;
  if (!tma_bits_type(a.elem_bytes, &type))
    return invalid(std::string(op) + ": element size " + std::to_string(a.elem_bytes) +
                   " bytes, TMA moves 1, 2, 4 or 8");
  return box_map(a, type, box_rows, box_cols, swizzle, out);
}

ffi::Error check_box(const char* op, int64_t box_rows, int64_t box_cols) {
  if (box_rows < 1 || box_rows > 256 || box_cols < 1 || box_cols > 256)
    return invalid(std::string(op) + ": box (" + std::to_string(box_rows) + ", " +
                   std::to_string(box_cols) + ") outside 1..256 per dimension");
  return ffi::Error::Success();
}

TmaBoxGrid grid_of(const Array3& a, int64_t box_rows, int64_t box_cols) {
  TmaBoxGrid g;
  g.box_rows = static_cast<int32_t>(box_rows);
  g.box_cols = static_cast<int32_t>(box_cols);
  g.row_boxes = static_cast<int32_t>((a.rows + box_rows - 1) / box_rows);
  g.col_boxes = static_cast<int32_t>((a.cols + box_cols - 1) / box_cols);
  g.batch = static_cast<int32_t>(a.batch);
  g.box_bytes = static_cast<uint32_t>(box_rows * box_cols * a.elem_bytes);
  return g;
}

bool same_shape(const ffi::AnyBuffer& x, const ffi::AnyBuffer& y) {
  auto a = x.dimensions(), b = y.dimensions();
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

ffi::Error check_input(const char* op, const char* name, const ffi::AnyBuffer& x) {
  const size_t rank = x.dimensions().size();
  if (rank != 2 && rank != 3)
    return invalid(std::string(op) + ": " + name + " must be (rows, cols) or (batch, rows, cols)");
  return ffi::Error::Success();
}

// Launch failures come back with CUDA's message; the non-sticky error state is cleared so XLA's
// own checks do not blame a later op for it.
ffi::Error launched(const char* op, cudaError_t e) {
  if (e == cudaSuccess) return ffi::Error::Success();
  cudaGetLastError();
  return ffi::Error::Internal(std::string(op) + " launch failed: " + cudaGetErrorName(e) + ": " +
                              cudaGetErrorString(e));
}

ffi::Error copy_impl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out,
                     int64_t box_rows, int64_t box_cols, int64_t swizzle) {
  constexpr const char* op = "tma_copy";
  JH_RETURN_IF_ERROR(check_input(op, "x", x));
  if (!same_shape(x, *out) || x.element_type() != out->element_type())
    return invalid("tma_copy: out must match x in shape and dtype");
  JH_RETURN_IF_ERROR(check_box(op, box_rows, box_cols));
  CUtensorMapSwizzle swz;
  JH_RETURN_IF_ERROR(decode_swizzle(op, swizzle, &swz));
  Array3 src, dst;
  JH_RETURN_IF_ERROR(view3(op, "x", x, &src));
  JH_RETURN_IF_ERROR(view3(op, "out", *out, &dst));
  JH_RETURN_IF_ERROR(check_swizzle_span(op, swz, box_cols, src.elem_bytes));
  alignas(64) CUtensorMap src_map, dst_map;
  JH_RETURN_IF_ERROR(bits_map(op, src, box_rows, box_cols, swz, &src_map));
  JH_RETURN_IF_ERROR(bits_map(op, dst, box_rows, box_cols, swz, &dst_map));
  return launched(op, launch_tma_copy(src_map, dst_map, grid_of(src, box_rows, box_cols), stream));
}

ffi::Error smem_bytes_impl(cudaStream_t stream, ffi::AnyBuffer x,
                           ffi::Result<ffi::AnyBuffer> out, int64_t box_rows, int64_t box_cols,
                           int64_t swizzle) {
  constexpr const char* op = "tma_smem_bytes";
  JH_RETURN_IF_ERROR(check_input(op, "x", x));
  JH_RETURN_IF_ERROR(check_box(op, box_rows, box_cols));
  CUtensorMapSwizzle swz;
  JH_RETURN_IF_ERROR(decode_swizzle(op, swizzle, &swz));
  Array3 src;
  JH_RETURN_IF_ERROR(view3(op, "x", x, &src));
  JH_RETURN_IF_ERROR(check_swizzle_span(op, swz, box_cols, src.elem_bytes));
  const TmaBoxGrid g = grid_of(src, box_rows, box_cols);
  if (out->element_type() != ffi::DataType::U8 ||
      out->element_count() != static_cast<size_t>(g.boxes()) * g.box_bytes)
    return invalid("tma_smem_bytes: out must be uint8 with box_bytes per box");
  alignas(64) CUtensorMap src_map;
  JH_RETURN_IF_ERROR(bits_map(op, src, box_rows, box_cols, swz, &src_map));
  return launched(op, launch_tma_smem_bytes(src_map, static_cast<uint8_t*>(out->untyped_data()),
                                            g, stream));
}

ffi::Error multicast_impl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out,
                          int64_t box_rows, int64_t box_cols, int64_t swizzle,
                          int64_t cluster_size) {
  constexpr const char* op = "tma_multicast";
  JH_RETURN_IF_ERROR(check_input(op, "x", x));
  JH_RETURN_IF_ERROR(check_box(op, box_rows, box_cols));
  if (cluster_size != 2 && cluster_size != 4)
    return invalid("tma_multicast: cluster_size must be 2 or 4");
  if (box_rows % cluster_size != 0)
    return invalid("tma_multicast: box rows must be divisible by cluster_size");
  auto xd = x.dimensions(), od = out->dimensions();
  bool stacked = od.size() == xd.size() + 1 && od[0] == cluster_size &&
                 x.element_type() == out->element_type();
  for (size_t i = 0; stacked && i < xd.size(); ++i) stacked = od[i + 1] == xd[i];
  if (!stacked) return invalid("tma_multicast: out must be (cluster_size, *x.shape) of x's dtype");
  CUtensorMapSwizzle swz;
  JH_RETURN_IF_ERROR(decode_swizzle(op, swizzle, &swz));
  Array3 src, dst;
  JH_RETURN_IF_ERROR(view3(op, "x", x, &src));
  JH_RETURN_IF_ERROR(view3(op, "out", *out, &dst));
  JH_RETURN_IF_ERROR(check_swizzle_span(op, swz, box_cols, src.elem_bytes));
  // Both maps move one CTA's slice: box_rows / cluster_size rows of the box.
  const int64_t slice_rows = box_rows / cluster_size;
  alignas(64) CUtensorMap src_map, dst_map;
  JH_RETURN_IF_ERROR(bits_map(op, src, slice_rows, box_cols, swz, &src_map));
  JH_RETURN_IF_ERROR(bits_map(op, dst, slice_rows, box_cols, swz, &dst_map));
  return launched(op, launch_tma_multicast(src_map, dst_map, grid_of(src, box_rows, box_cols),
                                           static_cast<int>(cluster_size), stream));
}

ffi::Error reduce_add_impl(cudaStream_t stream, ffi::AnyBuffer dst, ffi::AnyBuffer src,
                           ffi::Result<ffi::AnyBuffer> out, int64_t box_rows, int64_t box_cols,
                           int64_t swizzle) {
  constexpr const char* op = "tma_reduce_add";
  JH_RETURN_IF_ERROR(check_input(op, "dst", dst));
  DType t;
  CUtensorMapDataType type;
  if (!to_dtype(dst.element_type(), &t) || !tma_float_type(t, &type))
    return invalid("tma_reduce_add: dst must be float32, float16 or bfloat16");
  if (!same_shape(dst, src) || !same_shape(dst, *out) || src.element_type() != dst.element_type() ||
      out->element_type() != dst.element_type())
    return invalid("tma_reduce_add: dst, src and out must share shape and dtype");
  JH_RETURN_IF_ERROR(check_box(op, box_rows, box_cols));
  CUtensorMapSwizzle swz;
  JH_RETURN_IF_ERROR(decode_swizzle(op, swizzle, &swz));
  Array3 a_src, a_out;
  JH_RETURN_IF_ERROR(view3(op, "src", src, &a_src));
  JH_RETURN_IF_ERROR(view3(op, "out", *out, &a_out));
  JH_RETURN_IF_ERROR(check_swizzle_span(op, swz, box_cols, a_src.elem_bytes));
  // out aliases dst (input_output_aliases={0: 0}); should XLA ever hand a separate buffer, start
  // it from dst so the result is still dst + src.
  if (out->untyped_data() != dst.untyped_data())
    JH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->untyped_data(), dst.untyped_data(),
                                            dst.size_bytes(), cudaMemcpyDeviceToDevice, stream));
  alignas(64) CUtensorMap src_map, out_map;
  JH_RETURN_IF_ERROR(box_map(a_src, type, box_rows, box_cols, swz, &src_map));
  JH_RETURN_IF_ERROR(box_map(a_out, type, box_rows, box_cols, swz, &out_map));
  return launched(op, launch_tma_reduce_add(src_map, out_map, grid_of(a_src, box_rows, box_cols),
                                            stream));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(TmaCopyHandler, copy_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Ret<ffi::AnyBuffer>()  // out, x's shape and dtype
                                  .Attr<int64_t>("box_rows")
                                  .Attr<int64_t>("box_cols")
                                  .Attr<int64_t>("swizzle"),  // CUtensorMapSwizzle 0..3
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(TmaSmemBytesHandler, smem_bytes_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Ret<ffi::AnyBuffer>()  // out uint8 ([batch,] rb, cb, bytes)
                                  .Attr<int64_t>("box_rows")
                                  .Attr<int64_t>("box_cols")
                                  .Attr<int64_t>("swizzle"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(TmaMulticastHandler, multicast_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Ret<ffi::AnyBuffer>()  // out (cluster_size, *x.shape)
                                  .Attr<int64_t>("box_rows")
                                  .Attr<int64_t>("box_cols")
                                  .Attr<int64_t>("swizzle")
                                  .Attr<int64_t>("cluster_size"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(TmaReduceAddHandler, reduce_add_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // dst
                                  .Arg<ffi::AnyBuffer>()  // src
                                  .Ret<ffi::AnyBuffer>()  // out, aliases dst
                                  .Attr<int64_t>("box_rows")
                                  .Attr<int64_t>("box_cols")
                                  .Attr<int64_t>("swizzle"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
