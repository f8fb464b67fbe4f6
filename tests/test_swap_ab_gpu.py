"""The swap-AB kernels (GemmConfig.swap_ab) on an sm_90 GPU against float64: out^T = b^T a^T with
the tokens as wgmma's N, the tile stored transposed; hopper_matmul's (matmul_swap) and
hopper_fp8_matmul's per tensor (fp8_swap)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND, REL_FROB_BOUND_FP8, check_fp8, check_matmul,
                          fp8_operand, matmul_operands, random_operand, reference64, rel_frob)
from jax_hopper import GemmConfig, hopper_fp8_matmul, hopper_matmul
from jax_hopper.gemm import heuristics, pitch
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu


def _swap(tile, stream_k=True):
    return GemmConfig.for_tile(tile, swap_ab=True, stream_k=stream_k)


@pytest.mark.parametrize("transpose_b", (False, True))
@pytest.mark.parametrize("tile", catalog.SWAP_TILES + catalog.SWAP_WIDE_TILES
                         + catalog.SWAP_MID_TILES,
                         ids=lambda t: t.tag)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_every_tile_and_weight_layout(rng, dtype, tile, transpose_b):
    # Tokens short of the tile, a weight edge inside a 128-column tile, a k tail.
    check_matmul(rng, tile.block_n - 3, 328, 584, dtype=dtype, transpose_b=transpose_b,
                 config=_swap(tile))


# Decode-like and edge shapes: 1 token; 7, 63, 65 (one past a tile); N off the 128-column tiles;
# K long enough to split in equal pieces (>= 2 x 8 k-blocks) and not; more weight tiles than
# half the SMs (no equal split: whole tiles) and a partial second wave (224 tiles on 132 SMs).
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (7, 136, 72), (16, 1000, 1032),
                                   (63, 264, 4104), (64, 12288, 128), (1, 8, 8), (33, 520, 2056),
                                   (16, 28672, 1032), (5, 14336, 4104)])
@pytest.mark.parametrize("stream_k", (True, False))
def test_shapes_split_and_whole(rng, m, n, k, stream_k):
    tile = heuristics.choose_swap_config(m, catalog.SWAP_TILES, n).tile
    check_matmul(rng, m, n, k, config=_swap(tile, stream_k), transpose_b=True)


@pytest.mark.parametrize("m,n,k", [(3, 1024, 10000), (16, 512, 8128)])
def test_split_with_k_blocks_of_zeros(rng, m, n, k):
    """A prime count of k-blocks (157, 127): the last-arrival split pads them to a multiple of
    its pieces (160 in 16, 135 in 15), the last piece reading k-blocks of zeros past K."""
    cfg = _swap(heuristics.choose_swap_config(m, catalog.SWAP_TILES, n).tile)
    kernel = cfg.kernel("matmul", "bfloat16", False, True)
    plan = cfg.plan(kernel, 1, m, n, k, catalog.DEFAULT_NUM_SMS)
    assert plan["sk_clusters"] > 0 and plan["k_blocks"] > -(-k // 64), plan
    check_matmul(rng, m, n, k, config=cfg, transpose_b=True)
    check_matmul(rng, m, n, k, config=cfg, out_dtype="float32")


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (30, 17920, 1032), (16, 33792, 264)])
def test_two_ctas_per_sm(rng, m, n, k):
    """The ctas_per_sm=2 tiles: 32 weight tiles split in 8 pieces (256 CTAs, two to an SM), and
    140 or 264 tiles whole, a wave and more of two CTAs per SM, as the heuristic takes them."""
    tile = min((t for t in catalog.SWAP_TILES if t.ctas_per_sm == 2 and t.block_n >= m),
               key=lambda t: t.block_n)
    if n // tile.block_m > catalog.DEFAULT_NUM_SMS:
        assert heuristics.heuristic_config("matmul", False, 1, m, n, k).tile == tile
    check_matmul(rng, m, n, k, config=_swap(tile))


LEAN_TILES = [t for t in catalog.SWAP_TILES if t.schedule == "lean"]


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 1000, 1032), (29, 14336, 2056),
                                   (7, 136, 72), (32, 40960, 264), (3, 1024, 10000),
                                   (57, 1544, 1032)])
@pytest.mark.parametrize("tile", LEAN_TILES, ids=lambda t: t.tag)
def test_lean_tiles(rng, tile, m, n, k):
    """The lean schedule's CTAs (one warpgroup that loads its own k-blocks, 64 weight columns,
    four to an SM): split in equal pieces, whole tiles over a wave (640 tiles: several units
    per CTA through one ring), k-blocks of zeros past K (157 padded), every epilogue term;
    up to four token tiles (57 rows), as the heuristic gives it (lean_swap_tile)."""
    cfg = _swap(tile)
    if (m, n, k) == (1, 4096, 4096):  # 64 weight tiles split over four CTAs to an SM
        plan = cfg.plan(cfg.kernel("matmul", "bfloat16", False, True), 1, m, n, k,
                        tile.ctas_per_sm * catalog.DEFAULT_NUM_SMS)
        assert plan["sk_clusters"] > catalog.DEFAULT_NUM_SMS, plan
    check_matmul(rng, m, n, k, config=cfg, transpose_b=True, out_dtype="float32")
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.bfloat16)
    check_matmul(rng, m, n, k, config=cfg, activation="gelu", bias=bias, residual=residual,
                 alpha=0.5, beta=-1.5)


@pytest.mark.parametrize("tile", [t for t in catalog.SWAP_TILES_FP8 if t.schedule == "lean"],
                         ids=lambda t: t.tag)
def test_lean_tiles_fp8(rng, tile):
    """fp8 per tensor on the lean tiles: split (1 x 4096 x 4096), a mixed pair, a batch."""
    cfg = _swap(tile)
    check_fp8(rng, 1, 4096, 4096, block=False, config=cfg)
    check_fp8(rng, tile.block_n - 5, 392, 1024, block=False, config=cfg,
              pair=("float8_e5m2", "float8_e4m3fn"), out_dtype="float32", batch=(2,),
              b_batch=(2,))


@pytest.mark.parametrize("cluster", catalog.CLUSTER_SHAPES, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("m,n,k", [(181, 1544, 4104), (129, 392, 520), (192, 14336, 264),
                                   (140, 3072, 2056), (385, 264, 1032)])
@pytest.mark.parametrize("tile", catalog.SWAP_WIDE_TILES + catalog.SWAP_MID_TILES,
                         ids=lambda t: t.tag)
def test_wide_token_tiles(rng, tile, m, n, k, cluster):
    """The wide token tiles (mid M swapped, on the cooperative stream-K): each strip stored in
    passes of output rows, one partly past M (181, 129 rows); split in equal pieces (13-48
    tiles over 33-65 k-blocks), whole (112-224 tiles), several token tiles (385 rows); 2-CTA
    clusters multicasting the token tile (c2x1) or the weight tile (c1x2), a cluster's tile
    past the edge; every epilogue term, float32 out (two boxes a pass); whole tiles in float16."""
    cfg = GemmConfig.for_tile(tile, swap_ab=True, cluster_m=cluster[0], cluster_n=cluster[1])
    if n <= 3072 and k >= 2048:
        kernel = cfg.kernel("matmul", "bfloat16", False, True)
        plan = cfg.plan(kernel, 1, m, n, k, catalog.DEFAULT_NUM_SMS // (cluster[0] * cluster[1]))
        assert plan["sk_clusters"] > 0, plan
    check_matmul(rng, m, n, k, config=cfg, transpose_b=True)
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.float32)
    check_matmul(rng, m, n, k, config=cfg, activation="gelu", bias=bias, residual=residual,
                 alpha=0.5, beta=-1.5, out_dtype="float32")
    if cluster == (1, 1):
        check_matmul(rng, m, n, k, config=_swap(tile, stream_k=False), dtype="float16")


@pytest.mark.parametrize("m,n,k,token_tile,cluster_m", [
    (80, 1024, 5120, 32, 1), (300, 1000, 3072, 64, 1), (1000, 768, 776, 64, 1),
    (579, 768, 5120, 128, 2), (496, 776, 5128, 96, 1)])
def test_narrow_weight_defaults_to_swapped(rng, m, n, k, token_tile, cluster_m):
    """Past 64 rows a narrow weight's product runs swapped by default (the heuristic's
    swap_for_narrow_weight), its token tile (swap_narrow_config) walking the rows: a decode
    tile, or over 48 k-blocks or more a wide one, in 2-CTA clusters over an even count of
    weight tiles (6 of 768 columns; 776 make 7): every epilogue term."""
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k)
    assert cfg.swap_ab and (cfg.block_n, cfg.cluster_m) == (token_tile, cluster_m), cfg
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.bfloat16)
    check_matmul(rng, m, n, k, activation="silu", bias=bias, residual=residual, beta=0.5)
    check_matmul(rng, m, n, k, transpose_b=True, out_dtype="float32")


@pytest.mark.parametrize("m,n,k", [(68, 4096, 3072), (93, 6000, 1512)])
def test_rows_past_the_decode_tiles_take_one_token_tile(rng, m, n, k):
    """65-96 rows run swapped on one 96-token tile by default (one_token_tile_config),
    unclustered: 32 weight tiles, and 47 of 6000 columns (the last partial; K = 1512 a partial
    k-block), every epilogue term."""
    off = pitch.rows_off_l2_line("bfloat16", False, True, m, n, k)  # b stored (K, N)
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k, off_line=off)
    assert cfg.swap_ab and cfg.tile == catalog.SWAP_WIDE_TILES[0], cfg
    assert (cfg.cluster_m, cfg.cluster_n) == (1, 1), cfg
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.bfloat16)
    check_matmul(rng, m, n, k, activation="silu", bias=bias, residual=residual, beta=0.5)
    check_matmul(rng, m, n, k, transpose_b=True, out_dtype="float32")


@pytest.mark.parametrize("m,n,k,token_tile", [(400, 3744, 5248, 160), (713, 1344, 9984, 192)])
def test_mid_default_weighs_l2_requests(rng, m, n, k, token_tile):
    """Past 192 rows the default's token tile is the one of least max(plan cost, its L2
    requests) (swap_mid_config): 160 or 192 tokens where the plan cost alone took 128; b
    stored (K, N), the weight's rows 64 bytes off the L2 line on the first shape."""
    off = pitch.rows_off_l2_line("bfloat16", False, True, m, n, k)
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k, off_line=off)
    assert cfg.swap_ab and cfg.block_n == token_tile, cfg
    check_matmul(rng, m, n, k)
    check_matmul(rng, m, n, k, out_dtype="float32", beta=0.5,
                 residual=random_operand(rng, (m, n), jnp.float32))


