"""fp8_matmul: a differentiable x @ w that runs its forward and both backward GEMMs in fp8.

    y = jax_hopper.fp8_matmul(x, w, recipe="block")    # x (..., K) bf16, w (K, N) as flax stores it
    nn.Dense(features, dot_general=jax_hopper.fp8_dot_general("block"))
    y = jax_hopper.fp8_matmul(x, w, recipe="delayed", meta=meta)   # meta = jax_hopper.fp8_meta()

x and w stay high precision (bf16, fp16 or fp32); each GEMM quantizes its operands with
quantize_fp8 (one pass gives an operand and its transposed copy) and runs hopper_fp8_matmul:

| GEMM | a (rows, contraction) | b (rows, contraction) |
|---|---|---|
| y = x w          | x (M, K)     | w^T (N, K), the transposed copy of w |
| dx = dy w^T      | dy (M, N)    | w (K, N) |
| dw = x^T dy      | x^T (K, M), the transposed copy of x | dy^T (N, M), that of dy |

Recipes:
- "tensor": one scale per tensor, computed from the current amax (no history); x and w e4m3, the
  gradient dy e5m2 (range over precision), so dx and dw multiply e5m2 by e4m3.
- "delayed": "tensor"'s types and layouts, each scale from the largest amax in a history of
  earlier steps (Transformer Engine's delayed scaling, amax_compute_algo "max"), so no pass
  over a tensor precedes its quantization: the quantize kernel records the tensor's own amax in
  the same pass, and the histories move on by one. They live in an Fp8Meta (fp8_meta(length)),
  one per call site, passed as `meta` and differentiated like a parameter whose gradient IS its
  next value (flax's "overwrite with gradient"): a training step replaces each meta by its
  gradient, never feeds it to an optimizer. A history of zeros (a fresh meta) scales by 1, so
  the first step's quantization is coarse (gradients far below 1 flush to zero in e5m2) until
  the histories hold amaxes: calibrate a model's metas with forward and backward passes before
  its first update, keeping each pass's meta gradients, one pass per fp8_matmul on the longest
  chain a gradient flows through (a dy recorded behind an uncalibrated one is wrong; see
  examples/transformer_layer.py, with_calibrated_metas). Values beyond a history's maximum
  saturate. A call whose result does not reach the loss (or that multiplies nothing) gives its
  meta a zero gradient: a fresh history. A meta read by several calls in one gradient (a scan
  over micro-batches, a layer applied twice), or gradients added up, counts them in meta.uses:
  each call reads the histories as they were (fp8_meta.read_histories). Under jax.vmap a meta
  shared by the entries (not mapped) scales them all alike and records the largest amax over
  them (not the sum of the entries' pushed histories, which vmap makes of an unmapped
  argument's gradient); a mapped meta keeps one history per entry. The histories' module is
  fp8_meta.py.
- "block" (DeepSeek-V3): everything e4m3; x and dy scaled per row and 128 contraction elements
  (x^T per column of x and 128 rows), w and dy^T per 128 x 128 tile; the kernel adds each 128-wide
  k-block's product in fp32 with its scales (hopper_fp8_matmul's block mode).
Quantization happens once per tensor and step: x and w in the forward pass (their copies are the
residuals, 2 bytes per element, as bf16 would be; not differentiated, x's transposed copy is
not written), dy in the backward pass. Dimensions are padded
with zeros to multiples of 16 where TMA needs it (a copy of that operand; the result is sliced).
The result's dtype is x's unless out_dtype says otherwise; dx takes x's dtype, dw w's.
A bias (N,) and a residual (broadcastable to the result) are added in the forward GEMM's
epilogue (fp32, one rounding): y = x w + bias + residual with no pass of its own (a residual
stream's add, a projection's bias); their gradients are the sum of dy over the rows and dy.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from jax_hopper import manual_axes
from jax_hopper.gemm.api import SUPPORTED_OUTPUTS, parse_dtype
from jax_hopper.gemm.dot_general import fallback
from jax_hopper.gemm.fp8 import hopper_fp8_matmul
from jax_hopper.gemm.fp8_meta import check_meta, history_amax, next_meta, read_histories
from jax_hopper.gemm.pitch import pitch_pad
from jax_hopper.gemm.typed_reshape import reshape
from jax_hopper.quantize.fp8 import (INPUT_DTYPES, Fp8Array, as_bits, check_quantized_weight,
                                     from_bits, quantize_fp8)

# (forward operands, gradient) fp8 types and the block layouts (module docstring).
RECIPES = {
    "tensor": dict(fwd=jnp.float8_e4m3fn, grad=jnp.float8_e5m2, scaling="tensor"),
    "delayed": dict(fwd=jnp.float8_e4m3fn, grad=jnp.float8_e5m2, scaling="tensor"),
    "block": dict(fwd=jnp.float8_e4m3fn, grad=jnp.float8_e4m3fn, scaling="block"),
}


def fp8_matmul(x, w, *, recipe="tensor", out_dtype=None, meta=None, bias=None, residual=None):
    """x (..., K) @ w (K, N) [+ bias + residual] -> (..., N) with fp8 GEMMs forward and backward
    (module docstring). recipe "tensor", "delayed" or "block"; out_dtype bfloat16, float16 or
    float32 (default x.dtype); meta: this call site's Fp8Meta, with recipe "delayed" only;
    bias (N,) and residual (broadcastable to (..., N)), any float dtype, added in the
    epilogue. w may instead be quantize_weight(w, recipe=recipe)'s Fp8Array (a weight
    quantized once, for serving): then the call is forward-only and takes no meta."""
    x = jnp.asarray(x)
    if recipe not in RECIPES:
        raise ValueError(f"fp8_matmul: recipe={recipe!r} must be one of {tuple(RECIPES)}")
    quantized = isinstance(w, Fp8Array)
    if quantized:
        w8_t, w_scale = _check_quantized(w, recipe, meta)
        shape = w8_t.shape[::-1]  # the weight as stored, (K, N)
    else:
        w = jnp.asarray(w)
        check_meta("fp8_matmul", recipe, meta)
        shape = w.shape
    for name, t in (("x", x),) + (() if quantized else (("w", w),)):
        if t.dtype not in INPUT_DTYPES:
            raise ValueError(f"fp8_matmul: {name}.dtype={t.dtype} must be one of "
                             f"{', '.join(d.name for d in INPUT_DTYPES)} (it is quantized here)")
    if x.ndim < 1 or len(shape) != 2:
        raise ValueError(f"fp8_matmul: x must be (..., K) and w (K, N); got x {x.shape}, "
                         f"w {shape}")
    (k, n), lead = shape, x.shape[:-1]
    if x.shape[-1] != k:
        raise ValueError(f"fp8_matmul: x's last dimension {x.shape[-1]} != w's first {k}")
    out_dtype = jnp.dtype(parse_dtype("out_dtype", out_dtype) or x.dtype)
    if out_dtype not in SUPPORTED_OUTPUTS:
        raise ValueError(f"fp8_matmul: out_dtype={out_dtype} must be one of "
                         f"{', '.join(d.name for d in SUPPORTED_OUTPUTS)}")
    bias, residual = _epilogue_operands(bias, residual, (*lead, n))
    m = math.prod(lead)
    if m == 0 or n == 0 or k == 0:  # nothing to multiply (or a sum of nothing)
        y = jnp.zeros((*lead, n), jnp.float32)
        y = y if bias is None else y + bias.astype(jnp.float32)
        y = y if residual is None else y + residual.astype(jnp.float32)
        return y.astype(out_dtype)
    x2 = reshape(x, (m, k))
    # Every dimension is a row pitch of some fp8 operand (x, x^T, w, w^T, dy, dy^T).
    mp, kp, np_ = (d + pitch_pad(d, jnp.float8_e4m3fn) for d in (m, k, n))
    if (mp, kp) != (m, k):
        x2 = jnp.pad(x2, ((0, mp - m), (0, kp - k)))
    if bias is not None and np_ != n:
        bias = jnp.pad(bias, (0, np_ - n))
    if residual is not None:
        residual = reshape(residual, (m, n))
        if (mp, np_) != (m, n):
            residual = jnp.pad(residual, ((0, mp - m), (0, np_ - n)))
    if quantized:
        # Zeros past the weight, as quantizing its padded copy gives: padding fewer than 16
        # rows or columns leaves the 128 x 128 scale blocks as they are.
        if (np_, kp) != (n, k):
            w8_t = jnp.pad(w8_t, ((0, np_ - n), (0, kp - k)))
        y = _served(x2, w8_t, w_scale, bias, residual, recipe, out_dtype)
    else:
        wp = jnp.pad(w, ((0, kp - k), (0, np_ - n))) if (kp, np_) != (k, n) else w
        grad_dtypes = tuple(None if a is None else a.dtype for a in (x, w, bias, residual))
        y = _fp8_matmul(x2, wp, meta, bias, residual, recipe, out_dtype, grad_dtypes)
    return reshape(y[:m, :n], (*lead, n))


def quantize_weight(w, *, recipe="tensor"):
    """A weight w (K, N) (bf16, fp16 or fp32) quantized once, as fp8_matmul quantizes it on
    every call under `recipe`: an Fp8Array of the transposed copy w^T (N, K) that the forward
    multiplies (fp8 wgmma reads K-major operands only) and its scale, one or, with "block", one
    per 128 x 128 tile. Pass it to fp8_matmul in place of w to serve without requantizing the
    weight each call."""
    if recipe not in RECIPES:
        raise ValueError(f"quantize_weight: recipe={recipe!r} must be one of {tuple(RECIPES)}")
    w = jnp.asarray(w)
    if w.ndim != 2 or w.dtype not in INPUT_DTYPES:
        raise ValueError(f"quantize_weight: w must be (K, N) of one of "
                         f"{', '.join(d.name for d in INPUT_DTYPES)}; got {w.shape} {w.dtype}")
    wq = _weight_copies(w, None, RECIPES[recipe])
    return Fp8Array(wq.q_t, wq.scale_t)


def _check_quantized(w, recipe, meta):
    """(w^T, its scale) of a quantize_weight result, checked against what quantize_weight makes
    under `recipe` for that weight's shape."""
    if meta is not None:
        raise ValueError("fp8_matmul: meta is for training; w given quantized (quantize_weight) "
                         "takes none")
    q = jnp.asarray(w.q)
    if q.ndim != 2:
        raise ValueError(f"fp8_matmul: a quantized w holds w^T (N, K) from quantize_weight; got "
                         f"q {q.shape}")
    n, k = q.shape
    return check_quantized_weight("fp8_matmul", "w", w, quantize_weight, (k, n), recipe)


