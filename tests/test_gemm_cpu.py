"""hopper_matmul without a GPU: validation, heuristic, compiled set, and the reference lowering
(which must equal jnp.matmul's semantics so user code runs anywhere)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import REL_FROB_BOUND, random_operand, reference64, rel_frob
from jax_hopper import GemmConfig, _ffi, hopper_matmul
from jax_hopper.gemm import pitch
from jax_hopper.kernels import catalog
from jax_hopper.gemm.heuristics import (DEFAULT_NUM_SMS, ODD_WEIGHT_MAX_M, SWAP_MAX_M,
                                        choose_config, heuristic_config, long_k_split_tile,
                                        odd_weight_config, pair_along_m,
                                        swap_for_narrow_weight)

CPU = jax.devices("cpu")[0]


def on_cpu(*xs):
    return [jax.device_put(x, CPU) for x in xs]


# ---------------------------------------------------------------- compiled set and configs

@pytest.mark.extension
def test_extension_compiles_exactly_the_catalog():
    built = {d["name"]: d for d in _ffi.extension().gemm_kernels()}
    listed = {i.name: i for i in catalog.compiled_instances()}
    assert set(built) == set(listed)
    families = list(catalog.FAMILIES)
    for name, d in built.items():
        inst = listed[name]
        assert families[d["family"]] == inst.family
        assert (d["dtype"], d["b_dtype"]) == tuple(catalog.DTYPES[t].code for t in inst.dtypes)
        assert catalog.TileShape(d["block_m"], d["block_n"], d["block_k"], d["stages"],
                                 list(catalog.SCHEDULES)[d["schedule"]],
                                 d["ctas_per_sm"]) == inst.tile
        assert (d["a_mn_major"], d["b_mn_major"]) == (inst.a_mn_major, inst.b_mn_major)
        assert 0 < d["smem_bytes"] <= catalog.SMEM_LIMIT_BYTES
        assert (d["ctas_per_sm"] * (d["smem_bytes"] + catalog.SMEM_RESERVED_BYTES)
                <= catalog.SMEM_PER_SM_BYTES)
        # A stream-K workspace slot per CTA (its fp32 partial tile, as two 64-row warpgroup
        # strips: a 64-row tile's slot holds 128 rows) where tiles split; the ready flags are
        # kept outside the workspace (ffi/gemm/split_flags.h).
        splits = (catalog.SCHEDULES[inst.tile.schedule].stream_k and
                  catalog.FAMILIES[inst.family].stream_k)
        slot = max(inst.tile.block_m, 128) * inst.tile.block_n * 4
        assert d["slot_bytes"] == (slot if splits else 0)
        # Every mainloop but the block-scaled one (scales per k-block) reads k-blocks past K
        # as zeros, so its split plans may pad K (stream_k_plan.h).
        promoted = catalog.FAMILIES[inst.family].mainloop.startswith("MainloopSSPromoted")
        assert d["pads_k_blocks"] == (not promoted), name


def test_translation_units_hold_every_kernel_once():
    # codegen's units (the build's sources): each kernel in exactly one, a unit's kernels of one
    # family and at most TU_KERNELS of them, each in a namespace of its own name.
    from jax_hopper.kernels import codegen
    instances = catalog.compiled_instances()
    units = codegen.translation_units(instances)
    placed = [i for kernels in units.values() for i in kernels]
    assert sorted(i.name for i in placed) == sorted(i.name for i in instances)
    for name, kernels in units.items():
        assert 1 <= len(kernels) <= codegen.TU_KERNELS
        assert {i.family for i in kernels} == {kernels[0].family}
        assert name.startswith(f"sm90_gemm_{kernels[0].family}_")
        source = codegen.unit_source(kernels)
        for i in kernels:
            assert f"namespace {i.name} {{" in source
            assert f"gemm_kernel_info<{i.name}::Kernel>" in source


@pytest.mark.parametrize("field,value,match", [
    ("block_n", 160, "not compiled"),
    ("stages", 7, "not compiled"),
    ("cluster_m", 4, "cluster"),
    ("raster", "hilbert", "raster"),
    ("group_size", 0, "group_size"),
    ("swizzle", "64B", "swizzle"),
    ("a_mn_major", True, "a_mn_major"),
])
def test_config_validation_names_the_field(field, value, match):
    cfg = GemmConfig(**{field: value})
    with pytest.raises(ValueError, match=match):
        cfg.validate("bfloat16", a_mn_major=False, b_mn_major=True)


def test_config_rejected_through_the_api():
    a = jnp.ones((64, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match="cluster"):
        hopper_matmul(a, a, config=GemmConfig(cluster_m=2, cluster_n=2))
    with pytest.raises(ValueError, match="GemmConfig"):
        hopper_matmul(a, a, config={"block_m": 128})


def test_every_cooperative_tile_has_a_measured_efficiency():
    # The heuristic weighs these; the ping-pong tiles are opt-in (heuristics/dense.py says why).
    from jax_hopper.gemm.heuristics import TILE_EFFICIENCY
    assert set(TILE_EFFICIENCY) == {(t.block_m, t.block_n, t.schedule)
                                    for t in catalog.TILE_SHAPES if t.schedule == "cooperative"}


def test_heuristic_choices():
    big = choose_config(8192, 8192, 8192)
    assert (big.block_m, big.block_n, big.cluster_m) == (128, 256, 2)
    decode = choose_config(256, 4096, 4096)  # one wave over 64 k-blocks: split, unpaired
    assert (decode.block_n, decode.cluster_m, decode.stream_k) == (128, 1, True)
    decode = choose_config(256, 4096, 8192)  # a longer K: the pair's multicast pays
    assert (decode.block_n, decode.cluster_m, decode.stream_k) == (128, 2, True)
    # One row of tiles streaming a large B: HBM, not the SMs, limits; no split-K.
    assert not choose_config(128, 8192, 8192).stream_k
    assert not choose_config(256, 4096, 4096, batch=2).stream_k
    assert choose_config(8192, 8192, 8192).stream_k   # tail waves: always
    # One partial wave of wide tiles rather than two of narrower ones; 128x192 where it makes
    # one fuller wave (768 x 4096: 132 tiles against 96 of 128x256).
    assert choose_config(1024, 4096, 14336).block_n == 256
    assert choose_config(896, 4096, 4096).block_n == 256
    mid = choose_config(768, 4096, 8192)
    assert (mid.block_n, mid.cluster_m) == (192, 2)       # one wave, long K: multicast
    mid = choose_config(768, 4096, 4096)
    assert (mid.block_n, mid.cluster_m) == (192, 1)       # 64 k-blocks: not long enough
    assert choose_config(768, 4096, 1024).cluster_m == 1  # one wave, short K
    assert choose_config(2048, 4096, 4096).cluster_m == 1  # between one and two waves
    assert choose_config(512, 4096, 4096).block_n == 128   # one wave of small tiles
    assert choose_config(4000, 3000, 2056).block_n == 256
    # Only the tiles offered are chosen from (hopper_glu offers those with gated kernels).
    for shape in [(768, 4096, 4096), (256, 4096, 4096), (8192, 8192, 8192)]:
        assert choose_config(*shape, tiles=catalog.FAMILIES["glu"].tiles).tile in \
            catalog.FAMILIES["glu"].tiles
    for shape in [(1, 1, 1), (4000, 3000, 2056), (64, 12288, 4096)]:
        cfg = choose_config(*shape)
        cfg.validate("bfloat16", False, True)  # always a compiled, valid config


@pytest.mark.parametrize("m,n,tiles128,pingpong", [
    (640, 2048, 80, True), (384, 4096, 96, True), (768, 1536, 72, True),
    (512, 2048, 64, False), (528, 2048, 80, True), (768, 2112, 102, True),
    (512, 4096, 128, True), (1408, 1536, 132, True), (1152, 1920, 135, False),
    (256, 4096, 64, False)])
@pytest.mark.parametrize("k", [2048, 3968])  # under 64 k-blocks (long_k_split_tile)
def test_heuristic_pingpong_for_one_partial_wave(m, n, tiles128, pingpong, k):
    """Ping-pong 128 x 128 (matmul only) where its tiles fill more than half the SMs in one
    wave, up to a whole one, over a K short of LONG_K_BLOCKS; the cooperative rule elsewhere
    and for other families."""
    assert math.ceil(m / 128) * math.ceil(n / 128) == tiles128
    cfg = choose_config(m, n, k, pingpong=True, long_k_split=True)
    assert ((cfg.schedule, cfg.block_n, cfg.cluster_m, cfg.cluster_n) ==
            ("pingpong", 128, 1, 1)) == pingpong
    assert choose_config(m, n, k).schedule == "cooperative"
    glu = heuristic_config("glu", False, 1, m, n, k)
    assert glu.schedule == "cooperative"
    assert (heuristic_config("matmul", False, 1, m, n, k).schedule == "pingpong") == pingpong
    # The count is over the batch: two entries of 40 tiles are one wave of 80.
    if tiles128 == 80:
        assert choose_config(m, n // 2, k, batch=2, pingpong=True).schedule == "pingpong"


@pytest.mark.parametrize("m,n,k,block_n", [
    (140, 3072, 11008, 192),    # 2 M tiles: 32 tiles of 128 x 192 in 4.1 pieces each
    (174, 5120, 11008, 192),    # ping-pong's window before (80 tiles of 128 x 128)
    (310, 5056, 7254, 256),     # ... 60 tiles of 128 x 256, the 128 x 192 ones past half a wave
    (471, 1280, 14592, 128),    # narrow: 128 x 256 in 6.6 pieces a tile costs more
    (807, 3456, 4608, None),    # every tile's count past half the SMs: the earlier rules
    (316, 3328, 3072, None),    # 48 k-blocks: short
    (140, 3072, 4032, None),    # 63
    (241, 6144, 4096, None)])   # 64: the earlier rules (LONG_K_BLOCKS' NOTES)
def test_long_k_split_tile_weighs_work_against_pieces(m, n, k, block_n):
    """Under a wave over LONG_K_BLOCKS k-blocks or more, the split tile whose k-blocks per SM
    plus SPLIT_PIECE_KBLOCKS per extra piece cost the least; None where K is short or no tile
    makes SPLIT_MIN_PIECES pieces."""
    tile = long_k_split_tile(m, n, k, 1, catalog.TILE_SHAPES, DEFAULT_NUM_SMS)
    assert (tile.block_n if tile else None) == block_n
    # a stored (K, M): with (M, K) the 129-192 rows here run swapped (swap_wide_config)
    cfg = heuristic_config("matmul", True, 1, m, n, k)
    if block_n is not None:
        assert (cfg.block_m, cfg.block_n, cfg.schedule, cfg.stream_k) == \
            (128, block_n, "cooperative", True)


@pytest.mark.parametrize("m,n,k,block_n,cluster_m", [
    (256, 4096, 14336, 192, 1),    # 2 M tiles x 22: wider than 128, unpaired
    (760, 2560, 6144, 256, 1),     # 6 M tiles x 10
    (428, 1024, 14336, 128, 2),    # 128 x 128 keeps the single-wave long-K pair
    (471, 1280, 14592, 128, 2)])   # odd M tiles under 16 never pair: 4 here
def test_long_k_split_tiles_wider_than_128_run_unpaired(m, n, k, block_n, cluster_m):
    """The split tile of long_k_split_tile takes pair_along_m's single-wave long-K pair only up
    to SPLIT_PAIR_MAX_BLOCK_N columns; b's rows off the L2 line pair any tile as before."""
    cfg = choose_config(m, n, k, long_k_split=True)
    assert (cfg.block_n, cfg.cluster_m, cfg.cluster_n) == (block_n, cluster_m, 1), cfg
    assert cfg.block_n == long_k_split_tile(m, n, k, 1, catalog.TILE_SHAPES,
                                            DEFAULT_NUM_SMS).block_n
    off = choose_config(m, n, k, long_k_split=True, off_line=B_OFF)
    assert off.cluster_m == 2, off


