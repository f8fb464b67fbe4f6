"""The gated products of hopper_glu and hopper_ragged_glu under differentiation, gate and up
kept apart, and their gradients: each a plain GEMM of the device's shards.

    dense (hopper_glu):          z (B, M, 2, F) = alpha * x (B, M, K) . w (K, 2, F)
    grouped (hopper_ragged_glu): z (M, 2, F), the rows of group g alpha * x_g . w[g], w
                                 (G, K, 2, F), group sizes (G,) as hopper_ragged_dot's
                                 (int32, made valid); rows past every group zero

On one device w's (2, F) is the (2F) row [gate | up] as it lies in memory, and so is z's: the
product is one GEMM (grouped: the grouped kernel) with 2F columns. (The dense d w with one
gate, (B, M, 1, F), is hopper_matmul's gradient of a weight its batch shares:
rows_contracted.) Under a sharded jit with F
split (tensor parallelism) that merge is not a split of the merged dimension (each device holds
a slice of gate and one of up): a reshape of the global arrays gathers w. Here the merge
happens inside custom_partitioning, on each device's own (2, F / d), where it moves nothing.
The Shardy rules:

              dense                          grouped
    product   b m k, k p n -> b m p n        m k, g k p n, g -> m p n      (k reduced)
    d x       b m p n, k p n -> b m k        m p n, g k p n, g -> m k      (n reduced)
    d w       b m k, b m p n -> k p n        m k, m p n, g -> g k p n      (b m reduced)

p (gate or up) and g (the experts) are never split; the rows (b, m) and F (n) only evenly. A
device's group sizes are cut to its rows (ragged_sharding.shard_sizes), so the grouped product
and d x stay local under a row split and d w sums its partials, as the dense d w does.
Operands split any other way are gathered (a warning says which, as the GEMMs' partitioning
does).

Each role is a primitive, gated_role_p (traced_primitive: lowered as its custom_partitioning
launch), with JVP, transpose and vmap rules, not a custom VJP: custom_partitioning has no
batching rule, and under jax.grad of a sum over vmapped calls sharing the weight a custom
VJP's backward runs entry by entry, each entry's weight gradient (E, G, K, 2, F) computed and
summed after. Under vmap against a shared weight each product is one launch (_batch: dense,
the entries merged into the batch, or d w's kernel batch, on each device's shards; grouped,
the grouped launches' entries, each with its own group sizes: ragged_primitive.launch's,
ragged_contract.launch's), a mapped weight once per entry; the transpose of such a product in
the shared weight is dw_summed, one sum over every entry's rows (grouped: placed expert by
expert, ragged_contract.summed_launch). Inside shard_map each call is the plain local launch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import ad, batching
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm import primitive, ragged_primitive
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.ragged_contract import launch as contraction
from jax_hopper.gemm.ragged_contract import summed_launch
from jax_hopper.gemm.ragged_primitive import entries_operand, per_entry
from jax_hopper.gemm.ragged_sharding import gathered_operands, no_epilogue, shard_sizes
from jax_hopper.gemm.sharding import assign_factors, def_partition, spec_of
from jax_hopper.gemm.traced_primitive import bilinear_jvp, def_traced
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape

_F32 = jnp.dtype(jnp.float32)


def gated_product(x3, w, alpha: float):
    """alpha * x3 . w as (B, M, 2, F) in x3's dtype, differentiable (to any order: each
    product's gradients are the other two)."""
    return _role(_DENSE, "product", alpha, x3.dtype, x3, w)


def ragged_gated_product(x, w, group_sizes, alpha: float):
    """alpha * x_g . w[g] for the rows of each group g, (M, 2, F) in x's dtype; group_sizes
    (G,) int32 (ragged_tiles.int32_sizes). Differentiable in x and w, to any order."""
    return _role(_GROUPED, "product", alpha, x.dtype, x, w, group_sizes)


