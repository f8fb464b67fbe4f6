"""The `hopper_ragged_dot` JAX primitive (the grouped kernel family): abstract eval, the CUDA
lowering to the FFI custom call, the reference lowering, and `launch`, one device's call.

Operands, as stored: lhs (1, M, K); rhs (G, K, N) (b_mn_major, the layout of
jax.lax.ragged_dot) or (G, N, K); group_sizes (G,) int32; the tile table (ragged_tiles.py,
for the kernel's block_m; the reference ignores it, and XLA then drops it); bias (G, N)
float32 or (0,); residual (1, M, N) in the out dtype or (0, 0, 0). The result is (1, M, N):
rows of group g are act(alpha * lhs_rows @ rhs[g] + bias[g]) + beta * residual, rows past
every group act(0) + beta * residual. Group sizes are made valid as ragged_tiles.py says.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from jax_hopper import _ffi
from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.epilogue import apply_activation
from jax_hopper.gemm.primitive import (_KERNELS, _pad_columns, call_attrs, freeze,
                                       tma_unaddressable)

hopper_ragged_p = Primitive("hopper_ragged_dot")
_F32 = jnp.dtype(jnp.float32)


def _abstract_eval(lhs, rhs, group_sizes, tiles, bias, residual, *, b_mn_major, out_dtype,
                   **_):
    n = rhs.shape[2] if b_mn_major else rhs.shape[1]
    return jax.core.ShapedArray((1, lhs.shape[1], n), out_dtype)


def reference(lhs, rhs, group_sizes, tiles, bias, residual, *, b_mn_major, out_dtype,
              activation, alpha, beta, config=None):
    """What the kernel computes, in jnp: fp32 accumulation, epilogue in fp32, one rounding."""
    del tiles, config
    rhs_kn = rhs if b_mn_major else jnp.swapaxes(rhs, 1, 2)
    sizes = ragged_tiles.valid_sizes(group_sizes, lhs.shape[1])
    x = jax.lax.ragged_dot(lhs[0], rhs_kn, sizes, preferred_element_type=_F32)
    return epilogue(alpha * x, group_sizes, bias, residual, activation=activation, beta=beta,
                    out_dtype=out_dtype)


def epilogue(x, group_sizes, bias, residual, *, activation, beta, out_dtype):
    """act(x + bias[group of the row]) + beta * residual on an fp32 (M, N) x, one rounding to
    out_dtype; rows past every group get no bias. Returns (1, M, N)."""
    if bias.size:
        per_row = jnp.concatenate([bias, jnp.zeros((1, bias.shape[1]), _F32)])
        x = x + per_row[ragged_tiles.row_groups(group_sizes, x.shape[0])]
    x = apply_activation(x, activation)
    if residual.size:
        x = x + beta * residual[0].astype(_F32)
    return x.astype(out_dtype)[None]


def launch(lhs, rhs, group_sizes, bias, res, **params):
    """One device's grouped GEMM on operands as they lie on it. An output pitch TMA cannot store
    (N not whole 16-byte chunks) is padded with zero columns (a copy of rhs) and sliced off; an
    operand pitch TMA cannot load (K not a multiple of 8 for 16-bit inputs, or N for a
    (G, K, N) rhs) is computed by the reference, with a warning."""
    b_mn_major = params["b_mn_major"]
    n = rhs.shape[2] if b_mn_major else rhs.shape[1]
    pad = -n % (16 // np.dtype(params["out_dtype"]).itemsize)
    if pad:
        rhs, bias, res = _pad_columns(rhs, bias, res, 2 if b_mn_major else 1, pad)
    if (reason := tma_unaddressable(lhs, rhs)) is not None:
        warnings.warn(f"hopper_ragged_dot falls back to XLA: {reason}", stacklevel=2)
        out = reference(lhs, rhs, group_sizes, None, bias, res, **params)
    else:
        tiles = ragged_tiles.tile_table(group_sizes, lhs.shape[1], params["config"].block_m)
        out = hopper_ragged_p.bind(lhs, rhs, group_sizes, tiles, bias, res, **params)
    return out[..., :n] if pad else out


def _cuda_lowering(ctx, lhs, rhs, group_sizes, tiles, bias, residual, *, b_mn_major, out_dtype,
                   activation, alpha, beta, config):
    # As the dense GEMM's lowering (primitive.py), with the tile table as the call's fifth
    # input: the plan covers every slot of the table (a static bound of the tiles in use).
    del group_sizes
    lhs_aval, tiles_aval = ctx.avals_in[0], ctx.avals_in[3]
    kernel = config.kernel("grouped", lhs_aval.dtype.name, False, b_mn_major)
    _, m, n = ctx.avals_out[0].shape
    k = lhs_aval.shape[2]
    slots = (tiles_aval.shape[0] - 1) // ragged_tiles.GROUP_TILE_FIELDS
    resident = _ffi.resident_clusters(kernel, config.cluster_m * config.cluster_n)
    plan = config.plan(kernel, 1, slots * config.block_m, n, k, resident)
    workspace = jax.core.ShapedArray((plan.pop("workspace_bytes"),), np.uint8)
    out, _ = jax.ffi.ffi_lowering("jax_hopper_gemm_grouped")(
        ctx.replace(avals_in=[ctx.avals_in[i] for i in (0, 1, 4, 5, 3)],
                    avals_out=[*ctx.avals_out, workspace]),
        lhs, rhs, bias, residual, tiles,
        **call_attrs(kernel, config, plan, activation, alpha, beta))
    return [out]


def per_entry(fn, batched, args):
    """vmap as one launch per entry: fn over the leading axis of the batched args (lax.map);
    an operand not batched, typically the experts' weights, is shared by every entry, never
    copied."""
    xs = [a for a, is_batched in zip(args, batched) if is_batched]

    def one(x):
        entry = iter(x)
        return fn(*[next(entry) if is_batched else a for a, is_batched in zip(args, batched)])

    return jax.lax.map(one, xs)


def _batch_rule(args, dims, **params):
    batched = [d is not None for d in dims]  # None: not mapped
    moved = [jnp.moveaxis(a, d, 0) if b else a for a, d, b in zip(args, dims, batched)]
    return per_entry(lambda *a: hopper_ragged_p.bind(*a, **params), batched, moved), 0


@functools.lru_cache(maxsize=None)
def _jitted_bind(params: tuple):
    return jax.jit(lambda *args: hopper_ragged_p.bind(*args, **dict(params)))


hopper_ragged_p.def_impl(lambda *args, **params: _jitted_bind(freeze(params))(*args))
hopper_ragged_p.def_abstract_eval(_abstract_eval)
batching.primitive_batchers[hopper_ragged_p] = _batch_rule
_reference_lowering = mlir.lower_fun(reference, multiple_results=False)
mlir.register_lowering(hopper_ragged_p, _reference_lowering, platform="cpu")
mlir.register_lowering(hopper_ragged_p, _cuda_lowering if _KERNELS else _reference_lowering,
                       platform="cuda")
