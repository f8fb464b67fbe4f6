// Every FFI handler symbol the module registers (ffi/module.cc).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jax_hopper {

// The instantiate stage of every GEMM target, and the initialize stage of those for split plans
// (ffi/gemm/split_flags.h, ffi/module.cc).
XLA_FFI_DECLARE_HANDLER_SYMBOL(GemmInstantiate);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GemmInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MatmulHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MatmulSwapHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MatmulSwapOddHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GluHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedGluHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedFp8Handler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedFp8BlockHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedTileTableHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedContractionHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedContractionFp8Handler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GroupedContractionFp8BlockHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fp8Handler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fp8BlockHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fp8SwapHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fp8BlockSwapHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(QuantizeFp8Handler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TransposeFp8Handler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TmaCopyHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TmaSmemBytesHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TmaMulticastHandler);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TmaReduceAddHandler);

}  // namespace jax_hopper
