"""jax_hopper.dot_general: lax.dot_general semantics, on hopper_matmul wherever free reshapes
reach it, and a drop-in `dot_general=` for flax modules (reference lowering on the CPU)."""

import functools
import inspect
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_hopper
from jax_hopper.gemm import api
from jax_hopper.gemm import dot_general as dg_module

# (lhs shape, rhs shape, dimension_numbers, runs on the kernel)
CASES = [
    # flax Dense: x (..., K) @ kernel (K, N)
    ((6, 40), (40, 24), (((1,), (0,)), ((), ())), True),
    ((2, 3, 40), (40, 24), (((2,), (0,)), ((), ())), True),
    # DenseGeneral over two input axes, and to two output axes
    ((2, 3, 5, 8), (5, 8, 16), (((2, 3), (0, 1)), ((), ())), True),
    ((4, 40), (40, 3, 8), (((1,), (0,)), ((), ())), True),
    # contracting the leading axis of lhs (transpose_a) or the trailing axis of rhs (transpose_b)
    ((40, 8), (40, 24), (((0,), (0,)), ((), ())), True),
    ((6, 40), (24, 40), (((1,), (1,)), ((), ())), True),
    ((40, 8), (24, 40), (((0,), (1,)), ((), ())), True),
    # attention-style batch dims leading in both
    ((2, 4, 16, 8), (2, 4, 8, 24), (((3,), (2,)), ((0, 1), (0, 1))), True),
    ((3, 16, 8), (3, 24, 8), (((2,), (2,)), ((0,), (0,))), True),
    # two contracting dims paired in opposite orders: not one flat K
    ((6, 5, 8), (8, 5, 24), (((1, 2), (1, 0)), ((), ())), False),
    # free and contracting dims interleaved in lhs
    ((6, 40, 2), (40, 24), (((1,), (0,)), ((), ())), False),
    # batch dimension not leading
    ((16, 3, 8), (3, 8, 24), (((2,), (1,)), ((1,), (0,))), False),
]