@pytest.mark.parametrize("m,n,k,token_tile", [(2066, 2048, 2560, 160), (2093, 6144, 2576, 192)])
def test_past_a_wave_default_takes_the_token_tiles(rng, m, n, k, token_tile):
    """Past a wave of unswapped tiles (swap_past_wave_config) the default runs swapped on the
    160- or 192-token tile, two weight tiles sharing the tokens: rows that fill no whole token
    tile; on the second K a partial k-block, the tokens' rows 32 bytes off the L2 line; every
    epilogue term, out float32 too."""
    off = pitch.rows_off_l2_line("bfloat16", False, True, m, n, k)  # b stored (K, N)
    cfg = heuristics.heuristic_config("matmul", False, 1, m, n, k, off_line=off)
    assert cfg.swap_ab and (cfg.block_n, cfg.cluster_m) == (token_tile, 2), cfg
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.bfloat16)
    check_matmul(rng, m, n, k, activation="gelu", bias=bias, residual=residual, beta=0.5)
    check_matmul(rng, m, n, k, transpose_b=True, out_dtype="float32")


@pytest.mark.parametrize("m", [65, 200])
def test_several_token_tiles(rng, m):
    """More tokens than one tile: the tile's columns walk the tokens (explicit config)."""
    check_matmul(rng, m, 392, 520, config=_swap(catalog.SWAP_TILES[0]))


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
@pytest.mark.parametrize("activation", [None, "gelu", "silu"])
def test_epilogue_transposed(rng, out_dtype, activation):
    """alpha, the (N,) bias (per tile row here), the activation and the residual, in every out
    dtype (float32 stages two 128-byte boxes per strip)."""
    m, n = 24, 392
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), out_dtype)
    check_matmul(rng, m, n, 264, out_dtype=out_dtype, activation=activation, alpha=0.5,
                 beta=-1.5, bias=bias, residual=residual, config=_swap(catalog.SWAP_TILES[1]))


