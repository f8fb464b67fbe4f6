"""hopper_ragged_fp8_dot: the grouped GEMM of Mixture-of-Experts layers on fp8 operands, with
per-tensor scales (the grouped_fp8 kernel family: one float32 for lhs, one for rhs or one per
expert, the recipe whose experts are quantized one by one) or block scales (grouped_fp8_block:
DeepSeek-V3's, one per row of lhs and 128 of K, one per 128 x 128 block of each expert).

    y = hopper_ragged_fp8_dot(x8, w8, group_sizes, x_scale, w_scales)  # w8 (G, N, K), (G,) scales
    y = hopper_ragged_fp8_dot(x8, w8, group_sizes, x_s, w_s)  # (M, K/128), (G, N/128, K/128)

Rows of group g are act(alpha * (lhs_scale * lhs_rows) @ (rhs_scale[g] * rhs[g])^T + bias[g]) +
beta * residual, the scales broadcast over their blocks, with hopper_ragged_dot's group-size
rules (ragged_tiles.py). fp8 wgmma reads K-major operands only, so rhs is (G, N, K)
(transpose_rhs=True, the default); (G, K, N) is first copied by transpose_fp8. Per tensor, the
kernel scales its fp32 accumulators by lhs_scale * rhs_scale[group] (TensorScaling reads the
tile's group) before the epilogue; per block, each 128-wide k-block's product is scaled and
added into them in fp32 (MainloopSSPromoted, BlockScaling with the group as batch entry).

Layers: hopper_ragged_fp8_dot checks its arguments -> _partitioned (custom_partitioning under a
sharded jit: rows split evenly and rhs's N split run locally, as hopper_ragged_dot's, and a
K split on both operands sums partial products; the scales split with their operands (block
scales: N and K split in whole 128-wide blocks only); anything else is gathered with a
warning that names it) -> launch (one device's call: the tile table,
padding, the config) -> hopper_ragged_fp8_p. Forward only (fp8 operands carry no useful
gradient). Under vmap the entries are one launch (_fold_entries: each entry's rows, sizes,
residual and block scales its own, as hopper_ragged_dot's entries) where the experts, their
scales and bias are shared and, per tensor, so is lhs_scale (the kernel scales a tile by
lhs_scale * rhs_scale[group]: one lhs scale per launch); else one launch per entry.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive

from jax_hopper import _ffi
from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.epilogue import activation_code
from jax_hopper.gemm.tuned import grouped_config
from jax_hopper.gemm.pitch import pitch_granule, pitch_pad
from jax_hopper.gemm.primitive import (_pad_columns, call_attrs, explicit_placement, freeze,
                                       gemm_target)
from jax_hopper.gemm.ragged import check_group_sizes, residual3
from jax_hopper.gemm.ragged_primitive import (FP8_DIFFERENTIABLE, entries_operand,
                                              entries_sizes, epilogue, folded_vmap,
                                              forward_only, in_expert_order, launch_tiles,
                                              map_entries, register, runs_expert_major,
                                              stacked_rows)
from jax_hopper.gemm.ragged_sharding import (gathered_operands, no_epilogue, shard_sizes,
                                             split_rows, summed_over_k)
from jax_hopper.gemm.sharding import assign_factors, def_partition, spec_of
from jax_hopper.gemm.typed_reshape import reshape
from jax_hopper.kernels import catalog
from jax_hopper.quantize.transpose import transpose_fp8

hopper_ragged_fp8_p = Primitive("hopper_ragged_fp8_dot")
_F32 = jnp.dtype(jnp.float32)
_FAMILIES = {"tensor": "grouped_fp8", "block": "grouped_fp8_block"}  # by scaling
_BLOCK = catalog.FP8_SCALE_BLOCK


def hopper_ragged_fp8_dot(lhs, rhs, group_sizes, lhs_scale, rhs_scale, *, out_dtype=None,
                          preferred_element_type=None, transpose_rhs=True, bias=None,
                          activation=None, residual=None, alpha=1.0, beta=1.0, config=None):
    """lhs (M, K) fp8; rhs (G, N, K) fp8 (transpose_rhs=True) or (G, K, N) (copied K-major
    first); group_sizes (G,) integer, a device array. The scales, traced float arrays, pick
    the recipe:
      - per tensor (family grouped_fp8): lhs_scale a scalar or (1,); rhs_scale one, or (G,)
        one per expert. (lhs, rhs) dtypes: a pair of catalog.FP8_PAIRS;
      - per block (family grouped_fp8_block): lhs_scale (M, ceil(K/128)), one per row and
        128 of K; rhs_scale (G, ceil(N/128), ceil(K/128)), one per 128 x 128 block of each
        expert's (N, K) product operand, whichever way rhs is stored. e4m3 both.
    out_dtype (alias preferred_element_type): bfloat16 (default), float16 or float32.
    bias (G, N), activation, residual (M, N), alpha and beta as in hopper_ragged_dot.
    config: a GemmConfig of the recipe's family; default: the config tuned for this GPU and
    problem, else choose_grouped_config's rule over its tiles."""
    lhs, rhs, group_sizes = jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(group_sizes)
    fn = "hopper_ragged_fp8_dot"
    scaling = scaling_of(fn, ("lhs_scale", "rhs_scale"), (lhs_scale, rhs_scale), (2, 3),
                         "lhs_scale a scalar or (1,), rhs_scale one or (G,)",
                         "lhs_scale (M, ceil(K/128)), rhs_scale (G, ceil(N/128), ceil(K/128))")
    family = _FAMILIES[scaling]
    pair = (lhs.dtype.name, rhs.dtype.name)
    if pair not in catalog.FAMILIES[family].dtypes:
        raise ValueError(f"{fn}: (lhs.dtype, rhs.dtype) = {pair} is not one of the pairs "
                         f"compiled {catalog.FAMILIES[family].dtypes} for {scaling} scales (for "
                         "16-bit inputs use hopper_ragged_dot)")
    out_dtype = api.out_dtype_arg(out_dtype, preferred_element_type) or jnp.dtype(jnp.bfloat16)
    if out_dtype not in api.SUPPORTED_OUTPUTS:
        raise ValueError(f"{fn}: out_dtype={out_dtype} must be one of "
                         f"{', '.join(d.name for d in api.SUPPORTED_OUTPUTS)}")
    act = activation_code(activation)
    alpha, beta = api.static_scalar("alpha", alpha), api.static_scalar("beta", beta)
    if lhs.ndim != 2 or rhs.ndim != 3:
        raise ValueError(f"{fn}: lhs.shape={lhs.shape} must be (M, K) and rhs.shape={rhs.shape} "
                         "(G, N, K), or (G, K, N) with transpose_rhs=False")
    api.check_bools(fn, transpose_rhs=transpose_rhs)
    if not transpose_rhs:  # (G, K, N) is MN-major, which fp8 wgmma cannot read
        rhs = transpose_fp8(rhs)
    (m, k), (groups, n, kr) = lhs.shape, rhs.shape
    if k != kr:
        raise ValueError(f"{fn}: lhs's K ({k}) must be rhs's (G, N, K) K ({kr}) "
                         f"(transpose_rhs={transpose_rhs})")
    check_group_sizes(group_sizes, groups, "rhs group")
    if scaling == "block":
        kb, nb = -(-k // _BLOCK), -(-n // _BLOCK)
        scales = [block_scale(fn, "lhs_scale", lhs_scale, (m, kb), "(M, ceil(K/128))")[None],
                  block_scale(fn, "rhs_scale", rhs_scale, (groups, nb, kb),
                               "(G, ceil(N/128), ceil(K/128))")]
    else:
        scales = [tensor_scale(fn, "lhs_scale", lhs_scale, (1,)),
                  tensor_scale(fn, "rhs_scale", rhs_scale, (1, groups))]
    bias2 = api.prepare_bias(bias, (groups, n), "(G, N)", ": one row per group")
    res3 = residual3(residual, (m, n), out_dtype)
    config = checked_config(config, pair[0], False, False, family=family, b_dtype=pair[1])
    params = freeze(dict(family=family, out_dtype=out_dtype, activation=act, alpha=alpha,
                         beta=beta, config=config))
    gs = ragged_tiles.int32_sizes(group_sizes, m)
    if m == 0 or n == 0 or groups == 0 or k == 0:  # a zero product: nothing to launch
        return epilogue(jnp.zeros((m, n), _F32), gs, bias2, res3, activation=act, beta=beta,
                        out_dtype=out_dtype)[0]
    return forward_only(_vmappable(params), "hopper_ragged_fp8_dot", FP8_DIFFERENTIABLE)(
        lhs[None], rhs, gs, bias2, res3, *scales)[0]


def scaling_of(fn, names, scales, block_ranks, tensor_rule, block_rule) -> str:
    """The recipe two scale arrays (named `names`) pick by their ranks: "block" at
    `block_ranks`, "tensor" where both are scalars or vectors, else a ValueError naming both
    rules (the shapes each recipe takes)."""
    ranks = tuple(jnp.ndim(s) for s in scales)
    if ranks == block_ranks:
        return "block"
    if max(ranks) <= 1:
        return "tensor"
    raise ValueError(f"{fn}: the scales must be both per tensor ({tensor_rule}) or both per "
                     f"block ({block_rule}); got {names[0]} of rank {ranks[0]} and {names[1]} "
                     f"of rank {ranks[1]}")


def block_scale(fn, name, s, shape, rule):
    """A block-scale array as float32 of `shape`, or ValueError naming the rule."""
    s = jnp.asarray(s)
    if s.shape != shape or not jnp.issubdtype(s.dtype, jnp.floating):
        raise ValueError(f"{fn}: {name} must be a float array {rule} = {shape} (one scale per "
                         f"{_BLOCK} elements of K); got shape {s.shape}, dtype {s.dtype}")
    return s.astype(jnp.float32)


def tensor_scale(fn, name, s, sizes):
    """A per-tensor scale as float32 (n,), n one of `sizes`, or ValueError naming the rule."""
    s = jnp.asarray(s)
    if s.ndim > 1 or s.size not in sizes or not jnp.issubdtype(s.dtype, jnp.floating):
        rule = "a float scalar or a (1,) array" + (" or one per expert (G,)" if len(sizes) > 1
                                                   else "")
        raise ValueError(f"{fn}: {name} must be {rule}; got shape {s.shape}, dtype {s.dtype}")
    return s.astype(jnp.float32).reshape(-1)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    """The partitioned launch for these params, with a vmap rule (custom_partitioning has no
    batching rule of its own): one launch over every entry (_fold_entries), else one per
    entry."""
    def one(*args):
        return _partitioned(params, tuple(tuple(x.shape) for x in args), *args)

    return folded_vmap(one, functools.partial(_fold_entries,
                                              dict(params)["family"] == _FAMILIES["block"]))


def _fold_entries(block: bool, axis_size: int, batched, lhs, rhs, gs, bias, res, lhs_scale,
                  rhs_scale):
    """launch's operands under vmap (a leading axis of axis_size V on the `batched` ones) as
    one launch of V E entries (E: the call's own, launch's entries, lhs's leading dimension;
    1 without them): each entry's rows, group sizes, residual and block lhs scales its own,
    broadcast where not mapped. None (one launch per entry) where the experts, their scales
    or bias are mapped, or a per-tensor lhs_scale (one per launch)."""
    lhs_b, rhs_b, gs_b, bias_b, res_b, ls_b, rs_b = batched
    if rhs_b or bias_b or rs_b or (ls_b and not block):
        return None
    entries = lhs.shape[1] if lhs_b else lhs.shape[0]
    lhs = entries_operand(lhs, lhs_b, axis_size)
    gs = entries_operand(gs, gs_b, axis_size, None if gs.ndim - gs_b == 2 else entries)
    res = entries_operand(res, res_b, axis_size) if res.size else jnp.zeros((0, 0, 0),
                                                                             res.dtype)
    if block:
        lhs_scale = entries_operand(lhs_scale, ls_b, axis_size)
    return lhs, rhs, gs, bias, res, lhs_scale, rhs_scale


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(params, shapes, lhs3, rhs, gs, bias, res, lhs_scale, rhs_scale):
    del shapes  # only the sharding rule needs them
    return launch(lhs3, rhs, gs, bias, res, lhs_scale, rhs_scale, **dict(params))


def _rule(params, shapes, mesh, value_types, result_types):
    del mesh, value_types, result_types
    (_, _, _), (groups, _, _), gs_shape, bias_shape, res_shape, _, rs_shape = shapes
    entries = len(gs_shape) == 2  # o: launch's entries (vmap's fold), else 1
    bias = "g n" if bias_shape[0] else "z"
    res = "o m n" if res_shape[0] else "r1 r2 r3"
    if dict(params)["family"] == _FAMILIES["block"]:  # blocks of K and N: factors of their own
        scales = "o m kb, g nb kb"
    else:
        scales = "l, " + ("g" if rs_shape[-1] == groups else "s")
    return (f"o m k, g n k, {'o g' if entries else 'g'}, {bias}, {res}, {scales} -> o m n",
            {"reduction_factors": ("k",),
             "need_replication_factors": (() if entries else ("o",)) + ("g",)})


def _partition(params, shapes, mesh, arg_shapes, result_shape):
    """hopper_ragged_dot's rows split evenly, rhs's N split and K split on both operands
    (ragged_sharding.py), run locally with their scales (block scales: N and K split in whole
    128-wide blocks only); a K split sums the devices' partial products (psum) and applies the
    epilogue after the sum. Anything else is gathered with a warning that names it."""
    p = dict(params)
    lhs, rhs, gs, bias, res, ls, rs = arg_shapes
    entries = len(gs.shape) == 2
    s_lhs, s_rhs, s_gs, s_out = spec_of(lhs), spec_of(rhs), spec_of(gs), spec_of(result_shape)
    axes, spec = assign_factors(mesh, {"o": [s_lhs[0], s_out[0], s_gs[0]] if entries else [],
                                       "m": [s_lhs[1], s_out[1]], "n": [s_rhs[1], s_out[2]],
                                       "k": [s_lhs[2], s_rhs[2]]}, lhs.shape[2])
    if axes["o"] and lhs.shape[0] % math.prod(mesh.shape[name] for name in axes["o"]):
        axes["o"] = ()  # an uneven split of the entries is gathered
    o = "o" if entries else None
    rows = lhs.shape[1]
    m_axes = split_rows(mesh, axes, rows)
    block = p["family"] == _FAMILIES["block"]
    for factor, extent in (("n", rhs.shape[1]), ("k", lhs.shape[2])):
        devices = math.prod(mesh.shape[x] for x in axes[factor])
        if block and axes[factor] and extent % (devices * _BLOCK):  # whole scale blocks each
            axes[factor] = ()
    k_axes = axes["k"]
    scale_factors = (((o, "m", "k"), (None, "n", "k")) if block else ((None,), (None,)))
    gathered = gathered_operands(axes, (("lhs", lhs, (o, "m", "k")),
                                        ("rhs", rhs, (None, "n", "k")),
                                        ("group_sizes", gs, (o, None)[:len(gs.shape)]),
                                        ("lhs_scale", ls, scale_factors[0]),
                                        ("rhs_scale", rs, scale_factors[1])))
    if gathered:
        warnings.warn(f"hopper_ragged_fp8_dot: {', '.join(gathered)} gathered to every device "
                      "(rows split evenly, rhs's N and K on both operands are split without "
                      "gathering" + (", N and K in whole 128-wide scale blocks" if block else "")
                      + ")",
                      stacklevel=2)
    bias_sh = spec(None, "n") if bias.shape[0] else spec(None)
    res_sh = spec(o, "m", "n") if res.shape[0] else spec(None, None, None)

    def lower_fn(lhs, rhs, gs, bias, res, lhs_scale, rhs_scale):
        gs = shard_sizes(gs, m_axes, rows, lhs.shape[1])
        if not k_axes:
            return launch(lhs, rhs, gs, bias, res, lhs_scale, rhs_scale, **p)
        return summed_over_k(p, k_axes, gs, bias, res, lambda q: launch(
            lhs, rhs, gs, *no_epilogue(q), lhs_scale, rhs_scale, **q))

    return (mesh, lower_fn, spec(o, "m", "n"),
            (spec(o, "m", "k"), spec(None, "n", "k"), spec(*(o, None)[:len(gs.shape)]),
             bias_sh, res_sh, *(spec(*f) for f in scale_factors)))


def_partition(_partitioned, _partition, _rule)


def launch(lhs, rhs, group_sizes, bias, res, lhs_scale, rhs_scale, **params):
    """One device's call: K not whole 16-byte rows pads lhs and rhs with zero columns (copies),
    N not whole rows of the output pads rhs with zero rows (and bias and residual with zero
    columns), sliced off the result; config None is chosen here for the problem the kernel
    runs, K and N as padded (tuned.grouped_config).
    Entries (vmap's fold, _fold_entries): lhs (E, M, K) with group_sizes (E, G) are E products
    in one launch, the experts, their scales and bias shared; the residual (E, M, N) or empty,
    block lhs scales (E, M, ceil(K/128)); the result (E, M, N). Their rows are stacked (E M)
    and each entry's groups tiled apart, or placed expert by expert (with their block scales)
    where they route few rows to each expert, as ragged_primitive.launch's entries."""
    entries, rows = (group_sizes.shape[0], lhs.shape[1]) if group_sizes.ndim == 2 else (0, 0)
    block = params["family"] == _FAMILIES["block"]
    if entries > 1 and runs_expert_major(rows, group_sizes, lhs):
        # block lhs scales (E, M, ...) go with their rows; one per tensor stays as it is
        rowed = (lhs, res, lhs_scale) if block else (lhs, res)
        return in_expert_order(group_sizes, rowed, lambda t, x, r, ls=lhs_scale: launch(
            x, rhs, t, bias, r, ls, rhs_scale, **params))
    if entries:
        lhs = stacked_rows(lhs)
        res = stacked_rows(res) if res.size else res
        if block:
            lhs_scale = stacked_rows(lhs_scale)
        group_sizes = entries_sizes(group_sizes)
    if k_pad := pitch_pad(lhs.shape[2], lhs.dtype):
        lhs = jnp.pad(lhs, ((0, 0), (0, 0), (0, k_pad)))
        rhs = jnp.pad(rhs, ((0, 0), (0, 0), (0, k_pad)))
    n = rhs.shape[1]
    if pad := -n % pitch_granule(params["out_dtype"]):
        rhs, bias, res = _pad_columns(rhs, bias, res, 1, pad)
    if params["config"] is None:
        params = {**params, "config": grouped_config(params["family"], lhs.dtype.name, False,
                                                     False, group_sizes.size, lhs.shape[1],
                                                     rhs.shape[1], lhs.shape[2],
                                                     rhs.dtype.name)}
    tiles = launch_tiles(group_sizes, lhs.shape[1], params["config"])
    out = hopper_ragged_fp8_p.bind(lhs, rhs, group_sizes, tiles, bias, res, lhs_scale,
                                   rhs_scale, **params)
    out = out[..., :n] if pad else out
    return reshape(out, (entries, rows, n), warn=False) if entries else out


def _abstract_eval(lhs, rhs, group_sizes, tiles, bias, residual, lhs_scale, rhs_scale, *,
                   out_dtype, **_):
    return jax.core.ShapedArray((1, lhs.shape[1], rhs.shape[1]), out_dtype,
                                sharding=explicit_placement(lhs, rhs, False, False, "fp8", 1))


def reference(lhs, rhs, group_sizes, tiles, bias, residual, lhs_scale, rhs_scale, *, family,
              out_dtype, activation, alpha, beta, config=None):
    """What the kernel computes, in jnp: exact fp8 products summed in fp32, scaled by lhs_scale
    and the row's group's rhs_scale (per block: of the operands dequantised, which the
    kernel's per-k-block promotion equals up to fp32 rounding), then the epilogue in fp32 and
    one rounding."""
    del tiles, config
    params = dict(family=family, out_dtype=out_dtype, activation=activation, alpha=alpha,
                  beta=beta)
    if group_sizes.ndim == 2:
        return _entries_reference(lhs, rhs, group_sizes, bias, residual, lhs_scale, rhs_scale,
                                  **params)
    sizes = ragged_tiles.valid_sizes(group_sizes, lhs.shape[1])
    if family == _FAMILIES["block"]:
        k, n = lhs.shape[2], rhs.shape[1]
        a = lhs[0].astype(_F32) * expand_blocks(lhs_scale[0], 1, k)
        b = rhs.astype(_F32) * expand_blocks(expand_blocks(rhs_scale, 1, n), 2, k)
        x = jax.lax.ragged_dot(a, jnp.swapaxes(b, 1, 2), sizes,
                               precision=jax.lax.Precision.HIGHEST)
        return epilogue(alpha * x, group_sizes, bias, residual, activation=activation,
                        beta=beta, out_dtype=out_dtype)
    x = jax.lax.ragged_dot(lhs[0].astype(_F32), jnp.swapaxes(rhs, 1, 2).astype(_F32), sizes,
                           precision=jax.lax.Precision.HIGHEST)
    per_group = jnp.broadcast_to(rhs_scale, (rhs.shape[0],))
    per_row = jnp.concatenate([per_group, jnp.ones((1,), _F32)])  # rows past the groups: 0
    x = x * (lhs_scale[0] * per_row[ragged_tiles.row_groups(group_sizes, x.shape[0])])[:, None]
    return epilogue(alpha * x, group_sizes, bias, residual, activation=activation, beta=beta,
                    out_dtype=out_dtype)


def _entries_reference(lhs, rhs, group_sizes, bias, residual, lhs_scale, rhs_scale, **params):
    """reference over the entries of launch's stacked operands (lhs (1, E M, K), block lhs
    scales (1, E M, kb), residual (1, E M, N) or empty; the rest shared), as (1, E M, N)."""
    return map_entries(
        lambda lhs, gs, res, ls: reference(lhs, rhs, gs, None, bias, res, ls, rhs_scale,
                                           **params),
        group_sizes.shape[0], (lhs, group_sizes, residual, lhs_scale),
        ("rows", "entry", "rows" if residual.size else None,
         "rows" if params["family"] == _FAMILIES["block"] else None))


def expand_blocks(scales, axis, extent):
    """Per-block scales repeated over their block's elements along `axis`, cut to `extent`."""
    return jax.lax.slice_in_dim(jnp.repeat(scales, _BLOCK, axis=axis), 0, extent, axis=axis)


def _cuda_lowering(ctx, lhs, rhs, group_sizes, tiles, bias, residual, lhs_scale, rhs_scale, *,
                   family, out_dtype, activation, alpha, beta, config):
    # As the grouped GEMM's lowering (ragged_primitive.py): the plan covers every slot of the
    # tile table; the table and the two scales are the call's fifth to seventh inputs.
    del group_sizes, out_dtype
    lhs_aval, rhs_aval, tiles_aval = ctx.avals_in[0], ctx.avals_in[1], ctx.avals_in[3]
    kernel = config.kernel(family, lhs_aval.dtype.name, False, False, rhs_aval.dtype.name)
    _, m, n = ctx.avals_out[0].shape
    slots = (tiles_aval.shape[0] - 1) // ragged_tiles.GROUP_TILE_FIELDS
    resident = _ffi.resident_clusters(kernel, config.cluster_m * config.cluster_n)
    plan = config.plan(kernel, 1, slots * config.block_m, n, lhs_aval.shape[2], resident)
    workspace = jax.core.ShapedArray((plan.pop("workspace_bytes"),), np.uint8)
    out, _ = jax.ffi.ffi_lowering(gemm_target(family, plan))(
        ctx.replace(avals_in=[ctx.avals_in[i] for i in (0, 1, 4, 5, 3, 6, 7)],
                    avals_out=[*ctx.avals_out, workspace]),
        lhs, rhs, bias, residual, tiles, lhs_scale, rhs_scale,
        **call_attrs(kernel, config, plan, activation, alpha, beta))
    return [out]


register(hopper_ragged_fp8_p, _abstract_eval, reference, _cuda_lowering)