def _epilogue_operands(bias, residual, out_shape):
    """bias as (N,) and residual broadcast to the result's shape (None where not given), or
    ValueError naming the argument and the rule."""
    n = out_shape[-1]
    if bias is not None:
        bias = jnp.asarray(bias)
        if bias.shape != (n,) or not jnp.issubdtype(bias.dtype, jnp.floating):
            raise ValueError(f"fp8_matmul: bias must be a float (N,) = ({n},) array; got "
                             f"{bias.dtype} {bias.shape}")
    if residual is not None:
        residual = jnp.asarray(residual)
        try:
            shape = jnp.broadcast_shapes(residual.shape, out_shape)
        except ValueError:
            shape = None
        if shape != tuple(out_shape) or not jnp.issubdtype(residual.dtype, jnp.floating):
            raise ValueError(f"fp8_matmul: residual must be float and broadcast to the result's "
                             f"shape {tuple(out_shape)}; got {residual.dtype} {residual.shape}")
        residual = jnp.broadcast_to(residual, out_shape)
    return bias, residual


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _fp8_matmul(x, w, meta, bias, residual, recipe, out_dtype, grad_dtypes):
    # Not differentiated (inference): x's transposed copy, needed only for dw, is not written.
    del grad_dtypes
    meta = read_histories(meta)
    xq, wq = _operands(x, w, meta, RECIPES[recipe], transpose_x=False)
    return hopper_fp8_matmul(xq.q, wq.q_t, xq.scale, wq.scale_t, out_dtype=out_dtype, bias=bias,
                             residual=residual)


