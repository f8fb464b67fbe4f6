"""Reshapes of arrays whose type may carry a sharding (jax's explicit sharding mode, what
jax.make_mesh gives by default): there a reshape that merges or splits a sharded dimension must
name its result's sharding, or jax refuses it. `reshape` names the one that moves no data where
there is one, else replicates that dimension (a gather, with a warning as the partitioning
layers give for what they gather: correct, and the layers below still split what they can).

    (A@s, B) -> (A B)@s           the major dimension's split stays (whole rows of B each)
    (A, B@s) -> (A B)             a minor one's cannot: replicated
    (A B)@s -> (A@s, B)           a split dimension keeps its split on the major part where the
                                  devices divide it
"""

from __future__ import annotations

import math
import warnings

import jax
from jax.sharding import PartitionSpec


def explicitly_sharded(x) -> bool:
    """Whether x's type (x an array or its abstract value) carries a sharding (jax's explicit
    sharding mode): a reshape that merges a sharded axis then needs its output sharding spelled
    out, and a primitive's result can be typed where it is placed."""
    aval = x if isinstance(x, jax.core.AbstractValue) else jax.typeof(x)
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    return spec is not None and any(p is not None for p in spec)


def resharded(x, spec: PartitionSpec, *, on=None):
    """x resharded to `spec` on the mesh of `on`'s type (default x's; explicitly sharded)."""
    return jax.sharding.reshard(x, jax.typeof(x if on is None else on).sharding.update(spec=spec))


def reshape(x, shape, *, warn: bool = True):
    """x.reshape(shape), with the result's sharding named where x's type carries one. warn
    False: a lost split is not reported, for a reshape traced only for the result's type (the
    partitioner of the function it lies in decides what moves)."""
    shape = _resolved(x.shape, tuple(shape))
    if not explicitly_sharded(x):
        return x.reshape(shape)
    spec, out, lost = _plan(x, shape)
    if lost and warn:  # as the partitioning layers report what they gather
        warnings.warn(f"jax_hopper: reshaping {tuple(x.shape)} sharded {spec} to {shape} "
                      f"cannot keep the split over {lost}: that operand is gathered to every "
                      "device (keep batch dimensions split on the leading one, or pass 2-D "
                      "operands)", stacklevel=3)
    return jax.lax.reshape(
        x, shape, out_sharding=jax.typeof(x).sharding.update(spec=PartitionSpec(*out)))


def _plan(x, shape):
    """(x's spec, the result's spec, the splits the result loses) for an explicitly sharded
    x."""
    sharding = jax.typeof(x).sharding
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    out = _out_spec(x.shape, spec, shape, dict(sharding.mesh.shape))
    kept = {a for p in out if p is not None for a in (p if isinstance(p, tuple) else (p,))}
    lost = [p for p in spec if p is not None
            and not set(p if isinstance(p, tuple) else (p,)) <= kept]
    return spec, out, lost


def _resolved(old: tuple, new: tuple) -> tuple:
    """`new` with a -1 replaced by what the element count leaves."""
    if -1 not in new:
        return new
    known = math.prod(d for d in new if d != -1)
    return tuple(math.prod(old) // known if d == -1 else d for d in new)


def _out_spec(old: tuple, spec: tuple, new: tuple, mesh: dict) -> list:
    """The result's spec: dimensions matched in groups of equal element counts (size-1
    dimensions on their own); a group of one input and one output dimension keeps its spec, a
    merge keeps its major dimension's where the rest are whole, a split puts the input's on
    its major part where the devices divide it; anything else is replicated."""
    out = [None] * len(new)
    i = j = 0
    while i < len(old) or j < len(new):
        if j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
            j += 1
            continue
        if i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
            i += 1
            continue
        i0, j0, a, b = i, j, old[i], new[j]
        i, j = i + 1, j + 1
        while a != b:
            if a < b:
                a, i = a * old[i], i + 1
            else:
                b, j = b * new[j], j + 1
        ins, outs = list(range(i0, i)), list(range(j0, j))
        if len(ins) == 1 and len(outs) == 1:
            out[j0] = spec[i0]
        elif len(outs) == 1 and all(spec[d] is None for d in ins[1:]):
            out[j0] = spec[i0]
        elif len(ins) == 1 and spec[i0] is not None:
            axes = spec[i0] if isinstance(spec[i0], tuple) else (spec[i0],)
            if new[j0] % math.prod(mesh[a] for a in axes) == 0:
                out[j0] = spec[i0]
    return out
