"""hopper_ragged_contract without a GPU: the reference lowering against float64 (adversarial
sizes, every out dtype), its gradients, hopper_ragged_dot's weight gradient through it against
jax.grad of jax.lax.ragged_dot, vmap, empty problems, the config choice and the argument
errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND, check_contract_entries, contract_grads64,
                          contract_reference64, count_eqns, emulate_contraction_kernel,
                          entry_sizes, random_operand, rel_frob, sizes64, to64)
from jax_hopper import GemmConfig, hopper_ragged_contract, hopper_ragged_dot
from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.heuristics import choose_contraction_config
from jax_hopper.kernels import catalog


@pytest.mark.parametrize("sizes", [[10, 0, -3, 50, 60], [0, 100, 0], [2**31 - 1, 5],
                                   [1] * 20, [0, 0]], ids=str)
@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_reference_against_float64(rng, sizes, out_dtype):
    x = random_operand(rng, (100, 24), "bfloat16")
    y = random_operand(rng, (100, 40), "bfloat16")
    got = jax.jit(hopper_ragged_contract, static_argnames="out_dtype")(
        x, y, jnp.asarray(sizes, jnp.int32), out_dtype=out_dtype)
    assert got.shape == (len(sizes), 24, 40) and got.dtype == jnp.dtype(out_dtype)
    assert rel_frob(got, contract_reference64(x, y, sizes)) < REL_FROB_BOUND[out_dtype]


def test_grads_against_float64(rng):
    m, p, q = 90, 16, 24
    x, y = random_operand(rng, (m, p), "float16"), random_operand(rng, (m, q), "float16")
    sizes = [30, 0, 40]  # 20 rows past every group: zero gradients
    dout = random_operand(rng, (3, p, q), "float32")
    got = jax.grad(lambda x, y: jnp.sum(hopper_ragged_contract(
        x, y, jnp.asarray(sizes), out_dtype=jnp.float32) * dout), (0, 1))(x, y)
    want_x, want_y = contract_grads64(x, y, dout, sizes)
    assert got[0].dtype == x.dtype and got[1].dtype == y.dtype
    assert rel_frob(got[0], want_x) < 5e-3 and rel_frob(got[1], want_y) < 5e-3


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
def test_ragged_dot_weight_grad_equals_lax(rng, transpose_rhs):
    m, k, n, g = 120, 32, 48, 5
    lhs = random_operand(rng, (m, k), "bfloat16")
    rhs = random_operand(rng, (g, n, k) if transpose_rhs else (g, k, n), "bfloat16")
    sizes = jnp.asarray([30, -4, 50, 0, 25], jnp.int32)  # 15 rows past every group
    dy = random_operand(rng, (m, n), "float32")

    def ours(rhs):
        return jnp.sum(hopper_ragged_dot(lhs, rhs, sizes, transpose_rhs=transpose_rhs,
                                         out_dtype=jnp.float32) * dy)

    def lax_version(rhs):
        r = jnp.swapaxes(rhs, 1, 2) if transpose_rhs else rhs
        return jnp.sum(jax.lax.ragged_dot(lhs, r, jnp.maximum(sizes, 0),
                                          preferred_element_type=jnp.float32) * dy)

    got, want = jax.grad(ours)(rhs), jax.grad(lax_version)(rhs)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert rel_frob(got, to64(want)) < 1e-2


def test_vmap_shares_unmapped_operands(rng):
    x = random_operand(rng, (3, 60, 16), "bfloat16")
    y = random_operand(rng, (60, 8), "bfloat16")
    sizes = np.array([[20, 40], [0, 60], [59, 0]])
    out = jax.vmap(lambda x, s: hopper_ragged_contract(x, y, s, out_dtype=jnp.float32))(
        x, jnp.asarray(sizes, jnp.int32))
    for i in range(3):
        assert rel_frob(out[i], contract_reference64(x[i], y, sizes[i])) < 1e-4


def test_vmap_folds_the_entries_into_one_launch(rng):
    """The reference lowering of the folded launch (stacked rows, each group's bounds)."""
    check_contract_entries(rng, 70, 24, 40, 1e-4)


def test_vmap_feeds_the_kernel_each_entrys_rows(rng, kernel_emulation):
    """The folded launch's operands and bounds read as the kernel reads them
    (gemm_helpers.emulate_contraction_kernel): each entry's groups take its own rows only,
    never its rows past every group or another entry's, whatever its sizes say."""
    emulate_contraction_kernel(kernel_emulation)
    check_contract_entries(rng, 70, 24, 40, 1e-6, launch=("pure_callback",))


@pytest.mark.parametrize("m", [1, 7, 64])
def test_entry_bounds_against_the_sizes(m):
    """ragged_tiles.entry_bounds: entry e's group g spans e m + [start, end) of its own sizes
    made valid (gemm_helpers.sizes64); an entry's bounds stay within its rows."""
    sizes = entry_sizes(m)
    bounds = np.asarray(ragged_tiles.entry_bounds(jnp.asarray(sizes, jnp.int32), m))
    for e, entry in enumerate(sizes):
        valid = sizes64(entry, m)
        ends = e * m + np.cumsum(valid)
        np.testing.assert_array_equal(bounds[1, e * len(entry):(e + 1) * len(entry)], ends)
        np.testing.assert_array_equal(bounds[0, e * len(entry):(e + 1) * len(entry)],
                                      ends - valid)


@pytest.mark.parametrize("m,p,q,groups", [(0, 8, 8, 2), (8, 0, 8, 2), (8, 8, 8, 0)])
def test_empty_problems(rng, m, p, q, groups):
    out = hopper_ragged_contract(random_operand(rng, (m, p), "bfloat16"),
                                 random_operand(rng, (m, q), "bfloat16"),
                                 jnp.full((groups,), 4, jnp.int32))
    assert out.shape == (groups, p, q) and not np.any(np.asarray(out, np.float32))


def test_config_choice():
    big = choose_contraction_config(4096, 14336)
    assert (big.block_n, big.schedule, big.cluster_m, big.cluster_n) == \
        (256, "cooperative", 2, 1)
    one_row_tile = choose_contraction_config(128, 4096)
    assert (one_row_tile.cluster_m, one_row_tile.cluster_n) == (1, 2)
    small = choose_contraction_config(64, 256)
    assert (small.cluster_m, small.cluster_n) == (1, 1)
    for cfg in (big, one_row_tile, small):
        cfg.validate("bfloat16", True, True, family="grouped_contraction")


@pytest.mark.parametrize("call,match", [
    (lambda x, y, g: hopper_ragged_contract(x[0], y, g), "must be .M, P. and .M, Q."),
    (lambda x, y, g: hopper_ragged_contract(x, y[:10], g), "same rows M"),
    (lambda x, y, g: hopper_ragged_contract(x, y, g[None]), "1-D integer array"),
    (lambda x, y, g: hopper_ragged_contract(x, y, g.astype(jnp.float32)), "integer"),
    (lambda x, y, g: hopper_ragged_contract(x, y.astype(jnp.float16), g), "differ"),
    (lambda x, y, g: hopper_ragged_contract(x.astype(jnp.float32), y, g), "x.dtype"),
    (lambda x, y, g: hopper_ragged_contract(x, y, g, config=GemmConfig()), "stream_k"),
    (lambda x, y, g: hopper_ragged_contract(
        x, y, g, config=GemmConfig(block_m=64, stream_k=False, schedule="pingpong")),
     "not compiled for the grouped contraction"),
])
def test_errors_name_the_argument(rng, call, match):
    x = random_operand(rng, (64, 16), "bfloat16")
    y = random_operand(rng, (64, 32), "bfloat16")
    with pytest.raises(ValueError, match=match):
        call(x, y, jnp.asarray([20, 20, 24], jnp.int32))


def test_grad_under_vmap_equals_lax(rng):
    """jax.grad inside jax.vmap: the weight gradient's contraction per batch entry."""
    x = random_operand(rng, (3, 60, 16), "bfloat16")
    w = random_operand(rng, (4, 16, 8), "bfloat16")
    sizes = jnp.asarray([[10, 20, 20, 10], [0, 60, 0, 0], [30, 0, -1, 30]], jnp.int32)

    def loss(ragged):
        return lambda x, w, s: jnp.sum(ragged(x, w, s, preferred_element_type=jnp.float32) ** 2)

    fn = jax.vmap(jax.grad(loss(hopper_ragged_dot), (0, 1)), (0, None, 0))
    # Every entry's weight gradient in one contraction, no loop.
    jaxpr = jax.make_jaxpr(fn)(x, w, sizes).jaxpr
    assert count_eqns(jaxpr, ("hopper_ragged_contract",)) == 1
    assert count_eqns(jaxpr, ("scan", "while")) == 0
    got = jax.jit(fn)(x, w, sizes)
    for i in range(3):
        want = jax.grad(loss(jax.lax.ragged_dot), (0, 1))(x[i], w, jnp.maximum(sizes[i], 0))
        assert rel_frob(got[0][i], to64(want[0])) < 1e-2
        assert rel_frob(got[1][i], to64(want[1])) < 1e-2


def test_grads_with_the_cotangent_as_is(rng):
    """bf16 out, no activation, alpha 1: the cotangent goes to both backward products as it is
    (no copy), and the gradients still match jax.grad of jax.lax.ragged_dot."""
    x, w = random_operand(rng, (80, 16), "bfloat16"), random_operand(rng, (3, 16, 24), "bfloat16")
    sizes = jnp.asarray([30, 0, 40], jnp.int32)
    dy = random_operand(rng, (80, 24), "bfloat16")

    def loss(ragged):
        return lambda x, w: jnp.sum((ragged(x, w, sizes) * dy).astype(jnp.float32))

    got = jax.grad(loss(hopper_ragged_dot), (0, 1))(x, w)
    want = jax.grad(loss(jax.lax.ragged_dot), (0, 1))(x, w)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and rel_frob(a, to64(b)) < 1e-2
