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
    Tiles go in groups of 16 along M (GemmConfig's default). A group of 8 makes one wave of
    2-CTA clusters square and cut ncu's DRAM reads at 8192^3 from 1.54 to 1.28 GB (cuBLAS 1.20),
    yet ran 2-4% slower than 16 on all six large shapes, timed interleaved in two processes
    (H100, 2026-11-22, benchmarks/results/gemm_group_clusters_h100_20261122_*): DRAM traffic
    is not what limits these shapes.
    """
    big, small = configs.TILE_SHAPES
    tiles_big = math.ceil(m / big.block_m) * math.ceil(n / big.block_n) * batch
    tile = big if tiles_big >= num_sms else small
    tiles_m = math.ceil(m / tile.block_m)
    tiles = tiles_m * math.ceil(n / tile.block_n) * batch
    cluster_m = 2 if tiles_m >= 2 and tiles >= 2 * num_sms else 1
    return GemmConfig(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k,
                      stages=tile.stages, cluster_m=cluster_m, cluster_n=1, raster="m")
