// XLA FFI handler of hopper_matmul: decode buffers and attributes into GemmParams, encode the
// tensor maps, pick the compiled instance, launch on XLA's stream.
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "ffi/common.h"
#include "ffi/handlers.h"
#include "ffi/tensor_map.h"
#include "sm90_gemm_instances.h"

namespace jax_hopper {
namespace {

// Operand (batch, rows, cols) as stored; `mn_major` says whether rows are K (MN-major) or MN.
struct Operand {
  int64_t batch, mn, k;
};

Operand operand_shape(const ffi::AnyBuffer& buf, bool mn_major) {
  auto d = buf.dimensions();
  return mn_major ? Operand{d[0], d[2], d[1]} : Operand{d[0], d[1], d[2]};
}

// 3-D tensor map over a row-major (batch, rows, cols) array; cols is the contiguous dim.
ffi::Error operand_map(const ffi::AnyBuffer& buf, size_t elem_bytes, uint32_t box_cols,
                       uint32_t box_rows, CUtensorMap* out) {
  auto d = buf.dimensions();
  TensorMapSpec s = {};
  if (!tma_bits_type(elem_bytes, &s.dtype)) return invalid("unsupported element size");
  s.rank = 3;
  s.base = buf.untyped_data();
  s.dims[0] = d[2];
  s.dims[1] = d[1];
  s.dims[2] = d[0];
  s.strides_bytes[1] = d[2] * elem_bytes;
  s.strides_bytes[2] = d[1] * d[2] * elem_bytes;
  s.box[0] = box_cols;
  s.box[1] = box_rows;
  s.box[2] = 1;
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return encode_tensor_map(s, out);
}

// hopper_glu's weight, (K, 2, n) row-major: mapped as (n, K, half) so that one box coordinate
// picks the gate (0) or up (1) half (cuda/sm90_gemm_kernel.cuh, load_operand). The half
// stride, n elements, is a multiple of 16 bytes (the handler checks).
ffi::Error gated_weight_map(const ffi::AnyBuffer& buf, int64_t n, CUtensorMap* out) {
  auto d = buf.dimensions();
  TensorMapSpec s = {};
  if (!tma_bits_type(2, &s.dtype)) return invalid("unsupported element size");
  s.rank = 3;
  s.base = buf.untyped_data();
  s.dims[0] = n;
  s.dims[1] = d[0];
  s.dims[2] = 2;
  s.strides_bytes[1] = 2 * n * 2;
  s.strides_bytes[2] = n * 2;
  s.box[0] = 64;
  s.box[1] = 64;
  s.box[2] = 1;
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return encode_tensor_map(s, out);
}

const GemmInstance* find_instance(DType t, int64_t bm, int64_t bn, int64_t bk, int64_t stages,
                                  bool a_mn, bool b_mn, bool gated) {
  for (const GemmInstance& g : kGemmInstances) {
    if (g.dtype == t && g.bm == bm && g.bn == bn && g.bk == bk && g.stages == stages &&
        g.a_mn == a_mn && g.b_mn == b_mn && g.gated == gated)
      return &g;
  }
  return nullptr;
}

ffi::Error gemm_impl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer bias,
                     ffi::AnyBuffer residual, ffi::Result<ffi::AnyBuffer> out,
                     ffi::Result<ffi::AnyBuffer> workspace, int64_t block_m,
                     int64_t block_n, int64_t block_k, int64_t stages, int64_t cluster_m,
                     int64_t cluster_n, int64_t group_size, int64_t raster_n, int64_t a_mn_major,
                     int64_t b_mn_major, int64_t activation, int64_t gated, float alpha,
                     float beta) {
  DType tin, tb, tout;
  if (!to_dtype(a.element_type(), &tin) || tin == DType::kF32 || !to_dtype(b.element_type(), &tb) ||
      tb != tin)
    return invalid("hopper_matmul: a and b must both be bfloat16 or both float16");
  if (!to_dtype(out->element_type(), &tout)) return invalid("hopper_matmul: unsupported out dtype");
  if (a.dimensions().size() != 3 || b.dimensions().size() != 3 || out->dimensions().size() != 3)
    return invalid("hopper_matmul handler expects (batch, rows, cols) operands");

  auto od = out->dimensions(), bd = b.dimensions();
  const int64_t batch = od[0], m = od[1], n = od[2];
  if (gated && (!b_mn_major || bd[1] != 2 || bd[2] != n || (n * 2) % 16 != 0))
    return invalid("hopper_glu: the weight must be (K, 2, N) with N a multiple of 8");
  // A gated weight is the (1, K, 2N) product operand [gate | up] to every check below.
  const Operand oa = operand_shape(a, a_mn_major),
                ob = gated ? Operand{1, 2 * n, bd[0]} : operand_shape(b, b_mn_major);
  const int64_t product_n = gated ? 2 * n : n;
  if (oa.mn != m || ob.mn != product_n || oa.k != ob.k ||
      (oa.batch != 1 && oa.batch != batch) || (ob.batch != 1 && ob.batch != batch))
    return invalid("hopper_matmul: operand shapes do not match the output");
  const bool has_bias = bias.element_count() > 0, has_res = residual.element_count() > 0;
  if (has_bias &&
      (bias.element_type() != ffi::DataType::F32 || bias.element_count() != product_n))
    return invalid("hopper_matmul: bias must be float32 with one entry per product column");
  if (has_res && (residual.element_type() != out->element_type() ||
                  residual.dimensions().size() != 3 || residual.dimensions()[1] != m ||
                  residual.dimensions()[2] != n))
    return invalid("hopper_matmul: residual must be (batch or 1, M, N) in the out dtype");
  if (m == 0 || n == 0 || batch == 0) return ffi::Error::Success();

  const GemmInstance* inst =
      find_instance(tin, block_m, block_n, block_k, stages, a_mn_major, b_mn_major, gated);
  if (!inst)
    return invalid(std::string("hopper_matmul: no compiled ") + (gated ? "gated " : "") +
                   "kernel for block " + std::to_string(block_m) + "x" +
                   std::to_string(block_n) + "x" + std::to_string(block_k) + ", stages " +
                   std::to_string(stages) + " (see jax_hopper.gemm.configs)");

  GemmParams p = {};
  p.m = static_cast<int32_t>(m);
  p.n = static_cast<int32_t>(n);
  p.k = static_cast<int32_t>(oa.k);
  p.batch = static_cast<int32_t>(batch);
  p.a_batched = oa.batch == batch && batch > 1;
  p.b_batched = ob.batch == batch && batch > 1;
  p.out_dtype = tout;
  p.alpha = alpha;
  p.beta = beta;
  p.activation = static_cast<Activation>(activation);
  p.gated = gated ? 1 : 0;
  p.bias = has_bias ? bias.untyped_data() : nullptr;
  p.residual = has_res ? residual.untyped_data() : nullptr;
  p.residual_batched = has_res && residual.dimensions()[0] == batch && batch > 1;
  p.cluster_m = static_cast<int32_t>(cluster_m);
  p.cluster_n = static_cast<int32_t>(cluster_n);
  p.group_size = static_cast<int32_t>(group_size);
  p.raster_n = static_cast<int32_t>(raster_n);

  alignas(64) CUtensorMap map_a, map_b, map_d, map_r;
  // Boxes are one 128-byte swizzle row (64 elements) wide. A K-major operand tile is one box of
  // all its rows (split between the CTAs of a cluster sharing it); an MN-major tile is 64 x 64
  // boxes side by side (cuda/sm90_gemm_kernel.cuh, load_operand). The output box is 64 rows,
  // one consumer warpgroup's strip.
  const uint32_t a_rows = a_mn_major ? 64 : static_cast<uint32_t>(block_m / cluster_n);
  const uint32_t b_rows = b_mn_major ? 64 : static_cast<uint32_t>(block_n / cluster_m);
  JH_RETURN_IF_ERROR(operand_map(a, 2, 64, a_rows, &map_a));
  if (gated)
    JH_RETURN_IF_ERROR(gated_weight_map(b, n, &map_b));
  else
    JH_RETURN_IF_ERROR(operand_map(b, 2, 64, b_rows, &map_b));
  const size_t out_bytes = dtype_bytes(tout);
  JH_RETURN_IF_ERROR(operand_map(*out, out_bytes, static_cast<uint32_t>(128 / out_bytes), 64,
                                 &map_d));
  // The residual is read box for box like the output it is added to (the epilogue loads it
  // into the staging buffer by TMA).
  if (has_res)
    JH_RETURN_IF_ERROR(operand_map(residual, out_bytes, static_cast<uint32_t>(128 / out_bytes),
                                   64, &map_r));
  else
    map_r = map_d;

  int device = 0;
  JH_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const GemmLaunch launch = {&p,     &map_a, &map_b, &map_d, &map_r, device,
                             stream, workspace->untyped_data(),
                             static_cast<int64_t>(workspace->size_bytes())};
  cudaError_t e = inst->launch(launch);
  if (e != cudaSuccess)
    return ffi::Error::Internal(std::string("launching ") + inst->name + " failed: " +
                                cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmHandler, gemm_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // a
                                  .Arg<ffi::AnyBuffer>()  // b
                                  .Arg<ffi::AnyBuffer>()  // bias float32 (N or 2N), (0,) if none
                                  .Arg<ffi::AnyBuffer>()  // residual, (0,0,0) when absent
                                  .Ret<ffi::AnyBuffer>()  // out (batch, m, n)
                                  .Ret<ffi::AnyBuffer>()  // stream-K workspace, uint8
                                  .Attr<int64_t>("block_m")
                                  .Attr<int64_t>("block_n")
                                  .Attr<int64_t>("block_k")
                                  .Attr<int64_t>("stages")
                                  .Attr<int64_t>("cluster_m")
                                  .Attr<int64_t>("cluster_n")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("raster_n")
                                  .Attr<int64_t>("a_mn_major")
                                  .Attr<int64_t>("b_mn_major")
                                  .Attr<int64_t>("activation")
                                  .Attr<int64_t>("gated")
                                  .Attr<float>("alpha")
                                  .Attr<float>("beta"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
