"""hopper_ragged_contract: out[g] = x_g^T @ y_g, where the groups split the contracted rows.

It is the weight gradient of the grouped GEMM (d rhs[g] = lhs_g^T d out_g for
hopper_ragged_dot) and the ragged-contraction mode of jax.lax.ragged_dot_general: x (M, P) and
y (M, Q) share their M rows, sorted by group, and group sizes (G,) stay on the device (made valid
as ragged_tiles.py says: negative sizes count as 0, groups are cut at M, rows past every group
count for none). The result (G, P, Q) comes from one launch of the grouped_contraction kernel
family (cuda/gemm/scheduler/grouped_contraction.cuh) with no (G, M, ...) intermediate; an
empty group's entry is zero.

Layers: hopper_ragged_contract checks its arguments -> _contract (custom VJP: both cotangents
are grouped GEMMs, hopper_ragged_dot) -> partitioned (sharded jit: the columns of x and y split
run locally; vmap one launch per entry) -> launch -> hopper_ragged_contract_p.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir

from jax_hopper import _ffi, manual_axes
from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.tuned import grouped_config
from jax_hopper.gemm.primitive import call_attrs, freeze, gemm_target
from jax_hopper.gemm.ragged_primitive import register, vmapped_per_entry
from jax_hopper.gemm.ragged_sharding import gathered_operands, shard_sizes, split_rows
from jax_hopper.gemm.sharding import assign_factors, def_partition, spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded
from jax_hopper.kernels import catalog

hopper_ragged_contract_p = Primitive("hopper_ragged_contract")
_F32 = jnp.dtype(jnp.float32)
_FAMILY = "grouped_contraction"
# The factors of x's and y's dimensions: the contracted rows m, the output's p and q.
_X, _Y = ("m", "p"), ("m", "q")


def hopper_ragged_contract(x, y, group_sizes, *, preferred_element_type=None, out_dtype=None,
                           config=None):
    """out[g] = x[rows of group g]^T @ y[rows of group g], out (G, P, Q).

    x: (M, P), y: (M, Q), bfloat16 or float16 (both the same), float32 accumulation;
    group_sizes: (G,) integer, a device array (sizes of consecutive row groups); out_dtype
    (alias preferred_element_type) bfloat16, float16 or float32, default the input dtype.
    config: a GemmConfig of the grouped_contraction family; default the config tuned for this
    GPU and the problem each launch runs, else heuristics.choose_contraction_config's.
    Differentiable in x and y.
    """
    x, y, group_sizes = jnp.asarray(x), jnp.asarray(y), jnp.asarray(group_sizes)
    out_dtype = api.checked_out_dtype(x, y, out_dtype, preferred_element_type, names=("x", "y"),
                                      fn="hopper_ragged_contract")
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"x.shape={x.shape} and y.shape={y.shape} must be (M, P) and (M, Q) "
                         "with the same rows M (the contracted, grouped dimension)")
    if group_sizes.ndim != 1 or not jnp.issubdtype(group_sizes.dtype, jnp.integer):
        raise ValueError(f"group_sizes must be a 1-D integer array (G,), one size per group; "
                         f"got {group_sizes.dtype} {group_sizes.shape}")
    (m, p), q, groups = x.shape, y.shape[1], group_sizes.shape[0]
    config = checked_config(config, x.dtype.name, True, True, family=_FAMILY)
    if m == 0 or p == 0 or q == 0 or groups == 0:  # nothing to launch
        return jnp.zeros((groups, p, q), out_dtype)
    params = freeze(dict(out_dtype=jnp.dtype(out_dtype), config=config))
    return _contract(x, y, ragged_tiles.int32_sizes(group_sizes, m), params)


def launch(x, y, group_sizes, *, out_dtype, config):
    """One device's grouped contraction of x (M, P) and y (M, Q). TMA addresses rows whose
    pitch is whole 16-byte chunks, and stores outputs likewise: P and Q are padded with zero
    columns where they are not (a copy of that operand), and the padding sliced off. config
    None (none asked for): tuned.grouped_config of the problem the kernel runs (G, P, Q over M
    rows, P and Q as padded), else choose_contraction_config's."""
    (m, p), q = x.shape, y.shape[1]
    pad_p = -p % 8
    pad_q = -q % max(8, 16 // np.dtype(out_dtype).itemsize)
    if pad_p:
        x = jnp.pad(x, ((0, 0), (0, pad_p)))
    if pad_q:
        y = jnp.pad(y, ((0, 0), (0, pad_q)))
    config = config or grouped_config(_FAMILY, x.dtype.name, True, True, group_sizes.shape[0],
                                      x.shape[1], y.shape[1], m)
    ends = ragged_tiles.group_ends(group_sizes, m)
    out = hopper_ragged_contract_p.bind(x[None], y[None], ends, out_dtype=out_dtype,
                                        config=config)
    return out[:, :p, :q]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _contract(x, y, gs, params):
    return partitioned(params, x, y, gs)


def partitioned(params: tuple, x, y, gs):
    """launch(x, y, gs, **dict(params)) on local shards under a sharded jit
    (contraction_partition); under vmap once per entry."""
    return _vmappable(params)(x, y, gs)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    return vmapped_per_entry(functools.partial(_partitioned, params))


@functools.partial(custom_partitioning, static_argnums=(0,))
def _partitioned(params, x, y, gs):
    return launch(x, y, gs, **dict(params))


def _rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return contraction_rule(_X, _Y)


def _partition(params, mesh, arg_shapes, result_shape):
    return contraction_partition("hopper_ragged_contract", launch, _X, _Y, params, mesh,
                                 arg_shapes, result_shape)


def contraction_rule(x_factors, y_factors, scale_factors=()):
    """The Shardy rule of a grouped contraction of x and y (their factors by dimension) and
    scale operands (theirs, None for a factor of the scale's own): m contracted (a reduction),
    the groups replicated."""
    operands = [" ".join(x_factors), " ".join(y_factors), "g"]
    operands += [" ".join(f or f"s{i}_{d}" for d, f in enumerate(factors))
                 for i, factors in enumerate(scale_factors)]
    return f"{', '.join(operands)} -> g p q", {"reduction_factors": ("m",),
                                               "need_replication_factors": ("g",)}


def contraction_partition(op, launch_fn, x_factors, y_factors, params, mesh, arg_shapes,
                          result_shape, scale_factors=(), scale_blocks=False):
    """custom_partitioning of a grouped contraction launch_fn(x, y, gs, *scales, **params): the
    columns of x and y (p, q) split run locally, the output split the same way; the rows (m)
    split evenly contract each device's shard of every group (the sizes cut to it) and sum the
    partial results in float32 (psum: data parallelism's gradient all-reduce), one rounding;
    groups split, or rows unevenly, are gathered first, with a warning. A scale splits with the
    factors scale_factors gives its dimensions (None: replicated); with scale_blocks, a scale
    dimension of m or q counts 128-wide blocks, so those split only into whole blocks."""
    x, y, gs, *scales = arg_shapes
    mx = x_factors.index("m")
    axes, spec = _assign(mesh, (spec_of(x), x.shape), (spec_of(y), y.shape), x_factors,
                         y_factors, spec_of(result_shape), scale_blocks)
    rows = x.shape[mx]
    m_axes = split_rows(mesh, axes, rows)
    gathered = gathered_operands(axes, (("x", x, x_factors), ("y", y, y_factors),
                                        ("group_sizes", gs, (None,)),
                                        *((f"scale {i}", s, factors) for i, (s, factors)
                                          in enumerate(zip(scales, scale_factors)))))
    if gathered:
        warnings.warn(f"{op}: {', '.join(gathered)} gathered to every device (the columns of "
                      "x and y, and their rows split evenly, are split without gathering)",
                      stacklevel=2)

    def lower_fn(x, y, gs, *scales):
        p = dict(params)
        gs = shard_sizes(gs, m_axes, rows, x.shape[mx])
        if not m_axes:
            return launch_fn(x, y, gs, *scales, **p)
        partial = launch_fn(x, y, gs, *scales, **{**p, "out_dtype": _F32})
        return jax.lax.psum(partial, m_axes).astype(p["out_dtype"])

    return (mesh, lower_fn, spec(None, "p", "q"),
            (spec(*x_factors), spec(*y_factors), spec(None),
             *(spec(*factors) for factors in scale_factors)))


def _assign(mesh, x, y, x_factors, y_factors, out, scale_blocks):
    """contraction_partition's mesh axes per factor (m, p, q) and its spec function, for x and
    y of those factors ((spec, shape) each) and the result's spec `out`: a split of x's or y's
    dimension first, then the result's; with scale_blocks m and q only in whole 128-wide
    blocks."""
    (sx, x_shape), (sy, y_shape) = x, y
    mx, my, q = x_factors.index("m"), y_factors.index("m"), y_factors.index("q")
    axes, spec = assign_factors(mesh, {"m": [sx[mx], sy[my]],
                                       "p": [sx[x_factors.index("p")], out[1]],
                                       "q": [sy[q], out[2]], "k": []}, 0)
    if scale_blocks:
        for factor, extent in (("m", x_shape[mx]), ("q", y_shape[q])):
            devices = math.prod(mesh.shape[a] for a in axes[factor])
            if axes[factor] and extent % (devices * catalog.FP8_SCALE_BLOCK):
                axes[factor] = ()
    return axes, spec


def contraction_placement(x3, y3, x_factors, y_factors, scale_blocks=False):
    """(Of the abstract values of x3 and y3 as a contraction primitive binds them: a leading 1,
    then x's and y's dimensions of x_factors and y_factors.) Under explicit sharding (an
    operand's type carries a split), the result's (G, P, Q) sharding where
    contraction_partition places it: P and Q split as x's and y's columns are, the groups
    whole, a split of the rows summed away; so the result needs no reshard after the call (an
    untyped one was replicated, gathering a weight-sized gradient). None without a split."""
    typed = [v for v in (x3, y3) if explicitly_sharded(v)]
    if not typed:
        return None
    _, spec = _assign(typed[0].sharding.mesh, *((spec_of(v)[1:], v.shape[1:]) for v in (x3, y3)),
                      x_factors, y_factors, (None,) * 3, scale_blocks)
    return spec(None, "p", "q")


def_partition(_partitioned, _partition, _rule)


def _fwd(x, y, gs, params):
    return _contract(x, y, gs, params), (x, y, gs, manual_axes.types((x, y, gs)))


def _bwd(params, saved, dout):
    *saved, primal_types = saved
    return manual_axes.like_primals(_grads(params, saved, dout), primal_types)


def _grads(params, saved, dout):
    # out[g] = x_g^T y_g: d x_g = y_g d out[g]^T (d out read as (G, P, Q) = (G, N, K) through
    # the transpose flag), d y_g = x_g d out[g]; rows past every group get zero from both.
    from jax_hopper.gemm.ragged import hopper_ragged_dot  # noqa: PLC0415 (imports this module)
    x, y, gs = saved
    d = dout.astype(x.dtype)
    dx = hopper_ragged_dot(y, d, gs, transpose_rhs=True, out_dtype=x.dtype)
    dy = hopper_ragged_dot(x, d, gs, out_dtype=y.dtype)
    return dx, dy, np.zeros(gs.shape, jax.dtypes.float0)


_contract.defvjp(_fwd, _bwd)
# The contraction with its VJP, for hopper_ragged_dot's backward pass (a gradient of a gradient).
differentiable = _contract


def _abstract_eval(x3, y3, ends, *, out_dtype, config):
    del config
    return jax.core.ShapedArray((ends.shape[0], x3.shape[2], y3.shape[2]), out_dtype,
                                sharding=contraction_placement(x3, y3, _X, _Y))


def reference(x3, y3, ends, *, out_dtype, config=None):
    """What the kernel computes, in jnp: jax.lax.ragged_dot's transpose in float32."""
    del config
    return contraction_reference(x3[0].astype(_F32), y3[0].astype(_F32), ends).astype(out_dtype)


def contraction_reference(x, y, ends):
    """out[g] = x_g^T y_g in float32 for x (M, P), y (M, Q) float32 and the group ends (G,):
    jax.lax.ragged_dot's transpose (rows past the last end in no group)."""
    groups, p, q = ends.shape[0], x.shape[1], y.shape[1]
    sizes = ends - jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])
    # The primal varies as x and y do inside shard_map, so that the transpose sums nothing
    # over devices.
    _, vjp = jax.vjp(lambda r: jax.lax.ragged_dot(x, r, sizes, preferred_element_type=_F32),
                     manual_axes.vary_like(jnp.zeros((groups, p, q), _F32), x, y))
    return vjp(y)[0]


