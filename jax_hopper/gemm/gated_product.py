"""hopper_glu's product under differentiation, gate and up kept apart: z (B, M, 2, F) =
alpha * x (B, M, K) . w (K, 2, F), and its two gradients, each the plain GEMM (primitive.launch)
on the device's shards.

On one device, w (K, 2, F) is the (K, 2F) matrix [gate | up] as it lies in memory, and so is z's
(2, F) a (2F) row. Under a sharded jit with F split (tensor parallelism) that merge is not a
split of the merged dimension (each device holds a slice of gate and one of up): a reshape of
the global arrays gathers w. Here the merge happens inside custom_partitioning, on each
device's own (K, 2, F / d), where it moves nothing. The Shardy rules:

    product   b m k, k p n -> b m p n        (k a reduction: partials summed)
    d x       b m p n, k p n -> b m k        (n a reduction)
    d w       b m k, b m p n -> k p n        (b m reductions)

p (gate or up) is never split. Operands split any other way are gathered (a warning says which,
as the grouped GEMM's partitioning does). vmap launches once per entry (custom_partitioning has
no batching rule); inside shard_map each call is the plain local launch.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import PartitionSpec

from jax_hopper import manual_axes
from jax_hopper.gemm.primitive import freeze, launch
from jax_hopper.gemm.ragged_primitive import vmapped_per_entry
from jax_hopper.gemm.ragged_sharding import gathered_operands
from jax_hopper.gemm.sharding import assign_factors, spec_of
from jax_hopper.gemm.typed_reshape import explicitly_sharded

_F32 = jnp.dtype(jnp.float32)

# Each operand's factors by dimension, per product.
_FACTORS = {
    "product": (("b", "m", "k"), ("k", "p", "n"), ("b", "m", "p", "n")),
    "dx": (("b", "m", "p", "n"), ("k", "p", "n"), ("b", "m", "k")),
    "dw": (("b", "m", "k"), ("b", "m", "p", "n"), ("k", "p", "n")),
}
# The contracted factors a split of which leaves partial sums (p, contracted in d x, is never
# split: Shardy takes it as a factor to replicate).
_REDUCED = {"product": ("k",), "dx": ("n",), "dw": ("b", "m")}


def gated_product(x3, w, alpha: float):
    """alpha * x3 . w as (B, M, 2, F) in x3's dtype, differentiable (to any order: each
    product's gradients are the other two)."""
    return _differentiable("product", alpha, x3.dtype)(x3, w)


# Each product's VJP in the other two, cotangent g: of z = product(x, w), d x = dx(g, w) and
# d w = dw(x, g); of dx(dz, w) = dz . w^T, d dz = product(g, w) and d w = dw(g, dz); of
# dw(x, dz) = x^T . dz, d x = dx(dz, g) and d dz = product(x, g).
_VJPS = {
    "product": lambda x, y, g: ((("dx", x.dtype), (g, y)), (("dw", y.dtype), (x, g))),
    "dx": lambda x, y, g: ((("product", x.dtype), (g, y)), (("dw", y.dtype), (g, x))),
    "dw": lambda x, y, g: ((("dx", x.dtype), (y, g)), (("product", y.dtype), (x, g))),
}


@functools.lru_cache(maxsize=None)
def _differentiable(role: str, alpha: float, out_dtype):
    """The role's product of (x, y) in out_dtype, with its VJP (_VJPS)."""
    f = jax.custom_vjp(_local(role, freeze(dict(alpha=alpha, out_dtype=jnp.dtype(out_dtype)))))

    def fwd(x, y):
        return f(x, y), (x, y, manual_axes.types((x, y)))

    def bwd(saved, g):
        x, y, primal_types = saved
        grads = []
        for (other, dtype), args in _VJPS[role](x, y, g.astype(x.dtype)):
            grads.append(_differentiable(other, alpha, dtype)(*args))
        return manual_axes.like_primals(tuple(grads), primal_types)

    f.defvjp(fwd, bwd)
    return f


def _gemm(a, b, a_mn_major, b_mn_major, out_dtype, alpha):
    """One device's plain GEMM: alpha * op(a) . op(b), a (B or 1, ., .), b (B or 1, ., .)."""
    return launch(a, b, jnp.zeros((0,), _F32), jnp.zeros((0, 0, 0), out_dtype),
                  family="matmul", a_mn_major=a_mn_major, b_mn_major=b_mn_major,
                  out_dtype=jnp.dtype(out_dtype), activation=0, alpha=alpha, beta=1.0,
                  config=None)


def _merged(x, shape, sharding=None):
    """x.reshape(shape) inside the partitioned function: a device's shards reshape freely.
    Traced on the global arrays under explicit sharding (for the result's type only: the
    partitioner's lower_fn runs the shards) the result is typed `sharding` (_out_sharding's),
    else replicated."""
    if explicitly_sharded(x) or sharding is not None:
        return jax.lax.reshape(x, shape, out_sharding=sharding or jax.typeof(x).sharding.update(
            spec=PartitionSpec()))
    return x.reshape(shape)


