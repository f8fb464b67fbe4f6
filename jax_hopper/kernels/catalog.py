"""The catalog of compiled GEMM kernels and the numbers Python and C++ share.

One source of truth: CMake runs codegen.py, which writes from this file the C++ instance table,
the kernels' translation units and a constants header (dtype and activation codes, kernel
families, the shared-memory limit) that the kernels and the FFI handlers include. Python reads
the same numbers from here, and a test checks the built extension reports exactly these kernels.
Pure Python with no package imports, so the build can run it before anything is installed.

A kernel is composed of three policies (cuda/gemm/kernel.cuh): a tile scheduler, a mainloop
(how a k-block is loaded and multiplied) and an epilogue (what happens to the accumulators),
run under a consumer schedule (cooperative or ping-pong, SCHEDULES). A *family* names one
mainloop and one epilogue; adding a family is a policy file plus an entry in FAMILIES
(docs/architecture.md, "Adding a kernel family").
"""

from __future__ import annotations

import dataclasses
import itertools

# An SM's shared memory on sm_90 (228 KB), of which each resident CTA takes SMEM_RESERVED_BYTES
# for the system: a kernel resident `ctas_per_sm` times over fits ctas_per_sm x (its bytes +
# reserved), and one CTA opts in to the rest, SMEM_LIMIT_BYTES (227 KB); kernels static_assert
# against both.
SMEM_PER_SM_BYTES = 228 * 1024
SMEM_RESERVED_BYTES = 1024
SMEM_LIMIT_BYTES = SMEM_PER_SM_BYTES - SMEM_RESERVED_BYTES
# TMA addresses a global array's rows only when they start a multiple of this many bytes apart.
TMA_PITCH_BYTES = 16
# A 16-bit MN-major operand whose pitch TMA cannot address is staged through the view of this
# many of its rows side by side, whose pitch it can (cuda/gemm/mainloop/ss_shifted.cuh): 8 rows
# of any width are a multiple of 16 bytes.
INTERLEAVE_ROWS = 8
# An L2 cache line: a TMA box row of 128 bytes (the 128B swizzle's) whose array rows start off a
# multiple of it spans two lines, two L2 requests instead of one (heuristics.off_line_tile).
L2_LINE_BYTES = 128
# What L2 moves: a line's 32-byte sectors. Rows that start off a line but on a sector boundary
# still span as many sectors as aligned ones; rows off a sector span one more per box row
# (heuristics.pair_along_m).
L2_SECTOR_BYTES = 32
# The L2 of an H100 SXM or H200 (50 MB): a weight past it streams from HBM again for each tile
# that rereads it at another time (heuristics.SWAP_NARROW_MAX_WEIGHT_BYTES, its half).
L2_BYTES = 50_000_000
# H100 SXM and H200: the heuristic's SM count when no device is at hand (tracing on a CPU).
DEFAULT_NUM_SMS = 132
# The grouped GEMM's tile table: int32 fields per M tile (first row, rows, group) after one
# header entry (the tiles in use); cuda/gemm/scheduler/grouped.cuh reads it,
# jax_hopper/gemm/ragged_tiles.py writes it.
GROUP_TILE_FIELDS = 3


@dataclasses.dataclass(frozen=True)
class DTypeInfo:
    code: int      # the C++ enum value (DType in the generated constants header)
    nbytes: int
    cpp: str       # enumerator name
    short: str     # in kernel names


DTYPES = {
    "bfloat16": DTypeInfo(0, 2, "kBF16", "bf16"),
    "float16": DTypeInfo(1, 2, "kF16", "f16"),
    "float32": DTypeInfo(2, 4, "kF32", "f32"),
    "float8_e4m3fn": DTypeInfo(3, 1, "kE4M3", "e4m3"),
    "float8_e5m2": DTypeInfo(4, 1, "kE5M2", "e5m2"),
}
# The 16-bit families' inputs (a and b of one type).
INPUT_DTYPES = ("bfloat16", "float16")
OUTPUT_DTYPES = ("bfloat16", "float16", "float32")
# fp8 inputs and the (a, b) pairs the fp8 family multiplies: e4m3 both (forward), e5m2 with
# e4m3 either way (gradients in e5m2 times weights or activations in e4m3).
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
FP8_PAIRS = (("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn"),
             ("float8_e4m3fn", "float8_e5m2"))
# fp8's largest finite values (saturating casts).
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# Block scaling (the fp8_block family): one scale per row of a and FP8_SCALE_BLOCK elements of K,
# one per FP8_SCALE_BLOCK x FP8_SCALE_BLOCK block of b (cuda/gemm/mainloop/scaling.cuh).
FP8_SCALE_BLOCK = 128
# quantize_fp8 (cuda/quantize/): how each copy is scaled, by code: one scale per tensor, per row
# and FP8_SCALE_BLOCK columns (the a operand's layout), per FP8_SCALE_BLOCK-square tile (b's).
QUANT_MODES = ("tensor", "row", "tile")
# The absolute maximum a scale is computed from is clamped to [FP8_MIN_AMAX, FP8_MAX_AMAX] (an
# infinite or NaN one stays as it is): an all-zero block gets a finite scale, and 1 / amax stays
# a normal float32 (no flush to zero on either side). Finite values above 2^126 saturate.
FP8_MIN_AMAX = 2.0 ** -100
FP8_MAX_AMAX = 2.0 ** 126

# Epilogue activations: the name users pass, and the C++ enumerator; the code is the position.
ACTIVATIONS = ((None, "kNone"), ("relu", "kRelu"), ("gelu_tanh", "kGeluTanh"),
               ("gelu", "kGeluErf"), ("silu", "kSilu"))