def unit_jvp(unfused, params, primals, tangents):
    """A gated unit's custom JVP rule (symbolic zeros) through its unfused form: jax.jvp of
    unfused(*primals, params) in the operands that have a tangent (never the integer group
    sizes). jax.grad transposes it, so the gated products' primitives see vmap's entries, and a
    weight they share gets one gradient (dw_summed); the fused kernel stays the primal without
    a tangent."""
    live = [i for i, t in enumerate(tangents) if type(t) is not SymbolicZero]

    def unit(*operands):
        args = list(primals)
        for i, operand in zip(live, operands):
            args[i] = operand
        return unfused(*args, params)

    return jax.jvp(unit, [primals[i] for i in live], [tangents[i] for i in live])


def rows_contracted(x, y, alpha: float, out_dtype):
    """alpha * x^T . y over the rows (B, M) of x (B, M, P) and y (B, M, Q), (P, Q) in out_dtype:
    hopper_matmul's gradient of a weight the batch shares, the dense d w with one gate (the
    rows merged on each device's shards: a split of M sums partials instead of gathering).
    Differentiable."""
    return _role(_DENSE, "dw", alpha, out_dtype, x, y[:, :, None])[:, 0]


@dataclasses.dataclass(frozen=True, eq=False)
class _Kind:
    """One kind of gated product: the op named in warnings, each role's factors of (x, y,
    result) by dimension, and `compute(role, x, y, sizes, out_dtype, alpha, sharding)`, the
    role's product of a device's operands (sizes: () or the group sizes of its rows)."""
    op: str
    factors: dict
    compute: Callable
    grouped: bool

    def __repr__(self):  # in a printed jaxpr's params
        return self.op


# The contracted factors a split of which leaves partial sums (p, contracted in d x, is never
# split: Shardy takes it as a factor to replicate).
_REDUCED = {"product": ("k",), "dx": ("n",), "dw": ("b", "m"), "product_entries": ("k",),
            "dx_entries": ("n",), "dw_entries": ("b", "m"), "dw_summed": ("e", "b", "m")}

# Each role is bilinear in (x, y); its transposes, cotangent g: (role, operands) of x's and of
# y's. Of z = product(x, w), d x = dx(g, w) and d w = dw(x, g); of dx(dz, w) = dz . w^T,
# d dz = product(g, w) and d w = dw(g, dz); of dw(x, dz) = x^T . dz, d x = dx(dz, g) and
# d dz = product(x, g). Under vmap against a shared weight the _entries forms transpose into
# each other, the weight's into dw_summed (every entry's rows in one sum: the gradient of a
# weight the entries share, never E of them); dw_entries' result is a weight per entry, so
# its transposes are the per-entry roles, vmapped (a "*" before the role). The group sizes
# go with every product unchanged.
_TRANSPOSES = {
    "product": (lambda y, g: ("dx", (g, y)), lambda x, g: ("dw", (x, g))),
    "dx": (lambda y, g: ("product", (g, y)), lambda x, g: ("dw", (g, x))),
    "dw": (lambda y, g: ("dx", (y, g)), lambda x, g: ("product", (x, g))),
    "product_entries": (lambda y, g: ("dx_entries", (g, y)),
                        lambda x, g: ("dw_summed", (x, g))),
    "dx_entries": (lambda y, g: ("product_entries", (g, y)),
                   lambda x, g: ("dw_summed", (g, x))),
    "dw_summed": (lambda y, g: ("dx_entries", (y, g)),
                  lambda x, g: ("product_entries", (x, g))),
    "dw_entries": (lambda y, g: ("*dx", (y, g)), lambda x, g: ("*product", (x, g))),
}

gated_role_p = Primitive("hopper_gated_role")


def _role(kind: _Kind, role: str, alpha: float, out_dtype, x, y, *sizes):
    """The role's product of (x, y[, group sizes]) in out_dtype: differentiable (to any
    order: traced_primitive.bilinear_jvp, _TRANSPOSES) and vmappable (_batch)."""
    return gated_role_p.bind(x, y, *sizes, kind=kind, role=role, params=freeze(dict(
        alpha=alpha, out_dtype=jnp.dtype(out_dtype))))


def _launch(x, y, *sizes, kind, role, params):
    return _local(kind, role, params)(x, y, *sizes)


