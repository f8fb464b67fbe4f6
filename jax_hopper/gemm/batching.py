"""jax.vmap of hopper_gemm_p: the vmapped axis joins the kernel's batch dimension.

Each operand is seen as (V or 1, B or 1, rows, cols): V the vmapped size, B the batch of one
call. The kernel takes a and b each with batch 1 (shared) or V*B, so
- an operand mapped along V and carrying B (or B == 1) is reshaped to V*B;
- an operand mapped along neither stays shared with batch 1;
- when a varies along one of V, B and b along the other (nested vmaps of an outer product,
  vmap(vmap(f, (0, None)), (None, 0))), a K-major a folds that axis into its rows: b supplies the
  kernel batch and a is read as one (axis*M, K) matrix. Still no copy;
- otherwise the operand shared along one axis is broadcast (the one case that copies it).
A vmapped bias, or a vmapped residual with a and b unmapped, splits the epilogue off: the kernel
computes alpha*A.B in float32 (once, when a and b are unmapped) and jnp applies the epilogue.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.interpreters import batching

from jax_hopper.gemm.primitive import apply_epilogue, hopper_gemm_p, problem_shape


def _as_4d(x, dim):
    """(V or 1, batch, r, c) with the vmapped axis first; reshape only for an unmapped x."""
    if dim is None:
        return x.reshape(1, *x.shape)
    return x if dim == 0 else jnp.moveaxis(x, dim, 0)


def _merge(x4, v, b):
    """(1, 1, r, c) stays shared as (1, r, c); anything else becomes (v*b, r, c)."""
    if x4.shape[:2] == (1, 1):
        return x4.reshape(x4.shape[1:])
    return jnp.broadcast_to(x4, (v, b, *x4.shape[2:])).reshape(v * b, *x4.shape[2:])


def _split_epilogue(args, dims, params):
    f32 = jnp.dtype(jnp.float32)

    def one(a, b, bias, res):
        z = hopper_gemm_p.bind(a, b, jnp.zeros((0,), f32), jnp.zeros((0, 0, 0), f32),
                               **{**params, "out_dtype": f32, "activation": 0})
        return apply_epilogue(z, bias, res, activation=params["activation"],
                              beta=params["beta"], out_dtype=params["out_dtype"])

    return jax.vmap(one, in_axes=dims)(*args), 0


def _batch_rule(args, dims, **params):
    a, b, bias, res = args
    da, db, dbias, dres = dims
    if dbias is not None or (dres is not None and da is None and db is None):
        return _split_epilogue(args, dims, params)
    v = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    a4, b4 = _as_4d(a, da), _as_4d(b, db)
    batch, m, n, _ = problem_shape(a4.shape[1:], b4.shape[1:], params["a_mn_major"],
                                   params["b_mn_major"])
    r4 = _as_4d(res, dres) if res.size else None
    no_res = jnp.zeros((0, 0, 0), res.dtype)

    # Which of the two axes (vmapped, batch) each of a and b varies along.
    a_axes = (a4.shape[0] > 1, a4.shape[1] > 1)
    b_axes = (b4.shape[0] > 1, b4.shape[1] > 1)
    crossed = a_axes in ((True, False), (False, True)) and \
        b_axes == (not a_axes[0], not a_axes[1])
    if crossed and not params["a_mn_major"]:
        # b's varying axis is the kernel batch; a's is folded into its rows (a reshape of a
        # K-major a). The output comes out as (outer, inner, M, N).
        outer, inner = b4.shape[0] * b4.shape[1], a4.shape[0] * a4.shape[1]
        out_bdim = 1 if a_axes[0] else 0
        r3 = no_res
        if r4 is not None:
            r4 = jnp.swapaxes(r4, 0, 1) if out_bdim else r4
            r3 = jnp.broadcast_to(r4, (r4.shape[0], inner, m, n)).reshape(r4.shape[0], -1, n)
        out = hopper_gemm_p.bind(a4.reshape(1, -1, a4.shape[3]), b4.reshape(outer, *b4.shape[2:]),
                                 bias, r3, **params)
        return out.reshape(outer, inner, m, n), out_bdim

    r3 = no_res if r4 is None else _merge(r4, v, batch)
    out = hopper_gemm_p.bind(_merge(a4, v, batch), _merge(b4, v, batch), bias, r3, **params)
    return out.reshape(v, batch, m, n), 0


batching.primitive_batchers[hopper_gemm_p] = _batch_rule
