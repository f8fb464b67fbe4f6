"""hopper_fp8_matmul: an fp8 GEMM with float32 scales, fp32 accumulation and the fused
epilogue, and its JAX primitive (kernel families catalog.FAMILIES["fp8"] and ["fp8_block"]).

    out = act(alpha * (a_scale . a) @ (b_scale . b)^T + bias) + beta * residual

a (..., M, K) and b (..., N, K) are float8_e4m3fn or float8_e5m2, both K-major: fp8 wgmma has no
transpose bits, so the kernel reads fp8 operands only with K contiguous. Two scaling modes,
told apart by the scales' rank:
- per tensor: a_scale and b_scale are scalars (or (1,)); the kernel multiplies its fp32
  accumulators by a_scale * b_scale before the epilogue (TensorScaling). Pairs: FP8_PAIRS.
- per block (DeepSeek-V3's fine-grained recipe): a_scale (..., M, ceil(K/128)), one per row and
  128-wide k-block, b_scale (..., ceil(N/128), ceil(K/128)), one per 128 x 128 block; each
  k-block's product is scaled and added in fp32 (MainloopSSPromoted, BlockScaling), as accurate
  as dequantising first. e4m3 x e4m3.
The scales are arrays (traced values: a new scale never recompiles the call).

The primitive's operands, as stored: a (Ba, M, K), b (Bb, N, K) with Ba, Bb 1 (shared) or the
batch; bias (N,) float32 or (0,); residual (1 or batch, M, N) in the out dtype or (0, 0, 0);
a_scale and b_scale float32, (1,) per tensor or (Ba, M, KB) and (Bb, NB, KB) per block. The
result is (batch, M, N). vmap joins the kernel's batch (fp8_batching.py); there is no
differentiation rule (fp8 operands carry no useful gradient; a differentiable fp8 matmul
quantizes high-precision operands around this op). Under a sharded jit each device multiplies
its shards (fp8_sharding.py). The layers: fp8_batching.gemm (jax.vmap) ->
fp8_sharding.partitioned (sharded jit) -> launch -> hopper_fp8_gemm_p.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive

from jax_hopper import _ffi
from jax_hopper.gemm.api import (SUPPORTED_OUTPUTS, as_batched_3d, check_bools, out_dtype_arg,
                                 prepare_bias, prepare_residual, static_scalar)
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.epilogue import activation_code
from jax_hopper.gemm import fp8_batching
from jax_hopper.gemm.pitch import pitch_pad
from jax_hopper.gemm.primitive import (_pad_columns, apply_epilogue, broadcast_batch, call_attrs,
                                       explicit_placement,
                                       empty_call, freeze, gemm_target)
from jax_hopper.gemm.ragged_primitive import FP8_DIFFERENTIABLE, forward_only, register
from jax_hopper.gemm.shared_batch import fold, folds
from jax_hopper.gemm.tuned import default_config
from jax_hopper.gemm.typed_reshape import reshape
from jax_hopper.kernels import catalog
from jax_hopper.quantize.transpose import transpose_fp8

hopper_fp8_gemm_p = Primitive("hopper_fp8_gemm")
_F32 = jnp.dtype(jnp.float32)


def hopper_fp8_matmul(a, b, a_scale, b_scale, *, out_dtype=None, preferred_element_type=None,
                      bias=None, activation=None, residual=None, alpha=1.0, beta=1.0,
                      transpose_a=False, transpose_b=True, config=None):
    """act(alpha * (a_scale * op(a)) @ (b_scale * op(b)) + bias) + beta * residual.

    a: (..., M, K) fp8, or (..., K, M) with transpose_a=True. b: (..., N, K) fp8
    (transpose_b=True, the default: the layout the kernel reads), or (..., K, N) with
    transpose_b=False. fp8 wgmma reads no MN-major operand, so an operand stored so is first
    copied K-major by transpose_fp8 (our kernel: one read and one write of it; transposing once
    ahead of a loop saves that per call). Leading dimensions broadcast as in jnp.matmul.
    a_scale, b_scale, traced: float scalars or (1,) arrays (per tensor), or per 128-wide block
    (DeepSeek-V3's recipe) a_scale (..., M, ceil(K/128)) and b_scale (..., ceil(N/128),
    ceil(K/128)), the leading dimensions those of a and of b; scale [i, j] multiplies the
    operand's rows i (per 128 of them for b) over k in [128 j, 128 j + 128), whichever way the
    operand is stored. out_dtype (alias preferred_element_type): bfloat16 (default), float16 or
    float32. bias (N,), activation, residual, alpha and beta as in hopper_matmul. Any K: one
    that is not a multiple of 16 (TMA reads rows 16 bytes apart) costs a copy of a and b with
    zero columns appended (launch).
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    a_scale, b_scale = jnp.asarray(a_scale), jnp.asarray(b_scale)
    scaling = "tensor" if a_scale.ndim <= 1 else "block"
    family = _FAMILY[scaling]
    pair = (a.dtype.name, b.dtype.name)
    pairs = catalog.FAMILIES[family].dtypes
    if pair not in pairs:
        raise ValueError(f"hopper_fp8_matmul: (a.dtype, b.dtype) = {pair} is not one of the "
                         f"pairs compiled for {scaling} scaling {pairs} (quantize first; for "
                         "16-bit inputs use hopper_matmul)")
    out_dtype = out_dtype_arg(out_dtype, preferred_element_type) or jnp.dtype(jnp.bfloat16)
    if out_dtype not in SUPPORTED_OUTPUTS:
        raise ValueError(f"hopper_fp8_matmul: out_dtype={out_dtype} must be one of "
                         f"{', '.join(d.name for d in SUPPORTED_OUTPUTS)}")
    act = activation_code(activation)
    alpha, beta = static_scalar("alpha", alpha), static_scalar("beta", beta)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"hopper_fp8_matmul: a and b must be at least 2-D; got a.ndim={a.ndim}, "
                         f"b.ndim={b.ndim}")
    check_bools("hopper_fp8_matmul", transpose_a=transpose_a, transpose_b=transpose_b)
    # Stored MN-major ((..., K, M) a, (..., K, N) b), which fp8 wgmma cannot read.
    if transpose_a:
        a = transpose_fp8(a)
    if not transpose_b:
        b = transpose_fp8(b)
    (m, k), (n, kb) = a.shape[-2:], b.shape[-2:]
    if k != kb:
        raise ValueError(f"hopper_fp8_matmul: contraction dimensions differ: a is (..., {m}, {k}) "
                         f"and b is (..., {n}, {kb}) read K-major (transpose_a={transpose_a}, "
                         f"transpose_b={transpose_b})")
    try:
        batch_shape = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError as e:
        raise ValueError(f"hopper_fp8_matmul: batch dimensions of a {a.shape[:-2]} and b "
                         f"{b.shape[:-2]} do not broadcast: {e}") from None
    if scaling == "tensor":
        scales = [_tensor_scale(name, s) for name, s in (("a_scale", a_scale),
                                                         ("b_scale", b_scale))]
    else:
        blocks = -(-k // catalog.FP8_SCALE_BLOCK)
        scales = [_block_scale("a_scale", a_scale, (*a.shape[:-2], m, blocks),
                               "(..., M, ceil(K/128)) with a's leading dimensions"),
                  _block_scale("b_scale", b_scale,
                               (*b.shape[:-2], -(-n // catalog.FP8_SCALE_BLOCK), blocks),
                               "(..., ceil(N/128), ceil(K/128)) with b's leading dimensions")]
    bias_arr = prepare_bias(bias, (n,), "(N,)")
    res_arr = prepare_residual(residual, batch_shape, m, n, out_dtype)
    batch = math.prod(batch_shape)
    config = checked_config(config, pair[0], False, False, family=family, b_dtype=pair[1])

    a3, b3 = as_batched_3d(a, batch_shape), as_batched_3d(b, batch_shape)
    if scaling == "block":  # the scales' batch entries follow their operands'
        scales = [as_batched_3d(scales[0], batch_shape), as_batched_3d(scales[1], batch_shape)]
    params = dict(out_dtype=out_dtype, activation=act, alpha=alpha, beta=beta, config=config,
                  scaling=scaling)
    if batch == 0 or m == 0 or n == 0 or k == 0:
        # nothing to launch; per tensor, the scales multiply the zero product as the kernel's
        scale = (scales[0] * scales[1]).reshape(-1, 1, 1) if scaling == "tensor" else 1.0
        out = empty_call(batch, m, n, bias_arr, res_arr, out_dtype=out_dtype, activation=act,
                         alpha=alpha, beta=beta, family="matmul", scale=scale)
    else:
        out = forward_only(functools.partial(fp8_batching.gemm, launch, freeze(params)),
                           "hopper_fp8_matmul", FP8_DIFFERENTIABLE)(a3, b3, bias_arr, res_arr,
                                                                    *scales)
    return reshape(out, (*batch_shape, m, n))


# The kernel family of each scaling mode.
_FAMILY = {"tensor": "fp8", "block": "fp8_block"}


def _tensor_scale(name, s):
    if s.shape not in ((), (1,)) or not jnp.issubdtype(s.dtype, jnp.floating):
        raise ValueError(f"hopper_fp8_matmul: {name} must be a float scalar or a (1,) array "
                         f"(one scale per tensor; both scales per tensor or both per block); "
                         f"got shape {s.shape}, dtype {s.dtype}")
    return s.astype(jnp.float32).reshape(1)


def _block_scale(name, s, shape, rule):
    if s.shape != shape or not jnp.issubdtype(s.dtype, jnp.floating):
        raise ValueError(f"hopper_fp8_matmul: block scaling needs {name} of shape {rule}, here "
                         f"{shape}, floating (float32 in the kernel); got shape {s.shape}, dtype "
                         f"{s.dtype} (both scales per tensor or both per block)")
    return s.astype(jnp.float32)


def launch(a, b, bias, res, a_scale, b_scale, **params):
    """One device's call on operands whose row pitch TMA can address. A K that is not whole
    16-byte rows is padded with zero columns in a and b (copies of both; zeros add nothing to
    any product, and the block scales keep their shape: the padded K stays within its last
    128-wide block, as 16 divides 128). TMA stores need a 16-byte output pitch too: N is padded
    with zero rows of b (a copy of b) and sliced off. A batch against a shared b is one product
    of its rows (shared_batch.folds; a's block scales fold with it), and config None (no config
    asked for) is chosen here for this device's problem, as primitive.launch does."""
    block = params["scaling"] == "block"
    # Per tensor, rows of entries with scales of their own cannot share one product.
    if folds(a, b.shape[0], res, False) and (block or a_scale.size == b_scale.size == 1):
        return launch(fold(a), b, bias, fold(res), fold(a_scale) if block else a_scale, b_scale,
                      **params).reshape(*a.shape[:2], -1)
    if params["config"] is None:
        batch = broadcast_batch(a.shape[0], b.shape[0])
        m, n, k = a.shape[1], b.shape[1], a.shape[2]
        params = {**params, "config": default_config(_FAMILY[params["scaling"]], a.dtype.name,
                                                     False, False, batch, m, n, k, b.dtype.name)}
    if k_pad := pitch_pad(a.shape[2], a.dtype):
        a, b = (jnp.pad(x, ((0, 0), (0, 0), (0, k_pad))) for x in (a, b))
    n = b.shape[1]
    pad = pitch_pad(n, params["out_dtype"])
    if pad:
        b, bias, res = _pad_columns(b, bias, res, 1, pad)
    out = hopper_fp8_gemm_p.bind(a, b, bias, res, a_scale, b_scale, **params)
    return out[..., :n] if pad else out


def reference(a, b, bias, res, a_scale, b_scale, *, out_dtype, activation, alpha, beta,
              scaling="tensor", config=None):
    """What the kernel computes, in jnp: exact fp8 products summed in fp32 and scaled (per
    block: of the dequantised operands), then the epilogue in fp32 and one rounding."""
    del config
    a, b = a.astype(_F32), b.astype(_F32)
    if scaling == "block":
        a = a * _expand_blocks(a_scale, a.shape, rows=False)
        b = b * _expand_blocks(b_scale, b.shape, rows=True)
    x = jnp.matmul(a, jnp.swapaxes(b, 1, 2), precision=jax.lax.Precision.HIGHEST)
    if scaling == "tensor":  # (1,) each, or one per batch entry
        x = x * (a_scale * b_scale).reshape(-1, 1, 1)
    x = x * alpha
    return apply_epilogue(x, bias, res, activation=activation, beta=beta, out_dtype=out_dtype,
                          family="matmul")


def _expand_blocks(scale, shape, *, rows):
    """A (B, R or R/128, K/128) scale array repeated over its 128-wide blocks to `shape`."""
    block = catalog.FP8_SCALE_BLOCK
    x = jnp.repeat(scale, block, axis=2)[:, :, :shape[2]]
    return jnp.repeat(x, block, axis=1)[:, :shape[1]] if rows else x


def _abstract_eval(a, b, bias, residual, a_scale, b_scale, *, out_dtype, **_):
    batch = broadcast_batch(a.shape[0], b.shape[0])
    return jax.core.ShapedArray((batch, a.shape[1], b.shape[1]), out_dtype,
                                sharding=explicit_placement(a, b, False, False, "fp8", batch))


def _cuda_lowering(ctx, a, b, bias, residual, a_scale, b_scale, *, out_dtype, activation, alpha,
                   beta, config, scaling):
    # As the dense GEMM's lowering (primitive.py): the plan made once, the workspace a second
    # result; the scales are the call's fifth and sixth inputs.
    del out_dtype
    a_aval, b_aval = ctx.avals_in[:2]
    family = _FAMILY[scaling]
    kernel = config.kernel(family, a_aval.dtype.name, False, False, b_aval.dtype.name)
    batch, m, n = ctx.avals_out[0].shape
    resident = _ffi.resident_clusters(kernel, config.cluster_m * config.cluster_n)
    plan = config.plan(kernel, batch, m, n, a_aval.shape[2], resident)
    workspace = jax.core.ShapedArray((plan.pop("workspace_bytes"),), np.uint8)
    out, _ = jax.ffi.ffi_lowering(gemm_target(config.kernel_family(family), plan))(
        ctx.replace(avals_out=[*ctx.avals_out, workspace]), a, b, bias, residual, a_scale,
        b_scale, **call_attrs(kernel, config, plan, activation, alpha, beta))
    return [out]


register(hopper_fp8_gemm_p, _abstract_eval, reference, _cuda_lowering)