def _abstract_eval(x, y, *sizes, kind, role, params):
    out = kind.factors[role][2]
    shape = tuple(_extent(kind, role, f, x, y, *sizes) for f in out)
    return jax.core.ShapedArray(shape, dict(params)["out_dtype"],
                                sharding=_out_sharding(kind, role, x, y))


def _transpose(ct, x, y, *sizes, kind, role, params):
    none = (None,) * len(sizes)
    if type(ct) is ad.Zero:
        return (None, None, *none)
    undefined_x = ad.is_undefined_primal(x)
    linear, known = (x, y) if undefined_x else (y, x)
    x_dtype = (x.aval if undefined_x else x).dtype
    other, args = _TRANSPOSES[role][0 if undefined_x else 1](known, ct.astype(x_dtype))
    alpha = dict(params)["alpha"]
    if other.startswith("*"):  # one per entry: the entries lead every operand
        grad = jax.vmap(lambda a, b, *s: _role(kind, other[1:], alpha, linear.aval.dtype, a, b,
                                               *s))(*args, *sizes)
    else:
        grad = _role(kind, other, alpha, linear.aval.dtype, *args, *sizes)
    grad = manual_axes.like_aval(grad, linear.aval)
    return (grad, None, *none) if undefined_x else (None, grad, *none)


def _batch(args, dims, *, kind, role, params):
    """vmap as one launch, as hopper_matmul's vmap folds its entries: against a shared weight
    (only operands that carry the rows mapped: dense the batch b, grouped m; an unmapped one
    of them, and unmapped group sizes, repeated), the role's _ENTRIES form, whose factor e
    keeps the entries apart (dense: until each device's shards merge them, so a split of b is
    never gathered; grouped: the launches' entries, each its own group sizes); an _ENTRIES form
    under another vmap joins the outer entries to its own (V E). Else (a mapped weight, or
    dw_summed, whose entries share one sum) one launch per entry."""
    in_batched = [d is not None for d in dims]
    args = [jnp.moveaxis(a, d, 0) if b else a for a, d, b in zip(args, dims, in_batched)]
    axis_size = next(a.shape[0] for a, b in zip(args, in_batched) if b)
    bind = functools.partial(gated_role_p.bind, kind=kind, role=role, params=params)
    x_factors, y_factors, _ = kind.factors[role]
    entries = role in _ENTRIES.values()
    rows = "e" if entries else "m" if kind.grouped else "b"
    carries = (rows in x_factors, rows in y_factors)
    if (not axis_size  # no entries: per_entry's loop of none
            or (not entries and (role not in _ENTRIES or _ENTRIES[role] not in kind.factors))
            or any(m and not c for m, c in zip(in_batched, carries))):
        return per_entry(bind, in_batched, args), 0
    repeat = (*carries, *(True for _ in args[2:]))  # the sizes go with the rows
    if entries:  # an _ENTRIES form's own entries joined by the mapped ones (V E)
        out = bind(*[entries_operand(a, m, axis_size) if r else a
                     for a, m, r in zip(args, in_batched, repeat)])
        return reshape(out, (axis_size, -1, *out.shape[1:])), 0
    return gated_role_p.bind(*[
        a if m or not r else jnp.broadcast_to(a, (axis_size, *a.shape))
        for a, m, r in zip(args, in_batched, repeat)], kind=kind, role=_ENTRIES[role],
        params=params), 0


def _merged(x, shape, sharding=None):
    """x.reshape(shape) inside the partitioned function: a device's shards reshape freely.
    Traced on the global arrays under explicit sharding (for the result's type only: the
    partitioner's lower_fn runs the shards) the result is typed `sharding` (_out_sharding's),
    else replicated."""
    if explicitly_sharded(x) or sharding is not None:
        return jax.lax.reshape(x, shape, out_sharding=sharding or jax.typeof(x).sharding.update(
            spec=PartitionSpec()))
    return x.reshape(shape)


