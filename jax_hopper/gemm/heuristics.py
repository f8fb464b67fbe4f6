"""Picks a GemmConfig from the compiled set for a problem shape."""

from __future__ import annotations

import math

from jax_hopper.gemm import configs
from jax_hopper.gemm.config import GemmConfig

# H100 SXM and H200 both have 132 SMs; the launcher sizes the grid from the real device.
DEFAULT_NUM_SMS = configs.MAX_SMS


def choose_config(m: int, n: int, k: int, batch: int = 1,
                  num_sms: int = DEFAULT_NUM_SMS) -> GemmConfig:
    """Large tiles when they fill the machine, else 128x128 tiles for more parallelism.

    NOTES: a 2-CTA cluster along M halves B's L2->SM traffic by multicast; it only pays when
    there are at least two M tiles per N column and enough tiles to keep every SM busy.
    """
    big, small = configs.TILE_SHAPES
    tiles_big = math.ceil(m / big.block_m) * math.ceil(n / big.block_n) * batch
    tile = big if tiles_big >= num_sms else small
    tiles_m = math.ceil(m / tile.block_m)
    tiles = tiles_m * math.ceil(n / tile.block_n) * batch
    cluster_m = 2 if tiles_m >= 2 and tiles >= 2 * num_sms else 1
    group = group_size_for(tile.block_m * cluster_m, tile.block_n, num_sms // cluster_m)
    return GemmConfig(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k,
                      stages=tile.stages, cluster_m=cluster_m, cluster_n=1, raster="m",
                      group_size=group)


def group_size_for(cluster_tile_m: int, cluster_tile_n: int, clusters: int) -> int:
    """Rows of cluster tiles per group (raster "m") that make one wave's tiles a square block.

    The `clusters` tiles running at once read their A row stripes and B column stripes from
    DRAM about once per wave (the CTAs move through K together, so L2 serves the rest).
    g rows by clusters/g columns read g * cluster_tile_m + (clusters/g) * cluster_tile_n
    rows and columns, least at g = sqrt(clusters * cluster_tile_n / cluster_tile_m).
    NOTES: at 8192^3 (256 x 256 cluster tiles, 66 clusters) that is 8; measured with ncu
    (H100, 2026-11-22), 8 instead of 16 cut DRAM reads from 1.54 to 1.28 GB (cuBLAS: 1.20),
    and from 1.08 to 0.89 GB at 8192x12288x4096.
    """
    return max(1, round(math.sqrt(clusters * cluster_tile_n / cluster_tile_m)))