ACTIVATION_CODES = {name: code for code, (name, _) in enumerate(ACTIVATIONS)}


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How the consumer warpgroups share the tiles (cuda/gemm/schedule/)."""
    cpp: str               # the C++ schedule type; the GemmSchedule enumerator is k<cpp>
    tile_warpgroups: int   # consumer warpgroups per tile (the mainloop's TILE_WARPGROUPS)
    scheduler: str         # the tile scheduler it runs with (cuda/gemm/scheduler/)
    stream_k: bool         # whether that scheduler can split tiles (GemmConfig.stream_k)
    suffix: str            # of tile tags and kernel names


# cooperative: both warpgroups on every tile, 64 rows each; stream-K splits the last wave.
# pingpong: alternate tiles, whole tiles each, one warpgroup's epilogue under the other's
# mainloop; a warpgroup then holds the whole tile's accumulators (128 x BN / 128 threads), so
# only BN <= 128 fits its registers, and with the stream-K fix-up inlined as well the kernel
# spilled (28 bytes, CUDA 13.0): ping-pong computes whole tiles (PersistentScheduler).
# lean: one warpgroup that loads its own k-blocks, no producer warpgroup: 64-row tiles of a
# small CTA, several to an SM (the swap-AB lean tiles, SWAP_TILES).
SCHEDULES = {
    "cooperative": Schedule("CooperativeSchedule", 2, "StreamKScheduler<{bm}, {bn}>", True, ""),
    "pingpong": Schedule("PingPongSchedule", 1, "PersistentScheduler<{bm}, {bn}>", False, "_pp"),
    "lean": Schedule("LeanSchedule", 1, "StreamKScheduler<{bm}, {bn}>", True, "_lean"),
}


# The scheduler of a last_arrival_split family's splitting tiles (Family.last_arrival_split).
LAST_ARRIVAL_SCHEDULER = "LastArrivalSplitScheduler<{bm}, {bn}>"


@dataclasses.dataclass(frozen=True)
class TileShape:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    schedule: str = "cooperative"
    # CTAs resident on one SM at once: 2 halves each CTA's registers (launch bounds) and
    # shared memory (the ring's stages), so that a second CTA streams beside the first.
    ctas_per_sm: int = 1

    @property
    def tag(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_s{self.stages}"
                f"{SCHEDULES[self.schedule].suffix}"
                f"{'' if self.ctas_per_sm == 1 else f'_occ{self.ctas_per_sm}'}")


# 128 x 256 (two consumer warpgroups of m64n256) is the large-problem tile; 128 x 192 and
# 128 x 128 give 4/3 and twice the tiles for problems whose large tiles would leave SMs idle
# (the heuristic weighs waves against each tile's speed). Ping-pong: 128 x 128 (two m64n128
# wgmmas per k16 step, each reading B) and 64 x 256 (one m64n256: the shared-memory reads per
# FLOP of cooperative 128 x 256). Stages fill the 227 KB budget (each kernel's static_assert
# checks the sum of its policies' shared memory against the limit).
# NOTES: cuBLAS runs mid-M shapes (512 x 4096 x 4096) on nvjet_sm90_tst_256x64 in 2-CTA
# clusters along N with no split, its tensor pipes busy 84% against our 66%
# (ncu_h100_20261125_fixed_cost.txt). A cooperative TileShape(256, 64, 64, 4) here (5 stages
# exceed 227 KB; two 64-row slices per warpgroup, each m64n64, which needed the cooperative
# schedule to store each slice as ping-pong does) passed test_every_config but ran 0.37-0.87x
# XLA on 14 mid-M shapes against the default's 0.62-1.10x (H100, 2026-11-25): narrow wgmmas
# again (see ss_promoted.cuh's NOTES). Not kept. The product swapped on a 64 x 256 tile (64
# weight columns as wgmma's M, 256 tokens as its N: one m64n256 per k16 step; matmul_swap,
# ping-pong, the transposed store in four 64-row passes) was correct (test_swap_ab_gpu: 109
# passed) but slower still: 0.41-0.93x XLA on 17 shapes of M = 128-1024 against the default's
# 0.65-1.03x, no better in 2-CTA clusters sharing the token tile (H100, 2026-11-25,
# gemm_h100_20261125_swapwide.*; the code, on a local branch, did not outlive that session).
# Likely cause, not profiled: with one tile per CTA (one wave) a ping-pong CTA computes on one
# warpgroup while the other has none. Not kept. Ping-pong 128 x 160, cuBLAS's tile at short K
# (branch pingpong-160: b's MN-major tile in three whole boxes, 64-byte output boxes; 4 and 5
# stages) passed its GPU tests but its best config ran 0.78-0.97x cooperative 128 x 256 on 7
# shapes of K = 256-4096, worst at long K (H100, 2026-12-07, gemm_h100_20261207_pp160.json): one
# warpgroup's m64n160 wgmmas at a time, as ping-pong 128 x 128. Not kept.
TILE_SHAPES = (TileShape(128, 256, 64, 4), TileShape(128, 192, 64, 4),
               TileShape(128, 128, 64, 6), TileShape(128, 128, 64, 6, "pingpong"),
               TileShape(64, 256, 64, 4, "pingpong"))
# (A MN-major, B MN-major): A as (M,K) is K-major, as (K,M) MN-major; B as (N,K) is K-major,
# as (K,N) MN-major.
OPERAND_MAJORS = tuple(itertools.product((False, True), repeat=2))
# (cluster_m, cluster_n). NOTES: 4-CTA clusters ((4, 1), (1, 4); a scratch patch raising the
# launcher's resident-cluster table to 4) were correct on every matmul tile but no rule: on 7
# shapes with rows off the L2 line, 128 x 256 in 4x1 against 2x1 ran 0.91-1.09x (1500 x 3000 x
# 2056 1.09, 2000 x 3000 x 4104 1.06, 4000 x 3000 x 2056 0.91), 1x4 up to 1.09x on one (1200 x
# 4000 x 3000); on aligned shapes 0.73-0.87x (1024 x 4096 x 4096 459 vs 610 TFLOP/s, 8192^3
# 613 vs 705) (H100, 2026-11-27, gemm_h100_20261127_cluster4.json). Not compiled: each shape
# would add to every family's instances for gains the tuner alone could pick. Swapped, on the
# mid-M token tiles of 128 and 160 (the tokens multicast to 4 weight tiles; a scratch build,
# H200, 2026-11-29, gemm_h200_20261129_midm_cluster4.json / _pitch / _offline): 0.79-1.19x the
# 2x1 pair on 13 shapes, 1.10-1.19x on 4 of one wave with the weight's rows off the 128-byte
# line (792 x 3000 x 14336 120.6 -> 106.0 us; cuBLAS's nvjet 128x160 in 4x1: 96.5), 0.79-0.80x
# on 2 (640 x 4096 x 8192, 553 x 2000 x 14880), level on the weight's rows on the line: no rule.
# 2 x 2 clusters (a scratch build: A multicast along each cluster row, B along each column, so
# each CTA loads half of each operand tile and the L2 reads of a one-wave mid-M product fall by
# a third against 2 x 1; H200, 2026-12-02, gemm_h200_20261202_quad.json): faster than the best
# 2-CTA config on 1 of 6 mid-M shapes (2000 x 3000 x 4104 on 128 x 256, 80.0 vs 84.4 us), 0.5-0.9x
# on the rest (the 160-token tile at 792 x 3000 x 14336 137.9 against 4 x 1's 106.1): L2 bytes are
# not what paces these tiles. On an H200 30 clusters of 4 fit at once (66 of 2). Not kept: the
# build also ran the 128 x 128 swap-AB tile 0.91x in 1x1 (ab_h200_20261202_quad_tileshare.json,
# unexplained) for gains the tuner alone could pick.
CLUSTER_SHAPES = ((1, 1), (2, 1), (1, 2))
RASTERS = ("m", "n")
SWIZZLES = ("128B",)


@dataclasses.dataclass(frozen=True)
class Family:
    """A GEMM kernel family: the policies it composes and the shapes it is compiled for.

    mainloop, epilogue: C++ templates (cuda/gemm/); `{...}` fields are filled per instance
    (dtype, bm, bn, bk, stages, tile_wgs, a_mn, b_mn). The tile scheduler comes with the
    tile's schedule (SCHEDULES) unless the family names its own (`scheduler`, which then
    computes whole tiles: stream_k False).
    """
    name: str
    cpp: str                       # GemmFamily enumerator
    mainloop: str
    epilogue: str
    tiles: tuple[TileShape, ...]
    majors: tuple[tuple[bool, bool], ...]
    suffix: str                    # of kernel names
    what: str                      # in messages: "... is not compiled for <what>"
    scheduler: str | None = None   # C++ tile scheduler, instead of the schedule's
    clusters: tuple[tuple[int, int], ...] = CLUSTER_SHAPES  # (cluster_m, cluster_n) it runs
    # (a, b) input dtypes it is compiled for
    dtypes: tuple[tuple[str, str], ...] = tuple((d, d) for d in INPUT_DTYPES)
    # Whether the default config may use 2-CTA clusters (heuristics.choose_config's multicast)
    multicast: bool = True
    # Grouped families: whether the default config pairs its 128-row tiles in 2-CTA clusters
    # along N, as it does the 64-row decode tile (heuristics.choose_grouped_config's NOTES: it
    # pays on fp8, not on 16-bit operands)
    pairs_128_row_tiles: bool = False
    # Whether the default config takes ping-pong 128 x 128 for one partial wave of more than half
    # the SMs (heuristics.pingpong_mid_m; measured for bf16 matmul only)
    pingpong_mid_m: bool = False
    # Whether the default config takes 128 x 256 tiles in 2-CTA clusters where both operands'
    # rows start off the 128-byte L2 line (heuristics.off_line_tile; measured for bf16 matmul
    # only; the 2-CTA pairing weighs the row pitches in every family)
    off_line_rule: bool = False
    # Whether the default config splits one partial wave over a long K on the tile whose
    # pieces cost the least (heuristics.long_k_split_tile; measured for bf16 matmul only)
    long_k_split: bool = False
    # The shortest piece of a small-M split in k-blocks; None: kMinPieceBlocks
    # (cuda/gemm/scheduler/stream_k_plan.h)
    min_piece_blocks: int | None = None
    # Whether its cooperative tiles split on LastArrivalSplitScheduler (equal pieces, the last
    # to finish sums them: plan_last_arrival_split) instead of the schedule's stream-K
    last_arrival_split: bool = False
    # Whether those tiles also split the last partial wave past whole ones (plan_split_tail)
    split_tail: bool = False
    # Tiles that split on the schedule's own stream-K all the same and run every cluster shape
    # of CLUSTER_SHAPES (the last-arrival split runs clusters of one CTA)
    clustered_tiles: tuple[TileShape, ...] = ()

    @property
    def stream_k(self) -> bool:
        """Whether this family's kernels can split tiles (with a stream-K schedule)."""
        return self.scheduler is None

    def tile_clusters(self, tile: TileShape) -> tuple[tuple[int, int], ...]:
        """The (cluster_m, cluster_n) shapes `tile` runs in this family."""
        return CLUSTER_SHAPES if tile in self.clustered_tiles else self.clusters

    def last_arrival_tile(self, tile: TileShape) -> bool:
        """Whether `tile` splits on LastArrivalSplitScheduler in this family."""
        return (self.last_arrival_split and SCHEDULES[tile.schedule].stream_k
                and tile not in self.clustered_tiles)


