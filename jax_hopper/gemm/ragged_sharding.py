"""hopper_ragged_dot under jit with sharded operands.

`partitioned` wraps the launch in jax.experimental.custom_partitioning with a Shardy rule

    lhs: o m k,  rhs: g k n (or g n k),  group_sizes: g,  bias: g n,  residual: o m n
      -> out: o m n

(the grouped GLU's gated weights: rhs g k h n and bias g h n, h the gate/up halves; its N
split gives every device matching gate and up columns, as hopper_glu's).

N split (the experts' columns, tensor parallelism) runs locally: each device multiplies every
row by its columns of every expert, with no communication. M split (the rows, data
parallelism) runs locally too: each device takes its shard of the rows with the group sizes cut
to them (ragged_tiles.local_sizes, from its shard index), when the shards are equal. K split the
same way on lhs and rhs (the d lhs of a call whose rhs is split along N, in the backward pass)
sums partial products (sharding.partial_dtype) over the K axes (psum) and applies the epilogue
after the sum, as hopper_matmul does. Groups (G) split would move rows between devices: an
operand split along G, or along M unevenly, is gathered (all-gather) before the launch, with a
warning that names it.
Expert parallelism (each device its own experts and their tokens) is written with shard_map:
there the call is the plain launch on each device's arrays.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning

from jax_hopper.gemm.ragged_primitive import (epilogue, fold_entries, folded_vmap,
                                              holds_entries, launch)
from jax_hopper.gemm.ragged_tiles import local_sizes
from jax_hopper.gemm.sharding import (assign_factors, def_partition, mesh_axes,
                                      partial_dtype, spec_of, sum_partials)


def partitioned(params: tuple, lhs3, rhs, gs, bias, res):
    """launch(lhs3, rhs, gs, bias, res, **dict(params)), run on local shards under a sharded
    jit; under vmap one launch over every entry (ragged_primitive.fold_entries: the entries
    as launch's, which the sharding rule splits as a batch), or once per entry where folding
    would copy a weight (custom_partitioning has no batching rule of its own, so vmap is
    answered above it)."""
    return _vmappable(params)(lhs3, rhs, gs, bias, res)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    def one(lhs3, rhs, gs, bias, res):
        shapes = tuple(tuple(x.shape) for x in (lhs3, rhs, gs, bias, res))
        return _partitioned(params, shapes, lhs3, rhs, gs, bias, res)

    return folded_vmap(one, functools.partial(fold_entries, dict(params)["family"]))


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(params, shapes, lhs3, rhs, gs, bias, res):
    del shapes  # only the sharding rule needs them
    return launch(lhs3, rhs, gs, bias, res, **dict(params))


def _rhs_dims(p: dict, ndim: int) -> tuple[int, int]:
    """(N, K) dimensions of rhs: (G, K, N), (G, N, K), or gated (G, K, 2, N)."""
    return (ndim - 1, 1) if p["b_mn_major"] else (1, 2)


def _rule(params, shapes, mesh, value_types, result_types):
    del mesh, value_types, result_types
    _, rhs_shape, gs_shape, bias_shape, res_shape = shapes
    p = dict(params)
    gated = p["family"] == "grouped_glu"
    entries = len(gs_shape) == 2
    o = "o " if holds_entries(p["family"], "rhs", len(rhs_shape)) else ""
    rhs = o + ("g k h n" if gated else "g k n" if p["b_mn_major"] else "g n k")
    bias = o + ("g h n" if gated else "g n") if bias_shape[0] else "z"
    res = "o m n" if res_shape[0] else "r1 r2 r3"
    # o: the entries (launch's), split over devices as any batch; 1 without them
    return (f"o m k, {rhs}, {'o g' if entries else 'g'}, {bias}, {res} -> o m n",
            {"reduction_factors": ("k",),
             "need_replication_factors": (() if entries else ("o",)) + ("g",) +
                                         (("h",) if gated else ())})


def split_rows(mesh, axes: dict, rows: int) -> tuple:
    """The mesh axes that split the M rows, dropped from `axes` (so the rows are gathered)
    unless they split them evenly: a shard's group sizes come from its index."""
    if axes["m"] and rows % math.prod(mesh.shape[name] for name in axes["m"]):
        axes["m"] = ()
    return axes["m"]


def gathered_operands(axes: dict, operands) -> list:
    """Names of the (name, shape, factor per dimension) operands split along a dimension other
    than as `axes` assigns it: those are gathered."""
    return [name for name, x, factors in operands
            if any(e is not None and mesh_axes(e) != axes.get(f, ())
                   for e, f in zip(spec_of(x), factors))]


def no_epilogue(q: dict) -> tuple:
    """The bias and residual operands of a launch that adds neither."""
    return jnp.zeros((0,), jnp.float32), jnp.zeros((0, 0, 0), q["out_dtype"])


def summed_over_k(p: dict, k_axes: tuple, gs, bias, res, partial):
    """A K split's result (inside the partitioned function): partial(q), this device's
    (1, M, N) slice of alpha * the product under launch params q (p in sharding.partial_dtype,
    no activation, no residual), summed over K's mesh axes, then p's epilogue with the bias
    per group and the residual."""
    q = {**p, "out_dtype": partial_dtype(p["out_dtype"]), "activation": 0, "beta": 0.0}
    z = sum_partials(partial(q), k_axes, None)
    z = z if gs.ndim == 2 else z[0]  # entries' (E, M, N) stay whole
    return epilogue(z, gs, bias, res, activation=p["activation"], beta=p["beta"],
                    out_dtype=p["out_dtype"], family=p["family"])


def shard_sizes(gs, m_axes, rows: int, local_rows: int):
    """The group sizes of this device's rows (inside the partitioned function); each entry's
    for entries' sizes (E, G)."""
    if not m_axes:
        return gs
    offset = jax.lax.axis_index(m_axes) * local_rows
    if gs.ndim == 2:
        return jax.vmap(lambda sizes: local_sizes(sizes, rows, offset, local_rows))(gs)
    return local_sizes(gs, rows, offset, local_rows)


def _partition(params, shapes, mesh, arg_shapes, result_shape):
    p = dict(params)
    lhs, rhs, gs, bias, res = arg_shapes
    entries = len(gs.shape) == 2
    per_entry = holds_entries(p["family"], "rhs", len(rhs.shape))
    o = int(per_entry)  # rhs's and bias's dimensions follow the entries'
    rhs_n, rhs_k = (d + o for d in _rhs_dims(p, len(rhs.shape) - o))
    s_lhs, s_rhs, s_gs, s_out = spec_of(lhs), spec_of(rhs), spec_of(gs), spec_of(result_shape)
    split_entries = [s_lhs[0], s_out[0], *(s_gs[:1] if entries else ()),
                     *(s_rhs[:1] if per_entry else ())]
    axes, spec = assign_factors(mesh, {"o": split_entries if entries else [],
                                       "m": [s_lhs[1], s_out[1]], "n": [s_rhs[rhs_n], s_out[2]],
                                       "k": [s_lhs[2], s_rhs[rhs_k]]}, lhs.shape[2])
    if axes["o"] and lhs.shape[0] % math.prod(mesh.shape[name] for name in axes["o"]):
        axes["o"] = ()  # an uneven split of the entries is gathered
    rows = lhs.shape[1]
    m_axes, k_axes = split_rows(mesh, axes, rows), axes["k"]
    rhs_factors = [{0: "o" if per_entry else None, rhs_n: "n", rhs_k: "k"}.get(i)
                   for i in range(len(rhs.shape))]
    gs_factors = ("o", None) if entries else (None,)
    gathered = gathered_operands(axes, (("lhs", lhs, ("o", "m", "k")),
                                        ("rhs", rhs, rhs_factors),
                                        ("group_sizes", gs, gs_factors)))
    if gathered:
        warnings.warn(f"hopper_ragged_dot: {', '.join(gathered)} gathered to every device (rows "
                      "split evenly, rhs's N, and K on both operands are split without "
                      "gathering; shard experts with shard_map)", stacklevel=2)
    bias_sh = (spec(*["o"] * o, *[None] * (len(bias.shape) - 1 - o), "n") if bias.shape[0]
               else spec(None))
    res_sh = spec("o", "m", "n") if res.shape[0] else spec(None, None, None)

    def lower_fn(lhs, rhs, gs, bias, res):
        gs = shard_sizes(gs, m_axes, rows, lhs.shape[1])
        if not k_axes:
            return launch(lhs, rhs, gs, bias, res, **p)
        # The plain grouped product (gated: of the [gate | up] columns).
        if p["family"] == "grouped_glu":
            rhs = rhs.reshape(*rhs.shape[:o + 2], -1)
        return summed_over_k(p, k_axes, gs, bias, res, lambda q: launch(
            lhs, rhs, gs, *no_epilogue(q), **{**q, "family": "grouped"}))

    return (mesh, lower_fn, spec("o", "m", "n"),
            (spec("o", "m", "k"), spec(*rhs_factors), spec(*gs_factors), bias_sh, res_sh))


def_partition(_partitioned, _partition, _rule)
