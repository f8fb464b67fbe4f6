"""Swap-AB (out^T = b^T a^T: the tokens as wgmma's N): the decode tiles at small M, the lean
tile, the narrow-weight swap, the wide token tiles at 65-192 rows and the mid-M token tiles
(within a wave, and past one)."""

from __future__ import annotations

import math

from jax_hopper.kernels import catalog
from jax_hopper.gemm import pitch
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.heuristics.dense import (DEFAULT_NUM_SMS, LONG_K_BLOCKS, TILE_EFFICIENCY,
                                              tile_count)
from jax_hopper.gemm.heuristics.plan import (busiest_cta, busy_ctas, can_plan, odd_plan_of,
                                             plan_cost, plan_of)

# The most rows a swap-AB decode tile holds (its widest token tile): above it the product runs
# unswapped, unless its weight is narrow (swap_for_narrow_weight) or its rows fit the wide
# token tiles (swap_wide_config).
SWAP_MAX_M = max(t.block_n for t in catalog.SWAP_TILES)

# The most rows for which a weight the matmul_swap_odd tiles read in place
# (pitch.weight_read_shifted: stored (K, N) with N odd) is read so past SWAP_MAX_M
# (odd_weight_config), instead of being copied into a padded pitch for the unswapped or wide
# kernels: two token tiles of the widest odd tile. Each token tile is a pass over the weight,
# shifted again by the consumers; from three passes the copy (the weight read and written once,
# then a kernel at full rate) wins.
# NOTES: device time, bf16, the copy (the default then) against the odd tiles forced, 3 reps
# (H200, 2026-12-02; gemm_h200_20261202_odd_wide.json, _odd_wide2.json; weights 768 x 50257,
# 4096 x 32001, 4096 x 4097, 1600 x 50257): the best odd tile ran 1.30-1.73x the copy at 160
# rows (192 tokens; 160 x 32001 x 4096 144.1 vs 248.9 us, XLA 289.6), 1.21-1.31x at 256 (two
# of 128), 1.00-1.31x at 320-384 (two of 192; 384 x 32001 x 4096 275.5 vs 360.2), 0.91-1.09x
# at 448, 0.91-0.97x at 512 and 0.66-0.77x from 1024, where the odd tiles run at 300-370
# TFLOP/s against the unswapped kernel's ~530 on the copy (ncu: tensor pipes 44% busy against
# the aligned tile's 84%, the consumers' shift in series with their wgmmas;
# ncu_h200_20261202_odd_wide.txt). At 65-128 rows one 128-token tile ran 1.10-1.52x the two
# 64-token tiles the rule took before (96 x 32001 x 4096 105.2 vs 159.4).
# Since then (H200, 2026-12-03) every odd tile has a stage more (catalog.SWAP_ODD_TILES), the
# 192-token one 1.13-1.18x faster at 160 and 384 rows, and the last partial wave splits
# (plan_split_tail). Measured again past the bound (gemm_h200_20261203_odd_past384.json, device
# time): at 448-576 rows the 192-token odd tile ran 0.98-1.00x the copy on 6 of 8 shapes,
# 1.26x at 576 x 20673 x 3296 and 0.92x at 448 x 100277 x 560 (9 k-blocks a tile): a tie, so
# the bound stays.
ODD_WEIGHT_MAX_M = 2 * max(t.block_n for t in catalog.SWAP_ODD_TILES)
# What shifting a weight k-block into place costs a token tile, in tokens of its wgmmas
# (odd_weight_config): the same for every token width.
ODD_SHIFT_TOKENS = 64


def choose_swap_config(m: int, tiles: tuple[catalog.TileShape, ...], n: int = 0, batch: int = 1,
                       num_sms: int = DEFAULT_NUM_SMS) -> GemmConfig:
    """The swap-AB config for a product of m <= SWAP_MAX_M rows against n weight columns: the
    narrowest token tile of `tiles` (the swapped family's: catalog.SWAP_TILES or SWAP_TILES_FP8)
    that holds them all (every tile then reads its weight columns once), split along K where the
    weight's column tiles are fewer than half the SMs (the family's last-arrival split: the most
    equal pieces of at least min_piece_blocks that one wave holds). Where the column tiles are
    more than the SMs, the same tile two CTAs to an SM (ctas_per_sm=2) where it is compiled:
    the tiles past the first wave then stream beside the others instead of after them.
    (heuristic_config then takes a narrower token tile where the weight fits in L2 and
    swap_token_tile finds it moves fewer bytes.)

    NOTES: above SWAP_MAX_M the swap-AB tiles would walk several token tiles, reading the
    weight once per token tile: at M = 96-512 against 4096-14336 wide weights they ran
    1.0-2.6x the time of the unswapped default (128 x 64 split: 96 x 4096 x 4096 29.8 vs
    29.9 us, 256 x 14336 x 4096 97.7 vs 63.4; 128 x 32: 167.6 there; H100, 2026-11-24, a
    session script, not kept).
    NOTES: two CTAs per SM against one, bf16, one process, 7 reps (H100, 2026-11-25,
    gemm_h100_20261125_swap_occupancy.log): with more column tiles than SMs 1.01-1.07x
    (1 x 28672 x 4096 88.1 vs 89.4 us, 32 x 28672 x 4096 92.2 vs 98.9, 1 x 33792 x 4096 1.011);
    at one wave or fewer (split along K) 0.95-1.00x (1 x 14336 x 4096 0.957, 16 x 14336 x 4096
    0.951): half the stages per CTA, and no second wave to share. A single SM streams a weight
    at most ~45 GB/s (16-33 of 132 SMs busy: 0.73-1.54 TB/s in all), so a second wave on 92 of
    the SMs ran below the HBM rate."""
    width = min(t.block_n for t in tiles if t.block_n >= m)
    narrowest = [t for t in tiles if t.block_n == width]
    occupancy = 2 if batch * math.ceil(n / narrowest[0].block_m) > num_sms else 1
    tile = next((t for t in narrowest if t.ctas_per_sm == occupancy), narrowest[0])
    return GemmConfig.for_tile(tile, swap_ab=True, stream_k=True)