_SS16 = ("MainloopSS<DType::{a_dtype}, DType::{b_dtype}, {bm}, {bn}, {bk}, {stages}, "
         "{tile_wgs}, OperandLoad<{a_mn}, {a_bytes}>, {b_load}, NoScaling>")
# The same with B a plain tile (no gated loader), and that with fp8's per-tensor scales.
_SS = _SS16.replace("{b_load}", "OperandLoad<{b_mn}, {b_bytes}>")
_SS_TENSOR_SCALED = _SS.replace("NoScaling", "TensorScaling")
# Block-scaled fp8 (BlockScaling): each 128-wide k-block's product scaled and added in fp32;
# swapped (SwappedBlockScaling), the kernel's A is the weight scaled per 128 x 128 block and
# its B the tokens scaled per row.
_SS_PROMOTED = ("MainloopSSPromoted<DType::{a_dtype}, DType::{b_dtype}, {bm}, {bn}, {bk}, "
                "{stages}, {tile_wgs}, OperandLoad<{a_mn}, {a_bytes}>, "
                "OperandLoad<{b_mn}, {b_bytes}>, BlockScaling>")
_SS_PROMOTED_SWAPPED = _SS_PROMOTED.replace("BlockScaling>", "SwappedBlockScaling>")

# The swap-AB tiles (hopper_matmul at small M, GemmConfig.swap_ab): 128 weight columns (two
# consumer warpgroups of 64 wgmma rows) by 16, 32 or 64 tokens (wgmma's N). The operand ring
# holds mostly weight bytes, as deep as the 227 KB allow: 10, 9 and 8 stages. The narrower two
# also two CTAs to an SM (ctas_per_sm=2: half the shared memory each, 4 and 3 stages next to the
# epilogue's 32 KB, and 80 registers a thread), so that a partial wave of weight streams is
# shared by every SM's second CTA; 128 x 64 spills (1.5 KB) at 80 registers.
# NOTES: small CTAs of the same policies (one consumer warpgroup on 64 weight columns, 64 x 16
# and 64 x 32, three to an SM: a "single" schedule on branch next/single-wg, its GPU tests
# passed) ran 0.95-1.08x the default's device time on 7 decode shapes (1 x 4096 x 4096 17.1
# vs 16.3 us, 32 x 1024 x 4096 8.9 vs 9.6; XLA 13.8 and 6.6; H100, 2026-11-28,
# gemm_h100_20261128_single_wg.json): more CTAs to an SM do not shorten a short call; not
# compiled. One warpgroup that feeds itself (the lean schedule: no producer warpgroup, 64
# weight columns, four CTAs to an SM beside one warpgroup's staging, a transposed strip of 4 KB)
# shortened the tiny calls (64 x 256 x 64 2.6 vs 3.3 us, 32 x 1024 x 4096 9.1 vs 9.7, with 3
# stages) but streamed large weights slower (1 x 4096 x 4096 17.1 vs 16.3;
# gemm_h100_20261128_lean_schedule.json). Then, device time on an H200 (2026-11-28,
# gemm_h200_20261128_lean_apart.json; XLA / default / lean 64 x 16 s3 / s5 / 64 x 32 s3 /
# s5 with the split summed apart by a second kernel, branch next/lean-apart): 24 x 2048 x 2048
# 5.6 / 8.5 / 8.4 / 7.8 / 8.6 / 7.9 us, 32 x 1024 x 4096 5.8 / 8.8 / 8.7 / 7.8 / 9.2 / 7.8,
# 64 x 256 x 64 1.2 / 3.3 / 2.6 / 2.7 / 2.6 / 2.6, but 1 x 4096 x 4096 10.5 / 13.3 / 13.7 /
# 13.9 / 15.4 / 13.8 and 8 x 4096 x 14336 29.1 / 32.8 / 33.5 / 33.8 / 34.8 / 33.5. ncu at 1 x
# 4096 x 4096 (probe_h200_20261128_lean_apart.txt): 47% of the DRAM peak for the default and
# the lean tiles alike; summed apart the GEMM ran 12.7 us at 55% and its reduction 4.2 more.
# More bytes in flight (5 stages: 160 KB an SM) do not speed a large weight's stream, nor
# does a tail without the last arrival's sum; a standalone probe of the same tile reached 9.6
# us there (10.6 with its reduction). (Those lean tiles waited on the previous k-block's
# wgmmas, which ptxas serialised; since 2026-12-07 the k-loop is kept rolled and the previous
# k-block's wgmmas are waited for: 1.00-1.055x device time on 13 decode cases, H100,
# ab_h100_20261207_candidates.json; MainloopSS::mma_self_fed.) Kept: the 5-stage lean tile,
# which the heuristic takes for short weight streams (heuristics.lean_swap_tile), bf16 and fp8
# per tensor: on 15 fp8 calls of 1-32 rows the rule takes, 1.07-1.12x the device time of the
# one-CTA swap tiles (geomean 1.096; 1.03x chained; H200, 2026-11-28,
# ab_h200_20261128_lean_fp8.json), still 0.67-1.02x XLA's fp8 there.
# Tried: pieces of 16 k-blocks at least instead of the family's 8 (as the probe streamed best):
# 0.79-1.05x the device time on 8 bf16 short calls, geomean 0.915 (fewer CTAs where K is short;
# ab_h200_20261128_lean_pieces.json); forced on the long streams it gained 1.05x on 4096 x 4096
# weights and lost on 14336 x 4096 ones, still 1.13-1.43x XLA's time: not kept.
SWAP_TILES = (TileShape(128, 16, 64, 10), TileShape(128, 32, 64, 9), TileShape(128, 64, 64, 8),
              TileShape(128, 16, 64, 4, ctas_per_sm=2), TileShape(128, 32, 64, 3, ctas_per_sm=2),
              TileShape(64, 16, 64, 5, "lean", ctas_per_sm=4))