def test_batched_and_shared_operands(rng):
    cfg = _swap(catalog.SWAP_TILES[0])
    check_matmul(rng, 5, 136, 264, batch=(3,), config=cfg)  # both batched
    a = random_operand(rng, (3, 5, 264), jnp.bfloat16)       # one weight for every entry
    b = random_operand(rng, (264, 136), jnp.bfloat16)
    residual = random_operand(rng, (5, 136), jnp.bfloat16)   # one residual for every entry
    out = hopper_matmul(a, b, residual=residual, config=cfg)
    assert rel_frob(out, reference64(a, b, residual=residual)) < REL_FROB_BOUND["bfloat16"]


# 8 weight tiles in 16 pieces, 32 in 4 (128 CTAs each).
@pytest.mark.parametrize("m,n,k", [(8, 1024, 8192), (1, 4096, 4096)])
def test_split_is_reproducible_and_matches_whole(rng, m, n, k):
    """Whichever piece of a tile arrives last sums them all in piece order: bitwise the same
    every call (which also shows each call leaves the arrival counters zero for the next)."""
    a, b = matmul_operands(rng, m, n, k, "bfloat16", False, False)
    split = jax.jit(lambda a, b: hopper_matmul(a, b, preferred_element_type=jnp.float32,
                                               config=_swap(catalog.SWAP_TILES[0], True)))
    whole = jax.jit(lambda a, b: hopper_matmul(a, b, preferred_element_type=jnp.float32,
                                               config=_swap(catalog.SWAP_TILES[0], False)))
    first = np.asarray(split(a, b), np.float64)
    assert rel_frob(first, reference64(a, b)) < REL_FROB_BOUND["float32"]
    for _ in range(20):
        assert np.array_equal(first, np.asarray(split(a, b)))
    # The pieces are summed apart on the tensor cores (whose fp32 accumulation truncates) and
    # added after: close to one whole tile's sum, not equal (7.5e-6 at K = 8192, H100).
    other = np.asarray(whole(a, b), np.float64)
    assert rel_frob(first, other) < 1e-4


