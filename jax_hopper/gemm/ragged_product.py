"""hopper_ragged_dot's plain product, out = lhs[rows of g] @ rhs[g] with nothing fused (no
activation, bias or residual; alpha 1), as a primitive of its own: hopper_grouped_product,
linear in each operand, with JVP, transpose and vmap rules, lowered as the fused path's launch
(ragged_sharding.partitioned: the same kernel, sharding rule and config; traced_primitive).

Why a primitive, not a custom VJP (the fused epilogues' custom JVP, ragged._ragged, builds its
tangent from it): under jax.grad of a sum over jax.vmap'd calls sharing the experts' weights (a
model's step over a vmapped layer), jax batches a custom VJP's backward pass entry by entry and
only then sums the weight's cotangents, so E weight gradients (E, G, K, N) are computed and
held before the sum. Here vmap folds the entries into one product first (fold_entries, as the
fused path does), and that product's transpose in the weight is one grouped contraction over
every entry's rows placed expert by expert (ragged_contract.summed_over_entries, on each
device's entries under a sharded jit): the (G, K, N) sum itself. Under vmap of grad each
entry's gradient is its own: the transposes are then batched as any op is.

Operands as partitioned takes them: lhs3 (1, M, K), rhs (G, K, N) (or (G, N, K) read through
b_mn_major = False), group sizes (G,) int32; or vmap's entries: lhs3 (E, M, K), sizes (E, G),
rhs shared or one per entry (E, G, ...). params: ragged.py's frozen launch parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm.primitive import explicit_placement, freeze
from jax_hopper.gemm.sharding import mesh_axes, spec_of
from jax_hopper.gemm.ragged_contract import differentiable as contract
from jax_hopper.gemm.ragged_contract import summed_over_entries
from jax_hopper.gemm.ragged_primitive import fold_entries, holds_entries, per_entry
from jax_hopper.gemm.ragged_sharding import no_epilogue, partitioned
from jax_hopper.gemm.traced_primitive import bilinear_jvp, def_traced
from jax_hopper.gemm.typed_reshape import reshape

grouped_product_p = Primitive("hopper_grouped_product")


def product(lhs3, rhs, gs, params: tuple):
    """The grouped product of partitioned's operands (module docstring), differentiable and
    vmappable through this module's rules."""
    return grouped_product_p.bind(lhs3, rhs, gs, params=params)


def _launch(lhs3, rhs, gs, *, params):
    """The product as the fused path launches it, with an empty bias and residual."""
    return partitioned(params, lhs3, rhs, gs, *no_epilogue(dict(params)))


def _abstract_eval(lhs3, rhs, gs, *, params):
    # Typed as placed under explicit sharding, as the launch's own primitive is: rows as
    # lhs's, columns as rhs's; vmap's entries (lhs3 (E, M, K)) as lhs's entries, which run
    # where they lie (typed unsplit, a cotangent through the fold's reshape was gathered).
    p = dict(params)
    n = rhs.shape[-1] if p["b_mn_major"] else rhs.shape[-2]
    placed = explicit_placement(lhs3, rhs, False, p["b_mn_major"], "matmul", 1)
    entries = spec_of(lhs3)[0] if lhs3.shape[0] > 1 else None
    if placed is not None and entries is not None:
        spec = (tuple(placed.spec) + (None,) * 3)[:3]
        used = {a for entry in spec[1:] for a in mesh_axes(entry)}
        if not used & set(mesh_axes(entries)):
            placed = placed.update(spec=PartitionSpec(entries, *spec[1:]))
    return jax.core.ShapedArray((lhs3.shape[0], lhs3.shape[1], n), p["out_dtype"],
                                sharding=placed)


def _transpose(ct, lhs3, rhs, gs, *, params):
    """The cotangent of whichever operand is the linear one (an ad.UndefinedPrimal)."""
    if type(ct) is ad.Zero:
        return None, None, None
    p = dict(params)
    if ad.is_undefined_primal(lhs3):
        # d lhs = d out @ rhs[g]^T: rhs read through the other layout flag
        dtype = lhs3.aval.dtype
        dlhs = product(ct.astype(dtype), rhs, gs, freeze(
            {**p, "b_mn_major": not p["b_mn_major"], "out_dtype": dtype, "config": None}))
        return manual_axes.like_aval(dlhs, lhs3.aval), None, None
    drhs = _weight_grad(lhs3, ct.astype(lhs3.dtype), gs, rhs.aval, p["b_mn_major"])
    return None, manual_axes.like_aval(drhs, rhs.aval), None


def _weight_grad(lhs3, ct, gs, rhs_aval, b_mn_major: bool):
    """d rhs[g] = lhs_g^T d out_g, or d out_g^T lhs_g for rhs stored (G, N, K): the grouped
    contraction. vmap's entries sharing rhs (sizes (E, G)) contribute to one sum, their rows
    placed expert by expert; entries with a weight each get their own."""
    x, y = (lhs3, ct) if b_mn_major else (ct, lhs3)
    params = freeze(dict(out_dtype=jnp.dtype(rhs_aval.dtype), config=None))
    if gs.ndim == 1:
        return contract(x[0], y[0], gs, params)
    if holds_entries("grouped", "rhs", rhs_aval.ndim):
        return jax.vmap(lambda a, b, s: contract(a, b, s, params))(x, y, gs)
    return summed_over_entries(x, y, gs, params)


def _batch(args, dims, *, params):
    # vmap: one product over every entry (fold_entries), or one per entry where folding would
    # copy a weight.
    batched = [d is not None for d in dims]
    lhs3, rhs, gs = [jnp.moveaxis(a, d, 0) if b else a for a, d, b in zip(args, dims, batched)]
    size = next(a.shape[0] for a, b in zip((lhs3, rhs, gs), batched) if b)
    folded = size and fold_entries("grouped", size, batched + [False, False], lhs3, rhs, gs,
                                   *no_epilogue(dict(params)))
    if not folded:  # no entries (a loop of none), or a fold that would copy a weight
        return per_entry(lambda *a: product(*a, params), batched, (lhs3, rhs, gs)), 0
    out = product(*folded[:3], params)
    return reshape(out, (size, out.shape[0] // size, *out.shape[1:]), warn=False), 0


def_traced(grouped_product_p, _launch)
grouped_product_p.def_abstract_eval(manual_axes.typed_outputs(_abstract_eval))
ad.primitive_jvps[grouped_product_p] = lambda primals, tangents, params: bilinear_jvp(
    lambda *a: product(*a, params), primals, tangents)
ad.primitive_transposes[grouped_product_p] = _transpose
batching.primitive_batchers[grouped_product_p] = _batch
