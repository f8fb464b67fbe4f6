"""Picks a GemmConfig from the compiled set for a problem shape: the dense families (matmul,
glu, fp8; swap-AB at small M) and the grouped ones (grouped, grouped_glu, grouped_contraction).
Calls without a config take it at launch, for the problem one device runs."""

from __future__ import annotations

import math

from jax_hopper.kernels import catalog
from jax_hopper.gemm import pitch
from jax_hopper.gemm.config import GemmConfig

# Tiles are weighed against this many SMs where no GPU is at hand (tuned.device_sms reads the
# device's own count; the lowering plans the launch on the real device).
DEFAULT_NUM_SMS = catalog.DEFAULT_NUM_SMS
# H100 SXM: dense bf16 peak per SM (989 TFLOP/s over 132 SMs) and HBM3 bandwidth, in FLOP and
# bytes per second, for the small-M roofline below (an H200's faster HBM only widens it).
SM_FLOPS = 989e12 / catalog.DEFAULT_NUM_SMS
HBM_BYTES_PER_S = 3.35e12


def split_k_pays(m: int, n: int, batch: int, block_m: int, block_n: int) -> bool:
    """Whether splitting K helps a problem with fewer tiles than SMs.

    Unsplit, each busy SM computes one whole tile: 2*bm*bn*K FLOP at SM_FLOPS. Reading the
    operands once from HBM takes 2*batch*(m+n)*K bytes. Splitting shortens the first, not the
    second, so it pays only when the SMs are the limit; K cancels out.
    NOTES: H100, 2026-11-22 (gemm_h100_20261122_splitk_configs.log), split vs whole 128x128
    tiles: 256x4096x4096 +3%, 256x4096x14336 +36% (SM-bound by this rule); 128x8192x8192 -5%
    (HBM-bound by it).
    """
    return block_m * block_n * HBM_BYTES_PER_S > SM_FLOPS * batch * (m + n)


# Throughput of each compiled tile relative to 128x256 on one SM (H100, 2026-11-22): 128x128
# 0.76 at 2048x4096x4096 and 0.73 at 1024x4096x14336, whole waves of each
# (gemm_h100_20261122_tiles_m1024.log); 128x192 0.91-0.93 on 8192^3, 8192x12288x4096 and
# 6144x6144x4096, 2-CTA clusters for both (gemm_h100_20261122_tile192_large.log).
# Keyed (block_m, block_n, schedule); the heuristic chooses among the tiles listed here.
# The ping-pong tiles are not. On 10 shapes from 512 x 4096 x 4096 to 8192 x 28672 x 4096
# (bf16, H100, 2026-11-23, gemm_h100_20261123_pingpong.json) the best of them, 128 x 128 in
# 2-CTA clusters, ran at 0.73-0.87 of the best cooperative 128 x 256 config (532-576 vs
# 636-696 TFLOP/s on the six large shapes), 64 x 256 at 0.75-0.83 in 2-CTA clusters; only at
# 512 x 4096 x 4096 did 128 x 128 ping-pong edge past the heuristic's choice (408 vs 399).
# Against cooperative 128 x 128 itself ping-pong was within -6%..+9%
# (gemm_h100_20261123_pingpong128.json). Not profiled yet; a likely limit is the operand
# bytes each tile loads per FLOP (1.33x those of 128 x 256 for 128 x 128, 1.67x for
# 64 x 256), which an overlapped epilogue cannot buy back. They stay opt-in
# (GemmConfig(schedule="pingpong")), except ping-pong 128 x 128 for one partial wave of more
# than half the SMs (pingpong_mid_m, below).
TILE_EFFICIENCY = {(128, 256, "cooperative"): 1.0, (128, 192, "cooperative"): 0.92,
                   (128, 128, "cooperative"): 0.75}


def ranked_tiles(tiles: tuple[catalog.TileShape, ...]) -> list[catalog.TileShape]:
    """The tiles of `tiles` the heuristic weighs: those of TILE_EFFICIENCY."""
    return [t for t in tiles if (t.block_m, t.block_n, t.schedule) in TILE_EFFICIENCY]


def tile_count(m: int, n: int, batch: int, tile: catalog.TileShape) -> int:
    """How many output tiles of `tile` a batch x m x n product has."""
    return math.ceil(m / tile.block_m) * math.ceil(n / tile.block_n) * batch


