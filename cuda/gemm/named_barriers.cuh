// The GEMM kernel's named barriers (bar.sync ids; 0 is __syncthreads): one per consumer
// warpgroup (its epilogue and stream-K fix-up: 128 threads) and one over both consumer
// warpgroups of a cooperative tile (256 threads).
#pragma once

#include <cstdint>

namespace jax_hopper {

constexpr uint32_t kFirstConsumerBarrier = 1;  // + the consumer warpgroup's index (0 or 1)
constexpr uint32_t kTileBarrier = 3;

}  // namespace jax_hopper
