"""Primitives lowered as a traced JAX function: a launch wrapped in custom_partitioning (the
plain grouped product, ragged_product.py; the gated products' roles, gated_product.py).

They are primitives rather than custom VJPs for their transpose rules: under jax.grad of a sum
over vmapped calls sharing a weight, the transpose sees the vmapped (folded) product and can
give the weight's gradient as one sum, where a custom VJP's backward is batched entry by entry
and summed after. `def_traced` gives such a primitive its impl (the launch under jit), its
lowering (the launch traced into the caller's module) and marks it as needing the devices at
lowering; `inner_jaxprs` lets a walk over a program's launches (tune.traced_problems, the
tests' count_eqns) see through it.
"""

from __future__ import annotations

import functools

import jax
from jax._src import dispatch
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.extend import core as jax_core
from jax.interpreters import ad, mlir

from jax_hopper.gemm.primitive import freeze

_LAUNCHES = {}  # primitive -> launch(*operands, **params)


def def_traced(primitive, launch):
    """primitive computed and lowered as launch(*operands, **its params)."""
    _LAUNCHES[primitive] = launch
    primitive.def_impl(lambda *args, **params: _jitted(primitive, freeze(params))(*args))
    mlir.register_lowering(primitive, mlir.lower_fun(launch, multiple_results=False))
    # The lowering holds custom_partitioning, which needs the devices: jit lowers a program
    # with none of the primitives on this list without them (so a cached executable moves
    # between devices), and custom_partitioning's lowering then fails. jax's own cuDNN
    # wrappers of custom_partitioning register so; the list has no public name (jax 0.10-0.11).
    dispatch.prim_requires_devices_during_lowering.add(primitive)


@functools.lru_cache(maxsize=None)
def _jitted(primitive, params: tuple):
    return jax.jit(functools.partial(_LAUNCHES[primitive], **dict(params)))


def bilinear_jvp(bind, primals, tangents):
    """The JVP rule of a product bind(x, y, *rest) linear in x and in y (rest: integer operands
    such as group sizes, without tangents)."""
    x, y, *rest = primals
    out = bind(x, y, *rest)
    tangent = bilinear_tangent(bind, x, y, tangents[0], tangents[1], *rest)
    return out, ad.Zero.from_primal_value(out) if tangent is None else tangent


def bilinear_tangent(bind, x, y, tx, ty, *rest):
    """d out = bind(x, d y) + bind(d x, y), None where both terms are zero (a tangent None, or
    a zero of jax's or of a custom JVP's). y's term comes first: jax.grad transposes the terms
    last to first, so x's gradient launches before y's, as the custom VJPs these rules
    replaced ran them (the other order took 1.8% longer on hopper_glu's 4096 x 28672 x 4096
    step, H100, 2026-12-06: the two read the same cotangent)."""
    terms = [bind(a, b, *rest) for a, b in ((x, ty), (tx, y))
             if not (is_zero(a) or is_zero(b))]
    return functools.reduce(jnp.add, terms) if terms else None


def is_zero(tangent) -> bool:
    """Whether a tangent is absent or a symbolic zero (jax's own, or a custom JVP's)."""
    return tangent is None or type(tangent) in (ad.Zero, SymbolicZero)


def inner_jaxprs(eqn):
    """The jaxprs an equation holds in its parameters and, for a traced primitive, the launch
    it lowers to: where a walk over a program's kernel launches goes on."""
    yield from jax_core.jaxprs_in_params(eqn.params)
    launch = _LAUNCHES.get(eqn.primitive)
    if launch is not None:
        structs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
        yield jax.make_jaxpr(functools.partial(launch, **eqn.params))(*structs).jaxpr