def test_rows_off_l2_line_asks_for_each_operand_how_far_its_rows_start_off_it():
    """a (M, K) @ b (K, N): a's rows are K elements long, b's N; a transposed operand's rows
    are its other dimension; a pitch the lowering pads is judged padded. The bytes past whole
    lines: 0 on the line."""
    off = pitch.rows_off_l2_line
    assert off("bfloat16", False, True, 1000, 3000, 4104) == (16, 112)  # 8208, 6000 bytes
    assert off("bfloat16", False, True, 1000, 3072, 4104) == (16, 0)  # b's 6144: 48 lines
    assert off("bfloat16", False, True, 1000, 3000, 4096) == (0, 112)  # a's 8192
    assert off("bfloat16", True, False, 1000, 3000, 4104) == (80, 16)   # a (K, M), b (N, K)
    assert off("bfloat16", True, True, 1024, 3000, 4104) == (0, 112)   # a (K, M): 2048
    # 4090 bf16 elements are padded to 4096 (8192 bytes, whole lines); float32 b has 12000.
    assert off("bfloat16", False, True, 1000, 3072, 4090) == (0, 0)
    assert off("bfloat16", False, True, 1000, 3000, 4104, "float32") == (16, 96)
    assert off("float8_e4m3fn", False, False, 1000, 3000, 4224) == (0, 0)  # 33 lines
    # 1500 bf16 elements are padded to 1504: 3008 bytes, 64 past 23 lines (on a sector)
    assert off("bfloat16", False, True, 1000, 1500, 4096) == (0, 64)


