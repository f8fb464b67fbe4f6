"""The swap-AB configs (GemmConfig.swap_ab: the matmul_swap, fp8_swap and fp8_block_swap
families) without a GPU: validation, the heuristic's choice, kernel names and the plan over the
swapped tiles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_hopper import GemmConfig, hopper_fp8_matmul, hopper_glu, hopper_matmul, tune
from jax_hopper.gemm import heuristics, pitch
from jax_hopper.kernels import catalog

SWAP = GemmConfig.for_tile(catalog.SWAP_TILES[0], swap_ab=True)
SWAP8 = GemmConfig.for_tile(catalog.SWAP_TILES_FP8[0], swap_ab=True)
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def test_heuristic_swaps_up_to_the_widest_token_tile():
    for m, bn in ((1, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64)):
        cfg = heuristics.heuristic_config("matmul", False, 1, m, 4096, 4096)
        assert cfg.swap_ab and cfg.block_n == bn and cfg.block_m == 128, (m, cfg)
        cfg.validate("bfloat16", False, True)
        cfg.validate("bfloat16", False, False)
    # past them one 96-token tile holds 65-96 rows (swap_wide_config), 97-128 fill one
    # unswapped 128-row tile
    assert heuristics.heuristic_config("matmul", False, 1, 65, 4096, 4096).block_n == 96
    assert not heuristics.heuristic_config("matmul", False, 1, 97, 4096, 4096).swap_ab
    # a stored (K, M) (transpose_a), and the families without a swapped kernel
    assert not heuristics.heuristic_config("matmul", True, 1, 16, 4096, 4096).swap_ab
    assert not heuristics.heuristic_config("glu", False, 1, 16, 4096, 4096).swap_ab


@pytest.mark.parametrize("m,n,k,block_n,cluster", [
    (129, 4096, 4096, 96, (1, 2)),     # 64 tiles of 96 tokens: two token tiles share a weight tile
    (192, 8192, 8192, 96, (1, 2)),     # 128 tiles: at most one an SM
    (181, 14336, 10000, 192, (1, 1)),  # 224 tiles of 96, more than the SMs: 112 of 192
    (161, 28672, 4096, 192, (1, 1)),
    (150, 28672, 4096, 160, (2, 1)),   # 448 tiles of 96; 160 tokens hold the 150 rows
])
def test_heuristic_takes_the_wide_token_tiles(m, n, k, block_n, cluster):
    """Past one 128-row tile and up to 192 rows (swap_wide_config): two 96-token tiles paired
    over one weight tile while they fit one an SM, else one tile of all the rows: 160 tokens
    in pairs sharing them up to 160 rows, 192 alone past that."""
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k)
    assert cfg.swap_ab and cfg.tile in catalog.SWAP_WIDE_TILES + catalog.SWAP_MID_TILES, cfg
    assert (cfg.block_n, cfg.cluster_m, cfg.cluster_n) == (block_n, *cluster), cfg
    cfg.validate("bfloat16", False, True)
    cfg.validate("float16", False, False)
    # a batch counts its tiles together: three entries of 64 tiles of 96 take one of 160 each
    if (m, n, k) == (129, 4096, 4096):
        assert heuristics.heuristic_config("matmul", False, 3, m, n, k).block_n == 160
    for rows in (128, 193):  # one unswapped tile; past the widest token tile
        assert heuristics.swap_wide_config("matmul", 1, rows, n, k, 132) is None
    # a stored (K, M), and block scales (no wide token tiles)
    assert not heuristics.heuristic_config("matmul", True, 1, m, n, k).swap_ab
    assert heuristics.swap_wide_config("fp8_block", 1, m, n, k, 132) is None


@pytest.mark.parametrize("m,n,k,batch,swapped", [
    (68, 16384, 16384, 1, True),  # 128 weight tiles
    (96, 8192, 4096, 1, True),
    (69, 10000, 3072, 1, True),   # 79 weight tiles, the last partial
    (70, 4096, 4096, 3, True),    # a batch counts its weight tiles together: 96
    (75, 28672, 4096, 1, False),  # 224 weight tiles, past a wave: unswapped
    (70, 4096, 4096, 5, False),   # 160
])
def test_heuristic_takes_one_token_tile_past_the_decode_tiles(m, n, k, batch, swapped):
    """65-96 rows (swap_wide_config, one_token_tile_config): one 96-token tile holds them all,
    unclustered, where the weight's tiles take at most one an SM. Not fp8 per tensor
    (WIDE_TILES_YIELD) nor block scales."""
    cfg = heuristics.heuristic_config("matmul", False, batch, m, n, k)
    if not swapped:
        assert not cfg.swap_ab, cfg
        assert heuristics.swap_wide_config("matmul", batch, m, n, k, 132) is None
        return
    assert cfg.swap_ab and cfg.tile == catalog.SWAP_WIDE_TILES[0], cfg
    assert (cfg.cluster_m, cfg.cluster_n) == (1, 1), cfg
    cfg.validate("bfloat16", False, True)
    for family in ("fp8", "fp8_block"):
        assert heuristics.swap_wide_config(family, batch, m, n, k, 132) is None


@pytest.mark.extension  # the narrow-weight swap's plan
@pytest.mark.parametrize("m,n,k,want", [
    (183, 4096, 7440, (96, 2)),     # 64 tiles of 96: the pair
    (190, 8584, 5120, (192, 1)),    # 136 of 96, 68 of 192: within a wave
    (164, 28672, 11120, None),      # 224 of 192 (1.7 waves): unswapped
    (138, 2048, 3488, "narrow"),    # the narrow-weight swap applies: it stays
    (147, 2048, 5120, "narrow"),    # ... though the pair keeps more CTAs busy
])
def test_fp8_takes_the_wide_token_tiles_where_they_do_not_yield(m, n, k, want):
    """fp8 per tensor on its own wide tiles (128-element k-blocks) by the 16-bit rule, except
    where they yield (heuristics.WIDE_TILES_YIELD): to the narrow-weight swap, and past one
    wave of 192-token tiles to the unswapped config."""
    cfg = heuristics.heuristic_config("fp8", False, 1, m, n, k)
    if want is None:
        assert not cfg.swap_ab, cfg
    elif want == "narrow":
        assert cfg.swap_ab and cfg.tile in catalog.SWAP_TILES_FP8, cfg
        # the 16-bit product of the same shape takes the pair (wide on a tie, or busier)
        assert heuristics.heuristic_config("matmul", False, 1, m, n, k).block_n == 96
    else:
        assert cfg.swap_ab and cfg.tile in catalog.SWAP_WIDE_TILES_FP8, cfg
        assert (cfg.block_n, cfg.cluster_n, cfg.block_k) == (*want, 128), cfg
        cfg.validate(E4M3, False, False, family="fp8", b_dtype=E5M2)


def test_wide_token_tiles_run_clusters_the_decode_tiles_do_not():
    """The wide token tiles split on the cooperative stream-K and run every cluster shape; the
    decode tiles' last-arrival split runs clusters of one CTA."""
    for family, tiles, dtype in (("matmul", catalog.SWAP_WIDE_TILES + catalog.SWAP_MID_TILES,
                                  "bfloat16"),
                                 ("fp8", catalog.SWAP_WIDE_TILES_FP8, E4M3)):
        fam = catalog.FAMILIES[catalog.SWAP_FAMILIES[family]]
        for tile in tiles:
            assert tile in fam.tiles and fam.tile_clusters(tile) == catalog.CLUSTER_SHAPES
            assert not fam.last_arrival_tile(tile)
            for cm, cn in catalog.CLUSTER_SHAPES:
                GemmConfig.for_tile(tile, swap_ab=True, cluster_m=cm, cluster_n=cn).validate(
                    dtype, False, dtype == "bfloat16", family=family)
    fam = catalog.FAMILIES["matmul_swap"]
    assert fam.last_arrival_tile(catalog.SWAP_TILES[0])
    with pytest.raises(ValueError, match=r"cluster .* must be one of \(\(1, 1\),\)"):
        GemmConfig.for_tile(catalog.SWAP_TILES[0], swap_ab=True, cluster_m=2).validate(
            "bfloat16", False, True)


