"""The manual mesh axes a value varies over inside jax.shard_map (its type under check_vma,
jax's default): what the primitives' outputs and the custom VJPs' cotangents must carry.

Inside shard_map a value is typed invariant along a manual axis (the same on every device of
it) or varying. jax's own ops type their results by their operands; a primitive defined here
does so through `typed_outputs` on its abstract eval (a product of a varying lhs and an
invariant weight varies). A custom VJP must give each primal argument a cotangent of that
argument's type: where a weight is invariant and the rows vary, the weight's gradient is the
sum of every device's contribution (what jax's pvary transposes to), so `like_primals` sums a
cotangent over the axes it varies over and its primal does not, and marks it varying over
those its primal varies over and it does not. The fwd rules keep `types(primals)` (zero-size
arrays of the primals' types, no data) among their residuals for it.

The type's form changed between jax versions (an aval's `vma` set up to 0.9, its
`manual_axis_type.varying` from 0.10); without either there are no manual-axis types and
nothing here changes a value.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec


def varying(x) -> frozenset:
    """The manual axes an array or abstract value varies over (empty outside shard_map, or
    with check_vma=False)."""
    aval = x if isinstance(x, jax.core.AbstractValue) else jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", ()))


def _varying_over(out, src, axes: frozenset):
    """ShapedArray `out` typed varying over `axes` on `src`'s mesh (`src`: an operand's aval,
    which names the mesh), replicated along its other axes as before."""
    sharding = NamedSharding(src.sharding.mesh, PartitionSpec(*([None] * len(out.shape))))
    mat = getattr(src, "manual_axis_type", None)
    if mat is not None:
        return out.update(sharding=sharding, manual_axis_type=mat.update(varying=axes))
    return out.update(sharding=sharding, vma=axes)


def typed_outputs(abstract_eval):
    """`abstract_eval` (one ShapedArray or a list) with every output varying over the axes any
    operand varies over."""
    def typed(*avals, **params):
        out = abstract_eval(*avals, **params)
        axes = frozenset().union(*(varying(a) for a in avals))
        if not axes:
            return out
        src = next(a for a in avals if varying(a))
        if isinstance(out, (list, tuple)):
            return type(out)(_varying_over(o, src, axes) for o in out)
        return _varying_over(out, src, axes)
    return typed


def types(primals):
    """An empty array of each of `primals`' (a pytree of arrays) rank and dtype, varying over
    the manual axes it varies over and, under explicit sharding, split as it is (each split
    dimension as long as its devices, so that no jax normalises the split of an empty one
    away; a few elements at most): its type for like_primals."""
    def empty(x):
        if _explicit(x):  # a split dimension as long as its devices (kept in the type), the
            sharding = jax.typeof(x).sharding  # rest 0: as few elements as the split allows
            shape = tuple(math.prod(sharding.mesh.shape[a] for a in _axes(entry)) if entry
                          else 0 for entry in _spec(x))
            # reshard, not out_sharding: jax 0.11 drops a creation op's out_sharding outside
            return jax.sharding.reshard(jnp.zeros(shape, x.dtype), sharding)  # a mesh context
        return vary_like(jnp.zeros((0,) * jnp.ndim(x), x.dtype), x)  # a scalar's: one element
    return jax.tree.map(empty, primals)


def _aval(x):
    return x if isinstance(x, jax.core.AbstractValue) else jax.typeof(x)


def _spec(x) -> tuple:
    """x's (an array's or abstract value's) PartitionSpec entries, one per dimension (None:
    unsplit)."""
    spec = tuple(getattr(getattr(_aval(x), "sharding", None), "spec", None) or ())
    return spec + (None,) * (jnp.ndim(x) - len(spec))


def _axes(entry) -> tuple:
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _explicit(x) -> bool:
    """Whether x's type carries a split (explicit sharding): typed_reshape.explicitly_sharded,
    which this module, imported by the GEMM layers, cannot import."""
    return any(p is not None for p in _spec(x))


def max_like(x, primal):
    """x's largest value over the manual axes it varies over and `primal` does not: an amax
    recorded on each device's shard, as the amax of the whole array that `primal` (a history
    every device holds alike) records."""
    extra = varying(x) - varying(primal)
    return jax.lax.pmax(x, tuple(sorted(extra))) if extra else x


def _vary(x, axes: tuple):
    if hasattr(jax.lax, "pcast"):  # jax >= 0.8.2
        return jax.lax.pcast(x, axes, to="varying")
    return jax.lax.pvary(x, axes)


def vary_like(x, *others):
    """x marked varying over the manual axes any of `others` varies over and x does not."""
    missing = frozenset().union(*map(varying, others)) - varying(x)
    return _vary(x, tuple(sorted(missing))) if missing else x


def like_primals(cotangents, primal_types):
    """Each cotangent of the pytree `cotangents` typed as its primal (`types`' array for it, the
    same tree): summed over the manual axes it varies over and its primal does not, marked
    varying over those its primal varies over and it does not. None and integer cotangents
    (float0) pass as they are."""
    def cast(ct, primal):
        if ct is None or not jnp.issubdtype(ct.dtype, jnp.inexact):
            return ct
        return like_aval(ct, primal)
    return jax.tree.map(cast, cotangents, primal_types, is_leaf=lambda x: x is None)


def like_aval(ct, primal):
    """A cotangent typed as its primal (an array, or the abstract value a primitive's
    transpose rule is given): under explicit sharding resharded to the primal's split (a K
    split's partial sums, a merged dimension's, are split otherwise); inside shard_map summed
    over the manual axes it varies over and the primal does not, marked varying over those
    the primal varies over and it does not."""
    if (_explicit(ct) or _explicit(primal)) and ct.ndim == len(_aval(primal).shape):
        mesh_of = primal if _explicit(primal) else ct  # a replicated primal's may be empty
        return jax.sharding.reshard(ct, _aval(mesh_of).sharding.update(
            spec=_aval(primal).sharding.spec))
    have, want = varying(ct), varying(primal)
    if have - want:
        ct = jax.lax.psum(ct, tuple(sorted(have - want)))
    return vary_like(ct, primal)
