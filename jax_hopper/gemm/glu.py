"""hopper_glu: a gated linear unit, act(x @ W_gate) * (x @ W_up), as one GEMM launch.

The weight is one (K, 2, F) array, w[:, 0] the gate projection and w[:, 1] the up projection
(in memory, the (K, 2F) concatenation [gate | up]). Each kernel tile multiplies x by matching
column slices of both halves and its epilogue writes only act(gate) * up (cuda/sm90_gemm_kernel.cuh,
load_operand; cuda/sm90_gemm_epilogue.cuh, apply_gated_epilogue_ops): the (M, 2F) product never
reaches memory, nor is it read back by a separate elementwise pass.

Layers, as for hopper_matmul (jax_hopper/gemm/primitive.py): hopper_glu (checks; x's leading
dimensions become one batch) -> _glu (jax.custom_vjp) -> _vmappable (custom_vmap) -> _partitioned
(custom_partitioning) -> _launch -> hopper_gemm_p with gated=True.

NOTES:
- Autodiff: the backward pass needs gate and up. Recomputing them costs the whole forward GEMM
  again, so under differentiation the forward runs unfused: hopper_matmul writes the product in
  x's dtype (as the same layer written in jnp does), which the backward keeps, and jnp applies the
  unit. The fused kernel serves evaluation without a gradient (inference, the forward pass).
- Sharding: w's F axis carries one factor for both halves, so a split of F gives every device
  matching gate and up columns; a split of K sums float32 partial products (psum) and applies
  the unit after the sum, as hopper_matmul does with an activation.
- F not a multiple of 8 (per device) cannot be addressed as two halves by TMA: F is padded
  with zero columns (a copy of w) and the padding sliced off the result.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import custom_partitioning

from jax_hopper.gemm import api, autodiff
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.epilogue import activation_code, apply_gated
from jax_hopper.gemm.heuristics import choose_config
from jax_hopper.gemm.primitive import apply_epilogue, freeze, launch, reference
from jax_hopper.gemm.sharding import assign_factors, spec_of
from jax_hopper.kernels import catalog

_F32 = jnp.dtype(jnp.float32)


def hopper_glu(x, w, *, activation="silu", bias=None, residual=None, alpha=1.0, beta=1.0,
               out_dtype=None, config=None, strict=False):
    """out = act(alpha * x @ w[:, 0] + bias[0]) * (alpha * x @ w[:, 1] + bias[1]) + beta * residual

    x: (..., K); w: (K, 2, F), gate then up, the same dtype as x (bfloat16 or float16).
    activation: "silu" (SwiGLU), "gelu" (GeGLU, exact erf), "gelu_tanh", "relu" (ReGLU) or None
    (bilinear). bias: (2, F), added in float32; residual: broadcastable to (..., F), cast to
    out_dtype (default x's dtype: bfloat16, float16 or float32). Accumulation and the unit are in
    float32 with one rounding. config: a GemmConfig for the (rows, 2F, K) product.
    strict: raise instead of falling back to XLA's dot when TMA cannot address x (K not a
    multiple of 8 for 16-bit inputs), as in hopper_matmul.
    """
    x = jnp.asarray(x)
    w = jnp.asarray(w)
    out_dtype = api.parse_dtype("out_dtype", out_dtype)
    api.check_dtypes(x, w, out_dtype, names=("x", "w"), fn="hopper_glu")
    out_dtype = out_dtype if out_dtype is not None else x.dtype
    code = activation_code(activation)
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
    x3 = x.reshape(1, 1, k) if x.ndim == 1 else x.reshape(math.prod(x.shape[:-2]), *x.shape[-2:])
    batch, rows = x3.shape[0], x3.shape[1]
    if bias is None:
        bias2 = jnp.zeros((0,), _F32)
    else:
        bias2 = jnp.asarray(bias)
        if bias2.shape != (2, f):
            raise ValueError(f"bias.shape={bias2.shape} must be (2, F) = (2, {f}): one row for "
                             "the gate, one for the up projection")
        bias2 = bias2.astype(_F32)
    if residual is None:
        res3 = jnp.zeros((0, 0, 0), out_dtype)
    else:
        residual = jnp.asarray(residual)
        try:
            ok = jnp.broadcast_shapes(residual.shape, (*lead, f)) == (*lead, f)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"residual.shape={residual.shape} must broadcast to the output "
                             f"shape {(*lead, f)}")
        res3 = jnp.broadcast_to(residual.astype(out_dtype), (*lead, f)).reshape(batch, rows, f)

    if config is None:
        config = choose_config(rows, 2 * f, k, batch, tiles=catalog.FAMILIES["glu"].tiles)
    elif not isinstance(config, GemmConfig):
        raise ValueError(f"config must be a GemmConfig, got {type(config).__name__}")
    config.validate(x.dtype.name, False, True, family="glu")
    if strict and (k * x.dtype.itemsize) % 16:
        raise ValueError(f"hopper_glu(strict=True): x's rows are {k * x.dtype.itemsize} bytes "
                         f"apart; TMA needs a multiple of 16 (K={k} must be a multiple of "
                         f"{16 // x.dtype.itemsize})")

    params = freeze(dict(a_mn_major=False, b_mn_major=True, out_dtype=out_dtype, activation=code,
                         alpha=alpha, beta=beta, config=config, gated=True))
    if batch == 0 or rows == 0 or f == 0 or k == 0:
        out = reference(x3, w, bias2, res3, **dict(params))  # nothing to launch
    else:
        out = _glu(x3, w, bias2, res3, params)
    return out.reshape(*lead, f)


def _launch(x3, w, bias, res, params):
    """One device's fused unit on its shards: x3 (batch, M, K), w (K, 2, F), bias (2, F) or (0,).
    TMA addresses the two halves of w only with F a multiple of 8: otherwise F is padded with
    zero columns (one copy of w) and the padding sliced off."""
    f = w.shape[2]
    f_pad = -(-f // 8) * 8
    if f_pad == f:
        return launch(x3, w, bias, res, **dict(params))
    pad = f_pad - f
    w = jnp.pad(w, ((0, 0), (0, 0), (0, pad)))
    bias = jnp.pad(bias, ((0, 0), (0, pad))) if bias.size else bias
    res = jnp.pad(res, ((0, 0), (0, 0), (0, pad))) if res.size else res
    return launch(x3, w, bias, res, **dict(params))[..., :f]


def _unfused(x3, w, bias, res, params):
    """The same unit from hopper_matmul's (differentiable) product in x's dtype and jnp."""
    p = dict(params)
    k, _, f = w.shape
    product = freeze({**p, "gated": False, "activation": 0, "beta": 1.0,
                      "out_dtype": x3.dtype,
                      "config": choose_config(x3.shape[1], 2 * f, k, x3.shape[0])})
    z = autodiff.gemm(x3, w.reshape(1, k, 2 * f), bias.reshape(-1),
                      jnp.zeros((0, 0, 0), x3.dtype), product, 0)
    y = apply_gated(z.astype(_F32), p["activation"])
    if res.size:
        y = y + p["beta"] * res.astype(_F32)
    return y.astype(p["out_dtype"])


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _glu(x3, w, bias, res, params):
    return _vmappable(params)(x3, w, bias, res)


def _fwd(x3, w, bias, res, params):
    return jax.vjp(lambda *args: _unfused(*args, params), x3, w, bias, res)


def _bwd(params, vjp_fn, dy):
    del params
    return vjp_fn(dy)


_glu.defvjp(_fwd, _bwd)


@functools.lru_cache(maxsize=None)
def _vmappable(params):
    fn = custom_vmap(lambda x3, w, bias, res: _partitioned(params, x3, w, bias, res))
    fn.def_vmap(functools.partial(_vmap_rule, params))
    return fn


def _vmap_rule(params, v, in_batched, x3, w, bias, res):
    """A vmapped x (and residual) joins the batch: one launch over v x batch entries. A vmapped
    weight or bias, or a residual vmapped over an unmapped x, is computed unfused per entry."""
    mx, mw, mbias, mres = in_batched
    if mw or mbias or (mres and not mx):
        axes = [0 if m else None for m in in_batched]
        return jax.vmap(lambda *args: _unfused(*args, params), in_axes=axes)(x3, w, bias, res), \
            True
    batch, rows, f = x3.shape[1], x3.shape[2], w.shape[2]
    if res.size:
        res = (res if mres else jnp.broadcast_to(res, (v, *res.shape))).reshape(-1, rows, f)
    out = _vmappable(params)(x3.reshape(-1, rows, x3.shape[3]), w, bias, res)
    return out.reshape(v, batch, rows, f), True


def _partitioned(params, x3, w, bias, res):
    shapes = tuple(tuple(a.shape) for a in (x3, w, bias, res))
    return _sharded(params, shapes, x3, w, bias, res)


@functools.partial(custom_partitioning, static_argnums=(0, 1))
def _sharded(params, shapes, x3, w, bias, res):
    del shapes
    return _launch(x3, w, bias, res, params)


def _rule(params, shapes, mesh, value_types, result_types):
    """x: b m k, w: k p n (p, gate or up, never split), bias: p n, residual: b m n -> b m n."""
    del params, mesh, value_types, result_types
    bias_shape, res_shape = shapes[2], shapes[3]
    bias = "p n" if len(bias_shape) == 2 else "bz"
    res = "b m n" if res_shape[0] else "rz mz nz"
    return f"b m k, k p n, {bias}, {res} -> b m n", {"reduction_factors": ("k",)}


def _partition(params, shapes, mesh, arg_shapes, result_shape):
    p = dict(params)
    x, w, bias, res = arg_shapes
    sx, sw, so = spec_of(x), spec_of(w), spec_of(result_shape)
    candidates = {"b": [sx[0], so[0]], "m": [sx[1], so[1]], "n": [sw[2], so[2]],
                  "k": [sx[2], sw[0]]}
    axes, spec = assign_factors(mesh, candidates, x.shape[2])
    bias_sh = spec(None, "n") if len(bias.shape) == 2 else spec(None)
    res_sh = spec("b", "m", "n") if res.shape[0] else spec(None, None, None)
    k_axes = axes["k"]

    def lower_fn(x3, w, bias, res):
        if not k_axes:
            return _launch(x3, w, bias, res, params)
        k, _, f = w.shape
        partial = launch(x3, w.reshape(1, k, 2 * f), jnp.zeros((0,), _F32),
                         jnp.zeros((0, 0, 0), _F32),
                         **{**p, "out_dtype": _F32, "activation": 0, "gated": False})
        z = jax.lax.psum(partial, k_axes)
        return apply_epilogue(z, bias, res, activation=p["activation"], beta=p["beta"],
                              out_dtype=p["out_dtype"], gated=True)

    return mesh, lower_fn, spec("b", "m", "n"), (spec("b", "m", "k"), spec("k", None, "n"),
                                                 bias_sh, res_sh)


_sharded.def_partition(partition=_partition, sharding_rule=_rule)
