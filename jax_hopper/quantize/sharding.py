"""quantize_fp8 under jit with a sharded x: every device quantizes its own shard, with no
communication (a per-tensor amax is reduced over the whole array before, by XLA, or given) but
for a recorded amax: the shards' maxima, one pmax.

`partitioned` wraps the primitive in jax.experimental.custom_partitioning with a Shardy rule

    x: b r c,  amax: b (per tensor) ->  q: b r c,  q_t: b c r,
    scale (row): b r cb, (tile): b rb cb;  scale_t (row): b c rb, (tile): b cb rb;
    amax_out (recorded): b

(where R or C is whole 128-wide blocks, r = (rb, 128) and c = (cb, 128) are compound factors, so
that propagation splits the scales with their dimension; the partition splits rb and cb on the
axes of r and c; empty outputs carry factors of their own). A block-scaled copy keeps its blocks
whole: R is split only where every device gets whole 128-row blocks of whichever scale counts
rows in blocks (tile scales, and q_t's row scales), C likewise (row and tile scales of q, tile
scales of q_t); otherwise that dimension stays whole. Under vmap the entries fold into the batch
the kernel walks (one launch), as the primitive's own rule does.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import custom_partitioning

from jax_hopper.gemm.sharding import assign_factors, def_partition, spec_of
from jax_hopper.kernels import catalog


def partitioned(bind, params: tuple, x3, amax3):
    """bind(x3, amax3, **dict(params)) (the quantize primitive's 5 outputs) on local shards
    under a sharded jit."""
    return _vmappable(bind, params)(x3, amax3)


@functools.lru_cache(maxsize=None)
def _vmappable(bind, params):
    fn = custom_vmap(functools.partial(_partitioned, bind, params))

    @fn.def_vmap
    def _fold(axis_size, in_batched, x, amax):  # the entries into the batch: one launch
        x_b, amax_b = in_batched
        if not x_b:
            x = x[None].repeat(axis_size, 0)
        b = x.shape[1]
        if dict(params)["mode"] == "tensor":
            amax = (amax if amax_b else amax[None].repeat(axis_size, 0)).reshape(axis_size * b)
        *outs, seen = _vmappable(bind, params)(x.reshape(axis_size * b, *x.shape[2:]), amax)
        seen = seen.reshape(axis_size, b if dict(params)["record_amax"] else 0)
        return [o.reshape(axis_size, b, *o.shape[1:]) for o in outs] + [seen], [True] * 5

    return fn


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(bind, params, x3, amax3):
    return bind(x3, amax3, **dict(params))


def _blocked(p: dict) -> dict:
    """Whether some scale counts R ("r") or C ("c") in 128-wide blocks: q's row scales count C,
    its tile scales both; q_t's (whose rows are C) row scales count R, its tile scales both."""
    t_mode = p["t_mode"] if p["transpose"] else "tensor"
    return {"r": p["mode"] == "tile" or t_mode != "tensor",
            "c": p["mode"] != "tensor" or t_mode == "tile"}


def _rule(bind, params, mesh, value_types, result_types):
    del bind, result_types
    p = dict(params)
    _, r, c = value_types[0].shape
    blocked = _blocked(p)
    # A dimension whose scales count it in blocks is the compound factor (blocks, 128) where
    # it is two or more whole blocks and each mesh axis's devices can take a whole number of
    # them, so that a split of it is the same split of its scales' dimension. Otherwise the
    # scales' block dimension is a factor of its own: Shardy takes no factor of size 1 in a
    # compound (one block), and splits blocks fewer than an axis's devices across the block
    # (a sub-axis of it) into the 128, which custom_partitioning cannot name (_partition then
    # keeps such a dimension whole).
    compound = {d: blocked[d] and n % catalog.FP8_SCALE_BLOCK == 0
                and n > catalog.FP8_SCALE_BLOCK
                and all((n // catalog.FP8_SCALE_BLOCK) % size == 0
                        for size in mesh.shape.values())
                for d, n in (("r", r), ("c", c))}
    full = {d: f"({d}b {d}q)" if compound[d] else d for d in "rc"}
    block = {d: f"{d}b" if compound[d] else f"{d}x" for d in "rc"}

    def scales(mode, rows, cols, empty):
        return {"tensor": f"b {empty}1 {empty}2", "row": f"b {full[rows]} {block[cols]}",
                "tile": f"b {block[rows]} {block[cols]}"}[mode]

    t = p["transpose"]
    rule = (f"b {full['r']} {full['c']}, {'b' if p['mode'] == 'tensor' else 'az'} -> "
            f"b {full['r']} {full['c']}, {scales(p['mode'], 'r', 'c', 's')}, "
            f"{'b ' + full['c'] + ' ' + full['r'] if t else 'b t1 t2'}, "
            f"{scales(p['t_mode'], 'c', 'r', 'u') if t else 'b v1 v2'}, "
            f"{'b' if p['record_amax'] else 'w1'}")
    return rule, {f"{d}q": catalog.FP8_SCALE_BLOCK for d in "rc" if compound[d]}


def _partition(bind, params, mesh, arg_shapes, result_shape):
    return placement(params, mesh, arg_shapes, result_shape, bind)


def placement(params, mesh, arg_shapes, result_shape, bind=None):
    """(mesh, the per-device function, the outputs' and the arguments' shardings) of a
    quantize call of `params` on `arg_shapes` (x, amax): the partition, and under explicit
    sharding the outputs' types (quantize_fp8's abstract eval; bind None: nothing lowered)."""
    p = dict(params)
    x, _ = arg_shapes
    sx, so = spec_of(x), spec_of(result_shape[0])
    axes, spec = assign_factors(mesh, {"b": [sx[0], so[0]], "r": [sx[1], so[1]],
                                       "c": [sx[2], so[2]], "k": []}, 0)
    for (factor, blocked), extent in zip(_blocked(p).items(), x.shape[1:]):
        devices = math.prod(mesh.shape[a] for a in axes[factor])
        if blocked and axes[factor] and extent % (devices * catalog.FP8_SCALE_BLOCK):
            if bind is not None:  # the partition, not the types' trace
                warnings.warn(f"quantize_fp8: x's {'rows' if factor == 'r' else 'columns'} "
                              f"({extent}) split over {devices} devices are gathered: block "
                              f"scales split only in whole {catalog.FP8_SCALE_BLOCK}-wide "
                              "blocks", stacklevel=2)
            axes[factor] = ()
    empty = spec("b", None, None)
    outs = [spec("b", "r", "c"), empty if p["mode"] == "tensor" else spec("b", "r", "c"),
            spec("b", "c", "r") if p["transpose"] else empty,
            spec("b", "c", "r") if p["transpose"] and p["t_mode"] != "tensor" else empty,
            spec("b" if p["record_amax"] else None)]
    args = (spec("b", "r", "c"), spec("b" if p["mode"] == "tensor" else None))
    split = axes["r"] + axes["c"]  # the mesh axes x's rows and columns are split over

    def lower_fn(x3, amax3):
        *outs, seen = bind(x3, amax3, **p)
        if p["record_amax"] and split:  # as bits: the order the kernel maxes in, NaN on top
            bits = jax.lax.pmax(jax.lax.bitcast_convert_type(seen, jnp.uint32), split)
            seen = jax.lax.bitcast_convert_type(bits, jnp.float32)
        return [*outs, seen]

    return mesh, lower_fn, outs, args


def_partition(_partitioned, _partition, _rule)