def _cuda_lowering(ctx, x3, y3, ends, *, out_dtype, config):
    return contraction_lowering(_FAMILY, True, ctx, x3, y3, ends, config=config)


def contraction_lowering(family, mn_major, ctx, x3, y3, ends, *scales, config):
    """The custom call of a grouped contraction family, operands both MN-major (x (1, R, P),
    y (1, R, Q)) or both K-major (fp8: x^T (1, P, R), y^T (1, Q, R)), then the scales. As the
    grouped GEMM's lowering (ragged_primitive.py): the plan covers G entries of P x Q tiles;
    the call's bias and residual inputs are empty, the group ends its fifth input."""
    x_aval, y_aval = ctx.avals_in[0], ctx.avals_in[1]
    kernel = config.kernel(family, x_aval.dtype.name, mn_major, mn_major, y_aval.dtype.name)
    groups, p, q = ctx.avals_out[0].shape
    rows = x_aval.shape[1 if mn_major else 2]
    resident = _ffi.resident_clusters(kernel, config.cluster_m * config.cluster_n)
    plan = config.plan(kernel, groups, p, q, rows, resident)
    workspace = jax.core.ShapedArray((plan.pop("workspace_bytes"),), np.uint8)
    out_dtype = ctx.avals_out[0].dtype
    no_bias, no_residual = np.zeros((0,), np.float32), np.zeros((0, 0, 0), out_dtype)
    out, _ = jax.ffi.ffi_lowering(gemm_target(family, plan))(
        ctx.replace(avals_in=[x_aval, y_aval,
                              jax.core.ShapedArray(no_bias.shape, no_bias.dtype),
                              jax.core.ShapedArray(no_residual.shape, no_residual.dtype),
                              *ctx.avals_in[2:]],
                    avals_out=[*ctx.avals_out, workspace]),
        x3, y3, mlir.ir_constant(no_bias), mlir.ir_constant(no_residual), ends, *scales,
        **call_attrs(kernel, config, plan, 0, 1.0, 0.0))
    return [out]


register(hopper_ragged_contract_p, _abstract_eval, reference, _cuda_lowering)
