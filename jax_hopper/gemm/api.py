"""hopper_matmul: the public GEMM with jnp.matmul semantics and a fused epilogue."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_hopper.gemm import autodiff
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.epilogue import activation_code
from jax_hopper.gemm.pitch import tma_unaddressable
from jax_hopper.gemm.primitive import empty_call, freeze
from jax_hopper.gemm.typed_reshape import reshape
from jax_hopper.kernels import catalog

SUPPORTED_INPUTS = tuple(jnp.dtype(d) for d in catalog.INPUT_DTYPES)
SUPPORTED_OUTPUTS = tuple(jnp.dtype(d) for d in catalog.OUTPUT_DTYPES)


def hopper_matmul(a, b, *, out_dtype=None, preferred_element_type=None, config=None, bias=None,
                  activation=None, residual=None, alpha=1.0, beta=1.0, transpose_a=False,
                  transpose_b=False, strict=False):
    """out = act(alpha * op(a) @ op(b) + bias) + beta * residual, fp32 accumulation.

    a: (..., M, K) or, with transpose_a, (..., K, M) -- read in place through wgmma's transpose
       bit, never transposed in memory. b: (..., K, N) or, with transpose_b, (..., N, K).
    Leading (batch) dimensions broadcast as in jnp.matmul; an operand without them is shared by
    every batch entry without being copied (a batch of K-major a against one b runs as a single
    product of batch x M rows, b read once). bfloat16 or float16 inputs (both the same);
    out_dtype (alias preferred_element_type) bfloat16, float16 or float32, default the input
    dtype. bias: (N,), added in float32; residual: broadcastable to the output, cast to
    out_dtype.
    activation: None, "relu", "gelu_tanh", "gelu" (exact erf) or "silu".
    config: a GemmConfig; by default the tuned one for this GPU and problem (python -m
    jax_hopper.tune), else jax_hopper.gemm.heuristics.heuristic_config's (the swap-AB kernels for
    M <= 64 with a stored (M, K)), chosen for the problem each device runs (a shard of a
    sharded call; a vmapped call's whole batch).
    Every shape runs on the kernels. An operand whose rows TMA cannot address (a row pitch
    that is not a multiple of 16 bytes, e.g. K=100 in bf16 row-major) is copied into a padded
    pitch first (jax_hopper/gemm/pitch.py); strict=True raises ValueError instead of copying.
    """
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    out_dtype, act, alpha, beta = epilogue_args(a, b, out_dtype, preferred_element_type,
                                                activation, alpha, beta)
    check_bools("hopper_matmul", transpose_a=transpose_a, transpose_b=transpose_b,
                strict=strict)
    if a.ndim < 1 or b.ndim < 1:
        raise ValueError(f"a and b must have at least 1 dimension; got a.ndim={a.ndim}, "
                         f"b.ndim={b.ndim}")

    # 1-D operands as jnp.matmul treats them: a vector a is a row (1, K), a vector b a column.
    squeeze_m, squeeze_n = a.ndim == 1, b.ndim == 1
    if squeeze_m:
        if transpose_a:
            raise ValueError("transpose_a needs a at least 2-D")
        a = a[None, :]
    if squeeze_n:
        if transpose_b:
            raise ValueError("transpose_b needs b at least 2-D")
        # Stored as the K-major (1, K), whose row pitch TMA can address; (K, 1) has 2-byte rows.
        b, transpose_b = b[None, :], True

    m, ka = (a.shape[-1], a.shape[-2]) if transpose_a else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if transpose_b else (b.shape[-2], b.shape[-1])
    if ka != kb:
        raise ValueError(f"contraction dimensions differ: op(a) is ({m}, {ka}) and op(b) is "
                         f"({kb}, {n}) (transpose_a={transpose_a}, transpose_b={transpose_b})")
    k = ka
    try:
        batch_shape = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch dimensions of a {a.shape[:-2]} and b {b.shape[:-2]} do not "
                         f"broadcast: {e}") from None
    batch = math.prod(batch_shape)

    bias_arr = prepare_bias(bias, (n,), "(N,)")
    res_arr = prepare_residual(residual, batch_shape, m, n, out_dtype)

    a_mn_major, b_mn_major = bool(transpose_a), not transpose_b
    b3 = as_batched_3d(b, batch_shape)
    a3 = as_batched_3d(a, batch_shape)
    config = checked_config(config, a.dtype.name, a_mn_major, b_mn_major)

    params = dict(family="matmul", a_mn_major=a_mn_major, b_mn_major=b_mn_major,
                  out_dtype=out_dtype, activation=act, alpha=alpha, beta=beta, config=config)

    if batch == 0 or m == 0 or n == 0 or k == 0:  # empty, or all epilogue (K = 0): no launch
        out = empty_call(batch, m, n, bias_arr, res_arr, out_dtype=out_dtype, activation=act,
                         alpha=alpha, beta=beta, family="matmul")
    elif strict and (reason := tma_unaddressable(a3, b3)) is not None:
        raise ValueError(f"hopper_matmul(strict=True): {reason}; without strict it is copied "
                         "into a padded pitch")
    else:
        out = autodiff.gemm(a3, b3, bias_arr, res_arr, freeze(params))

    out = reshape(out, (*batch_shape, m, n))
    if squeeze_m:
        out = out[..., 0, :]
    if squeeze_n:
        out = out[..., 0]
    return out


def out_dtype_arg(out_dtype, preferred_element_type):
    """The out dtype asked for by either name (None: the input dtype), or ValueError."""
    if out_dtype is not None and preferred_element_type is not None and \
            jnp.dtype(out_dtype) != jnp.dtype(preferred_element_type):
        raise ValueError("out_dtype and preferred_element_type disagree; pass one of them")
    return parse_dtype("out_dtype", out_dtype if out_dtype is not None
                       else preferred_element_type)


def check_bools(fn: str, **flags):
    """ValueError naming the first of `flags` (layout and mode switches of `fn`) that is not a
    bool: a truthy string or array would otherwise pick a layout silently."""
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"{fn}: {name} must be a bool, got {flag!r}")


def prepare_bias(bias, shape: tuple, dims: str, why: str = ""):
    """bias as the kernel adds it: float32 of `shape` (named `dims`, e.g. "(N,)"), or (0,) when
    there is none; ValueError naming the rule otherwise. (The cast costs nothing: one vector.)"""
    if bias is None:
        return jnp.zeros((0,), jnp.float32)
    bias = jnp.asarray(bias)
    if bias.shape != tuple(shape):
        raise ValueError(f"bias.shape={bias.shape} must be {dims} = {tuple(shape)}{why}")
    real_values("bias", bias)
    return bias.astype(jnp.float32)


def real_values(name: str, x) -> None:
    """ValueError unless x holds real numbers (a float or integer dtype): a complex epilogue
    operand would lose its imaginary part in the cast."""
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)):
        raise ValueError(f"{name} must be a real (float or integer) array; got {x.dtype}")


def checked_residual(residual, shape: tuple, out_dtype):
    """residual cast to out_dtype, or ValueError unless it broadcasts to the output `shape`
    (the caller broadcasts it as its kernel needs)."""
    residual = jnp.asarray(residual)
    try:
        target = jnp.broadcast_shapes(residual.shape, tuple(shape))
    except ValueError:
        target = None
    if target != tuple(shape):
        raise ValueError(f"residual.shape={residual.shape} must broadcast to the output shape "
                         f"{tuple(shape)}")
    real_values("residual", residual)
    return residual.astype(out_dtype)


def parse_dtype(name, value):
    if value is None:
        return None
    try:
        return jnp.dtype(value)
    except TypeError:
        raise ValueError(f"{name}={value!r} is not a dtype (e.g. jnp.bfloat16)") from None


def epilogue_args(a, b, out_dtype, preferred_element_type, activation, alpha, beta,
                  names=("a", "b"), fn="hopper_matmul"):
    """The checked dtypes and epilogue of a GEMM call: (out dtype, default a's; activation code;
    alpha; beta), or ValueError naming the argument."""
    return (checked_out_dtype(a, b, out_dtype, preferred_element_type, names, fn),
            activation_code(activation), static_scalar("alpha", alpha),
            static_scalar("beta", beta))


def checked_out_dtype(a, b, out_dtype, preferred_element_type, names=("a", "b"),
                      fn="hopper_matmul"):
    """The out dtype asked for by either name (default a's), with a's and b's dtypes checked,
    or ValueError naming the argument."""
    out_dtype = out_dtype_arg(out_dtype, preferred_element_type)
    check_dtypes(a, b, out_dtype, names=names, fn=fn)
    return out_dtype if out_dtype is not None else a.dtype


def static_scalar(name, value) -> float:
    """alpha and beta are static Python numbers: they select the kernel's epilogue."""
    scalar = isinstance(value, (int, float, np.number)) or (
        isinstance(value, (np.ndarray, jax.Array)) and value.shape == ())
    if not scalar or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}={value!r} must be a real Python or NumPy scalar (a static "
                         "epilogue constant), not a string or an array")
    try:
        return float(value)
    except (TypeError, jax.errors.ConcretizationTypeError):
        raise ValueError(f"{name} must be a concrete scalar, not a traced value: the epilogue "
                         "constants are compiled into the call") from None


def check_dtypes(a, b, out_dtype, names=("a", "b"), fn="hopper_matmul"):
    for name, x in zip(names, (a, b)):
        if x.dtype not in SUPPORTED_INPUTS:
            raise ValueError(f"{name}.dtype={x.dtype} is not supported: {fn} takes "
                             f"{', '.join(d.name for d in SUPPORTED_INPUTS)} inputs (cast first)")
    if a.dtype != b.dtype:
        raise ValueError(f"{names[0]}.dtype={a.dtype} and {names[1]}.dtype={b.dtype} differ: "
                         "wgmma multiplies two operands of one type; cast one of them "
                         "(jnp.matmul would promote to float32, which this kernel does not take)")
    if out_dtype is not None and jnp.dtype(out_dtype) not in SUPPORTED_OUTPUTS:
        raise ValueError(f"out_dtype={jnp.dtype(out_dtype)} must be one of "
                         f"{', '.join(d.name for d in SUPPORTED_OUTPUTS)}")


def prepare_residual(residual, batch_shape, m, n, out_dtype):
    if residual is None:
        return jnp.zeros((0, 0, 0), out_dtype)
    full = (*batch_shape, m, n)
    residual = checked_residual(residual, full, out_dtype)
    # A residual shared by every batch entry stays (1, M, N); anything else is materialised.
    lead = residual.shape[:-2]
    if math.prod(lead) == 1:
        return jnp.broadcast_to(residual.reshape(residual.shape[-2:]), (m, n))[None]
    return jnp.broadcast_to(residual, full).reshape(math.prod(batch_shape), m, n)


def as_batched_3d(x, batch_shape):
    """(..., r, c) -> (1 or batch, r, c) without copying when x's batch dims are all 1 or absent."""
    lead = x.shape[:-2]
    if math.prod(lead) == 1 or not lead:
        return reshape(x, (1, *x.shape[-2:]))
    if tuple(lead) != tuple(batch_shape):
        x = jnp.broadcast_to(x, (*batch_shape, *x.shape[-2:]))  # partial broadcast: materialise
    return reshape(x, (math.prod(x.shape[:-2]), *x.shape[-2:]))
