"""hopper_glu without a GPU: argument checks, and the reference lowering against the unit
written in jnp, under jit, grad and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import check_summed_weight_grad, glu_reference64, random_operand, rel_frob
from jax_hopper import GemmConfig, hopper_glu, tune
from jax_hopper.gemm import heuristics


@pytest.fixture
def xw(rng):
    return random_operand(rng, (4, 32, 64), "bfloat16"), random_operand(rng, (64, 2, 24),
                                                                        "bfloat16")


@pytest.mark.parametrize("kwargs,match", [
    (dict(w_shape=(64, 48)), r"w.shape=\(64, 48\) must be \(K, 2, F\)"),
    (dict(w_shape=(64, 3, 24)), r"must be \(K, 2, F\)"),
    (dict(w_shape=(32, 2, 24)), r"x's last dimension must be w's first \(K = 32\)"),
    (dict(bias=np.zeros(48)), r"bias.shape=\(48,\) must be \(2, F\) = \(2, 24\)"),
    (dict(residual=np.zeros((32, 25))), r"residual.shape=\(32, 25\) must broadcast"),
    (dict(activation="swish"), r"activation='swish' must be one of"),
    (dict(config="big"), r"config must be a GemmConfig"),
    (dict(config=GemmConfig(block_n=64)), r"config: \(block_m, block_n"),
    (dict(config=GemmConfig(block_n=192)), r"is not compiled for the gated unit"),
    (dict(out_dtype=jnp.int8), r"out_dtype=int8 must be one of"),
    (dict(alpha=jnp.ones(2)), r"alpha=.* must be a real Python or NumPy scalar"),
])
def test_bad_arguments_name_the_rule(xw, kwargs, match):
    x, w = xw
    if "w_shape" in kwargs:
        w = jnp.zeros(kwargs.pop("w_shape"), jnp.bfloat16)
    with pytest.raises(ValueError, match=match):
        hopper_glu(x, w, **kwargs)


def test_dtypes_are_named(xw):
    x, w = xw
    with pytest.raises(ValueError, match=r"x.dtype=bfloat16 and w.dtype=float16 differ"):
        hopper_glu(x, w.astype(jnp.float16))
    with pytest.raises(ValueError, match=r"x.dtype=float32 is not supported"):
        hopper_glu(x.astype(jnp.float32), w)


def test_strict_rejects_an_unaddressable_x(rng):
    x, w = random_operand(rng, (8, 20), "bfloat16"), random_operand(rng, (20, 2, 16), "bfloat16")
    with pytest.raises(ValueError, match=r"strict=True\): x's rows are 40 bytes apart.*"
                                         r"its last dimension, 20, must be a multiple of 8"):
        hopper_glu(x, w, strict=True)


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "relu", None])
def test_reference_matches_float64(xw, rng, activation):
    x, w = xw
    bias = jnp.asarray(rng.standard_normal((2, 24)), jnp.float32)
    res = random_operand(rng, (32, 24), "float32")
    out = jax.jit(lambda x, w: hopper_glu(x, w, activation=activation, bias=bias, residual=res,
                                          alpha=0.5, beta=2.0, out_dtype=jnp.float32))(x, w)
    assert out.shape == (4, 32, 24) and out.dtype == jnp.float32
    ref = glu_reference64(x, w, activation=activation, bias=bias, residual=res, alpha=0.5,
                          beta=2.0)
    assert rel_frob(out, ref) < 1e-5


def test_vector_and_empty_inputs(rng):
    w = random_operand(rng, (16, 2, 8), "bfloat16")
    v = random_operand(rng, (16,), "bfloat16")
    assert hopper_glu(v, w).shape == (8,)
    assert hopper_glu(jnp.zeros((0, 16), jnp.bfloat16), w).shape == (0, 8)


def test_grad_and_vmap_match_the_jnp_unit(xw, rng):
    x, w = xw

    def jnp_unit(x, w):
        h = jnp.einsum("...k,kpf->...pf", x, w, preferred_element_type=jnp.float32)
        return jax.nn.silu(h[..., 0, :]) * h[..., 1, :]

    def loss(fn):
        return lambda x, w: jnp.sum(fn(x, w).astype(jnp.float32) ** 2)

    got = jax.grad(loss(hopper_glu), (0, 1))(x, w)
    want = jax.grad(loss(jnp_unit), (0, 1))(x, w)
    for g, r in zip(got, want):
        assert g.shape == r.shape
        assert rel_frob(g, np.asarray(r, np.float64)) < 2e-2
    over_w = jax.vmap(hopper_glu, in_axes=(None, 0))(x[0], jnp.stack([w, 2 * w]))
    assert over_w.shape == (2, 32, 24)
    assert rel_frob(over_w[1], glu_reference64(x[0], 2 * w)) < 1e-2


def test_decode_rows_take_the_swapped_product(rng):
    """At most SWAP_MAX_M rows in all (here 3 x 5, folded into one product of 15 rows): the
    product on the swap-AB kernels in float32, the unit in XLA; more rows, or a config: the
    fused gated kernel. Both match float64."""
    w = random_operand(rng, (64, 2, 24), "bfloat16")
    bias = jnp.asarray(rng.standard_normal((2, 24)), jnp.float32)
    small = random_operand(rng, (3, 5, 64), "bfloat16")
    res = random_operand(rng, (3, 5, 24), "bfloat16")
    fn = lambda x, w: hopper_glu(x, w, bias=bias, residual=res, alpha=0.5)  # noqa: E731
    p, = tune.problems_of(fn, small, w)
    assert (p.family, p.batch, p.m, p.n, p.k) == ("matmul", 1, 15, 48, 64)
    assert heuristics.heuristic_config("matmul", p.a_mn, p.batch, p.m, p.n, p.k).swap_ab
    out = jax.jit(fn)(small, w)
    assert out.shape == (3, 5, 24)
    ref = glu_reference64(small, w, activation="silu", bias=bias, residual=res, alpha=0.5)
    assert rel_frob(out, ref) < 6e-3
    large = random_operand(rng, (65, 64), "bfloat16")
    assert [p.family for p in tune.problems_of(hopper_glu, large, w)] == ["glu"]
    cfg = GemmConfig(block_n=128, stages=6)
    assert [p.family for p in tune.problems_of(lambda x, w: hopper_glu(x, w, config=cfg),
                                               small, w)] == ["glu"]


def test_grad_of_the_sum_over_vmapped_calls_is_one_weight_gradient(rng):
    """jax.grad of the sum over vmapped hopper_glu calls sharing w: w's gradient one GEMM over
    every entry's rows (the reference lowering), against float64."""
    check_summed_weight_grad(rng, 3, 40, 64, 96, 1e-2, glu=True)