def test_default_config_swaps_small_m_only(rng):
    """The heuristic's choice reaches the call: the swapped target for 16 rows, not for 128
    against a weight whose column tiles fill the SMs (for 128 against a narrower one:
    swap_for_narrow_weight), and not for a stored (K, M)."""
    def target(m, n=256, transpose_a=False):
        a = random_operand(rng, (512, m) if transpose_a else (m, 512), jnp.bfloat16)
        b = random_operand(rng, (512, n), jnp.bfloat16)
        text = jax.jit(lambda a, b: hopper_matmul(a, b, transpose_a=transpose_a)).lower(
            a, b).as_text()
        return "jax_hopper_gemm_matmul_swap" in text

    assert target(16) and target(64) and target(128)
    assert target(128, n=4096) and not target(128, n=16384)
    assert not target(16, transpose_a=True)


def test_grad_of_a_decode_product(rng):
    """jax.grad at 16 tokens: the forward and dx run swapped, dw (a K-long contraction over the
    tokens) does not; all within bf16 bounds of float64."""
    x = random_operand(rng, (16, 1024), jnp.bfloat16)
    w = random_operand(rng, (1024, 512), jnp.bfloat16)
    g = random_operand(rng, (16, 512), jnp.float32)

    def loss(x, w):
        return jnp.sum(hopper_matmul(x, w, preferred_element_type=jnp.float32) * g)

    dx, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    g64 = np.asarray(g, np.float64)
    want_dx = g64 @ np.asarray(w, np.float64).T
    want_dw = np.asarray(x, np.float64).T @ g64
    for got, want in ((dx, want_dx), (dw, want_dw)):
        assert rel_frob(got, want) < REL_FROB_BOUND["bfloat16"]


@pytest.mark.parametrize("pair", catalog.FP8_PAIRS)
@pytest.mark.parametrize("tile", catalog.SWAP_TILES_FP8 + catalog.SWAP_WIDE_TILES_FP8,
                         ids=lambda t: t.tag)
def test_fp8_every_tile_and_pair(rng, tile, pair):
    # Tokens short of the tile, a weight edge inside a 128-row tile, a k tail (TMA zero-fills).
    check_fp8(rng, tile.block_n - 3, 328, 584, block=False, pair=pair, config=_swap(tile))