def _operands(x, w, meta, r, *, transpose_x):
    """x and w quantized as the recipe `r` says: x per row (its transposed copy per column of x)
    and w as _weight_copies; per tensor (scaling "tensor") the block layouts do not apply and
    each copy has the one scale, from meta's histories where given (recipe "delayed")."""
    xq = quantize_fp8(x, dtype=r["fwd"], scaling=r["scaling"], block="row", transpose=transpose_x,
                      amax=None if meta is None else history_amax(meta.x, r["fwd"]))
    return xq, _weight_copies(w, meta, r)


def _weight_copies(w, meta, r):
    """w per tile with its transposed copy, the one y multiplies (one scale per tensor, from
    meta's history where given)."""
    return quantize_fp8(w, dtype=r["fwd"], scaling=r["scaling"], block="tile", transpose=True,
                        amax=None if meta is None else history_amax(meta.w, r["fwd"]))


@functools.partial(jax.custom_jvp, nondiff_argnums=(5, 6))
def _served(x, w8_t, w_scale, bias, residual, recipe, out_dtype):
    """The forward on a weight quantized once: only x is quantized here."""
    r = RECIPES[recipe]
    xq = quantize_fp8(x, dtype=r["fwd"], scaling=r["scaling"], block="row")
    return hopper_fp8_matmul(xq.q, w8_t, xq.scale, w_scale, out_dtype=out_dtype, bias=bias,
                             residual=residual)


