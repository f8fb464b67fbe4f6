"""jax.vmap of hopper_fp8_matmul: the vmapped axis joins the kernel's batch dimension, as the
16-bit GEMM's does (batching.py), with each block scale following its operand.

`gemm` is fp8_sharding.partitioned under jax.custom_batching.custom_vmap (custom_partitioning
has no batching rule of its own). Each operand is seen as (V or 1, B or 1, rows, cols): V the
vmapped size, B the batch of one call.
- An operand (with its block scale) that is neither mapped nor batched stays shared (batch 1);
  any other is broadcast to (V, B) and merged into V*B entries (batching.merge): a copy only
  where it is shared along one of the two axes. A K-major a against a b shared by the whole
  merged batch then runs as one product of all its rows (fp8.launch folds it).
- A vmapped per-tensor scale becomes one scale per entry of the merged batch (the kernel reads
  each tile's by its batch entry, cuda/gemm/mainloop/scaling.cuh), where an operand is mapped
  too; over operands every entry shares it runs one launch per entry, as a vmapped bias does
  (one launch takes one bias) and a vmapped residual over such operands (a launch's residual
  has its operands' batch): ragged_primitive.per_entry.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from jax_hopper.gemm import fp8_sharding
from jax_hopper.gemm.batching import as_4d, merge
from jax_hopper.gemm.ragged_primitive import per_entry


def gemm(launch, params: tuple, a, b, bias, res, a_scale, b_scale):
    """fp8_sharding.partitioned(launch, params, ...) with the vmap rule above."""
    return _vmappable(launch, params)(a, b, bias, res, a_scale, b_scale)


@functools.lru_cache(maxsize=None)
def _vmappable(launch, params):
    fn = custom_vmap(functools.partial(fp8_sharding.partitioned, launch, params))
    fn.def_vmap(functools.partial(_rule, launch, params))
    return fn


def _merged(x4, s4, v: int, batch: int):
    """An operand (V or 1, B or 1, r, c) and its block scale (the same leading axes) merged
    alike: both stay shared only where both are (1, 1)."""
    if {x4.shape[:2], s4.shape[:2]} != {(1, 1)}:
        x4, s4 = (jnp.broadcast_to(y, (v, batch, *y.shape[2:])) for y in (x4, s4))
    return merge(x4, v, batch), merge(s4, v, batch)


def _per_entry(scale, mapped: bool, v: int, batch: int):
    """A per-tensor scale as the merged batch's (V * B entries, V outer): (1,) shared stays
    shared; else one per entry. Mapped it is (V, 1), or (V, B) where a vmap nested inside has
    made one per entry of B already; unmapped and per entry, (B,), the same for every V."""
    if mapped:
        return jnp.broadcast_to(scale.reshape(v, -1), (v, batch)).reshape(v * batch)
    return scale if scale.size == 1 else jnp.tile(scale.reshape(batch), v)


def _rule(launch, params, v, in_batched, a, b, bias, res, a_scale, b_scale):
    ma, mb, mbias, mres, msa, msb = in_batched
    block = dict(params)["scaling"] == "block"
    operands_mapped = ma or mb or (block and (msa or msb))
    # No entries (v = 0): per_entry's loop of none.
    if not v or mbias or (not operands_mapped and (msa or msb or mres)):
        args = (a, b, bias, res, a_scale, b_scale)
        return per_entry(functools.partial(gemm, launch, params), in_batched, args), True
    a4, b4 = as_4d(a, ma), as_4d(b, mb)
    batch = max(a4.shape[1], b4.shape[1])
    m, n = a4.shape[2], b4.shape[2]
    if block:
        a3, a_scale = _merged(a4, as_4d(a_scale, msa), v, batch)
        b3, b_scale = _merged(b4, as_4d(b_scale, msb), v, batch)
    else:
        a3, b3 = merge(a4, v, batch), merge(b4, v, batch)
        a_scale, b_scale = (_per_entry(s, mapped, v, batch)
                            for s, mapped in ((a_scale, msa), (b_scale, msb)))
    r3 = merge(as_4d(res, mres), v, batch) if res.size else res
    out = gemm(launch, params, a3, b3, bias, r3, a_scale, b_scale)
    return out.reshape(v, batch, m, n), True
