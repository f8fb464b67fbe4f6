"""The dense families' unswapped tile, cluster and split (choose_config): whole-wave cost,
ping-pong for one partial wave, the off-line tile, the long-K split and 2-CTA pairing."""

from __future__ import annotations

import math
from typing import NamedTuple

from jax_hopper.kernels import catalog
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
# long_k_split_tile (a k-block: the tile's block_k): past 64, so K = 4096 in bf16 stays with
# the earlier rules (long_k_split_tile's NOTES).
LONG_K_BLOCKS = 65
# What one more piece of a split tile costs (its fp32 partial stored, then read and summed by
# the tile's last piece), in k-blocks of that tile's work (long_k_split_tile).
SPLIT_PIECE_KBLOCKS = 5.0
# The fewest pieces per tile for which long_k_split_tile weighs a tile: fewer leave some tiles
# whole and others in two.
SPLIT_MIN_PIECES = 2
# The widest tile of long_k_split_tile that pair_along_m's single-wave long-K pairs still take
# (dense_choice): wider split tiles run unpaired where b's rows are on the L2 line.
SPLIT_PAIR_MAX_BLOCK_N = 128


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
    256 x 4096 x 14336 0.93, 512 x 3072 x 14336 0.95). On an H100 (2026-12-06, the tuner,
    tune_h100_20261206_long_k.json) the split tiles of 192 and 256 columns ran 1.02-1.07x
    faster unpaired than in pair_along_m's long-K pairs (241 x 6144 x 4096 29.7 vs 31.8 us,
    512 x 3072 x 14336 76.5 vs 78.0), as on the H200 reports (1.01-1.04x); 128 x 128 split and
    unpaired against 53cd17b (ab_h100_20261206_long_k_unpaired.json, 18 shapes drawn for it,
    6 per tile, device time): 192 and 256 columns 1.015-1.061x on all 12 (760 x 2560 x 6144
    1.061, 418 x 1536 x 12288 1.059, 962 x 1536 x 7936 1.054), 128 x 128 0.873-1.030x (the
    five of 1024 columns 0.873-0.986: 428 x 1024 x 14336 32.7 -> 37.5 us): hence
    SPLIT_PAIR_MAX_BLOCK_N. The tile choice itself still loses there on the H100 (241 x 6144
    x 4096: unsplit ping-pong 128 x 128 25.2 us against the split 128 x 192's 29.7; 256 x
    4096 x 14336: 128 x 128 51.2 against 128 x 192's 56.8). At exactly 64 k-blocks the H100
    reports favoured the earlier rules (512 x 4096 x 4096: ping-pong 128 x 128 25.9 us against
    the split's 28.7; 256 x 4096 x 4096 1.07x behind): LONG_K_BLOCKS 64 -> 65 scored 1.025 ->
    1.018x the best over the H100's 35 timed problems and changed no H200 problem's choice
    (heuristic_regret.py --set). Against main 10774c9 on 14 shapes of K = 4096 drawn after it
    (M 129-1100) and 256-1024 x 4096 x 4096 (H100, 2026-12-08, 5 reps, device time,
    ab_h100_20261208_long_k_65_heldout.json): 0.944-1.170x, geomean 1.050 (654 x 2560 x 4096
    32.3 -> 27.6 us, 527 x 2560 x 4096 1.119; 941 x 2560 x 4096 0.944, the swapped 160-token
    pair given up for the unswapped 128 x 192)."""
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
# M; from this many M tiles that padding (1 / tiles_m of the work) is no more than what the
# pair gains (pair_along_m).
PAIR_MIN_ODD_TILES_M = 32
# Two waves of tiles or more run in pairs (b's rows on the L2 line) from this many k-blocks of
# a tile (pair_along_m's deep_k).
PAIR_WAVES_MIN_K_BLOCKS = 40


def pair_along_m(tiles_m: int, count: int, long_k: bool, num_sms: int,
                 off_line: tuple[int, int] = (0, 0), *, deep_k: bool) -> bool:
    """Whether a product of `count` tiles, `tiles_m` of them along M, runs in 2-CTA clusters
    along M (b multicast to the pair). It needs two M tiles; an odd count of fewer than
    PAIR_MIN_ODD_TILES_M leaves the last pair's second CTA computing past M, a padding that
    counts. off_line: pitch.rows_off_l2_line's (a's, b's). Where b's rows start off the L2
    line: paired, but with that padding only where they start off a sector too
    (catalog.L2_SECTOR_BYTES) and the padding does not push a single wave of tiles into a
    second. Where a's alone do, never. Else, without such padding, with two waves of tiles or
    more over a K of PAIR_WAVES_MIN_K_BLOCKS k-blocks or more (deep_k), or in a single wave
    over a K of LONG_K_BLOCKS k-blocks or more (long_k) that pairs its M tiles evenly.

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
    (glu_* in ab_h200_20261128_pairs_lean64.json).
    Two waves or more of cooperative 128 x 256 tiles, b's rows on the line, paired against
    unpaired (H100, 2026-12-07, one process, 5 reps, device time;
    gemm_h100_20261207_short_k_sk.json, gemm_h100_20261207_pair_by_k.json): unpaired as fast or
    faster on 14 of 16 shapes of 8-64 k-blocks, 1.000-1.035x (4096 x 4096 x 512 1.035, 4096 x
    4096 x 1024 1.026, 8192 x 4096 x 512 1.025, 6144 x 6144 x 4096 1.019; 0.989x on two of 32),
    paired faster at 128 (4096 x 4096 x 8192 1.019x, 8192^3 1.016x). Pairs from 128 k-blocks,
    against main on 14 bf16 and 4 fp8 shapes drawn for it
    (ab_h100_20261207_pair_by_k_heldout.json): 1.009-1.089x on 8 of the 10 under 40 k-blocks
    (3968 x 8704 x 2432 1.089, 9488 x 2880 x 1728 1.057, 2624 x 6528 x 1728 1.055; 4704 x 11520
    x 2176 0.996, 2104 x 8576 x 320 on 128 x 192 0.991), 0.958-0.996x on the five of 44-85 (1768
    x 5760 x 4288 0.958, fp8 5848 x 3968 x 10624 0.981): hence 40. Set there, on 12 bf16 and 4
    fp8 shapes drawn after (ab_h100_20261207_pair_40kb_heldout.json): bf16 0.986-1.052x, geomean
    1.018 (5152 x 11456 x 2176 1.052, 6952 x 9024 x 640 1.045, 3760 x 3712 x 1920 1.041; 4408 x
    5376 x 2240 0.986, 10904 x 10240 x 384 0.989), fp8 0.998-1.013x; 1768 x 5760 x 4288, left
    paired, 1.001x; the gated unit (hopper_glu, ab_h100_20261207_pair_40kb_glu.json)
    0.994-1.013x on 4 shapes, its kept control 1.031x. By reading, not profiled: the pair ties
    two CTAs' rings together at every tile's start and end, which a short K meets often, while
    its multicast, which halves b's L2 reads, pays over a long one.
    Odd counts of 17-63 M tiles, two waves or more over 40 k-blocks or more, b's rows on the
    line (H100, 2026-12-07, one process, 5 reps, device time): never pairing them against
    pairing from 16 M tiles, on 14 bf16 shapes drawn for it
    (ab_h100_20261207_pair_odd_heldout.json): 17-31 M tiles 0.990-1.227x (2656 x 4800 x 8000
    1.227, 2888 x 11648 x 3840 1.094, 3952 x 9792 x 3264 1.092), 33-53 0.948-1.033x (6776 x
    2176 x 3776 0.948, 4920 x 2944 x 6464 0.965), fp8 per tensor 1.043-1.052x, the gated unit
    1.015-1.043x, the control 1.015x: the padding's 1 / tiles_m against the pair's few
    percent, hence PAIR_MIN_ODD_TILES_M = 32 (was 16). Set there, against main a9708c3 on 12
    bf16 shapes of 17-31 M tiles drawn after (ab_h100_20261207_pair_odd32_heldout.json):
    0.922-1.231x, geomean 1.060 (2416 x 5184 x 7296 1.231, 3336 x 3648 x 3584 1.132; 2064 x
    6784 x 4416 0.922 and 2120 x 6336 x 5184 0.985, both of 17 M tiles), fp8 per tensor
    1.018-1.040x, the gated unit 1.002x, the two unchanged controls 0.980x and 1.019x. The
    same constant moves 17-31 odd M tiles with b's rows off the line but on a sector from
    paired to unpaired (where such pairs lost above); not measured there.
    """
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
    return ((count >= 2 * num_sms and deep_k) or
            (count <= num_sms and long_k and tiles_m % 2 == 0))


class Choice(NamedTuple):
    """A config and the rule that picked it: the name of the function (a module attribute of
    jax_hopper.gemm.heuristics) whose NOTES hold that rule's measurements."""
    config: GemmConfig
    rule: str


def choose_config(m: int, n: int, k: int, batch: int = 1, num_sms: int = DEFAULT_NUM_SMS,
                  tiles: tuple[catalog.TileShape, ...] = catalog.TILE_SHAPES,
                  multicast: bool = True, pingpong: bool = False,
                  off_line: tuple[int, int] = (0, 0),
                  off_line_rule: bool = True, long_k_split: bool = False) -> GemmConfig:
    """The unswapped config for a problem: dense_choice's (its docstring has the rules and
    their NOTES)."""
    return dense_choice(m, n, k, batch, num_sms, tiles, multicast, pingpong, off_line,
                        off_line_rule, long_k_split).config


def dense_choice(m: int, n: int, k: int, batch: int = 1, num_sms: int = DEFAULT_NUM_SMS,
                 tiles: tuple[catalog.TileShape, ...] = catalog.TILE_SHAPES,
                 multicast: bool = True, pingpong: bool = False,
                 off_line: tuple[int, int] = (0, 0),
                 off_line_rule: bool = True, long_k_split: bool = False) -> Choice:
    """The unswapped config (choose_config) and its rule: off_line_tile, long_k_split_tile,
    pingpong_mid_m or wave_cost. The tile of `tiles` with the least wave_cost (the largest on
    a tie: 128x256 unless a narrower tile's extra parallelism outweighs its lower efficiency),
    split along K (stream_k) when there are fewer tiles than SMs only where split_k_pays.

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
        return Choice(GemmConfig.for_tile(tile), "pingpong_mid_m")
    tile = wide or split or min(ranked_tiles(tiles),
                                key=lambda t: (wave_cost(m, n, batch, t, num_sms), -t.block_n))
    rule = "off_line_tile" if wide else "long_k_split_tile" if split else "wave_cost"
    tiles_m = math.ceil(m / tile.block_m)
    count = tile_count(m, n, batch, tile)
    # A split tile wider than SPLIT_PAIR_MAX_BLOCK_N runs unpaired unless b's rows are off
    # the L2 line (long_k_split_tile's NOTES).
    k_blocks = math.ceil(k / tile.block_k)
    long_k = (k_blocks >= LONG_K_BLOCKS
              and (split is None or tile.block_n <= SPLIT_PAIR_MAX_BLOCK_N))
    cluster_m = 2 if multicast and pair_along_m(
        tiles_m, count, long_k, num_sms, off_line,
        deep_k=k_blocks >= PAIR_WAVES_MIN_K_BLOCKS) else 1
    stream_k = catalog.SCHEDULES[tile.schedule].stream_k and (
        count >= num_sms or split_k_pays(m, n, batch, tile.block_m, tile.block_n))
    return Choice(GemmConfig.for_tile(tile, cluster_m=cluster_m, cluster_n=1, raster="m",
                                      stream_k=stream_k), rule)