@_served.defjvp
def _served_jvp(recipe, out_dtype, primals, tangents):
    """Differentiating the serving call is an error, not a silent zero gradient."""
    del recipe, out_dtype, primals, tangents
    raise TypeError("fp8_matmul: w given quantized (quantize_weight) is forward-only, for "
                    "serving; to differentiate, pass the weight in high precision")


def _forward(x, w, meta, bias, residual, recipe, out_dtype, grad_dtypes):
    """y and the residuals: x's and w's quantized copies and meta (grad_dtypes: those of dx,
    dw, d bias and d residual, None where there is none)."""
    del grad_dtypes
    read = read_histories(meta)
    xq, wq = _operands(x, w, read, RECIPES[recipe], transpose_x=True)
    y = hopper_fp8_matmul(xq.q, wq.q_t, xq.scale, wq.scale_t, out_dtype=out_dtype, bias=bias,
                          residual=residual)
    return y, (as_bits((xq, wq)), read, manual_axes.types((x, w, meta, bias, residual)))


def _backward(recipe, out_dtype, grad_dtypes, res, dy):
    *res, primal_types = res
    return manual_axes.like_primals(_grads(recipe, out_dtype, grad_dtypes, res, dy),
                                    primal_types)


def _grads(recipe, out_dtype, grad_dtypes, res, dy):
    """(dx, dw, d meta, d bias, d residual) of the saved (xq, wq, meta)."""
    del out_dtype
    (bits, meta), (x_dtype, w_dtype, bias_dtype, res_dtype) = res, grad_dtypes
    dbias = None if bias_dtype is None else dy.astype(jnp.float32).sum(0).astype(bias_dtype)
    dres = None if res_dtype is None else dy.astype(res_dtype)
    r = RECIPES[recipe]
    xq, wq = from_bits(bits, r["fwd"])
    # dy per row for dx (its contraction is N), its transposed copy per tile for dw (b operand).
    gq = quantize_fp8(dy, dtype=r["grad"], scaling=r["scaling"], block="row", transpose=True,
                      transpose_block="tile",
                      amax=None if meta is None else history_amax(meta.grad, r["grad"]))
    dx = hopper_fp8_matmul(gq.q, wq.q, gq.scale, wq.scale, out_dtype=x_dtype)
    dw = hopper_fp8_matmul(xq.q_t, gq.q_t, xq.scale_t, gq.scale_t, out_dtype=w_dtype)
    # meta's gradient is its next value (module docstring).
    return (dx, dw, None if meta is None else next_meta(meta, xq.amax, wq.amax, gq.amax),
            dbias, dres)