# Rows 16 bytes past the L2 line (off a sector too), as pitch.rows_off_l2_line gives them.
BOTH_OFF, A_OFF, B_OFF = (16, 16), (16, 0), (0, 16)


@pytest.mark.extension  # swap_for_narrow_weight asks the C++ planner
@pytest.mark.parametrize("m,n,k,off_line_rule", [
    (2000, 3000, 4104, True), (1000, 5000, 4104, True), (640, 3000, 8200, True),
    (4000, 3000, 2056, True), (256, 3000, 4104, False), (1024, 96, 4104, False)])
def test_heuristic_off_line_rule(m, n, k, off_line_rule):
    """With both operands' rows off the L2 line: 128 x 256 in 2-CTA clusters from 40% of a
    wave of its tiles (matmul only); fewer tiles keep the other rules' tile, paired along M as
    b's rows off the line ask (pair_along_m), as do other families' tiles."""
    off, aligned = (choose_config(m, n, k, off_line=flag) for flag in (BOTH_OFF, (0, 0)))
    if off_line_rule:
        assert (off.block_m, off.block_n, off.cluster_m, off.schedule) == \
            (128, 256, 2, "cooperative")
    else:
        assert off == choose_config(m, n, k, off_line=B_OFF)
        assert (off.block_m, off.block_n) == (aligned.block_m, aligned.block_n)
    # The gated family has no off_line_tile: its tile is the aligned one, only paired per b.
    glu, glu_aligned = (heuristic_config("glu", False, 1, m, n, k, off_line=flag)
                        for flag in (BOTH_OFF, (0, 0)))
    assert (glu.block_m, glu.block_n, glu.schedule, glu.stream_k) == \
        (glu_aligned.block_m, glu_aligned.block_n, glu_aligned.schedule, glu_aligned.stream_k)
    matmul = heuristic_config("matmul", False, 1, m, n, k, off_line=BOTH_OFF)
    # A narrow weight past SWAP_MAX_M rows runs swapped instead (swap_for_narrow_weight).
    narrow = m > SWAP_MAX_M and swap_for_narrow_weight(off, 1, m, n, k, DEFAULT_NUM_SMS)
    assert matmul.swap_ab == narrow == (n == 96)
    if not narrow:
        assert matmul == (off if m > SWAP_MAX_M else aligned)
    off.validate("bfloat16", False, True)