def odd_weight_config(family: str, batch: int, m: int, n: int, k: int,
                      num_sms: int = DEFAULT_NUM_SMS) -> GemmConfig:
    """The swapped config for a product of SWAP_MAX_M < m <= ODD_WEIGHT_MAX_M rows against n
    weight columns that the matmul_swap_odd tiles read in place (pitch.weight_read_shifted):
    the odd tile of least waves x (its width + ODD_SHIFT_TOKENS), the wider on a tie, as the
    swapped family's unclustered config that launches it (pitch.shifted_config_tile). Each
    token tile multiplies its width's tokens and shifts every weight k-block again. Its waves
    are a share of one under a wave of tiles (the tiles split along K to fill it) and past one
    the busiest CTA's k-blocks over a tile's under its plan (plan_of: whole waves, and the last
    partial wave's tiles in pieces where that pays, plan_split_tail), or whole waves where the
    planner is not here.
    NOTES: the ratios the cost predicts against those measured (H200, 2026-12-02, the device
    times of ODD_WEIGHT_MAX_M's NOTES, 32001 x 4096 weight): 160 rows, 128 against 192 tokens
    1.50 / 1.41; 256 rows 0.75 / 0.77; 320 rows 1.125 / 1.12; 96 rows, 64 against 128 tokens
    1.33 / 1.52. It picks the fastest odd tile on all 24 of those shapes (96-384 rows, 4
    weights each). Counted in token tiles, not waves, it picked the same there, but on 18
    shapes drawn after it (ab_h200_20261202_odd_wide_heldout.json, device time against the
    copy or the 64-token tile of 0710a25) it ran 300 x 8996 x 5408 0.78x on 142 tiles of 192
    tokens (a second wave of 10 tiles over 676 k-blocks), 340 x 26554 x 2896 0.96x (416: 3.15
    waves), the other 16 1.04-1.65x (geomean of all 18 1.158).
    NOTES: with the last partial wave split and counted so (H200, 2026-12-03,
    ab_h200_20261203_split_tail.json, against whole tiles and whole-wave counts): 300 x 8996 x
    5408 takes the 192-token tile (a wave and 10 tiles in 5 pieces: 1.2 waves x 256 against
    two of 128 tokens' 2 x 192), 130.7 -> 102.8 us (0.917x XLA, was 0.73x); the 11 shapes it
    changes 1.095-1.335x."""
    def cost(tile: catalog.TileShape) -> tuple[float, int]:
        tiles = tile_count(n, m, batch, tile)
        if tiles <= num_sms:
            waves = tiles / num_sms
        elif can_plan():
            plan = odd_plan_of(tile, batch, m, n, k, num_sms)
            waves = busiest_cta(plan)[0] / plan["k_blocks"]
        else:
            waves = math.ceil(tiles / num_sms)
        return waves * (tile.block_n + ODD_SHIFT_TOKENS), -tile.block_n
    tile = min(catalog.SWAP_ODD_TILES, key=cost)
    return GemmConfig.for_tile(pitch.shifted_config_tile(family, tile), swap_ab=True,
                               stream_k=True)


# The most rows, and the largest weight (bytes, every batch entry's together), for which a
# product runs swapped past SWAP_MAX_M (swap_for_narrow_weight), and the largest for which a
# swapped product may take more token tiles than its rows need (swap_token_tile; weight_fits_l2):
# half the L2, so that the token tiles' rereads of the weight find it there.
SWAP_NARROW_MAX_M = 1024
SWAP_NARROW_MAX_WEIGHT_BYTES = catalog.L2_BYTES // 2
# The share of the SMs (one in this many) under which an unswapped plan's busy CTAs make a
# product past SWAP_MAX_M run swapped (swap_for_narrow_weight): half, but an eighth for the
# block-scaled product, whose swapped tile loses wherever the unswapped one fills more.
SWAP_NARROW_BUSY_SHARE = {"fp8_block": 8}
SWAP_NARROW_DEFAULT_BUSY_SHARE = 2


def weight_bytes(family: str, batch: int, n: int, k: int) -> int:
    """The bytes of a `family` product's weight (n x k, every batch entry's together)."""
    return batch * n * k * catalog.DTYPES[catalog.FAMILIES[family].dtypes[0][1]].nbytes


def weight_fits_l2(family: str, batch: int, n: int, k: int) -> bool:
    """Whether a `family` product's weight takes at most SWAP_NARROW_MAX_WEIGHT_BYTES: then the
    swapped tiles of a second token tile reread it from L2, not HBM."""
    return weight_bytes(family, batch, n, k) <= SWAP_NARROW_MAX_WEIGHT_BYTES


# The most weight bytes the token tiles of a swapped product on its family's lean tile stream
# (lean_swap_tile).
LEAN_MAX_STREAM_BYTES = 17_000_000


