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
run locally; vmap one launch over every entry, each group bounded by its own rows) -> launch ->
hopper_ragged_contract_p.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.extend.core import Primitive
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import PartitionSpec

from jax_hopper import _ffi, manual_axes
from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.tuned import grouped_config
from jax_hopper.gemm.primitive import call_attrs, freeze, gemm_target
from jax_hopper.gemm.ragged_primitive import (entries_operand, entries_sizes, expert_major,
                                              per_entry, register, rows_in,
                                              vmapped_per_entry)
from jax_hopper.gemm.ragged_sharding import gathered_operands, shard_sizes, split_rows
from jax_hopper.gemm.sharding import assign_factors, def_partition, spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape, resharded
from jax_hopper.kernels import catalog

hopper_ragged_contract_p = Primitive("hopper_ragged_contract")
_F32 = jnp.dtype(jnp.float32)
_FAMILY = "grouped_contraction"
# The factors of x's and y's dimensions: the contracted rows m, the output's p and q; with
# launch's entries (vmap's fold) a leading o.
_X, _Y = ("m", "p"), ("m", "q")
_EX, _EY = ("o", *_X), ("o", *_Y)


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
    rows, P and Q as padded), else choose_contraction_config's.
    Entries (vmap's fold, _vmappable): x (E, M, P), y (E, M, Q) with group_sizes (E, G) are E
    contractions in one launch, the result (E, G, P, Q). Their rows are stacked (E M) and the
    kernel reads each group's first row as well as its end (ragged_tiles.entry_bounds), so an
    entry's rows past its groups, and other entries' rows, count for none of its groups."""
    entries, rows = (group_sizes.shape[0], x.shape[1]) if group_sizes.ndim == 2 else (0, 0)
    # Typed operands (explicit sharding) come only in the trace for the result type, never
    # run: each device's launch has its own entries' rows and sizes. There the result is typed
    # split over the entries as x's are (the partitioner's placement).
    typed = explicitly_sharded(x) and entries
    o_spec = spec_of(jax.typeof(x))[0] if typed else None
    if entries:
        x, y = (reshape(a, (entries * rows, a.shape[2]), warn=False) for a in (x, y))
        group_sizes = entries_sizes(group_sizes)
    (m, p), q = x.shape, y.shape[1]
    pad_p = -p % 8
    pad_q = -q % max(8, 16 // np.dtype(out_dtype).itemsize)
    if pad_p:
        x = jnp.pad(x, ((0, 0), (0, pad_p)))
    if pad_q:
        y = jnp.pad(y, ((0, 0), (0, pad_q)))
    config = config or grouped_config(_FAMILY, x.dtype.name, True, True, group_sizes.size,
                                      x.shape[1], y.shape[1], m)
    ends = (ragged_tiles.entry_bounds(group_sizes, rows) if entries
            else ragged_tiles.group_ends(group_sizes, m))
    out = hopper_ragged_contract_p.bind(x[None], y[None], ends, out_dtype=out_dtype,
                                        config=config)[:, :p, :q]
    if not entries:
        return out
    out = reshape(out, (entries, -1, p, q), warn=False)
    return resharded(out, PartitionSpec(o_spec, None, *spec_of(jax.typeof(out))[2:]),
                     on=out) if typed else out


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _contract(x, y, gs, params):
    return partitioned(params, x, y, gs)


def partitioned(params: tuple, x, y, gs):
    """launch(x, y, gs, **dict(params)) on local shards under a sharded jit
    (contraction_partition); under vmap one launch over every entry (fold_entries: the
    entries as launch's, which the sharding rule splits as a batch; custom_partitioning has no
    batching rule of its own, so vmap is answered above it)."""
    return _vmappable(params)(x, y, gs)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    fn = custom_vmap(lambda x, y, gs: _partitioned(params, gs.ndim == 2, x, y, gs))

    def rule(axis_size, in_batched, x, y, gs):
        if not axis_size:  # no entries: per_entry's loop of none
            return per_entry(fn, in_batched, (x, y, gs)), True
        entries = gs.ndim - in_batched[2] == 2  # the call's own (an inner vmap's fold)
        out = fn(*fold_entries(axis_size, in_batched, entries, x, y, gs))
        return (reshape(out, (axis_size, -1, *out.shape[1:])) if entries else out), True

    fn.def_vmap(rule)
    return fn


def fold_entries(axis_size: int, batched, entries: bool, *operands):
    """The contraction's operands (x, y, group sizes) under vmap (a leading axis of axis_size
    V on the `batched` ones) as launch's V E entries (E: the call's own where `entries`, else
    none): each entry's rows and sizes its own; an operand not mapped is broadcast (rows are
    activations and gradients, never a weight)."""
    if entries:
        return [entries_operand(a, b, axis_size) for a, b in zip(operands, batched)]
    return [a if b else jnp.broadcast_to(a, (axis_size, *a.shape))
            for a, b in zip(operands, batched)]


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(params, entries, x, y, gs):
    del entries  # the sharding rule's
    return launch(x, y, gs, **dict(params))


def _rule(params, entries, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return contraction_rule(*((_EX, _EY) if entries else (_X, _Y)), entries=entries)


def _partition(params, entries, mesh, arg_shapes, result_shape):
    return contraction_partition("hopper_ragged_contract", launch,
                                 *((_EX, _EY) if entries else (_X, _Y)), params, mesh,
                                 arg_shapes, result_shape, entries=entries)


def summed_over_entries(x, y, gs, params: tuple):
    """The contractions of vmap's entries sharing one result, summed: x (E, M, P), y (E, M, Q),
    sizes (E, G) -> sum over e of x[e]_g^T y[e]_g, (G, P, Q) (the weight gradient of entries
    sharing the weight: ragged_product's transpose). One launch a device (summed_launch: its
    entries' rows placed expert by expert), a split of the entries or of their rows summing
    its partials (contraction_partition); never each entry's (E, G, P, Q). Differentiable in
    x and y."""
    return _summed(x, y, gs, params)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _summed(x, y, gs, params):
    return _summed_vmappable(params)(x, y, gs)


@functools.lru_cache(maxsize=None)
def _summed_vmappable(params):
    return vmapped_per_entry(lambda x, y, gs: _summed_partitioned(params, x, y, gs))


@functools.partial(custom_partitioning, static_argnums=(0,))
def _summed_partitioned(params, x, y, gs):
    return summed_launch(x, y, gs, **dict(params))


def summed_launch(x, y, group_sizes, *, out_dtype, config):
    """One device's summed_over_entries: the entries' rows placed expert by expert
    (ragged_primitive.expert_major), one contraction over the experts' total rows. Typed
    operands (explicit sharding) come only in the partitioner's trace for the result type,
    never run: there the entries' own results, summed, give it."""
    if explicitly_sharded(x) or explicitly_sharded(y):
        return jnp.sum(launch(x, y, group_sizes, out_dtype=out_dtype, config=config), axis=0)
    _, order, totals = expert_major(group_sizes, x.shape[1])
    return launch(rows_in(x, order)[0], rows_in(y, order)[0], totals, out_dtype=out_dtype,
                  config=config)


def _summed_rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return contraction_rule(_EX, _EY, entries=True, summed=True)


def _summed_partition(params, mesh, arg_shapes, result_shape):
    return contraction_partition("hopper_ragged_contract", summed_launch, _EX, _EY, params,
                                 mesh, arg_shapes, result_shape, entries=True, summed=True)


def_partition(_summed_partitioned, _summed_partition, _summed_rule)


def _summed_fwd(x, y, gs, params):
    return _summed(x, y, gs, params), (x, y, gs, manual_axes.types((x, y, gs)))


def _summed_bwd(params, saved, dout):
    # Each entry's share of the summed result: its d x and d y as _grads gives them against
    # the one cotangent.
    del params
    *saved, primal_types = saved
    x, y, gs = saved
    grads = jax.vmap(lambda a, b, s: _grads(None, (a, b, s), dout)[:2])(x, y, gs)
    return manual_axes.like_primals((*grads, np.zeros(gs.shape, jax.dtypes.float0)),
                                    primal_types)


_summed.defvjp(_summed_fwd, _summed_bwd)


def contraction_rule(x_factors, y_factors, scale_factors=(), entries=False, summed=False):
    """The Shardy rule of a grouped contraction of x and y (their factors by dimension) and
    scale operands (theirs, None for a factor of the scale's own): m contracted (a reduction),
    the groups replicated; with launch's entries (factor o of x and y) the sizes and result
    lead with them too, or, summed over the entries, o is contracted as m is."""
    o = "o " if entries else ""
    operands = [" ".join(x_factors), " ".join(y_factors), f"{o}g"]
    operands += [" ".join(f or f"s{i}_{d}" for d, f in enumerate(factors))
                 for i, factors in enumerate(scale_factors)]
    # (Shardy's verifier wants the reduction factors in the order they first appear.)
    return (f"{', '.join(operands)} -> {'' if summed else o}g p q",
            {"reduction_factors": ("o", "m") if summed else ("m",),
             "need_replication_factors": ("g",)})


def contraction_partition(op, launch_fn, x_factors, y_factors, params, mesh, arg_shapes,
                          result_shape, scale_factors=(), scale_blocks=False, entries=False,
                          summed=False):
    """custom_partitioning of a grouped contraction launch_fn(x, y, gs, *scales, **params): the
    columns of x and y (p, q) split run locally, the output split the same way; the rows (m)
    split evenly contract each device's shard of every group (the sizes cut to it) and sum the
    partial results in float32 (psum: data parallelism's gradient all-reduce), one rounding;
    groups split, or rows unevenly, are gathered first, with a warning. A scale splits with the
    factors scale_factors gives its dimensions (None: replicated); with scale_blocks, a scale
    dimension of m or q counts 128-wide blocks, so those split only into whole blocks. With
    launch's entries (factor o of x, y, the sizes and the result) a split of them runs each
    device's own entries; an uneven one is gathered. summed: the entries' results summed (the
    result (G, P, Q)), a split of them summed as a split of the rows is."""
    x, y, gs, *scales = arg_shapes
    mx = x_factors.index("m")
    out_spec = spec_of(result_shape)
    axes, spec = _assign(mesh, (spec_of(x), x.shape), (spec_of(y), y.shape), x_factors,
                         y_factors, (None, *out_spec) if summed else out_spec, scale_blocks)
    if axes["o"] and x.shape[0] % math.prod(mesh.shape[name] for name in axes["o"]):
        axes["o"] = ()
    rows = x.shape[mx]
    m_axes = split_rows(mesh, axes, rows)
    o = ("o",) if entries else ()
    gathered = gathered_operands(axes, (("x", x, x_factors), ("y", y, y_factors),
                                        ("group_sizes", gs, (*o, None)),
                                        *((f"scale {i}", s, factors) for i, (s, factors)
                                          in enumerate(zip(scales, scale_factors)))))
    if gathered:
        warnings.warn(f"{op}: {', '.join(gathered)} gathered to every device (the columns of "
                      "x and y, and their rows split evenly, are split without gathering)",
                      stacklevel=2)

    summed_axes = (*m_axes, *(axes["o"] if summed else ()))

    def lower_fn(x, y, gs, *scales):
        p = dict(params)
        gs = shard_sizes(gs, m_axes, rows, x.shape[mx])
        if not summed_axes:
            return launch_fn(x, y, gs, *scales, **p)
        partial = launch_fn(x, y, gs, *scales, **{**p, "out_dtype": _F32})
        return jax.lax.psum(partial, summed_axes).astype(p["out_dtype"])

    return (mesh, lower_fn, spec(*((() if summed else o)), None, "p", "q"),
            (spec(*x_factors), spec(*y_factors), spec(*o, None),
             *(spec(*factors) for factors in scale_factors)))


def _assign(mesh, x, y, x_factors, y_factors, out, scale_blocks):
    """contraction_partition's mesh axes per factor (o, m, p, q) and its spec function, for x
    and y of those factors ((spec, shape) each) and the result's spec `out` ((G, P, Q), or
    (E, G, P, Q) where x and y lead with launch's entries, factor o): a split of x's or y's
    dimension first, then the result's; with scale_blocks m and q only in whole 128-wide
    blocks."""
    (sx, x_shape), (sy, y_shape) = x, y
    mx, my, q = x_factors.index("m"), y_factors.index("m"), y_factors.index("q")
    entries = "o" in x_factors
    out = out[1:] if entries else out
    axes, spec = assign_factors(mesh, {"o": [sx[0], sy[0], out[0]] if entries else [],
                                       "m": [sx[mx], sy[my]],
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
    return jax.core.ShapedArray((ends.shape[-1], x3.shape[2], y3.shape[2]), out_dtype,
                                sharding=contraction_placement(x3, y3, _X, _Y))


def reference(x3, y3, ends, *, out_dtype, config=None):
    """What the kernel computes, in jnp: jax.lax.ragged_dot's transpose in float32."""
    del config
    return contraction_reference(x3[0].astype(_F32), y3[0].astype(_F32), ends).astype(out_dtype)


def contraction_reference(x, y, ends):
    """out[g] = x_g^T y_g in float32 for x (M, P), y (M, Q) float32 and the group ends (G,):
    jax.lax.ragged_dot's transpose (rows past the last end in no group). Bounds (2, G) (the
    starts, then the ends, ordered and disjoint as launch's entries make them): the rows
    between a group's start and the end before it are a group of their own, whose entry is
    dropped."""
    if ends.ndim == 2:
        # The ends of gap 0, group 0, gap 1, group 1, ...
        return contraction_reference(x, y, ends.T.reshape(-1))[1::2]
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
