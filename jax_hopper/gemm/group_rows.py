"""A value per group taken by every row of the group, and its transpose, the rows' sums per
group: the grouped ops' bias (G, N) added to each row, and its gradient.

per_row is a primitive (hopper_per_row), linear in the values, whose transpose is group_sums:
so the bias term of a JVP (the grouped fused path's, hopper_ragged_glu's) transposes into one
segment sum per device and an all-reduce, never a scatter-add of split rows (which would
gather them), and jax.jvp of it is the same gather (a custom VJP had no forward mode: jax.jvp
of hopper_ragged_glu with a bias tangent raised). Rows hold their group's index, G for the
rows past every group, which take zeros and count for none.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.sharding import mesh_axes, spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape, resharded

per_row_p = Primitive("hopper_per_row")


def per_row(values, group_sizes, rows_like):
    """values (G, ...), one entry per group, taken by each row of rows_like (M, ...) from its
    group; zeros for the rows past every group. Under explicit sharding the result is typed as
    rows_like (so that its cotangent comes back split as the rows are). Linear in values: its
    transpose is group_sums."""
    rows = ragged_tiles.row_groups(group_sizes, rows_like.shape[0])
    if explicitly_sharded(rows_like) or explicitly_sharded(values):
        # The result typed as rows_like (values are one row per group: resharding moves little).
        like = spec_of(jax.typeof(rows_like))
        src = rows_like if explicitly_sharded(rows_like) else values
        values = resharded(values, PartitionSpec(None, *like[1:]), on=src)
        rows = resharded(rows, PartitionSpec(like[0]), on=src)
    return per_row_p.bind(values, rows)


def group_sums(x, rows, like):
    """x (M, ...) summed over the rows of each group into `like`'s (G, ...) shape and dtype
    (like: an array or its abstract value; rows: each row's group, G for those past every
    group). Under explicit sharding each device sums its own rows and one all-reduce adds the
    devices' sums (a scatter-add of the split rows would gather them), typed as `like` is."""
    like = like if isinstance(like, jax.core.AbstractValue) else jax.typeof(like)
    groups = like.shape[0]
    if not explicitly_sharded(x):
        return jax.ops.segment_sum(x, rows, num_segments=groups,
                                   indices_are_sorted=True).astype(like.dtype)
    x_spec = spec_of(jax.typeof(x))
    row_axes = mesh_axes(x_spec[0])

    def local(x, rows):
        sums = jax.ops.segment_sum(x, rows, num_segments=groups, indices_are_sorted=True)
        return jax.lax.psum(sums, row_axes) if row_axes else sums

    sums = jax.shard_map(local, mesh=jax.typeof(x).sharding.mesh,
                         in_specs=(PartitionSpec(*x_spec), PartitionSpec(x_spec[0])),
                         out_specs=PartitionSpec(None, *x_spec[1:]))(
        x, resharded(rows, PartitionSpec(x_spec[0]), on=x))
    return resharded(sums.astype(like.dtype), PartitionSpec(*spec_of(like)), on=x)


def _gather(values, rows):
    out_sharding = None
    if explicitly_sharded(values) or explicitly_sharded(rows):
        spec = spec_of(jax.typeof(rows))[:1] + spec_of(jax.typeof(values))[1:]
        src = rows if explicitly_sharded(rows) else values
        out_sharding = jax.typeof(src).sharding.update(spec=PartitionSpec(*spec))
    return values.at[rows].get(mode="fill", fill_value=0, out_sharding=out_sharding)


def _abstract_eval(values, rows):
    """_gather's type: under explicit sharding split as the rows along M, as the values
    along the rest."""
    shape = (rows.shape[0], *values.shape[1:])
    if not (explicitly_sharded(values) or explicitly_sharded(rows)):
        return jax.core.ShapedArray(shape, values.dtype)
    spec = spec_of(rows)[:1] + spec_of(values)[1:]
    src = rows if explicitly_sharded(rows) else values
    return jax.core.ShapedArray(shape, values.dtype,
                                sharding=src.sharding.update(spec=PartitionSpec(*spec)))


def _jvp(primals, tangents):
    values, rows = primals
    out = per_row_p.bind(values, rows)
    if type(tangents[0]) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, per_row_p.bind(tangents[0], rows)


def _transpose(ct, values, rows):
    if type(ct) is ad.Zero:
        return None, None
    return manual_axes.like_aval(group_sums(ct, rows, values.aval), values.aval), None


def _batch(args, dims):
    # vmap: the entries' rows stacked into one gather; values one table per entry are stacked
    # too, each entry's rows offset to its own (the rows past every group stay past all).
    values, rows = args
    v_dim, r_dim = dims
    size = values.shape[v_dim] if v_dim is not None else rows.shape[r_dim]
    values = jnp.moveaxis(values, v_dim, 0) if v_dim is not None else values
    rows = (jnp.moveaxis(rows, r_dim, 0) if r_dim is not None
            else jnp.broadcast_to(rows, (size, *rows.shape)))
    m = rows.shape[1]
    if v_dim is not None:
        groups = values.shape[1]
        offsets = jnp.arange(size, dtype=rows.dtype)[:, None] * groups
        rows = jnp.where(rows < groups, rows + offsets, size * groups)
        values = reshape(values, (size * groups, *values.shape[2:]), warn=False)
    out = per_row_p.bind(values, reshape(rows, (size * m,), warn=False))
    return reshape(out, (size, m, *out.shape[1:]), warn=False), 0


per_row_p.def_impl(jax.jit(_gather))
per_row_p.def_abstract_eval(manual_axes.typed_outputs(_abstract_eval))
mlir.register_lowering(per_row_p, mlir.lower_fun(_gather, multiple_results=False))
ad.primitive_jvps[per_row_p] = _jvp
ad.primitive_transposes[per_row_p] = _transpose
batching.primitive_batchers[per_row_p] = _batch
