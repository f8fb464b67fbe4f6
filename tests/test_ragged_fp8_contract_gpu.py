"""hopper_ragged_fp8_contract (the grouped_contraction_fp8 kernel family, fp8_ragged_dot's weight
gradient) on an sm_90 GPU against float64 of the fp8 values: every dtype pair and cluster, group
boundaries at every byte of a 128-wide k-block (the zeroed columns, whole 16-byte chunks and the
partial one), adversarial sizes, rows and columns that need padding, G = 1024, out dtypes, the
(M, P) layout, CUDA graphs and repeatability; with block scales (grouped_contraction_fp8_block)
every tile, groups starting at every offset of a 128-row scale block (the head zeroed too),
adversarial sizes and padding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (ADVERSARIAL_SIZES, REL_FROB_BOUND_FP8, REL_FROB_BOUND_FP8_BLOCK,
                          block_scales, contract_reference64, dequantize_blocks64, fp8_operand,
                          poisoned_call, rel_frob, run_in_command_buffer, to64)
from jax_hopper import GemmConfig, hopper_ragged_fp8_contract
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

FAMILY = catalog.FAMILIES["grouped_contraction_fp8"]
BLOCK_FAMILY = catalog.FAMILIES["grouped_contraction_fp8_block"]
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def _check(rng, m, p, q, group_sizes, *, pair=(E4M3, E5M2), out_dtype="bfloat16", config=None,
           transposed=True):
    """x^T (P, M) and y^T (Q, M) of random fp8 values (or x (M, P), y (M, Q)), scales 0.5 and
    1 / (4 sqrt(M)) so that long groups keep their sums near 1."""
    xt, yt = fp8_operand(rng, (p, m), pair[0]), fp8_operand(rng, (q, m), pair[1])
    xs, ys = jnp.float32(0.5), jnp.float32(1 / (4 * np.sqrt(m)))
    gs = jnp.asarray(group_sizes, jnp.int32)
    args = (xt, yt) if transposed else (xt.T, yt.T)

    def fn(x, y, gs):
        return hopper_ragged_fp8_contract(x, y, gs, xs, ys, out_dtype=out_dtype, config=config,
                                          transposed=transposed)

    out = poisoned_call(fn, (len(group_sizes), p, q), out_dtype, *args, gs)
    ref = contract_reference64(to64(xt).T * 0.5, to64(yt).T * float(ys), group_sizes)
    assert out.dtype == jnp.dtype(out_dtype)
    err = rel_frob(out, ref)
    assert err < REL_FROB_BOUND_FP8[out_dtype], (m, p, q, group_sizes, err)
    # A group with no rows is exactly zero (no k-blocks: the accumulators stay 0).
    empty = [g for g, s in enumerate(ref.reshape(len(group_sizes), -1)) if not s.any()]
    assert np.all(to64(out)[empty] == 0)
    return out


@pytest.mark.parametrize("cluster", FAMILY.clusters, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("pair", FAMILY.dtypes, ids=lambda p: "x".join(d[8:] for d in p))
def test_every_pair_tile_and_cluster(rng, pair, tile, cluster):
    sizes = rng.multinomial(1520, np.ones(7) / 7)
    _check(rng, 1520, 320, 520, list(sizes), pair=pair,
           config=GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0],
                                      cluster_n=cluster[1]))


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_out_dtypes(rng, out_dtype):
    _check(rng, 640, 256, 264, [100, 0, 313, 227], out_dtype=out_dtype)


# M not a multiple of 16 (padded columns), P and Q not multiples of 8, one row, G = 1024 groups
# of a few rows, a long group.
@pytest.mark.parametrize("m,p,q,groups", [(333, 100, 36, 3), (1, 64, 64, 1),
                                          (2048, 64, 128, 1024), (5000, 128, 256, 2)])
def test_shapes(rng, m, p, q, groups):
    _check(rng, m, p, q, list(rng.multinomial(m, np.ones(groups) / groups)))


def test_rows_first_layout_is_copied(rng):
    _check(rng, 600, 192, 256, [200, 0, 250, 100], transposed=False)


_GRAPH_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, {tests!r})
from gemm_helpers import contract_reference64, rel_frob, to64
from jax_hopper import hopper_ragged_fp8_contract
xt = (jax.random.normal(jax.random.key(0), (256, 512)) * 4).astype(jnp.float8_e4m3fn)
yt = (jax.random.normal(jax.random.key(1), (384, 512)) * 4).astype(jnp.float8_e5m2)
f = jax.jit(lambda x, y, g: jnp.tanh(hopper_ragged_fp8_contract(
    x, y, g + 1, 0.25, 0.01, out_dtype=jnp.float32)))
for sizes in ([99, 100, 200, 109], [0, 511, -1, 0], [10, 20, 30, 40]):
    g = jnp.asarray(sizes, jnp.int32)
    want = np.tanh(contract_reference64(to64(xt).T * 0.25, to64(yt).T * 0.01,
                                        np.asarray(sizes) + 1))
    print("ERR", rel_frob(f(xt, yt, g), want), flush=True)
"""


