"""hopper_ragged_dot: the grouped GEMM of Mixture-of-Experts layers, jax.lax.ragged_dot's
semantics with a fused epilogue, and `ragged_dot`, a drop-in for jax.lax.ragged_dot.

The rows of lhs (M, K) are sorted by group: the first group_sizes[0] rows belong to group 0,
and so on; rows of group g multiply rhs[g]. Group sizes stay on the device (a traced array):
the launch is the same whatever they hold, so calls run in CUDA graphs and lax.scan. Negative
sizes count as 0, groups are cut at M, and rows past every group come out as the epilogue of a
zero product (0 without bias/residual, as jax.lax.ragged_dot gives): ragged_tiles.py.

Layers: hopper_ragged_dot checks its arguments -> _ragged (custom JVP), or with nothing fused
ragged_product.product (a primitive with JVP, transpose and vmap rules) ->
ragged_sharding.partitioned (sharded jit: rhs's N split runs locally) ->
ragged_primitive.launch -> hopper_ragged_p.

NOTES:
- Autodiff: d lhs is the same grouped kernel with rhs's layout flag flipped (dP @ rhs[g]^T);
  d rhs[g] = lhs_g^T dP_g, a GEMM whose groups split the contraction, is the grouped
  contraction kernel (ragged_contract.py): the transposes of ragged_product's primitive. With
  nothing fused that primitive is the op; a fused epilogue is a custom JVP whose tangent is
  built from it (_ragged_jvp), d bias's term from group_rows.per_row (its transpose the segment
  sum), d residual's beta * d out: so jax.jvp works, and under jax.grad of a sum over vmapped
  calls sharing the weights their gradient is one contraction over every entry's rows, fused
  or not (a custom VJP, batched by jax, computed each entry's weight gradient and summed
  them). Differentiated with an activation, the forward is the launch without it (z, the
  output's dtype, kept for act'(z)) and act(z) + beta * res in jnp, as hopper_matmul's
  (autodiff.py's NOTES: three products a step, not four).
- vmap: one launch over every entry (ragged_primitive.fold_entries, answered above
  custom_partitioning in ragged_sharding): the entries' rows stacked, each entry's groups tiled
  apart in one table (ragged_tiles.entry_sizes, entry_groups), the weights shared or one per
  entry as they are mapped; the entries split over devices run locally. d lhs folds the same
  way, and so does d rhs, the grouped contraction (ragged_contract.fold_entries: each group
  bounded by its own first row and end); a mapped bias over shared weights runs once per entry
  (folding it would copy the weights).
- Sharding (ragged_sharding.py): rhs split along N and lhs's rows split evenly run without
  communication, K split on both operands sums partials (psum); groups split are gathered, with
  a warning; experts split over devices is shard_map's. The backward launches are partitioned
  too: with rhs split along N, d lhs is a K split (psum) and d rhs (ragged_contract.partitioned)
  stays local; with the rows split, d lhs stays local and d rhs is one psum.
- 2-CTA clusters along M (cluster_m=2) take a paired tile table (ragged_tiles.py).
"""

from __future__ import annotations

import collections
import functools
import logging

import jax
import jax.numpy as jnp

from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.autodiff import activated, epilogue_tangent
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.group_rows import per_row
from jax_hopper.gemm.ragged_primitive import epilogue
from jax_hopper.gemm.ragged_product import product
from jax_hopper.gemm.ragged_sharding import partitioned
from jax_hopper.gemm.traced_primitive import bilinear_tangent, is_zero

_F32 = jnp.dtype(jnp.float32)
_LOG = logging.getLogger("jax_hopper")
# Why calls of ragged_dot ran jax.lax.ragged_dot instead of the kernel, and how often.
FALLBACKS: collections.Counter = collections.Counter()


def hopper_ragged_dot(lhs, rhs, group_sizes, *, preferred_element_type=None, out_dtype=None,
                      transpose_rhs=False, bias=None, activation=None, residual=None, alpha=1.0,
                      beta=1.0, config=None):
    """out[rows of group g] = act(alpha * lhs[rows] @ rhs[g] + bias[g]) + beta * residual[rows]

    lhs: (M, K); rhs: (G, K, N), or with transpose_rhs (G, N, K), read in place;
    group_sizes: (G,) integer, a device array (sizes of consecutive row groups). bfloat16 or
    float16 inputs (both the same), float32 accumulation; out_dtype (alias
    preferred_element_type) bfloat16, float16 or float32, default the input dtype.
    bias: (G, N), one row per group, added in float32; residual: (M, N) or broadcastable to it.
    activation: None, "relu", "gelu_tanh", "gelu" or "silu". config: a GemmConfig of the
    grouped family (stream_k=False; 2-CTA clusters along N or M); default: the config tuned
    for this GPU and the problem each launch runs (a device's shard under a sharded jit; python
    -m jax_hopper.tune), else heuristics.choose_grouped_config's.
    """
    lhs, rhs, group_sizes = jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(group_sizes)
    out_dtype, act, alpha, beta = api.epilogue_args(
        lhs, rhs, out_dtype, preferred_element_type, activation, alpha, beta,
        names=("lhs", "rhs"), fn="hopper_ragged_dot")
    api.check_bools("hopper_ragged_dot", transpose_rhs=transpose_rhs)
    if lhs.ndim != 2:
        raise ValueError(f"lhs.shape={lhs.shape} must be (M, K)")
    if rhs.ndim != 3:
        raise ValueError(f"rhs.shape={rhs.shape} must be 3-D: (G, K, N), or (G, N, K) with "
                         "transpose_rhs=True")
    groups = rhs.shape[0]
    n, k = (rhs.shape[1], rhs.shape[2]) if transpose_rhs else (rhs.shape[2], rhs.shape[1])
    m = lhs.shape[0]
    if lhs.shape[1] != k:
        raise ValueError(f"lhs.shape={lhs.shape} and rhs.shape={rhs.shape}: lhs's K "
                         f"({lhs.shape[1]}) must be rhs's {'last' if transpose_rhs else 'second'}"
                         f" dimension ({k}){' (transpose_rhs=True)' if transpose_rhs else ''}")
    check_group_sizes(group_sizes, groups, "rhs group")
    bias2 = api.prepare_bias(bias, (groups, n), "(G, N)", ": one row per group")
    res3 = residual3(residual, (m, n), out_dtype)
    b_mn_major = not transpose_rhs
    config = checked_config(config, lhs.dtype.name, False, b_mn_major, family="grouped")

    params = freeze(dict(b_mn_major=b_mn_major, out_dtype=out_dtype, activation=act,
                         alpha=alpha, beta=beta, config=config, family="grouped"))
    gs = ragged_tiles.int32_sizes(group_sizes, m)
    lhs3 = lhs[None]
    if m == 0 or n == 0 or groups == 0 or k == 0:  # a zero product: nothing to launch
        out = epilogue(jnp.zeros((m, n), _F32), gs, bias2, res3, activation=act, beta=beta,
                       out_dtype=out_dtype)
    elif not (act or bias2.size or res3.size or alpha != 1.0):  # nothing fused
        out = product(lhs3, rhs, gs, params)
    else:
        out = _ragged(lhs3, rhs, gs, bias2, res3, params)
    return out[0]


