"""fp8_ragged_dot: a differentiable jax.lax.ragged_dot (lhs (M, K), rhs (G, K, N), group sizes
on the device) whose products run on the fp8 grouped kernels, for training Mixture-of-Experts
layers in fp8.

    y = jax_hopper.fp8_ragged_dot(x, w_experts, group_sizes, recipe="tensor")

x and w stay high precision (bf16, fp16 or fp32); each product quantizes its operands with
quantize_fp8 and runs an fp8 grouped kernel:

| product | kernel | operands |
|---|---|---|
| y = x w[g]          | hopper_ragged_fp8_dot | x (M, K); w^T (G, N, K), w's transposed copy |
| dx = dy w[g]^T      | hopper_ragged_fp8_dot | dy (M, N); w (G, K, N) as stored |
| dw[g] = x_g^T dy_g  | hopper_ragged_fp8_contract | x^T (K, M), dy^T (N, M) |

Recipes (fp8_matmul's, module fp8_matmul.py): "tensor": x and dy one scale per tensor, w one
per expert (each expert quantized on its own, vmap of quantize_fp8), e4m3 forward and e5m2
gradient; "delayed": "tensor"'s, each scale from the largest amax in a history of earlier
steps (an Fp8Meta from fp8_meta(length, experts=G): x's and dy's histories (L,), w's one per
expert (G, L)), passed as `meta` and replaced by its gradient each step, exactly as
fp8_matmul's (whose docstring says how to calibrate); "block" (DeepSeek-V3): everything
e4m3, x and dy per row and 128 contraction elements, w per expert's 128 x 128 tile (both
copies).
The weight gradient contracts the rows, which the groups split. It runs in fp8 on the
transposed copies quantize_fp8 writes in the same pass as x's and dy's (x^T saved by the
forward, so the residual is x^T in fp8, not x in 16 bits): per tensor one scale each; with
block scales x^T per row and 128 rows of M (1 x 128 along the contraction, as the forward's x),
dy^T per 128 x 128 tile (the layout the block-scaled kernels read as their second operand;
DeepSeek-V3 scales dy 1 x 128 here). The other residuals are w's fp8 copy (G, K, N) with its
scales (the transposed copy, which only the forward reads, is not kept). Rows past every group
come out 0 and get a zero gradient (jax.lax.ragged_dot's rule); the group sizes' rules are
hopper_ragged_dot's.

Serving fixed weights, quantize them once: quantize_experts(w, recipe=...) returns the fp8
copy the forward reads (w^T (G, N, K) with its scales, exactly what each call would compute),
and fp8_ragged_dot(x, that, group_sizes, recipe=...) then quantizes only x. That call is
forward-only: differentiating it raises (train with w in high precision).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm.api import SUPPORTED_OUTPUTS, parse_dtype
from jax_hopper.gemm.fp8_matmul import RECIPES
from jax_hopper.gemm.fp8_meta import check_meta, history_amax, next_meta, read_histories
from jax_hopper.gemm.ragged import check_group_sizes
from jax_hopper.gemm.ragged_tiles import int32_sizes
from jax_hopper.gemm.sharding import spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded, resharded
from jax_hopper.gemm.ragged_fp8 import hopper_ragged_fp8_dot
from jax_hopper.gemm.ragged_fp8_contract import hopper_ragged_fp8_contract
from jax_hopper.quantize.fp8 import (INPUT_DTYPES, Fp8Array, as_bits, check_quantized_weight,
                                     from_bits, quantize_fp8)


def fp8_ragged_dot(lhs, rhs, group_sizes, *, recipe="tensor", out_dtype=None, meta=None):
    """lhs (M, K) @ rhs[g] (G, K, N) for the rows of group g -> (M, N), its products in fp8
    (module docstring). recipe "tensor", "delayed" or "block"; out_dtype bfloat16, float16 or
    float32 (default lhs.dtype); group_sizes (G,) integer, a device array; meta: this call
    site's Fp8Meta (fp8_meta(length, experts=G)), with recipe "delayed" only. Differentiable
    in lhs and rhs (and meta, whose gradient is its next value). rhs may instead be
    quantize_experts(rhs, recipe=recipe)'s Fp8Array (weights quantized once, for serving):
    then the call is forward-only and takes no meta."""
    fn = "fp8_ragged_dot"
    if recipe not in RECIPES:
        raise ValueError(f"{fn}: recipe={recipe!r} must be one of {tuple(RECIPES)}")
    lhs, group_sizes = jnp.asarray(lhs), jnp.asarray(group_sizes)
    quantized = isinstance(rhs, Fp8Array)
    if quantized:
        w8_t, w_scale_t = _check_quantized(fn, rhs, recipe, meta)
        shape = (w8_t.shape[0], w8_t.shape[2], w8_t.shape[1])  # the experts as stored
    else:
        rhs = jnp.asarray(rhs)
        shape = rhs.shape
    for name, t in (("lhs", lhs),) + (() if quantized else (("rhs", rhs),)):
        if t.dtype not in INPUT_DTYPES:
            raise ValueError(f"{fn}: {name}.dtype={t.dtype} must be one of "
                             f"{', '.join(d.name for d in INPUT_DTYPES)} (it is quantized here)")
    if lhs.ndim != 2 or len(shape) != 3 or lhs.shape[1] != shape[1]:
        raise ValueError(f"{fn}: lhs must be (M, K) and rhs (G, K, N) with the same K; got lhs "
                         f"{lhs.shape}, rhs {shape}")
    check_group_sizes(group_sizes, shape[0], "rhs group")
    if not quantized:
        check_meta(fn, recipe, meta, experts=shape[0])
    out_dtype = jnp.dtype(parse_dtype("out_dtype", out_dtype) or lhs.dtype)
    if out_dtype not in SUPPORTED_OUTPUTS:
        raise ValueError(f"{fn}: out_dtype={out_dtype} must be one of "
                         f"{', '.join(d.name for d in SUPPORTED_OUTPUTS)}")
    gs = int32_sizes(group_sizes, lhs.shape[0])
    if lhs.size == 0 or 0 in shape:
        # Nothing to quantize: a zero product (or no rows), made without the operands (whose
        # shardings it need not reconcile; their gradients are then zero, as they should be).
        return jnp.zeros((lhs.shape[0], shape[2]), out_dtype)
    if quantized:
        return _served(lhs, w8_t, w_scale_t, gs, recipe, out_dtype)
    return _fp8_ragged(lhs, rhs, gs, meta, recipe, out_dtype, (lhs.dtype, rhs.dtype))


def quantize_experts(rhs, *, recipe="tensor"):
    """Expert weights rhs (G, K, N) (bf16, fp16 or fp32) quantized once, as fp8_ragged_dot
    quantizes them on every call under `recipe`: an Fp8Array of the transposed copy w^T
    (G, N, K) that the forward reads (fp8 wgmma reads K-major operands only) and its scales,
    one per expert or, with "block", one per 128 x 128 tile. Pass it to fp8_ragged_dot in place
    of rhs to serve without requantizing the weights each call."""
    fn = "quantize_experts"
    if recipe not in RECIPES:
        raise ValueError(f"{fn}: recipe={recipe!r} must be one of {tuple(RECIPES)}")
    rhs = jnp.asarray(rhs)
    if rhs.ndim != 3 or rhs.dtype not in INPUT_DTYPES:
        raise ValueError(f"{fn}: rhs must be (G, K, N) of one of "
                         f"{', '.join(d.name for d in INPUT_DTYPES)}; got {rhs.shape} "
                         f"{rhs.dtype}")
    wq = _weights(rhs, None, RECIPES[recipe])
    return Fp8Array(wq.q_t, wq.scale_t)


def _check_quantized(fn, rhs, recipe, meta):
    """(w^T, its scales) of a quantize_experts result, checked against what quantize_experts
    makes under `recipe` for those experts' shape."""
    if meta is not None:
        raise ValueError(f"{fn}: meta is for training; rhs given quantized (quantize_experts) "
                         "takes none")
    q = jnp.asarray(rhs.q)
    if q.ndim != 3:
        raise ValueError(f"{fn}: a quantized rhs holds w^T (G, N, K) from quantize_experts; "
                         f"got q {q.shape}")
    g, n, k = q.shape
    return check_quantized_weight(fn, "rhs", rhs, quantize_experts, (g, k, n), recipe)