@pytest.mark.parametrize("tiles_m,count,long_k,off_line,paired", [
    (1, 100, True, B_OFF, False),            # one M tile: nothing to pair
    (12, 96, False, B_OFF, True),            # b's rows off the line: always paired
    (7, 300, True, B_OFF, True),             # ... an odd count of M tiles past one wave
    (15, 240, True, B_OFF, True),
    (5, 120, True, B_OFF, False),            # ... but not where it pushes one wave into two
    (13, 260, True, B_OFF, True),            #     (144 padded); past one wave stream-K spreads it
    (13, 260, True, (0, 32), False),         # ... with the rows on a sector: as on the line
    (12, 96, False, (0, 32), True),          #     (an even count: as off it)
    (33, 495, True, B_OFF, True),            # ... from 32 M tiles the padding does not count
    (6, 120, True, A_OFF, False),            # a's alone off: never
    (20, 300, True, A_OFF, False),
    (6, 120, True, BOTH_OFF, True),          # both: b's rule
    (8, 300, False, (0, 0), True),           # two waves or more (over a deep K: deep_k)
    (7, 336, False, (0, 0), False),          # ... an odd count of M tiles: the last pair half empty
    (31, 620, False, (0, 0), False),         # ... unless there are 32 or more
    (33, 660, False, (0, 0), True),
    (8, 200, True, (0, 0), False),           # between one and two waves
    (8, 120, True, (0, 0), True),            # one wave over a long K, M tiles in pairs
    (7, 112, True, (0, 0), False),           # ... an odd count of them: the last pair half empty
    (8, 120, False, (0, 0), False),          # one wave over a short K
])
def test_pair_along_m(tiles_m, count, long_k, off_line, paired):
    assert pair_along_m(tiles_m, count, long_k, 132, off_line, deep_k=True) == paired