def test_row_lines_counts_the_l2_lines_of_a_box_row():
    """A 128-byte row of a TMA box spans one L2 line where it starts on one, else two: on
    average over the rows of a pitch `off` bytes past whole lines, as counted row by row."""
    assert pitch.row_lines(0) == 1.0
    assert pitch.row_lines(64) == 1.5      # every other row on a line
    assert pitch.row_lines(112) == 1.875   # 3000 bf16 columns: one row in 8
    for off in range(0, 128, 16):
        starts = [(r * (1024 + off)) % 128 for r in range(128)]
        assert pitch.row_lines(off) == sum(1 if s == 0 else 2 for s in starts) / 128


@pytest.mark.extension  # plan_cost asks the C++ planner
def test_mid_token_tile_weighs_l2_requests():
    """Among the mid token tiles, the least of max(plan cost, L2_REQUEST_COST x L2 requests):
    with the weight's rows off the line, 90 tiles of 160 tokens over 400 rows ask fewer
    requests than 120 of 128, though each SM computes more; where 160 tokens pad the rows
    into as many tiles as 128 (369 rows), 128 stays."""
    m, n, k = 400, 3744, 5248
    off = pitch.rows_off_l2_line("bfloat16", False, True, m, n, k)
    assert off == (0, 64)
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k, off_line=off)
    assert cfg.swap_ab and (cfg.block_n, cfg.cluster_m) == (160, 2), cfg
    narrow = GemmConfig.for_tile(catalog.SWAP_MID_TILES[0], swap_ab=True, cluster_m=2)
    assert (heuristics.plan_cost(narrow, 1, m, n, k, 132)
            < heuristics.plan_cost(cfg, 1, m, n, k, 132))
    # 30 weight tiles x 3 (4) token tiles, 82 k-blocks; weight rows 1.5 lines, tokens 1
    assert heuristics.swap_l2_requests(cfg, 1, m, n, k, off) == 90 * 82 * (128 * 1.5 + 160)
    assert heuristics.swap_l2_requests(narrow, 1, m, n, k, off) == 120 * 82 * (128 * 1.5 + 128)
    # 369 rows: 3 token tiles either way
    off = pitch.rows_off_l2_line("bfloat16", False, True, 369, 4320, 5184)
    cfg = heuristics.heuristic_config("matmul", False, 1, 369, 4320, 5184, off_line=off)
    assert cfg.swap_ab and cfg.block_n == 128, cfg
    # the same shape with aligned rows: requests do not pace it, and the tile is plan cost's
    assert heuristics.heuristic_config("matmul", False, 1, 400, 3840, 5248).block_n == 128