def _weights(rhs, meta, r):
    """rhs (G, K, N) quantized with its transposed copy (G, N, K): per expert's tile with block
    scales, else one scale per expert (each expert quantized on its own), from its history in
    meta where given."""
    if r["scaling"] == "block":
        return quantize_fp8(rhs, dtype=r["fwd"], scaling="block", block="tile", transpose=True)
    amax = (None if meta is None else
            jax.vmap(lambda h: history_amax(h, r["fwd"]))(meta.w))
    if amax is not None and explicitly_sharded(rhs):  # vmapped together: split alike
        amax = resharded(amax, PartitionSpec(spec_of(jax.typeof(rhs))[0]), on=rhs)

    def one(w, a):
        return quantize_fp8(w, dtype=r["fwd"], scaling="tensor", transpose=True, amax=a)
    return jax.vmap(one)(rhs, amax) if amax is not None else jax.vmap(one, (0, None))(rhs, None)


def _product(lhs, w8_t, w_scale_t, gs, meta, r, out_dtype, transpose=False):
    """y from x and w's quantized transposed copy w^T (G, N, K), and x's quantized copy (its
    amax recorded under recipe "delayed"), with the transposed copy the weight gradient reads
    where `transpose` (only a differentiated call writes it; block scales: per row of x^T and
    128 of its columns)."""
    xq = quantize_fp8(lhs, dtype=r["fwd"], scaling=r["scaling"], block="row",
                      transpose=transpose,
                      amax=None if meta is None else history_amax(meta.x, r["fwd"]))
    y = hopper_ragged_fp8_dot(xq.q, w8_t, gs, xq.scale, w_scale_t, out_dtype=out_dtype)
    return y, xq


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def _served(lhs, w8_t, w_scale_t, gs, recipe, out_dtype):
    return _product(lhs, w8_t, w_scale_t, gs, None, RECIPES[recipe], out_dtype)[0]


