// XLA FFI handler of the grouped GEMM's tile table (jax_hopper/gemm/ragged_primitive.py,
// build_tile_table): the (G,) int32 group sizes -> the (1 + kGroupTileFields * slots,) int32
// table for M rows in tiles of `block` rows, paired or not (for 2-CTA clusters along M), built
// on the device (cuda/gemm/scheduler/tile_table.cu).
#include <cstdint>
#include <string>

#include "cuda/gemm/scheduler/tile_table.h"
#include "ffi/common.h"
#include "ffi/handlers.h"

namespace jax_hopper {
namespace {

constexpr const char* kOp = "grouped tile table";

ffi::Error tile_table_impl(cudaStream_t stream, ffi::AnyBuffer sizes,
                           ffi::Result<ffi::AnyBuffer> table, int64_t m, int64_t block,
                           bool paired) {
  const auto sd = sizes.dimensions();
  if (sizes.element_type() != ffi::DataType::S32 || sd.size() != 1)
    return invalid(std::string(kOp) + ": group_sizes must be (G,) int32");
  const int64_t groups = sd[0];
  if (m < 0 || m > INT32_MAX || block < 1 || block > INT32_MAX || groups > INT32_MAX)
    return invalid(std::string(kOp) + ": M must be in 0..2^31-1 and the block in 1..2^31-1");
  const auto td = table->dimensions();
  const int64_t slots = grouped_tile_slots(m, groups, block, paired);
  if (table->element_type() != ffi::DataType::S32 || td.size() != 1 ||
      td[0] != 1 + kGroupTileFields * slots || slots > INT32_MAX)
    return invalid(std::string(kOp) + ": the table must be int32 (1 + " +
                   std::to_string(kGroupTileFields) + " * slots,) = (" +
                   std::to_string(1 + kGroupTileFields * slots) + ",) (ragged_tiles.tile_slots)");
  JH_CUDA_RETURN_IF_ERROR(launch_grouped_tile_table(
      static_cast<const int32_t*>(sizes.untyped_data()), static_cast<int32_t>(groups),
      static_cast<int32_t>(m), static_cast<int32_t>(block), paired, static_cast<int32_t>(slots),
      static_cast<int32_t*>(table->untyped_data()), stream));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedTileTableHandler, tile_table_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("m")
                                  .Attr<int64_t>("block")
                                  .Attr<bool>("paired"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_hopper