def _dense(role: str, x, y, sizes, out_dtype, alpha: float, sharding):
    del sizes

    def gemm(a, b, a_mn_major, b_mn_major):  # alpha op(a) . op(b), a and b (B or 1, ., .)
        return primitive.launch(a, b, *no_epilogue({"out_dtype": out_dtype}), family="matmul",
                                a_mn_major=a_mn_major, b_mn_major=b_mn_major,
                                out_dtype=jnp.dtype(out_dtype), activation=0, alpha=alpha,
                                beta=1.0, config=None)

    if role == "product":  # x (B, M, K), w (K, 2, F): w as the (K, 2F) matrix
        k, gates, f = y.shape
        z = gemm(x, _merged(y, (1, k, gates * f)), False, True)
        return _merged(z, (*x.shape[:2], gates, f), sharding)
    if role == "dx":  # dz (B, M, 2, F), w (K, 2, F): dz . w^T over (2, F)
        b, m, gates, f = x.shape
        z = gemm(_merged(x, (b, m, gates * f)), _merged(y, (1, y.shape[0], gates * f)), False,
                 False)
        return _merged(z, z.shape, sharding)
    if role in ("product_entries", "dx_entries"):  # (E, B, ...): E B as the batch
        e, b = x.shape[:2]
        base = "product" if role == "product_entries" else "dx"
        z = _dense(base, _merged(x, (e * b, *x.shape[2:])), y, (), out_dtype, alpha, None)
        return _merged(z, (e, b, *z.shape[1:]), sharding)
    if role == "dw_summed":  # x (E, B, M, K), dz (E, B, M, 2, F): x^T . dz over (E, B, M)
        e, b = x.shape[:2]
        return _dense("dw", _merged(x, (e * b, *x.shape[2:])), _merged(y, (e * b, *y.shape[2:])),
                      (), out_dtype, alpha, sharding)
    if role == "dw_entries":  # x (E, B, M, K), dz (E, B, M, 2, F): each entry's x^T . dz
        e, b, m, k = x.shape
        gates, f = y.shape[3:]
        z = gemm(_merged(x, (e, b * m, k)), _merged(y, (e, b * m, gates * f)), True, True)
        return _merged(z, (e, k, gates, f), sharding)
    # dw: x (B, M, K), dz (B, M, 2, F): x^T . dz over (B, M)
    b, m, k = x.shape
    gates, f = y.shape[2:]
    z = gemm(_merged(x, (1, b * m, k)), _merged(y, (1, b * m, gates * f)), True, True)
    return _merged(z, (k, gates, f), sharding)


def _grouped(role: str, x, y, sizes, out_dtype, alpha: float, sharding):
    # An _entries role: x and y lead with E entries where they hold rows, the sizes (E, G),
    # all the grouped launches' entries (each its own rows and sizes, the weight shared).
    (gs,) = sizes
    role = role.removesuffix("_entries")
    lead = x.shape[:1] if gs.ndim == 2 else (1,)

    def gemm(lhs, rhs, b_mn_major):  # the grouped kernel: alpha lhs_g . rhs[g] (or rhs[g]^T)
        return ragged_primitive.launch(
            lhs, rhs, gs, *no_epilogue({"out_dtype": out_dtype}), b_mn_major=b_mn_major,
            out_dtype=jnp.dtype(out_dtype), activation=0, alpha=alpha, beta=1.0, config=None,
            family="grouped")

    if role == "product":  # x ([E,] M, K), w (G, K, 2, F): w[g] as the (K, 2F) matrix
        groups, k, _, f = y.shape
        z = gemm(_merged(x, (*lead, *x.shape[-2:])), _merged(y, (groups, k, 2 * f)), True)
        return _merged(z, (*x.shape[:-1], 2, f), sharding)
    if role == "dx":  # dz ([E,] M, 2, F), w (G, K, 2, F): dz_g . w[g]^T over (2, F)
        m, _, f = x.shape[-3:]
        groups, k = y.shape[:2]
        z = gemm(_merged(x, (*lead, m, 2 * f)), _merged(y, (groups, k, 2 * f)), False)
        return _merged(z, (*x.shape[:-2], k), sharding)
    # dw: x ([E,] M, K), dz ([E,] M, 2, F): x_g^T . dz_g, the grouped contraction (which has
    # no alpha: applied to its float32 result); dw_summed: the entries' sum, their rows
    # placed expert by expert (ragged_contract.summed_launch)
    f = y.shape[-1]
    contract = summed_launch if role == "dw_summed" else contraction
    z = contract(x, _merged(y, (*y.shape[:-2], 2 * f)), gs,
                 out_dtype=_F32 if alpha != 1.0 else jnp.dtype(out_dtype), config=None)
    z = (alpha * z).astype(out_dtype) if alpha != 1.0 else z
    return _merged(z, (*z.shape[:-1], 2, f), sharding)