def wave_cost(m: int, n: int, batch: int, tile: catalog.TileShape, num_sms: int) -> float:
    """Relative run time of whole tiles in waves: waves x tile area / the tile's efficiency.

    NOTES: it rounds a stream-K tail up to a whole wave. Tried (H200, 2026-12-02): ranking
    the tiles past a wave by their plan's busiest CTA instead (plan_cost over the tile's
    k-blocks, at this efficiency), which took 128 x 256 over 128 x 192 where the tuner had
    timed 505 against 435 us (5598 x 1024 x 28672, tune_h200_20261202_random_worst.json). It
    changed 30 of 600 random shapes; against main on 11 of them, one process, 3 reps, device
    time (ab_h200_20261202_tile_cost.json): 5598 x 1024 x 28672 1.185x, 1558 x 11008 x 3072
    1.015x, but 0.86-0.96x on six (1062 x 6600 x 14336 0.857, 709 x 7168 x 3072 0.893, 376 x
    16384 x 5120 0.902): not kept. A split tail costs more than plan_cost's fix-ups say, or
    128 x 192 runs closer to 128 x 256 there than 0.92; neither is profiled."""
    tiles = tile_count(m, n, batch, tile)
    return (math.ceil(tiles / num_sms) * tile.block_m * tile.block_n /
            TILE_EFFICIENCY[tile.block_m, tile.block_n, tile.schedule])


# Ping-pong 128 x 128 for a single wave of its tiles on more than half the SMs, up to a whole
# wave (pingpong_mid_m).
PINGPONG_WAVE = (0.5, 1.0)


def pingpong_mid_m(m: int, n: int, batch: int, tiles: tuple[catalog.TileShape, ...],
                   num_sms: int) -> catalog.TileShape | None:
    """The ping-pong 128 x 128 tile of `tiles` where its tiles fill more than half the SMs in
    one wave (at most one tile an SM), else None. (choose_config asks long_k_split_tile first:
    over a long K such a wave is split.)

    NOTES: there the cooperative choice (128 x 128 or 128 x 192, often in 2-CTA clusters) left
    time on the table: ping-pong 128 x 128 without clusters, each CTA one tile computed by one
    warpgroup, beat it on 6 of the 7 such bf16 shapes measured (72-96 tiles on 132 SMs:
    640 x 2048 x 8192 381 -> 445 TFLOP/s, 384 x 4096 x 4096 309 -> 398; 512 x 3072 x 14336 1%
    slower) and lost on 6 of the 7 shapes with 128 or more tiles and 3 of the 4 with 64 or
    fewer (H100, 2026-11-24, gemm_h100_20261124_midm_configs.json). The rule then ran against
    the build before it on 12 other shapes in that window (70-96 tiles): 0.97-1.37x, geomean 1.089
    (384 x 3328 x 6144 266 -> 363 TFLOP/s, 896 x 1280 x 8192 305 -> 350; 320 x 4096 x 6144 and
    448 x 2816 x 14336 0.97 and 0.99), i.e. 0.84x -> 0.92x XLA there; unchanged shapes in the
    same run moved 1.02-1.04x (ab_h100_20261124_pingpong_midm.json). Not profiled yet.
    The window then stopped at three quarters of the SMs. Past it, on 16 bf16 shapes of 100-128
    tiles (0.76-0.97 of a wave; H100, 2026-11-27, gemm_h100_20261127_pingpong_wave.json, the
    ping-pong config against the default, which was cooperative 128 x 128 split along K or
    paired along M there, one process, 5 reps): faster on all 16, device time
    (timing.device_time) 1.003-1.073x, geomean 1.037, chained calls 1.011-1.097x (512 x 4096 x
    4096 1.046x, 640 x 2560 x 4096 1.073x, 256 x 8192 x 4096 1.051x, 128 x 16384 x 4096 1.003x),
    where the earlier chained runs had it losing on 6 of 7 such shapes: those chained calls were
    bound by the host (timing.device_time's NOTES). So the window runs to a whole wave."""
    pingpong = next((t for t in tiles if (t.block_m, t.block_n, t.schedule) ==
                     (128, 128, "pingpong")), None)
    count = math.ceil(m / 128) * math.ceil(n / 128) * batch
    low, high = PINGPONG_WAVE
    return pingpong if pingpong and low * num_sms < count <= high * num_sms else None


# Rows off the L2 line: 128 x 256 from this fraction of a wave of its tiles (off_line_tile).
OFF_LINE_MIN_WAVE = 0.4