# The same for fp8: a k-block is 128 one-byte elements, so each stage holds the same bytes.
SWAP_TILES_FP8 = tuple(dataclasses.replace(t, block_k=128) for t in SWAP_TILES)
# The wide token tiles (hopper_matmul swapped past the decode tiles, heuristics.swap_wide_config):
# 128 weight columns by 96 or 192 tokens, stages filling the 227 KB. At M = 129-192 an
# unswapped product pads its rows to two 128-row tiles (50-75% of them used), the swapped one
# to 192 tokens (67-100%): one tile of 192, or two of 96. Unlike the decode tiles they split on
# the cooperative schedule's stream-K and run in 2-CTA clusters (Family.clustered_tiles): two
# weight tiles multicasting their token tile (cluster_m = 2), or two token tiles their weight
# tile (cluster_n = 2), as cuBLAS runs such shapes (nvjet_sm90_tst_128x184_..._4x1 on 181 x
# 14336 x 10000, 128x72_..._1x2 on 130 x 8192 x 8192; H200, 2026-11-29). Their strips are
# stored transposed in passes of 64 or 48 output rows (TmaStoreEpilogue::store_transposed).
SWAP_WIDE_TILES = (TileShape(128, 96, 64, 7), TileShape(128, 192, 64, 4))
# Token tiles between them for mid M past 192 rows (bf16/f16; heuristics.swap_mid_config).
# cuBLAS runs that band swapped with the token width picked so that the rows fill whole token
# tiles and the tiles fill the SMs (792 x 3000 x 14336: 24 x 5 tiles of 128 weight columns by
# 160 tokens; docs/benchmarks.md, "Past M = 192").
# NOTES: 256 weight columns by 64, 72 or 96 tokens (cuBLAS's nvjet 256x72 fills all 132 SMs on
# 792 x 3072 x 14336) ran slower than these on all 7 mid shapes tried, in every cluster shape
# and on either schedule: on that tiling our tensor pipes were 66% busy against nvjet's 91.6%,
# our consumers waiting on full stages with 1.7x its L2 sector lookups for the same bytes
# (H200, 2026-12-02; docs/benchmarks.md, "256 weight columns a tile"). Not kept. nvjet's few
# lookups come from its order (neighbouring CTAs share the weight block); ordered so (raster 'n'),
# a 256 x 72 tile looked up as few and ran 1.12x faster at 4 stages (124.6 -> 111.4 us), 109.4 at 5,
# against the default's 97.1 and XLA's 91.3, its tensor pipes 63% busy (H200, 2026-12-03, branch
# w256, gemm_h200_20261203_w256.log): the narrow wgmmas' consumer, not the loads, then limits it.
# Both consumer warpgroups over the whole tile on alternate k-blocks, their partial sums added
# before the store (a guess at how nvjet keeps 256 x 72 busy; schedule 'kinterleaved', branch
# w256) ran slower still: 110.1 against 108.1 us, tensor pipes 64% busy, and the 128 x 160 on it
# 0.95x the default (H200, 2026-12-03, gemm_h200_20261203_w256_kinterleaved.log). Not kept.
SWAP_MID_TILES = (TileShape(128, 128, 64, 6), TileShape(128, 160, 64, 5))
# The swapped tiles for a weight stored (K, N) whose rows TMA cannot address (N not a multiple
# of 8; matmul_swap_odd): each stage stages the weight's k-block as 136-column boxes (17 KB for
# 128 columns) and each consumer warpgroup keeps two 8 KB scratch boxes in the region its
# epilogue stages through (cuda/gemm/kernel.cuh), so the 64- and 128-token tiles fit one stage
# fewer than the aligned ones. The decode tiles' token widths, and two wider ones past them
# (128 and 192 tokens) that shift each weight k-block once for more tokens: every shift costs
# the consumers the same shared-memory traffic, whatever the token width.
SWAP_ODD_TILES = (TileShape(128, 16, 64, 10), TileShape(128, 32, 64, 9),
                  TileShape(128, 64, 64, 7), TileShape(128, 128, 64, 5),
                  TileShape(128, 192, 64, 4))