@pytest.mark.extension  # busy_ctas asks the C++ planner
@pytest.mark.parametrize("m,n,k,wide", [
    (150, 4096, 2048, True),     # the pair of 96-token tiles in 2 pieces: 128 CTAs; the 64-token
                                 # tiles 96
    (150, 1024, 11008, False),   # 8 pairs in 4 pieces: 64; the 64-token tiles in 5 pieces: 120
    (173, 1024, 2048, False),    # 8 pairs in 4 pieces: 64; 96 (the wide tiles ran 0.84x here)
])
def test_narrow_and_wide_swaps_take_the_busier_plan(m, n, k, wide):
    """Where a narrow weight's swap (swap_for_narrow_weight) and the wide token tiles
    (swap_wide_config) both apply, the config whose plan keeps more CTAs busy runs."""
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k)
    assert cfg.swap_ab and (cfg.tile in catalog.SWAP_WIDE_TILES) == wide, cfg
    other = (heuristics.swap_wide_config("matmul", 1, m, n, k, 132) if not wide else
             GemmConfig.for_tile(heuristics.swap_token_tile(catalog.SWAP_TILES, 1, m, n, k, 132),
                                 swap_ab=True))
    assert (heuristics.busy_ctas(cfg, 1, m, n, k, 132)
            >= heuristics.busy_ctas(other, 1, m, n, k, 132)), (cfg, other)


@pytest.mark.extension  # plan_cost reads the planner's split
def test_plan_cost_counts_waves_k_blocks_and_pieces():
    """The busiest SM's work: tile area x k-blocks of its whole tiles, plus its stream-K range
    and SPLIT_PIECE_KBLOCKS for each other piece of its split tile."""
    whole = GemmConfig(block_n=192, stages=4)  # 7 x 16 = 112 tiles of 224 k-blocks: one wave
    assert heuristics.plan_cost(whole, 1, 792, 3000, 14336, 132) == 224 * 128 * 192
    assert heuristics.plan_cost(whole, 1, 792, 3000, 14336, 56) == 2 * 224 * 128 * 192
    split = GemmConfig(block_n=256, stages=4)  # 4 x 16 = 64 tiles of 64 k-blocks in 2 pieces
    assert heuristics.plan_cost(split, 1, 512, 4096, 4096, 132) == \
        (32 + heuristics.SPLIT_PIECE_KBLOCKS) * 128 * 256
    # swapped, the weight's columns are the tile's rows: 24 x 5 tiles of 128 x 160
    mid = GemmConfig.for_tile(catalog.SWAP_MID_TILES[1], swap_ab=True)
    assert heuristics.plan_cost(mid, 1, 792, 3000, 14336, 132) == 224 * 128 * 160


@pytest.mark.extension  # plan_cost asks the C++ planner
@pytest.mark.parametrize("m,n,k,token_tile,cluster", [
    (792, 3000, 14336, 160, (2, 1)),   # 24 x 5 tiles of 160 tokens (odd): the tokens shared
    (1025, 2048, 7168, 160, (2, 1)),   # 16 x 7 tiles; 128 tokens: 144 tiles
    (640, 4096, 8192, 160, (1, 2)),    # 32 x 4 tiles, a 67 MB weight: the weight shared
    (512, 4096, 4160, 128, (1, 2)),    # 32 x 4 tiles, a 34 MB weight: the weight shared
    (512, 4096, 4096, None, None),     # 64 k-blocks: ping-pong 128 x 128 over one wave
    (935, 2048, 5120, 128, (2, 1)),    # 16 x 8 tiles, a 21 MB weight: the tokens shared
    (900, 1408, 12288, 160, (1, 2)),   # 11 x 6 tiles: weight tiles odd, token tiles even
    (765, 3200, 7616, 160, (1, 1)),    # 25 x 5 tiles: unpaired, 125 CTAs
    (1619, 1408, 12288, 160, (1, 1)),  # 11 x 11: 121 CTAs
    (1900, 1408, 12288, None, None),  # 11 x 12 of 160 fill every SM, the weight tiles odd
    (1839, 1536, 16384, None, None),  # 120 tiles of 192 tokens, unswapped 120 of 128 x 192
    (3565, 768, 7168, None, None),    # 114 of 192 tokens against 112 of 128 x 192 in pairs
    (811, 6000, 4096, None, None),    # over a wave on every token tile
    (559, 3000, 3072, None, None),    # 48 k-blocks (ping-pong's rule)
    (192, 4096, 4096, None, None),    # the wide token tiles' band (swap_wide_config)
])
def test_heuristic_takes_the_mid_token_tiles(m, n, k, token_tile, cluster):
    """Past 192 rows (swap_mid_config) the swapped token tile of least plan cost, 128, 160 or
    192 tokens, in one wave, where it costs at most SWAP_MID_MAX_COST of the unswapped
    config's: two token tiles sharing the weight (cluster_n = 2) over an even count of them
    where the weight is past TOKEN_PAIR_MIN_WEIGHT_BYTES or its tiles are odd, else two weight
    tiles sharing the tokens over an even count of them, else unclustered on at most
    SWAP_MID_MAX_SHARE_UNPAIRED of the SMs."""
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k)
    if token_tile is None:
        assert not (cfg.swap_ab and cfg.tile in heuristics.MID_TOKEN_TILES), cfg
        return
    assert cfg.swap_ab and cfg.tile in heuristics.MID_TOKEN_TILES, cfg
    assert (cfg.block_n, (cfg.cluster_m, cfg.cluster_n)) == (token_tile, cluster), cfg
    # a's rows (the tokens) off a 32-byte sector keep the unswapped config; on one, not
    for a_off, swapped in ((80, False), (32, True), (16, False)):
        assert heuristics.heuristic_config("matmul", False, 1, m, n, k,
                                           off_line=(a_off, 0)).swap_ab == swapped
    cfg.validate("bfloat16", False, True)
    cfg.validate("float16", False, False)
    # a stored (K, M) has no swapped kernel: the config the swap displaced
    unswapped = heuristics.heuristic_config("matmul", True, 1, m, n, k)
    assert not unswapped.swap_ab
    assert heuristics.plan_cost(cfg, 1, m, n, k, 132) <= \
        heuristics.SWAP_MID_MAX_COST * heuristics.plan_cost(unswapped, 1, m, n, k, 132)
    # no mid tiles: fp8 (per tensor and block-scaled), hopper_glu
    assert heuristics.swap_mid_config("fp8", 1, m, n, k, unswapped, 132) is None
    assert heuristics.swap_mid_config("fp8_block", 1, m, n, k, unswapped, 132) is None
    assert not heuristics.heuristic_config("glu", False, 1, m, n, k).swap_ab


