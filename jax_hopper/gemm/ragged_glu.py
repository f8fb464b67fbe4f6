"""hopper_ragged_glu: the grouped gated linear unit of Mixture-of-Experts up-projections, gate
and up of every expert in one launch.

w (G, K, 2, F) holds each expert's gate and up projections, hopper_glu's (K, 2, F) weight per
expert. Rows of group g get act(x @ w[g, :, 0]) * (x @ w[g, :, 1]); the (M, 2F) product never
reaches memory (the grouped_glu kernel family: the grouped scheduler, GatedWeightLoad with the
expert as batch entry, GatedOps storing only the group's rows). Group sizes as
hopper_ragged_dot takes them (ragged_tiles.py); rows past every group are the unit of a zero
product (0, plus beta * residual).

Layers: hopper_ragged_glu checks its arguments -> _glu (custom JVP) ->
ragged_sharding.partitioned (sharded jit: F split locally, gate and up columns together;
vmap one launch over every entry) -> ragged_primitive.launch (family "grouped_glu") ->
hopper_ragged_p.

NOTES:
- Autodiff: the backward needs gate and up, and recomputing them costs the whole forward
  product again, so under differentiation the forward runs `_unfused`: the grouped product of
  gate and up in x's dtype, (M, 2, F) (kept for the backward; gated_product.
  ragged_gated_product, whose d x is the grouped kernel and d w the grouped contraction, each
  merging (2, F) on a device's shards, so an F split is never gathered), and jnp applies the
  bias and the unit. The fused kernel serves the forward pass without a gradient (inference).
  The rule is a custom JVP through `_unfused` (gated_product.unit_jvp, as hopper_glu's; jax.jvp
  works too), not a custom VJP: under jax.grad of a sum over vmapped calls sharing the experts
  the transposes then see the entries' one product, and the weight's gradient is one
  contraction over every entry's rows (gated_product's dw_summed), not each entry's
  (E, G, K, 2, F) summed.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_hopper.gemm import api, ragged_tiles
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.epilogue import apply_activation
from jax_hopper.gemm.gated_product import ragged_gated_product, unit_jvp
from jax_hopper.gemm.primitive import freeze
from jax_hopper.gemm.ragged import check_group_sizes, residual3
from jax_hopper.gemm.group_rows import per_row
from jax_hopper.gemm.ragged_primitive import epilogue
from jax_hopper.gemm.ragged_sharding import partitioned

_F32 = jnp.dtype(jnp.float32)
_FAMILY = "grouped_glu"


def hopper_ragged_glu(x, w, group_sizes, *, activation="silu", bias=None, residual=None,
                      alpha=1.0, beta=1.0, out_dtype=None, preferred_element_type=None,
                      config=None):
    """out[rows of group g] = act(alpha x @ w[g,:,0] + bias[g,0]) * (alpha x @ w[g,:,1] +
    bias[g,1]) + beta * residual

    x: (M, K); w: (G, K, 2, F), each expert's gate then up projection, the same dtype as x
    (bfloat16 or float16); group_sizes: (G,) integer, a device array. activation: "silu"
    (SwiGLU), "gelu", "gelu_tanh", "relu" or None (bilinear). bias: (G, 2, F), added in float32;
    residual: broadcastable to (M, F). out_dtype (alias preferred_element_type): bfloat16,
    float16 or float32, default x's dtype. config: a GemmConfig of the grouped_glu family (for
    the (M, 2F) product); default the config tuned for this GPU and the problem each launch
    runs, else heuristics.choose_grouped_glu_config's.
    """
    x, w, group_sizes = jnp.asarray(x), jnp.asarray(w), jnp.asarray(group_sizes)
    out_dtype, act, alpha, beta = api.epilogue_args(
        x, w, out_dtype, preferred_element_type, activation, alpha, beta, names=("x", "w"),
        fn="hopper_ragged_glu")
    if x.ndim != 2:
        raise ValueError(f"x.shape={x.shape} must be (M, K)")
    if w.ndim != 4 or w.shape[2] != 2 or w.shape[1] != x.shape[1]:
        raise ValueError(f"w.shape={w.shape} must be (G, K, 2, F) with K = x's {x.shape[1]}: "
                         "each expert's gate and up projections")
    (m, k), (groups, _, _, f) = x.shape, w.shape
    check_group_sizes(group_sizes, groups, "expert")
    bias3 = api.prepare_bias(bias, (groups, 2, f), "(G, 2, F)", ": gate and up rows per expert")
    res3 = residual3(residual, (m, f), out_dtype)
    config = checked_config(config, x.dtype.name, False, True, family=_FAMILY)
    params = freeze(dict(b_mn_major=True, out_dtype=out_dtype, activation=act, alpha=alpha,
                         beta=beta, config=config, family=_FAMILY))
    gs = ragged_tiles.int32_sizes(group_sizes, m)
    if m == 0 or f == 0 or groups == 0 or k == 0:  # a zero product: nothing to launch
        out = epilogue(jnp.zeros((m, 2 * f), _F32), gs, bias3, res3, activation=act, beta=beta,
                       out_dtype=out_dtype, family=_FAMILY)
    else:
        out = _glu(x[None], w, gs, bias3, res3, params)
    return out[0]


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _glu(lhs3, w, gs, bias, res, params):
    return partitioned(params, lhs3, w, gs, bias, res)


def _unfused(lhs3, w, gs, bias, res, params):
    """The same unit from the (differentiable) grouped product of gate and up in x's dtype
    (gated_product.ragged_gated_product: w's F split stays split) and jnp."""
    p = dict(params)
    z = ragged_gated_product(lhs3[0], w, gs, p["alpha"]).astype(_F32)  # (M, 2, F)
    if bias.size:
        z = z + per_row(bias, gs, z)
    y = apply_activation(z[:, 0], p["activation"]) * z[:, 1]
    if res.size:
        y = y + p["beta"] * res[0].astype(_F32)
    return y.astype(p["out_dtype"])[None]


_glu.defjvp(functools.partial(unit_jvp, _unfused), symbolic_zeros=True)
