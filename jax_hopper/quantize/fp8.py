"""quantize_fp8: a bf16/fp16/fp32 array to fp8 with its scales, and optionally its transposed copy,
in one pass on the GPU (cuda/quantize/quantize.cu).

    xq = quantize_fp8(x, scaling="block", transpose=True)   # x (..., R, C)
    y = hopper_fp8_matmul(xq.q, wq.q_t, xq.scale, wq.scale_t)

Scales dequantise: x ~= q * scale. Each scale comes from the absolute maximum (amax) of its block:
scale = amax / fp8_max, q = saturate(x * (fp8_max / amax)), with a finite amax clamped to
[catalog.FP8_MIN_AMAX, FP8_MAX_AMAX] = [2^-100, 2^126] (an all-zero block gets a finite scale;
finite values above 2^126 saturate) and fp8_max 448 (e4m3) or 57344 (e5m2). The modes of one copy
(catalog.QUANT_MODES):
- "tensor": one scale for the whole array, from x's amax (an XLA reduction, so per-tensor
  scaling reads x twice; XLA fuses that reduction into whatever produced x where it can) or
  from an `amax=` given (delayed scaling: an amax history's), in which case the kernel records
  x's own amax in the same pass (Fp8Array.amax) and x is read once;
- "row" (scaling="block", block="row"): one per row and 128 columns, scale (..., R, ceil(C/128)):
  the layout of hopper_fp8_matmul's a_scale (activations, DeepSeek-V3's 1 x 128);
- "tile" (block="tile"): one per 128 x 128 tile, scale (..., ceil(R/128), ceil(C/128)): the
  layout of b_scale (weights).
The transposed copy q_t (..., C, R) has its own mode (transpose_block, default block): "row"
scales it per column of x and 128 rows, (..., C, ceil(R/128)); "tile", (..., ceil(C/128),
ceil(R/128)). So one call gives both operands a training step needs of one tensor (see
jax_hopper.fp8_matmul).

Non-finite input: a NaN makes its block's amax and scale NaN and every q of the block NaN; an Inf
makes the scale Inf, its own q NaN and the block's finite values 0. Never a silently finite
result. The kernel runs for every shape: where TMA cannot address its rows (C, and R with the
transposed copy, not multiples of 16) on a zero-padded copy of x, the outputs sliced back
(_padded). Machines without the kernels run `reference`, which computes the same values. Under a
sharded jit each device quantizes its own shard (quantize/sharding.py).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax_hopper.gemm.pitch import pitch_pad
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.ragged_primitive import forward_only, register
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape
from jax_hopper.quantize import sharding
from jax_hopper.kernels import catalog

quantize_fp8_p = Primitive("hopper_quantize_fp8")
quantize_fp8_p.multiple_results = True

# What the kernel quantizes (its instances: cuda/quantize/quantize.cu).
INPUT_DTYPES = tuple(jnp.dtype(d) for d in ("bfloat16", "float16", "float32"))
_BLOCK = catalog.FP8_SCALE_BLOCK


class Fp8Array(NamedTuple):
    """An fp8 array with its scales (x ~= q * scale, block by block) and optionally its
    transposed copy: q (..., R, C), q_t (..., C, R) or None; module docstring for the shapes.
    Per tensor, amax is x's absolute maximum (float32 scalar; NaN if x holds one); None with
    block scales."""
    q: jax.Array
    scale: jax.Array
    q_t: jax.Array | None = None
    scale_t: jax.Array | None = None
    amax: jax.Array | None = None


_FP8 = (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))


def as_bits(tree):
    """The fp8 arrays of `tree` as their uint8 bits, for a custom VJP's residuals.
    jax.checkpoint (remat) passes every floating residual it saves through
    lax.reduce_precision with its dtype's finfo (jax PR 22244), and for float8_e4m3fn, which
    has no infinity, that maps each value of 256 and up to NaN (jax 0.10.2): a saturated
    quantization puts 448 in every tensor, so the gradients came back NaN under a policy that
    saves them (everything_saveable). Integer bits pass untouched; from_bits restores them."""
    return jax.tree.map(lambda x: jax.lax.bitcast_convert_type(x, jnp.uint8)
                        if x.dtype in _FP8 else x, tree)


def from_bits(tree, dtype):
    """as_bits undone: the uint8 arrays of `tree` as the fp8 `dtype` they held."""
    return jax.tree.map(lambda x: jax.lax.bitcast_convert_type(x, dtype)
                        if x.dtype == jnp.uint8 else x, tree)


def check_quantized_weight(fn, arg, wq, make, shape, recipe):
    """(q, scale) of `wq`, a weight quantized once for serving, where both have the shapes and
    dtypes that `make` (quantize_weight, quantize_experts) gives a weight of `shape` under
    `recipe`, else a ValueError naming the two."""
    want = _made_shapes(make, shape, recipe)
    q, scale = jnp.asarray(wq.q), jnp.asarray(wq.scale)
    for name, got, w in (("q", q, want.q), ("scale", scale, want.scale)):
        if got.shape != w.shape or got.dtype != w.dtype:
            raise ValueError(f"{fn}: {arg}.{name} is {got.dtype}{list(got.shape)}, but "
                             f"{make.__name__}(recipe={recipe!r}) makes {w.dtype}"
                             f"{list(w.shape)} for its w^T {q.shape}: quantize with the recipe "
                             "passed here")
    return q, scale


@functools.lru_cache(maxsize=None)
def _made_shapes(make, shape, recipe):
    """jax.eval_shape of make(bf16 weight of `shape`, recipe=recipe): traced once per shape, not
    on every eager call."""
    return jax.eval_shape(functools.partial(make, recipe=recipe),
                          jax.ShapeDtypeStruct(shape, jnp.bfloat16))


def quantize_fp8(x, *, dtype=jnp.float8_e4m3fn, scaling="tensor", block="row", transpose=False,
                 transpose_block=None, amax=None) -> Fp8Array:
    """x (..., R, C) bfloat16, float16 or float32 -> Fp8Array of fp8 `dtype` (float8_e4m3fn or
    float8_e5m2). scaling "tensor" or "block"; with "block", `block` ("row": 1 x 128, "tile":
    128 x 128) scales q and `transpose_block` (default: block) scales q_t. transpose=True also
    returns q_t = the transposed copy, quantized from x in the same pass. amax (per tensor
    only; a float scalar, traced): scale by it instead of x's own amax, which the kernel then
    records (Fp8Array.amax) without a pass of its own; values beyond it saturate."""
    x = jnp.asarray(x)
    dtype = jnp.dtype(dtype)
    if dtype.name not in catalog.FP8_MAX:
        raise ValueError(f"quantize_fp8: dtype={dtype} must be one of {tuple(catalog.FP8_MAX)}")
    if x.dtype not in INPUT_DTYPES:
        raise ValueError(f"quantize_fp8: x.dtype={x.dtype} must be one of "
                         f"{', '.join(d.name for d in INPUT_DTYPES)}")
    if x.ndim < 2:
        raise ValueError(f"quantize_fp8: x must be at least 2-D (..., rows, cols); got shape "
                         f"{x.shape}")
    if scaling not in ("tensor", "block"):
        raise ValueError(f"quantize_fp8: scaling={scaling!r} must be 'tensor' or 'block'")
    transpose_block = block if transpose_block is None else transpose_block
    for name, b in (("block", block), ("transpose_block", transpose_block)):
        if b not in ("row", "tile"):
            raise ValueError(f"quantize_fp8: {name}={b!r} must be 'row' (1 x {_BLOCK}) or "
                             f"'tile' ({_BLOCK} x {_BLOCK})")
    if not isinstance(transpose, bool):
        raise ValueError(f"quantize_fp8: transpose must be a bool, got {transpose!r}")
    record = amax is not None
    if record:
        if scaling != "tensor":
            raise ValueError("quantize_fp8: amax= is for scaling='tensor' (block scales come "
                             "from their own blocks)")
        amax = jnp.asarray(amax)
        if amax.shape != () or not jnp.issubdtype(amax.dtype, jnp.floating):
            raise ValueError(f"quantize_fp8: amax must be a float scalar, got shape "
                             f"{amax.shape} of {amax.dtype}")
        if not isinstance(amax, jax.core.Tracer) and float(amax) <= 0:
            raise ValueError(f"quantize_fp8: amax={float(amax)} must be > 0: the largest |x| "
                             "to scale by (a traced amax is taken as it comes, clamped to "
                             "[2^-100, 2^126])")
        amax = amax.astype(jnp.float32)
    mode, t_mode = ("tensor", "tensor") if scaling == "tensor" else (block, transpose_block)

    lead, (r, c) = x.shape[:-2], x.shape[-2:]
    x3 = reshape(x, (math.prod(lead), r, c))
    if mode == "tensor":  # one amax for the whole array, every batch entry
        if not record:
            amax = abs_max(x, axis=None)
        amax3 = jnp.broadcast_to(amax, (x3.shape[0],))
    else:
        amax3 = jnp.zeros((0,), jnp.float32)
    params = freeze(dict(dtype=dtype, mode=mode, transpose=transpose, t_mode=t_mode,
                         record_amax=record))
    q, scale, q_t, scale_t, seen = forward_only(
        functools.partial(sharding.partitioned, quantize_fp8_p.bind, params), "quantize_fp8",
        "a rounding; fp8_matmul and fp8_ragged_dot quantize inside their own gradients, "
        "which are first order")(x3, amax3)
    if mode == "tensor":
        scale = scales_from_amax(amax, dtype)[0]
        scale_t = scale
        if record:  # the batch entries' maxima
            amax = abs_max(seen, axis=None)
    else:
        scale = reshape(scale, (*lead, *scale.shape[1:]))
        scale_t = reshape(scale_t, (*lead, *scale_t.shape[1:]))
    q = reshape(q, x.shape)  # amax: None with block scales (none given, none computed)
    if not transpose:
        return Fp8Array(q, scale, amax=amax)
    return Fp8Array(q, scale, reshape(q_t, (*lead, c, r)), scale_t, amax)


def dequantize_fp8(q, scale, *, block="row", dtype=jnp.float32):
    """q * scale expanded over its blocks: the inverse of quantize_fp8 up to fp8 rounding. A
    scalar (or (1,)) scale is per tensor (`block` then "tensor", or left as it is); else `block`
    says how (..., R, C) was scaled: "row", scale (..., R, ceil(C/128)), or "tile",
    (..., ceil(R/128), ceil(C/128))."""
    q, scale = jnp.asarray(q), jnp.asarray(scale)
    if q.dtype.name not in catalog.FP8_MAX:
        raise ValueError(f"dequantize_fp8: q.dtype={q.dtype} must be one of "
                         f"{tuple(catalog.FP8_MAX)}")
    if not jnp.issubdtype(scale.dtype, jnp.floating):
        raise ValueError(f"dequantize_fp8: scale must be a float array; got {scale.dtype}")
    if block not in ("tensor", "row", "tile"):
        raise ValueError(f"dequantize_fp8: block={block!r} must be 'tensor', 'row' or 'tile'")
    scale = scale.astype(jnp.float32)
    x = q.astype(jnp.float32)
    if scale.shape in ((), (1,)):
        return (x * scale.reshape(())).astype(dtype)
    if block == "tensor":
        raise ValueError(f"dequantize_fp8: block='tensor' takes a scalar or (1,) scale; got "
                         f"scale.shape={scale.shape}")
    if q.ndim < 2:
        raise ValueError(f"dequantize_fp8: a block scale needs q of at least 2 dimensions "
                         f"(..., R, C); got q.shape={q.shape}")
    r, c = q.shape[-2:]
    rows = r if block == "row" else -(-r // _BLOCK)
    want = (*q.shape[:-2], rows, -(-c // _BLOCK))
    if scale.shape != want:
        raise ValueError(f"dequantize_fp8: scale.shape={scale.shape} must be () or (1,) (per "
                         f"tensor) or, with block={block!r}, {want} for q.shape={q.shape}")
    s = jnp.repeat(scale, _BLOCK, axis=-1)[..., :c]
    if block == "tile":
        s = jnp.repeat(s, _BLOCK, axis=-2)[..., :r, :]
    return (x * s).astype(dtype)


def scales_from_amax(amax, dtype):
    """(scale, multiplier) of an amax: the arithmetic of cuda/quantize/quantize.cu (make_scale),
    written as products with reciprocals, the form XLA rewrites divisions into, so that the
    kernel and this reference agree bit for bit."""
    fp8_max = np.float32(catalog.FP8_MAX[jnp.dtype(dtype).name])
    lo, hi = np.float32(catalog.FP8_MIN_AMAX), np.float32(catalog.FP8_MAX_AMAX)
    a = jnp.where(amax < lo, lo, jnp.where((amax > hi) & (amax != np.inf), hi, amax))  # NaN stays
    return a * (np.float32(1) / fp8_max), fp8_max * (1 / a)


def abs_max(x, axis):
    """max |x| over `axis` in float32, NaN if any element is NaN: taken over the bit patterns of
    |x| as unsigned integers (NaN's lie above Inf's), as the kernel does; XLA's float max on the
    GPU may drop NaNs. Over no elements, 0 (no |x| is smaller)."""
    bits = jax.lax.bitcast_convert_type(jnp.abs(x.astype(jnp.float32)), jnp.uint32)
    return jax.lax.bitcast_convert_type(jnp.max(bits, axis=axis, initial=np.uint32(0)),
                                        jnp.float32)


def _quantize_copy(x, mode, amax, dtype):
    """One copy of the reference: x (B, R, C) float32 -> (q, scale) as the kernel writes them."""
    b, r, c = x.shape
    rb, cb = -(-r // _BLOCK), -(-c // _BLOCK)
    if mode == "tensor":
        block_amax = amax.reshape(b, 1, 1)
    else:
        padded = jnp.pad(x, ((0, 0), (0, rb * _BLOCK - r), (0, cb * _BLOCK - c)))
        if mode == "row":
            block_amax = abs_max(padded[:, :r].reshape(b, r, cb, _BLOCK), axis=3)
        else:
            block_amax = abs_max(padded.reshape(b, rb, _BLOCK, cb, _BLOCK), axis=(2, 4))
    scale, mul = scales_from_amax(block_amax, dtype)
    if mode != "tensor":
        mul = jnp.repeat(mul, _BLOCK, axis=2)[:, :, :c]
        if mode == "tile":
            mul = jnp.repeat(mul, _BLOCK, axis=1)[:, :r]
    fp8_max = catalog.FP8_MAX[dtype.name]
    # An Inf is NaN in q (the kernel's `scaled`): saturated it would come back finite.
    q = jnp.where(jnp.isinf(x), jnp.nan, jnp.clip(x * mul, -fp8_max, fp8_max)).astype(dtype)
    return q, scale if mode != "tensor" else jnp.zeros((b, 0, 0), jnp.float32)


def reference(x, amax, *, dtype, mode, transpose, t_mode, record_amax):
    """What the kernel computes, in jnp (float32 arithmetic, one rounding to fp8)."""
    x = x.astype(jnp.float32)
    q, scale = _quantize_copy(x, mode, amax, dtype)
    seen = abs_max(x, axis=(1, 2)) if record_amax else jnp.zeros((0,), jnp.float32)
    if not transpose:
        empty = jnp.zeros((x.shape[0], 0, 0), dtype), jnp.zeros((x.shape[0], 0, 0), jnp.float32)
        return [q, scale, *empty, seen]
    return [q, scale, *_quantize_copy(jnp.swapaxes(x, 1, 2), t_mode, amax, dtype), seen]


def _scale_shape(mode, b, r, c):
    return {"tensor": (b, 0, 0), "row": (b, r, -(-c // _BLOCK)),
            "tile": (b, -(-r // _BLOCK), -(-c // _BLOCK))}[mode]


def _abstract_eval(x, amax, *, dtype, mode, transpose, t_mode, record_amax):
    b, r, c = x.shape
    f32 = jnp.dtype(jnp.float32)
    outs = [jax.core.ShapedArray((b, r, c), dtype),
            jax.core.ShapedArray(_scale_shape(mode, b, r, c), f32),
            jax.core.ShapedArray((b, c, r) if transpose else (b, 0, 0), dtype),
            jax.core.ShapedArray(_scale_shape(t_mode, b, c, r) if transpose else (b, 0, 0), f32),
            jax.core.ShapedArray((b,) if record_amax else (0,), f32)]
    if not explicitly_sharded(x):
        return outs
    # Under explicit sharding, typed where the partitioner places them (nothing asked of the
    # result), so that what follows needs no reshard.
    params = tuple(sorted(dict(dtype=dtype, mode=mode, transpose=transpose, t_mode=t_mode,
                               record_amax=record_amax).items()))
    _, _, placed, _ = sharding.placement(params, x.sharding.mesh, (x, amax),
                                         [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs])
    return [o.update(sharding=s) for o, s in zip(outs, placed)]


def kernel_runs(shape) -> bool:
    """Whether quantize_fp8 of a (B, R, C) array runs the kernel (where the kernels exist):
    whenever it has elements (rows TMA cannot address are padded first, _padded)."""
    return math.prod(shape) > 0


def _addressable(shape, transpose, dtype) -> bool:
    """Whether TMA addresses the kernel's rows as they are: q's are C bytes long, q_t's R."""
    _, r, c = shape
    return not pitch_pad(c, dtype) and not (transpose and pitch_pad(r, dtype))