def _rand(key, shape, dtype):
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def _rel(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return np.linalg.norm(x - y) / np.linalg.norm(y)


def test_the_signature_is_lax_dot_general_s():
    # flax and jnp.einsum pass precision, preferred_element_type and out_sharding by keyword.
    ours = list(inspect.signature(jax_hopper.dot_general).parameters)
    assert ours == list(inspect.signature(lax.dot_general).parameters)[:len(ours)]


@pytest.mark.parametrize("lhs_shape,rhs_shape,dn,on_kernel", CASES)
@pytest.mark.parametrize("out", [None, "float32"])
def test_matches_lax_and_takes_the_kernel_where_it_can(lhs_shape, rhs_shape, dn, on_kernel, out):
    kl, kr = jax.random.split(jax.random.key(len(lhs_shape) * 7 + len(rhs_shape)))
    lhs, rhs = _rand(kl, lhs_shape, jnp.bfloat16), _rand(kr, rhs_shape, jnp.bfloat16)
    want = lax.dot_general(lhs.astype(jnp.float32), rhs.astype(jnp.float32), dn)
    with mock.patch.object(dg_module, "hopper_matmul", wraps=api.hopper_matmul) as spy:
        got = jax.jit(functools.partial(jax_hopper.dot_general, dimension_numbers=dn,
                                        preferred_element_type=out))(lhs, rhs)
    assert spy.called == on_kernel
    assert got.shape == want.shape
    assert got.dtype == jnp.dtype(out or jnp.bfloat16)
    assert _rel(got, want) < 1e-2


@pytest.mark.parametrize("lhs_dtype,rhs_dtype,out,reason", [
    ("float32", "float32", None, "input dtypes"),
    ("bfloat16", "float16", None, "input dtypes"),
    ("bfloat16", "bfloat16", "int32", "preferred_element_type"),
    # fp8 without a preferred_element_type: the result would be fp8, which no kernel writes
    ("float8_e4m3fn", "float8_e4m3fn", None, "preferred_element_type"),
    ("float8_e5m2", "float8_e5m2", "float32", "input dtypes"),  # not a compiled pair
])
def test_what_the_kernel_cannot_take_goes_to_lax(lhs_dtype, rhs_dtype, out, reason):
    lhs, rhs = jnp.ones((8, 16), lhs_dtype), jnp.ones((16, 8), rhs_dtype)
    dn = (((1,), (0,)), ((), ()))
    before = sum(v for k, v in dg_module.FALLBACKS.items() if k.startswith(reason))
    with mock.patch.object(dg_module, "hopper_matmul") as spy, \
            mock.patch.object(dg_module, "hopper_fp8_matmul") as fp8_spy:
        got = jax_hopper.dot_general(lhs, rhs, dn, preferred_element_type=out)
    assert not spy.called and not fp8_spy.called
    assert sum(v for k, v in dg_module.FALLBACKS.items() if k.startswith(reason)) == before + 1
    want = lax.dot_general(lhs, rhs, dn, preferred_element_type=out)
    assert got.dtype == want.dtype and np.array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("lhs_shape,rhs_shape,dn,on_kernel", CASES)
@pytest.mark.parametrize("pair", [("float8_e4m3fn", "float8_e4m3fn"),
                                  ("float8_e5m2", "float8_e4m3fn")])
def test_fp8_matches_lax_on_the_fp8_kernel_where_it_can(lhs_shape, rhs_shape, dn, on_kernel,
                                                        pair):
    # Every layout the 16-bit path takes, MN-major operands through transpose_fp8.
    kl, kr = jax.random.split(jax.random.key(len(lhs_shape) * 5 + len(rhs_shape)))
    lhs, rhs = _rand(kl, lhs_shape, pair[0]), _rand(kr, rhs_shape, pair[1])
    want = lax.dot_general(lhs.astype(jnp.float32), rhs.astype(jnp.float32), dn)
    with jax.default_device(jax.devices("cpu")[0]), \
            mock.patch.object(dg_module, "hopper_fp8_matmul",
                              wraps=dg_module.hopper_fp8_matmul) as spy:
        got = jax.jit(functools.partial(jax_hopper.dot_general, dimension_numbers=dn,
                                        preferred_element_type=jnp.float32))(lhs, rhs)
    assert spy.called == on_kernel
    assert got.shape == want.shape and got.dtype == jnp.float32
    assert _rel(got, want) < 1e-6  # exact products of the fp8 values, summed in float32


def test_fp8_gradients_are_lax_s():
    # hopper_fp8_matmul has no differentiation rule; the drop-in keeps XLA's fp8 dot's.
    kl, kr = jax.random.split(jax.random.key(3))
    lhs, rhs = _rand(kl, (40, 8), jnp.float8_e4m3fn), _rand(kr, (24, 40), jnp.float8_e4m3fn)
    dn = (((0,), (1,)), ((), ()))

    def loss(dot, lhs, rhs):
        return jnp.sum(dot(lhs, rhs, dn, preferred_element_type=jnp.float32) ** 2)

    with jax.default_device(jax.devices("cpu")[0]):
        ours = jax.grad(functools.partial(loss, jax_hopper.dot_general), (0, 1))(lhs, rhs)
        theirs = jax.grad(functools.partial(loss, lax.dot_general), (0, 1))(lhs, rhs)
    for o, t in zip(ours, theirs):
        assert o.dtype == t.dtype and np.array_equal(np.asarray(o, np.float32),
                                                     np.asarray(t, np.float32))


@pytest.mark.parametrize("dn", [
    (((0,), (0,)), ((), ())),      # contracting sizes 3 and 4
    (((2,), (0,)), ((), ())),      # lhs has no dimension 2
    (((1, 1), (0, 0)), ((), ())),  # a dimension twice
    (((1,), (0,)), ((0,), ())),    # batch dimensions of one operand only
])
def test_bad_dimension_numbers_are_lax_s_errors(dn):
    """Dimension numbers lax.dot_general refuses raise its error, never an internal one."""
    lhs, rhs = jnp.ones((3, 4), jnp.bfloat16), jnp.ones((4, 5), jnp.bfloat16)
    with pytest.raises(Exception) as want:
        lax.dot_general(lhs, rhs, dn)
    with pytest.raises(type(want.value)) as got:
        jax_hopper.dot_general(lhs, rhs, dn)
    assert str(got.value) == str(want.value)


def test_an_out_sharding_goes_to_lax():
    lhs, rhs = jnp.ones((8, 16), jnp.bfloat16), jnp.ones((16, 8), jnp.bfloat16)
    mesh = jax.make_mesh((1,), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    with mock.patch.object(dg_module, "hopper_matmul") as spy:
        got = jax_hopper.dot_general(lhs, rhs, (((1,), (0,)), ((), ())), out_sharding=sharding)
    assert not spy.called and got.shape == (8, 8)


def test_grad_matches_lax():
    kl, kr = jax.random.split(jax.random.key(5))
    lhs, rhs = _rand(kl, (2, 3, 40), jnp.bfloat16), _rand(kr, (40, 24), jnp.bfloat16)
    dn = (((2,), (0,)), ((), ()))

    def loss(dot, a, b):
        return jnp.sum(jnp.sin(dot(a, b, dn, preferred_element_type=jnp.float32)))

    ours = jax.grad(functools.partial(loss, jax_hopper.dot_general), argnums=(0, 1))(lhs, rhs)
    theirs = jax.grad(functools.partial(loss, lax.dot_general), argnums=(0, 1))(lhs, rhs)
    for g, w in zip(ours, theirs):
        assert g.shape == w.shape and _rel(g, w) < 2e-2


# ------------------------------------------------------------------ flax modules

flax = pytest.importorskip("flax", reason="flax is in the test extras (pip install .[test])")
from flax import linen as nn  # noqa: E402
from flax import nnx  # noqa: E402


def _spied():
    return mock.patch.object(dg_module, "hopper_matmul", wraps=api.hopper_matmul)


@pytest.mark.parametrize("make", [
    lambda dot: nn.Dense(24, dtype=jnp.bfloat16, dot_general=dot),
    lambda dot: nn.DenseGeneral((3, 8), axis=(-2, -1), dtype=jnp.bfloat16, dot_general=dot),
], ids=["Dense", "DenseGeneral"])
def test_linen_modules(make):
    x = _rand(jax.random.key(1), (2, 6, 5, 8), jnp.bfloat16)
    params = make(lax.dot_general).init(jax.random.key(2), x)
    want = make(lax.dot_general).apply(params, x)
    with _spied() as spy:
        got = jax.jit(make(jax_hopper.dot_general).apply)(params, x)
    assert spy.called and got.shape == want.shape and got.dtype == want.dtype
    assert _rel(got, want) < 1e-2


@pytest.mark.parametrize("make,x_shape", [
    (lambda dot, rngs: nnx.Linear(8, 24, dtype=jnp.bfloat16, dot_general=dot, rngs=rngs),
     (2, 6, 5, 8)),
    (lambda dot, rngs: nnx.LinearGeneral((5, 8), (3, 8), axis=(-2, -1), dtype=jnp.bfloat16,
                                         dot_general=dot, rngs=rngs), (2, 6, 5, 8)),
    # nnx.Einsum takes an einsum, which takes a dot_general.
    (lambda dot, rngs: nnx.Einsum("bsd,dhk->bshk", (8, 3, 16), (3, 16), dtype=jnp.bfloat16,
                                  rngs=rngs,
                                  einsum_op=functools.partial(jnp.einsum, _dot_general=dot)),
     (2, 6, 8)),
], ids=["Linear", "LinearGeneral", "Einsum"])
def test_nnx_modules(make, x_shape):
    x = _rand(jax.random.key(3), x_shape, jnp.bfloat16)
    ours, theirs = make(jax_hopper.dot_general, nnx.Rngs(0)), make(lax.dot_general, nnx.Rngs(0))
    want = theirs(x)
    with _spied() as spy:
        got = nnx.jit(lambda m, x: m(x))(ours, x)
    assert spy.called and got.shape == want.shape and got.dtype == want.dtype
    assert _rel(got, want) < 1e-2


def test_the_flax_example_trains_alike(capsys):
    from example_loader import load_example  # noqa: PLC0415
    example = load_example("flax_mlp.py")
    with _spied() as spy:
        assert example.main(["--steps", "6"]) == 0
    assert spy.called
    printed = capsys.readouterr().out
    assert "ok" in printed and "FAILED" not in printed