# The same for fp8 per tensor (fp8_swap): 128-element k-blocks, the same bytes a stage.
SWAP_WIDE_TILES_FP8 = tuple(dataclasses.replace(t, block_k=128) for t in SWAP_WIDE_TILES)

FAMILIES = {
    # hopper_matmul: any operand majors, linear epilogue (alpha, bias, activation, residual).
    "matmul": Family("matmul", "kMatmul", _SS,
                     "TmaStoreEpilogue<{bn}, LinearOps>", TILE_SHAPES,
                     OPERAND_MAJORS, "", "hopper_matmul", pingpong_mid_m=True,
                     off_line_rule=True, long_k_split=True),
    # hopper_matmul computed swapped, out^T = op(b)^T op(a)^T (GemmConfig.swap_ab): the kernel's
    # A is the weight b (its N as the tile's rows, either major) and its B the tokens a (M, K),
    # K-major (a 16- to 64-row box); the epilogue stores each strip transposed
    # (TransposedOutput) with the bias per tile row. Decode: a few tokens against a large
    # weight, where a 64-row wgmma over the tokens would waste most of each MMA. Nothing to
    # multicast (one token tile); splits are weight streams, worth making short, summed by
    # whichever piece finishes last (LastArrivalSplitScheduler: nothing waits).
    # NOTES (H100, 2026-11-28): 2-CTA clusters along N (two token tiles of one weight tile, the
    # weight multicast; a branch whose GPU tests passed) beat the same tile unclustered on 4 of
    # 7 narrow-weight shapes (963 x 1024 x 3072 27.5 vs 31.8 us on the device) but the default
    # config on one only (200 x 1000 x 3072 13.3 vs 14.0; gemm_h100_20261128_swap_clusters.json,
    # fp8 per tensor: never): not compiled. Pieces of 4 k-blocks at least (min_piece_blocks)
    # instead of 8: device time 0.9995x over 18 decode and narrow shapes, whose token tiles
    # already fill the wave (ab_h100_20261128_pieces4.json).
    "matmul_swap": Family("matmul_swap", "kMatmulSwap",
                          _SS,
                          "TmaStoreEpilogue<{bn}, LinearOps, TransposedOutput>",
                          SWAP_TILES + SWAP_WIDE_TILES + SWAP_MID_TILES,
                          ((False, False), (True, False)), "_swap",
                          "the swap-AB GEMM (GemmConfig.swap_ab)", clusters=((1, 1),),
                          multicast=False, min_piece_blocks=8, last_arrival_split=True,
                          clustered_tiles=SWAP_WIDE_TILES + SWAP_MID_TILES),
    # hopper_matmul swapped, up to heuristics.ODD_WEIGHT_MAX_M rows, on a weight stored (K, N)
    # with N not a multiple of 8 (a vocabulary of 50257): the weight's k-blocks staged through
    # a view TMA can address and shifted into place by the consumers (MainloopSSShifted),
    # instead of a padded copy of the weight at every call (jax_hopper/gemm/pitch.py,
    # shifted_weight_tile). Past a wave its last partial wave's tiles split in pieces
    # (split_tail): the shift and the wgmmas, not the weight's HBM stream, pace its tiles.
    "matmul_swap_odd": Family("matmul_swap_odd", "kMatmulSwapOdd",
                              "MainloopSSShifted<DType::{a_dtype}, {bm}, {bn}, {bk}, {stages}, "
                              "{tile_wgs}, OperandLoad<{b_mn}, {b_bytes}>>",
                              "TmaStoreEpilogue<{bn}, LinearOps, TransposedOutput>",
                              SWAP_ODD_TILES, ((True, False),), "_swap_odd",
                              "the swap-AB GEMM on a weight of odd pitch", clusters=((1, 1),),
                              multicast=False, min_piece_blocks=8, last_arrival_split=True,
                              split_tail=True),
    # hopper_glu: x (M, K) K-major, the (K, 2, F) weight MN-major and loaded as gate and up
    # columns side by side (GatedWeightLoad); the epilogue writes act(gate) * up, half the
    # tile's width, so only tiles whose half width is whole 64-column boxes.
    "glu": Family("glu", "kGlu", _SS16.replace("{b_load}", "GatedWeightLoad"),
                  "TmaStoreEpilogue<{bn}, GatedOps>",
                  tuple(t for t in TILE_SHAPES if t.block_n % 128 == 0), ((False, True),),
                  "_glu", "the gated unit"),
    # hopper_ragged_dot: lhs (M, K) K-major, rhs (G, K, N) (MN-major) or (G, N, K); the tiles
    # follow the groups' rows (GroupedScheduler) and store only their group's rows
    # (GroupedOutput). 64 x 256 ping-pong for a few rows per group (decode), 128-row tiles
    # otherwise. Clusters along N share lhs; along M a group's weights (a paired tile table).
    "grouped": Family("grouped", "kGrouped", _SS,
                      "TmaStoreEpilogue<{bn}, LinearOps, GroupedOutput>",
                      (TileShape(128, 256, 64, 4), TileShape(128, 128, 64, 6, "pingpong"),
                       TileShape(64, 256, 64, 4, "pingpong")),
                      ((False, False), (False, True)), "_grouped", "the grouped GEMM",
                      scheduler="GroupedScheduler<{bm}, {bn}>",
                      clusters=((1, 1), (1, 2), (2, 1))),
    # hopper_ragged_glu: the grouped GEMM with each expert's gated weight (K, 2, F), loaded
    # and paired as hopper_glu's (GatedWeightLoad with the expert as batch entry, GatedOps),
    # storing its group's rows (GroupedOutput).
    "grouped_glu": Family(
        "grouped_glu", "kGroupedGlu", _SS16.replace("{b_load}", "GatedWeightLoad"),
        "TmaStoreEpilogue<{bn}, GatedOps, GroupedOutput>",
        (TileShape(128, 256, 64, 4), TileShape(64, 256, 64, 4, "pingpong")), ((False, True),),
        "_grouped_glu", "the grouped GLU", scheduler="GroupedScheduler<{bm}, {bn}>",
        clusters=((1, 1), (1, 2))),
    # hopper_ragged_fp8_dot: the grouped GEMM on fp8 operands, lhs (M, K) and rhs (G, N, K)
    # both K-major (fp8 wgmma has no transpose), a float32 scale for lhs and one for rhs or one
    # per expert (TensorScaling reads it by the tile's group); the grouped tiles with a k-block
    # of 128 fp8 elements (the same bytes per stage as the 16-bit ones).
    "grouped_fp8": Family("grouped_fp8", "kGroupedFp8", _SS_TENSOR_SCALED,
                          "TmaStoreEpilogue<{bn}, LinearOps, GroupedOutput>",
                          (TileShape(128, 256, 128, 4), TileShape(64, 256, 128, 4, "pingpong")),
                          ((False, False),), "_grouped_fp8", "the grouped fp8 GEMM",
                          scheduler="GroupedScheduler<{bm}, {bn}>",
                          clusters=((1, 1), (1, 2), (2, 1)), dtypes=FP8_PAIRS,
                          pairs_128_row_tiles=True),
    # hopper_ragged_fp8_dot with block scales (DeepSeek-V3's MoE recipe, DeepGEMM's grouped
    # "contiguous" layout): lhs (M, K) with one scale per row and 128-wide k-block, rhs
    # (G, N, K) with one per expert and 128 x 128 block (BlockScaling, the expert as the batch
    # entry); the block-scaled fp8 mainloop under the grouped scheduler and store. No clusters,
    # as fp8_block (where they ran within -4..+2% of none).
    "grouped_fp8_block": Family(
        "grouped_fp8_block", "kGroupedFp8Block", _SS_PROMOTED,
        "TmaStoreEpilogue<{bn}, LinearOps, GroupedOutput>",
        (TileShape(128, 256, 128, 4), TileShape(64, 256, 128, 4, "pingpong")),
        ((False, False),), "_grouped_fp8_block", "the block-scaled grouped fp8 GEMM",
        scheduler="GroupedScheduler<{bm}, {bn}>", clusters=((1, 1),),
        dtypes=(("float8_e4m3fn", "float8_e4m3fn"),), multicast=False),
    # hopper_ragged_contract (hopper_ragged_dot's weight gradient): out[g] = x_g^T y_g, the
    # groups splitting the contracted rows of x (R, P) and y (R, Q), both read MN-major; one
    # output entry per group (GroupedContractionScheduler), the plain linear epilogue.
    "grouped_contraction": Family(
        "grouped_contraction", "kGroupedContraction",
        _SS, "TmaStoreEpilogue<{bn}, LinearOps>",
        (TileShape(128, 256, 64, 4), TileShape(128, 128, 64, 6, "pingpong")), ((True, True),),
        "_contract", "the grouped contraction",
        scheduler="GroupedContractionScheduler<{bm}, {bn}, {bk}>"),
    # hopper_ragged_fp8_contract (fp8_ragged_dot's weight gradient): the grouped contraction on
    # fp8 operands, which wgmma reads K-major only: x^T (P, R) and y^T (Q, R), the contracted
    # rows R last (quantize_fp8's transposed copies), a k-block 128 of them. TMA's innermost
    # coordinate must be whole 16 bytes, so a group's blocks start at its first row rounded
    # down to 16 (the scheduler's K_ALIGN); the first block's columns before the group and the
    # last one's past it are zeroed in shared memory (MainloopSS::clear_k_columns). One
    # float32 scale per operand (TensorScaling). The bf16 contraction's tile and clusters:
    # ping-pong 128 x 128 s6 and 64 x 256 s4 (whose overlapped epilogue could pay on k-loops
    # half as long as in 16 bits) were slower in every cluster, choose_contraction_config's NOTES.
    "grouped_contraction_fp8": Family(
        "grouped_contraction_fp8", "kGroupedContractionFp8",
        _SS_TENSOR_SCALED, "TmaStoreEpilogue<{bn}, LinearOps>", (TileShape(128, 256, 128, 4),),
        ((False, False),), "_contract_fp8", "the grouped fp8 contraction",
        scheduler=f"GroupedContractionScheduler<{{bm}}, {{bn}}, {{bk}}, {TMA_PITCH_BYTES}>",
        dtypes=FP8_PAIRS),
    # hopper_ragged_fp8_contract with block scales (fp8_ragged_dot's block-recipe weight
    # gradient): x^T scaled per row and 128 of its M columns, y^T per 128 x 128 block
    # (BlockScaling, the fp8_block layout), each k-block's product scaled and added in fp32
    # (MainloopSSPromoted). A k-block must be one scale block, so each group's blocks start at
    # its first row rounded down to 128 (K_ALIGN = FP8_SCALE_BLOCK), the head and tail zeroed.
    "grouped_contraction_fp8_block": Family(
        "grouped_contraction_fp8_block", "kGroupedContractionFp8Block",
        _SS_PROMOTED, "TmaStoreEpilogue<{bn}, LinearOps>", (TileShape(128, 256, 128, 4),),
        ((False, False),), "_contract_fp8_block", "the block-scaled grouped fp8 contraction",
        scheduler=f"GroupedContractionScheduler<{{bm}}, {{bn}}, {{bk}}, {FP8_SCALE_BLOCK}>",
        dtypes=(("float8_e4m3fn", "float8_e4m3fn"),), clusters=((1, 1),), multicast=False),
    # hopper_fp8_matmul: fp8 operands, both K-major (fp8 wgmma has no transpose), one float32
    # scale per tensor applied to the accumulators (TensorScaling), the linear epilogue. A
    # k-block is 128 fp8 elements (one 128-byte swizzle row), so the ring holds the same bytes
    # as the 16-bit tiles'.
    "fp8": Family(
        "fp8", "kFp8",
        _SS_TENSOR_SCALED,
        "TmaStoreEpilogue<{bn}, LinearOps>",
        (TileShape(128, 256, 128, 4), TileShape(128, 128, 128, 6),
         TileShape(128, 128, 128, 6, "pingpong")),
        ((False, False),), "_fp8", "the fp8 GEMM", dtypes=FP8_PAIRS),
    # hopper_fp8_matmul per tensor, computed swapped (GemmConfig.swap_ab) as matmul_swap is:
    # the kernel's A is the weight b (N, K) and its B the tokens a (M, K), both K-major as fp8
    # wgmma needs; decode against fp8 weights is a weight stream. The instance's dtypes are
    # the kernel's (b's, then a's); FP8_PAIRS holds every pair both ways round. The wide token
    # tiles split on the cooperative stream-K and run 2-CTA clusters, as matmul_swap's do.
    "fp8_swap": Family(
        "fp8_swap", "kFp8Swap",
        _SS_TENSOR_SCALED,
        "TmaStoreEpilogue<{bn}, LinearOps, TransposedOutput>",
        SWAP_TILES_FP8 + SWAP_WIDE_TILES_FP8,
        ((False, False),), "_fp8_swap", "the swap-AB fp8 GEMM (GemmConfig.swap_ab)",
        dtypes=FP8_PAIRS, clusters=((1, 1),), multicast=False, min_piece_blocks=8,
        last_arrival_split=True, clustered_tiles=SWAP_WIDE_TILES_FP8),
    # hopper_fp8_matmul with block scales (DeepSeek-V3's recipe: a (M, K/128), b (N/128, K/128)
    # float32): each 128-wide k-block's product scaled and added in fp32 (MainloopSSPromoted,
    # BlockScaling), in 64 x 64 units through two register buffers, so a 128 x 256 tile's
    # warpgroup holds 128 + 2 x 32 accumulators. e4m3 both ways: the recipe quantizes
    # gradients to e4m3 as well.
    "fp8_block": Family(
        "fp8_block", "kFp8Block", _SS_PROMOTED, "TmaStoreEpilogue<{bn}, LinearOps>",
        (TileShape(128, 256, 128, 4), TileShape(128, 128, 128, 6),
         TileShape(128, 128, 128, 6, "pingpong")),
        ((False, False),), "_fp8_block", "the block-scaled fp8 GEMM",
        dtypes=(("float8_e4m3fn", "float8_e4m3fn"),),
        multicast=False),  # slower with clusters (heuristics.choose_config's NOTES)
    # hopper_fp8_matmul with block scales, computed swapped (GemmConfig.swap_ab) as fp8_swap
    # is: the kernel's A is the weight b (N, K) with its 128 x 128 block scales, its B the
    # tokens a (M, K) with theirs per row (SwappedBlockScaling), each k-block promoted as in
    # fp8_block; a token tile is one unit wide. The one-CTA-per-SM swap tiles: the promoted
    # consumer keeps 232 registers, more than two CTAs to an SM leave it.
    "fp8_block_swap": Family(
        "fp8_block_swap", "kFp8BlockSwap", _SS_PROMOTED_SWAPPED,
        "TmaStoreEpilogue<{bn}, LinearOps, TransposedOutput>",
        tuple(t for t in SWAP_TILES_FP8 if t.ctas_per_sm == 1), ((False, False),),
        "_fp8_block_swap", "the swap-AB block-scaled fp8 GEMM (GemmConfig.swap_ab)",
        dtypes=(("float8_e4m3fn", "float8_e4m3fn"),), clusters=((1, 1),), multicast=False,
        min_piece_blocks=8, last_arrival_split=True),
}