_fp8_matmul.defvjp(_forward, _backward)


def fp8_dot_general(recipe="tensor"):
    """A `lax.dot_general`-shaped callable for flax (`nn.Dense(dot_general=...)`,
    `nnx.Linear(dot_general=...)`) that runs fp8_matmul with `recipe`. It takes the dense layer's
    contraction: lhs (..., K...) with its last dimensions contracted against rhs's leading ones
    (K..., N...), no batch dimensions, float inputs; anything else (and an out_sharding) goes to
    lax.dot_general in the inputs' precision, logged and counted as in jax_hopper.dot_general."""
    if recipe not in RECIPES:
        raise ValueError(f"fp8_dot_general: recipe={recipe!r} must be one of {tuple(RECIPES)}")
    if recipe == "delayed":
        raise ValueError("fp8_dot_general: recipe 'delayed' keeps amax histories per call site, "
                         "which a dot_general cannot hold; call fp8_matmul(..., meta=) instead")

    def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                    out_sharding=None):
        lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
        why = _dense_mismatch(lhs, rhs, dimension_numbers, preferred_element_type, out_sharding)
        if why:
            return fallback(why, "fp8_dot_general", lhs, rhs, dimension_numbers, precision,
                            preferred_element_type, out_sharding)
        nc = len(dimension_numbers[0][0])
        k = math.prod(rhs.shape[:nc])
        out_shape = (*lhs.shape[:lhs.ndim - nc], *rhs.shape[nc:])
        out_dtype = _lax_result_dtype(lhs, rhs, dimension_numbers, preferred_element_type)
        out = fp8_matmul(lhs.reshape(*lhs.shape[:lhs.ndim - nc], k),
                         rhs.reshape(k, math.prod(rhs.shape[nc:])), recipe=recipe,
                         out_dtype=out_dtype)
        return out.reshape(out_shape)

    return dot_general


def _dense_mismatch(lhs, rhs, dimension_numbers, preferred_element_type, out_sharding):
    """Why a contraction is not a dense layer's (lhs's trailing dims against rhs's leading ones,
    in order, no batch), or None."""
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc = tuple(int(d) for d in lc), tuple(int(d) for d in rc)
    if out_sharding is not None:
        return "out_sharding given"
    if lb or rb:
        return "batch dimensions"
    if lhs.dtype not in INPUT_DTYPES or rhs.dtype not in INPUT_DTYPES:
        return f"input dtypes {lhs.dtype}, {rhs.dtype}"
    out_dtype = _lax_result_dtype(lhs, rhs, dimension_numbers, preferred_element_type)
    if out_dtype not in SUPPORTED_OUTPUTS:
        return f"result dtype {out_dtype}"
    nc = len(lc)
    if nc == 0 or lc != tuple(range(lhs.ndim - nc, lhs.ndim)) or rc != tuple(range(nc)):
        return "not a dense layer's contraction (lhs's last dimensions with rhs's first)"
    if rhs.ndim == nc:
        return "rhs has no free dimension"
    return None


def _lax_result_dtype(lhs, rhs, dimension_numbers, preferred_element_type):
    """lax.dot_general's result dtype for these operands (asked of lax itself: with mixed
    inputs it is not jnp's promotion, e.g. bfloat16 x float16 gives bfloat16)."""
    return jnp.dtype(jax.eval_shape(functools.partial(
        jax.lax.dot_general, dimension_numbers=dimension_numbers,
        preferred_element_type=preferred_element_type), lhs, rhs).dtype)
