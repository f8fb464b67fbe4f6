"""Delayed scaling's amax histories (fp8_matmul's and fp8_ragged_dot's recipe "delayed"): the
Fp8Meta of a call site, how a call reads it (read_histories), the amax a history scales by, and
the meta's gradient, its next value (next_meta: each history pushed on by the amax just
recorded; under vmap a shared history takes the entries' largest).
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm.sharding import spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded, resharded
from jax_hopper.kernels import catalog
from jax_hopper.quantize.fp8 import abs_max


class Fp8Meta(NamedTuple):
    """The amax histories of one fp8_matmul call site under recipe "delayed", newest first,
    float32 (L,): x's, w's and the gradient dy's (module docstring). fp8_ragged_dot's keeps one
    history per expert for w: (G, L). uses, float32 (): how many calls' pushed histories they
    sum (1 in fp8_meta()'s and in the gradient of one call; read_histories)."""
    x: jax.Array
    w: jax.Array
    grad: jax.Array
    uses: jax.Array | None = None


def fp8_meta(length: int = 16, *, experts: int | None = None) -> Fp8Meta:
    """A fresh Fp8Meta whose histories hold `length` steps (zeros: nothing seen yet); with
    `experts` (fp8_ragged_dot's call sites), w's history is one per expert, (experts, length)."""
    for name, v in (("length", length), ("experts", experts)):
        if (v is not None or name == "length") and (
                not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1):
            raise ValueError(f"fp8_meta: {name}={v!r} must be an int >= 1")
    length, experts = int(length), None if experts is None else int(experts)
    zeros = jnp.zeros((length,), jnp.float32)
    w = zeros if experts is None else jnp.zeros((experts, length), jnp.float32)
    return Fp8Meta(zeros, w, zeros, jnp.ones((), jnp.float32))


def check_meta(fn: str, recipe: str, meta, experts: int | None = None) -> None:
    """ValueError unless meta fits the recipe: None but for "delayed", whose Fp8Meta holds
    float32 histories of one length L >= 1, w's one per expert (experts, L) where the call
    site has experts (fp8_ragged_dot)."""
    if recipe != "delayed":
        if meta is not None:
            raise ValueError(f"{fn}: meta is recipe 'delayed''s amax histories; recipe "
                             f"{recipe!r} takes none")
        return
    made = "fp8_meta()" if experts is None else "fp8_meta(length, experts=G)"
    if not isinstance(meta, Fp8Meta):
        raise ValueError(f"{fn}: recipe='delayed' needs meta=jax_hopper.{made} (this call "
                         f"site's amax histories), got {type(meta).__name__}")
    histories = meta[:3]
    shapes = [jnp.shape(h) for h in histories]
    length = shapes[0][-1] if shapes[0] else 0
    w_shape = (length,) if experts is None else (experts, length)
    if (shapes != [(length,), w_shape, (length,)] or length < 1
            or any(jnp.result_type(h) != jnp.float32 for h in histories)):
        w_rule = "(L,)" if experts is None else f"(G, L) = ({experts}, L)"
        raise ValueError(f"{fn}: meta's histories must be float32 x (L,), w {w_rule} and grad "
                         f"(L,), of one length L >= 1 (jax_hopper.{made}); got "
                         f"{[(s, jnp.result_type(h).name) for s, h in zip(shapes, histories)]}")
    if (meta.uses is None or jnp.shape(meta.uses) != ()
            or jnp.result_type(meta.uses) != jnp.float32):
        got = None if meta.uses is None else (jnp.shape(meta.uses), jnp.result_type(meta.uses).name)
        raise ValueError(f"{fn}: meta.uses must be a float32 scalar, the count of calls whose "
                         f"pushed histories meta sums (jax_hopper.{made} makes it 1); got {got}")


def history_amax(history, dtype):
    """The amax a history scales by: its largest finite entry, or fp8_max (a scale of 1) while
    it holds nothing else but zeros. A NaN or Inf recorded by one step (its own product NaN:
    quantize_fp8 keeps them non-finite) is skipped, as Transformer Engine keeps the last scale
    for a non-finite amax, so the steps after it are not poisoned."""
    amax = abs_max(jnp.where(jnp.isfinite(history), history, 0), axis=None)
    return jnp.where(amax == 0, np.float32(catalog.FP8_MAX[jnp.dtype(dtype).name]), amax)


def read_histories(meta):
    """meta as one call reads it. Autodiff adds the cotangents of an argument that several calls
    read (a lax.scan over micro-batches, a layer applied twice), and so the gradient of a meta
    that n calls read holds n times each older entry, the sum of the n newest amaxes, and
    uses = n (each call's gradient counting 1). The older entries divided by uses are the
    histories those calls read, exactly (to a rounding); the sum stays as the newest entry, an
    upper bound on the calls' largest amax, at most n times it, so a scale from it errs toward
    not saturating. A meta no call's result reached (a zero gradient, uses 0) is fresh. None
    (a recipe without histories) stays None."""
    if meta is None:
        return None
    n = jnp.maximum(meta.uses, 1)

    def one(history):
        return jnp.concatenate([history[..., :1], history[..., 1:] / n], axis=-1)
    return Fp8Meta(one(meta.x), one(meta.w), one(meta.grad), meta.uses)


def _pushed(history, amax):
    """The history (..., L) one step on: the newest amax (...) first, the oldest dropped. Inside
    shard_map an amax of each device's shard pushes a history all devices hold alike by their
    largest (manual_axes.max_like). Under explicit sharding the amax takes the history's
    split (w's per-expert amaxes come split as the experts' weights, a history replicated)."""
    amax = manual_axes.max_like(amax.astype(jnp.float32), history)
    if explicitly_sharded(amax) or explicitly_sharded(history):
        amax = resharded(amax, PartitionSpec(*spec_of(jax.typeof(history))[:-1]),
                         on=history if explicitly_sharded(history) else amax)
    return jnp.concatenate([amax[..., None], history[..., :-1]], axis=-1)


@custom_batching.custom_vmap
def next_meta(meta, x_amax, w_amax, grad_amax):
    """meta's gradient (module docstring): each history (as read: read_histories) pushed on by
    the amax just recorded, counted as one use."""
    return Fp8Meta(_pushed(meta.x, x_amax), _pushed(meta.w, w_amax),
                   _pushed(meta.grad, grad_amax), jnp.ones_like(meta.uses))


@next_meta.def_vmap
def _next_meta_vmap(axis_size, in_batched, meta, *amaxes):
    """Under vmap a history shared by the entries (not mapped) is pushed on by the largest of
    their amaxes, and stays unmapped: vmap would otherwise add the entries' pushed histories up
    as the gradient of an unmapped argument. A mapped history is pushed per entry."""
    meta_mapped, *amax_mapped = in_batched
    histories = []
    for history, mapped, amax, amax_is_mapped in zip(meta, meta_mapped, amaxes, amax_mapped):
        if mapped:
            amax = amax if amax_is_mapped else jnp.broadcast_to(amax, (axis_size,))
            histories.append(jax.vmap(_pushed)(history, amax))
        else:
            histories.append(_pushed(history, jnp.max(amax, axis=0) if amax_is_mapped else amax))
    return Fp8Meta(*histories, jnp.ones_like(meta.uses)), meta_mapped