@pytest.mark.parametrize("tiles_m,count,off_line,paired", [
    (8, 300, (0, 0), False),     # two waves of tiles over a short K: unpaired
    (64, 1024, (0, 0), False),
    (8, 120, (0, 0), False),     # one wave: long_k's call, not deep_k's
    (12, 300, B_OFF, True),      # b's rows off the line: paired whatever the K
])
def test_pair_along_m_short_k(tiles_m, count, off_line, paired):
    assert pair_along_m(tiles_m, count, False, 132, off_line, deep_k=False) == paired


@pytest.mark.parametrize("m,n,k,cluster_m", [
    (8192, 4096, 512, 1),    # 8 k-blocks of 128 x 256 tiles, 7.8 waves
    (6144, 6144, 2496, 1),   # 39 k-blocks
    (6144, 6144, 2560, 2),   # 40 (PAIR_WAVES_MIN_K_BLOCKS)
    (8192, 8192, 8192, 2),
])
def test_heuristic_pairs_waves_from_a_deep_k(m, n, k, cluster_m):
    """Two waves or more of tiles (b's rows on the L2 line) run in pairs along M only over
    PAIR_WAVES_MIN_K_BLOCKS k-blocks or more (H100, 2026-12-07: unpaired 1.018x geomean on
    12 held-out shapes under it)."""
    from jax_hopper.gemm.heuristics import dense
    assert dense.PAIR_WAVES_MIN_K_BLOCKS == 40
    config = choose_config(m, n, k)
    assert (config.block_m, config.block_n, config.schedule) == (128, 256, "cooperative")
    assert config.cluster_m == cluster_m


def test_heuristic_pairs_along_m_by_the_operands_pitches():
    """The rule at work on shapes measured (H100, 2026-11-27): b's rows off (N = 1000)
    leave the ping-pong tile for a cooperative one in a pair; a's alone off (K = 10000) and an
    odd count of M tiles in one wave stay unpaired."""
    b_off = choose_config(1470, 1000, 11008, pingpong=True, off_line=B_OFF)
    assert (b_off.schedule, b_off.cluster_m) == ("cooperative", 2)
    assert choose_config(1470, 1000, 11008, pingpong=True).schedule == "pingpong"
    assert choose_config(733, 2560, 10000, off_line=A_OFF).cluster_m == 1
    assert choose_config(733, 2560, 10000).cluster_m == 2
    odd = choose_config(840, 4096, 28672)
    assert (odd.block_n, odd.cluster_m) == (256, 1)


@pytest.mark.parametrize("m,n,k,paired", [
    (326, 28672, 1536, False),   # b's rows on the line: 3 M tiles, 336 tiles
    (559, 3000, 3072, False),    # 6000 bytes, off a sector: 120 tiles -> 144 padded, two waves
    (1834, 3000, 16384, True),   # ... 240 -> 256
    (1576, 5000, 14336, True),   # 10000 bytes, off a sector: 260 -> 280
    (1652, 10000, 14336, False),  # 20000 bytes, on a sector: as on the line
    (811, 6000, 4096, False),    # 12000 bytes, on a sector
])
def test_heuristic_pairs_odd_m_tiles_by_the_pitch_and_the_waves(m, n, k, paired):
    """Odd counts of M tiles as measured (H200, 2026-11-28) on a (M, K) @ b (K, N): unpaired
    where b's rows start on the L2 line or on a sector boundary; with them off a sector,
    paired unless the pairs' padding pushes a single wave into a second."""
    off = pitch.rows_off_l2_line("bfloat16", False, True, m, n, k)
    assert off[0] == 0
    assert (choose_config(m, n, k, off_line=off).cluster_m == 2) == paired


