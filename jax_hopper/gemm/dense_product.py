"""hopper_matmul's plain product, out = alpha op(a) @ op(b) with nothing fused (no activation,
bias or residual), as a primitive of its own: hopper_dense_product, linear in each operand,
with JVP, transpose and vmap rules, lowered as the fused path's launch (sharding.partitioned:
the same kernel, sharding rule and config; traced_primitive).

Why a primitive, not a custom VJP: under jax.grad of a sum over jax.vmap'd calls sharing b (a
per-example model vmapped over its batch), jax batches a custom VJP's backward entry by entry
and only then sums b's cotangents, so a (K, N) gradient per entry is computed and held before
the sum. Here vmap folds the entries into the kernel's batch first (batching.fold_call, the
fused path's own vmap rule), and that product's transpose in the shared b is one product over
every entry's rows (grad_b: the batch joins the contraction), the sum itself. Under vmap of
grad each entry's gradient is its own.

The fused epilogues' custom JVP (autodiff.py) builds its tangent from this primitive, so its
backward products are these transposes too: each gradient in its operand's stored layout,
chosen by operand order and transpose flags, nothing transposed in memory (grad_a, grad_b); a
batch-shared operand's gradient summed over the batch.

Operands as sharding.partitioned takes them: a3 (Ba, M, K), or (Ba, K, M) MN-major; b3
(Bb, N, K), or (Bb, K, N) MN-major; Ba and Bb 1 (shared) or the batch. params: the frozen launch
parameters (family "matmul", no activation, beta 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching as jax_batching

from jax_hopper import manual_axes
from jax_hopper.gemm import batching, sharding
from jax_hopper.gemm.gated_product import rows_contracted
from jax_hopper.gemm.primitive import explicit_placement, freeze, problem_shape
from jax_hopper.gemm.ragged_sharding import no_epilogue
from jax_hopper.gemm.traced_primitive import bilinear_jvp, def_traced

_F32 = jnp.dtype(jnp.float32)

dense_product_p = Primitive("hopper_dense_product")


def product(a3, b3, params: tuple):
    """The plain product of partitioned's operands (module docstring), differentiable and
    vmappable through this module's rules."""
    return dense_product_p.bind(a3, b3, params=params)


def plain_params(a_mn_major: bool, b_mn_major: bool, out_dtype, alpha: float,
                 config=None) -> tuple:
    """The launch parameters of a plain product."""
    return freeze(dict(family="matmul", a_mn_major=a_mn_major, b_mn_major=b_mn_major,
                       out_dtype=jnp.dtype(out_dtype), activation=0, alpha=alpha, beta=1.0,
                       config=config))


