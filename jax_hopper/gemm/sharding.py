"""The GEMM (and hopper_glu's gated unit) under jit with sharded operands: every device
multiplies its own shards.

`partitioned` wraps the launch in jax.experimental.custom_partitioning with a Shardy rule

    a: b m k (or b k m),  b: b k n (or b n k),  bias: n,  residual: b m n  ->  out: b m n

(k a reduction factor; the batch dim of an operand shared by the whole batch has a factor of its
own, so it is never split). A gated weight (K, 2, F) is `k p n` and its bias (2, F) `p n`: p
(gate or up) is never split, so a split of F gives every device matching gate and up columns.
After propagation `_partition` fixes one mesh-axis assignment per factor and the per-device
program:
- batch, M or N split: each device runs the kernel on its shards, no communication;
- K split: each device computes its partial alpha*A.B (gated: the plain [gate | up] product)
  in `partial_dtype` (a 16-bit out dtype, else float32), the partials are summed, and the
  epilogue (bias, activation or gated unit, residual, the last rounding) runs after the sum in
  jnp. An activation cannot be applied to partial sums; applying it after the sum costs an
  unfused epilogue over the M x N sum, far less traffic than gathering K-split operands. The
  sum is a psum (every device gets the whole output) unless the output is asked for split
  along M (or, ungated, N) over the mesh axes that split K: then a reduce-scatter
  (psum_scatter) leaves each device only its rows (columns), the bytes a psum moves halved and
  nothing computed twice; the operands keep their K split (an output split on those axes never
  makes the operands' K whole).
Without a mesh (one device) or inside shard_map (all axes manual) the call is the plain launch.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jax_hopper.gemm.primitive import (apply_epilogue, broadcast_batch, launch,
                                       product_operand)


def def_partition(partitioned, partition, sharding_rule):
    """`partitioned.def_partition(partition=partition, sharding_rule=sharding_rule)`, with each
    per-device program `partition` returns traced outside any mesh context. jax traces that
    program while the caller compiles, under the caller's jax.set_mesh: with explicit axes
    (jax 0.11's make_mesh default) every value in it is typed on that mesh and lowered with a
    sharding annotation that the partitioner, which has already run, leaves in the program: a
    "Sharding" custom call that no backend implements. The per-device program is local shards
    only; no mesh context belongs in it."""
    def meshless(*args):
        mesh, lower_fn, out_shardings, arg_shardings = partition(*args)

        def local(*operands):
            with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
                return lower_fn(*operands)
        return mesh, local, out_shardings, arg_shardings
    partitioned.def_partition(partition=meshless, sharding_rule=sharding_rule)


def partitioned(params: tuple, a, b, bias, res):
    """launch(a, b, bias, res, **dict(params)), run on local shards under a sharded jit."""
    shapes = tuple(tuple(x.shape) for x in (a, b, bias, res))
    return _partitioned(params, shapes, a, b, bias, res)


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _partitioned(params, shapes, a, b, bias, res):
    del shapes  # only the sharding rule needs them
    return launch(a, b, bias, res, **dict(params))


def rule_operands(shapes, a_mn_major: bool, b_mn_major: bool, gated: bool = False):
    """The Shardy factors of a GEMM's a, b, bias and residual (`shapes`, as stored), and
    lead(size, own): the factor of a leading dimension of `size`, "b" where it is the batch (a
    batch of 1 shared by a batch > 1 cannot carry the batch factor: it gets `own`)."""
    (ba, *_), (bb, *_), bias_shape, res_shape = shapes
    bb = 1 if gated else bb  # a gated weight (K, 2, F) is shared by the batch
    batch = broadcast_batch(ba, bb)

    def lead(size, own):
        return "b" if size == batch else own

    a = f"{lead(ba, 'ba')} " + ("k m" if a_mn_major else "m k")
    b = "k p n" if gated else f"{lead(bb, 'bb')} " + ("k n" if b_mn_major else "n k")
    bias = ("p n" if gated else "n") if bias_shape[0] else "nz"
    res = f"{lead(res_shape[0], 'br')} m n" if res_shape[0] else "rz mz nz2"
    return f"{a}, {b}, {bias}, {res}", lead


def _rule(params, shapes, mesh, value_types, result_types):
    """Einsum-like Shardy rule; factor names follow the stored layouts of this call."""
    del mesh, value_types, result_types
    p = dict(params)
    operands, _ = rule_operands(shapes, p["a_mn_major"], p["b_mn_major"], p["family"] == "glu")
    return f"{operands} -> b m n", {"reduction_factors": ("k",)}


def mesh_axes(entry) -> tuple:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def spec_of(x) -> tuple:
    spec = tuple(x.sharding.spec) if isinstance(x.sharding, NamedSharding) else ()
    return spec + (None,) * (len(x.shape) - len(spec))


def assign_factors(mesh, candidates: dict, k: int):
    """One mesh-axis assignment per factor, from its candidate spec entries in order (a mesh
    axis splits one factor at most), and `spec(*factors)`, the NamedSharding of an array whose
    dimensions carry those factors (None: unsplit)."""
    used, axes = set(), {}
    for factor, entries in candidates.items():
        axes[factor] = ()
        for entry in map(mesh_axes, entries):
            if entry and not used & set(entry):
                axes[factor] = entry
                used |= set(entry)
                break
    # XLA pads an uneven split with undefined values; in K they would be summed in.
    if axes["k"] and k % math.prod(mesh.shape[name] for name in axes["k"]):
        axes["k"] = ()

    def spec(*factors):
        entries = [axes[f] if f else () for f in factors]
        return NamedSharding(mesh, PartitionSpec(
            *(None if not e else e[0] if len(e) == 1 else e for e in entries)))

    return axes, spec


def keep_k_axes(*k_entries):
    """unless_k(entry): an output spec entry, or None where it names a mesh axis that the
    operands' K entries (`k_entries`) split K over: those axes stay on K."""
    k_held = set(next((mesh_axes(e) for e in k_entries if e), ()))
    return lambda entry: None if k_held & set(mesh_axes(entry)) else entry


def k_scatter_dim(mesh, axes: dict, out_spec: tuple, out_shape: tuple, factors) -> int | None:
    """The output dimension (1: M, 2: N; of `factors`) to reduce-scatter K-split partials over:
    the one asked for split over its own axes and then K's, evenly; None: a psum."""
    k_axes = axes["k"]
    return next((dim for dim, f in ((1, "m"), (2, "n"))
                 if k_axes and f in factors and mesh_axes(out_spec[dim]) == axes[f] + k_axes
                 and out_shape[dim] % math.prod(mesh.shape[x] for x in axes[f] + k_axes) == 0),
                None)


def partial_dtype(out_dtype):
    """The dtype of a K split's partial products and of their sum: a 16-bit out dtype itself,
    else float32. The collective's bytes are the cost of a K split (two H200s, 2026-11-24:
    float32 partials ran 0.61-0.78x XLA's K split, which moves the out dtype); each partial is
    rounded once more, so a 16-bit result carries about sqrt(devices) of its own rounding
    error, as XLA's does."""
    out_dtype = jnp.dtype(out_dtype)
    return out_dtype if out_dtype.itemsize == 2 else jnp.dtype(jnp.float32)


def sum_partials(partial, k_axes: tuple, scatter: int | None):
    """The devices' partial products summed over K's mesh axes (reduce-scattered along output
    dimension `scatter`, or a psum), as float32 for the epilogue."""
    if scatter:
        z = jax.lax.psum_scatter(partial, k_axes, scatter_dimension=scatter, tiled=True)
    else:
        z = jax.lax.psum(partial, k_axes)
    return z.astype(jnp.float32)


def epilogue_shardings(spec, bias, res, batch: int):
    """The shardings of the bias ((N,), or gated (2, F): N or F its last axis) and of the
    residual ((batch or 1, M, N), or empty) under `spec` (assign_factors')."""
    bias_sh = spec(*(None,) * (len(bias.shape) - 1), "n" if bias.shape[0] else None)
    res_sh = spec("b" if res.shape[0] == batch else None, "m", "n") if res.shape[0] else \
        spec(None, None, None)
    return bias_sh, res_sh


def _partition(params, shapes, mesh, arg_shapes, result_shape):
    p = dict(params)
    gated = p["family"] == "glu"
    a, b, bias, res = arg_shapes
    ba, bb = a.shape[0], 1 if gated else b.shape[0]
    batch = broadcast_batch(ba, bb)
    sa, sb, so = spec_of(a), spec_of(b), spec_of(result_shape)
    a_m, a_k = (2, 1) if p["a_mn_major"] else (1, 2)
    b_n, b_k = (2, 0) if gated else (2, 1) if p["b_mn_major"] else (1, 2)  # gated: (K, 2, F)

    # Candidates per factor, operands first: a device keeps what it holds. The output's choice
    # fills in a factor the operands leave whole (slicing a replicated operand is free), but
    # never takes the axes the operands split K over: those stay on K, and an output split on
    # them is the reduce-scatter below.
    unless_k = keep_k_axes(sa[a_k], sb[b_k])
    candidates = {
        "b": [sa[0] if ba == batch else None, sb[0] if bb == batch else None, unless_k(so[0])]
        if batch > 1 else [],
        "m": [sa[a_m], unless_k(so[1])],
        "n": [sb[b_n], unless_k(so[2])],
        "k": [sa[a_k], sb[b_k]],
    }
    axes, spec = assign_factors(mesh, candidates, a.shape[a_k])
    k_axes = axes["k"]
    scatter = k_scatter_dim(mesh, axes, so, result_shape.shape, ("m",) if gated else ("m", "n"))
    a_sh = spec("b" if ba == batch else None, *(("k", "m") if p["a_mn_major"] else ("m", "k")))
    b_sh = spec("k", None, "n") if gated else \
        spec("b" if bb == batch else None, *(("k", "n") if p["b_mn_major"] else ("n", "k")))
    if scatter:  # from here on: the output's dims, and the residual's and bias's that match them
        axes[{1: "m", 2: "n"}[scatter]] += k_axes
    bias_sh, res_sh = epilogue_shardings(spec, bias, res, batch)
    out_sh = spec("b", "m", "n")

    def lower_fn(a, b, bias, res):
        if not k_axes:
            return launch(a, b, bias, res, **p)
        f32 = jnp.dtype(jnp.float32)
        # glu: the plain GEMM of the [gate | up] columns
        product = {**p, "out_dtype": partial_dtype(p["out_dtype"]), "activation": 0,
                   "family": "matmul"}
        partial = launch(a, product_operand(b, p["family"]), jnp.zeros((0,), f32),
                         jnp.zeros((0, 0, 0), product["out_dtype"]), **product)
        z = sum_partials(partial, k_axes, scatter)
        return apply_epilogue(z, bias, res, activation=p["activation"], beta=p["beta"],
                              out_dtype=p["out_dtype"], family=p["family"])

    return mesh, lower_fn, out_sh, (a_sh, b_sh, bias_sh, res_sh)


def_partition(_partitioned, _partition, _rule)