def off_line_tile(m: int, n: int, batch: int, tiles: tuple[catalog.TileShape, ...],
                  num_sms: int) -> catalog.TileShape | None:
    """The cooperative 128 x 256 tile of `tiles` for a product whose operands' rows both start
    off the 128-byte L2 line (pitch.rows_off_l2_line), where its tiles fill at least
    OFF_LINE_MIN_WAVE of the SMs; else None. choose_config runs it in 2-CTA clusters.

    NOTES: there every 128-byte row of a TMA box spans two L2 lines. ncu at free clocks (H100,
    2026-11-27, ncu_h100_20261127_pitch.txt): 1024 x 3072 x 4104 (a's rows 8208 bytes apart)
    made 3.46M L2 read requests against 1.59M at K = 4096, 45.4 vs 37.6 us, tensor pipes 66%
    vs 82% busy. The L2's requests, not the tensor cores, then set the pace, so the tile with
    the fewest bytes loaded per FLOP wins (128 x 256 with b multicast to a 2-CTA pair:
    1/256 + 1/256 per FLOP against 128 x 192's 1/192 + 1/256 and 128 x 128's 1/128 + 1/256)
    and wave quantisation matters less than where the tensor cores set the pace. On 9 bf16
    shapes with both operands' rows off the line (M = 640-3000,
    gemm_h100_20261127_pitch_tiles.json) 128 x 256 in 2x1 clusters was within 2% of the best
    of 128 x 256 / 192 / 128 (2x1) on each, and
    1.00-1.36x faster than the choice below (geomean 1.15x), which took 128 x 192 without
    clusters between one and two waves (2000 x 3000 x 4104 148.9 vs 110.8 us) and 128 x 128
    at 640 x 3000 x 8200 (120.0 vs 94.6); on 5 shapes chosen afterwards 1.01-1.27x (geomean
    1.13x, gemm_h100_20261127_pitch_heldout.json). That lifts these shapes from 0.49-0.78x
    XLA to 0.64-0.84x, no further: the doubled requests stay. With one operand's rows off it
    is not the better choice: 1024 x 3000 x 4096 (b's) 54.4 against the choice below's 46.7
    us, 1024 x 3072 x 4104 (a's) 54.1 against 51.9 (gemm_h100_20261127_pitch_clusters.json).
    Below OFF_LINE_MIN_WAVE (the fewest measured: 60 tiles at 640 x 3000 x 8200) the split-K
    rules decide, unmeasured there."""
    wide = next((t for t in tiles if (t.block_m, t.block_n, t.schedule) ==
                 (128, 256, "cooperative")), None)
    if wide is None:
        return None
    count = tile_count(m, n, batch, wide)
    return wide if count >= OFF_LINE_MIN_WAVE * num_sms else None


# The fewest k-blocks for which a single partial wave is split along K on the tile of
# long_k_split_tile (a k-block: the tile's block_k).
LONG_K_BLOCKS = 64
# What one more piece of a split tile costs (its fp32 partial stored, then read and summed by
# the tile's last piece), in k-blocks of that tile's work (long_k_split_tile).
SPLIT_PIECE_KBLOCKS = 5.0
# The fewest pieces per tile for which long_k_split_tile weighs a tile: fewer leave some tiles
# whole and others in two.
SPLIT_MIN_PIECES = 2


def long_k_split_tile(m: int, n: int, k: int, batch: int,
                      tiles: tuple[catalog.TileShape, ...],
                      num_sms: int) -> catalog.TileShape | None:
    """For a product whose tiles fill less than a wave over a long K (LONG_K_BLOCKS or more),
    the cooperative tile of `tiles` (TILE_EFFICIENCY's) that stream-K splits over every SM in
    the least time: its k-blocks per SM (count x k-blocks / num_sms, at the tile's
    efficiency) plus SPLIT_PIECE_KBLOCKS for each piece past the first of a tile (num_sms /
    count - 1), scaled by the tile's area. Only tiles of at most num_sms / SPLIT_MIN_PIECES
    whose split pays (split_k_pays) compete; None where none does, or K is short.

    NOTES: one partial wave over a long K was ping-pong 128 x 128 unsplit (pingpong_mid_m)
    from half a wave of its tiles, else the least wave_cost, which ranks whole waves and so
    took 128 x 128 under a wave; split over every SM, the wider tiles move fewer bytes per
    FLOP but in more pieces, each adding a partial's round trip. The tuner's device time of
    every compiled config on 24 bf16 shapes (H200, 2026-11-29: the worst ten of the seed-38
    sweep, tune_h200_20261129_worst_s38.json, and 14 drawn at M = 129-1100 under a wave of
    128 x 128, tune_h200_20261129_midm_s40.json): on the 15 of 64 k-blocks or more, time =
    work + 2.8 k-blocks per extra piece fit the unclustered split tiles (each shape left out
    in turn: its pick within 6.4% of its fastest, mean 0.7%); with pair_along_m's pairs, which
    help 128 x 128 and cost 128 x 192 2-5% there, 4.5-6 picked best (set at 5). The heuristic
    before lost 1.07-1.32x on those shapes (140 x 3072 x 11008 42.8 vs 33.9 us on 128 x 192,
    174 x 5120 x 11008 ping-pong 62.5 vs 47.5 on 128 x 256, 856 x 1280 x 11008 54.5 vs 45.9).
    Against main e4ebd37 on 14 shapes drawn after (ab_h200_20261129_long_k_split.json), device
    time 0.80-1.37x: the losses (807 x 3456 x 4608 0.80, 341 x 6185 x 13888 0.90) took
    128 x 256 where 128 x 192 filled 75-95% of a wave, split in 1.0-1.3 pieces a tile; hence
    SPLIT_MIN_PIECES, after which those 14 ran 0.97-1.37x, geomean 1.057. On 14 more drawn
    after that (ab_h200_20261129_long_k_split_heldout.json): 0.82-1.66x, geomean 1.076 (133 x
    6912 x 8448 1.66, 130 x 8128 x 7703 1.30, 174 x 5184 x 10624 1.24; 635 x 1664 x 8941 0.82,
    934 x 1594 x 4608 0.88, 231 x 3968 x 9280 0.89, 966 x 1984 x 7168 0.92). Under 64
    k-blocks the pieces cost more than the fit says (316 x 3328 x 3072: ping-pong 18.6 us,
    split 128 x 192 25.6, 128 x 256 32.5): there the earlier rules stay. The 8 shapes of
    pingpong_mid_m's own data that this rule now splits (ab_h200_20261129_long_k_split_pingpong
    .json): 0.93-1.20x, geomean 1.037 (448 x 2816 x 14336 1.20, 640 x 2048 x 8192 1.14;
    256 x 4096 x 14336 0.93, 512 x 3072 x 14336 0.95). Not measured on an H100."""
    costs = {}
    for t in ranked_tiles(tiles):
        count = tile_count(m, n, batch, t)
        k_blocks = math.ceil(k / t.block_k)
        if (k_blocks < LONG_K_BLOCKS or count > num_sms // SPLIT_MIN_PIECES
                or not split_k_pays(m, n, batch, t.block_m, t.block_n)):
            continue
        eff = TILE_EFFICIENCY[t.block_m, t.block_n, t.schedule]
        costs[t] = (count * k_blocks / num_sms / eff +
                    SPLIT_PIECE_KBLOCKS * (num_sms / count - 1)) * t.block_m * t.block_n
    return min(costs, key=costs.get) if costs else None