def test_default_config_judges_the_call_s_own_pitches(monkeypatch, tmp_path):
    """hopper_matmul's default for a (M, K) @ b (K, N) weighs each stored row pitch against
    the L2 line (nothing tuned: an empty cache path)."""
    from jax_hopper.gemm import tuned
    monkeypatch.setenv("JAX_HOPPER_TUNE_CACHE", str(tmp_path / "absent.json"))
    off = tuned.default_config("matmul", "bfloat16", False, True, 1, 2000, 3000, 4104)
    assert (off.block_n, off.cluster_m) == (256, 2)
    assert off == choose_config(2000, 3000, 4104, off_line=BOTH_OFF)
    stored_k_major_b = tuned.default_config("matmul", "bfloat16", False, False, 1, 2000, 3072,
                                            4104)   # b (N, K): its rows are 4104 long too
    assert stored_k_major_b == choose_config(2000, 3072, 4104, off_line=BOTH_OFF)
    aligned_b = tuned.default_config("matmul", "bfloat16", False, True, 1, 2000, 3072, 4104)
    assert aligned_b == choose_config(2000, 3072, 4104, off_line=A_OFF)
    assert tuned.default_config("matmul", "bfloat16", False, True, 1, 733, 2560,
                                10000).cluster_m == 1


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs,match", [
    (dict(a=np.ones((4, 8), np.float32)), "a.dtype=float32"),
    (dict(b=np.ones((8, 4), np.float16)), "differ"),
    (dict(b=np.ones((6, 4), jnp.bfloat16)), "contraction"),
    (dict(out_dtype=jnp.int8), "out_dtype"),
    (dict(bias=np.ones((5,), np.float32)), "bias.shape"),
    (dict(residual=np.ones((3, 4), np.float32)), "residual.shape"),
    (dict(activation="tanh"), "activation"),
    (dict(a=np.ones((2, 4, 8), jnp.bfloat16), b=np.ones((3, 8, 4), jnp.bfloat16)), "broadcast"),
])
def test_bad_input_raises_value_error(kwargs, match):
    args = dict(a=np.ones((4, 8), jnp.bfloat16), b=np.ones((8, 4), jnp.bfloat16))
    args.update(kwargs)
    a, b = args.pop("a"), args.pop("b")
    with pytest.raises(ValueError, match=match):
        hopper_matmul(a, b, **args)


def test_strict_mode_rejects_unaddressable_pitch():
    a = jnp.ones((16, 100), jnp.bfloat16)
    b = jnp.ones((100, 16), jnp.bfloat16)
    with pytest.raises(ValueError, match="multiple of 16"):
        hopper_matmul(a, b, strict=True)


def test_unaddressable_pitch_runs_without_a_warning(rng):
    a, b = on_cpu(random_operand(rng, (16, 98), "bfloat16"), random_operand(rng, (98, 16),
                                                                            "bfloat16"))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = hopper_matmul(a, b)
    assert rel_frob(out, reference64(a, b)) < REL_FROB_BOUND["bfloat16"]


@pytest.mark.parametrize("a_mn_major,b_mn_major", [(False, False), (False, True), (True, False),
                                                   (True, True)])
