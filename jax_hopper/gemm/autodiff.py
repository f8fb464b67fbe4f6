"""Derivatives of the GEMM: hopper_matmul's plain product is a primitive with its own rules
(dense_product); a fused epilogue (bias, activation, residual) gets a custom JVP here whose
tangent is built from that primitive, so jax transposes it into the same backward products.

Forward: z = alpha * op(A) @ op(B) + bias, y = act(z) + beta * residual. The JVP:
    dz = alpha * (op(A) @ op(dB) + op(dA) @ op(B)) + dbias,  dy = act'(z) * dz + beta * dres.
jax.grad transposes it: dA = dP @ op(B)^T and dB = op(A)^T @ dP with dP = alpha * act'(z) * dy
(dense_product.grad_a/grad_b: each gradient in its operand's stored layout, nothing transposed
in memory), dbias the sum of dP / alpha over rows, dres = beta * dy summed over a batch the
residual is shared by. alpha and beta are static.

Why a JVP, not a VJP: under jax.grad of a sum over vmapped calls sharing b (a per-example
model vmapped over its batch) jax batches a custom VJP's backward entry by entry and sums b's
(K, N) cotangents after; the transposes of the vmapped plain product fold every entry's rows
into one product, the sum itself (dense_product's docstring). jax.jvp works as well.

NOTES:
- Activation: the kernel writes only y, and act'(z + bias) needs z. Differentiated, the
  forward is the plain product (z in the output's dtype, the dot's output XLA keeps for its
  own act'), then act(z + bias) + beta * res in jnp (primitive.apply_epilogue, one elementwise
  pass XLA fuses), and act'(z + bias) * dz is checkpointed on z and the bias: a linearisation
  keeps z (M x N in the output's dtype), not act' in float32, and the backward pass computes
  act'(z + bias) * dy in one pass. So a model's step is three products, as XLA's (z
  recomputed in the backward pass, the first form, made it four: 1.32-1.40x faster without,
  H100, 2026-12-06, ab_h100_20261206_fused_saves_z.log). The bias is added in those passes,
  where XLA fuses the add for nothing (1.000-1.034x the bias fused into z's launch, when that
  epilogue still cost 5-10% of a GEMM: ab_h100_20261206_fused_z_plain.json).
  Undifferentiated (inference) the epilogue stays fused. Without an activation the fused
  kernel is the forward.
- The tangent's products are float32 and the cotangent is rounded to the input dtype to feed
  the kernel (as with XLA's dot on bf16 operands); alpha is applied inside the kernel.
- An operand shared by the whole batch (batch 1) gets its gradient summed over the batch
  (dense_product.grad_a/grad_b; for b with a K-major a one launch over every entry's rows).
- The gated unit (hopper_glu) has its own rule, a custom JVP through its unfused form (glu.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_hopper.gemm import batching, dense_product
from jax_hopper.gemm.epilogue import apply_activation
from jax_hopper.gemm.primitive import apply_epilogue, freeze
from jax_hopper.gemm.traced_primitive import bilinear_tangent, is_zero

_F32 = jnp.dtype(jnp.float32)


def gemm(a, b, bias, res, params):
    """The kernel path of hopper_matmul, differentiable and vmappable: with nothing fused the
    plain product's primitive (dense_product: its own transpose and vmap rules), else
    batching.gemm with this module's JVP. params: the primitive's, frozen."""
    p = dict(params)
    if not p["activation"] and not bias.size and not res.size:
        return dense_product.product(a, b, params)
    return _fused(a, b, bias, res, params)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _fused(a, b, bias, res, params):
    return batching.gemm(a, b, bias, res, params)


def _fused_jvp(params, primals, tangents):
    a, b, bias, res = primals
    da, db, dbias, dres = tangents
    p = dict(params)
    if p["activation"]:
        z = dense_product.product(a, b, dense_product.plain_params(
            p["a_mn_major"], p["b_mn_major"], p["out_dtype"], p["alpha"], p["config"]))
        out = activated(z, bias, res, p)
    else:
        z, out = None, _fused(a, b, bias, res, params)
    plain = dense_product.plain_params(p["a_mn_major"], p["b_mn_major"], _F32, p["alpha"])
    dz = bilinear_tangent(lambda x, y: dense_product.product(x, y, plain), a, b, da, db)
    if not is_zero(dbias):
        dz = _plus(dz, jnp.broadcast_to(dbias, out.shape))
    return out, epilogue_tangent(out, dz, p, dres, z, bias)


def activated(z, bias, res, p: dict):
    """act(z + bias) + beta * res in out's dtype from the product z (alpha in it; bias (N,) or
    empty): the fused epilogue's last steps in jnp, for a JVP whose forward keeps z."""
    return apply_epilogue(z.astype(_F32), bias, res, activation=p["activation"],
                          beta=p["beta"], out_dtype=p["out_dtype"], family="matmul")


def epilogue_tangent(out, dz, p: dict, dres, z, bias):
    """d out of act(z + bias) + beta * res, out's dtype, from the pre-activation's float32
    tangent dz (None: zero) and the residual's (a zero per is_zero); z: the product (None
    without an activation), bias (N,) or empty. The fused epilogues' JVPs share it (dense
    here, grouped in ragged.py)."""
    if dz is not None and p["activation"]:
        dz = _through_activation(z, bias, dz, p["activation"])
    if not is_zero(dres):
        dz = _plus(dz, p["beta"] * jnp.broadcast_to(dres.astype(_F32), out.shape))
    return jnp.zeros_like(out) if dz is None else dz.astype(out.dtype)


def _plus(x, y):
    return y if x is None else x + y


@functools.partial(jax.checkpoint, static_argnums=(3,), prevent_cse=False)
def _through_activation(z, bias, dz, activation: int):
    """act'(z + bias) * dz, checkpointed: a linearisation keeps z and the bias, and act' is
    computed where the backward pass multiplies it (no float32 buffer kept from the forward)."""
    x = z.astype(_F32) + bias.reshape(-1) if bias.size else z.astype(_F32)
    return jax.jvp(lambda x: apply_activation(x, activation), (x,), (dz,))[1]


_fused.defjvp(_fused_jvp, symbolic_zeros=True)