# Pairs along M over an odd count of M tiles leave the last pair's second CTA computing past
# M; from this many M tiles that padding is a small share of the work (pair_along_m).
PAIR_MIN_ODD_TILES_M = 16


def pair_along_m(tiles_m: int, count: int, long_k: bool, num_sms: int,
                 off_line: tuple[int, int] = (0, 0)) -> bool:
    """Whether a product of `count` tiles, `tiles_m` of them along M, runs in 2-CTA clusters
    along M (b multicast to the pair). It needs two M tiles; an odd count of fewer than
    PAIR_MIN_ODD_TILES_M leaves the last pair's second CTA computing past M, a padding that
    counts. off_line: pitch.rows_off_l2_line's (a's, b's). Where b's rows start off the L2
    line: paired, but with that padding only where they start off a sector too
    (catalog.L2_SECTOR_BYTES) and the padding does not push a single wave of tiles into a
    second. Where a's alone do, never. Else, without such padding, with two waves of tiles or
    more, or in a single wave over a K of 64 k-blocks or more (long_k) that pairs its M tiles
    evenly.

    NOTES: the multicast halves B's L2->SM traffic. The pair gained 3-33% in a single wave
    over a K of 64 k-blocks or more (768x4096x4096 on 128x192 tiles 509 vs 430 TFLOP/s,
    1000x3000x4104 384 vs 296, 256x4096x14336 461 vs 402; H100, 2026-11-22,
    gemm_h100_20261122_tile192_mid.log, gemm_h100_20261122_splitk_configs.log), lost 4% at K
    of 16-32 k-blocks, and measured slower between one and two waves (2048x4096x4096).
    b's rows off the line double b's requests, which the multicast halves again. Which
    configs won (H100, 2026-11-27, tune_h100_20261127_random.json, every compiled config timed
    interleaved): on 1470 x 1000 x 11008 (b's rows 2000 bytes) every config in a pair ran 73-76
    us, every one without 94-107; with a's rows alone off (733 x 2560 x 10000) 70.4 us unpaired,
    81-83 paired along M, 87-88 along N; 840 x 4096 x 28672 (7 M tiles of 128 x 256 in one wave:
    the last pair half past M, a CTA computing zeros beside its partner) 310 us unpaired against
    342. The rule against the one before it, one process, 5 reps, on shapes chosen after those
    (ab_h100_20261127_pairing.json; 1470 x 1000 x 11008 and 342 x 5120 x 4096 again in
    ab_h100_20261127_pairing_tail.json): b's rows off 1.21-1.34x (1002 x 2248 x 3072, 1470 x 1000
    x 11008); a's alone off 1.01-1.10x on five (1182 x 2048 x 4504, 1439 x 6144 x 10728, 3700 x
    5120 x 9096, 5683 x 2048 x 5856, 733 x 2560 x 10000), 0.996x on 1342 x 8192 x 4296; an odd
    count of M tiles in one wave 1.00-1.83x on six (342 x 5120 x 4096 1.83 and 1.67, 376 x 6144 x
    8192 1.14, 1078 x 3072 x 14336 1.00).
    Odd counts of M tiles (H200, 2026-11-28, ab_h200_20261128_pair_odd.json: every such pair
    left unpaired where the padded pairs overran one wave and there were fewer than 16 M tiles,
    against pairing them, one process, 5 reps, device time; the first three shapes from the
    tuner, tune_h200_20261128_midm.json, the other ten drawn after): two waves or more with
    b's rows on the line, unpaired 0.99-1.32x on 7 (326 x 28672 x 1536 1.32, 832 x 28672 x
    1536 1.13, 1055 x 14336 x 2560 1.13, 857 x 11008 x 3072 1.08, 778 x 12288 x 1536 0.99);
    b's rows off, unpaired 1.03-1.48x where the padding adds a wave (559 x 3000 x 3072 1.48:
    120 tiles, 144 padded; 1595 x 10000 x 1000 1.06, 1392 x 6000 x 5000 1.03) but 0.72x / 0.95x
    where it does not (1834 x 3000 x 16384: 15 M tiles over 256 k-blocks; 771 x 5000 x 1000),
    and 1.12x on 811 x 6000 x 4096 (224 tiles, 256 padded).
    Held out (H200, 2026-11-28, same method; ab_h200_20261128_pair_odd_heldout*.json: 12 bf16
    and 6 fp8 shapes drawn after, which that rule unpaired): b's rows on the line, unpaired
    0.99-1.37x on all 11 timed (1537 x 12288 x 768 1.20, fp8 292 x 28672 x 11008 1.37); b's
    rows off, where the padding added a wave: 1.57x where the unpaired tiles fit one wave
    (623 x 3000 x 1536: 120, 144 padded), else 0.81-1.11x. Then the pair wherever the padding
    did not push one wave into two (ab_h200_20261128_pairs_lean64.json, 8 bf16 shapes drawn
    after): 1.17-1.25x with b's rows 10000 bytes apart (N = 5000: 1625 x 5000 x 3000, 1596 x
    5000 x 5120, 1581 x 5000 x 6000), 0.72-0.88x with 12000 or 20000 (N = 6000, 10000). The
    split is the sector: a row 16 bytes past a sector boundary spans one more 32-byte sector
    per 128-byte box row (5 for 4), which the multicast halves; a row on a sector boundary
    spans no more than an aligned one, and its pair's padding costs as it does on the line.
    All 21 odd-count shapes above with b's rows off the line fall on the faster side of that
    split (N = 3000 and 5000 off the sector, 6000 and 10000 on it; fp8 K = 6000 off): set from
    them. fp8 per tensor, whose pairing saw no row pitch before (1565 x 8192 x 6000 with both
    rows off: 0.75x unpaired), now sees it (heuristic_config): 0.96-1.34x on 6 shapes drawn
    after (ab_h200_20261128_pairs_lean64_fp8.json), the gated unit 0.99-1.24x on 5
    (glu_* in ab_h200_20261128_pairs_lean64.json)."""
    a_off, b_off = off_line
    if tiles_m < 2 or (a_off and not b_off):
        return False
    odd = tiles_m % 2 == 1 and tiles_m < PAIR_MIN_ODD_TILES_M  # a padding that counts
    if b_off:
        if not odd:
            return True
        padded = count // tiles_m * (tiles_m + 1)
        return b_off % catalog.L2_SECTOR_BYTES != 0 and not count <= num_sms < padded
    if odd:
        return False
    return count >= 2 * num_sms or (count <= num_sms and long_k and tiles_m % 2 == 0)