def test_lowering_pads_only_the_pitches_tma_cannot_address(a_mn_major, b_mn_major):
    """pitch.lowering_pads on (M, N, K) = (37, 45, 100) in bf16 with a float32 output (its
    pitch, 45 x 4 bytes, is not 16-byte aligned either): each operand's last dimension is padded
    to a multiple of 8, the output's N to a multiple of 4, and bias and residual with it."""
    m, n, k = 37, 45, 100
    a = jax.ShapeDtypeStruct((1, k, m) if a_mn_major else (1, m, k), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((1, k, n) if b_mn_major else (1, n, k), jnp.bfloat16)
    bias = jax.ShapeDtypeStruct((n,), jnp.float32)
    res = jax.ShapeDtypeStruct((1, m, n), jnp.float32)
    out = jax.ShapeDtypeStruct((1, m, n), jnp.float32)
    (a_w, b_w, bias_w, res_w), out_pad = pitch.lowering_pads(a, b, bias, res, out,
                                                             family="matmul")
    assert a_w == [(0, 0), (0, 0), (0, (3 if a_mn_major else 4))]
    assert b_w == [(0, 0), (0, 0), (0, (3 if b_mn_major else 4))]
    assert out_pad == 3 and bias_w == [(0, 3)] and res_w == [(0, 0), (0, 0), (0, 3)]
    # a weight read in place (pitch.shifted_weight_tile) is left as it is, the rest padded
    (a_w2, b_w2, _, _), out_pad2 = pitch.lowering_pads(a, b, bias, res, out, family="matmul",
                                                       b_in_place=True)
    assert (a_w2, b_w2, out_pad2) == (a_w, None, 3)
    aligned = jax.ShapeDtypeStruct((1, 64, 64), jnp.bfloat16)
    none = pitch.lowering_pads(aligned, aligned, jax.ShapeDtypeStruct((0,), jnp.float32),
                               jax.ShapeDtypeStruct((0, 0, 0), jnp.bfloat16), aligned,
                               family="matmul")
    assert none == ((None, None, None, None), 0)


def test_shifted_weight_tile_takes_odd_16_bit_k_n_weights_on_decode_tiles():
    def w(shape, dtype=jnp.bfloat16):
        return jax.ShapeDtypeStruct(shape, dtype)
    decode = {bn: GemmConfig.for_tile(next(t for t in catalog.SWAP_TILES if t.block_n == bn),
                                      swap_ab=True) for bn in (16, 32, 64)}
    for bn, cfg in decode.items():
        tile = pitch.shifted_weight_tile(w((1, 768, 50257)), True, cfg, "matmul")
        assert tile in catalog.SWAP_ODD_TILES and tile.block_n == bn
    cfg = decode[16]
    assert pitch.shifted_weight_tile(w((1, 768, 50264)), True, cfg, "matmul") is None  # aligned
    assert pitch.shifted_weight_tile(w((1, 770, 50257)), True, cfg, "matmul") is None  # K % 8
    assert pitch.shifted_weight_tile(w((1, 768, 50257)), False, cfg, "matmul") is None  # (N, K)
    assert pitch.shifted_weight_tile(w((1, 768, 50257), jnp.float32), True, cfg,
                                     "matmul") is None
    assert pitch.shifted_weight_tile(w((1, 768, 50257)), True, GemmConfig(), "matmul") is None
    wide = GemmConfig.for_tile(catalog.SWAP_WIDE_TILES[0], swap_ab=True, cluster_n=2)
    assert pitch.shifted_weight_tile(w((1, 768, 50257)), True, wide, "matmul") is None
    # the lean and two-per-SM decode tiles map to the odd tile of their token width
    for t in catalog.SWAP_TILES:
        got = pitch.shifted_weight_tile(w((1, 768, 50257)), True,
                                        GemmConfig.for_tile(t, swap_ab=True), "matmul")
        assert got is not None and got.block_n == t.block_n


def test_odd_weights_are_read_in_place_up_to_two_of_the_widest_odd_tiles():
    # a (K, N) weight with N odd: read in place by the matmul_swap_odd tiles up to
    # ODD_WEIGHT_MAX_M rows (two token tiles of the widest), where the unswapped and wide
    # kernels would copy it; the token width of least waves x (width + ODD_SHIFT_TOKENS),
    # waves whole past the first (393 weight tiles of 128 columns over 132 SMs)
    from jax_hopper.gemm import tuned
    widest = max(t.block_n for t in catalog.SWAP_ODD_TILES)
    assert ODD_WEIGHT_MAX_M == 2 * widest
    b = jax.ShapeDtypeStruct((1, 768, 50257), jnp.bfloat16)
    expected = {SWAP_MAX_M + 1: 128, 128: 128, 129: 192, 192: 192, 193: 128, 256: 128,
                257: 192, ODD_WEIGHT_MAX_M: 192}
    for m, width in expected.items():
        cfg = tuned.heuristic_default("matmul", "bfloat16", False, True, 1, m, 50257, 768)
        assert cfg.swap_ab and cfg.block_n == width, (m, cfg)
        assert (cfg.cluster_m, cfg.cluster_n) == (1, 1), (m, cfg)
        odd = pitch.shifted_weight_tile(b, True, cfg, "matmul")
        assert odd is not None and odd.block_n == width, m
        assert pitch.shifted_config_tile("matmul", odd) == cfg.tile, m
    # under one wave (4097 columns, 33 weight tiles) the waves are shares: 160 rows one tile
    # of 192 (33 / 132 x 256)
    assert odd_weight_config("matmul", 1, 160, 4097, 4096, 132).block_n == 192
    assert odd_weight_config("matmul", 1, 96, 4097, 4096, 132).block_n == 128
    past = tuned.heuristic_default("matmul", "bfloat16", False, True, 1, ODD_WEIGHT_MAX_M + 1,
                                   50257, 768)
    assert pitch.shifted_weight_tile(b, True, past, "matmul") is None
    assert pitch.weight_read_shifted("matmul", "bfloat16", True, 50257, 768)
    for args in (("matmul", "bfloat16", True, 50264, 768), ("matmul", "bfloat16", False, 50257,
                 768), ("matmul", "bfloat16", True, 50257, 770), ("matmul", "float32", True,
                 50257, 768), ("glu", "bfloat16", True, 50257, 768)):
        assert not pitch.weight_read_shifted(*args), args


@pytest.mark.extension  # the plans are the C++ planner's
def test_odd_weight_waves_count_the_split_tail():
    # 8996 columns, 300 rows: 71 weight tiles. 142 tiles of 192 tokens are a wave and 10 more,
    # which over K = 5408 (85 k-blocks) the plan cuts into 5 pieces of 17 (plan_split_tail):
    # the busiest CTA 102 k-blocks, 1.2 waves x 256; 213 tiles of 128 leave 81 past a wave, too
    # many to cut, two waves x 192: the wider. Over K = 768 (12 k-blocks, too short to cut)
    # both are two whole waves: the narrower.
    assert odd_weight_config("matmul", 1, 300, 8996, 5408, 132).block_n == 192
    assert odd_weight_config("matmul", 1, 300, 8996, 768, 132).block_n == 128


def test_lowering_pads_the_gated_weights_k_with_x():
    x = jax.ShapeDtypeStruct((1, 16, 100), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((100, 2, 64), jnp.bfloat16)
    out = jax.ShapeDtypeStruct((1, 16, 64), jnp.bfloat16)
    empty = jax.ShapeDtypeStruct((0,), jnp.float32)
    (x_w, w_w, _, _), out_pad = pitch.lowering_pads(
        x, w, empty, jax.ShapeDtypeStruct((0, 0, 0), jnp.bfloat16), out, family="glu")
    assert x_w == [(0, 0), (0, 0), (0, 4)] and w_w == [(0, 4), (0, 0), (0, 0)] and out_pad == 0


# ---------------------------------------------------------------- reference lowering

@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_cpu_lowering_matches_jnp(rng, dtype, transpose_a, transpose_b):
    m, n, k = 37, 48, 64
    a = random_operand(rng, (k, m) if transpose_a else (m, k), dtype)
    b = random_operand(rng, (n, k) if transpose_b else (k, n), dtype)
    a, b = on_cpu(a, b)
    f = jax.jit(lambda a, b: hopper_matmul(a, b, transpose_a=transpose_a,
                                           transpose_b=transpose_b, out_dtype=jnp.float32))
    got = np.asarray(f(a, b))
    opa = a.T if transpose_a else a
    opb = b.T if transpose_b else b
    want = np.asarray(jnp.matmul(opa, opb, preferred_element_type=jnp.float32))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_cpu_lowering_batched_broadcast_and_vectors(rng):
    a, b = on_cpu(random_operand(rng, (2, 3, 5, 16), "bfloat16"),
                  random_operand(rng, (3, 16, 8), "bfloat16"))
    got = hopper_matmul(a, b, out_dtype=jnp.float32)
    assert got.shape == (2, 3, 5, 8)
    np.testing.assert_allclose(got, reference64(a, b), rtol=1e-5, atol=1e-4)
    v = on_cpu(random_operand(rng, (16,), "bfloat16"))[0]
    assert hopper_matmul(v, b[0]).shape == (8,)
    assert hopper_matmul(a[0, 0], v).shape == (5,)
    assert hopper_matmul(v, v[:, None]).shape == (1,)


def test_cpu_lowering_epilogue(rng):
    m, n, k = 9, 16, 32
    a, b = on_cpu(random_operand(rng, (m, k), "bfloat16"), random_operand(rng, (k, n), "bfloat16"))
    bias, res = on_cpu(random_operand(rng, (n,), "float32"), random_operand(rng, (m, n), "float32"))
    for act in (None, "relu", "gelu_tanh", "gelu", "silu"):
        got = hopper_matmul(a, b, bias=bias, residual=res, activation=act, alpha=2.0, beta=0.5,
                            out_dtype=jnp.float32)
        want = reference64(a, b, bias=bias, residual=res, activation=act, alpha=2.0, beta=0.5)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_empty_problems_are_shaped_right():
    for (m, n, k) in [(0, 8, 8), (8, 0, 8), (8, 8, 0)]:
        a, b = on_cpu(jnp.ones((m, k), jnp.bfloat16), jnp.ones((k, n), jnp.bfloat16))
        out = hopper_matmul(a, b, bias=jnp.full((n,), 2.0, jnp.bfloat16))
        assert out.shape == (m, n)
        assert np.all(np.asarray(out, np.float32) == 2.0)


def test_the_checkout_root_shadowing_the_install_is_named():
    """Run from the checkout's root, Python imports the source tree (no extension in it) ahead
    of the installed package: kernels_available() says so instead of asking for an install."""
    import importlib.metadata
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = str(importlib.metadata.distribution("jax-hopper").locate_file("jax_hopper"))
    if os.path.samefile(installed, os.path.join(root, "jax_hopper")):
        pytest.skip("jax_hopper is installed from this checkout in place (editable): nothing "
                    "shadows it")
    proc = subprocess.run([sys.executable, "-c", "import jax_hopper; "
                           "print(jax_hopper.kernels_available().reason)"], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "shadows the built package installed at" in proc.stdout, proc.stdout