def _padded(x, amax, *, dtype, mode, transpose, t_mode, record_amax):
    """The kernel on x padded with zeros to rows TMA can address (C, and R for the transposed
    copy, whole 16-byte fp8 rows), its outputs sliced back. A pad stays within its last
    128-wide block and zeros raise no block's amax, so every q, scale and recorded amax is the
    unpadded call's; the scale arrays keep their block counts."""
    b, r, c = x.shape
    rp = r + (pitch_pad(r, dtype) if transpose else 0)
    cp = c + pitch_pad(c, dtype)
    q, scale, q_t, scale_t, seen = quantize_fp8_p.bind(
        jnp.pad(x, ((0, 0), (0, rp - r), (0, cp - c))), amax, dtype=dtype, mode=mode,
        transpose=transpose, t_mode=t_mode, record_amax=record_amax)
    q = q[:, :r, :c]
    if mode == "row":
        scale = scale[:, :r]
    if transpose:
        q_t = q_t[:, :c, :r]
        if t_mode == "row":
            scale_t = scale_t[:, :c]
    return [q, scale, q_t, scale_t, seen]


# Lowerings of jnp functions: the reference (nothing to launch for an empty array), and the
# kernel on a padded copy (its inner bind lowers to the custom call below).
_reference_lowering = mlir.lower_fun(reference, multiple_results=True)
_padded_lowering = mlir.lower_fun(_padded, multiple_results=True)


def _cuda_lowering(ctx, x, amax, *, dtype, mode, transpose, t_mode, record_amax):
    shape = ctx.avals_in[0].shape
    kwargs = dict(dtype=dtype, mode=mode, transpose=transpose, t_mode=t_mode,
                  record_amax=record_amax)
    if not kernel_runs(shape):
        return _reference_lowering(ctx, x, amax, **kwargs)
    if not _addressable(shape, transpose, dtype):
        return _padded_lowering(ctx, x, amax, **kwargs)
    modes = catalog.QUANT_MODES
    return jax.ffi.ffi_lowering("jax_hopper_quantize_fp8")(
        ctx, x, amax, mode=np.int64(modes.index(mode)), transpose=bool(transpose),
        t_mode=np.int64(modes.index(t_mode)))


# vmap of quantize_fp8 folds into the batch the kernel walks: quantize/sharding.py's rule.
register(quantize_fp8_p, _abstract_eval, reference, _cuda_lowering)