def choose_config(m: int, n: int, k: int, batch: int = 1, num_sms: int = DEFAULT_NUM_SMS,
                  tiles: tuple[catalog.TileShape, ...] = catalog.TILE_SHAPES,
                  multicast: bool = True, pingpong: bool = False,
                  off_line: tuple[int, int] = (0, 0),
                  off_line_rule: bool = True, long_k_split: bool = False) -> GemmConfig:
    """The tile of `tiles` with the least wave_cost (the largest on a tie: 128x256 unless a
    narrower tile's extra parallelism outweighs its lower efficiency), split along K
    (stream_k) when there are fewer tiles than SMs only where split_k_pays.

    One partial wave of 128x256 tiles beats two of 128x128: at M = 768-1024 (96-128 large
    tiles) choosing 128x128 because the large tiles left some SMs idle ran 22-31% slower
    (gemm_h100_20261122_tiles_m1024.log); at M = 256-512 one wave of 128x128 tiles is the
    faster.

    A 2-CTA cluster along M is pair_along_m's call (its NOTES have the measurements).
    NOTES: tiles go in groups of 16 along M (GemmConfig's default). A group of 8 makes one wave of
    2-CTA clusters square and cut ncu's DRAM reads at 8192^3 from 1.54 to 1.28 GB (cuBLAS 1.20),
    yet ran 2-4% slower than 16 on all six large shapes, timed interleaved in two processes
    (H100, 2026-11-22, benchmarks/results/gemm_group_clusters_h100_20261122_*): DRAM traffic
    is not what limits these shapes. multicast=False never clusters: block-scaled fp8 (whose
    consumers, not operand traffic, set the pace) ran 785 vs 843 TFLOP/s at 8192^3 with 2-CTA
    clusters on 128 x 256 (H100, 2026-11-24, ab_h100_20261124_fp8block_order.json).
    long_k_split=True (a family's Family.long_k_split): under a wave of tiles over a long K,
    long_k_split_tile's. pingpong=True (a family's Family.pingpong_mid_m) takes ping-pong
    128 x 128 for a single wave of more than half the SMs, up to a whole one (pingpong_mid_m),
    unless b's rows are off the L2 line (that tile runs unclustered; pair_along_m) or
    long_k_split_tile has a tile.
    off_line: how many bytes past whole L2 lines a's and b's rows run
    (pitch.rows_off_l2_line; 0 on the line), which pair_along_m weighs in every family;
    off_line_rule (a family's Family.off_line_rule): both
    off take 128 x 256 in 2-CTA clusters from OFF_LINE_MIN_WAVE of a wave of its tiles
    (off_line_tile).
    """
    a_off, b_off = off_line
    wide = (off_line_tile(m, n, batch, tiles, num_sms)
            if off_line_rule and a_off and b_off else None)
    split = (long_k_split_tile(m, n, k, batch, tiles, num_sms)
             if long_k_split and wide is None else None)
    if pingpong and not b_off and split is None and (
            tile := pingpong_mid_m(m, n, batch, tiles, num_sms)) is not None:
        return GemmConfig.for_tile(tile)
    tile = wide or split or min(ranked_tiles(tiles),
                                key=lambda t: (wave_cost(m, n, batch, t, num_sms), -t.block_n))
    tiles_m = math.ceil(m / tile.block_m)
    count = tile_count(m, n, batch, tile)
    long_k = math.ceil(k / tile.block_k) >= LONG_K_BLOCKS
    cluster_m = 2 if multicast and pair_along_m(tiles_m, count, long_k, num_sms,
                                                off_line) else 1
    stream_k = catalog.SCHEDULES[tile.schedule].stream_k and (
        count >= num_sms or split_k_pays(m, n, batch, tile.block_m, tile.block_n))
    return GemmConfig.for_tile(tile, cluster_m=cluster_m, cluster_n=1, raster="m",
                               stream_k=stream_k)


