// fp8 transpose: one CTA per 128 x 128 tile of x. Thread 0 TMA-loads the tile into shared memory;
// each thread gathers one column of it, 16 rows at a time, into 16-byte chunks of the transposed
// staging tile (128B-swizzled, staging.cuh), which thread 0 TMA-stores. Partial tiles load zeros
// past x's edge and store only their in-bounds part. The quantize kernel's transposed copy
// without the conversion: an operand already in fp8 keeps its bits (and so its scales).
// PTX ISA: cp.async.bulk.tensor (load and store), mbarrier.
#include "cuda/quantize/transpose.h"

#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/quantize/staging.cuh"

namespace jax_hopper {
namespace {

constexpr int kThreads = 256;
constexpr int kColHalves = kThreads / kQuantTile;  // a thread per column and half of the rows
constexpr int kChunkRows = 16;                     // rows of x in one 16-byte chunk of t
constexpr int kHalfChunks = kQuantTile / kColHalves / kChunkRows;
constexpr uint32_t kTileBytes = kQuantTile * kQuantTile;
// x's tile, t's staging tile (1024-aligned, as the 128B swizzle needs), the barrier, and slack to
// align the base.
constexpr uint32_t kSmemBytes = 2 * kTileBytes + 8 + 1024;

__global__ void __launch_bounds__(kThreads)
    transpose_fp8_kernel(const __grid_constant__ TransposeArgs p) {
  uint8_t* x = ptx::aligned_dynamic_smem();
  uint8_t* t = x + kTileBytes;
  uint64_t* bar = reinterpret_cast<uint64_t*>(t + kTileBytes);

  const int32_t col_tiles = (p.cols + kQuantTile - 1) / kQuantTile;
  const int32_t row_tiles = (p.rows + kQuantTile - 1) / kQuantTile;
  const int32_t c0 = static_cast<int32_t>(blockIdx.x % col_tiles) * kQuantTile;
  const int32_t r0 = static_cast<int32_t>(blockIdx.x / col_tiles % row_tiles) * kQuantTile;
  const int32_t b = static_cast<int32_t>(blockIdx.x / col_tiles / row_tiles);
  const uint32_t tid = threadIdx.x;

  if (tid == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_mbarrier_init();
    ptx::mbarrier_arrive_expect_tx(bar, kTileBytes);
    ptx::tma_load_3d(&p.x_map, bar, x, c0, r0, b);
  }
  __syncthreads();  // the barrier's init is visible before anyone waits on it
  ptx::mbarrier_wait(bar, 0);

  // A warp reads 32 consecutive bytes of one row at a time (4 lanes a word: no bank conflicts).
  const int col = static_cast<int>(tid % kQuantTile), half = static_cast<int>(tid / kQuantTile);
  for (int g = half * kHalfChunks; g < (half + 1) * kHalfChunks; ++g) {
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint8_t* src = x + (g * kChunkRows + 4 * w) * kQuantTile + col;
      words[w] = src[0] | (uint32_t{src[kQuantTile]} << 8) |
                 (uint32_t{src[2 * kQuantTile]} << 16) | (uint32_t{src[3 * kQuantTile]} << 24);
    }
    *reinterpret_cast<uint4*>(t + swizzled_chunk(col, g)) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }

  // The staging tile was written by the generic proxy; TMA reads it through the async one.
  ptx::fence_proxy_async_smem();
  __syncthreads();
  if (tid == 0) {
    ptx::tma_store_3d(&p.t_map, t, r0, c0, b);
    ptx::bulk_commit_group();
    ptx::bulk_wait_group<0>();
  }
}

}  // namespace

cudaError_t launch_transpose_fp8(const TransposeArgs& args, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(
      transpose_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  const int64_t blocks = int64_t(args.batch) * ((args.rows + kQuantTile - 1) / kQuantTile) *
                         ((args.cols + kQuantTile - 1) / kQuantTile);
  transpose_fp8_kernel<<<static_cast<uint32_t>(blocks), kThreads, kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace jax_hopper