def _out_sharding(role: str, x, y):
    """Under explicit sharding, the role's result where its partition places it (_assignment,
    nothing asked of the result); None without."""
    avals = jax.typeof(x), jax.typeof(y)
    typed = [a for a in avals if explicitly_sharded(a)]
    if not typed:
        return None
    _, spec = _assignment(role, typed[0].sharding.mesh, *avals, None)
    return spec(*(None if f == "p" else f for f in _FACTORS[role][2]))


def _assignment(role: str, mesh, x, y, result):
    """The mesh axes of the role's factors (assign_factors) from its operands' and result's
    shardings (abstract values; result None: nothing asked of it), and `spec`: a split the
    merges of (B, M) (d w) and of (2, F) (d x) cannot take whole is dropped (gathered), as XLA
    would pad it with values the sum would take in."""
    x_factors, y_factors, out_factors = _FACTORS[role]
    candidates = {f: [] for f in "bmkpn"}
    for factors, spec in ((x_factors, spec_of(x)), (y_factors, spec_of(y)),
                          (out_factors, () if result is None else spec_of(result))):
        for f, entry in zip(factors, spec):
            if f != "p":
                candidates[f].append(entry)
    axes, spec = assign_factors(mesh, candidates, x.shape[x_factors.index("k")]
                                if "k" in x_factors else y.shape[y_factors.index("k")])
    for factor, extent in (("b", x.shape[0]), ("m", x.shape[1]),
                           ("n", x.shape[x_factors.index("n")] if "n" in x_factors
                            else y.shape[y_factors.index("n")])):
        if axes[factor] and extent % math.prod(mesh.shape[a] for a in axes[factor]):
            axes[factor] = ()
    return axes, spec


def _compute(role: str, p: dict, x, y, reduce_over: tuple):
    """The role's product of the device's x and y (the factors of _FACTORS), its partials
    summed over the mesh axes `reduce_over` (inside the partitioned function)."""
    summed = bool(reduce_over)
    sharding = _out_sharding(role, x, y)
    if role == "product":  # x (B, M, K), w (K, 2, F): w as the (K, 2F) matrix
        k, _, f = y.shape
        out_dtype = _F32 if summed else p["out_dtype"]
        z = _gemm(x, _merged(y, (1, k, 2 * f)), False, True, out_dtype, p["alpha"])
        z = _merged(z, (*x.shape[:2], 2, f), sharding)
        out = p["out_dtype"]
    elif role == "dx":  # dz (B, M, 2, F), w (K, 2, F): dz . w^T over (2, F)
        b, m, _, f = x.shape
        out_dtype = _F32 if summed else p["out_dtype"]
        z = _gemm(_merged(x, (b, m, 2 * f)), _merged(y, (1, y.shape[0], 2 * f)), False, False,
                  out_dtype, p["alpha"])
        z = _merged(z, z.shape, sharding)
        out = p["out_dtype"]
    else:  # dw: x (B, M, K), dz (B, M, 2, F): x^T . dz over (B, M)
        b, m, k = x.shape
        f = y.shape[3]
        out_dtype = _F32 if summed else p["out_dtype"]
        z = _gemm(_merged(x, (1, b * m, k)), _merged(y, (1, b * m, 2 * f)), True, True,
                  out_dtype, p["alpha"])
        z = _merged(z, (k, 2, f), sharding)
        out = p["out_dtype"]
    if summed:
        z = jax.lax.psum(z, reduce_over)
    return z.astype(out)


@functools.lru_cache(maxsize=None)
def _local(role: str, params: tuple):
    """The role's partitioned function of (x, y), with a vmap rule of one launch per entry."""
    p = dict(params)

    @custom_partitioning
    def partitioned(x, y):
        return _compute(role, p, x, y, ())

    def rule(mesh, value_types, result_types):
        del mesh, value_types, result_types
        x, y, out = (" ".join(f) for f in _FACTORS[role])
        return f"{x}, {y} -> {out}", {"reduction_factors": _REDUCED[role],
                                      "need_replication_factors": ("p",)}

    def partition(mesh, arg_shapes, result_shape):
        x_factors, y_factors, out_factors = _FACTORS[role]
        x, y = arg_shapes
        axes, spec = _assignment(role, mesh, x, y, result_shape)
        gathered = gathered_operands(axes, (("x", x, x_factors), ("w", y, y_factors)))
        if gathered:
            warnings.warn(f"hopper_glu (its gradient's {role}): {', '.join(gathered)} gathered "
                          "to every device (splits of the rows, K and F are kept)", stacklevel=2)
        reduce_over = sum((axes[f] for f in _REDUCED[role]), ())

        def lower_fn(x, y):
            return _compute(role, p, x, y, reduce_over)

        return (mesh, lower_fn, spec(*(None if f == "p" else f for f in out_factors)),
                (spec(*(None if f == "p" else f for f in x_factors)),
                 spec(*(None if f == "p" else f for f in y_factors))))

    partitioned.def_partition(partition=partition, sharding_rule=rule)
    return vmapped_per_entry(partitioned)