# The family that runs a family's product swapped (GemmConfig.swap_ab).
SWAP_FAMILIES = {"matmul": "matmul_swap", "fp8": "fp8_swap", "fp8_block": "fp8_block_swap"}
# The families whose tiles follow group sizes on the device: the grouped products (M rows over
# G groups, one weight per group) and the contractions (out (G, P, Q), the groups splitting the
# contracted rows). Their problems are keyed with G where the dense ones have the batch
# (jax_hopper/gemm/tuned.py).
GROUPED_FAMILIES = ("grouped", "grouped_glu", "grouped_fp8", "grouped_fp8_block")
CONTRACTION_FAMILIES = ("grouped_contraction", "grouped_contraction_fp8",
                        "grouped_contraction_fp8_block")


@dataclasses.dataclass(frozen=True)
class KernelInstance:
    family: str
    dtype: str          # a's input dtype
    tile: TileShape
    a_mn_major: bool
    b_mn_major: bool
    b_dtype: str = ""   # b's input dtype; "" when it is a's

    def __post_init__(self):
        if self.b_dtype == self.dtype:  # one spelling per instance (hashing, lookups)
            object.__setattr__(self, "b_dtype", "")

    @property
    def dtypes(self) -> tuple[str, str]:
        return self.dtype, self.b_dtype or self.dtype

    @property
    def name(self) -> str:
        """The key the FFI handler looks the kernel up by (and its SASS function's name part)."""
        majors = ("m" if self.a_mn_major else "k") + ("n" if self.b_mn_major else "k")
        types = DTYPES[self.dtype].short + (f"x{DTYPES[self.b_dtype].short}" if self.b_dtype
                                            else "")
        return f"sm90_gemm_{types}_{self.tile.tag}_{majors}{FAMILIES[self.family].suffix}"

    def policies(self) -> dict[str, str]:
        """The family's C++ policy types for this instance, and its schedule's."""
        fam, t = FAMILIES[self.family], self.tile
        sched = SCHEDULES[t.schedule]
        a_type, b_type = (DTYPES[d] for d in self.dtypes)
        fields = dict(a_dtype=a_type.cpp, b_dtype=b_type.cpp, a_bytes=a_type.nbytes,
                      b_bytes=b_type.nbytes, bm=t.block_m, bn=t.block_n, bk=t.block_k,
                      stages=t.stages, tile_wgs=sched.tile_warpgroups,
                      a_mn=str(self.a_mn_major).lower(), b_mn=str(self.b_mn_major).lower())
        scheduler = fam.scheduler or (
            LAST_ARRIVAL_SCHEDULER if fam.last_arrival_tile(t) else sched.scheduler)
        return dict(mainloop=fam.mainloop.format(**fields), epilogue=fam.epilogue.format(**fields),
                    scheduler=scheduler.format(**fields), schedule=sched.cpp)


def compiled_instances() -> tuple[KernelInstance, ...]:
    return tuple(KernelInstance(fam.name, da, t, am, bm, db) for fam in FAMILIES.values()
                 for da, db in fam.dtypes for t in fam.tiles for am, bm in fam.majors)


def instance(family: str, dtype: str, tile: TileShape, a_mn_major: bool,
             b_mn_major: bool, b_dtype: str = "") -> KernelInstance | None:
    """The compiled instance with these properties (b_dtype: "" when it is dtype), or None."""
    want = KernelInstance(family, dtype, tile, a_mn_major, b_mn_major, b_dtype)
    return want if want in _COMPILED else None


_COMPILED = frozenset(compiled_instances())
