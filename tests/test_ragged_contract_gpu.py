"""hopper_ragged_contract (the grouped_contraction kernel family, hopper_ragged_dot's weight
gradient) on an sm_90 GPU against float64: every compiled tile, cluster and dtype, group
boundaries at every row offset of a k-block (the zeroed tail), adversarial sizes (empty groups,
one group holding every row, negative, sums above and below M), unaligned P and Q, G = 1024,
vmap's entries in one launch (groups given their starts), gradients of both ops, CUDA graphs
and repeatability."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (ADVERSARIAL_SIZES, REL_FROB_BOUND, check_contract_entries,
                          contract_grads64, contract_reference64, poisoned_call, random_operand,
                          rel_frob, run_in_command_buffer, to64)
from jax_hopper import GemmConfig, hopper_ragged_contract, hopper_ragged_dot
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

FAMILY = catalog.FAMILIES["grouped_contraction"]


def _check(rng, m, p, q, group_sizes, *, dtype="bfloat16", out_dtype=None, config=None):
    x = random_operand(rng, (m, p), dtype)
    # Scaled so a group of many rows keeps its sums near 1 whatever M is.
    y = (random_operand(rng, (m, q), dtype).astype(jnp.float32) / np.sqrt(m)).astype(dtype)
    gs = jnp.asarray(group_sizes, jnp.int32)
    out_dtype = out_dtype or dtype

    def fn(x, y, gs):
        return hopper_ragged_contract(x, y, gs, out_dtype=out_dtype, config=config)

    out = poisoned_call(fn, (len(group_sizes), p, q), out_dtype, x, y, gs)
    ref = contract_reference64(x, y, group_sizes)
    assert out.dtype == jnp.dtype(out_dtype)
    err = rel_frob(out, ref)
    assert err < REL_FROB_BOUND[jnp.dtype(out_dtype).name], (m, p, q, group_sizes, err)
    # A group with no rows is exactly zero (no k-blocks: the accumulators stay 0).
    empty = [g for g, s in enumerate(np.asarray(ref).reshape(len(group_sizes), -1)) if not s.any()]
    assert np.all(to64(out)[empty] == 0)
    return out


@pytest.mark.parametrize("cluster", FAMILY.clusters, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_every_tile_and_cluster(rng, dtype, tile, cluster):
    sizes = rng.multinomial(1500, np.ones(7) / 7)
    _check(rng, 1500, 320, 520, list(sizes), dtype=dtype,
           config=GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0],
                                      cluster_n=cluster[1]))


@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
def test_boundary_at_every_offset(rng, tile):
    """Groups of 1..67 rows: every residue of a 64-row k-block ends a group, so the zeroed
    tail of the last k-block takes every length, and the groups start at every offset."""
    sizes = [1 + (7 * i) % 67 for i in range(64)]
    _check(rng, sum(sizes) + 9, 192, 136, sizes,
           config=GemmConfig.for_tile(tile, stream_k=False))


@pytest.mark.parametrize("case", list(ADVERSARIAL_SIZES))
def test_adversarial_sizes(rng, case):
    sizes = ADVERSARIAL_SIZES[case]
    _check(rng, 700, 256, 384, sizes)


@pytest.mark.parametrize("cluster", FAMILY.clusters, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
def test_vmap_folds_the_entries_into_one_launch(rng, tile, cluster):
    """vmap over entries, each with its own adversarial sizes (rows past its groups, all in
    one group, none): one launch whose groups start where their bounds say (not where the
    group before ends), each entry against float64, empty groups zero, nested vmap too
    (gemm_helpers.check_contract_entries)."""
    check_contract_entries(rng, 700, 136, 192, REL_FROB_BOUND["float32"],
                           config=GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0],
                                                      cluster_n=cluster[1]))


@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
def test_group_bounds_read_as_given(rng, tile):
    """The primitive's bounds (2, G) (starts, then ends) read as the kernel reads them,
    whatever they hold: a start past its end, negative, past the rows or int32's reach,
    groups overlapping and out of order. Group g contracts rows [first, last), first its start
    clamped to [0, R] and last its end clamped to [first, R] (grouped_contraction.cuh), as a
    numpy reading in float64 does; nothing past the operands is read (the result would show
    it; scripts/sanitize.sh proves it). The wrapper only ever passes ordered, disjoint bounds
    (ragged_tiles.entry_bounds), which the CPU reference assumes."""
    from jax_hopper.gemm.ragged_contract import hopper_ragged_contract_p
    r, p, q = 700, 136, 192
    x = random_operand(rng, (r, p), "bfloat16")
    y = (random_operand(rng, (r, q), "bfloat16").astype(jnp.float32) / np.sqrt(r)
         ).astype(jnp.bfloat16)
    starts = [0, 100, 650, -50, 300, 690, 2**31 - 1, 10, 333, 0]
    ends = [100, 50, 800, 20, 600, 700, 5, 2**31 - 1, 334, -7]
    config = GemmConfig.for_tile(tile, stream_k=False)
    out = jax.jit(lambda x, y, b: hopper_ragged_contract_p.bind(
        x[None], y[None], b, out_dtype=jnp.dtype(jnp.float32), config=config))(
            x, y, jnp.asarray([starts, ends], jnp.int32))
    x64, y64 = to64(x), to64(y)
    for g, (start, end) in enumerate(zip(starts, ends)):
        first = min(max(start, 0), r)
        last = min(max(end, first), r)
        want = x64[first:last].T @ y64[first:last]
        if first == last:
            assert np.all(to64(out[g]) == 0), f"group {g}: empty, not zero"
        else:
            assert rel_frob(out[g], want) < REL_FROB_BOUND["float32"], f"group {g}"


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_out_dtypes(rng, out_dtype):
    _check(rng, 640, 256, 264, [100, 0, 313, 227], out_dtype=out_dtype)


# P, Q not multiples of 8 (padded), one row, G = 1024 groups of a few rows, a long group.
@pytest.mark.parametrize("m,p,q,groups", [(333, 100, 36, 3), (1, 64, 64, 1), (2048, 64, 128, 1024),
                                          (5000, 128, 256, 2)])
def test_shapes(rng, m, p, q, groups):
    _check(rng, m, p, q, list(rng.multinomial(m, np.ones(groups) / groups)))


def test_grad_of_ragged_dot_weights_both_layouts(rng):
    m, k, n, g = 900, 256, 384, 6
    lhs = random_operand(rng, (m, k), "bfloat16")
    gs = jnp.asarray([150, 0, 263, 180, 277, 20], jnp.int32)  # 10 rows past every group
    dy = random_operand(rng, (m, n), "float32")
    for transpose_rhs in (False, True):
        shape = (g, n, k) if transpose_rhs else (g, k, n)
        rhs = (random_operand(rng, shape, "bfloat16").astype(jnp.float32) / 16
               ).astype(jnp.bfloat16)

        def loss(rhs, transpose_rhs=transpose_rhs):
            out = hopper_ragged_dot(lhs, rhs, gs, transpose_rhs=transpose_rhs,
                                    out_dtype=jnp.float32)
            return jnp.sum(out * dy)

        got = jax.jit(jax.grad(loss))(rhs)
        dp = np.asarray(dy, np.float64)
        want = contract_reference64(lhs, dp, np.asarray(gs))
        want = np.swapaxes(want, 1, 2) if transpose_rhs else want
        assert got.shape == rhs.shape and got.dtype == rhs.dtype
        # d out is rounded to bfloat16 before the product, as for d lhs.
        assert rel_frob(got, want) < 1e-2, transpose_rhs


def test_grad_of_contraction(rng):
    m, p, q = 600, 192, 256
    x = random_operand(rng, (m, p), "bfloat16")
    y = random_operand(rng, (m, q), "bfloat16")
    sizes = [200, 0, 250, 100]  # 50 rows past every group: their gradients are 0
    gs = jnp.asarray(sizes, jnp.int32)
    dout = random_operand(rng, (4, p, q), "float32")
    got = jax.jit(jax.grad(lambda x, y: jnp.sum(
        hopper_ragged_contract(x, y, gs, out_dtype=jnp.float32) * dout), (0, 1)))(x, y)
    want_x, want_y = contract_grads64(x, y, dout, sizes)
    assert rel_frob(got[0], want_x) < 2e-2 and rel_frob(got[1], want_y) < 2e-2


_GRAPH_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, {tests!r})
from gemm_helpers import contract_reference64, rel_frob
from jax_hopper import hopper_ragged_contract
x = jax.random.normal(jax.random.key(0), (512, 256), jnp.float32).astype(jnp.bfloat16)
y = jax.random.normal(jax.random.key(1), (512, 384), jnp.float32).astype(jnp.bfloat16)
f = jax.jit(lambda x, y, g: jnp.tanh(hopper_ragged_contract(jnp.sin(x), y, g + 1,
                                                            out_dtype=jnp.float32) / 8))
for sizes in ([99, 100, 200, 109], [0, 511, -1, 0], [10, 20, 30, 40]):
    g = jnp.asarray(sizes, jnp.int32)
    want = np.tanh(contract_reference64(jnp.sin(x), y, np.asarray(sizes) + 1) / 8)
    print("ERR", rel_frob(f(x, y, g), want), flush=True)
"""


def test_runs_inside_an_xla_command_buffer():
    errors = run_in_command_buffer(_GRAPH_CHILD, "hopper_ragged_contract",
                                   "jax_hopper_gemm_grouped_contraction")
    assert len(errors) == 3 and max(errors) < REL_FROB_BOUND["bfloat16"], errors


def test_bitwise_repeatable(rng):
    x = random_operand(rng, (1000, 256), "bfloat16")
    y = random_operand(rng, (1000, 512), "bfloat16")
    gs = jnp.asarray([200, 0, 500, 1, 299], jnp.int32)
    fn = jax.jit(hopper_ragged_contract)
    first = np.asarray(fn(x, y, gs).astype(jnp.float32))
    for _ in range(3):
        assert np.array_equal(np.asarray(fn(x, y, gs).astype(jnp.float32)), first)