_DENSE = _Kind("hopper_glu", {
    "product": (("b", "m", "k"), ("k", "p", "n"), ("b", "m", "p", "n")),
    "dx": (("b", "m", "p", "n"), ("k", "p", "n"), ("b", "m", "k")),
    "dw": (("b", "m", "k"), ("b", "m", "p", "n"), ("k", "p", "n")),
    # Under vmap against a shared weight (_vmappable): the entries e merged into the batch on
    # each device's shards (product, d x), or the kernel's batch (d w: each entry's own sum).
    "product_entries": (("e", "b", "m", "k"), ("k", "p", "n"), ("e", "b", "m", "p", "n")),
    "dx_entries": (("e", "b", "m", "p", "n"), ("k", "p", "n"), ("e", "b", "m", "k")),
    "dw_entries": (("e", "b", "m", "k"), ("e", "b", "m", "p", "n"), ("e", "k", "p", "n")),
    # The gradient of a weight the entries share (product_entries' transpose): one sum over
    # every entry's rows.
    "dw_summed": (("e", "b", "m", "k"), ("e", "b", "m", "p", "n"), ("k", "p", "n")),
}, _dense, grouped=False)
_ENTRIES = {"product": "product_entries", "dx": "dx_entries", "dw": "dw_entries"}
_GROUPED = _Kind("hopper_ragged_glu", {
    "product": (("m", "k"), ("g", "k", "p", "n"), ("m", "p", "n")),
    "dx": (("m", "p", "n"), ("g", "k", "p", "n"), ("m", "k")),
    "dw": (("m", "k"), ("m", "p", "n"), ("g", "k", "p", "n")),
    # Under vmap against a shared weight (_vmappable): the grouped launches' entries e, each
    # with its own rows and group sizes (E, G), split over devices as a batch.
    "product_entries": (("e", "m", "k"), ("g", "k", "p", "n"), ("e", "m", "p", "n")),
    "dx_entries": (("e", "m", "p", "n"), ("g", "k", "p", "n"), ("e", "m", "k")),
    "dw_entries": (("e", "m", "k"), ("e", "m", "p", "n"), ("e", "g", "k", "p", "n")),
    "dw_summed": (("e", "m", "k"), ("e", "m", "p", "n"), ("g", "k", "p", "n")),
}, _grouped, grouped=True)


def _extent(kind: _Kind, role: str, factor: str, x, y, *sizes) -> int:
    """The size of the role's `factor` in arrays x and y (or the group sizes: the experts g
    of a d w)."""
    x_factors, y_factors, _ = kind.factors[role]
    if factor in x_factors:
        return x.shape[x_factors.index(factor)]
    if factor in y_factors:
        return y.shape[y_factors.index(factor)]
    return sizes[0].shape[_sizes_factors(kind, role).index(factor)]


def _sizes_factors(kind: _Kind, role: str) -> tuple:
    """The group sizes' factors: (G,), or (E, G) with the entries' rows."""
    return ("e", "g") if "e" in kind.factors[role][0] else ("g",)


def _out_sharding(kind: _Kind, role: str, x, y):
    """Under explicit sharding, the role's result where its partition places it (_assignment,
    nothing asked of the result); None without. x, y: arrays or abstract values."""
    avals = [a if isinstance(a, jax.core.AbstractValue) else jax.typeof(a) for a in (x, y)]
    typed = [a for a in avals if explicitly_sharded(a)]
    if not typed:
        return None
    _, spec = _assignment(kind, role, typed[0].sharding.mesh, *avals, None)
    return spec(*kind.factors[role][2])


