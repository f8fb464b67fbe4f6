"""jax.vmap of hopper_fp8_matmul: the vmapped axis joins the kernel's batch dimension, as the
16-bit GEMM's does (batching.py), with each block scale following its operand.

`gemm` is fp8_sharding.partitioned under jax.custom_batching.custom_vmap (custom_partitioning
has no batching rule of its own). Each operand is seen as (V or 1, B or 1, rows, cols): V the
vmapped size, B the batch of one call.
- An operand (with its block scale) that is neither mapped nor batched stays shared (batch 1);
  any other is broadcast to (V, B) and merged into V*B entries: a copy only where it is shared
  along one of the two axes.
- A K-major a against a b shared by the whole merged batch is one product of all its rows (a
  reshape of a, its block scale and the residual: shared_batch.fold_shared_batch), b read once.
- One launch takes one pair of per-tensor scales and one bias, and its residual has the batch
  of its operands: a vmapped per-tensor scale or bias, or a vmapped residual over operands
  shared by every entry, runs one launch per entry (ragged_primitive.per_entry).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from jax_hopper.gemm import fp8_sharding
from jax_hopper.gemm.ragged_primitive import per_entry
from jax_hopper.gemm.shared_batch import fold_shared_batch


def gemm(launch, params: tuple, a, b, bias, res, a_scale, b_scale):
    """fp8_sharding.partitioned(launch, params, ...) with the vmap rule above."""
    return _vmappable(launch, params)(a, b, bias, res, a_scale, b_scale)


@functools.lru_cache(maxsize=None)
def _vmappable(launch, params):
    fn = custom_vmap(functools.partial(fp8_sharding.partitioned, launch, params))
    fn.def_vmap(functools.partial(_rule, launch, params))
    return fn


def _as_4d(x, mapped):
    return x if mapped else x[None]


def _merged(x4, s4, v: int, batch: int):
    """An operand (V or 1, B or 1, r, c) and its block scale (the same leading axes, or None)
    as kernel operands: shared (batch 1) where both are (1, 1), else V*B entries."""
    leads = {x4.shape[:2]} | ({s4.shape[:2]} if s4 is not None else set())
    if leads == {(1, 1)}:
        return x4[0], None if s4 is None else s4[0]

    def merge(y):
        return jnp.broadcast_to(y, (v, batch, *y.shape[2:])).reshape(v * batch, *y.shape[2:])
    return merge(x4), None if s4 is None else merge(s4)


def _rule(launch, params, v, in_batched, a, b, bias, res, a_scale, b_scale):
    ma, mb, mbias, mres, msa, msb = in_batched
    block = dict(params)["scaling"] == "block"
    args = (a, b, bias, res, a_scale, b_scale)
    operands_mapped = ma or mb or (block and (msa or msb))
    if mbias or (not block and (msa or msb)) or (mres and not operands_mapped):
        return per_entry(functools.partial(gemm, launch, params), in_batched, args), True
    a4, b4 = _as_4d(a, ma), _as_4d(b, mb)
    sa4, sb4 = (_as_4d(a_scale, msa), _as_4d(b_scale, msb)) if block else (None, None)
    batch = max(a4.shape[1], b4.shape[1])
    m, n = a4.shape[2], b4.shape[2]
    a3, sa3 = _merged(a4, sa4, v, batch)
    b3, sb3 = _merged(b4, sb4, v, batch)
    if a3.ndim == 2:  # shared: the kernel's batch of 1
        a3, sa3 = a3[None], None if sa3 is None else sa3[None]
    if b3.ndim == 2:
        b3, sb3 = b3[None], None if sb3 is None else sb3[None]
    r3 = res
    if res.size:
        r3, _ = _merged(_as_4d(res, mres), None, v, batch)
        r3 = r3 if r3.ndim == 3 else r3[None]
    a_rows, r3 = fold_shared_batch(a3, b3, r3, False)
    if a_rows.shape[0] != a3.shape[0] and block:  # folded: the scale's rows go with a's
        sa3 = sa3.reshape(1, -1, sa3.shape[2])
    out = gemm(launch, params, a_rows, b3, bias, r3,
               sa3 if block else a_scale, sb3 if block else b_scale)
    return out.reshape(v, batch, m, n), True
