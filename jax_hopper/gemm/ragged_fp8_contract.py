"""hopper_ragged_fp8_contract: out[g] = (x_scale x)_g^T (y_scale y)_g on fp8 operands, where the
groups split the contracted rows: the weight gradient of fp8_ragged_dot.

    xq = quantize_fp8(x, transpose=True)                          # x (M, P): q_t (P, M)
    gq = quantize_fp8(dy, dtype=jnp.float8_e5m2, transpose=True)  # dy (M, Q): q_t (Q, M)
    dw = hopper_ragged_fp8_contract(xq.q_t, gq.q_t, group_sizes, xq.scale, gq.scale)

hopper_ragged_contract's product (group sizes on the device, with hopper_ragged_dot's rules;
an empty group's entry is zero; no (G, M, ...) intermediate) on fp8 kernels. fp8 wgmma reads
K-major operands only, so x and y come with the contracted rows last, x^T (P, M) and y^T (Q, M)
(transposed=True, the default: the transposed copies that quantize_fp8 writes in the pass that
quantizes the forward operand); x (M, P) and y (M, Q) (transposed=False, per tensor only) are
first copied by transpose_fp8. Scales:
- per tensor (grouped_contraction_fp8): one float32 per operand; the kernel multiplies its fp32
  accumulators by x_scale * y_scale. A group's k-blocks start at the 16-byte chunk holding its
  first column (TMA's innermost coordinate must be whole 16 bytes);
- per block (grouped_contraction_fp8_block, DeepSeek-V3's recipe for the weight gradient with
  y's scales per 128 x 128 block): x_scale one per row of x^T and 128 of its columns, y_scale
  one per 128 x 128 block of y^T; each k-block's product scaled and added in fp32
  (MainloopSSPromoted). A k-block must be one scale block, so a group's k-blocks start at the
  128-column boundary at or before its first column.
Either way the columns of a group's first and last k-block outside the group are zeroed in
shared memory before the wgmmas read them (cuda/gemm/mainloop/ss.cuh, clear_k_columns).

Layers: hopper_ragged_fp8_contract checks its arguments -> partitioned (sharded jit: P and Q
split run locally, M split evenly sums the devices' float32 partials: ragged_contract.py's
contraction_partition; with block scales only P splits; vmap one launch per entry) -> launch
(padding, config) -> hopper_ragged_fp8_contract_p. Forward only: fp8 operands carry no useful
gradient.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive

from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.tuned import grouped_config
from jax_hopper.gemm.pitch import pitch_granule, pitch_pad
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.ragged import check_group_sizes
from jax_hopper.gemm.ragged_contract import (contraction_lowering, contraction_partition,
                                             contraction_placement,
                                             contraction_reference, contraction_rule)
from jax_hopper.gemm.ragged_fp8 import block_scale, expand_blocks, scaling_of, tensor_scale
from jax_hopper.gemm.ragged_primitive import (FP8_DIFFERENTIABLE, forward_only, register,
                                             vmapped_per_entry)
from jax_hopper.gemm.sharding import def_partition
from jax_hopper.kernels import catalog
from jax_hopper.quantize.transpose import transpose_fp8

hopper_ragged_fp8_contract_p = Primitive("hopper_ragged_fp8_contract")
_F32 = jnp.dtype(jnp.float32)
_FAMILIES = {"tensor": "grouped_contraction_fp8", "block": "grouped_contraction_fp8_block"}
_FN = "hopper_ragged_fp8_contract"
_BLOCK = catalog.FP8_SCALE_BLOCK
# The factors of x^T's and y^T's dimensions: the output's p and q, the contracted rows m.
_X, _Y = ("p", "m"), ("q", "m")


def hopper_ragged_fp8_contract(x, y, group_sizes, x_scale, y_scale, *, transposed=True,
                               out_dtype=None, preferred_element_type=None, config=None):
    """out[g] = (x_scale x)_g^T (y_scale y)_g (module docstring), out (G, P, Q).

    x, y: fp8, x^T (P, M) and y^T (Q, M) with transposed=True (the default), else x (M, P) and
    y (M, Q); group_sizes (G,) integer, a device array (sizes of consecutive groups of the M
    rows). The scales, traced float arrays, pick the recipe:
      - per tensor (family grouped_contraction_fp8): x_scale and y_scale scalars or (1,);
        (x.dtype, y.dtype) a pair of catalog.FP8_PAIRS;
      - per block (family grouped_contraction_fp8_block): x_scale (P, ceil(M/128)), one per
        row of x^T and 128 of its columns; y_scale (ceil(Q/128), ceil(M/128)), one per
        128 x 128 block of y^T (quantize_fp8(..., transpose=True, transpose_block="row" and
        "tile")); e4m3 both; transposed=True only (the scales are of the transposed copies).
    out_dtype (alias preferred_element_type) bfloat16 (default), float16 or float32. config: a
    GemmConfig of the scaling's family; default the config tuned for this GPU and the problem
    each launch runs, else heuristics.choose_contraction_config's."""
    x, y, group_sizes = jnp.asarray(x), jnp.asarray(y), jnp.asarray(group_sizes)
    scaling = scaling_of(_FN, ("x_scale", "y_scale"), (x_scale, y_scale), (2, 2),
                         "scalars or (1,)",
                         "x_scale (P, ceil(M/128)), y_scale (ceil(Q/128), ceil(M/128))")
    family = _FAMILIES[scaling]
    pair = (x.dtype.name, y.dtype.name)
    if pair not in catalog.FAMILIES[family].dtypes:
        raise ValueError(f"{_FN}: (x.dtype, y.dtype) = {pair} is not one of the fp8 pairs "
                         f"compiled {catalog.FAMILIES[family].dtypes} for {scaling} scales "
                         "(for 16-bit inputs use hopper_ragged_contract)")
    api.check_bools(_FN, transposed=transposed)
    if scaling == "block" and not transposed:
        raise ValueError(f"{_FN}: block scales are those of the transposed copies x^T (P, M) "
                         "and y^T (Q, M): pass them with transposed=True")
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
    if scaling == "block":
        mb = -(-m // _BLOCK)
        scales = [block_scale(_FN, "x_scale", x_scale, (p, mb), "(P, ceil(M/128))"),
                  block_scale(_FN, "y_scale", y_scale, (-(-q // _BLOCK), mb),
                              "(ceil(Q/128), ceil(M/128))")]
    else:
        scales = [tensor_scale(_FN, "x_scale", x_scale, (1,)),
                  tensor_scale(_FN, "y_scale", y_scale, (1,))]
    out_dtype = api.out_dtype_arg(out_dtype, preferred_element_type) or jnp.dtype(jnp.bfloat16)
    if out_dtype not in api.SUPPORTED_OUTPUTS:
        raise ValueError(f"{_FN}: out_dtype={out_dtype} must be one of "
                         f"{', '.join(d.name for d in api.SUPPORTED_OUTPUTS)}")
    config = checked_config(config, pair[0], False, False, family=family, b_dtype=pair[1])
    if m == 0 or p == 0 or q == 0 or groups == 0:  # nothing to launch
        return jnp.zeros((groups, p, q), out_dtype)
    params = freeze(dict(family=family, out_dtype=out_dtype, config=config))
    return forward_only(_vmappable(params), _FN, FP8_DIFFERENTIABLE)(
        x, y, ragged_tiles.int32_sizes(group_sizes, m), *scales)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    return vmapped_per_entry(functools.partial(_partitioned, params))


@functools.partial(custom_partitioning, static_argnums=(0,))
def _partitioned(params, xt, yt, gs, x_scale, y_scale):
    return launch(xt, yt, gs, x_scale, y_scale, **dict(params))


def _block(params) -> bool:
    return dict(params)["family"] == _FAMILIES["block"]


def _rule(params, mesh, value_types, result_types):
    del mesh, value_types, result_types
    # Block scales: x_scale's rows are x^T's (p); their block dimensions are factors of their
    # own (a block count is not the extent it covers).
    return contraction_rule(_X, _Y, (("p", None), (None, None)) if _block(params)
                            else ((None,), (None,)))


def _partition(params, mesh, arg_shapes, result_shape):
    # Block scales split with their operands, m and q in whole 128-wide blocks only.
    return contraction_partition(_FN, launch, _X, _Y, params, mesh, arg_shapes, result_shape,
                                 (("p", "m"), ("q", "m")) if _block(params)
                                 else ((None,), (None,)), scale_blocks=_block(params))


def_partition(_partitioned, _partition, _rule)


def launch(xt, yt, group_sizes, x_scale, y_scale, *, family, out_dtype, config):
    """One device's call on x^T (P, M) and y^T (Q, M): M not whole 16-byte rows pads both with
    zero columns (rows past every group: they count for none), Q not whole rows of the output
    pads y^T with zero rows, sliced off (neither changes the number of 128-wide scale blocks).
    config None: tuned.grouped_config of the problem the kernel runs (G, P, Q over M rows, Q and
    M as padded), else choose_contraction_config's."""
    (p, m), q = xt.shape, yt.shape[0]
    if m_pad := pitch_pad(m, xt.dtype):
        xt = jnp.pad(xt, ((0, 0), (0, m_pad)))
        yt = jnp.pad(yt, ((0, 0), (0, m_pad)))
    if q_pad := -q % pitch_granule(out_dtype):
        yt = jnp.pad(yt, ((0, q_pad), (0, 0)))
    if family == _FAMILIES["block"]:  # (1, rows, blocks): the kernel's batch-1 scale arrays
        x_scale, y_scale = x_scale[None], y_scale[None]
    config = config or grouped_config(family, xt.dtype.name, False, False, group_sizes.shape[0],
                                      p, yt.shape[0], xt.shape[1], yt.dtype.name)
    ends = ragged_tiles.group_ends(group_sizes, m)
    out = hopper_ragged_fp8_contract_p.bind(xt[None], yt[None], ends, x_scale, y_scale,
                                            family=family, out_dtype=out_dtype, config=config)
    return out[:, :, :q]


def _abstract_eval(xt3, yt3, ends, x_scale, y_scale, *, family, out_dtype, config):
    del x_scale, y_scale, config
    placed = contraction_placement(xt3, yt3, _X, _Y, scale_blocks=family == _FAMILIES["block"])
    return jax.core.ShapedArray((ends.shape[0], xt3.shape[1], yt3.shape[1]), out_dtype,
                                sharding=placed)


def reference(xt3, yt3, ends, x_scale, y_scale, *, family, out_dtype, config=None):
    """What the kernel computes, in jnp: exact fp8 products summed in float32 per group (rows
    past the last end in none), scaled by x_scale * y_scale (per block: of the operands
    dequantised, which the kernel's per-k-block promotion equals up to float32 rounding),
    one rounding."""
    del config
    x, y = xt3[0].astype(_F32), yt3[0].astype(_F32)
    if family == _FAMILIES["block"]:
        x = x * expand_blocks(x_scale[0], 1, x.shape[1])
        y = y * expand_blocks(expand_blocks(y_scale[0], 0, y.shape[0]), 1, y.shape[1])
        scale = 1.0
    else:
        scale = x_scale[0] * y_scale[0]
    out = contraction_reference(x.T, y.T, ends)
    return (out * scale).astype(out_dtype)


def _cuda_lowering(ctx, xt3, yt3, ends, x_scale, y_scale, *, family, out_dtype, config):
    del out_dtype
    return contraction_lowering(family, False, ctx, xt3, yt3, ends, x_scale, y_scale,
                                config=config)


register(hopper_ragged_fp8_contract_p, _abstract_eval, reference, _cuda_lowering)
