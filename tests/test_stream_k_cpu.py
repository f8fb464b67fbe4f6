"""The stream-K work plan the GEMM kernels follow (cuda/gemm/scheduler/stream_k_plan.h, through the
extension), and the workspace Python sizes for it. CPU only: the same C++ runs on the host here."""

import math

import pytest

from jax_hopper import GemmConfig, _ffi
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.extension  # the planner is C++, reached through the extension

MAX_SPLIT = 4  # kMaxSplit in cuda/gemm/scheduler/stream_k_plan.h: a collecting piece adds at
               # most this many others
MIN_PIECE = 32  # kMinPieceBlocks: the shortest piece of a small-M split
MIN_TAIL = 24  # kMinTailSplitBlocks: the shortest tile a split last wave cuts

# (tiles, k_blocks, resident clusters, clusters with a workspace slot)
CASES = [
    (1024, 128, 66, 66),    # 8192^3, 2-CTA clusters of 128 x 256: a 34-tile last wave (split)
    (1536, 64, 66, 66),     # 8192 x 12288 x 4096: 18 tiles in the last wave (split)
    (512, 64, 66, 66),      # 4096^3: last wave 58/66 full (whole)
    (64, 64, 132, 132),     # 256 x 4096 x 4096, 128 x 128 tiles: fewer tiles than SMs (2 pieces)
    (32, 64, 132, 132),     # the same with 128 x 256 tiles: 4 pieces each
    (3, 96, 132, 132),      # 3 tiles of 96 k-blocks: 3 pieces of 32 each
    (3, 63, 132, 132),      # too few k-blocks for two pieces of 32 (whole)
    (96, 64, 132, 132),     # 64 x 12288 x 4096: more than half a wave (whole)
    (64, 64, 132, 100),     # fewer workspace slots than two pieces per tile need (whole)
    (144, 64, 132, 132),    # 12 tiles past a wave: each in 4 pieces
    (133, 7, 132, 132),     # one tile past a wave, 7 k-blocks (whole: too short to cut)
    (140, 3, 132, 132),     # 8 tiles past a wave, 3 k-blocks (whole)
    (140, 16, 132, 132),    # 8 tiles past a wave, 16 k-blocks (whole: shorter than MIN_TAIL)
    (140, 24, 132, 132),    # 8 tiles past a wave, 24 k-blocks (split)
    (162, 25, 66, 66),      # 30 tiles past two waves of 2-CTA clusters
    (132, 64, 132, 132),    # whole waves: nothing to split
    (140, 64, 132, 4),      # few workspace slots
    (140, 64, 132, 0),      # none
    (140, 1, 132, 132),     # a single k-block cannot be split
]