@pytest.mark.extension  # plan_cost asks the C++ planner
@pytest.mark.parametrize("m,n,k,off,want", [
    (2093, 6144, 2560, (0, 0), (192, 2)),    # 528 tiles of 192 tokens, cost 0.89 of 128 x 256's
    (2066, 2048, 2560, (0, 0), (160, 2)),    # 208 of 160 tokens (0.93) ahead of 176 of 192
    (1282, 6600, 5120, (0, 16), (192, 2)),   # b's rows off the line: the unswapped pair costs
    (1282, 6600, 5120, (0, 0), None),        # on it, 1.00 of the unswapped plan
    (2359, 7168, 1536, (0, 0), None),        # 0.96
    (2969, 5120, 1024, (0, 0), None),        # 1.02
    (717, 6000, 1000, (80, 96), None),       # the tokens' rows off a 32-byte sector
    (1428, 768, 3072, (0, 0), None),         # unswapped within a wave (ping-pong)
])
def test_heuristic_swaps_past_a_wave(m, n, k, off, want):
    """Past a wave of the unswapped tiles, 193-3072 rows (swap_past_wave_config): the 160- or
    192-token tile whose plan cost over its efficiency is least, where that is at most
    SWAP_PAST_WAVE_MAX_COST of the unswapped config's; paired over an even count of weight
    tiles. 16-bit families with mid tiles only, a stored (M, K)."""
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k, off_line=off)
    if want is None:
        assert not (cfg.swap_ab and cfg.block_n >= 160), cfg
        return
    assert cfg.swap_ab and (cfg.block_n, cfg.cluster_m, cfg.cluster_n) == (*want, 1), cfg
    cfg.validate("bfloat16", False, True)
    cfg.validate("float16", False, False)
    unswapped = heuristics.heuristic_config("matmul", True, 1, m, n, k, off_line=off)
    assert not unswapped.swap_ab
    eff = heuristics.TILE_EFFICIENCY[unswapped.block_m, unswapped.block_n, unswapped.schedule]
    assert (heuristics.plan_cost(cfg, 1, m, n, k, 132)
            / heuristics.SWAP_TOKEN_TILE_EFFICIENCY[cfg.block_n]
            <= heuristics.SWAP_PAST_WAVE_MAX_COST
            * heuristics.plan_cost(unswapped, 1, m, n, k, 132) / eff)
    for family in ("fp8", "fp8_block", "glu"):
        assert not heuristics.heuristic_config(family, False, 1, m, n, k, off_line=off).swap_ab


@pytest.mark.extension  # busy_ctas asks the C++ planner
@pytest.mark.parametrize("m,n,k,swapped", [
    (80, 1024, 5120, True),      # 8 tiles in 2 pieces: 16 CTAs unswapped
    (300, 1024, 3072, True),     # 24 tiles, 48 k-blocks: no split
    (1000, 768, 768, True),      # 48 tiles
    (150, 1024, 11008, True),    # 16 tiles in 4 pieces: 64 of 132 SMs
    (500, 768, 8192, False),     # 24 tiles in 4 pieces: 96 busy
    (96, 4096, 4096, False),     # 64 busy, but a 33.5 MB weight (reread per token tile)
    (100, 4096, 2048, True),     # 32 busy, as wide as the bound lets it: 16.8 MB
    (256, 2048, 2048, True),     # 32 busy
    (80, 3584, 4096, False),     # 56 busy, a 29.4 MB weight
    (1025, 1024, 1024, False),   # past SWAP_NARROW_MAX_M
    (1000, 1024, 10000, False),  # 64 tiles in 2 pieces: 128 busy
])
def test_heuristic_swaps_a_narrow_weight_past_64_rows(m, n, k, swapped):
    """Past the widest token tile a narrow weight's product runs swapped (swap_token_tile's
    tile, its last-arrival split) where the unswapped plan keeps fewer than half the SMs busy
    and the weight takes at most half the L2."""
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k)
    # (not swapped on the decode tiles: 1000 x 1024 x 10000 takes the mid-M token tiles)
    assert (cfg.swap_ab and cfg.tile in catalog.SWAP_TILES) == swapped, cfg
    unswapped = heuristics.choose_config(m, n, k, tiles=catalog.FAMILIES["matmul"].tiles,
                                         pingpong=True)
    busy = heuristics.busy_ctas(unswapped, 1, m, n, k, catalog.DEFAULT_NUM_SMS)
    if swapped:
        assert cfg.tile == heuristics.swap_token_tile(catalog.SWAP_TILES, 1, m, n, k, 132)
        assert cfg.stream_k and 2 * busy < catalog.DEFAULT_NUM_SMS
        assert 2 * n * k <= heuristics.SWAP_NARROW_MAX_WEIGHT_BYTES
        cfg.validate("bfloat16", False, True)
    # a batch's weights count together: two entries of 16.8 MB do not swap
    if (m, n, k) == (100, 4096, 2048):
        assert not heuristics.heuristic_config("matmul", False, 2, m, n, k).swap_ab


