"""hopper_ragged_dot under jit with sharded operands.

`partitioned` wraps the launch in jax.experimental.custom_partitioning with a Shardy rule

    lhs: o m k,  rhs: g k n (or g n k),  group_sizes: g,  bias: g n,  residual: o m n
      -> out: o m n

(the grouped GLU's gated weights: rhs g k h n and bias g h n, h the gate/up halves; its N
split gives every device matching gate and up columns, as hopper_glu's).

N split (the experts' columns, tensor parallelism) runs locally: each device multiplies every
row by its columns of every expert, with no communication. K split the same way on lhs and rhs
(the d lhs of a call whose rhs is split along N, in the backward pass) sums float32 partial
products over the K axes (psum) and applies the epilogue after the sum, as hopper_matmul does.
The other factors need replication: rows (M) split over devices would give each device groups
that start at another device's rows, and groups (G) split would move rows between devices. An
operand split along either is gathered (all-gather) before the launch, with a warning that
names it. Expert parallelism (each device its own experts and their tokens) is written with
shard_map: there the call is the plain launch on each device's arrays.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp

from jax.experimental.custom_partitioning import custom_partitioning

from jax_hopper.gemm.ragged_primitive import epilogue, launch, vmapped_per_entry
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

    return vmapped_per_entry(one)


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(params, shapes, lhs3, rhs, gs, bias, res):
    del shapes  # only the sharding rule needs them
    return launch(lhs3, rhs, gs, bias, res, **dict(params))


def _rhs_dims(p: dict, ndim: int) -> tuple[int, int]:
    """(N, K) dimensions of rhs: (G, K, N), (G, N, K), or gated (G, K, 2, N)."""
    return (ndim - 1, 1) if p["b_mn_major"] else (1, 2)


def _rule(params, shapes, mesh, value_types, result_types):
    del mesh, value_types, result_types
    *_, bias_shape, res_shape = shapes
    p = dict(params)
    gated = p["family"] == "grouped_glu"
    rhs = "g k h n" if gated else "g k n" if p["b_mn_major"] else "g n k"
    bias = ("g h n" if gated else "g n") if bias_shape[0] else "z"
    res = "o m n" if res_shape[0] else "r1 r2 r3"
    return (f"o m k, {rhs}, g, {bias}, {res} -> o m n",
            {"reduction_factors": ("k",),
             "need_replication_factors": ("o", "m", "g") + (("h",) if gated else ())})


def _partition(params, shapes, mesh, arg_shapes, result_shape):
    p = dict(params)
    lhs, rhs, gs, bias, res = arg_shapes
    rhs_n, rhs_k = _rhs_dims(p, len(rhs.shape))
    s_lhs, s_rhs = spec_of(lhs), spec_of(rhs)
    axes, spec = assign_factors(mesh, {"n": [s_rhs[rhs_n], spec_of(result_shape)[2]],
                                       "k": [s_lhs[2], s_rhs[rhs_k]]}, lhs.shape[2])
    gathered = [name for name, x, keep in (("lhs", lhs, (2,)), ("rhs", rhs, (rhs_n, rhs_k)),
                                           ("group_sizes", gs, ()))
                if any(e is not None for i, e in enumerate(spec_of(x)) if i not in keep)]
    if gathered:
        warnings.warn(f"hopper_ragged_dot: {', '.join(gathered)} gathered to every device (only "
                      "rhs's N axis, and K on both operands, are split without gathering; shard "
                      "experts with shard_map)", stacklevel=2)
    rhs_sh = spec(*[{rhs_n: "n", rhs_k: "k"}.get(i) for i in range(len(rhs.shape))])
    bias_sh = (spec(*[None] * (len(bias.shape) - 1), "n") if bias.shape[0] else spec(None))
    res_sh = spec(None, None, "n") if res.shape[0] else spec(None, None, None)
    k_axes = axes["k"]

    def lower_fn(lhs, rhs, gs, bias, res):
        if not k_axes:
            return launch(lhs, rhs, gs, bias, res, **p)
        # The plain grouped product (gated: of the [gate | up] columns) of this device's K
        # slice, summed in float32, then the epilogue.
        f32 = jnp.dtype(jnp.float32)
        if p["family"] == "grouped_glu":
            rhs = rhs.reshape(rhs.shape[0], rhs.shape[1], -1)
        product = {**p, "out_dtype": f32, "activation": 0, "beta": 0.0, "family": "grouped"}
        partial = launch(lhs, rhs, gs, jnp.zeros((0,), f32), jnp.zeros((0, 0, 0), f32),
                         **product)
        z = jax.lax.psum(partial, k_axes)[0]
        return epilogue(z, gs, bias, res, activation=p["activation"], beta=p["beta"],
                        out_dtype=p["out_dtype"], family=p["family"])

    return (mesh, lower_fn, spec(None, None, "n"),
            (spec(None, None, "k"), rhs_sh, spec(None), bias_sh, res_sh))


_partitioned.def_partition(partition=_partition, sharding_rule=_rule)
