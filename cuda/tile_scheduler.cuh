// Persistent tile scheduler: each cluster walks the output tiles of every batch entry with a
// stride of the number of clusters; tiles are grouped so concurrently running CTAs share
// operand tiles in L2.
#pragma once

#include <cstdint>

#include "cuda/sm90_gemm_params.h"

namespace jax_hopper {

struct TileCoord {
  int32_t batch, m_block, n_block;  // block indices of this CTA's tile
};

template <int BM, int BN>
struct TileScheduler {
  int32_t ctiles_m, ctiles_n, per_batch, total;  // in cluster tiles
  int32_t cluster_m, cluster_n, group, raster_n;

  __device__ explicit TileScheduler(const GemmParams& p)
      : cluster_m(p.cluster_m), cluster_n(p.cluster_n), group(p.group_size), raster_n(p.raster_n) {
    const int32_t tiles_m = (p.m + BM - 1) / BM;
    const int32_t tiles_n = (p.n + BN - 1) / BN;
    ctiles_m = (tiles_m + cluster_m - 1) / cluster_m;
    ctiles_n = (tiles_n + cluster_n - 1) / cluster_n;
    per_batch = ctiles_m * ctiles_n;
    total = per_batch * p.batch;
  }

  // Tile `t` (cluster units) for the CTA of rank `rank` inside its cluster. A cluster's second
  // tile may lie past M or N; it is computed on zero-filled loads and its store is clipped, which
  // keeps both CTAs in the same barrier phases.
  __device__ TileCoord tile(int32_t t, uint32_t rank) const {
    TileCoord c;
    c.batch = t / per_batch;
    int32_t r = t - c.batch * per_batch;
    // Grouped order: `group` rows of tiles along the major direction, walked column by column.
    const int32_t major = raster_n ? ctiles_n : ctiles_m;
    const int32_t minor = raster_n ? ctiles_m : ctiles_n;
    const int32_t in_group = group * minor;
    const int32_t first = (r / in_group) * group;
    const int32_t size = min(group, major - first);
    const int32_t i_major = first + (r % in_group) % size;
    const int32_t i_minor = (r % in_group) / size;
    const int32_t cm = raster_n ? i_minor : i_major;
    const int32_t cn = raster_n ? i_major : i_minor;
    c.m_block = cm * cluster_m + (cluster_m > 1 ? static_cast<int32_t>(rank) : 0);
    c.n_block = cn * cluster_n + (cluster_n > 1 ? static_cast<int32_t>(rank) : 0);
    return c;
  }
};

}  // namespace jax_hopper