@pytest.mark.extension
@pytest.mark.parametrize("m,n,k,swapped", [
    (80, 1024, 5120, True),      # 8 busy unswapped
    (65, 4096, 4096, True),      # a 16.8 MB fp8 weight
    (96, 6144, 4096, False),     # 25.2 MB
    (200, 8192, 2048, False),    # 128 busy
    (1000, 2048, 2048, False),   # 128 busy
])
def test_fp8_swaps_a_narrow_weight_on_its_own_tiles(m, n, k, swapped):
    """fp8 per tensor takes the same rule, its weight one byte an element, on the fp8_swap
    tiles; the block-scaled product by its own unswapped config, on the fp8_block_swap tiles."""
    cfg = heuristics.heuristic_config("fp8", False, 1, m, n, k)
    assert cfg.swap_ab == swapped, cfg
    if swapped:
        assert cfg.tile == heuristics.swap_token_tile(catalog.SWAP_TILES_FP8, 1, m, n, k,
                                                      132, "fp8") and cfg.stream_k
        cfg.validate(E4M3, False, False, family="fp8")
    block = heuristics.heuristic_config("fp8_block", False, 1, m, n, k)
    unswapped = heuristics.choose_config(m, n, k, tiles=catalog.FAMILIES["fp8_block"].tiles,
                                         multicast=False)
    assert block.swap_ab == heuristics.swap_for_narrow_weight(unswapped, 1, m, n, k, 132,
                                                              "fp8_block"), block
    if block.swap_ab:
        assert block.tile in catalog.FAMILIES["fp8_block_swap"].tiles
        block.validate(E4M3, False, False, family="fp8_block")


@pytest.mark.extension
@pytest.mark.parametrize("m,n,k,swapped", [
    (80, 1024, 5120, True),     # 8 busy unswapped
    (96, 2048, 7168, True),     # 16 busy
    (384, 1024, 4096, False),   # 24 busy: swapped under half the SMs, not under an eighth
    (256, 4096, 4096, False),   # 64 busy
])
def test_block_scaled_swaps_under_an_eighth_of_the_sms(m, n, k, swapped):
    """The block-scaled product swaps past SWAP_MAX_M only where its unswapped plan keeps
    fewer than an eighth of the SMs busy (SWAP_NARROW_BUSY_SHARE), per tensor under half."""
    block = heuristics.heuristic_config("fp8_block", False, 1, m, n, k)
    assert block.swap_ab == swapped, block
    unswapped = heuristics.choose_config(m, n, k, tiles=catalog.FAMILIES["fp8_block"].tiles,
                                         multicast=False)
    busy = heuristics.busy_ctas(unswapped, 1, m, n, k, 132, "fp8_block")
    assert (8 * busy < 132) == swapped and 2 * busy < 132


@pytest.mark.extension
def test_busy_ctas_is_the_plan_s_grid():
    """busy_ctas counts the planner's CTAs: 2-CTA clusters count twice, whole tiles once."""
    cfg = GemmConfig(block_n=128, stages=6)
    assert heuristics.busy_ctas(cfg, 1, 256, 4096, 4096, 132) == 64 * 2   # 2 pieces a tile
    pair = GemmConfig(block_n=128, stages=6, cluster_m=2)
    assert heuristics.busy_ctas(pair, 1, 256, 4096, 4096, 132) == 32 * 2 * 2
    whole = GemmConfig(block_n=128, stages=6, stream_k=False)
    assert heuristics.busy_ctas(whole, 1, 256, 4096, 4096, 132) == 64


@pytest.mark.extension  # swap_cta_bytes reads the planner's split
def test_swap_cta_bytes_counts_k_blocks_waves_and_partials():
    """The busiest CTA's bytes: its k-blocks' weight (128 rows) and token tiles, and the fp32
    partials its tile's last arrival reads back; whole tiles count a wave each."""
    def cfg(bn):
        tile = next(t for t in catalog.SWAP_TILES if t.block_n == bn and t.ctas_per_sm == 1)
        return GemmConfig.for_tile(tile, swap_ab=True, stream_k=True)
    # 80 x 1024 x 5120, 64-token tiles: 16 tiles in 8 pieces of 10 k-blocks
    assert heuristics.swap_cta_bytes(cfg(64), 1, 80, 1024, 5120, 132) == \
        10 * 64 * (128 + 64) * 2 + 7 * 128 * 64 * 4
    # 963 x 1024 x 3072, 32-token tiles: 248 whole tiles, two waves of 48 k-blocks
    assert heuristics.swap_cta_bytes(cfg(32), 1, 963, 1024, 3072, 132) == \
        2 * 48 * 64 * (128 + 32) * 2
    # fp8: one byte an element, 128-deep k-blocks; 17 x 4096 x 4096 in 32 tiles of 4 pieces
    tile8 = next(t for t in catalog.SWAP_TILES_FP8 if t.block_n == 32 and t.ctas_per_sm == 1)
    assert heuristics.swap_cta_bytes(GemmConfig.for_tile(tile8, swap_ab=True, stream_k=True),
                                     1, 17, 4096, 4096, 132, "fp8") == \
        8 * 128 * (128 + 32) + 3 * 128 * 32 * 4


