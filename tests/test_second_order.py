"""A gradient of a gradient (Hessian-vector products, gradient penalties) through hopper_matmul,
hopper_glu and the grouped GEMM and GLU, whose backward passes call the same differentiable
products. Against jnp written in float32 (a dense, masked form of the grouped product:
jax.lax.ragged_dot has no second derivative in its weights). On the CPU (reference lowering)
and an sm_90 GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import rel_frob, to64
from jax_hopper import (_ffi, hopper_glu, hopper_matmul, hopper_ragged_dot,
                        hopper_ragged_glu)

PLATFORMS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
F32 = jnp.float32
# The cotangents are rounded to bf16 twice over (each backward product's operand).
BOUND = 2e-2
ACT = {None: lambda z: z, "gelu": lambda z: jax.nn.gelu(z, approximate=False),
       "silu": jax.nn.silu}


def _device(platform):
    return jax.devices("cpu")[0] if platform == "cpu" else _ffi.hopper_devices()[0]


def _normal(rng, shape, scale=1.0):
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale).astype(jnp.bfloat16)


def _second_order(loss, args, argnum):
    """d/d(args) of the sum of d loss / d args[argnum]."""
    return jax.grad(lambda *a: jax.grad(loss, argnums=argnum)(*a).astype(F32).sum(),
                    argnums=tuple(range(len(args))))(*args)


def _check(ours, theirs, args):
    for argnum in range(len(args)):
        got = _second_order(ours, args, argnum)
        want = _second_order(theirs, [a.astype(F32) for a in args], argnum)
        for g, w in zip(got, want):
            assert rel_frob(g.astype(F32), to64(w)) < BOUND


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("activation", [None, "gelu", "silu"])
@pytest.mark.parametrize("a_shape", [(48, 64), (2, 24, 64)])  # (2, 24, 64): w shared by a batch
def test_matmul_gradient_of_gradient(rng, platform, activation, a_shape):
    with jax.default_device(_device(platform)):
        a, w = _normal(rng, a_shape), _normal(rng, (64, 40), 0.2)
        bias = jnp.asarray(rng.standard_normal(40), F32)

        def ours(a, w):
            y = hopper_matmul(a, w, bias=bias, activation=activation, alpha=0.5, out_dtype=F32)
            return (y ** 2).sum()

        def theirs(a, w):
            return (ACT[activation](0.5 * (a @ w) + bias) ** 2).sum()

        _check(ours, theirs, (a, w))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_glu_gradient_of_gradient(rng, platform):
    with jax.default_device(_device(platform)):
        x, w = _normal(rng, (48, 64)), _normal(rng, (64, 2, 40), 0.2)

        def ours(x, w):
            return (hopper_glu(x, w, out_dtype=F32) ** 2).sum()

        def theirs(x, w):
            return ((jax.nn.silu(x @ w[:, 0]) * (x @ w[:, 1])) ** 2).sum()

        _check(ours, theirs, (x, w))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_ragged_dot_gradient_of_gradient(rng, platform, activation):
    with jax.default_device(_device(platform)):
        x, w = _normal(rng, (56, 64)), _normal(rng, (3, 64, 40), 0.2)
        gs = jnp.asarray([13, 0, 30], jnp.int32)  # 13 rows past every group

        def ours(x, w):
            return (hopper_ragged_dot(x, w, gs, activation=activation, out_dtype=F32) ** 2).sum()

        def theirs(x, w):
            ends = jnp.cumsum(gs)
            rows = jnp.arange(x.shape[0])[:, None]
            z = sum(((rows >= ends[g] - gs[g]) & (rows < ends[g])) * (x @ w[g])
                    for g in range(w.shape[0]))
            return (ACT[activation](z) ** 2).sum()

        _check(ours, theirs, (x, w))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_ragged_glu_gradient_of_gradient(rng, platform):
    with jax.default_device(_device(platform)):
        x, w = _normal(rng, (56, 64)), _normal(rng, (3, 64, 2, 40), 0.2)
        gs = jnp.asarray([13, 0, 30], jnp.int32)  # 13 rows past every group

        def ours(x, w):
            return (hopper_ragged_glu(x, w, gs, alpha=0.5, out_dtype=F32) ** 2).sum()

        def theirs(x, w):
            ends = jnp.cumsum(gs)
            rows = jnp.arange(x.shape[0])[:, None]
            gate, up = (sum(((rows >= ends[g] - gs[g]) & (rows < ends[g])) * (0.5 * x @ w[g, :, h])
                            for g in range(w.shape[0])) for h in (0, 1))
            return ((jax.nn.silu(gate) * up) ** 2).sum()

        _check(ours, theirs, (x, w))