def lean_swap_tile(tiles: tuple[catalog.TileShape, ...], family: str, batch: int, m: int,
                   n: int, k: int) -> catalog.TileShape | None:
    """The lean tile of a swapped family's `tiles` (the lean schedule: one warpgroup that loads
    its own k-blocks, 64 weight columns by 16 tokens, four CTAs to an SM) for a swapped product
    (at most SWAP_MAX_M rows) whose token tiles stream at most LEAN_MAX_STREAM_BYTES of weight
    (its bytes, every batch entry's, once per 16 tokens); else None. Such a call is a few
    microseconds long: a CTA without the producer's hand-over of each stage starts multiplying
    sooner, and four to an SM split a small weight finer, while a long stream runs slower on
    them than on the one-CTA tiles.
    NOTES: device time on an H200 (2026-11-28; the lean tile then waited for the previous
    k-block's wgmmas, gemm_h200_20261128_lean_apart.json): 24 x 2048 x 2048 and 32 x 1024 x
    4096 (8.4 MB weights in two token tiles) 7.8 vs 8.5 / 8.8 us, 64 x 256 x 64 2.7 vs 3.3, and
    slower from a 33.5 MB weight (1 / 16 x 4096 x 4096 13.9 / 14.0 vs 13.3 / 13.6, 8 x 4096 x
    14336 33.8 vs 32.8). A first bound, 16 MB of weight at up to 32 rows, against the build
    without the lean tile on 11 shapes chosen after it (ab_h200_20261128_lean_rule.json, one
    process, 7 reps, device time): 1.06-1.29x on the 9 whose token tiles stream up to 15.9 MB
    (20 x 768 x 768 1.29x, 16 x 1536 x 1536 1.18x, 1 x 1024 x 4096 1.13x, 1 x 2816 x 2816
    1.06x), 0.98x / 0.88x on 32 x 2048 x 3584 and 28 x 4096 x 1792 (14.7 MB in two token
    tiles: 29.4 MB streamed); hence the bound on the bytes streamed, set at the most that won
    in either run (16.8 MB: 24 x 2048 x 2048). The rule first stopped at 32 rows; from 33 to
    64 (three or four token tiles) against that build, 12 bf16 and 8 fp8 per-tensor shapes
    chosen after it (H200, 2026-11-28, ab_h200_20261128_pairs_lean64*.json, 5 reps, device
    time): 1.09-1.29x on every one (bf16 geomean 1.21, fp8 1.17; 45 x 1000 x 768 5.2 vs 6.8
    us, 64 x 2048 x 1024 7.0 vs 7.6), still 0.67-1.10x XLA's bf16 and 0.71-1.32x its fp8."""
    lean = [t for t in tiles if t.schedule == "lean"]
    if not lean:
        return None
    streamed = weight_bytes(family, batch, n, k) * -(-m // lean[0].block_n)
    return lean[0] if streamed <= LEAN_MAX_STREAM_BYTES else None


def swap_cta_bytes(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
                   family: str = "matmul") -> int:
    """The bytes that the busiest CTA of a swapped `config`'s plan (one CTA per SM) moves: its
    k-blocks' weight and token tiles, times the waves of whole tiles, and where the plan
    splits, the fp32 partials of the tile's other pieces that its last arrival reads back. A
    swapped product of a few tokens is a stream of operand bytes through each SM, not of MMAs.
    """
    in_bytes, w_bytes = (catalog.DTYPES[d].nbytes for d in catalog.FAMILIES[family].dtypes[0])
    k_blocks, pieces = busiest_cta(plan_of(config, batch, m, n, k, num_sms, family))
    per_block = config.block_k * (config.block_m * w_bytes + config.block_n * in_bytes)
    return k_blocks * per_block + (pieces - 1) * config.block_m * config.block_n * 4


def swap_token_tile(tiles: tuple[catalog.TileShape, ...], batch: int, m: int, n: int, k: int,
                    num_sms: int, family: str = "matmul") -> catalog.TileShape:
    """The swapped tile of `tiles` (one CTA per SM) whose busiest CTA moves the fewest bytes
    (swap_cta_bytes; the wider on a tie), for a weight that fits in L2 (weight_fits_l2): a
    narrower token tile than the rows need rereads the weight once more per token tile, from
    L2, but gives more tiles to fill the SMs, shorter k-ranges per piece and smaller partials
    to sum.
    NOTES: bf16, the tuner on the device clock over 12 narrow weights (N 512-1024, M 20-963;
    H100, 2026-11-28, tune_h100_20261128_narrow_tokens.json): the 64-token tile, the widest,
    lost to 32 on 80 x 1024 x 5120 (12.4 vs 13.5 us: 16 tiles in 8 pieces whose last arrival
    sums 7 partials of 32 KB, against 24 in 5 of 16 KB) and 128 x 768 x 4096 (10.7 vs 12.0: 120
    CTAs against 96); the 32-token tile lost to 16 on 32 x 1024 x 4096 (9.2 vs 9.7) and 20 x
    512 x 8192 (10.0 vs 11.2: 4 tiles in 16 pieces of 8 k-blocks fill 64 SMs, 8 tiles 128).
    These bytes rank the best token tile first on all 12 problems (the other 8 kept the
    widest that holds the rows, or ran unswapped). This rule against the widest / the rows'
    tile on 18 shapes chosen after those that it changes (bf16 M 24-200, N 264-2048: 15; fp8
    per tensor: 3), one process, 9 reps, device time (ab_h100_20261128_token_tile.json):
    1.07-1.27x on 15, 1.00-1.03x on 3 (40 x 2048 x 2048, 200 x 768 x 2048, fp8 700 x 512 x
    1040); geomean with the 3 it keeps 1.097. Not weighed: the rereads' L2 traffic as a
    whole, which is why the weight must fit in L2."""
    return min((t for t in tiles if t.ctas_per_sm == 1),
               key=lambda t: (swap_cta_bytes(GemmConfig.for_tile(t, swap_ab=True, stream_k=True),
                                             batch, m, n, k, num_sms, family), -t.block_n))


def swap_for_narrow_weight(unswapped: GemmConfig, batch: int, m: int, n: int, k: int,
                           num_sms: int, family: str = "matmul") -> bool:
    """Whether a `family` product (matmul, fp8 per tensor or block-scaled) of SWAP_MAX_M < m <=
    SWAP_NARROW_MAX_M rows against a weight of at most SWAP_NARROW_MAX_WEIGHT_BYTES runs faster
    swapped: where its unswapped plan keeps fewer than half the SMs busy (an eighth for the
    block-scaled product: SWAP_NARROW_BUSY_SHARE; few column tiles, and a K too short to split
    them further). The swap-AB tile then walks the tokens 64 at a time,
    rereading the weight (from L2, where it fits), and its last-arrival split cuts each tile
    into up to 16 pieces where the unswapped split stops at 4 of 32 k-blocks.
    NOTES: bf16 against the unswapped default, one process, 9 reps (H100, 2026-11-27,
    ab_h100_20261127_swap_narrow.json): N = 512-1536 at M = 65-1024, 1.03-1.35x on 11 of 12
    shapes (80 x 1024 x 5120 1.33, 300 x 1024 x 3072 1.35, 150 x 1024 x 11008 1.09, 963 x 1024
    x 3072 1.07), 65 x 1000 x 1000 0.98; 96 / 128 x 4096 x 4096 (a 33.5 MB weight, each token
    tile's reread past half the L2) 0.94 / 0.96. The bound was then N <= 1536. Wider weights,
    the swap config against the default in one process, 7 reps (H100, 2026-11-27,
    gemm_h100_20261127_narrow_wide.json): up to 21 MB 0.99-1.20x (256 x 2048 x 2048 1.20, 80 x
    2048 x 5120 1.13, 160 x 2816 x 2816 1.12, 200 x 2048 x 4096 0.99), 28-34 MB 0.92-1.00x
    (80 x 3584 x 4096 0.92): the weight's bytes, not its width, set the bound. fp8 per tensor
    (fp8_h100_20261127_narrow.log, same run), weights of 0.8-16.8 MB: 0.97-1.33x (96 x 1536 x
    8192 1.33, 704 x 512 x 4096 1.28, 80 x 2048 x 5120 1.26; 128 x 768 x 4096 0.97). This rule
    against the N bound on 18 shapes chosen after it (ab_h100_20261127_swap_bytes.json, one
    process, 9 reps): bf16 1.01-1.20x on 7 (weights 1792-5120 wide), fp8 1.03-1.24x on 9 and
    0.98x on 65 x 4096 x 4096 (65 rows: two token tiles, the weight read twice).
    Block-scaled fp8 (H100, 2026-11-28): under the half rule, against the unswapped default
    (ab_h100_20261128_fp8_block_swap.json, device time) 80 x 1024 x 5120 1.74x and 128 x 2048 x
    7168 1.55x (8 and 16 busy CTAs) but 256 x 4096 x 4096 0.79x (64); both tiles forced on 16
    shapes of M = 80-1000 (fp8_block_h100_20261128_swap_rule.json, one process, chained):
    swapped won only at 16 busy CTAs (96 x 2048 x 7168 1.16x, 256 x 1024 x 5120 1.09x) and lost
    from 24 (384 x 1024 x 4096 0.89x, 300 x 1024 x 3072 0.86x) to 64 (256 x 4096 x 4096 0.75x,
    1000 x 512 x 8192 0.75x): hence an eighth of the SMs for it.
    (Which token tile it then takes: swap_token_tile.)"""
    return (SWAP_MAX_M < m <= SWAP_NARROW_MAX_M and weight_fits_l2(family, batch, n, k)
            and can_plan()
            and SWAP_NARROW_BUSY_SHARE.get(family, SWAP_NARROW_DEFAULT_BUSY_SHARE)
            * busy_ctas(unswapped, batch, m, n, k, num_sms, family) < num_sms)


# The rows past which the wide token tiles may take a product (swap_wide_config): more than one
# unswapped tile's 128 (below it, rows one 96-token tile holds: one_token_tile_config).
SWAP_WIDE_MIN_M = 128


# The wide token tiles of every swapped family (16-bit and fp8 per tensor).
WIDE_TOKEN_TILES = catalog.SWAP_WIDE_TILES + catalog.SWAP_WIDE_TILES_FP8
# The families whose wide token tiles give way: to the narrow-weight swap wherever that
# applies (heuristic_config), and to the unswapped config where the 192-token tiles exceed one
# wave (swap_wide_config). fp8 per tensor: its unswapped and decode kernels stream twice the
# FLOPs a byte, and the wide tiles' fixed costs (the transposed store in passes, the split's
# fix-up) weigh twice as much (swap_wide_config's NOTES).
WIDE_TILES_YIELD = ("fp8",)


def one_token_tile_config(tile: catalog.TileShape, batch: int, m: int, n: int,
                          num_sms: int) -> GemmConfig | None:
    """The swapped config on `tile`, a wide token tile that holds every row, unclustered, where
    its weight tiles take at most one an SM (else None: past a wave, untried).
    NOTES: the tuner on a random sweep's worst shapes (H200, 2026-12-04,
    tune_h200_20261204_random_s57_worst.json): 68 x 16384 x 16384 ran 128.3 us on the 96-token
    tile in 2x1 clusters (131.1 unpaired) against the unswapped ping-pong 128 x 128's 165.3; the
    sweep's four shapes of 65-96 rows all ran below XLA unswapped (0.76-0.94x on the device,
    gemm_h200_20261204_random_s57.json). The rule as first kept paired two weight tiles on the
    tokens (2x1, the tokens multicast) over an even count of them; against main 27afc73 (the
    unswapped heuristic: 128-row tiles, ping-pong within a wave), one process, 5 reps, device
    time (H200, 2026-12-04, ab_h200_20261204_one_token_tile.json): 0.999-1.214x on 11 shapes
    drawn after it (geomean 1.099; 74 x 16384 x 11008 106.7 -> 88.9 us, 92 x 11008 x 6144
    1.214, 73 x 10240 x 2048 1.156; 71 x 11008 x 14336 0.999, 85 x 7168 x 4096 1.004),
    1.053-1.411x on the sweep's four (68 x 16384 x 16384 1.282, 69 x 10000 x 3072 1.411), 75 x
    28672 x 4096 past a wave unchanged; against XLA's device time 0.84-1.24x, geomean 1.02 (66
    x 3072 x 8192 0.84, 16 weight tiles split along K). The pair then: the tokens it multicasts
    are the small operand here, and the tuner on 14 shapes of 65-96 rows drawn before
    (H200, 2026-12-04, tune_h200_20261204_one_token_s58.json, 13 timed) ran the tile unpaired
    1.008-1.070x faster than paired on 12 (89 x 11008 x 5120 30.6 against 32.8 us, 73 x 12288
    x 3072 24.1 against 25.4) and 0.995x on one (93 x 14336 x 11008), geomean 1.031, as on
    three earlier (tune_h200_20261202_random_s46.json: 81 x 7168 x 2048 14.5 against 15.3 us);
    only 68 x 16384 x 16384 ran the pair faster (above, 1.022x): hence unpaired. Against the
    pair on 10 shapes drawn after (ab_h200_20261204_past_wave.json, one process, 5 reps,
    device time): 0.953-1.062x, geomean 1.016 (66 x 11008 x 11008 70.4 -> 66.3 us; 96 x 12288 x
    1400 0.953, 95 x 6600 x 5000 0.970), 0.73-2.49x XLA. fp8 (WIDE_TILES_YIELD) and 97-128
    rows (one unswapped tile, no padding to save) are not tried."""
    if tile_count(n, m, batch, tile) > num_sms:  # swapped: weight tiles by token tiles (one)
        return None
    return GemmConfig.for_tile(tile, swap_ab=True)


def swap_wide_config(family: str, batch: int, m: int, n: int, k: int,
                     num_sms: int) -> GemmConfig | None:
    """The swapped config on the wide token tiles (WIDE_TOKEN_TILES) of `family`'s
    swapped family for a product of SWAP_WIDE_MIN_M < m <= 192 rows (and, outside
    WIDE_TILES_YIELD, of SWAP_MAX_M < m <= 96: one 96-token tile, one_token_tile_config), else
    None: two 96-token
    tiles in a 2-CTA cluster sharing the weight tile (cluster_n = 2: the weight multicast)
    where they take at most one tile an SM, else the 160-token mid tile in 2x1 clusters (the
    tokens multicast) where the rows fit it (m <= 160; the 16-bit families, whose swapped
    family has mid tiles), else one 192-token tile unclustered. Unswapped,
    such rows pad to two 128-row tiles; 96 and 192 hold them with less padding, and the pair of
    96-token tiles gives twice the tiles to spread over the SMs.
    NOTES: device time, H200, 2026-11-29 (gemm_h200_20261129_swap_wide.json): on 26 shapes of
    M = 129-192 (N 1024-28672, K 1024-14336), the default then (unswapped: 128 x 128-256,
    cooperative or ping-pong, or the narrow-weight swap) against 192 (1x1, 2x1) and 96 (1x1,
    1x2): this rule's config was the fastest or within 6% of it on 25 and ran 1.02-1.48x the
    default on the 24 it moves (181 x 14336 x 10000 100.8 -> 88.0 us, 139 x 7168 x 3072 30.1 ->
    20.3, 160 x 4096 x 4096 22.5 -> 17.1; XLA 78.7, 14.5, 14.4), but 174 x 5120 x 11008 1.07x
    where 192 ran 1.25x (80 tiles of 96 whole against 40 of 192 in three pieces; no rule for it
    yet). Where more 96-token tiles than SMs (N > 8448 here) the 192-token tile ran 1.06-1.19x
    the 96-token pair. Against the narrow-weight swap (64-token decode tiles, last-arrival split)
    the one keeping more CTAs busy won on all 5 such shapes (heuristic_config). The 192-token
    tile in 2x1 clusters (the tokens multicast) ran 0.89-1.08x the time of 1x1, faster only at
    130 x 8192 x 8192 and N = 28672. Held out: ab_h200_20261129_swap_wide_heldout.json, 12
    shapes drawn after the rule, 1.00-1.41x the build before, geomean 1.16.
    fp8 per tensor (the same tiles with 128-element k-blocks; ab_h200_20261129_fp8_wide_rule.log,
    H200, 2026-11-29, 16 shapes at M = 129-192 under the 16-bit rule, device time against the
    build without them): 1.03-1.49x on 9 of the 10 that took the pair or a 192-token tile
    within a wave (geomean 1.19; 141 x 5536 x 11008 42.9 -> 28.7 us, 170 x 8192 x 3552 1.29x),
    0.99x at 140 x 8592 x 5584; but 0.87x on 164 x 28672 x 11120 (224 tiles of 192, 1.7 waves:
    the unswapped 128 x 256 ran 136.5 us against 156.3) and 0.94x / 0.98x on the two where the
    pair displaced the narrow-weight swap (138 x 2048 x 3488, 147 x 2048 x 5120; busy CTAs 96 /
    96 and 128 / 96): hence WIDE_TILES_YIELD. Held out (ab_h200_20261129_fp8_wide_heldout.json,
    9 shapes drawn after it and those three): 1.04-1.33x on the 4 it moves (geomean 1.18;
    161 x 4096 x 7168 22.3 -> 16.8 us, XLA's fp8 20.4), 0.996-1.005x on the other 8.
    The 160-token tile past one wave of pairs (H200, 2026-12-02, ab_h200_20261202_snug160.json,
    5 reps, device time against the build before, where the 192-token tile ran them
    unclustered): 1.12-1.38x on the 12 shapes of M = 129-160 it moves (geomean 1.21; 131 x
    12288 x 3000 40.4 -> 29.3 us, 160 x 14336 x 5000 65.1 -> 47.5; still 0.72-0.94x XLA's
    device time), 1.00x on the two it leaves (170 and 100 rows). The tuner found it first
    (tune_h200_20261202_random_worst.json, 153 x 12288 x 1400: 16.3 against 20.4 us): 32
    padded rows fewer, and in 2x1 clusters each token tile is loaded once for two weight
    tiles."""
    swapped = catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
    tiles = [t for t in swapped if t in WIDE_TOKEN_TILES]
    if not tiles:
        return None
    pair, wide = min(tiles, key=lambda t: t.block_n), max(tiles, key=lambda t: t.block_n)
    if SWAP_MAX_M < m <= pair.block_n and family not in WIDE_TILES_YIELD:
        return one_token_tile_config(pair, batch, m, n, num_sms)
    if not SWAP_WIDE_MIN_M < m <= wide.block_n:
        return None
    if tile_count(n, m, batch, pair) <= num_sms:
        return GemmConfig.for_tile(pair, swap_ab=True, cluster_n=2)
    if family in WIDE_TILES_YIELD and tile_count(n, m, batch, wide) > num_sms:
        return None
    snug = min((t for t in swapped if t in catalog.SWAP_MID_TILES and m <= t.block_n),
               key=lambda t: t.block_n, default=None)
    if snug is not None:
        return GemmConfig.for_tile(snug, swap_ab=True, cluster_m=2)
    return GemmConfig.for_tile(wide, swap_ab=True)


# The token tiles of the mid-M swap (swap_mid_config): the swapped family's mid tiles and its
# widest token tile (families without mid tiles, fp8 among them, have none).
MID_TOKEN_TILES = catalog.SWAP_MID_TILES + (max(catalog.SWAP_WIDE_TILES, key=lambda t: t.block_n),)


# The fewest k-blocks over which a narrow weight's swap may take the wide and mid-M token
# tiles (swap_narrow_config).
NARROW_WIDE_MIN_K_BLOCKS = 48


def swap_narrow_config(family: str, batch: int, m: int, n: int, k: int, num_sms: int,
                       decode_tiles: tuple[catalog.TileShape, ...]) -> GemmConfig:
    """The swapped config of a narrow weight's product (swap_for_narrow_weight holds): the token
    tile of swap_token_tile, split along K, among the swapped family's `decode_tiles` and, over
    NARROW_WIDE_MIN_K_BLOCKS or more but for WIDE_TILES_YIELD's families, its wide and mid-M
    token tiles (96-192 tokens); one of the latter over an even count of weight tiles runs in
    2-CTA clusters (cluster_m = 2: two weight tiles share each token tile, multicast), as in
    swap_mid_config. The wider token tiles reread the weight fewer times; over a short K they
    split into pieces too short to pay for their fix-up, which the bytes do not weigh.
    NOTES: the tuner on 18 random shapes (H200, 2026-12-02, tune_h200_20261202_random_s46.json,
    device time): where the 64-token tile ran 200 x 3072 x 3080 in 19.4 us and 579 x 768 x 5120
    in 19.1, the 128-token tile in 2x1 clusters, split, ran 16.5 and 16.8 (unclustered 19.2 and
    17.2); by the bytes its busiest CTA moves (swap_cta_bytes) 128 ranks first on both (0.88
    and 0.85 MB against 1.20 and 1.02 for 64), while on the narrow weights where 64 or 32 won
    (tune_h100_20261128_narrow_tokens.json: 300 x 1024 x 3072, 197 x 1024 x 5120, 150 x 1024 x
    11008, 128 x 768 x 4096; the wider tiles not compiled then) the bytes still rank those
    first. Without the k-block bound, against main bfa2375 on those two, two it keeps and the
    first 20 of 400 random shapes whose config it changed (H200, 2026-12-02, 5 reps, device
    time, ab_h200_20261202_narrow_wide.json): 0.99-1.21x on all 7 of 48 k-blocks or more
    (638 x 1000 x 3072 19.0 -> 15.7 us, 366 x 1024 x 3072 1.06x, 584 x 1512 x 3072 0.994x),
    0.96-1.05x at 32 (443 x 2048 x 2072 0.96x, 648 x 552 x 2056 1.05x), 0.79-1.00x at 16-24
    (801 x 1000 x 1024 9.1 -> 11.6 us: 64 tiles of 128 tokens in two pieces of 8 k-blocks
    where the 64-token tile's 128 ran whole); the two it keeps 1.00x. The bound is fit to
    that run; the shapes it still moves are not yet measured apart from it."""
    fam = catalog.FAMILIES[catalog.SWAP_FAMILIES[family]]
    tiles = decode_tiles
    if (family not in WIDE_TILES_YIELD
            and math.ceil(k / decode_tiles[0].block_k) >= NARROW_WIDE_MIN_K_BLOCKS):
        tiles += tuple(t for t in fam.tiles
                       if t in WIDE_TOKEN_TILES + MID_TOKEN_TILES and t not in tiles)
    tile = swap_token_tile(tiles, batch, m, n, k, num_sms, family)
    paired = tile in fam.clustered_tiles and pairs_weight_tiles(n, tile)
    return GemmConfig.for_tile(tile, swap_ab=True, stream_k=True, cluster_m=2 if paired else 1)


def pairs_weight_tiles(n: int, tile: catalog.TileShape) -> bool:
    """Whether a swapped product's n weight columns make an even count of `tile`'s weight tiles
    (its rows), so that 2-CTA clusters along them (cluster_m = 2) pair every one."""
    return math.ceil(n / tile.block_m) % 2 == 0


def pairs_token_tiles(m: int, tile: catalog.TileShape) -> bool:
    """Whether a swapped product's m tokens make an even count of `tile`'s token tiles (its
    columns), so that 2-CTA clusters along them (cluster_n = 2) pair every one."""
    return math.ceil(m / tile.block_n) % 2 == 0


# The widest token tile that swap_mid_config pairs along its tokens (the weight multicast);
# the 192-token tile pairs along the weight (along its tokens it ran 0.76-1.16x the weight
# pair in the tuner's reports, H100 and H200: swap_mid_config's NOTES).
TOKEN_PAIR_MAX_TOKENS = 160
# The weight's bytes past which swap_mid_config pairs the token tiles (the weight multicast)
# even where the weight's tiles could pair (the tokens multicast): in the H100's A/B over
# weights of 18-45 MB under the L2 (swap_mid_config's NOTES) every weight of 28.2 MB or more
# ran 1.09-1.18x faster so and every one of 21.0-26.2 MB 0.89-0.93x. Smaller weights stay in
# the L2 beside the tokens and the output, so fetching them once a pair saves little.
TOKEN_PAIR_MIN_WEIGHT_BYTES = 27_000_000


def mid_token_configs(family: str, n: int, widths=None, m: int | None = None,
                      large_weight: bool = False) -> list[GemmConfig]:
    """The swapped configs of `family`'s swapped family on its MID_TOKEN_TILES (those of
    `widths` tokens, where given) for n weight columns, which the mid-M rules weigh
    (swap_mid_config, swap_past_wave_config): the weight's columns are the swapped tile's rows,
    the tokens its columns. Where m (the tokens) is given, a tile of at most
    TOKEN_PAIR_MAX_TOKENS over an even count of token tiles runs two of them on each weight
    tile in a 2-CTA cluster (cluster_n = 2: the weight multicast; pairs_token_tiles) where the
    weight is larger than TOKEN_PAIR_MIN_WEIGHT_BYTES (large_weight) or its tiles cannot pair;
    else, over an even count of weight tiles, two share each token tile (cluster_m = 2: the
    tokens multicast; pairs_weight_tiles); else unclustered."""
    fam = catalog.FAMILIES[catalog.SWAP_FAMILIES[family]]
    configs = []
    for t in fam.tiles:
        if t not in MID_TOKEN_TILES or (widths is not None and t.block_n not in widths):
            continue
        along_weight = pairs_weight_tiles(n, t)
        along_tokens = (m is not None and t.block_n <= TOKEN_PAIR_MAX_TOKENS
                        and pairs_token_tiles(m, t) and (large_weight or not along_weight))
        configs.append(GemmConfig.for_tile(
            t, swap_ab=True, cluster_m=2 if along_weight and not along_tokens else 1,
            cluster_n=2 if along_tokens else 1))
    return configs


# The most of the unswapped plan's cost (plan_cost) at which the mid-M swap displaces it.
SWAP_MID_MAX_COST = 0.9
# The largest share of the SMs that the mid-M swap's unclustered tiles may take
# (swap_mid_config's NOTES: 128 tiles of 132 ran at the rate of 120, 132 of 132 1.27x slower).
SWAP_MID_MAX_SHARE_UNPAIRED = 0.97
# What one L2 read request of a tile's operand loads costs in plan_cost's units (k-blocks x
# tile area), where the mid-M swap weighs its token tiles (swap_mid_config, swap_l2_requests).
L2_REQUEST_COST = 0.6


def swap_l2_requests(config: GemmConfig, batch: int, m: int, n: int, k: int,
                     off_line: tuple[int, int]) -> float:
    """The L2 read requests of a swapped config's operand loads: each tile's k-blocks, one
    128-byte row a weight column (b's rows) and a token (a's rows), at pitch.row_lines each, as
    TMA asks for them (a row across two lines is two requests; multicast not counted)."""
    a_lines, b_lines = map(pitch.row_lines, off_line)
    return (tile_count(n, m, batch, config.tile) * math.ceil(k / config.block_k)
            * (config.block_m * b_lines + config.block_n * a_lines))


def swap_mid_config(family: str, batch: int, m: int, n: int, k: int, unswapped: GemmConfig,
                    num_sms: int, off_line: tuple[int, int] = (0, 0)) -> GemmConfig | None:
    """The swapped config on a token tile of MID_TOKEN_TILES (128, 160 or 192 tokens by 128
    weight columns) for a product of more than 192 rows over LONG_K_BLOCKS or more, where one
    of those whose tiles fit one wave costs at most SWAP_MID_MAX_COST of the `unswapped`
    config's plan cost (plan_cost: the busiest SM's work): of those, the one of least cost, the
    larger of its plan cost and L2_REQUEST_COST x its L2 read requests (swap_l2_requests; the
    narrower on a tie). The tiles run in 2-CTA clusters as mid_token_configs pairs them: over
    an even count of token tiles of at most TOKEN_PAIR_MAX_TOKENS two share each weight tile
    (cluster_n = 2: the weight multicast) where the weight is larger than
    TOKEN_PAIR_MIN_WEIGHT_BYTES or its tiles cannot pair, else over an even count of weight
    tiles two share each token tile (cluster_m = 2: the tokens multicast; either halves one
    operand's L2 reads); else
    unclustered, then on at most SWAP_MID_MAX_SHARE_UNPAIRED of the SMs. None
    where a's rows start off a 32-byte sector (off_line, pitch.rows_off_l2_line: the tokens,
    which the swapped tile reads once per weight tile; on a sector, as b's in pair_along_m,
    1000 x 1024 x 10000 below). Swapped, the token width sets the rows' padding and the tile
    count: cuBLAS runs this band so, the width picked to fill whole token tiles and the SMs
    (792 x 3000 x 14336: 24 x 5 tiles of 128 x 160 on 120 SMs, where the unswapped 128 x 192
    takes 112 tiles of 7 x 128 = 896 rows, 1.2x the area a CTA).
    NOTES: device time, forced configs in one process, 5 reps (H200, 2026-11-29,
    gemm_h200_20261129_midm_tokens.json), against the default then on 10 shapes of M = 512-4385:
    792 x 3000 x 14336 139.6 -> 118.2 us on 160 (XLA 94.4), 1025 x 2048 x 7168 53.8 -> 49.1,
    640 x 4096 x 8192 63.1 -> 57.8, 512 x 4096 x 4096 30.2 -> 26.1 on 128 (the unswapped
    128 x 256 split in two; plan costs 0.83-0.87 of the default's); where the costs tie (the
    192-token tile's 120 tiles against the unswapped 128 x 192's 112-126 on 1839 x 1536 x
    16384, 3565 x 768 x 7168, 1026 x 2560 x 5000) swapped ran 0.97-1.06x, and where the tiles
    overflow a wave 0.68-1.03x: 4385 x 768 x 14336 and 811 x 6000 x 4096 ran 0.78x on the
    128-token tile (210 and 329 tiles) though their plan costs were 0.81 and 0.86 of the
    default's, which the 128 x 128 tile's bytes a FLOP past one wave explain (TILE_EFFICIENCY),
    hence one wave only. Under 64 k-blocks not measured but on one shape: 559 x 3000 x 3072
    (48) ran 0.93x on 120 tiles of 128 tokens, whose plan cost ties the default's 120 of
    ping-pong 128 x 128, and 1.06x on 96 of 160 (a cost of 1.25); ping-pong's own rule
    (pingpong_mid_m) was measured there, so short K keeps it. 2-CTA clusters (the tokens
    multicast) ran 0.96-1.04x the unclustered tile where it is taken.
    Held out (H200, 2026-11-29, ab_h200_20261129_midm_swap_heldout.json, unclustered, against
    main a70f099, device time): 1.02-1.16x on 7 of the 8 it moved (318 x 5760 x 7040 53.4 ->
    46.1 us, 438 x 4480 x 11776 86.3 -> 76.5, 765 x 3200 x 7616 1.09x, 1000 x 1024 x 10000 on
    128-token tiles split in two 1.08x), 0.69x on 1619 x 1472 x 12200: 132 tiles of 160, all
    the SMs, and a's rows 80 bytes past the line. Apart (gemm_h200_20261129_midm_full_wave.json,
    forced configs, device time, us; 192 tiles of k): 160 tokens on 120 / 121 tiles (1600 x 1472,
    1619 x 1408) 81.4 / 82.1, on 132 (1619 x 1472) 104.0, with a's rows off the line 134.6,
    against the unswapped 128 x 192's 88.9-91.4; in 2-CTA clusters 82.1 / 85.5 / 103.2, but 99.9
    where an odd 11 weight tiles pair into 132 CTAs. 128 tiles of 1x1 (640 x 4096 x 8192) 58.5,
    2x1 58.9. A bandwidth limit, by the rates: every CTA reads 36.9 KB a k-block, 10.4 TB/s
    from L2 at 120 and 128 CTAs, 9.0 at 132; paired, 26 KB a CTA. Hence the pairs, the share
    and a's sector. This rule on 12 shapes drawn after it (ab_h200_20261129_midm_swap_rule_
    heldout.json, against a70f099, device time): 1.02-1.50x on 9 (274 x 4200 x 14864 140.7 ->
    93.9 us, 313 x 1320 x 4608 1.17x, 889 x 3168 x 11216 1.16x, 520 x 5632 x 5120 1.16x),
    0.93-0.99x on 3 whose few tiles the plan splits (800 x 1240 x 13584: 50 tiles of 160;
    659 x 1408 x 7872: 66 of 128; 1502 x 968 x 16240: 64 of 192); geomean 1.09; 3 it keeps
    0.99-1.00x. Still 0.61-0.94x XLA there.
    The L2 requests (H200, 2026-11-29): 792 x 3000 x 14336 on 160 tokens unclustered ran 114.9
    us, 792 x 3072 / 3008 / 2944 x 14336 (the same 120 tiles; weight rows on the line) 96.0-98.0
    (gemm_h200_20261129_midm_pitch.json); under ncu 10.76M L2 requests against 4.95M, the
    consumers waiting on the ring's full barriers (ncu_h200_20261129_midm_requests.txt): a row
    across two lines is two requests, and past about 11-13 us per million the requests, not
    the tensor cores, pace the wave. On 9 shapes with the weight's rows off the line
    (gemm_h200_20261129_midm_offline.json) the 128-token tile the plan cost picked ran 1.09-
    1.18x slower than 160 on three (400 x 3744 x 5248 41.1 vs 35.5 us: 120 tiles of 128 ask
    1.23x the requests of 90 of 160); time ~ max(23.5 x plan cost, 11.8 x requests) (us per
    million) fits the 44 forced 1x1 and 2x1 runs there and on the pitch shapes within 13% (rms;
    ratio 0.50), and a ratio, L2_REQUEST_COST, of 0.55-0.65 picks the fastest tile on all 9
    (0.50 on 8). Held out (ab_h200_20261129_midm_requests_heldout.json, 12 of 70 drawn mid
    shapes whose tile it changes, against a5f7cdc, device time): 1.00-1.46x, geomean 1.18 (318
    x 5144 x 10896 107.3 -> 73.6 us on 160, 713 x 1344 x 9984 1.31 and 580 x 1584 x 15840 1.31
    on 192, 353 x 4976 x 4560 1.00); the three it keeps 1.00x. Multicast is not counted: there
    2-CTA pairs ran 0.92-1.20x the unclustered tile's speed, 4-CTA clusters 0.79-1.19x the
    pair's (catalog.CLUSTER_SHAPES' NOTES).

    Which operand the pair shares (H100, 2026-12-06): the tuner on 16 long-K mid-M problems
    (tune_h100_20261206_long_k.json) had the heuristic's pairs along the weight (the tokens
    multicast) 1.06-1.17x slower than the same tile paired along the tokens (the weight
    multicast) on 540 x 2048 x 11008, 220 x 6600 x 5120, 856 x 1280 x 11008 and 512 x 4096 x 4096
    (the H200 reports, where both were timed on such shapes: 1.03-1.16x on the 128-token tile,
    0.92-1.08x on 160, 0.76-1.10x on 192). Token pairs wherever the token tiles are even
    (128 and 160 tokens), against main 53cd17b, 5 reps, device time
    (ab_h100_20261206_token_pairs.json): 1.02-1.23x on the 10 of 17 drawn shapes (seed 65)
    whose weight is larger than the L2 or whose weight tiles are odd (292 x 6216 x 12032 96.6
    -> 78.5 us, 861 x 2136 x 4096 1.20x, 855 x 2816 x 16384 1.13x on all 132 SMs), but 0.89-
    0.93x on 5 of the 7 with an even count of weight tiles under 32 MB (825 / 645 / 657 x
    2560 x 5120, 935 x 2048 x 5120, 1012 x 1024 x 12288; 855 x 1280 x 12288 1.15x, 893 x 1280
    x 7168 1.03x): hence catalog.L2_BYTES. As kept, on 18 shapes drawn after it (seed 66)
    whose config it changes (ab_h100_20261206_token_pairs_heldout.json): 0.964-1.207x,
    geomean 1.081, 17 faster (261 x
    8192 x 12288 113.2 -> 93.8 us, 525 x 3584 x 8192 1.196x, 258 x 3704 x 11840 1.171x;
    318 x 5192 x 5120 0.964x, unpaired before); two it keeps 0.998-0.999x. Still 0.72-1.01x
    XLA there (geomean 0.88). Not measured on an H200. Token pairs over an odd count of weight
    tiles filling 130-132 SMs (which the share had kept unswapped) ran 0.866-1.139x the
    unswapped default on 4 shapes (ab_h100_20261206_long_k_unpaired.json: 1900 x 1408 x 12288
    1.139, 1850 x 1408 x 8192 1.034, 1800 x 1408 x 16384 0.974, 1500 x 1664 x 10240 0.866):
    every SM only where the weight's tiles pair too. The first form's data also split the
    weights under the L2 (even weight tiles): 512 x 4096 x 4096 (33.6 MB) 1.088x, 540 x 2048
    x 11008 (45.1) 1.179x, 856 x 1280 x 11008 (28.2) 1.155x, 855 x 1280 x 12288 (31.5) 1.145x,
    against 0.885-0.932x at 21.0-26.2 MB (and 893 x 1280 x 7168, 18.4 MB, 1.029x); the tuner's
    report agrees on the first three: hence TOKEN_PAIR_MIN_WEIGHT_BYTES. Against e493b34
    on 16 shapes drawn after it (seed 69, weights of 28.7-48.9 MB, each one it changes;
    ab_h100_20261206_token_pairs_27mb.json, device time): 0.926-1.261x, geomean 1.077, 14
    faster (440 x 3520 x 5632 1.261, 482 x 3840 x 5440 1.207; 649 x 2752 x 5824 0.926, 587 x
    1216 x 15040 0.936); 0.62-1.02x XLA there. Not measured on an H200.
    """
    large = weight_bytes(family, batch, n, k) > TOKEN_PAIR_MIN_WEIGHT_BYTES
    configs = mid_token_configs(family, n, m=m, large_weight=large)
    if (m <= max(t.block_n for t in WIDE_TOKEN_TILES) or not configs
            or off_line[0] % catalog.L2_SECTOR_BYTES
            or math.ceil(k / configs[0].block_k) < LONG_K_BLOCKS or not can_plan()):
        return None
    # Every SM only where the weight's tiles pair too (the token pairs over odd weight tiles on
    # 130-132 CTAs ran 0.87-1.14x the unswapped default; NOTES)
    unpaired_most = int(SWAP_MID_MAX_SHARE_UNPAIRED * num_sms)
    configs = [c for c in configs if tile_count(n, m, batch, c.tile)
               <= (num_sms if pairs_weight_tiles(n, c.tile) else unpaired_most)]
    if not configs:
        return None
    costs = [plan_cost(c, batch, m, n, k, num_sms, family) for c in configs]
    if min(costs) > SWAP_MID_MAX_COST * plan_cost(unswapped, batch, m, n, k, num_sms, family):
        return None
    requests = [L2_REQUEST_COST * swap_l2_requests(c, batch, m, n, k, off_line) for c in configs]
    return min(zip(map(max, costs, requests), (c.block_n for c in configs), configs))[2]


# The most rows for which the token tiles may take a product past one wave of its unswapped
# tiles (swap_past_wave_config): the band the tuner measured.
SWAP_PAST_WAVE_MAX_M = 3072
# Past a wave, each token tile's rate on one SM relative to the unswapped 128 x 256 (as
# TILE_EFFICIENCY, keyed by tokens): 192 tokens by 128 weight columns issue the unswapped
# 128 x 192's MMAs; 160, by its operand bytes a FLOP, between that and 128 x 128. The 128-token
# tile is left out: past a wave it ran 0.78x the unswapped default (swap_mid_config's NOTES).
SWAP_TOKEN_TILE_EFFICIENCY = {192: TILE_EFFICIENCY[128, 192, "cooperative"], 160: 0.85}
# The most of the unswapped config's cost (plan_cost over its efficiency) at which the token
# tiles displace it past a wave.
SWAP_PAST_WAVE_MAX_COST = 0.95


def swap_past_wave_config(family: str, batch: int, m: int, n: int, k: int,
                          unswapped: GemmConfig, num_sms: int,
                          off_line: tuple[int, int] = (0, 0)) -> GemmConfig | None:
    """The swapped config on the 160- or 192-token tile (SWAP_TOKEN_TILE_EFFICIENCY) for a
    product of 193-SWAP_PAST_WAVE_MAX_M rows whose `unswapped` config's tiles fill more than one
    wave: the one of least plan_cost over its efficiency (the wider on a tie), where that is at
    most SWAP_PAST_WAVE_MAX_COST of the unswapped config's plan_cost over its
    TILE_EFFICIENCY; two weight tiles sharing the tokens (cluster_m = 2) over an even count of
    them, as in swap_mid_config. None where a's rows (the tokens) start off a 32-byte sector,
    as there. Past a wave the token width sets the rows' padding and the waves' count, as
    within one (swap_mid_config); the L2 requests that rule weighs are not (unmeasured here).
    NOTES: the tuner (every compiled config, 3 reps, device time, H200, 2026-12-02 and -04;
    tune_h200_20261204_midm_waves_s59.json, drawn for it, and the other H200 reports) on the
    25 bf16 problems of more than 192 rows past a wave of unswapped tiles: the swapped 160- or
    192-token tile ran faster than the best unswapped config on 9 (1.01-1.13x; 1282 x 6600 x
    5120 130.1 against 146.4 us, the heuristic's 166.1; 2093 x 6144 x 2560 89.6 against 99.1;
    1700 x 2560 x 12288 151.3 against 161.2; 1433 x 3072 x 1000, 717 x 6000 x 1000, 2066 x 2048
    x 2560 1.05-1.06x), slower on 16 (0.88-1.00x; 1399 x 12288 x 2560 0.88x, 2969 x 5120 x
    1024 0.95x). The cost above, swapped over unswapped, was 0.73-0.98 on the 7 it won by 4% or
    more, 0.96-1.22 on those it lost; at a bound of 0.98 it took 2359 x 7168 x 1536 (0.96), whose
    paired 192-token tile ran 1.05x the best: hence 0.95. Two of the 7 (1433 x 3072 x 1000,
    717 x 6000 x 1000) have the tokens off a 32-byte sector, excluded.
    Held out: against main 9df3db9, one process, 5 reps, device time (H200, 2026-12-04,
    ab_h200_20261204_past_wave.json, 14 of 340 random shapes of M = 193-3072 drawn after it,
    the ones whose config it changes): 0.914-1.197x, geomean 1.074, 13 faster (1866 x 3080 x
    3072 68.5 -> 57.3 us, 1914 x 3080 x 8192 1.155, 471 x 10000 x 768 1.134, 1694 x 2560 x
    10000 1.110), 0.914x on 2594 x 3080 x 16384 (350 unpaired tiles of 192 tokens over 256
    k-blocks, the weight's rows off the line: 428.7 -> 468.8 us; not profiled); still 0.77-1.00x
    XLA (geomean 0.87). M over 3072 is not tried: there the token tiles' cost rarely falls
    under the bound (none of 3073-3600 x 2048-6144 x 2560)."""
    configs = mid_token_configs(family, n, SWAP_TOKEN_TILE_EFFICIENCY)
    key = (unswapped.block_m, unswapped.block_n, unswapped.schedule)
    if (not max(t.block_n for t in WIDE_TOKEN_TILES) < m <= SWAP_PAST_WAVE_MAX_M or not configs
            or unswapped.swap_ab or key not in TILE_EFFICIENCY
            or off_line[0] % catalog.L2_SECTOR_BYTES or not can_plan()
            or tile_count(m, n, batch, unswapped.tile) <= num_sms):
        return None
    costs = [plan_cost(c, batch, m, n, k, num_sms, family) / SWAP_TOKEN_TILE_EFFICIENCY[c.block_n]
             for c in configs]
    cost, _, config = min(zip(costs, (-c.block_n for c in configs), configs))
    limit = (SWAP_PAST_WAVE_MAX_COST * plan_cost(unswapped, batch, m, n, k, num_sms, family)
             / TILE_EFFICIENCY[key])
    return config if cost <= limit else None
