"""Picks a GemmConfig from the compiled set for a problem shape."""

from __future__ import annotations

import math

from jax_hopper.gemm import configs
from jax_hopper.gemm.config import GemmConfig

# H100 SXM and H200 both have 132 SMs; the launcher sizes the grid from the real device.
DEFAULT_NUM_SMS = configs.MAX_SMS
# H100 SXM: dense bf16 peak per SM (989 TFLOP/s over 132 SMs) and HBM3 bandwidth, in FLOP and
# bytes per second, for the small-M roofline below (an H200's faster HBM only widens it).
SM_FLOPS = 989e12 / 132
HBM_BYTES_PER_S = 3.35e12


def split_k_pays(m: int, n: int, batch: int, block_m: int, block_n: int) -> bool:
    """Whether splitting K helps a problem with fewer tiles than SMs.

    Unsplit, each busy SM computes one whole tile: 2*bm*bn*K FLOP at SM_FLOPS. Reading the
    operands once from HBM takes 2*batch*(m+n)*K bytes. Splitting shortens the first, not the
    second, so it pays only when the SMs are the limit; K cancels out.
    NOTES: H100, 2026-11-22 (gemm_splitk_configs_h100_20261122.log), split vs whole 128x128
    tiles: 256x4096x4096 +3%, 256x4096x14336 +36% (SM-bound by this rule); 128x8192x8192 -5%
    (HBM-bound by it).
    """
    return block_m * block_n * HBM_BYTES_PER_S > SM_FLOPS * batch * (m + n)


# Throughput of a 128x128 tile relative to 128x256 on one SM: 0.76 at 2048x4096x4096 and 0.73
# at 1024x4096x14336, whole waves of each (H100, 2026-11-22, gemm_tiles_m1024_h100_20261122.log,
# gemm_mid1 in gemm_splitk_configs' session).
SMALL_TILE_EFFICIENCY = 0.75


def wave_cost(m: int, n: int, batch: int, tile: configs.TileShape, efficiency: float,
              num_sms: int) -> float:
    """Relative run time of whole tiles in waves: waves x tile area / per-SM efficiency."""
    tiles = math.ceil(m / tile.block_m) * math.ceil(n / tile.block_n) * batch
    return math.ceil(tiles / num_sms) * tile.block_m * tile.block_n / efficiency


def choose_config(m: int, n: int, k: int, batch: int = 1,
                  num_sms: int = DEFAULT_NUM_SMS) -> GemmConfig:
    """The tile that takes the fewest tile-waves (128x256 unless 128x128's extra parallelism
    outweighs its lower efficiency), split along K (stream_k) when there are fewer tiles than
    SMs only where split_k_pays.

    One partial wave of 128x256 tiles beats two of 128x128: at M = 768-1024 (96-128 large
    tiles) choosing 128x128 because the large tiles left some SMs idle ran 22-31% slower
    (gemm_tiles_m1024_h100_20261122.log); at M = 256-512 one wave of 128x128 tiles is the
    faster.

    NOTES: a 2-CTA cluster along M halves B's L2->SM traffic by multicast; it only pays when
    there are at least two M tiles per N column and enough tiles to keep every SM busy.
    Tiles go in groups of 16 along M (GemmConfig's default). A group of 8 makes one wave of
    2-CTA clusters square and cut ncu's DRAM reads at 8192^3 from 1.54 to 1.28 GB (cuBLAS 1.20),
    yet ran 2-4% slower than 16 on all six large shapes, timed interleaved in two processes
    (H100, 2026-11-22, benchmarks/results/gemm_group_clusters_h100_20261122_*): DRAM traffic
    is not what limits these shapes.
    """
    big, small = configs.TILE_SHAPES
    big_cost = wave_cost(m, n, batch, big, 1.0, num_sms)
    tile = big if big_cost <= wave_cost(m, n, batch, small, SMALL_TILE_EFFICIENCY, num_sms) \
        else small
    tiles_m = math.ceil(m / tile.block_m)
    tiles = tiles_m * math.ceil(n / tile.block_n) * batch
    cluster_m = 2 if tiles_m >= 2 and tiles >= 2 * num_sms else 1
    stream_k = tiles >= num_sms or split_k_pays(m, n, batch, tile.block_m, tile.block_n)
    return GemmConfig(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k,
                      stages=tile.stages, cluster_m=cluster_m, cluster_n=1, raster="m",
                      stream_k=stream_k)