@pytest.mark.parametrize("cluster", catalog.CLUSTER_SHAPES, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("m,n,k", [(181, 1544, 4104), (129, 392, 520), (385, 264, 1032)])
@pytest.mark.parametrize("tile", catalog.SWAP_WIDE_TILES_FP8, ids=lambda t: t.tag)
def test_fp8_wide_token_tiles(rng, tile, m, n, k, cluster):
    """fp8 per tensor on the wide token tiles: split in equal pieces (181 x 1544 x 4104: 13-26
    tiles over 33 k-blocks of 128), whole with a strip partly past M (129 rows), several token
    tiles (385 rows); 2-CTA clusters either way; every epilogue term into float32, and a mixed
    pair (the kernel's dtypes b's first)."""
    cfg = GemmConfig.for_tile(tile, swap_ab=True, cluster_m=cluster[0], cluster_n=cluster[1])
    if (m, n, k) == (181, 1544, 4104):
        kernel = cfg.kernel("fp8", "float8_e4m3fn", False, False)
        plan = cfg.plan(kernel, 1, m, n, k, catalog.DEFAULT_NUM_SMS // (cluster[0] * cluster[1]))
        assert plan["sk_clusters"] > 0, plan
    check_fp8(rng, m, n, k, block=False, config=cfg)
    check_fp8(rng, m, n, k, block=False, config=cfg, out_dtype="float32",
              activation="gelu_tanh", alpha=0.5, beta=-1.5, with_bias=True, with_residual=True)
    if cluster == (1, 1):
        check_fp8(rng, m, n, k, block=False, pair=("float8_e5m2", "float8_e4m3fn"),
                  config=_swap(tile, stream_k=False))


# The default config at M <= 64 is the swapped one: decode shapes split and whole, N and K off
# the tiles (padded pitches: K = 1000, N = 13).
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (7, 13, 48), (16, 1000, 1000),
                                   (64, 12288, 512), (33, 520, 2056), (5, 14336, 4104)])
def test_fp8_default_config_is_swapped(rng, m, n, k):
    assert check_fp8(rng, m, n, k, block=False) < REL_FROB_BOUND_FP8["bfloat16"]
    tile = heuristics.choose_swap_config(m, catalog.SWAP_TILES_FP8).tile
    check_fp8(rng, m, n, k, block=False, config=_swap(tile, stream_k=False))


@pytest.mark.parametrize("m,n,k", [(80, 1024, 5120), (300, 1000, 3072), (700, 512, 1040)])
def test_fp8_narrow_weight_defaults_to_swapped(rng, m, n, k):
    """Past 64 rows a narrow fp8 weight's product runs swapped by default too
    (swap_for_narrow_weight), its token tile walking the rows, epilogue included."""
    cfg = heuristics.heuristic_config("fp8", False, 1, m, n, k)
    assert cfg.swap_ab and cfg.tile == heuristics.swap_token_tile(
        catalog.SWAP_TILES_FP8, 1, m, n, k, catalog.DEFAULT_NUM_SMS, "fp8"), cfg
    assert check_fp8(rng, m, n, k, block=False) < REL_FROB_BOUND_FP8["bfloat16"]
    check_fp8(rng, m, n, k, block=False, out_dtype="float32", activation="silu", beta=0.5,
              with_bias=True, with_residual=True)


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_fp8_epilogue_transposed(rng, out_dtype):
    check_fp8(rng, 24, 392, 1024, block=False, out_dtype=out_dtype, activation="gelu_tanh",
              alpha=0.75, beta=-0.5, with_bias=True, with_residual=True,
              config=_swap(catalog.SWAP_TILES_FP8[1]))


def test_fp8_batched_and_shared_weight(rng):
    cfg = _swap(catalog.SWAP_TILES_FP8[0])
    check_fp8(rng, 5, 200, 256, block=False, batch=(3,), with_residual=True, config=cfg)
    check_fp8(rng, 5, 200, 256, block=False, batch=(2,), b_batch=(2,), config=cfg)


def test_fp8_split_is_reproducible(rng):
    a = fp8_operand(rng, (8, 8192), jnp.float8_e4m3fn)
    b = fp8_operand(rng, (1024, 8192), jnp.float8_e4m3fn)
    f = jax.jit(lambda a, b: hopper_fp8_matmul(a, b, 0.25, 0.5, out_dtype=jnp.float32,
                                               config=_swap(catalog.SWAP_TILES_FP8[0])))
    first = np.asarray(f(a, b), np.float64)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T * 0.125
    assert rel_frob(first, want) < REL_FROB_BOUND_FP8["float32"]
    for _ in range(10):
        assert np.array_equal(first, np.asarray(f(a, b)))
