// Host-visible interface of the TMA demonstration kernels (plain C++: ffi/tma_handlers.cc
// includes it). Every kernel works on a (batch, rows, cols) array cut into boxes of
// box_rows x box_cols; one CTA (or one cluster, for multicast) handles one box.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace jax_hopper {

struct TmaBoxGrid {
  int32_t box_rows, box_cols;
  int32_t row_boxes, col_boxes, batch;  // boxes along rows / cols, and the batch size
  uint32_t box_bytes;                   // one whole box in shared memory (the expect_tx count)

  int64_t boxes() const { return int64_t(row_boxes) * col_boxes * batch; }
};

// Shared memory a launch asks for: the box rounded up to whole 128-byte lines (a swizzled partial
// line still spans its whole line), plus slack to align the base to 1024 bytes (the 128B
// swizzle's period). Multicast keeps each of its cluster_size slices 1024-aligned.
// NOTES: jax_hopper/tma/boxes.py mirrors these two formulas for its early ValueError.
constexpr uint32_t tma_box_smem_bytes(uint32_t box_bytes) {
  return (box_bytes + 127) / 128 * 128 + 1024;
}
constexpr uint32_t tma_multicast_smem_bytes(uint32_t box_bytes, uint32_t cluster_size) {
  return cluster_size * ((box_bytes / cluster_size + 1023) / 1024 * 1024) + 1024;
}

// Each loads every box of `src` and TMA-stores it at the same coordinates of `dst`.
cudaError_t launch_tma_copy(const CUtensorMap& src, const CUtensorMap& dst, const TmaBoxGrid& g,
                            cudaStream_t stream);

// Each box's raw shared-memory bytes after the TMA load, written to out[box][box_bytes] with box
// numbered (batch, row box, col box) row-major.
cudaError_t launch_tma_smem_bytes(const CUtensorMap& src, uint8_t* out, const TmaBoxGrid& g,
                                  cudaStream_t stream);

// Clusters of cluster_size CTAs per box; `src` and `dst` have boxes of box_rows / cluster_size
// rows (one slice per CTA). dst is cluster_size stacked copies: (cluster_size * batch, rows, cols).
cudaError_t launch_tma_multicast(const CUtensorMap& src, const CUtensorMap& dst,
                                 const TmaBoxGrid& g, int cluster_size, cudaStream_t stream);

// dst += src box by box, with cp.reduce.async.bulk.tensor .add (dst's map carries the float type).
cudaError_t launch_tma_reduce_add(const CUtensorMap& src, const CUtensorMap& dst,
                                  const TmaBoxGrid& g, cudaStream_t stream);

}  // namespace jax_hopper
