"""hopper_ragged_dot: the grouped GEMM of Mixture-of-Experts layers, jax.lax.ragged_dot's
semantics with a fused epilogue, and `ragged_dot`, a drop-in for jax.lax.ragged_dot.

The rows of lhs (M, K) are sorted by group: the first group_sizes[0] rows belong to group 0,
and so on; rows of group g multiply rhs[g]. Group sizes stay on the device (a traced array):
the launch is the same whatever they hold, so calls run in CUDA graphs and lax.scan. Negative
sizes count as 0, groups are cut at M, and rows past every group come out as the epilogue of a
zero product (0 without bias/residual, as jax.lax.ragged_dot gives): ragged_tiles.py.

Layers: hopper_ragged_dot checks its arguments -> _ragged (custom VJP), or with nothing fused
ragged_product.product (a primitive with JVP, transpose and vmap rules) ->
ragged_sharding.partitioned (sharded jit: rhs's N split runs locally) ->
ragged_primitive.launch -> hopper_ragged_p.

NOTES:
- Autodiff: d lhs is the same grouped kernel with rhs's layout flag flipped (dP @ rhs[g]^T);
  d rhs[g] = lhs_g^T dP_g, a GEMM whose groups split the contraction, is the grouped
  contraction kernel (ragged_contract.py). d bias is a segment sum, d residual beta * d out. An
  activation's pre-activation is recomputed by one more launch (float32 out), as hopper_matmul does.
  With nothing fused the same two launches are the transposes of ragged_product's primitive,
  which also gives jax.jvp, and under jax.grad of a sum over vmapped calls sharing the
  weights one contraction over every entry's rows (the fused path's custom VJP, batched by
  jax, computes each entry's weight gradient and then sums them).
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
import numpy as np

from jax_hopper import manual_axes
from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.epilogue import apply_activation
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.ragged_contract import differentiable as contract
from jax_hopper.gemm.group_rows import group_sums
from jax_hopper.gemm.ragged_primitive import epilogue
from jax_hopper.gemm.ragged_product import product
from jax_hopper.gemm.ragged_sharding import partitioned

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
        out = _ragged(lhs3, rhs, gs, bias2, res3, params, res3.size > 0)
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


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _ragged(lhs3, rhs, gs, bias, res, params, has_residual):
    """The (sharded) launch with a VJP. has_residual: static, so the residual need not be
    saved."""
    del has_residual
    return partitioned(params, lhs3, rhs, gs, bias, res)


def _fwd(lhs3, rhs, gs, bias, res, params, has_residual):
    return (_ragged(lhs3, rhs, gs, bias, res, params, has_residual),
            (lhs3, rhs, gs, bias, manual_axes.types((lhs3, rhs, gs, bias, res))))


def _bwd(params, has_residual, saved, dout):
    *saved, primal_types = saved
    return manual_axes.like_primals(_grads(params, has_residual, saved, dout), primal_types)


def _grads(params, has_residual, saved, dout):
    """(d lhs3, d rhs, d gs, d bias, d res) of the saved (lhs3, rhs, gs, bias)."""
    lhs3, rhs, gs, bias = saved
    p = dict(params)
    m = lhs3.shape[1]
    dz = dout.astype(_F32)
    if p["activation"]:
        pre = _ragged(lhs3, rhs, gs, bias, jnp.zeros((0, 0, 0), _F32),
                      freeze({**p, "activation": 0, "beta": 0.0, "out_dtype": _F32}), False)
        dz = jax.vjp(lambda z: apply_activation(z, p["activation"]), pre)[1](dz)[0]
    # d out is d P itself when nothing lies between them: no (M, N) copy.
    plain = not p["activation"] and p["alpha"] == 1.0 and dout.dtype == lhs3.dtype
    dp = dout if plain else (p["alpha"] * dz).astype(lhs3.dtype)
    # d lhs = dP @ rhs[g]^T: rhs read through the other layout flag; N and K trade places
    # (under sharding, rhs's N split is this product's K split: partial sums, psum).
    dlhs_params = freeze(dict(b_mn_major=not p["b_mn_major"], out_dtype=lhs3.dtype,
                              activation=0, alpha=1.0, beta=0.0, family="grouped", config=None))
    dlhs = _ragged(dp, rhs, gs, jnp.zeros((0,), _F32), jnp.zeros((0, 0, 0), lhs3.dtype),
                   dlhs_params, False)
    # d rhs[g] = lhs_g^T dP_g, or dP_g^T lhs_g for rhs stored (G, N, K): the grouped
    # contraction kernel, the groups splitting the rows (dP's N split stays local).
    x, y = (lhs3[0], dp[0]) if p["b_mn_major"] else (dp[0], lhs3[0])
    drhs = contract(x, y, gs, freeze(dict(out_dtype=jnp.dtype(rhs.dtype), config=None)))
    dbias = bias
    if bias.size:
        dbias = group_sums(dz[0], ragged_tiles.row_groups(gs, m), bias)
    dres = ((p["beta"] * dout.astype(_F32)).astype(dout.dtype) if has_residual
            else jnp.zeros((0, 0, 0), dout.dtype))
    return dlhs, drhs, np.zeros(gs.shape, jax.dtypes.float0), dbias, dres


_ragged.defvjp(_fwd, _bwd)