def test_runs_inside_an_xla_command_buffer():
    errors = run_in_command_buffer(_GRAPH_CHILD, "hopper_ragged_fp8_contract",
                                   "jax_hopper_gemm_grouped_contraction_fp8")
    assert len(errors) == 3 and max(errors) < REL_FROB_BOUND_FP8["float32"], errors


def test_bitwise_repeatable(rng):
    xt, yt = fp8_operand(rng, (256, 1000), E4M3), fp8_operand(rng, (512, 1000), E5M2)
    gs = jnp.asarray([200, 0, 500, 1, 299], jnp.int32)
    fn = jax.jit(hopper_ragged_fp8_contract)
    first = np.asarray(fn(xt, yt, gs, 1.0, 1.0).astype(jnp.float32))
    for _ in range(3):
        assert np.array_equal(np.asarray(fn(xt, yt, gs, 1.0, 1.0).astype(jnp.float32)), first)


def _check_block(rng, m, p, q, group_sizes, *, out_dtype="bfloat16", config=None):
    """x^T (P, M) scaled per row and 128 of M, y^T (Q, M) per 128 x 128 block, random scales
    (2^-4 .. 2^4) against float64 of the dequantised operands."""
    e4m3 = "float8_e4m3fn"
    xt, yt = fp8_operand(rng, (p, m), e4m3), fp8_operand(rng, (q, m), e4m3)
    mb = -(-m // 128)
    xs = block_scales(rng, (p, mb))
    ys = block_scales(rng, (-(-q // 128), mb)) / (4 * np.sqrt(m))
    gs = jnp.asarray(group_sizes, jnp.int32)

    def fn(x, y, gs):
        return hopper_ragged_fp8_contract(x, y, gs, xs, ys, out_dtype=out_dtype, config=config)

    out = poisoned_call(fn, (len(group_sizes), p, q), out_dtype, xt, yt, gs)
    x64 = dequantize_blocks64(xt, xs, rows_per_scale=1)
    y64 = dequantize_blocks64(yt, ys, rows_per_scale=128)
    ref = contract_reference64(x64.T, y64.T, group_sizes)
    err = rel_frob(out, ref)
    assert err < REL_FROB_BOUND_FP8_BLOCK[out_dtype], (m, p, q, group_sizes, err)
    empty = [g for g, s in enumerate(ref.reshape(len(group_sizes), -1)) if not s.any()]
    assert np.all(to64(out)[empty] == 0)


# The two recipes' checks: per tensor (grouped_contraction_fp8) and block scales
# (grouped_contraction_fp8_block), each with its family's tiles.
SCALINGS = {"tensor": (FAMILY, _check), "block": (BLOCK_FAMILY, _check_block)}


@pytest.mark.parametrize("scaling,tile", [(s, t) for s, (fam, _) in SCALINGS.items()
                                          for t in fam.tiles], ids=lambda v: getattr(v, "tag", v))
def test_boundary_at_every_offset(rng, scaling, tile):
    """Groups of 1..131 rows: every residue of a 128-wide k-block ends a group (the zeroed
    columns take every length: whole chunks and each byte of the partial one), and the groups
    start at every column offset, so with block scales at every offset of a 128-row scale
    block (a head of up to 127 columns zeroed too, each k-block reading its block's scales)."""
    sizes = [1 + (37 * i) % 131 for i in range(131)]
    SCALINGS[scaling][1](rng, sum(sizes) + 16, 192, 264, sizes,
                         config=GemmConfig.for_tile(tile, stream_k=False))


@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("case", list(ADVERSARIAL_SIZES))
def test_adversarial_sizes(rng, case, scaling):
    SCALINGS[scaling][1](rng, 704, 256, 384, ADVERSARIAL_SIZES[case])


@pytest.mark.parametrize("m,p,q,groups,out_dtype", [(333, 100, 36, 3, "float32"),
                                                    (4096, 256, 512, 8, "bfloat16"),
                                                    (2048, 64, 128, 300, "float16")])
def test_block_scales_shapes(rng, m, p, q, groups, out_dtype):
    _check_block(rng, m, p, q, list(rng.multinomial(m, np.ones(groups) / groups)),
                 out_dtype=out_dtype)
