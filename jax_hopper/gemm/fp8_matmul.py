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
  each call reads the histories as they were (read_histories). Under jax.vmap a meta shared by the entries (not
  mapped) scales them all alike and records the largest amax over them (not the sum of the
  entries' pushed histories, which vmap makes of an unmapped argument's gradient); a mapped
  meta keeps one history per entry.
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
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm.api import SUPPORTED_OUTPUTS, parse_dtype
from jax_hopper.gemm.dot_general import fallback
from jax_hopper.gemm.fp8 import hopper_fp8_matmul
from jax_hopper.gemm.pitch import pitch_pad
from jax_hopper.gemm.sharding import spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape, resharded
from jax_hopper.kernels import catalog
from jax_hopper.quantize.fp8 import (INPUT_DTYPES, Fp8Array, abs_max, as_bits,
                                     check_quantized_weight, from_bits, quantize_fp8)

# (forward operands, gradient) fp8 types and the block layouts (module docstring).
RECIPES = {
    "tensor": dict(fwd=jnp.float8_e4m3fn, grad=jnp.float8_e5m2, scaling="tensor"),
    "delayed": dict(fwd=jnp.float8_e4m3fn, grad=jnp.float8_e5m2, scaling="tensor"),
    "block": dict(fwd=jnp.float8_e4m3fn, grad=jnp.float8_e4m3fn, scaling="block"),
}


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
    not saturating. A meta no call's result reached (a zero gradient, uses 0) is fresh."""
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
    meta = None if meta is None else read_histories(meta)
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
    read = None if meta is None else read_histories(meta)
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