def operand_grads(a, b, dz, p: dict, which: str = "ab"):
    """(d a, d b) of alpha op(a) @ op(b) against the cotangent dz (B, M, N), each in its
    operand's stored layout (None where `which` leaves it out). a and b may be abstract values
    where their own gradient is asked for (a transpose's linear operand)."""
    _, _, n, _ = problem_shape(a.shape, b.shape, p["a_mn_major"], p["b_mn_major"])
    # The kernel reads dP with a row pitch of N elements: pad N to a multiple of 16 bytes
    # (zero columns add nothing to d a; d b's padded rows are sliced off).
    dp = dz.astype(a.dtype)
    n_pad = -(-n // (16 // a.dtype.itemsize)) * (16 // a.dtype.itemsize)
    if n_pad != n:
        dp = jnp.pad(dp, ((0, 0), (0, 0), (0, n_pad - n)))
    da = db = None
    if "a" in which:
        b_pad = b if n_pad == n else jnp.pad(
            b, ((0, 0), (0, 0), (0, n_pad - n)) if p["b_mn_major"]
            else ((0, 0), (0, n_pad - n), (0, 0)))
        da = grad_a(a, b_pad, dp, p)
    if "b" in which:
        db = grad_b(a, b, dp, p)
        db = db[:, :, :n] if p["b_mn_major"] else db[:, :n, :]
    return da, db


def _summed(x, y, x_mn, y_mn, dtype, alpha, shared):
    """The product, reduced over the batch into batch 1 when the operand it is for is shared."""
    if not shared:
        return product(x, y, plain_params(x_mn, y_mn, dtype, alpha))
    out = product(x, y, plain_params(x_mn, y_mn, _F32, alpha))
    return out.sum(0, keepdims=True).astype(dtype)


def grad_a(a, b, dp, p):
    """dA = dP @ op(B)^T in a's layout: (M, K) from (dP, B^T), (K, M) as op(B) @ dP^T."""
    shared = a.shape[0] == 1 and dp.shape[0] > 1
    if p["a_mn_major"]:
        return _summed(b, dp, not p["b_mn_major"], False, a.dtype, p["alpha"], shared)
    return _summed(dp, b, False, not p["b_mn_major"], a.dtype, p["alpha"], shared)


def grad_b(a, b, dp, p):
    """dB = op(A)^T @ dP in b's layout: (K, N) from (A^T, dP), (N, K) as dP^T @ op(A)."""
    shared = b.shape[0] == 1 and dp.shape[0] > 1
    if shared and not p["a_mn_major"]:
        # The batch joins the contraction: a as (batch*M, K), dP as (batch*M, N), one launch,
        # merged on each device's shards (gated_product's d w with one gate), so that rows
        # split below the batch (sequence parallelism) are summed over, never gathered.
        x, y = (a, dp) if p["b_mn_major"] else (dp, a)
        return rows_contracted(x, y, p["alpha"], b.dtype)[None]
    if p["b_mn_major"]:
        return _summed(a, dp, not p["a_mn_major"], True, b.dtype, p["alpha"], shared)
    return _summed(dp, a, True, not p["a_mn_major"], b.dtype, p["alpha"], shared)


def _launch(a3, b3, *, params):
    return sharding.partitioned(params, a3, b3, *no_epilogue(dict(params)))


def _abstract_eval(a3, b3, *, params):
    p = dict(params)
    batch, m, n, _ = problem_shape(a3.shape, b3.shape, p["a_mn_major"], p["b_mn_major"])
    return jax.core.ShapedArray((batch, m, n), p["out_dtype"], sharding=explicit_placement(
        a3, b3, p["a_mn_major"], p["b_mn_major"], "matmul", batch))


def _transpose(ct, a3, b3, *, params):
    """The cotangent of whichever operand is the linear one (an ad.UndefinedPrimal)."""
    if type(ct) is ad.Zero:
        return None, None
    p = dict(params)
    if ad.is_undefined_primal(a3):
        da, _ = operand_grads(a3.aval, b3, ct, p, "a")
        return manual_axes.like_aval(da, a3.aval), None
    _, db = operand_grads(a3, b3.aval, ct, p, "b")
    return None, manual_axes.like_aval(db, b3.aval)


def _batch(args, dims, *, params):
    # vmap: the entries join the kernel's batch as the fused path's do (batching.fold_call).
    in_batched = [d is not None for d in dims]
    a3, b3 = [jnp.moveaxis(x, d, 0) if m else x for x, d, m in zip(args, dims, in_batched)]
    v = next(x.shape[0] for x, m in zip((a3, b3), in_batched) if m)
    p = dict(params)
    if not v:  # no entries: nothing to launch
        one = [x.shape[1:] if m else x.shape for x, m in zip((a3, b3), in_batched)]
        batch, m, n, _ = problem_shape(*one, p["a_mn_major"], p["b_mn_major"])
        return jnp.zeros((0, batch, m, n), p["out_dtype"]), 0
    return batching.fold_call(params, v, (*in_batched, False, False), a3, b3, *no_epilogue(p),
                              launch=lambda a, b, bias, res, q: product(a, b, q)), 0


def_traced(dense_product_p, _launch)
dense_product_p.def_abstract_eval(manual_axes.typed_outputs(_abstract_eval))
ad.primitive_jvps[dense_product_p] = lambda primals, tangents, params: bilinear_jvp(
    lambda a, b: product(a, b, params), primals, tangents)
ad.primitive_transposes[dense_product_p] = _transpose
jax_batching.primitive_batchers[dense_product_p] = _batch
