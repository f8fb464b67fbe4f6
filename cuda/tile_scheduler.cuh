// Tile order: maps a tile index (cluster units, over every batch entry; cuda/stream_k.h says
// which cluster takes which index) to block coordinates; tiles are grouped so concurrently
// running CTAs share operand tiles in L2.
#pragma once

#include <cstdint>

#include "cuda/sm90_gemm_params.h"

namespace jax_hopper {

struct TileCoord {
  int32_t batch, m_block, n_block;  // block indices of this CTA's tile
};

// Tile `t` (cluster units) for the CTA of rank `rank` inside its cluster. A cluster's second
// tile may lie past M or N; it is computed on zero-filled loads and its store is clipped, which
// keeps both CTAs in the same barrier phases. Everything is recomputed from the parameters
// (a few integer divisions per tile) rather than kept: registers next to the accumulators are
// scarcer than instructions.
template <int BM, int BN>
__device__ __forceinline__ TileCoord tile_coord(const GemmParams& p, int32_t t, uint32_t rank) {
  const int32_t ctiles_m = ((p.m + BM - 1) / BM + p.cluster_m - 1) / p.cluster_m;
  const int32_t ctiles_n = ((product_cols(p) + BN - 1) / BN + p.cluster_n - 1) / p.cluster_n;
  const int32_t per_batch = ctiles_m * ctiles_n;
  TileCoord c;
  c.batch = t / per_batch;
  const int32_t r = t - c.batch * per_batch;
  // Grouped order: `group_size` rows of tiles along the major direction, walked column by column.
  const int32_t major = p.raster_n ? ctiles_n : ctiles_m;
  const int32_t minor = p.raster_n ? ctiles_m : ctiles_n;
  const int32_t in_group = p.group_size * minor;
  const int32_t first = (r / in_group) * p.group_size;
  const int32_t size = min(p.group_size, major - first);
  const int32_t i_major = first + (r % in_group) % size;
  const int32_t i_minor = (r % in_group) / size;
  const int32_t cm = p.raster_n ? i_minor : i_major;
  const int32_t cn = p.raster_n ? i_major : i_minor;
  c.m_block = cm * p.cluster_m + (p.cluster_m > 1 ? static_cast<int32_t>(rank) : 0);
  c.n_block = cn * p.cluster_n + (p.cluster_n > 1 ? static_cast<int32_t>(rank) : 0);
  return c;
}

}  // namespace jax_hopper
