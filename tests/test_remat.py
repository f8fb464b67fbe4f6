"""Rematerialisation (jax.checkpoint) around every differentiable op, inside a lax.scan over
layers as a model applies it: under each save policy the gradients equal those without
checkpoint, finite. jax's remat passes each residual it saves through lax.reduce_precision,
which turned the fp8 products' saved float8_e4m3fn copies into NaN (quantize.fp8.as_bits).
On the CPU (reference lowering) and an sm_90 GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import rel_frob, to64
from jax_hopper import (_ffi, fp8_matmul, fp8_ragged_dot, hopper_glu, hopper_matmul,
                        hopper_ragged_contract, hopper_ragged_dot, hopper_ragged_glu)

PLATFORMS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
F32 = jnp.float32
LAYERS, M, K, GROUPS = 3, 64, 64, 4
SIZES = (10, 20, 0, 30)  # 4 rows past every group
POLICIES = {"nothing": jax.checkpoint_policies.nothing_saveable,
            "dots": jax.checkpoint_policies.dots_saveable,
            "everything": jax.checkpoint_policies.everything_saveable}


def _gs():
    return jnp.asarray(SIZES, jnp.int32)


# name -> (layer(h, w), the shape of one layer's weight)
LAYER_OPS = {
    "matmul": (lambda h, w: hopper_matmul(h, w, activation="gelu"), (K, K)),
    "glu": (lambda h, w: hopper_glu(h, w), (K, 2, K)),
    "ragged_dot": (lambda h, w: hopper_ragged_dot(h, w, _gs(), activation="silu"),
                   (GROUPS, K, K)),
    "ragged_glu": (lambda h, w: hopper_ragged_glu(h, w, _gs(), bias=jnp.ones((GROUPS, 2, K))),
                   (GROUPS, K, 2, K)),
    "ragged_contract": (lambda h, w: jnp.tanh(hopper_matmul(  # tanh: the product is cubic
        h, (hopper_ragged_contract(h, hopper_matmul(h, w), _gs(), out_dtype=F32).sum(0)
            / M).astype(h.dtype), out_dtype=F32)), (K, K)),
    "fp8_tensor": (lambda h, w: fp8_matmul(h, w, recipe="tensor"), (K, K)),
    "fp8_block": (lambda h, w: fp8_matmul(h, w, recipe="block"), (K, K)),
    "fp8_ragged_dot": (lambda h, w: fp8_ragged_dot(h, w, _gs(), recipe="block"),
                       (GROUPS, K, K)),
}


def _device(platform):
    return jax.devices("cpu")[0] if platform == "cpu" else _ffi.hopper_devices()[0]


def _grads(layer, policy, x, ws):
    """d/d(x, ws) of a scan of `layer` over the stacked weights, each step checkpointed
    under `policy` (None: not checkpointed)."""
    def step(h, w):
        return layer(h, w).astype(h.dtype), None

    body = step if policy is None else jax.checkpoint(step, policy=policy)

    def loss(x, ws):
        h, _ = jax.lax.scan(body, x, ws)
        return (h.astype(F32) ** 2).sum()

    return jax.jit(jax.grad(loss, (0, 1)))(x, ws)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("op", list(LAYER_OPS))
def test_checkpointed_gradients_equal_plain_ones(rng, platform, policy, op):
    layer, w_shape = LAYER_OPS[op]
    with jax.default_device(_device(platform)):
        x = jnp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(jnp.bfloat16)
        ws = jnp.asarray(rng.standard_normal((LAYERS, *w_shape), dtype=np.float32)
                         / np.sqrt(K)).astype(jnp.bfloat16)
        plain = _grads(layer, None, x, ws)
        remat = _grads(layer, POLICIES[policy], x, ws)
    for got, want in zip(remat, plain):
        assert np.all(np.isfinite(np.asarray(got.astype(F32)))), f"{op}: non-finite gradient"
        # The same kernels on the same values, recomputed or saved: equal but for where XLA
        # rounds the jnp around them to bf16 (a recomputed fusion may round once more or less).
        assert rel_frob(got.astype(F32), to64(want)) < 1e-2
