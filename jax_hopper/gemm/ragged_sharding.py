"""hopper_ragged_dot under jit with sharded operands.

`partitioned` wraps the launch in jax.experimental.custom_partitioning with a Shardy rule

    lhs: o m k,  rhs: g k n (or g n k),  group_sizes: g,  bias: g n,  residual: o m n
      -> out: o m n

(the grouped GLU's gated weights: rhs g k h n and bias g h n, h the gate/up halves; its N
split gives every device matching gate and up columns, as hopper_glu's).

Only N is split (the experts' columns, tensor parallelism): each device multiplies every row
by its columns of every expert, with no communication. The other factors need replication:
rows (M) split over devices would give each device groups that start at another device's rows,
groups (G) split would move rows between devices, and a K split would need the partial products
summed. An operand split along any of them is gathered (all-gather) before the launch, with a
warning that names it. Expert parallelism (each device its own experts and their tokens) is
written with shard_map: there the call is the plain launch on each device's arrays.
"""

from __future__ import annotations

import functools
import warnings

from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import custom_partitioning

from jax_hopper.gemm.ragged_primitive import launch, per_entry
from jax_hopper.gemm.sharding import assign_factors, spec_of


def partitioned(params: tuple, lhs3, rhs, gs, bias, res):
    """launch(lhs3, rhs, gs, bias, res, **dict(params)), run on local shards under a sharded
    jit; under vmap once per entry (custom_partitioning has no batching rule of its own, so
    vmap is answered above it)."""
    return _vmappable(params)(lhs3, rhs, gs, bias, res)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    def one(lhs3, rhs, gs, bias, res):
        shapes = tuple(tuple(x.shape) for x in (lhs3, rhs, gs, bias, res))
        return _partitioned(params, shapes, lhs3, rhs, gs, bias, res)

    fn = custom_vmap(one)
    fn.def_vmap(lambda axis_size, in_batched, *args: (per_entry(one, in_batched, args), True))
    return fn


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(params, shapes, lhs3, rhs, gs, bias, res):
    del shapes  # only the sharding rule needs them
    return launch(lhs3, rhs, gs, bias, res, **dict(params))


def _rule(params, shapes, mesh, value_types, result_types):
    del mesh, value_types, result_types
    *_, bias_shape, res_shape = shapes
    p = dict(params)
    gated = p["family"] == "grouped_glu"
    rhs = "g k h n" if gated else "g k n" if p["b_mn_major"] else "g n k"
    bias = ("g h n" if gated else "g n") if bias_shape[0] else "z"
    res = "o m n" if res_shape[0] else "r1 r2 r3"
    return (f"o m k, {rhs}, g, {bias}, {res} -> o m n",
            {"need_replication_factors": ("o", "m", "k", "g") + (("h",) if gated else ())})


def _partition(params, shapes, mesh, arg_shapes, result_shape):
    p = dict(params)
    lhs, rhs, gs, bias, res = arg_shapes
    rhs_n = rhs.ndim - 1 if p["b_mn_major"] else 1
    s_rhs = spec_of(rhs)
    _, spec = assign_factors(mesh, {"n": [s_rhs[rhs_n], spec_of(result_shape)[2]], "k": []},
                                lhs.shape[2])
    gathered = [name for name, x, keep in (("lhs", lhs, None), ("rhs", rhs, rhs_n),
                                           ("group_sizes", gs, None))
                if any(e is not None for i, e in enumerate(spec_of(x)) if i != keep)]
    if gathered:
        warnings.warn(f"hopper_ragged_dot: {', '.join(gathered)} gathered to every device (only "
                      "rhs's N axis is split without communication; shard experts with "
                      "shard_map)", stacklevel=2)
    rhs_sh = spec(*[("n" if i == rhs_n else None) for i in range(rhs.ndim)])
    bias_sh = (spec(*[None] * (bias.ndim - 1), "n") if bias.shape[0] else spec(None))
    res_sh = spec(None, None, "n") if res.shape[0] else spec(None, None, None)
    return (mesh, lambda *args: launch(*args, **p), spec(None, None, "n"),
            (spec(None, None, None), rhs_sh, spec(None), bias_sh, res_sh))


_partitioned.def_partition(partition=_partition, sharding_rule=_rule)
