"""Reverse-mode rule of the GEMM: every gradient product is the same kernel with other flags.

Forward: z = alpha * op(A) @ op(B) + bias, y = act(z) + beta * residual. With dz = dy * act'(z)
and dP = alpha * dz:
    dA = dP @ op(B)^T,  dB = op(A)^T @ dP,  dbias = sum of dz over rows,  dresidual = beta * dy.
dA is produced in a's stored layout and dB in b's by choosing which operand goes first and its
transpose flag (dense_product.grad_a/grad_b, the plain product's transposes: hopper_matmul
without an epilogue is dense_product's primitive, whose vmap and transpose rules give a weight
shared by vmapped calls one gradient); nothing is transposed in memory. alpha and beta are
static.

NOTES:
- Activation: the kernel writes only y, so z is recomputed in the backward pass by one more
  launch (alpha*A@B + bias, float32 out). Saving z instead would force an unfused forward and
  keep a float32 M x N buffer alive per call until the backward pass; without an activation
  nothing is recomputed. The backward pass saves nothing beyond its inputs a, b and bias.
- dz is rounded to the input dtype to feed the kernel (as with XLA's dot on bf16 operands);
  alpha is applied inside the kernel.
- An operand shared by the whole batch (batch 1) gets the gradient summed over the batch: for
  b with a K-major a, the batch joins the contraction ((batch*M, K)^T @ (batch*M, N), one
  launch, the rows merged on each device's shards: gated_product.rows_contracted); otherwise
  one float32 partial per batch entry is reduced by a sum (a batch x operand float32 buffer).
- The gated unit (hopper_glu) has its own rule, a custom JVP (glu.py's NOTES).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_hopper import manual_axes
from jax_hopper.gemm import batching, dense_product
from jax_hopper.gemm.dense_product import operand_grads
from jax_hopper.gemm.epilogue import apply_activation
from jax_hopper.gemm.primitive import freeze, problem_shape

_F32 = jnp.dtype(jnp.float32)


def gemm(a, b, bias, res, params, res_batch):
    """The kernel path of hopper_matmul, differentiable and vmappable: with nothing fused the
    plain product's primitive (dense_product: its own transpose and vmap rules), else
    batching.gemm with this module's VJP. params: the primitive's, frozen; res_batch: the
    residual's leading size (0 when there is none), static so that the residual need not be
    saved."""
    p = dict(params)
    if not p["activation"] and not bias.size and not res.size:
        return dense_product.product(a, b, params)
    return _fused(a, b, bias, res, params, res_batch)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _fused(a, b, bias, res, params, res_batch):
    del res_batch
    return batching.gemm(a, b, bias, res, params)


def _fwd(a, b, bias, res, params, res_batch):
    primal_types = manual_axes.types((a, b, bias, res))
    return _fused(a, b, bias, res, params, res_batch), (a, b, bias, primal_types)


def _bwd(params, res_batch, saved, dy):
    *saved, primal_types = saved
    return manual_axes.like_primals(_grads(params, res_batch, saved, dy), primal_types)


def _grads(params, res_batch, saved, dy):
    """(da, db, dbias, dres) of the saved (a, b, bias)."""
    p = dict(params)
    a, b, bias = saved
    batch = problem_shape(a.shape, b.shape, p["a_mn_major"], p["b_mn_major"])[0]

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

    da, db = operand_grads(a, b, dz, p)
    return da, db, dbias, dres if res_batch else jnp.zeros((0, 0, 0), p["out_dtype"])


_fused.defvjp(_fwd, _bwd)
