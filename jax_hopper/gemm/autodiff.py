"""Reverse-mode rule of the GEMM: every gradient product is the same kernel with other flags.

Forward: z = alpha * op(A) @ op(B) + bias, y = act(z) + beta * residual. With dz = dy * act'(z)
and dP = alpha * dz:
    dA = dP @ op(B)^T,  dB = op(A)^T @ dP,  dbias = sum of dz over rows,  dresidual = beta * dy.
dA is produced in a's stored layout and dB in b's by choosing which operand goes first and its
transpose flag (see _grad_a/_grad_b); nothing is transposed in memory. alpha and beta are static.

NOTES:
- Activation: the kernel writes only y, so z is recomputed in the backward pass by one more
  launch (alpha*A@B + bias, float32 out). Saving z instead would force an unfused forward and
  keep a float32 M x N buffer alive per call until the backward pass; without an activation
  nothing is recomputed. The backward pass saves nothing beyond its inputs a, b and bias.
- dz is rounded to the input dtype to feed the kernel (as with XLA's dot on bf16 operands);
  alpha is applied inside the kernel.
- An operand shared by the whole batch (batch 1) gets the gradient summed over the batch: for
  b with a K-major a, the batch joins the contraction ((batch*M, K)^T @ (batch*M, N), one
  launch, the rows merged on each device's shards: gated_product.rows_contracted); otherwise one float32 partial per batch entry is reduced by a sum (a batch x operand
  float32 buffer).
- The gated unit (hopper_glu) has its own rule, a custom JVP (glu.py's NOTES).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_hopper import manual_axes
from jax_hopper.gemm import batching
from jax_hopper.gemm.epilogue import apply_activation
from jax_hopper.gemm.primitive import freeze, problem_shape
from jax_hopper.gemm.gated_product import rows_contracted

_F32 = jnp.dtype(jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def gemm(a, b, bias, res, params, res_batch):
    """batching.gemm with a VJP. params: the primitive's, frozen; res_batch: the residual's
    leading size (0 when there is none), static so that the residual need not be saved."""
    del res_batch
    return batching.gemm(a, b, bias, res, params)


def _fwd(a, b, bias, res, params, res_batch):
    primal_types = manual_axes.types((a, b, bias, res))
    return gemm(a, b, bias, res, params, res_batch), (a, b, bias, primal_types)


def _bwd(params, res_batch, saved, dy):
    *saved, primal_types = saved
    return manual_axes.like_primals(_grads(params, res_batch, saved, dy), primal_types)


def _grads(params, res_batch, saved, dy):
    """(da, db, dbias, dres) of the saved (a, b, bias)."""
    p = dict(params)
    a, b, bias = saved
    batch, m, n, _ = problem_shape(a.shape, b.shape, p["a_mn_major"], p["b_mn_major"])

    dres = None
    if res_batch:
        dres = p["beta"] * dy.astype(_F32)
        if res_batch == 1 and batch > 1:
            dres = dres.sum(0, keepdims=True)
        dres = dres.astype(p["out_dtype"])

    dz = dy.astype(_F32)
    if p["activation"]:
        z = gemm(a, b, bias, jnp.zeros((0, 0, 0), _F32),
                 freeze({**p, "out_dtype": _F32, "activation": 0}), 0)
        _, act_vjp = jax.vjp(lambda z: apply_activation(z, p["activation"]), z)
        dz = act_vjp(dz)[0]
    dbias = dz.sum((0, 1)) if bias.size else jnp.zeros((0,), _F32)

    # The kernel reads dP with a row pitch of N elements: pad N to a multiple of 16 bytes (zero
    # columns add nothing to dA; dB's padded rows are sliced off).
    dp = dz.astype(a.dtype)
    n_pad = -(-n // (16 // a.dtype.itemsize)) * (16 // a.dtype.itemsize)
    b_pad = b
    if n_pad != n:
        dp = jnp.pad(dp, ((0, 0), (0, 0), (0, n_pad - n)))
        b_pad = jnp.pad(b, ((0, 0), (0, 0), (0, n_pad - n)) if p["b_mn_major"]
                        else ((0, 0), (0, n_pad - n), (0, 0)))
    da = _grad_a(a, b_pad, dp, p)
    db = _grad_b(a, b_pad, dp, p)
    db = db[:, :, :n] if p["b_mn_major"] else db[:, :n, :]
    return da, db, dbias, dres if res_batch else jnp.zeros((0, 0, 0), p["out_dtype"])


gemm.defvjp(_fwd, _bwd)


def _product(x, y, x_mn, y_mn, out_dtype, alpha):
    """out = alpha * op(x) @ op(y) through the kernel, no epilogue, in the config chosen at
    launch (primitive.launch); differentiable again (a gradient of a gradient)."""
    params = dict(family="matmul", a_mn_major=x_mn, b_mn_major=y_mn,
                  out_dtype=jnp.dtype(out_dtype), activation=0, alpha=alpha, beta=1.0,
                  config=None)
    return gemm(x, y, jnp.zeros((0,), _F32), jnp.zeros((0, 0, 0), out_dtype), freeze(params), 0)


def _summed(x, y, x_mn, y_mn, dtype, alpha, shared):
    """The product, reduced over the batch into batch 1 when the operand it is for is shared."""
    if not shared:
        return _product(x, y, x_mn, y_mn, dtype, alpha)
    return _product(x, y, x_mn, y_mn, _F32, alpha).sum(0, keepdims=True).astype(dtype)


def _grad_a(a, b, dp, p):
    """dA = dP @ op(B)^T in a's layout: (M, K) from (dP, B^T), (K, M) as op(B) @ dP^T."""
    shared = a.shape[0] == 1 and dp.shape[0] > 1
    if p["a_mn_major"]:
        return _summed(b, dp, not p["b_mn_major"], False, a.dtype, p["alpha"], shared)
    return _summed(dp, b, False, not p["b_mn_major"], a.dtype, p["alpha"], shared)


def _grad_b(a, b, dp, p):
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