@pytest.mark.extension
@pytest.mark.parametrize("m,n,k,token_tile", [
    (80, 1024, 5120, 32),    # 24 tiles in 5 pieces, against 16 in 8 (partials of 32 KB)
    (32, 1024, 4096, 16),    # two 16-token tiles fill 128 SMs, one 32-token tile 64
    (20, 512, 8192, 16),
    (197, 1024, 5120, 64),   # 32 tiles in 4 pieces; 32 tokens: 56 in 2, twice the k-blocks
    (963, 1024, 3072, 64),   # one wave of whole tiles; 32 tokens: two (of the decode tiles)
    (1, 1024, 4096, 16),     # one row: the narrowest tile
])
def test_swap_token_tile(m, n, k, token_tile):
    """The swapped product's token tile is the one whose busiest CTA moves the fewest bytes,
    among the tiles no wider than the rows need (at m <= 64), where the weight fits in L2."""
    tile = heuristics.swap_token_tile(catalog.SWAP_TILES, 1, m, n, k, 132)
    assert tile.block_n == token_tile and tile.ctas_per_sm == 1
    # (the lean tile comes before it: bf16, up to 32 rows against a small weight,
    # test_lean_tile_for_a_short_call; past 48 k-blocks a narrow weight's product weighs the
    # wide token tiles too, test_narrow_weight_weighs_the_wide_token_tiles)
    if (heuristics.lean_swap_tile(catalog.SWAP_TILES, "matmul", 1, m, n, k) is None
            and k // 64 < heuristics.NARROW_WIDE_MIN_K_BLOCKS):
        assert heuristics.heuristic_config("matmul", False, 1, m, n, k).tile == tile


@pytest.mark.extension  # the bytes of swap_cta_bytes ask the planner
@pytest.mark.parametrize("family,m,n,k,token_tile,cluster_m", [
    ("matmul", 200, 3072, 3080, 128, 2),  # 24 weight tiles: pairs share the tokens
    ("matmul", 963, 1024, 3072, 128, 2),
    ("matmul", 496, 776, 5128, 96, 1),    # 7 weight tiles: unclustered
    ("matmul", 801, 1000, 1024, 64, 1),   # 16 k-blocks: the decode tiles only
    ("matmul", 300, 1024, 3072, 64, 1),   # 64 moves the fewest bytes
    ("fp8", 579, 768, 5120, 64, 1),       # fp8's wide tiles yield (WIDE_TILES_YIELD)
])
def test_narrow_weight_weighs_the_wide_token_tiles(family, m, n, k, token_tile, cluster_m):
    """A narrow weight's swap over NARROW_WIDE_MIN_K_BLOCKS or more takes the token tile of
    least bytes among the decode, wide and mid-M tiles (swap_narrow_config), a wide one in 2-CTA
    clusters over an even count of weight tiles."""
    cfg = heuristics.heuristic_config(family, False, 1, m, n, k)
    assert cfg.swap_ab and cfg.stream_k, cfg
    assert (cfg.block_n, cfg.cluster_m, cfg.cluster_n) == (token_tile, cluster_m, 1), cfg


@pytest.mark.parametrize("batch,m,n,k,lean", [
    (1, 1, 1024, 4096, True), (1, 32, 2048, 2048, True), (1, 16, 256, 64, True),
    (1, 33, 2048, 2048, False),   # three token tiles of 16: 25.2 MB streamed
    (1, 64, 1024, 2048, True),    # four: 16.8 MB
    (1, 1, 4096, 4096, False),    # a 33.5 MB weight streams faster on the one-CTA tiles
    (1, 28, 4096, 1792, False),   # 14.7 MB, twice: two token tiles
    (3, 8, 2048, 2048, False),    # a batch's weights count together
    (1, 16, 2048, 4096, True),    # 16.8 MB in one token tile
])
def test_lean_tile_for_a_short_call(batch, m, n, k, lean):
    """A bf16 product of at most SWAP_MAX_M rows whose 16-token tiles stream at most
    LEAN_MAX_STREAM_BYTES of weight runs on the lean tile (one self-fed warpgroup, four CTAs to
    an SM); fp8 per tensor too."""
    cfg = heuristics.heuristic_config("matmul", False, batch, m, n, k)
    assert cfg.swap_ab
    assert (cfg.schedule == "lean") == lean, cfg
    if lean:
        assert cfg.ctas_per_sm == 4 and cfg.stream_k and cfg.tile in catalog.SWAP_TILES
        cfg.validate("bfloat16", False, True)
    # fp8 per tensor: the same rule over its one-byte weight (twice the elements a byte)
    fp8 = heuristics.heuristic_config("fp8", False, batch, m, 2 * n, k)
    assert (fp8.schedule == "lean") == lean, fp8
    if lean:
        assert fp8.tile in catalog.SWAP_TILES_FP8 and fp8.block_k == 128


def test_swap_token_tile_keeps_the_rows_tile_for_a_weight_past_l2():
    """A weight larger than SWAP_NARROW_MAX_WEIGHT_BYTES would be reread from HBM by a second
    token tile: at m <= 64 the narrowest tile that holds the rows stays."""
    for m, bn in ((20, 32), (48, 64)):
        assert not heuristics.weight_fits_l2("matmul", 1, 4096, 4096)
        assert heuristics.heuristic_config("matmul", False, 1, m, 4096, 4096).block_n == bn
    assert heuristics.weight_fits_l2("fp8", 1, 4096, 4096)   # one byte an element


def test_heuristic_takes_two_ctas_per_sm_past_one_wave_of_weight_tiles():
    # 128-column tiles: 132 of them fill an H100's SMs once; past that the narrow token tiles
    # run two CTAs to an SM; 128 x 64 has no such kernel (it spills at 80 registers).
    for family in ("matmul", "fp8"):
        for m, n, occupancy in ((1, 28672, 2), (32, 28672, 2), (16, 132 * 128, 1),
                                (16, 133 * 128, 2), (1, 4096, 1), (48, 28672, 1)):
            cfg = heuristics.heuristic_config(family, False, 1, m, n, 4096)
            swap_tiles = catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
            if heuristics.lean_swap_tile(swap_tiles, family, 1, m, n, 4096) is not None:
                occupancy = 4  # a short fp8 stream (1 x 4096 x 4096: 16.8 MB) on the lean tile
            assert cfg.swap_ab and cfg.ctas_per_sm == occupancy, (family, m, n, cfg)
            assert cfg.tile in catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
    # a batch of products counts every entry's tiles
    assert heuristics.heuristic_config("matmul", False, 2, 1, 8192, 4096).ctas_per_sm == 1
    assert heuristics.heuristic_config("matmul", False, 3, 1, 8192, 4096).ctas_per_sm == 2
    # the kernel name carries the occupancy
    cfg = heuristics.heuristic_config("matmul", False, 1, 1, 28672, 4096)
    assert cfg.kernel("matmul", "bfloat16", False, True) == \
        "sm90_gemm_bf16_128x16x64_s4_occ2_mk_swap"


@pytest.mark.extension  # a 16.8 MB fp8 weight fits in L2: swap_token_tile asks the planner
def test_fp8_per_tensor_swaps_on_its_own_tiles():
    for m, bn in ((1, 16), (17, 32), (64, 64)):
        cfg = heuristics.heuristic_config("fp8", False, 1, m, 4096, 4096)
        assert cfg.swap_ab and cfg.block_n == bn and cfg.block_k == 128, (m, cfg)
        cfg.validate(E4M3, False, False, family="fp8", b_dtype=E5M2)
    # past 64 rows only a narrow weight swaps (test_fp8_swaps_a_narrow_weight_on_its_own_tiles)
    assert not heuristics.heuristic_config("fp8", False, 1, 65, 8192, 4096).swap_ab
    # The kernel's A is b: its dtypes come b's first.
    assert SWAP8.kernel("fp8", E5M2, False, False, E4M3) == \
        "sm90_gemm_e4m3xe5m2_128x16x128_s10_kk_fp8_swap"
    assert SWAP8.kernel("fp8", E4M3, False, False, E4M3) == \
        "sm90_gemm_e4m3_128x16x128_s10_kk_fp8_swap"
    assert SWAP8.kernel_family("fp8") == "fp8_swap"
    with pytest.raises(ValueError, match="not compiled for the swap-AB fp8 GEMM"):
        SWAP.validate(E4M3, False, False, family="fp8")  # a 16-bit swap tile (block_k 64)


@pytest.mark.extension  # swap_token_tile asks the planner
def test_block_scaled_fp8_swaps_on_its_own_tiles():
    """Block scales swap as per tensor does (the weight's 128 x 128 blocks as the kernel's A
    scales, the tokens' rows as its B's: SwappedBlockScaling), on the one-CTA-per-SM fp8 swap
    tiles: e4m3 both ways, no two-CTA tile (the promoted consumer keeps 232 registers)."""
    for m, bn in ((1, 16), (17, 32), (64, 64)):
        cfg = heuristics.heuristic_config("fp8_block", False, 1, m, 4096, 4096)
        assert cfg.swap_ab and cfg.block_n == bn and cfg.block_k == 128, (m, cfg)
        cfg.validate(E4M3, False, False, family="fp8_block")
    assert not heuristics.heuristic_config("fp8_block", False, 1, 65, 8192, 4096).swap_ab
    wide = heuristics.heuristic_config("fp8_block", False, 1, 1, 28672, 4096)
    assert wide.swap_ab and wide.ctas_per_sm == 1
    assert SWAP8.kernel_family("fp8_block") == "fp8_block_swap"
    assert SWAP8.kernel("fp8_block", E4M3, False, False, E4M3) == \
        "sm90_gemm_e4m3_128x16x128_s10_kk_fp8_block_swap"
    occ2 = next(t for t in catalog.SWAP_TILES_FP8 if t.ctas_per_sm == 2)
    with pytest.raises(ValueError, match="not compiled for the swap-AB block-scaled fp8 GEMM"):
        GemmConfig.for_tile(occ2, swap_ab=True).validate(E4M3, False, False, family="fp8_block")
    with pytest.raises(ValueError, match="not compiled for the swap-AB block-scaled fp8 GEMM"):
        SWAP8.validate(E5M2, False, False, family="fp8_block", b_dtype=E4M3)


def test_block_scaled_swapped_call_matches_the_reference_on_cpu(rng):
    # The config is validated and the reference lowering runs (on the CPU device, as below).
    with jax.default_device(jax.devices("cpu")[0]):
        a = jnp.asarray(rng.standard_normal((5, 200)), jnp.float8_e4m3fn)
        b = jnp.asarray(rng.standard_normal((300, 200)), jnp.float8_e4m3fn)
        sa = jnp.asarray(rng.uniform(0.5, 2.0, (5, 2)), jnp.float32)
        sb = jnp.asarray(rng.uniform(0.5, 2.0, (3, 2)), jnp.float32)
        got = hopper_fp8_matmul(a, b, sa, sb, config=SWAP8, out_dtype=jnp.float32)
    x = np.asarray(a, np.float64) * np.repeat(np.asarray(sa, np.float64), 128, axis=1)[:, :200]
    w = np.asarray(b, np.float64) * np.repeat(np.repeat(np.asarray(sb, np.float64), 128, axis=0),
                                              128, axis=1)[:300, :200]
    np.testing.assert_allclose(np.asarray(got), x @ w.T, rtol=1e-5, atol=1e-4)


def test_fp8_swapped_call_matches_the_reference_on_cpu(rng):
    # On the CPU device also where a GPU is present (the GPU suite runs every test file): the
    # exact reference lowering, not the kernel's fp32 accumulation, is what the bound fits.
    with jax.default_device(jax.devices("cpu")[0]):
        a = jnp.asarray(rng.standard_normal((5, 96)), jnp.float8_e5m2)
        b = jnp.asarray(rng.standard_normal((40, 96)), jnp.float8_e4m3fn)
        got = hopper_fp8_matmul(a, b, 0.5, 2.0, config=SWAP8, out_dtype=jnp.float32)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_without_the_extension_swapped_shapes_run_the_reference(rng, monkeypatch):
    """A build without kernels (a pure-JAX wheel, a shadowed source tree) has no C++ planner:
    the rules that read a plan are skipped (heuristics.can_plan) and a decode product against a
    weight that fits in L2, a narrow weight past 64 rows and an fp8 decode product run their
    XLA reference instead of failing. On the CPU device, as above."""
    from jax_hopper import _ffi
    monkeypatch.setattr(_ffi, "_ext", None)
    assert not heuristics.can_plan()
    with jax.default_device(jax.devices("cpu")[0]):
        for m, n, k in ((32, 1024, 4096), (80, 1024, 5120)):
            a = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
            b = jnp.asarray(rng.standard_normal((k, n)), jnp.bfloat16)
            got = np.asarray(hopper_matmul(a, b, preferred_element_type=jnp.float32))
            want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
            assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5, (m, n, k)
        a = jnp.asarray(rng.standard_normal((24, 4096)), jnp.float8_e4m3fn)
        b = jnp.asarray(rng.standard_normal((1024, 4096)), jnp.float8_e4m3fn)
        got = np.asarray(hopper_fp8_matmul(a, b, 0.5, 2.0, out_dtype=jnp.float32))
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5


def test_kernel_is_the_swapped_family_with_majors_exchanged():
    # b stored (K, N) is the kernel's A stored (K, M'): MN-major; a (M, K) its B, K-major.
    assert SWAP.kernel("matmul", "bfloat16", False, True) == \
        "sm90_gemm_bf16_128x16x64_s10_mk_swap"
    assert SWAP.kernel("matmul", "float16", False, False) == \
        "sm90_gemm_f16_128x16x64_s10_kk_swap"
    assert SWAP.kernel_family("matmul") == "matmul_swap"
    assert GemmConfig().kernel_family("matmul") == "matmul"


def test_validation_names_the_rule():
    with pytest.raises(ValueError, match="transpose_a=False"):
        SWAP.validate("bfloat16", True, True)
    with pytest.raises(ValueError, match="not compiled for the swap-AB GEMM"):
        GemmConfig(swap_ab=True).validate("bfloat16", False, True)  # 128 x 256: no swap tile
    with pytest.raises(ValueError, match="must be one of"):
        GemmConfig.for_tile(catalog.SWAP_TILES[0], swap_ab=True, cluster_m=2).validate(
            "bfloat16", False, True)
    with pytest.raises(ValueError, match="swap_ab=True is compiled for hopper_matmul, the fp8"):
        SWAP.validate("bfloat16", False, True, family="glu")
    with pytest.raises(ValueError, match="must be a bool"):
        GemmConfig(swap_ab=1).validate("bfloat16", False, True)
    with pytest.raises(ValueError, match="transpose_a=False"):
        hopper_matmul(jnp.zeros((64, 16), jnp.bfloat16), jnp.zeros((64, 64), jnp.bfloat16),
                      transpose_a=True, config=SWAP)
    with pytest.raises(ValueError, match="swap_ab=True is compiled for hopper_matmul, the fp8"):
        hopper_glu(jnp.zeros((16, 64), jnp.bfloat16), jnp.zeros((64, 2, 64), jnp.bfloat16),
                   config=SWAP)


def test_swapped_call_matches_the_reference_on_cpu(rng):
    a = jnp.asarray(rng.standard_normal((5, 72)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((72, 40)), jnp.bfloat16)
    got = hopper_matmul(a, b, config=SWAP, preferred_element_type=jnp.float32)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.extension
def test_plan_tiles_the_weight_columns():
    """The plan of a swapped call counts tiles over N (128 weight columns) and the tokens: 32 x 1
    tiles for 1 x 4096 x 4096, split into 4 pieces of 16 k-blocks (min_piece_blocks 8), one CTA
    each (the last-arrival split)."""
    kernel = SWAP.kernel("matmul", "bfloat16", False, True)
    plan = SWAP.plan(kernel, 1, 1, 4096, 4096, catalog.DEFAULT_NUM_SMS)
    assert plan["sk_clusters"] == 32 * 4 and plan["grid_clusters"] == 128
    whole = GemmConfig.for_tile(catalog.SWAP_TILES[0], swap_ab=True, stream_k=False)
    plan = whole.plan(kernel, 1, 1, 4096, 4096, catalog.DEFAULT_NUM_SMS)
    assert plan["sk_clusters"] == 0 and plan["grid_clusters"] == 32


def test_a_batch_against_a_shared_weight_is_one_product(rng):
    """x (8, 2, K) @ w (K, N): one product of 16 rows (swap-AB by default), the weight read once;
    also with a batched residual. A residual shared by the batch keeps the batch (folding it
    would copy the residual), and so does a stored (K, M) a."""
    x = jnp.asarray(rng.standard_normal((8, 2, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 40)), jnp.bfloat16)
    res = jnp.asarray(rng.standard_normal((8, 2, 40)), jnp.float32)

    def shapes(fn, *args):
        return [(p.batch, p.m, p.n, p.k) for p in tune.problems_of(fn, *args)]

    assert shapes(hopper_matmul, x, w) == [(1, 16, 40, 64)]
    with_res = lambda x, w, r: hopper_matmul(x, w, residual=r, out_dtype=jnp.float32)  # noqa: E731
    assert shapes(with_res, x, w, res) == [(1, 16, 40, 64)]
    got = jax.jit(with_res)(x, w, res)
    want = np.asarray(x, np.float64) @ np.asarray(w, np.float64) + np.asarray(res, np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-3)
    assert shapes(with_res, x, w, res[:1]) == [(8, 2, 40, 64)]
    x_km = jnp.asarray(rng.standard_normal((8, 64, 8)), jnp.bfloat16)  # (K, M): rows of 16 B
    assert shapes(lambda x, w: hopper_matmul(x, w, transpose_a=True), x_km, w) == \
        [(8, 8, 40, 64)]
