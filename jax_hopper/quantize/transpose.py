"""transpose_fp8: an fp8 array with its last two dimensions swapped, on the GPU
(cuda/quantize/transpose.cu), the bytes as they are.

    w_nk = transpose_fp8(w_kn)     # (..., K, N) -> (..., N, K)

fp8 wgmma reads only K-major operands, so an fp8 weight stored (K, N), the way flax stores a
kernel, needs this copy first: hopper_fp8_matmul(transpose_b=False) makes it. Its scales need no
change (a value keeps its bits). One CTA per 128 x 128 tile: a TMA load, the bytes regathered in
shared memory, a TMA store; rows TMA cannot address (R or C not a multiple of 16) go through a
zero-padded copy, the output sliced back (_padded). Machines without the kernels run
`reference` (jnp.swapaxes). Under vmap the entries fold into the batch the kernel walks; under a
sharded jit each device transposes its own shard (the output's last two dimensions carry the
input's shardings, swapped).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax_hopper.gemm.pitch import pitch_pad
from jax_hopper.gemm.ragged_primitive import forward_only, register
from jax_hopper.gemm.sharding import assign_factors, def_partition, spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape
from jax_hopper.kernels import catalog

transpose_fp8_p = Primitive("hopper_transpose_fp8")


def transpose_fp8(x):
    """x (..., R, C) float8_e4m3fn or float8_e5m2 -> (..., C, R), the same values."""
    x = jnp.asarray(x)
    if x.dtype.name not in catalog.FP8_MAX:
        raise ValueError(f"transpose_fp8: x.dtype={x.dtype} must be one of "
                         f"{tuple(catalog.FP8_MAX)} (16- and 32-bit arrays: jnp.swapaxes, or "
                         "quantize_fp8(..., transpose=True) to quantize and transpose at once)")
    if x.ndim < 2:
        raise ValueError(f"transpose_fp8: x must be at least 2-D (..., rows, cols); got shape "
                         f"{x.shape}")
    lead, (r, c) = x.shape[:-2], x.shape[-2:]
    refused = forward_only(_vmappable, "transpose_fp8",
                           "fp8 arrays come from quantize_fp8, which has none either")
    return reshape(refused(reshape(x, (math.prod(lead), r, c))), (*lead, c, r))


@custom_vmap
def _vmappable(x3):
    return _partitioned(x3)


@_vmappable.def_vmap
def _fold(axis_size, in_batched, x):  # the entries into the batch the kernel walks: one launch
    if not in_batched[0]:
        x = x[None].repeat(axis_size, 0)
    v, b, r, c = x.shape
    return reshape(_vmappable(reshape(x, (v * b, r, c))), (v, b, c, r)), True


@custom_partitioning
def _partitioned(x3):
    return transpose_fp8_p.bind(x3)


def _partition(mesh, arg_shapes, result_shape):
    sx, so = spec_of(arg_shapes[0]), spec_of(result_shape)
    _, spec = assign_factors(mesh, {"b": [sx[0], so[0]], "r": [sx[1], so[2]],
                                    "c": [sx[2], so[1]], "k": []}, 0)
    return mesh, transpose_fp8_p.bind, spec("b", "c", "r"), (spec("b", "r", "c"),)


def_partition(_partitioned, _partition, "b r c -> b c r")


def reference(x):
    return jnp.swapaxes(x, 1, 2)


def _abstract_eval(x):
    b, r, c = x.shape
    if not explicitly_sharded(x):
        return jax.core.ShapedArray((b, c, r), x.dtype)
    # Under explicit sharding typed as _partition places it (x's splits, transposed).
    placed = _partition(x.sharding.mesh, (x,), jax.ShapeDtypeStruct((b, c, r), x.dtype))[2]
    return jax.core.ShapedArray((b, c, r), x.dtype, sharding=placed)


def _padded(x):
    """The kernel on x padded with zeros to rows and columns TMA can address (whole 16-byte
    rows both ways), its output sliced back."""
    _, r, c = x.shape
    rp, cp = r + pitch_pad(r, x.dtype), c + pitch_pad(c, x.dtype)
    return transpose_fp8_p.bind(jnp.pad(x, ((0, 0), (0, rp - r), (0, cp - c))))[:, :c, :r]


_reference_lowering = mlir.lower_fun(reference, multiple_results=False)
_padded_lowering = mlir.lower_fun(_padded, multiple_results=False)


def _cuda_lowering(ctx, x):
    aval = ctx.avals_in[0]
    _, r, c = aval.shape
    if math.prod(aval.shape) == 0:  # nothing to launch
        return _reference_lowering(ctx, x)
    if pitch_pad(r, aval.dtype) or pitch_pad(c, aval.dtype):
        return _padded_lowering(ctx, x)
    return jax.ffi.ffi_lowering("jax_hopper_transpose_fp8")(ctx, x)


register(transpose_fp8_p, _abstract_eval, reference, _cuda_lowering)
