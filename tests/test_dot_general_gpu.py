"""jax_hopper.dot_general on an sm_90 GPU: the contractions flax issues run on the kernel and
match a float64 reference."""

import functools
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_hopper
from gemm_helpers import REL_FROB_BOUND, REL_FROB_BOUND_FP8, random_operand, rel_frob
from jax_hopper.gemm import api
from jax_hopper.gemm import dot_general as dg_module

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("lhs_shape,rhs_shape,dn", [
    ((4, 256, 512), (512, 384), (((2,), (0,)), ((), ()))),             # Dense
    ((2, 128, 4, 64), (4, 64, 320), (((2, 3), (0, 1)), ((), ()))),     # DenseGeneral in
    ((512, 264), (512, 3, 128), (((0,), (0,)), ((), ()))),             # lhs contracted first
    ((256, 512), (384, 512), (((1,), (1,)), ((), ()))),                # rhs as (N, K)
    ((2, 4, 128, 64), (2, 4, 64, 192), (((3,), (2,)), ((0, 1), (0, 1)))),  # batched
])
@pytest.mark.parametrize("out", [None, "float32"])
def test_on_the_kernel_against_float64(rng, lhs_shape, rhs_shape, dn, out):
    lhs = random_operand(rng, lhs_shape, "bfloat16")
    rhs = random_operand(rng, rhs_shape, "bfloat16")
    want = lax.dot_general(np.asarray(lhs, np.float64), np.asarray(rhs, np.float64), dn)
    with mock.patch.object(dg_module, "hopper_matmul", wraps=api.hopper_matmul) as spy:
        got = jax.jit(functools.partial(jax_hopper.dot_general, dimension_numbers=dn,
                                        preferred_element_type=out))(lhs, rhs)
    assert spy.called
    assert got.shape == want.shape and got.dtype == jnp.dtype(out or "bfloat16")
    assert rel_frob(got, want) < REL_FROB_BOUND[jnp.dtype(out or "bfloat16").name]


@pytest.mark.parametrize("lhs_shape,rhs_shape,dn", [
    ((4, 256, 512), (512, 384), (((2,), (0,)), ((), ()))),             # rhs (K, N): transposed
    ((256, 512), (384, 512), (((1,), (1,)), ((), ()))),                # both K-major
    ((512, 264), (384, 512), (((0,), (1,)), ((), ()))),                # lhs (K, M): transposed
    ((2, 4, 128, 64), (2, 4, 192, 64), (((3,), (3,)), ((0, 1), (0, 1)))),  # batched
])
def test_fp8_on_the_fp8_kernel_against_float64(rng, lhs_shape, rhs_shape, dn):
    lhs = jnp.asarray(rng.standard_normal(lhs_shape) * 4, jnp.float32).astype(jnp.float8_e4m3fn)
    rhs = jnp.asarray(rng.standard_normal(rhs_shape) * 4, jnp.float32).astype(jnp.float8_e4m3fn)
    want = lax.dot_general(np.asarray(lhs, np.float64), np.asarray(rhs, np.float64), dn)
    f = jax.jit(functools.partial(jax_hopper.dot_general, dimension_numbers=dn,
                                  preferred_element_type=jnp.float32))
    assert "jax_hopper_gemm_fp8" in f.lower(lhs, rhs).as_text()
    got = f(lhs, rhs)
    assert got.shape == want.shape and got.dtype == jnp.float32
    # exact products; the tensor cores sum fp8 products with fewer bits than float32
    assert rel_frob(got, want) < REL_FROB_BOUND_FP8["float32"]


def test_a_flax_layer_trains_like_the_default():
    from flax import nnx  # noqa: PLC0415 (the test extras have it)

    def model(dot):
        return nnx.Linear(512, 256, dtype=jnp.bfloat16, param_dtype=jnp.float32,
                          dot_general=dot, rngs=nnx.Rngs(0))

    x = jax.random.normal(jax.random.key(1), (1024, 512), jnp.bfloat16)

    def loss(m):
        return jnp.mean(jnp.square(m(x).astype(jnp.float32)))

    ours, theirs = model(jax_hopper.dot_general), model(lax.dot_general)
    g_ours = nnx.grad(loss)(ours).kernel[...]
    g_theirs = nnx.grad(loss)(theirs).kernel[...]
    assert rel_frob(g_ours, np.asarray(g_theirs, np.float64)) < 2e-2
