"""hopper_matmul on an sm_90 GPU against float64 references."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND, act64, check_matmul as _check,
                          matmul_operands as _operands, random_operand, reference64, rel_frob, to64)
from jax_hopper import GemmConfig, _ffi, hopper_glu, hopper_matmul
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

LAYOUTS = list(itertools.product((False, True), repeat=2))  # (transpose_a, transpose_b)


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_layouts_and_dtypes(rng, dtype, transpose_a, transpose_b):
    _check(rng, 384, 512, 320, dtype=dtype, transpose_a=transpose_a, transpose_b=transpose_b)


# Edge shapes: 1, primes, non-multiples of every tile size, and a 16385-row problem. Each
# dimension that is a row pitch of a stored operand stays a multiple of 8 so TMA can address it
# (the fallback has its own test).
@pytest.mark.parametrize("m,n,k", [
    (1, 8, 8), (7, 16, 8), (127, 136, 72), (129, 264, 136), (257, 120, 4104),
    (1000, 1000, 1000), (16385, 256, 64), (64, 12288, 128), (131, 8, 1048)])
def test_edge_shapes(rng, m, n, k):
    _check(rng, m, n, k)


@pytest.mark.parametrize("n", [1, 3, 13, 257])
def test_unaligned_n_with_k_major_b(rng, n):
    # b as (N, K): N is not a pitch, so any N runs in the kernel (output computed padded).
    _check(rng, 200, n, 64, transpose_b=True)


@pytest.mark.parametrize("m", [1, 5, 301])
def test_unaligned_m_with_k_major_a(rng, m):
    _check(rng, m, 64, 64)


@pytest.mark.parametrize("tile", catalog.TILE_SHAPES, ids=lambda t: t.tag)
@pytest.mark.parametrize("cluster", catalog.CLUSTER_SHAPES, ids=str)
@pytest.mark.parametrize("raster", catalog.RASTERS)
def test_every_config(rng, tile, cluster, raster):
    cfg = GemmConfig.for_tile(tile, cluster_m=cluster[0], cluster_n=cluster[1],
                              raster=raster, group_size=3)
    # 5 x 3 tiles of 128 x 256 with a k tail: odd tile counts leave a cluster's second tile
    # outside the output, which must be clipped.
    _check(rng, 600, 712, 456, config=cfg)
    _check(rng, 600, 700, 456, config=cfg, transpose_a=True, transpose_b=True, dtype="float16")


PINGPONG = [t for t in catalog.TILE_SHAPES if t.schedule == "pingpong"]


# Ping-pong: the consumer warpgroups alternate over a cluster's tiles, so a cluster must get
# several. 2296 x 2200 is 18 x 18 tiles of 128 x 128 (324; 162 2-CTA cluster tiles), or 36 x 9
# of 64 x 256: on 132 SMs every cluster gets 2-3 tiles, some an odd count (warpgroup 0 one
# more than warpgroup 1), and the last row and column of tiles are partial; K = 456 leaves a
# k tail. (M and N stay multiples of 8: they are row pitches when transposed.)
@pytest.mark.parametrize("tile", PINGPONG, ids=lambda t: t.tag)
@pytest.mark.parametrize("cluster", catalog.CLUSTER_SHAPES, ids=str)
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
def test_pingpong_alternates_tiles(rng, tile, cluster, transpose_a, transpose_b):
    cfg = GemmConfig.for_tile(tile, cluster_m=cluster[0], cluster_n=cluster[1], group_size=5)
    _check(rng, 2296, 2200, 456, config=cfg, transpose_a=transpose_a, transpose_b=transpose_b)


@pytest.mark.parametrize("tile", PINGPONG, ids=lambda t: t.tag)
def test_pingpong_epilogue_and_batch(rng, tile):
    # Many tiles per cluster (3 x 10 x 9 = 270 of 128 x 128), each warpgroup's epilogue with
    # bias, residual and an activation while the other runs its mainloop; one long K (64
    # k-blocks, more laps of the ring per tile than stages) so the warpgroups' pipeline
    # positions must skip correctly.
    cfg = GemmConfig.for_tile(tile, cluster_m=2)
    m, n, k = 1200, 1104, 4096
    _check(rng, m, n, k, batch=(3,), config=cfg, out_dtype="float32", activation="gelu",
           alpha=0.5, beta=-1.5, bias=random_operand(rng, (n,), "float32"),
           residual=random_operand(rng, (3, m, n), "float32"))


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_out_dtypes(rng, out_dtype):
    _check(rng, 333, 520, 264, out_dtype=out_dtype)


def test_batched(rng):
    _check(rng, 130, 264, 72, batch=(3,))
    _check(rng, 136, 264, 72, batch=(2, 2), transpose_a=True)


def test_batched_against_shared_operand(rng):
    a = random_operand(rng, (4, 130, 72), "bfloat16")
    b = random_operand(rng, (72, 264), "bfloat16")
    out = jax.jit(lambda a, b: hopper_matmul(a, b, strict=True))(a, b)
    assert rel_frob(out, reference64(a, b)) < REL_FROB_BOUND["bfloat16"]


@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "gelu", "silu"])
def test_epilogue(rng, activation):
    m, n, k = 300, 264, 136
    bias = random_operand(rng, (n,), "bfloat16")
    residual = random_operand(rng, (m, n), "bfloat16")
    _check(rng, m, n, k, bias=bias, activation=activation, residual=residual, alpha=0.5,
           beta=-1.5)


# What the activations may differ from float64 by, past float32's relative rounding: absolutely,
# in units of max(1, |x|): the quotient forms' flush to 0 below kZeroBelow (|x| 2^-30.97 at
# most), the erf GELU's Abramowitz & Stegun erfc (1.5e-7 absolute in erfc, halved).
ACTIVATION_ABS_ERROR = {"relu": 0.0, "gelu_tanh": 2.0**-30, "silu": 2.0**-30, "gelu": 1e-7}


@pytest.mark.parametrize("activation", list(ACTIVATION_ABS_ERROR))
@pytest.mark.parametrize("op,m,n,config", [
    ("matmul", 260, 16, None),  # the default: a narrow weight, likely swap-AB
    ("matmul", 260, 16, GemmConfig()),  # unswapped cooperative 128 x 256
    ("matmul", 8, 520, None),  # decode rows: swap-AB
    ("glu", 260, 16, None)])
def test_activation_values_element_by_element(rng, activation, op, m, n, config):
    """act(x) against float64 element by element, x from -80 to 80 (the tails included), +-Inf
    and NaN at random places among them, out float32: each product is a[i, 0] * b[0, j] (a bf16
    value times 1, -1, 0.5 or -2: exact), every other term 0, so the epilogue's activation
    alone is under test; hopper_glu's up product is 1 (a[:, 1] times its weight's row 1), NaN
    on the rows holding +-Inf or NaN."""
    grid = np.concatenate([np.linspace(-40.0, 40.0, max(m, n) - 6), [np.inf, -np.inf, np.nan] * 2])
    values = rng.permutation(np.asarray(jnp.asarray(grid, jnp.bfloat16).astype(jnp.float32)))
    scales = np.resize([1.0, -1.0, 0.5, -2.0], min(m, n))
    col, row = (values, scales) if m > n else (scales, values)
    a = np.zeros((m, 16), np.float32)
    b = np.zeros((16, n), np.float32)
    up = np.zeros((16, n), np.float32)
    a[:, 0], b[0, :] = col, row
    if op == "glu":
        a[:, 1], up[1, :] = 1.0, 1.0
        w = jnp.asarray(np.stack([b, up], axis=1), jnp.bfloat16)  # (K, 2, F): gate, up
        out = hopper_glu(jnp.asarray(a, jnp.bfloat16), w, activation=activation,
                         out_dtype=jnp.float32)
    else:
        out = hopper_matmul(jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16),
                            activation=activation, out_dtype=jnp.float32, config=config)
    with np.errstate(all="ignore"):
        x = a.astype(np.float64) @ b  # Inf * 0 in a term gives NaN, as on the GPU
        want = act64(x, activation) * (a.astype(np.float64) @ up if op == "glu" else 1.0)
    out = np.asarray(out, np.float64)
    for special in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(special(out), special(want)), special.__name__
    finite = np.isfinite(want)
    error = np.abs(out[finite] - want[finite])
    reach = np.maximum(1.0, np.abs(np.where(np.isfinite(x), x, 0.0)))[finite]  # relu(-Inf): 1
    bound = 1e-5 * np.abs(want[finite]) + ACTIVATION_ABS_ERROR[activation] * reach
    worst = np.argmax(error - bound)
    assert (error <= bound).all(), (x[finite][worst], out[finite][worst], want[finite][worst])


def test_repeated_runs_are_bitwise_identical(rng):
    a, b = _operands(rng, 1000, 1024, 2048, "bfloat16", False, False)
    f = jax.jit(lambda a, b: hopper_matmul(a, b, strict=True))
    first = np.asarray(f(a, b))
    for _ in range(3):
        assert np.array_equal(np.asarray(f(a, b)).view(np.uint16), first.view(np.uint16))


# Row pitches TMA cannot address (jax_hopper/gemm/pitch.py), each in some layout: K, M or N
# not a multiple of 8, edge sizes (1, 7, 63, 65), decode rows (the swap-AB kernels), a split
# plan (1000 x 3000) and a float32 output whose N is not a multiple of 4.
UNALIGNED = [(64, 64, 100), (100, 64, 64), (64, 100, 64), (37, 45, 1500), (1, 4096, 1501),
             (7, 1001, 4095), (63, 65, 129), (1000, 3000, 4101), (300, 2050, 1500)]


@pytest.mark.parametrize("m,n,k", UNALIGNED)
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
def test_unaddressable_pitches_run_on_the_kernel(rng, m, n, k, transpose_a, transpose_b):
    bias = jnp.asarray(rng.standard_normal((n,)), jnp.float32)
    residual = random_operand(rng, (m, n), "float32")
    _check(rng, m, n, k, out_dtype="float32", transpose_a=transpose_a, transpose_b=transpose_b,
           activation="gelu", bias=bias, residual=residual, strict=False)
    _check(rng, m, n, k, transpose_a=transpose_a, transpose_b=transpose_b, strict=False)
    a, b = _operands(rng, m, n, k, "bfloat16", transpose_a, transpose_b)
    hlo = jax.jit(lambda a, b: hopper_matmul(a, b, transpose_a=transpose_a,
                                             transpose_b=transpose_b)).lower(a, b).compile()
    assert "jax_hopper_gemm_matmul" in hlo.as_text(), "the product did not run on the kernel"


def test_unaddressable_pitch_grads(rng):
    """K = 1500: the forward pads x's K, d x's output pitch (K) is padded and sliced, and d w
    reads x as an MN-major operand with a 3000-byte pitch."""
    x = random_operand(rng, (512, 1500), "bfloat16")
    w = random_operand(rng, (1500, 264), "bfloat16")
    dy = random_operand(rng, (512, 264), "float32")

    def loss(fn):
        return lambda x, w: jnp.sum(fn(x, w).astype(jnp.float32) * dy)

    got = jax.jit(jax.grad(loss(lambda x, w: hopper_matmul(x, w, out_dtype=jnp.float32)),
                           (0, 1)))(x, w)
    want = (to64(dy) @ to64(w).T, to64(x).T @ to64(dy))
    for g, r in zip(got, want):
        assert g.shape == r.shape
        assert rel_frob(g, r) < REL_FROB_BOUND["bfloat16"]


# Stream-K (cuda/gemm/scheduler/stream_k_plan.h): when the last wave of tiles is at most 2/3 full,
# its tiles are split along K and their pieces summed through the workspace. Each case splits tiles
# into 2 to 5 pieces (tests/test_stream_k_cpu.py checks the plan itself).
BIG = dict(block_n=256, stages=4)
SMALL = dict(block_n=128, stages=6)


@pytest.mark.parametrize("m,n,k,tile,cluster_m,batch", [
    (1536, 1536, 4096, SMALL, 1, ()),    # 144 tiles on 132 SMs: 12 tiles in 4 pieces each
    (2560, 2048, 3000, BIG, 2, ()),      # 80 cluster tiles on 66: 14 split, a k tail
    (2176, 2304, 1560, SMALL, 2, ()),    # 162 cluster tiles on 66: two whole waves, 30 split
    (256, 1536, 2048, SMALL, 1, (6,)),   # batched: 144 tiles over six batch entries
])
def test_stream_k_split_tiles(rng, m, n, k, tile, cluster_m, batch):
    cfg = GemmConfig(**tile, cluster_m=cluster_m)
    kernel = cfg.kernel("matmul", "bfloat16", False, True)
    plan = cfg.plan(kernel, math.prod(batch), m, n, k, _ffi.resident_clusters(kernel, cluster_m))
    assert plan["sk_clusters"] > 0, "this shape must split tiles"
    _check(rng, m, n, k, config=cfg, batch=batch)
    _check(rng, m, n, k, config=cfg, batch=batch, transpose_a=True, dtype="float16",
           out_dtype="float32")


# Small M with a prime count of k-blocks: the plan pads them to a multiple of its pieces, the
# last piece reading k-blocks past K (zeros through TMA) in every operand layout; a K tail too.
@pytest.mark.parametrize("m,n,k", [(56, 1024, 10000), (104, 640, 4544)])
def test_split_with_k_blocks_of_zeros(rng, m, n, k):
    cfg = GemmConfig(**SMALL)
    kernel = cfg.kernel("matmul", "bfloat16", False, True)
    plan = cfg.plan(kernel, 1, m, n, k, _ffi.resident_clusters(kernel, 1))
    assert plan["sk_clusters"] > 0 and plan["k_blocks"] > math.ceil(k / 64), plan
    bias = random_operand(rng, (n,), "bfloat16")
    for ta, tb in itertools.product((False, True), repeat=2):
        _check(rng, m, n, k, config=cfg, transpose_a=ta, transpose_b=tb, out_dtype="float32",
               bias=bias, activation="gelu")


def test_stream_k_epilogue_on_split_tiles(rng):
    # The epilogue must see the whole sum: a nonlinear activation on a partial would differ.
    m, n, k = 1536, 1536, 4096
    bias = random_operand(rng, (n,), "bfloat16")
    residual = random_operand(rng, (m, n), "bfloat16")
    _check(rng, m, n, k, config=GemmConfig(**SMALL), bias=bias, activation="gelu",
           residual=residual, alpha=0.5, beta=-1.5)


def test_stream_k_matches_whole_tiles_and_is_reproducible(rng):
    a, b = _operands(rng, 1536, 1536, 4096, "bfloat16", False, False)
    split = jax.jit(lambda a, b: hopper_matmul(a, b, config=GemmConfig(**SMALL), strict=True,
                                               out_dtype="float32"))
    whole = jax.jit(lambda a, b: hopper_matmul(
        a, b, config=GemmConfig(**SMALL, stream_k=False), strict=True, out_dtype="float32"))
    first = np.asarray(split(a, b))
    # Only the order of fp32 additions differs from whole tiles.
    assert rel_frob(first, to64(whole(a, b))) < 1e-5
    for _ in range(3):  # pieces are summed in a fixed order
        assert np.array_equal(np.asarray(split(a, b)), first)


# The residual is loaded by TMA into the output's staging buffer, box for box (cuda/
# cuda/gemm/epilogue/store.cuh): every out dtype (64 or 32 columns per 128-byte box row), both tile
# widths, M and N tails (zero-filled loads, clipped stores), a padded N, a batched residual
# and one broadcast over the batch.
@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
@pytest.mark.parametrize("tile", [BIG, SMALL], ids=["128x256", "128x128"])
def test_residual_loaded_by_tma(rng, out_dtype, tile):
    cfg = GemmConfig(**tile)
    m, n, k = 200, 328, 136
    _check(rng, m, n, k, config=cfg, out_dtype=out_dtype, beta=0.75,
           residual=random_operand(rng, (m, n), out_dtype))
    _check(rng, m, n, k, config=cfg, out_dtype=out_dtype, batch=(3,), activation="relu",
           residual=random_operand(rng, (3, m, n), out_dtype))
    _check(rng, m, n, k, config=cfg, out_dtype=out_dtype, batch=(3,),
           residual=random_operand(rng, (m, n), out_dtype))
    _check(rng, 129, 131, 72, config=cfg, out_dtype=out_dtype, transpose_b=True, beta=-2.0,
           residual=random_operand(rng, (129, 131), out_dtype))