@_served.defjvp
def _served_jvp(recipe, out_dtype, primals, tangents):
    """Differentiating the serving call is an error, not a silent zero gradient."""
    del recipe, out_dtype, primals, tangents
    raise TypeError("fp8_ragged_dot: rhs given quantized (quantize_experts) is forward-only, "
                    "for serving; to differentiate, pass the weights in high precision")


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _fp8_ragged(lhs, rhs, gs, meta, recipe, out_dtype, grad_dtypes):
    del grad_dtypes
    r = RECIPES[recipe]
    meta = read_histories(meta)
    wq = _weights(rhs, meta, r)
    return _product(lhs, wq.q_t, wq.scale_t, gs, meta, r, out_dtype)[0]


def _forward(lhs, rhs, gs, meta, recipe, out_dtype, grad_dtypes):
    """y and the residuals: x's fp8 transposed copy and its scales (what the weight gradient
    reads), w's fp8 copy as stored (G, K, N) and its scales (not the transposed copy: only the
    forward reads it), the sizes, and under recipe "delayed" meta with the amaxes just recorded
    (grad_dtypes: lhs's and rhs's, the gradients' dtypes)."""
    del grad_dtypes
    r = RECIPES[recipe]
    read = read_histories(meta)
    wq = _weights(rhs, read, r)
    y, xq = _product(lhs, wq.q_t, wq.scale_t, gs, read, r, out_dtype, transpose=True)
    seen = None if meta is None else (read, xq.amax, wq.amax)
    return y, (as_bits((xq.q_t, wq.q)), xq.scale_t, wq.scale, gs, seen,
               manual_axes.types((lhs, rhs, gs, meta)))


def _backward(recipe, out_dtype, grad_dtypes, res, dy):
    *res, primal_types = res
    return manual_axes.like_primals(_grads(recipe, out_dtype, grad_dtypes, res, dy),
                                    primal_types)


def _grads(recipe, out_dtype, grad_dtypes, res, dy):
    """(d lhs, d rhs, d gs, d meta) of the saved residuals."""
    del out_dtype
    (bits, x_scale_t, w_scale, gs, seen), (lhs_dtype, rhs_dtype) = res, grad_dtypes
    r = RECIPES[recipe]
    x8_t, w8 = from_bits(bits, r["fwd"])
    # d lhs = dy @ w[g]^T: dy per row (its contraction is N), w as stored (G, K, N), whose
    # rows are this product's columns; dy's transposed copy (N, M) in the same pass, per
    # 128 x 128 tile with block scales.
    gq = quantize_fp8(dy, dtype=r["grad"], scaling=r["scaling"], block="row", transpose=True,
                      transpose_block="tile",
                      amax=None if seen is None else history_amax(seen[0].grad, r["grad"]))
    dlhs = hopper_ragged_fp8_dot(gq.q, w8, gs, gq.scale, w_scale, out_dtype=lhs_dtype)
    # d rhs[g] = x_g^T dy_g = (x^T)_g (dy^T)_g^T, both fp8 K-major.
    drhs = hopper_ragged_fp8_contract(x8_t, gq.q_t, gs, x_scale_t, gq.scale_t,
                                      out_dtype=rhs_dtype)
    # meta's gradient is its next value (fp8_matmul's module docstring).
    dmeta = None if seen is None else next_meta(seen[0], seen[1], seen[2], gq.amax)
    return dlhs, drhs, np.zeros(gs.shape, jax.dtypes.float0), dmeta


_fp8_ragged.defvjp(_forward, _backward)
