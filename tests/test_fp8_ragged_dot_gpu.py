"""fp8_ragged_dot on an sm_90 GPU: the product and both gradients against float64 within each
recipe's fp8 bound at MoE-like and unaligned sizes, and the kernels each product runs (the
forward and d lhs on the grouped fp8 families, d rhs on the grouped contraction); serving on
quantize_experts' weights gives the training call's forward bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemm_helpers import check_fp8_ragged_dot

from jax_hopper import fp8_ragged_dot, quantize_experts

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
@pytest.mark.parametrize("m,k,n,groups", [(4096, 1024, 2048, 8), (1024, 512, 768, 64),
                                          (300, 200, 136, 3)])
def test_product_and_gradients(rng, recipe, m, k, n, groups):
    sizes = list(rng.multinomial(m - 5, np.ones(groups) / groups))
    check_fp8_ragged_dot(rng, m, k, n, sizes, recipe, jit=True)


@pytest.mark.parametrize("recipe,family", [("tensor", "grouped_fp8"),
                                           ("block", "grouped_fp8_block")])
def test_the_step_runs_on_our_kernels(recipe, family):
    x, w = jnp.ones((256, 256), jnp.bfloat16), jnp.ones((4, 256, 128), jnp.bfloat16)
    gs = jnp.asarray([64, 64, 64, 64], jnp.int32)
    step = jax.grad(lambda x, w: fp8_ragged_dot(x, w, gs, recipe=recipe).astype(
        jnp.float32).sum(), argnums=(0, 1))
    hlo = jax.jit(step).lower(x, w).as_text()
    assert f"@jax_hopper_gemm_{family}(" in hlo, "forward and d lhs"
    # d rhs: in fp8 on the transposed copies, per tensor or per block.
    contraction = "grouped_contraction_fp8" + ("_block" if recipe == "block" else "")
    assert f"@jax_hopper_gemm_{contraction}(" in hlo, "d rhs"


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_serving_on_quantized_experts_is_the_training_calls_forward(rng, recipe):
    sizes = list(rng.multinomial(1000, np.ones(7) / 7)) + [0]
    x = jnp.asarray(rng.standard_normal((1030, 520)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((8, 520, 392)) / 23, jnp.bfloat16)
    gs = jnp.asarray(sizes, jnp.int32)
    served = jax.jit(lambda x, wq: fp8_ragged_dot(x, wq, gs, recipe=recipe))(
        x, quantize_experts(w, recipe=recipe))
    want = jax.jit(lambda x, w: fp8_ragged_dot(x, w, gs, recipe=recipe))(x, w)
    got = np.asarray(served, np.float32)
    assert np.all(np.isfinite(got)) and np.any(got[:1000]) and not np.any(got[1000:])
    np.testing.assert_array_equal(got, np.asarray(want, np.float32))
