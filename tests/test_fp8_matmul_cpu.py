"""fp8_matmul and fp8_dot_general through the references (no kernel): the product and both
gradients against float64 within each recipe's fp8 bound, shapes that need padding, leading
dimensions, jit, bad arguments, and flax's Dense / nnx Linear training with it."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemm_helpers import FP8_MATMUL_BOUND as BOUND, check_fp8_matmul, rel_frob

from jax_hopper import fp8_dot_general, fp8_matmul
from jax_hopper.gemm import dot_general as dg

@pytest.fixture(autouse=True)
def _on_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.mark.parametrize("recipe", ["tensor", "block"])
@pytest.mark.parametrize("lead,k,n", [((64,), 256, 128), ((2, 50), 300, 200), ((7,), 40, 24)])
def test_product_and_gradients(rng, recipe, lead, k, n):
    check_fp8_matmul(rng, lead, k, n, recipe)


def test_float32_and_jit(rng):
    check_fp8_matmul(rng, (96,), 160, 144, "block", dtype=jnp.float32, jit=True)


def test_out_dtype(rng):
    x = jnp.asarray(rng.standard_normal((32, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 48)), jnp.bfloat16)
    assert fp8_matmul(x, w, out_dtype=jnp.float32).dtype == jnp.float32


def test_empty():
    y = fp8_matmul(jnp.zeros((0, 64), jnp.bfloat16), jnp.ones((64, 32), jnp.bfloat16))
    assert y.shape == (0, 32)


@pytest.mark.parametrize("x,w,kwargs,match", [
    (jnp.ones((4, 8), jnp.int8), jnp.ones((8, 4)), {}, "x.dtype"),
    (jnp.ones((4, 8)), jnp.ones((8, 4), jnp.float8_e4m3fn), {}, "w.dtype"),
    (jnp.ones((4, 8)), jnp.ones((2, 8, 4)), {}, r"w \(K, N\)"),
    (jnp.ones((4, 8)), jnp.ones((6, 4)), {}, "last dimension 8"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(recipe="delayed"), "recipe='delayed'"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(out_dtype=jnp.int32), "out_dtype"),
])
def test_bad_arguments(x, w, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fp8_matmul(x, w, **kwargs)


def test_dot_general_takes_dense_and_falls_back_otherwise(rng):
    f = fp8_dot_general("block")
    x = jnp.asarray(rng.standard_normal((4, 8, 64)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((64, 2, 16)) / 8, jnp.float32)
    y = f(x, w, (((2,), (0,)), ((), ())))
    assert y.shape == (4, 8, 2, 16)
    assert rel_frob(y, np.einsum("abk,kcd->abcd", np.asarray(x, np.float64),
                                 np.asarray(w, np.float64))) < BOUND["block"]["y"]
    before = sum(dg.FALLBACKS.values())
    batched = f(x, x, (((2,), (2,)), ((0,), (0,))))  # attention-like: batch dims, not a dense
    assert sum(dg.FALLBACKS.values()) == before + 1
    np.testing.assert_allclose(batched, jnp.einsum("abk,ack->abc", x, x), rtol=1e-5)
    with pytest.raises(ValueError, match="recipe"):
        fp8_dot_general("int8")


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_flax_dense_trains_in_fp8(rng, recipe):
    flax = pytest.importorskip("flax")  # in the test extras; absent only in a bare install
    from flax import linen as nn
    from flax import nnx

    x = jnp.asarray(rng.standard_normal((64, 32)), jnp.float32)
    target = jnp.asarray(rng.standard_normal((64, 16)), jnp.float32)
    dense = nn.Dense(16, dot_general=fp8_dot_general(recipe))
    ref = nn.Dense(16)
    params = ref.init(jax.random.key(0), x)

    def loss(model, p):
        return jnp.mean((model.apply(p, x) - target) ** 2)

    l8, g8 = jax.value_and_grad(lambda p: loss(dense, p))(params)
    l32, g32 = jax.value_and_grad(lambda p: loss(ref, p))(params)
    assert abs(float(l8) - float(l32)) < 0.05 * float(l32)
    assert rel_frob(g8["params"]["kernel"], g32["params"]["kernel"]) < 0.1
    # Plain SGD on the fp8 layer lowers the loss as the float32 one does.
    p = params
    for _ in range(20):
        p = jax.tree.map(lambda a, g: a - 0.1 * g, p, jax.grad(lambda p: loss(dense, p))(p))
    assert float(loss(dense, p)) < 0.8 * float(l8)

    layer = nnx.Linear(32, 16, dot_general=fp8_dot_general(recipe), rngs=nnx.Rngs(0))
    assert layer(x).shape == (64, 16)
    del flax


def test_inference_skips_the_transposed_copy_of_x():
    # Only dw needs x^T: a call that is not differentiated quantizes x without it; under vjp
    # both operands come with their transposed copies (the residuals).
    x, w = jnp.ones((32, 64), jnp.bfloat16), jnp.ones((64, 48), jnp.bfloat16)

    def quantizations(f):
        text = " ".join(str(jax.make_jaxpr(f)(x, w)).split())
        return re.findall(r"hopper_quantize_fp8\[[^\]]*transpose=(\w+)", text)

    assert quantizations(lambda x, w: fp8_matmul(x, w, recipe="block")) == ["False", "True"]
    assert quantizations(lambda x, w: jax.vjp(
        lambda x, w: fp8_matmul(x, w, recipe="block"), x, w)[0]) == ["True", "True"]
