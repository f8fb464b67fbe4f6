"""jax.vmap of the GEMM: the vmapped axis joins the kernel's batch dimension.

`gemm` is sharding.partitioned under jax.custom_batching.custom_vmap. (custom_partitioning has no
batching rule of its own, so vmap has to be answered above it.) Each operand is seen as
(V or 1, B or 1, rows, cols): V the vmapped size, B the batch of one call. The kernel takes a
and b each with batch 1 (shared) or V*B, so
- an operand mapped along V and carrying B (or B == 1) is reshaped to V*B;
- an operand mapped along neither stays shared with batch 1;
- otherwise a K-major a folds an axis b does not vary along into its rows (a reshape), and the
  kernel batch is the other axis: b shared along B (e.g. the outer product of nested vmaps,
  vmap(vmap(f, (0, None)), (None, 0))) folds B, and a varying along V only while b varies
  along B only folds V (then the output is transposed once: custom_vmap wants V first);
- otherwise an operand shared along one axis is broadcast: the one case that copies it.
A K-major a against a b shared by the whole merged batch then runs as one product of all its
rows (primitive.launch folds it, shared_batch.folds): a vmapped decode step of one token per
entry is one product of V tokens, not V products of one.
A vmapped bias, or a vmapped residual with a and b unmapped, splits the epilogue off: the kernel
computes alpha*A.B in float32 (once, when a and b are unmapped) and jnp applies the epilogue.
Nested vmaps apply the rule once per level, each merging into the batch the level below made.
The merges are typed reshapes (typed_reshape.reshape): under explicit sharding a split of the
call's own batch below the mapped axis cannot stay split in the merged batch and is gathered,
with a warning (it had raised jax's ShardingTypeError).
The gated unit (hopper_glu) has one (K, 2, F) weight for the whole kernel batch: a vmapped x (and
residual) joins the batch; a vmapped weight or bias, or a vmapped residual with x unmapped, runs
the op's unfused form (`unfused`, handed down from hopper_glu) per entry.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from jax_hopper.gemm import sharding
from jax_hopper.gemm.primitive import apply_epilogue, freeze, problem_shape
from jax_hopper.gemm.typed_reshape import reshape


def gemm(a, b, bias, res, params: tuple, unfused=None):
    """sharding.partitioned(params, a, b, bias, res) with the vmap rule above. unfused: with
    gated params, the unit as unfused(a, b, bias, res, params) without the fused kernel."""
    return _vmappable(params, unfused)(a, b, bias, res)


@functools.lru_cache(maxsize=None)
def _vmappable(params, unfused):
    fn = custom_vmap(lambda a, b, bias, res: sharding.partitioned(params, a, b, bias, res))
    fn.def_vmap(functools.partial(_rule, params, unfused))
    return fn


def as_4d(x, batched):
    """(V or 1, batch, r, c): the vmapped axis is already first when x is batched."""
    return x if batched else reshape(x, (1, *x.shape))


def merge(x4, v, b):
    """(1, 1, r, c) stays shared as (1, r, c); anything else becomes (v*b, r, c)."""
    if x4.shape[:2] == (1, 1):
        return reshape(x4, x4.shape[1:])
    return reshape(jnp.broadcast_to(x4, (v, b, *x4.shape[2:])), (v * b, *x4.shape[2:]))


def _split_epilogue(params, in_batched, args):
    p = dict(params)
    f32 = jnp.dtype(jnp.float32)
    linear = freeze({**p, "out_dtype": f32, "activation": 0})

    def one(a, b, bias, res):
        z = gemm(a, b, jnp.zeros((0,), f32), jnp.zeros((0, 0, 0), f32), linear)
        return apply_epilogue(z, bias, res, activation=p["activation"], beta=p["beta"],
                              out_dtype=p["out_dtype"], family=p["family"])

    return jax.vmap(one, in_axes=[0 if x else None for x in in_batched])(*args)


def _rule(params, unfused, v, in_batched, a, b, bias, res):
    p = dict(params)
    if p["family"] == "glu":
        return _gated(params, unfused, v, in_batched, a, b, bias, res), True
    ma, mb, mbias, mres = in_batched
    if mbias or (mres and not ma and not mb):
        return _split_epilogue(params, in_batched, (a, b, bias, res)), True
    return fold_call(params, v, in_batched, a, b, bias, res, gemm), True


def fold_call(params, v, in_batched, a, b, bias, res, launch):
    """(V, batch, M, N): a GEMM's operands under vmap (V mapped entries, the `in_batched`
    ones leading with them; bias and residual as the kernel takes them) as one call of
    launch(a, b, bias, res, params) over the batch they merge into (the module docstring).
    launch: this module's gemm, or a primitive's bind (dense_product's vmap rule)."""
    p = dict(params)
    ma, mb, _, mres = in_batched
    a4, b4 = as_4d(a, ma), as_4d(b, mb)
    batch, m, n, _ = problem_shape(a4.shape[1:], b4.shape[1:], p["a_mn_major"], p["b_mn_major"])
    r4 = as_4d(res, mres) if res.size else None
    r3 = jnp.zeros((0, 0, 0), res.dtype) if mres else res  # no residual: (0, 0, 0) unmapped

    # Fold an axis into a's rows only when merging would copy an operand.
    copies = not {a4.shape[:2], b4.shape[:2]} <= {(1, 1), (v, batch)}
    fold = copies and not p["a_mn_major"] and batch > 1
    if fold and b4.shape[1] == 1:
        # b is shared along the batch: the kernel batch is V and a folds the batch.
        return _folded(a4, b4, bias, r4, r3, batch, m, n, params, launch)
    if fold and a4.shape[:2] == (v, 1) and b4.shape[:2] == (1, batch):
        # a varies along V only, b along the batch only: the kernel batch is the batch and a
        # folds V. custom_vmap wants V first: that costs one copy of the output.
        r4 = None if r4 is None else jnp.swapaxes(r4, 0, 1)
        return jnp.swapaxes(_folded(a4, b4, bias, r4, r3, v, m, n, params, launch), 0, 1)

    if r4 is not None:
        r3 = merge(r4, v, batch)
    out = launch(merge(a4, v, batch), merge(b4, v, batch), bias, r3, params)
    return reshape(out, (v, batch, m, n))


def _folded(a4, b4, bias, r4, r3, inner, m, n, params, launch):
    """(outer, inner, M, N): a K-major, its `inner` axis folded into its rows by a reshape; b's
    varying axis (`outer`) is the kernel batch; r4 is (outer or 1, inner or 1, M, N). a4 is
    (outer or 1, inner, M, K), or (inner, 1, M, K) where a varies along V only (its unit axis
    moves for free); the sizes are spelled out, as a -1 cannot be resolved in an empty array."""
    if r4 is not None:
        r3 = reshape(jnp.broadcast_to(r4, (r4.shape[0], inner, m, n)),
                     (r4.shape[0], inner * m, n))
    a_outer = a4.shape[0] if a4.shape[1] == inner else 1
    out = launch(reshape(a4, (a_outer, inner * m, a4.shape[3])),
                 reshape(b4, (b4.shape[0] * b4.shape[1], *b4.shape[2:])), bias, r3, params)
    return reshape(out, (out.shape[0], inner, m, n))


def _gated(params, unfused, v, in_batched, x, w, bias, res):
    """(V, batch, M, F) of the gated unit: the kernel takes no weight or bias per batch entry,
    so only x (with its residual) can join the batch, as V*batch entries of one launch."""
    mx, mw, mbias, mres = in_batched
    if mw or mbias or (mres and not mx):
        axes = [0 if m else None for m in in_batched]
        return jax.vmap(lambda *args: unfused(*args, params), in_axes=axes)(x, w, bias, res)
    batch, rows, f = x.shape[1], x.shape[2], w.shape[2]
    if res.size:
        res = (res if mres else jnp.broadcast_to(res, (v, *res.shape))).reshape(v * batch, rows, f)
    out = gemm(x.reshape(x.shape[0] * batch, rows, x.shape[3]), w, bias, res, params, unfused)
    return out.reshape(v, batch, rows, f)
