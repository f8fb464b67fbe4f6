"""hopper_ragged_fp8_contract: out[g] = (x_scale x_g)^T (y_scale y_g) on fp8 operands, where the
groups split the contracted rows: the weight gradient of fp8_ragged_dot.

    xq = quantize_fp8(x, transpose=True)                          # x (M, P): q_t (P, M)
    gq = quantize_fp8(dy, dtype=jnp.float8_e5m2, transpose=True)  # dy (M, Q): q_t (Q, M)
    dw = hopper_ragged_fp8_contract(xq.q_t, gq.q_t, group_sizes, xq.scale, gq.scale)

hopper_ragged_contract's product (group sizes on the device, with hopper_ragged_dot's rules;
an empty group's entry is zero; no (G, M, ...) intermediate) on the grouped_contraction_fp8
kernel family. fp8 wgmma reads K-major operands only, so x and y come with the contracted rows
last, x^T (P, M) and y^T (Q, M) (transposed=True, the default: the transposed copies that
quantize_fp8 writes in the pass that quantizes the forward operand); x (M, P) and y (M, Q)
(transposed=False) are first copied by transpose_fp8. One float32 scale per operand; the kernel
multiplies its fp32 accumulators by x_scale * y_scale. A group starts at any column of x^T:
its k-blocks start at the 16-byte chunk holding that column (TMA's innermost coordinate must be
whole 16 bytes), and the columns of the first and last block outside the group are zeroed in
shared memory before the wgmmas read them (cuda/gemm/mainloop/ss.cuh, clear_k_columns).

Layers: hopper_ragged_fp8_contract checks its arguments -> partitioned (sharded jit: P and Q
split run locally, M split evenly sums the devices' float32 partials: ragged_contract.py's
contraction_partition; vmap one launch per entry) -> launch (padding, config) ->
hopper_ragged_fp8_contract_p. Forward only: fp8 operands carry no useful gradient.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive

from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.heuristics import choose_contraction_config
from jax_hopper.gemm.pitch import pitch_granule, pitch_pad
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.ragged import check_group_sizes
from jax_hopper.gemm.ragged_contract import (contraction_lowering, contraction_partition,
                                             contraction_reference, contraction_rule)
from jax_hopper.gemm.ragged_fp8 import tensor_scale
from jax_hopper.gemm.ragged_primitive import register, vmapped_per_entry
from jax_hopper.kernels import catalog
from jax_hopper.quantize.transpose import transpose_fp8

hopper_ragged_fp8_contract_p = Primitive("hopper_ragged_fp8_contract")
_F32 = jnp.dtype(jnp.float32)
_FAMILY = "grouped_contraction_fp8"
_FN = "hopper_ragged_fp8_contract"
# The factors of x^T's and y^T's dimensions: the output's p and q, the contracted rows m.
_X, _Y = ("p", "m"), ("q", "m")


def hopper_ragged_fp8_contract(x, y, group_sizes, x_scale, y_scale, *, transposed=True,
                               out_dtype=None, preferred_element_type=None, config=None):
    """out[g] = x_scale * y_scale * x_g^T y_g (module docstring), out (G, P, Q).

    x, y: fp8 ((x.dtype, y.dtype) one of catalog.FP8_PAIRS), x^T (P, M) and y^T (Q, M) with
    transposed=True (the default), else x (M, P) and y (M, Q); group_sizes (G,) integer, a
    device array (sizes of consecutive groups of the M rows); x_scale, y_scale: float scalars
    or (1,) arrays (traced); out_dtype (alias preferred_element_type) bfloat16 (default),
    float16 or float32. config: a GemmConfig of the grouped_contraction_fp8 family; default
    heuristics.choose_contraction_config of the problem each launch runs."""
    x, y, group_sizes = jnp.asarray(x), jnp.asarray(y), jnp.asarray(group_sizes)
    pair = (x.dtype.name, y.dtype.name)
    if pair not in catalog.FAMILIES[_FAMILY].dtypes:
        raise ValueError(f"{_FN}: (x.dtype, y.dtype) = {pair} is not one of the fp8 pairs "
                         f"compiled {catalog.FAMILIES[_FAMILY].dtypes} (for 16-bit inputs use "
                         "hopper_ragged_contract)")
    if not isinstance(transposed, bool):
        raise ValueError(f"{_FN}: transposed must be a bool, got {transposed!r}")
    layout = "(P, M) and (Q, M)" if transposed else "(M, P) and (M, Q)"
    if x.ndim != 2 or y.ndim != 2 or x.shape[1 if transposed else 0] != y.shape[
            1 if transposed else 0]:
        raise ValueError(f"{_FN}: x.shape={x.shape} and y.shape={y.shape} must be {layout} "
                         f"with the same rows M (the contracted, grouped dimension; "
                         f"transposed={transposed})")
    if not transposed:  # (M, P) is MN-major for this product, which fp8 wgmma cannot read
        x, y = transpose_fp8(x), transpose_fp8(y)
    (p, m), q = x.shape, y.shape[0]
    if group_sizes.ndim != 1:
        raise ValueError(f"{_FN}: group_sizes must be a 1-D integer array (G,), one size per "
                         f"group; got {group_sizes.dtype} {group_sizes.shape}")
    groups = group_sizes.shape[0]
    check_group_sizes(group_sizes, groups, "group")
    scales = [tensor_scale(_FN, "x_scale", x_scale, (1,)),
              tensor_scale(_FN, "y_scale", y_scale, (1,))]
    out_dtype = api.out_dtype_arg(out_dtype, preferred_element_type) or jnp.dtype(jnp.bfloat16)
    if out_dtype not in api.SUPPORTED_OUTPUTS:
        raise ValueError(f"{_FN}: out_dtype={out_dtype} must be one of "
                         f"{', '.join(d.name for d in api.SUPPORTED_OUTPUTS)}")
    config = checked_config(config, pair[0], False, False, family=_FAMILY, b_dtype=pair[1])
    if m == 0 or p == 0 or q == 0 or groups == 0:  # nothing to launch
        return jnp.zeros((groups, p, q), out_dtype)
    params = freeze(dict(out_dtype=out_dtype, config=config))
    return _vmappable(params)(x, y, group_sizes.astype(jnp.int32), *scales)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    return vmapped_per_entry(functools.partial(_partitioned, params))


@functools.partial(custom_partitioning, static_argnums=(0,))
def _partitioned(params, xt, yt, gs, x_scale, y_scale):
    return launch(xt, yt, gs, x_scale, y_scale, **dict(params))


def _rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return contraction_rule(_X, _Y, 2)


def _partition(params, mesh, arg_shapes, result_shape):
    return contraction_partition(_FN, launch, _X, _Y, params, mesh, arg_shapes, result_shape)


_partitioned.def_partition(partition=_partition, sharding_rule=_rule)


def launch(xt, yt, group_sizes, x_scale, y_scale, *, out_dtype, config):
    """One device's call on x^T (P, M) and y^T (Q, M): M not whole 16-byte rows pads both with
    zero columns (rows past every group: they count for none), Q not whole rows of the output
    pads y^T with zero rows, sliced off. config None: choose_contraction_config of (P, Q)."""
    (p, m), q = xt.shape, yt.shape[0]
    config = config or choose_contraction_config(p, q, _FAMILY)
    if m_pad := pitch_pad(m, xt.dtype):
        xt = jnp.pad(xt, ((0, 0), (0, m_pad)))
        yt = jnp.pad(yt, ((0, 0), (0, m_pad)))
    if q_pad := -q % pitch_granule(out_dtype):
        yt = jnp.pad(yt, ((0, q_pad), (0, 0)))
    ends = ragged_tiles.group_ends(group_sizes, m)
    out = hopper_ragged_fp8_contract_p.bind(xt[None], yt[None], ends, x_scale, y_scale,
                                            out_dtype=out_dtype, config=config)
    return out[:, :, :q]


def _abstract_eval(xt3, yt3, ends, x_scale, y_scale, *, out_dtype, config):
    del x_scale, y_scale, config
    return jax.core.ShapedArray((ends.shape[0], xt3.shape[1], yt3.shape[1]), out_dtype)


def reference(xt3, yt3, ends, x_scale, y_scale, *, out_dtype, config=None):
    """What the kernel computes, in jnp: exact fp8 products summed in float32 per group (rows
    past the last end in none), scaled by x_scale * y_scale, one rounding."""
    del config
    x, y = (jnp.swapaxes(t[0], 0, 1).astype(_F32) for t in (xt3, yt3))
    return (contraction_reference(x, y, ends) * (x_scale[0] * y_scale[0])).astype(out_dtype)


def _cuda_lowering(ctx, xt3, yt3, ends, x_scale, y_scale, *, out_dtype, config):
    del out_dtype
    return contraction_lowering(_FAMILY, False, ctx, xt3, yt3, ends, x_scale, y_scale,
                                config=config)


register(hopper_ragged_fp8_contract_p, _abstract_eval, reference, _cuda_lowering)
