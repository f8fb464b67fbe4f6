"""Epilogue options: activation names <-> kernel codes (jax_hopper/kernels/catalog.py), and the
pure-JAX epilogue the CPU reference uses, plain or as a gated linear unit (hopper_glu)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_hopper.kernels import catalog

ACTIVATIONS = catalog.ACTIVATION_CODES


def activation_code(activation: str | None) -> int:
    if not isinstance(activation, (str, type(None))) or activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"activation={activation!r} must be one of {names}")
    return ACTIVATIONS[activation]


# The jnp form of each activation, by the name the catalog gives its code.
_JNP = {"relu": lambda x: jnp.maximum(x, 0),
        "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
        "gelu": lambda x: jax.nn.gelu(x, approximate=False),
        "silu": jax.nn.silu}


def apply_activation(x: jax.Array, code: int) -> jax.Array:
    name = catalog.ACTIVATIONS[code][0]
    return x if name is None else _JNP[name](x)


def apply_gated(z: jax.Array, code: int) -> jax.Array:
    """act(gate) * up of a product whose last axis is [gate | up] (2F -> F); without an
    activation the bilinear unit gate * up. Same arithmetic as GatedOps in
    cuda/gemm/epilogue/gated.cuh."""
    gate, up = jnp.split(z, 2, axis=-1)
    return apply_activation(gate, code) * up
