"""The grouped families' configs: grouped, grouped_glu and the contractions, fp8 or not."""

from __future__ import annotations

from jax_hopper.kernels import catalog
from jax_hopper.gemm.config import GemmConfig

# Rows per group at or under which the grouped families take their 64-row ping-pong tile.
# Half the tile: routing spreads the group sizes (uniform routing over 64 groups: +-12% at 64
# rows), and a group one row past a tile takes two, reading its weights twice.
GROUPED_SMALL_TILE_ROWS = 32


def _grouped_tile(fam, m: int, groups: int):
    tiles = {(t.block_m, t.block_n, t.schedule): t for t in fam.tiles}
    small = m <= GROUPED_SMALL_TILE_ROWS * groups
    return tiles[64, 256, "pingpong"] if small else tiles[128, 256, "cooperative"]


def choose_grouped_config(m: int, n: int, groups: int, family: str = "grouped") -> GemmConfig:
    """A compiled grouped tile for rows spread over `groups` (sizes unknown until run time: the
    average decides): 64 x 256 ping-pong for GROUPED_SMALL_TILE_ROWS rows per group or fewer
    (decode: a 128-row tile would be mostly another group's rows), else 128 x 256. Clusters: the
    128 x 256 tile runs without them unless its family pairs_128_row_tiles (grouped_fp8); the
    decode tile, and a pairing 128 x 256, run 2-CTA clusters along N (sharing the M tile's A by
    multicast) where the column tiles pair up: an odd count of column tiles leaves one CTA per
    row of tiles on a tile past N, which costs more than the multicast saves unless the tiles
    are many.

    NOTES: H100, bf16 (benchmarks/results/tune_h100_20261127_grouped_clusters.json: the tuner's
    interleaved timings, uniform routing). The 128 x 256 tile without a cluster against 2-CTA
    clusters along N, TFLOP/s, over 64 groups of 128 / 256 / 512 / 1024 rows: K x N 2880 x 5760 272
    / 454 / 524 / 574 against 265 / 388 / 450 / 482; 4096 x 4096 282 / 457 / 570 / 580 against 281 /
    398 / 510 / 526; 768 x 2048 and 2048 x 1536 within 4% either way (the pair won by 5% at 1024
    rows x 1536 columns); 32 groups of 1024 rows, N 4096: K 2048 / 4096 / 7168 (DeepSeek up) 571 /
    564 / 602 against 580 / 586 / 538; the gated unit: Mixtral (8 x 2048 rows) 662 against 655,
    Qwen3-30B (128 x 256 rows, F 768) 448 against 403. Along M (the pair multicasting the weights)
    was mostly between them. Until 2026-11-24 (grouped_h100_20261123_sweep.json,
    grouped_h100_20261124_cluster_m.json) the pair along N won on Mixtral up and DeepSeek up, by 14%
    and 43-61%; which kernel change since turned that round is not known (not profiled). fp8
    (grouped_fp8, e4m3 x e4m3) still gains from the pair: Mixtral up 1242 against 1190, Qwen3 up 753
    / 734, DeepSeek up 1149 / 1122, gpt-oss up (128 groups of 128 rows) 519 / 526. The 64-row tile:
    at 64 rows per group (64 groups, 7168 -> 4096) 128 x 256 ran 176 against its 150 (a group past
    64 rows takes two of its tiles), at 32 rows 91 against 91, at 4 rows 12 against 12; its cluster
    along N was even there (91 / 90) and won 59 against 54 (1024 rows, 32 groups) on 2026-11-23. At
    a few rows per group the weights' bytes are the cost: a 128-row tile's idle rows, and the
    swapped product (weights as wgmma's M; built and measured 2026-11-24, 58-87% of the floor
    against 85-97%: not kept), gain nothing there. 128 x 128 ping-pong, twice the tiles of 128 x
    256, won nowhere by more than 2%; it stays compiled for explicit configs and the tuner. The
    block-scaled fp8 family never clusters (Family.multicast, as the dense block-scaled fp8)."""
    fam = catalog.FAMILIES[family]
    tile = _grouped_tile(fam, m, groups)
    column_tiles = -(-n // tile.block_n)
    clustered = fam.multicast and (tile.block_m == 64 or fam.pairs_128_row_tiles)
    pairs = clustered and column_tiles >= 2 and (column_tiles % 2 == 0 or column_tiles >= 8)
    return GemmConfig.for_tile(tile, stream_k=False, cluster_n=2 if pairs else 1)


def choose_grouped_glu_config(m: int, f: int, groups: int) -> GemmConfig:
    """choose_grouped_config's rule for the (M, 2F) gated product: 64 x 256 ping-pong for
    GROUPED_SMALL_TILE_ROWS rows per expert or fewer (decode), in 2-CTA clusters along N where
    the product has two column tiles; else 128 x 256 without a cluster (measured as
    choose_grouped_config's NOTES say)."""
    fam = catalog.FAMILIES["grouped_glu"]
    tile = _grouped_tile(fam, m, groups)
    pairs = (tile.block_m == 64 or fam.pairs_128_row_tiles) and 2 * f > tile.block_n
    return GemmConfig.for_tile(tile, stream_k=False, cluster_n=2 if pairs else 1)


def choose_contraction_config(p: int, q: int, family: str = "grouped_contraction") -> GemmConfig:
    """A compiled config of a grouped contraction family (grouped_contraction,
    grouped_contraction_fp8 or grouped_contraction_fp8_block) for an output (G, P, Q): 128 x 256
    cooperative tiles, each contracting its group's rows, in 2-CTA clusters along M (the CTAs
    share y's tile by multicast) where a group has two row tiles, else along N (none where the
    family does not multicast: the block-scaled one, as fp8_block).

    NOTES: H100, bf16, 2026-11-23 (benchmarks/results/grouped_h100_20261123_wgrad.json), the
    weight gradient of the Mixtral up, DeepSeek up and DeepSeek down cases (512-2048 rows per
    group), TFLOP/s: 128 x 256 in clusters 1x1 / 2x1 / 1x2: 554 / 568 / 560, 546 / 573 / 558,
    432 / 454 / 454; ping-pong 128 x 128 (same clusters) 371-462, slower in every case. Groups of
    a few rows (short mainloops, where ping-pong's overlap of the epilogue could pay) are not
    measured yet. fp8 (e4m3 x^T, e5m2 dy^T), H100, 2026-11-27
    (benchmarks/results/grouped_h100_20261127_fp8_sweep.json), Mixtral up: 128 x 256 in 1x1 /
    2x1 / 1x2: 742 / 914 / 839; ping-pong 128 x 128 s6: 585 / 707 / 694, 64 x 256 s4: 471 / 592
    / 498, so fp8 compiles the cooperative tile only."""
    fam = catalog.FAMILIES[family]
    tile = next(t for t in fam.tiles
                if (t.block_m, t.block_n, t.schedule) == (128, 256, "cooperative"))
    cluster = ((1, 1) if not fam.multicast else (2, 1) if p > tile.block_m
               else (1, 2) if q > tile.block_n else (1, 1))
    return GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0], cluster_n=cluster[1])


def grouped_heuristic_config(family: str, groups: int, m: int, n: int, k: int) -> GemmConfig:
    """The rule's config for a problem of a family of catalog.GROUPED_FAMILIES (M rows over
    `groups` groups, n product columns: 2F for the gated unit) or CONTRACTION_FAMILIES (out
    (groups, m, n), k contracted rows); no rule weighs k yet."""
    del k
    if family == "grouped_glu":
        return choose_grouped_glu_config(m, n // 2, groups)
    if family in catalog.CONTRACTION_FAMILIES:
        return choose_contraction_config(m, n, family)
    if family not in catalog.GROUPED_FAMILIES:
        raise ValueError(f"grouped_heuristic_config: {family!r} is not a grouped family "
                         f"({catalog.GROUPED_FAMILIES + catalog.CONTRACTION_FAMILIES})")
    return choose_grouped_config(m, n, groups, family)