# The most rows a swap-AB decode tile holds (its widest token tile): above it the product runs
# unswapped, unless its weight is narrow (swap_for_narrow_weight) or its rows fit the wide
# token tiles (swap_wide_config).
SWAP_MAX_M = max(t.block_n for t in catalog.SWAP_TILES)


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


# The most rows, and the largest weight (bytes, every batch entry's together), for which a
# product runs swapped past SWAP_MAX_M (swap_for_narrow_weight), and the largest for which a
# swapped product may take more token tiles than its rows need (swap_token_tile; weight_fits_l2):
# half the H100's 50 MB L2, so that the token tiles' rereads of the weight find it there.
SWAP_NARROW_MAX_M = 1024
SWAP_NARROW_MAX_WEIGHT_BYTES = 25_000_000
# The share of the SMs (one in this many) under which an unswapped plan's busy CTAs make a
# product past SWAP_MAX_M run swapped (swap_for_narrow_weight): half, but an eighth for the
# block-scaled product, whose swapped tile loses wherever the unswapped one fills more.
SWAP_NARROW_BUSY_SHARE = {"fp8_block": 8}
SWAP_NARROW_DEFAULT_BUSY_SHARE = 2


def can_plan() -> bool:
    """Whether the C++ planner (the compiled extension) is here. Without it (a build without
    kernels, a shadowed source tree) every op runs its XLA reference and never uses its config,
    so the rules that read a plan (swap_for_narrow_weight, swap_token_tile) are skipped."""
    from jax_hopper import _ffi  # noqa: PLC0415 (as GemmConfig.plan)
    return _ffi.has_extension()