def check_group_sizes(group_sizes, groups: int, what: str) -> None:
    """ValueError unless group_sizes is an integer array (G,), one size per `what`."""
    if group_sizes.shape != (groups,) or not jnp.issubdtype(group_sizes.dtype, jnp.integer):
        raise ValueError(f"group_sizes must be an integer array of shape (G,) = ({groups},), "
                         f"one size per {what}; got {group_sizes.dtype} {group_sizes.shape}")


def residual3(residual, shape: tuple, out_dtype):
    """The residual as the grouped kernels add it: (1, M, N) in out_dtype, or (0, 0, 0)."""
    if residual is None:
        return jnp.zeros((0, 0, 0), out_dtype)
    return jnp.broadcast_to(api.checked_residual(residual, shape, out_dtype), shape)[None]


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None):
    """jax.lax.ragged_dot's signature on the grouped kernel: lhs (M, K), rhs (G, K, N),
    group_sizes (G,), bfloat16 or float16 inputs (both alike) and a bfloat16, float16 or
    float32 result (`precision` is ignored: the products accumulate in float32). Anything else
    (other dtypes or ranks, a group_offset) runs jax.lax.ragged_dot unchanged, logged at DEBUG
    on the "jax_hopper" logger and counted in FALLBACKS."""
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    out = jnp.dtype(preferred_element_type) if preferred_element_type is not None else lhs.dtype
    why = ("group_offset given" if group_offset is not None else
           f"input dtypes {lhs.dtype}, {rhs.dtype} (needs both bfloat16 or float16)"
           if lhs.dtype != rhs.dtype or lhs.dtype not in api.SUPPORTED_INPUTS else
           f"preferred_element_type {out}" if out not in api.SUPPORTED_OUTPUTS else
           f"ranks {lhs.ndim}, {rhs.ndim} (needs lhs (M, K), rhs (G, K, N))"
           if (lhs.ndim, rhs.ndim) != (2, 3) else None)
    if why is not None:
        FALLBACKS[why] += 1
        _LOG.debug("jax_hopper.ragged_dot -> lax.ragged_dot: %s", why)
        return jax.lax.ragged_dot(lhs, rhs, group_sizes, precision=precision,
                                  preferred_element_type=preferred_element_type,
                                  group_offset=group_offset)
    return hopper_ragged_dot(lhs, rhs, group_sizes, preferred_element_type=out)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _ragged(lhs3, rhs, gs, bias, res, params):
    """The (sharded) launch of the fused path, with a JVP over the plain product."""
    return partitioned(params, lhs3, rhs, gs, bias, res)


def _ragged_jvp(params, primals, tangents):
    """d out = act'(z) * (alpha (lhs @ d rhs[g] + d lhs @ rhs[g]) + d bias[g]) + beta d res,
    the products the plain product's primitive (its transposes: d lhs's launch and the grouped
    contraction, one over every vmapped entry's rows for shared weights), d bias[g] taken per
    row by group_rows.per_row (its transpose the segment sum)."""
    lhs3, rhs, gs, bias, res = primals
    dlhs, drhs, _, dbias, dres = tangents
    p = dict(params)
    no_bias = jnp.zeros((0,), _F32)  # the per-expert bias is added in z's launch
    if p["activation"]:
        z = _ragged(lhs3, rhs, gs, bias, jnp.zeros((0, 0, 0), _F32),
                    freeze({**p, "activation": 0, "beta": 0.0}))
        out = activated(z, no_bias, res, p)
    else:
        z, out = None, _ragged(lhs3, rhs, gs, bias, res, params)
    plain = freeze({**p, "out_dtype": _F32, "activation": 0, "alpha": 1.0, "config": None})
    dz = bilinear_tangent(lambda x, y: product(x, y, gs, plain), lhs3, rhs, dlhs, drhs)
    if dz is not None and p["alpha"] != 1.0:
        dz = p["alpha"] * dz
    if not is_zero(dbias):
        db = per_row(dbias, gs, out[0])[None]
        dz = db if dz is None else dz + db
    return out, epilogue_tangent(out, dz, p, dres, z, no_bias)


_ragged.defjvp(_ragged_jvp, symbolic_zeros=True)