def _small_m_pieces(tiles, k_blocks, clusters, slots):
    """Pieces per tile of a small-M split: the most (up to MAX_SPLIT) that divide the k-blocks
    into pieces of at least MIN_PIECE, with a cluster and a workspace slot for each."""
    return max(s for s in range(1, MAX_SPLIT + 1)
               if s == 1 or (s * tiles <= min(clusters, slots) and k_blocks % s == 0
                             and k_blocks // s >= MIN_PIECE))


def _plan(tiles, k_blocks, clusters, slots):
    return _ffi.extension().stream_k_plan(tiles, k_blocks, clusters, slots)


@pytest.mark.parametrize("tiles,k_blocks,clusters,slots", CASES)
def test_every_k_block_of_every_tile_is_computed_once(tiles, k_blocks, clusters, slots):
    plan = _plan(tiles, k_blocks, clusters, slots)
    assert 1 <= plan["grid_clusters"] <= clusters
    assert len(plan["units"]) == plan["grid_clusters"]
    seen = {}
    for c, units in enumerate(plan["units"]):
        for tile, k0, k1, _ in units:
            assert 0 <= k0 < k1 <= k_blocks, (c, tile, k0, k1)
            for kb in range(k0, k1):
                assert (tile, kb) not in seen, f"tile {tile} k-block {kb} computed twice"
                seen[tile, kb] = c
    assert len(seen) == tiles * k_blocks


@pytest.mark.parametrize("tiles,k_blocks,clusters,slots", CASES)
def test_split_tiles_meet_in_one_collector(tiles, k_blocks, clusters, slots):
    plan = _plan(tiles, k_blocks, clusters, slots)
    pieces = {}  # tile -> [(cluster, k0, k1, collects_from, position in the cluster's list)]
    for c, units in enumerate(plan["units"]):
        for i, (tile, k0, k1, frm) in enumerate(units):
            pieces.setdefault(tile, []).append((c, k0, k1, list(frm), i))
    for tile, ps in pieces.items():
        collectors = [p for p in ps if p[1] == 0]
        assert len(collectors) == 1, tile
        c, _, k1, frm, _ = collectors[0]
        publishers = sorted(p[0] for p in ps if p[1] > 0)
        # The collector adds exactly the other pieces, in cluster order, at most MAX_SPLIT.
        assert frm == publishers, (tile, frm, publishers)
        assert len(frm) <= MAX_SPLIT
        assert (k1 < k_blocks) == bool(publishers)
        for pc, _, _, _, pos in ps:
            if pc != c:
                # A publishing piece is its cluster's first stream-K unit: the only workspace
                # slot a CTA has, filled before that cluster waits on anything.
                first_sk = sum(1 for t, *_ in plan["units"][pc] if t < plan["dp_tiles"])
                assert pos == first_sk, (tile, pc)
                assert pc < plan["sk_clusters"] <= slots


@pytest.mark.parametrize("tiles,k_blocks,clusters,slots", CASES)
def test_work_is_balanced(tiles, k_blocks, clusters, slots):
    plan = _plan(tiles, k_blocks, clusters, slots)
    work = [sum(k1 - k0 for _, k0, k1, _ in units) for units in plan["units"]]
    whole_waves = math.ceil(tiles / clusters) * k_blocks  # what whole tiles alone would take
    assert max(work) <= whole_waves
    if plan["sk_clusters"]:
        # Splitting shortens the longest cluster's work to within a k-block of the mean over
        # the clusters it involves; a split last wave cuts tiles of MIN_TAIL k-blocks or more.
        assert tiles < clusters or k_blocks >= MIN_TAIL
        assert max(work) < whole_waves
        assert max(work) - min(work[:plan["sk_clusters"]]) <= 1
    else:
        # Left whole where splitting measured no gain (a last wave more than 2/3 full, tiles
        # shorter than MIN_TAIL) or cannot help (whole waves, no more clusters with a workspace
        # slot than tiles in the last wave; with no whole wave, no equal split into pieces long
        # enough).
        rest = tiles % clusters
        if tiles < clusters:
            assert _small_m_pieces(tiles, k_blocks, clusters, slots) == 1
        else:
            assert (rest == 0 or 3 * rest > 2 * clusters or k_blocks < MIN_TAIL
                    or min(slots, clusters) <= rest)


@pytest.mark.parametrize("tiles,k_blocks,clusters,slots,split", [
    (1024, 128, 66, 66, True), (144, 64, 132, 132, True), (264, 64, 132, 132, False),
    (512, 64, 66, 66, False), (64, 64, 132, 132, True), (96, 64, 132, 132, False),
    (215, 12, 132, 132, False), (140, 23, 132, 132, False), (140, 24, 132, 132, True)])
def test_which_problems_split(tiles, k_blocks, clusters, slots, split):
    plan = _plan(tiles, k_blocks, clusters, slots)
    assert (plan["sk_clusters"] > 0) == split
    assert plan["dp_tiles"] == (tiles // clusters * clusters if split else tiles)


@pytest.mark.parametrize("tiles,k_blocks,pieces", [(64, 64, 2), (32, 128, 4), (32, 80, 2),
                                                   (32, 32, 1), (40, 4096, 2), (40, 4095, 3),
                                                   (66, 64, 2), (67, 4096, 1), (20, 99, 3)])
def test_small_m_splits_every_tile_alike(tiles, k_blocks, pieces):
    """Fewer tiles than clusters: every tile in `pieces` equal pieces of at least MIN_PIECE
    k-blocks, one cluster each, and no clusters launched without work."""
    plan = _plan(tiles, k_blocks, 132, 132)
    counts = {}
    for units in plan["units"]:
        assert units, "a launched cluster without work"
        for tile, k0, k1, _ in units:
            counts[tile] = counts.get(tile, 0) + 1
            assert k1 - k0 == k_blocks // pieces
    assert sorted(set(counts.values())) == [pieces]
    assert pieces == _small_m_pieces(tiles, k_blocks, 132, 132)
    assert plan["grid_clusters"] == tiles * pieces
    assert plan["dp_tiles"] == (tiles if pieces == 1 else 0)


def _workspace(cfg, m, n, k, batch=1):
    """The workspace of the plan the lowering makes for cfg on a 132-SM GPU."""
    kernel = cfg.kernel("matmul", "bfloat16", False, True)
    resident = catalog.DEFAULT_NUM_SMS // (cfg.cluster_m * cfg.cluster_n)
    return cfg.plan(kernel, batch, m, n, k, resident)["workspace_bytes"]


def test_workspace_is_sized_per_cta_slot():
    cfg = GemmConfig()
    slot = cfg.block_m * cfg.block_n * 4   # StreamKScheduler::kSlotBytes
    # 2048 tiles on 132 SMs: a last wave of 68 split among all 132 CTAs.
    assert _workspace(cfg, 8192, 8192, 8192) == catalog.DEFAULT_NUM_SMS * slot
    # 2-CTA clusters: 1024 cluster tiles on 66, 34 left, split among all 66 clusters.
    assert _workspace(GemmConfig(cluster_m=2), 8192, 8192, 8192) == 66 * 2 * slot
    # The slots are those of the clusters the plan splits among, no more.
    plan = _plan(144, 64, catalog.DEFAULT_NUM_SMS, catalog.DEFAULT_NUM_SMS)
    assert (_workspace(GemmConfig(block_n=128, stages=6), 1536, 1536, 4096)
            == plan["sk_clusters"] * 128 * 128 * 4)
    assert _workspace(cfg, 128, 256, 128) == 0             # one tile: never split
    assert _workspace(cfg, 8192, 8192, 64) == 0            # one k-block: nothing to split
    assert _workspace(cfg, 4096, 4096, 4096) == 0          # last wave 88% full: whole
    assert _workspace(GemmConfig(stream_k=False), 8192, 8192, 8192) == 0


def test_the_lowering_plan_is_the_planner_s():
    """gemm_plan (what the lowering passes to the call) is plan_stream_k over the cluster tiles
    of the kernel, its product columns included: a glu tile covers gate and up columns."""
    cfg = GemmConfig(block_n=256, cluster_m=2)
    for family, cols in (("matmul", 4096), ("glu", 2 * 4096)):
        kernel = cfg.kernel(family, "bfloat16", False, True)
        got = cfg.plan(kernel, 1, 8192, 4096, 4096, 66)
        tiles = (8192 // 128 // 2) * (cols // 256)
        want = _plan(tiles, 64, 66, 66)
        assert {key: got[key] for key in ("grid_clusters", "dp_tiles", "sk_clusters")} == \
            {key: want[key] for key in ("grid_clusters", "dp_tiles", "sk_clusters")}


def test_stream_k_flag_is_checked():
    with pytest.raises(ValueError, match="stream_k"):
        GemmConfig(stream_k=1).validate("bfloat16", False, False)


# The last-arrival split of the swap-AB family (plan_last_arrival_split): kMaxArrivalPieces in
# stream_k_plan.h.
MAX_ARRIVAL_PIECES = 16
SWAP_MIN_PIECE = catalog.FAMILIES["matmul_swap"].min_piece_blocks

# (tiles, k_blocks, resident CTAs, pieces wanted)
ARRIVAL_CASES = [
    (32, 64, 132, 4),      # 1 x 4096 x 4096 on 128 x 16 tiles: 4 pieces of 16 fill one wave
    (32, 224, 132, 4),     # 16 x 4096 x 14336: 4 pieces of 56
    (8, 64, 132, 8),       # 1 x 1024 x 4096: at most 8 pieces of 8 k-blocks
    (5, 1000, 132, 10),    # the largest divisor of 1000 within min(16, 132 / 5, 1000 / 8)
    (112, 64, 132, 1),     # 16 x 14336 x 4096: more tiles than half the SMs, whole
    (224, 64, 132, 1),     # 1 x 28672 x 4096: whole tiles, persistent
    (32, 7, 132, 1),       # too few k-blocks for two pieces of 8
    (1, 13, 132, 1),       # 13 k-blocks: prime beyond the minimum piece, no split
]


def _arrival(tiles, k_blocks, resident):
    return _ffi.extension().last_arrival_split_plan(tiles, k_blocks, resident, SWAP_MIN_PIECE)


@pytest.mark.parametrize("tiles,k_blocks,resident,pieces", ARRIVAL_CASES)
def test_last_arrival_split_pieces_every_tile_once(tiles, k_blocks, resident, pieces):
    """The most equal pieces one wave holds (a divisor of the k-blocks, at least the minimum
    piece, at most MAX_ARRIVAL_PIECES), one per CTA: tile t's are CTAs t * pieces + [0,
    pieces), covering every k-block of the tile once. Whole tiles: plan_stream_k's persistent
    plan without a split."""
    plan = _arrival(tiles, k_blocks, resident)
    fits = [d for d in range(2, MAX_ARRIVAL_PIECES + 1)
            if k_blocks % d == 0 and tiles * d <= resident and k_blocks // d >= SWAP_MIN_PIECE]
    assert pieces == max(fits, default=1)  # the case table follows the rule
    if pieces == 1:
        whole = _plan(tiles, k_blocks, resident, 0)
        assert {k: v for k, v in plan.items() if k != "units"} == \
            {k: v for k, v in whole.items() if k != "units"}
        return
    assert plan["grid_clusters"] == len(plan["units"]) == tiles * pieces
    for c, units in enumerate(plan["units"]):
        assert len(units) == 1, (c, units)
        tile, k0, k1, _ = units[0]
        piece = c % pieces
        assert tile == c // pieces
        assert (k0, k1) == (piece * k_blocks // pieces, (piece + 1) * k_blocks // pieces)
    assert plan["sk_clusters"] == tiles * pieces


ARRIVAL_PIECE = 2  # kArrivalPieceBlocks: a split tail's cost per piece past the first

# (tiles, k_blocks, resident CTAs, pad_k_blocks, pieces wanted): past whole waves
TAIL_CASES = [
    (142, 85, 132, True, 5),     # 300 x 8996 x 5408 on 192 tokens: 10 tiles, 5 pieces of 17
    (157, 64, 132, False, 4),    # 25 tiles past a wave: 4 pieces of 16 (5 would not divide)
    (133, 64, 132, False, 4),    # one tile: 4 pieces of 16 as cheap as 8 of 8, the fewer
    (416, 46, 132, True, 4),     # three waves and 20 tiles: 4 pieces of 12 (K padded to 48)
    (416, 46, 132, False, 2),    # the same unpadded: 2 pieces of 23
    (140, 89, 132, True, 6),     # a prime count: 6 pieces of 15 (one k-block of zeros)
    (213, 85, 132, True, 1),     # 81 tiles past a wave: no two pieces each fit (whole)
    (1568, 9, 132, True, 1),     # 9 k-blocks: too short to cut (whole)
    (264, 64, 132, True, 1),     # whole waves: nothing to split
    (140, 16, 132, True, 1),     # shorter than MIN_TAIL (whole)
]


def _tail_cost(waves, k_blocks, pieces, padded):
    return waves * padded + padded // pieces + ARRIVAL_PIECE * (pieces - 1)


@pytest.mark.parametrize("tiles,k_blocks,resident,pad,pieces", TAIL_CASES)
def test_split_tail_cuts_the_last_wave_in_equal_pieces(tiles, k_blocks, resident, pad, pieces):
    """A kernel that splits its tail (plan_split_tail: the odd-weight tiles) keeps whole waves
    whole and cuts each tile of the last partial wave into `pieces` equal pieces, one per CTA
    after its whole tiles (CTA c: tile waves x resident + c // pieces, piece c % pieces),
    every k-block of every tile once; where no split beats whole tiles, the plan is the
    kernel's without one. The pieces are the cheapest by the plan's cost (the case table
    follows it)."""
    plan = _ffi.extension().last_arrival_split_plan(tiles, k_blocks, resident, SWAP_MIN_PIECE,
                                                    pad_k_blocks=pad, split_tail=True)
    plain = _ffi.extension().last_arrival_split_plan(tiles, k_blocks, resident, SWAP_MIN_PIECE,
                                                     pad_k_blocks=pad)
    if pieces == 1:
        assert plan == plain
        return
    waves, rest = divmod(tiles, resident)
    padded = plan["k_blocks"]
    assert padded % pieces == 0 and 0 <= padded - k_blocks < pieces and (pad or padded == k_blocks)
    assert _tail_cost(waves, k_blocks, pieces, padded) < (waves + 1) * k_blocks
    assert plan["grid_clusters"] == resident and plan["dp_tiles"] == waves * resident
    assert plan["sk_clusters"] == rest * pieces <= resident and plan["sk_extra"] == 0
    seen = set()
    for c, units in enumerate(plan["units"]):
        whole = [u for u in units if (u[1], u[2]) == (0, padded)]
        assert [u[0] for u in whole] == list(range(c, waves * resident, resident))
        split = units[len(whole):]
        assert len(split) == (1 if c < rest * pieces else 0), (c, units)
        for tile, k0, k1, _ in split:
            assert tile == waves * resident + c // pieces
            assert (k0, k1) == (c % pieces * padded // pieces, (c % pieces + 1) * padded // pieces)
        for tile, k0, k1, _ in units:
            seen.update((tile, kb) for kb in range(k0, k1))
    assert len(seen) == tiles * padded


def test_only_the_odd_weight_kernels_split_their_tail():
    """The lowering's plan of a swapped config past a wave: the odd-weight kernel (matmul_swap_odd)
    splits its last partial wave, the swap-AB kernel of the same token width on an aligned
    weight keeps it whole: 61 rows on 64 tokens against 17001 (odd) or 17000 columns (133
    weight tiles), K = 5408 (85 k-blocks: the last tile in 5 pieces of 17)."""
    from jax_hopper.gemm import heuristics, pitch
    odd = next(t for t in catalog.SWAP_ODD_TILES if t.block_n == 64)
    plan = heuristics.odd_plan_of(odd, 1, 61, 17001, 5408, 132)
    assert (plan["dp_tiles"], plan["sk_clusters"], plan["sk_quota"]) == (132, 5, 17)
    cfg = GemmConfig.for_tile(pitch.shifted_config_tile("matmul", odd), swap_ab=True,
                              stream_k=True)
    kernel = cfg.kernel("matmul", "bfloat16", False, False)
    aligned = cfg.plan(kernel, 1, 61, 17000, 5408, 132)
    assert (aligned["dp_tiles"], aligned["sk_clusters"]) == (133, 0)


def test_swap_configs_plan_the_last_arrival_split():
    """The swap-AB kernels take plan_last_arrival_split (the lowering's gemm_plan), its workspace
    a slot per piece; stream_k=False keeps whole tiles on a persistent grid."""
    cfg = GemmConfig(block_m=128, block_n=16, stages=10, swap_ab=True)
    kernel = cfg.kernel("matmul", "bfloat16", False, False)
    got = cfg.plan(kernel, 1, 1, 4096, 4096, 132)  # (M, N, K) = (1, 4096, 4096)
    want = _arrival(32, 64, 132)
    assert {k: got[k] for k in ("grid_clusters", "dp_tiles", "sk_clusters", "sk_quota")} == \
        {k: want[k] for k in ("grid_clusters", "dp_tiles", "sk_clusters", "sk_quota")}
    assert got["workspace_bytes"] == 32 * 4 * 128 * 16 * 4
    whole = GemmConfig(block_m=128, block_n=16, stages=10, swap_ab=True, stream_k=False)
    got = whole.plan(kernel, 1, 1, 28672, 4096, 132)
    assert (got["grid_clusters"], got["sk_clusters"], got["workspace_bytes"]) == (132, 0, 0)


def _padded_split(tiles, k_blocks, clusters, max_split, min_piece):
    """A padding kernel's small-M split (pad_k_blocks): as many pieces as fit (clusters, the
    most pieces, the shortest piece), each ceil(k_blocks / that) long, and as few pieces as
    give that length; (pieces, padded k-blocks)."""
    split = min(clusters // tiles, max_split, k_blocks // min_piece)
    if split <= 1:
        return 1, k_blocks
    piece = -(-k_blocks // split)
    split = -(-k_blocks // piece)
    return split, split * piece


# (tiles, k_blocks, resident clusters, the most pieces): collector splits (MAX_SPLIT) and
# last-arrival ones (MAX_ARRIVAL_PIECES).
PADDED_CASES = [
    (8, 157, 132, MAX_SPLIT),       # 54 x 1024 x 10000: prime, 4 pieces of 40 (3 of zeros)
    (8, 157, 132, 16),              # the same, last-arrival: 16 of 10
    (32, 64, 132, MAX_SPLIT),       # a divisor gives the length: nothing padded
    (20, 99, 132, MAX_SPLIT),       # 3 pieces of 33, exact
    (13, 101, 132, MAX_SPLIT),      # 3 pieces (101 // 32) of 34: one k-block of zeros
    (1, 257, 132, 16),              # 16 pieces of 17 (15 of zeros, the most a plan adds)
    (3, 63, 132, MAX_SPLIT),        # too short for two pieces of 32: whole
    (67, 4099, 132, MAX_SPLIT),     # more than half a wave of tiles: whole
]


@pytest.mark.parametrize("tiles,k_blocks,clusters,max_split", PADDED_CASES)
def test_padded_split_covers_k_in_equal_pieces(tiles, k_blocks, clusters, max_split):
    """Where the mainloop reads k-blocks past K as zeros, a small-M split rounds the k-blocks up
    to a multiple of its pieces: every tile in equal pieces over [0, padded), each k-block
    once, fewer than `pieces` of them zeros; with no padding needed, the unpadded plan."""
    if max_split == MAX_SPLIT:
        plan = _ffi.extension().stream_k_plan(tiles, k_blocks, clusters, clusters,
                                              pad_k_blocks=True)
        plain = _plan(tiles, k_blocks, clusters, clusters)
        min_piece = MIN_PIECE
    else:
        plan = _ffi.extension().last_arrival_split_plan(tiles, k_blocks, clusters,
                                                        SWAP_MIN_PIECE, pad_k_blocks=True)
        plain = _arrival(tiles, k_blocks, clusters)
        min_piece = SWAP_MIN_PIECE
    pieces, padded = _padded_split(tiles, k_blocks, clusters, max_split, min_piece)
    assert plan["k_blocks"] == padded and padded - k_blocks < pieces
    if padded == k_blocks:
        assert plan == plain
    seen = {}
    for units in plan["units"]:
        for tile, k0, k1, _ in units:
            assert k1 - k0 == padded // pieces
            for kb in range(k0, k1):
                assert (tile, kb) not in seen
                seen[tile, kb] = True
    assert len(seen) == tiles * padded
    assert plan["grid_clusters"] == (tiles * pieces if pieces > 1 else min(tiles, clusters))


def test_only_padding_kernels_get_padded_plans():
    """The lowering's plan pads K for a mainloop that reads past K as zeros (bf16, per-tensor
    fp8) and never for the block-scaled one (a scale per k-block): 54 x 1024 x 10000, 157
    k-blocks of 64 (79 of 128)."""
    cfg = GemmConfig(block_n=128, stages=6)
    kernel = cfg.kernel("matmul", "bfloat16", False, False)
    assert cfg.plan(kernel, 1, 54, 1024, 10000, 132)["k_blocks"] == 160
    for family, want in (("fp8", 80), ("fp8_block", 79)):
        fp8 = GemmConfig.for_tile(catalog.FAMILIES[family].tiles[0])
        kernel = fp8.kernel(family, "float8_e4m3fn", False, False)
        assert fp8.plan(kernel, 1, 54, 1024, 10000, 132)["k_blocks"] == want, family