def plan_of(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
            family: str = "matmul") -> dict:
    """The work plan the lowering would make for a `family` call with `config` on a GPU of
    `num_sms` SMs (GemmConfig.plan, the C++ gemm_plan: cluster tiles, each cut into the pieces
    of a split where config.stream_k, the family's k-block padding included). The plan depends
    on the tile, not on the dtypes or majors, so the family's first of each stands in."""
    dtype = catalog.FAMILIES[family].dtypes[0][0]
    kernel = config.kernel(family, dtype, False, False)
    cluster = config.cluster_m * config.cluster_n
    return config.plan(kernel, batch, m, n, k, num_sms * config.ctas_per_sm // cluster)


def busy_ctas(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
              family: str = "matmul") -> int:
    """The CTAs that the work plan of an unswapped `config` keeps busy on a GPU of `num_sms`
    SMs (plan_of)."""
    plan = plan_of(config, batch, m, n, k, num_sms, family)
    return plan["grid_clusters"] * config.cluster_m * config.cluster_n


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


def busiest_cta(plan: dict) -> tuple[int, int]:
    """(k-blocks, pieces) of the busiest CTA under a work `plan` (plan_of): the k-blocks of its
    waves of whole tiles and of its stream-K range, and the pieces its split tile is cut into
    (1 where nothing is split), whose partials that tile's last piece sums."""
    waves = -(-plan["dp_tiles"] // plan["grid_clusters"]) if plan["dp_tiles"] else 0
    if not plan["sk_clusters"]:
        return waves * plan["k_blocks"], 1
    quota = plan["sk_quota"] + (1 if plan["sk_extra"] else 0)
    return waves * plan["k_blocks"] + quota, -(-plan["k_blocks"] // quota)


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
# unswapped tile's 128.
SWAP_WIDE_MIN_M = 128


# The wide token tiles of every swapped family (16-bit and fp8 per tensor).
WIDE_TOKEN_TILES = catalog.SWAP_WIDE_TILES + catalog.SWAP_WIDE_TILES_FP8
# The families whose wide token tiles give way: to the narrow-weight swap wherever that
# applies (heuristic_config), and to the unswapped config where the 192-token tiles exceed one
# wave (swap_wide_config). fp8 per tensor: its unswapped and decode kernels stream twice the
# FLOPs a byte, and the wide tiles' fixed costs (the transposed store in passes, the split's
# fix-up) weigh twice as much (swap_wide_config's NOTES).
WIDE_TILES_YIELD = ("fp8",)


def swap_wide_config(family: str, batch: int, m: int, n: int, k: int,
                     num_sms: int) -> GemmConfig | None:
    """The swapped config on the wide token tiles (WIDE_TOKEN_TILES) of `family`'s
    swapped family for a product of SWAP_WIDE_MIN_M < m <= 192 rows, else None: two 96-token
    tiles in a 2-CTA cluster sharing the weight tile (cluster_n = 2: the weight multicast)
    where they take at most one tile an SM, else one 192-token tile unclustered. Unswapped,
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
    161 x 4096 x 7168 22.3 -> 16.8 us, XLA's fp8 20.4), 0.996-1.005x on the other 8."""
    tiles = [t for t in catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
             if t in WIDE_TOKEN_TILES]
    if not tiles or not SWAP_WIDE_MIN_M < m <= max(t.block_n for t in tiles):
        return None
    pair, wide = min(tiles, key=lambda t: t.block_n), max(tiles, key=lambda t: t.block_n)
    if math.ceil(m / pair.block_n) * math.ceil(n / pair.block_m) * batch <= num_sms:
        return GemmConfig.for_tile(pair, swap_ab=True, cluster_n=2)
    if family in WIDE_TILES_YIELD and (math.ceil(m / wide.block_n) * math.ceil(n / wide.block_m)
                                       * batch > num_sms):
        return None
    return GemmConfig.for_tile(wide, swap_ab=True)


# The token tiles of the mid-M swap (swap_mid_config): the swapped family's mid tiles and its
# widest token tile (families without mid tiles, fp8 among them, have none).
MID_TOKEN_TILES = catalog.SWAP_MID_TILES + (max(catalog.SWAP_WIDE_TILES, key=lambda t: t.block_n),)
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


def plan_cost(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
              family: str = "matmul") -> float:
    """The work of the busiest SM under `config`'s plan, in MACs over block_k: its CTAs' tile
    area times the busiest CTA's k-blocks (busiest_cta), plus SPLIT_PIECE_KBLOCKS for each
    other piece of its split tile."""
    k_blocks, pieces = busiest_cta(plan_of(config, batch, m, n, k, num_sms, family))
    return ((k_blocks + SPLIT_PIECE_KBLOCKS * (pieces - 1))
            * config.block_m * config.block_n * config.ctas_per_sm)


def swap_mid_config(family: str, batch: int, m: int, n: int, k: int, unswapped: GemmConfig,
                    num_sms: int, off_line: tuple[int, int] = (0, 0)) -> GemmConfig | None:
    """The swapped config on a token tile of MID_TOKEN_TILES (128, 160 or 192 tokens by 128
    weight columns) for a product of more than 192 rows over LONG_K_BLOCKS or more, where one
    of those whose tiles fit one wave costs at most SWAP_MID_MAX_COST of the `unswapped`
    config's plan cost (plan_cost: the busiest SM's work): of those, the one of least cost, the
    larger of its plan cost and L2_REQUEST_COST x its L2 read requests (swap_l2_requests; the
    narrower on a tie). Over an even count of weight tiles two share each token tile in a 2-CTA
    cluster (cluster_m = 2: the tokens multicast, which halves their L2 reads); over an odd
    count they run unclustered, then on at most SWAP_MID_MAX_SHARE_UNPAIRED of the SMs. None
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
    pair's (catalog.CLUSTER_SHAPES' NOTES)."""
    fam = catalog.FAMILIES[catalog.SWAP_FAMILIES[family]]
    tiles = [t for t in fam.tiles if t in MID_TOKEN_TILES]
    if (m <= max(t.block_n for t in WIDE_TOKEN_TILES) or not tiles
            or off_line[0] % catalog.L2_SECTOR_BYTES
            or math.ceil(k / tiles[0].block_k) < LONG_K_BLOCKS or not can_plan()):
        return None
    # The weight's columns are the swapped tile's rows, the tokens its columns.
    paired = math.ceil(n / tiles[0].block_m) % 2 == 0
    most = num_sms if paired else int(SWAP_MID_MAX_SHARE_UNPAIRED * num_sms)
    configs = [GemmConfig.for_tile(t, swap_ab=True, cluster_m=2 if paired else 1)
               for t in tiles if tile_count(n, m, batch, t) <= most]
    if not configs:
        return None
    costs = [plan_cost(c, batch, m, n, k, num_sms, family) for c in configs]
    if min(costs) > SWAP_MID_MAX_COST * plan_cost(unswapped, batch, m, n, k, num_sms, family):
        return None
    requests = [L2_REQUEST_COST * swap_l2_requests(c, batch, m, n, k, off_line) for c in configs]
    return min(zip(map(max, costs, requests), (c.block_n for c in configs), configs))[2]


def heuristic_config(family: str, a_mn_major: bool, batch: int, m: int, n: int, k: int,
                     num_sms: int = DEFAULT_NUM_SMS,
                     off_line: tuple[int, int] = (0, 0)) -> GemmConfig:
    """The heuristic's config for a `family` call on a GPU of `num_sms` SMs: swap-AB where the
    family has it, a is stored (M, K) and m <= SWAP_MAX_M (the lean tile for a small weight:
    lean_swap_tile); otherwise choose_config over the
    family's tiles, swapped after all where the product's weight is narrow
    (swap_for_narrow_weight) or its rows fit the wide token tiles better (swap_wide_config;
    where both apply, the one whose plan keeps more CTAs busy, the wide on a tie, the narrow
    for WIDE_TILES_YIELD's families), or past 192 rows where neither applies, the mid-M token
    tiles fill one wave at less cost (swap_mid_config). A swapped
    product whose weight fits in L2 takes the token tile
    of swap_token_tile (at m <= SWAP_MAX_M, no wider than the rows need). off_line: a's and b's
    rows' bytes past whole L2 lines (pitch.rows_off_l2_line), for choose_config."""
    swaps = family in catalog.SWAP_FAMILIES and not a_mn_major
    # The swapped family's decode tiles; its wide and mid-M token tiles have rules of their own
    swap_tiles = tuple(t for t in catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
                       if t in catalog.SWAP_TILES + catalog.SWAP_TILES_FP8) if swaps else ()
    if swaps and m <= SWAP_MAX_M:
        lean = lean_swap_tile(swap_tiles, family, batch, m, n, k)
        if lean is not None:
            return GemmConfig.for_tile(lean, swap_ab=True, stream_k=True)
        config = choose_swap_config(m, swap_tiles, n, batch, num_sms)
        narrower = tuple(t for t in swap_tiles
                         if t.block_n <= config.block_n and t.ctas_per_sm == 1)
        if (config.ctas_per_sm == 1 and len(narrower) > 1
                and weight_fits_l2(family, batch, n, k) and can_plan()):
            tile = swap_token_tile(narrower, batch, m, n, k, num_sms, family)
            config = GemmConfig.for_tile(tile, swap_ab=True, stream_k=True)
        return config
    fam = catalog.FAMILIES[family]
    config = choose_config(m, n, k, batch, num_sms, tiles=fam.tiles, multicast=fam.multicast,
                           pingpong=fam.pingpong_mid_m, off_line=off_line,
                           off_line_rule=fam.off_line_rule, long_k_split=fam.long_k_split)
    if not swaps:
        return config
    wide = swap_wide_config(family, batch, m, n, k, num_sms)
    if swap_for_narrow_weight(config, batch, m, n, k, num_sms, family):
        tile = swap_token_tile(swap_tiles, batch, m, n, k, num_sms, family)
        narrow = GemmConfig.for_tile(tile, swap_ab=True, stream_k=True)
        if wide is None or family in WIDE_TILES_YIELD or (
                busy_ctas(narrow, batch, m, n, k, num_sms, family)
                > busy_ctas(wide, batch, m, n, k, num_sms, family)):
            return narrow
    return wide or swap_mid_config(family, batch, m, n, k, config, num_sms, off_line) or config


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
