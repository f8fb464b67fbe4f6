"""Epilogue options: activation names <-> kernel codes (cuda/sm90_gemm_params.h), and the
pure-JAX epilogue the CPU reference uses, plain or as a gated linear unit (hopper_glu)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Same numbering as enum class Activation in cuda/sm90_gemm_params.h.
ACTIVATIONS = {None: 0, "relu": 1, "gelu_tanh": 2, "gelu": 3, "silu": 4}


def activation_code(activation: str | None) -> int:
    if not isinstance(activation, (str, type(None))) or activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"activation={activation!r} must be one of {names}")
    return ACTIVATIONS[activation]


def apply_activation(x: jax.Array, code: int) -> jax.Array:
    if code == 1:
        return jnp.maximum(x, 0)
    if code == 2:
        return jax.nn.gelu(x, approximate=True)
    if code == 3:
        return jax.nn.gelu(x, approximate=False)
    if code == 4:
        return jax.nn.silu(x)
    return x


def apply_gated(z: jax.Array, code: int) -> jax.Array:
    """act(gate) * up of a product whose last axis is [gate | up] (2F -> F); without an
    activation the bilinear unit gate * up. Same arithmetic as gate_by in
    cuda/sm90_gemm_epilogue.cuh."""
    gate, up = jnp.split(z, 2, axis=-1)
    return apply_activation(gate, code) * up