def _assignment(kind: _Kind, role: str, mesh, x, y, result):
    """The mesh axes of the role's factors (assign_factors) from its operands' and result's
    shardings (abstract values; result None: nothing asked of it), and `spec`: a split of the
    rows (b, m) or of F (n) that the merges cannot take whole is dropped (gathered), as XLA
    would pad it with values the sums would take in; p and g stay whole."""
    x_factors, y_factors, out_factors = kind.factors[role]
    candidates = {f: [] for f in "ebmkn"}
    for factors, spec in ((x_factors, spec_of(x)), (y_factors, spec_of(y)),
                          (out_factors, () if result is None else spec_of(result))):
        for f, entry in zip(factors, spec):
            if f in candidates:
                candidates[f].append(entry)
    axes, spec = assign_factors(mesh, candidates, _extent(kind, role, "k", x, y))
    axes.update(p=(), g=())
    for factor in "ebmn":
        if axes[factor] and _extent(kind, role, factor, x, y) % math.prod(
                mesh.shape[a] for a in axes[factor]):
            axes[factor] = ()
    return axes, spec


def _compute(kind: _Kind, role: str, p: dict, x, y, sizes, reduce_over: tuple):
    """The role's product of the device's x and y, its partials summed over the mesh axes
    `reduce_over` (inside the partitioned function)."""
    out_dtype = _F32 if reduce_over else p["out_dtype"]
    z = kind.compute(role, x, y, sizes, out_dtype, p["alpha"], _out_sharding(kind, role, x, y))
    if reduce_over:
        z = jax.lax.psum(z, reduce_over)
    return z.astype(p["out_dtype"])


@functools.lru_cache(maxsize=None)
def _local(kind: _Kind, role: str, params: tuple):
    """The role's partitioned function of (x, y[, group sizes]): gated_role_p's launch."""
    p = dict(params)
    x_factors, y_factors, out_factors = kind.factors[role]

    @custom_partitioning
    def partitioned(x, y, *sizes):
        return _compute(kind, role, p, x, y, sizes, ())

    sizes_factors = _sizes_factors(kind, role)

    def rule(mesh, value_types, result_types):
        del mesh, value_types, result_types
        operands = [" ".join(x_factors), " ".join(y_factors)] + (
            [" ".join(sizes_factors)] if kind.grouped else [])
        # Shardy wants each list in the order the factors first appear.
        order = dict.fromkeys(x_factors + y_factors)
        return f"{', '.join(operands)} -> {' '.join(out_factors)}", {
            "reduction_factors": tuple(f for f in order if f in _REDUCED[role]),
            "need_replication_factors": tuple(f for f in order if f in "pg")}

    def partition(mesh, arg_shapes, result_shape):
        x, y, *sizes = arg_shapes
        axes, spec = _assignment(kind, role, mesh, x, y, result_shape)
        gathered = gathered_operands(axes, (("x", x, x_factors), ("w", y, y_factors),
                                            *(("group_sizes", s, sizes_factors) for s in sizes)))
        if gathered:
            warnings.warn(f"{kind.op} (its gradient's {role}): {', '.join(gathered)} gathered "
                          "to every device (even splits of the rows, K and F are kept)",
                          stacklevel=2)
        reduce_over = sum((axes[f] for f in _REDUCED[role]), ())
        rows = _extent(kind, role, "m", x, y)

        def lower_fn(x, y, *sizes):
            if sizes and axes["m"]:  # this device's rows' groups
                sizes = (shard_sizes(sizes[0], axes["m"], rows,
                                     _extent(kind, role, "m", x, y)),)
            return _compute(kind, role, p, x, y, sizes, reduce_over)

        return (mesh, lower_fn, spec(*out_factors),
                (spec(*x_factors), spec(*y_factors),
                 *(spec(*(f if f == "e" else None for f in sizes_factors)) for _ in sizes)))

    def_partition(partitioned, partition, rule)
    return partitioned


def_traced(gated_role_p, _launch)
gated_role_p.def_abstract_eval(manual_axes.typed_outputs(_abstract_eval))
ad.primitive_jvps[gated_role_p] = lambda primals, tangents, **params: bilinear_jvp(
    functools.partial(gated_role_p.bind, **params), primals, tangents)
ad.primitive_transposes[gated_role_p] = _transpose
batching.primitive_batchers[gated_role_p] = _batch
