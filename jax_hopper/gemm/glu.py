"""hopper_glu: a gated linear unit, act(x @ W_gate) * (x @ W_up), as one GEMM launch.

The weight is one (K, 2, F) array, w[:, 0] the gate projection and w[:, 1] the up projection
(in memory, the (K, 2F) concatenation [gate | up]). Each kernel tile multiplies x by matching
column slices of both halves and its epilogue writes only act(gate) * up (the glu kernel family:
GatedWeightLoad in cuda/gemm/mainloop/operand_load.cuh, GatedOps in cuda/gemm/epilogue/gated.cuh):
the (M, 2F) product never reaches memory, nor is it read back by a separate elementwise pass.

hopper_glu only checks its arguments (x's leading dimensions become one batch) and enters the
layers hopper_matmul goes through (jax_hopper/gemm/primitive.py) with family="glu", but for
its own rule under jax.grad: _glu (custom JVP) -> batching.gemm (jax.vmap) ->
sharding.partitioned (sharded jit) -> launch -> hopper_gemm_p. Where the unit's math differs
the layers branch on `family`; what they need from here is `_unfused`, the same unit through
the plain GEMM (gated_product) and jnp.

NOTES:
- Autodiff: the backward pass needs gate and up. Recomputing them costs the whole forward GEMM
  again, so under differentiation the forward runs `_unfused`: the plain GEMM writes the product
  in x's dtype (as the same layer written in jnp does) as (B, M, 2, F) (gated_product.py: under
  a split of F it merges (2, F) into the GEMM's 2F columns only on each device's shards, where a
  reshape of the global w would gather it), which the backward keeps, and jnp applies the unit.
  The fused kernel serves evaluation without a gradient (inference, the forward pass). A
  custom JVP (gated_product.unit_jvp; jax.jvp works too), not a custom VJP:
  under jax.grad of a sum over vmapped calls sharing w (a per-example model vmapped over its
  batch) the transposes see the entries' one product, and w's gradient is one GEMM over every
  entry's rows (gated_product's dw_summed), not each entry's (K, 2, F) summed.
- vmap: a vmapped x joins the kernel's batch; a vmapped weight or bias runs `_unfused` per entry.
- Sharding: w's F axis carries one factor for both halves, so a split of F gives every device
  matching gate and up columns; a split of K sums partial products (psum, in
  sharding.partial_dtype) and applies the unit after the sum, as hopper_matmul does with an
  activation.
- F not a multiple of 8 (per device) cannot be addressed as two halves by TMA: launch pads F
  with zero columns (a copy of w) and slices the padding off the result.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from jax_hopper.gemm import api, batching
from jax_hopper.gemm.config import checked_config
from jax_hopper.gemm.epilogue import activation_code, apply_activation
from jax_hopper.gemm.gated_product import gated_product, unit_jvp
from jax_hopper.gemm.pitch import tma_unaddressable
from jax_hopper.gemm.primitive import empty_call, freeze
from jax_hopper.gemm.typed_reshape import reshape

_F32 = jnp.dtype(jnp.float32)


def hopper_glu(x, w, *, activation="silu", bias=None, residual=None, alpha=1.0, beta=1.0,
               out_dtype=None, config=None, strict=False):
    """out = act(alpha * x @ w[:, 0] + bias[0]) * (alpha * x @ w[:, 1] + bias[1]) + beta * residual

    x: (..., K); w: (K, 2, F), gate then up, the same dtype as x (bfloat16 or float16).
    activation: "silu" (SwiGLU), "gelu" (GeGLU, exact erf), "gelu_tanh", "relu" (ReGLU) or None
    (bilinear). bias: (2, F), added in float32; residual: broadcastable to (..., F), cast to
    out_dtype (default x's dtype: bfloat16, float16 or float32). Accumulation and the unit are in
    float32 with one rounding. config: a GemmConfig for the (rows, 2F, K) product. Without one,
    it is chosen for each launch's problem (a device's shard under a sharded jit), and at most
    heuristics.SWAP_MAX_M rows in all (decode) take hopper_matmul's swap-AB kernels for the
    product (float32) and the unit after it in XLA (primitive.swapped_gated_unit): the fused
    kernel has no swapped form.
    strict: raise instead of copying x and w into a padded pitch when TMA cannot address x
    (K not a multiple of 8 for 16-bit inputs), as in hopper_matmul.
    """
    x = jnp.asarray(x)
    w = jnp.asarray(w)
    out_dtype = api.parse_dtype("out_dtype", out_dtype)
    api.check_dtypes(x, w, out_dtype, names=("x", "w"), fn="hopper_glu")
    out_dtype = out_dtype if out_dtype is not None else x.dtype
    code = activation_code(activation)
    api.check_bools("hopper_glu", strict=strict)
    alpha, beta = api.static_scalar("alpha", alpha), api.static_scalar("beta", beta)
    if x.ndim < 1:
        raise ValueError(f"x must have at least 1 dimension; got x.shape={x.shape}")
    if w.ndim != 3 or w.shape[1] != 2:
        raise ValueError(f"w.shape={w.shape} must be (K, 2, F): the gate and up projections "
                         "stacked on axis 1")
    k, _, f = w.shape
    if x.shape[-1] != k:
        raise ValueError(f"x.shape={x.shape} and w.shape={w.shape}: x's last dimension must be "
                         f"w's first (K = {k})")
    lead = x.shape[:-1]
    x3 = reshape(x, (1, 1, k) if x.ndim == 1 else (math.prod(x.shape[:-2]), *x.shape[-2:]))
    batch, rows = x3.shape[0], x3.shape[1]
    bias2 = api.prepare_bias(bias, (2, f), "(2, F)",
                             ": one row for the gate, one for the up projection")
    if residual is None:
        res3 = jnp.zeros((0, 0, 0), out_dtype)
    else:
        res3 = reshape(jnp.broadcast_to(api.checked_residual(residual, (*lead, f), out_dtype),
                                        (*lead, f)), (batch, rows, f))

    config = checked_config(config, x.dtype.name, False, True, family="glu")
    if strict and (reason := tma_unaddressable(x, names=("x",))) is not None:
        raise ValueError(f"hopper_glu(strict=True): {reason}; without strict x and w are "
                         "copied into a padded pitch")

    params = freeze(dict(a_mn_major=False, b_mn_major=True, out_dtype=out_dtype, activation=code,
                         alpha=alpha, beta=beta, config=config, family="glu"))
    if batch == 0 or rows == 0 or f == 0 or k == 0:
        out = empty_call(batch, rows, 2 * f, bias2, res3, out_dtype=out_dtype, activation=code,
                         alpha=alpha, beta=beta, family="glu")  # nothing to launch
    else:
        out = _glu(x3, w, bias2, res3, params)
    return reshape(out, (*lead, f))


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _glu(x3, w, bias, res, params):
    return batching.gemm(x3, w, bias, res, params, _unfused)


def _unfused(x3, w, bias, res, params):
    """The same unit from the (differentiable) product of gate and up in x's dtype
    (gated_product: w's F split stays split) and jnp."""
    p = dict(params)
    z = gated_product(x3, w, p["alpha"]).astype(_F32)  # (B, M, 2, F)
    if bias.size:
        z = z + bias
    y = apply_activation(z[:, :, 0], p["activation"]) * z[:, :, 1]
    if res.size:
        y = y + p["beta"] * res.astype(_F32)
    return y.astype(p["out_dtype"])


_glu.defjvp(functools.partial(unit_jvp, _unfused), symbolic_zeros=True)
