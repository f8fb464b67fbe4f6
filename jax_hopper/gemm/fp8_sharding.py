"""hopper_fp8_matmul under jit with sharded operands: every device multiplies its own shards,
as the 16-bit GEMM does (sharding.py), its scales going with them.

`partitioned` wraps the launch in jax.experimental.custom_partitioning with a Shardy rule

    a: b m k,  b: b n k (both K-major),  bias: n,  residual: b m n,
    per tensor a_scale, b_scale: (1,) each, or (batch,) (one per entry: b);
    per block a_scale: b m kb,  b_scale: b nb kb                            ->  out: b m n

(k a reduction factor; kb and nb, the 128-wide scale blocks of K and N, are factors of their
own for propagation: the partition splits them on the mesh axes of k and n). After propagation
`_partition` fixes the axes:
- batch, M or N split: each device runs the kernel on its shards and their scales, with no
  communication; under block scaling an N split must give every device whole 128-row blocks
  of b (N a multiple of 128 x the devices), else N stays whole;
- K split: each device computes its partial alpha * (a_scale a) . (b_scale b) (in
  sharding.partial_dtype) over its K (under block scaling whole 128-wide blocks, else K stays
  whole), the partials are summed (psum, or a reduce-scatter for an output split over K's
  axes: sharding.sum_partials), and the epilogue runs after the sum in jnp, as sharding.py
  does.
vmap is answered above this layer (fp8_batching.py).
"""

from __future__ import annotations

import functools
import math
import warnings

import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning

from jax_hopper.gemm.primitive import apply_epilogue, broadcast_batch
from jax_hopper.gemm.sharding import (assign_factors, def_partition, epilogue_shardings,
                                      k_scatter_dim, keep_k_axes, partial_dtype, rule_operands,
                                      spec_of, sum_partials)
from jax_hopper.kernels import catalog


def partitioned(launch, params: tuple, a, b, bias, res, a_scale, b_scale):
    """launch(a, b, bias, res, a_scale, b_scale, **dict(params)) on local shards under a
    sharded jit (launch: fp8.launch, one device's call)."""
    shapes = tuple(tuple(x.shape) for x in (a, b, bias, res, a_scale, b_scale))
    return _partitioned(launch, params, shapes, a, b, bias, res, a_scale, b_scale)


@functools.partial(custom_partitioning, static_argnums=(0, 1, 2))
def _partitioned(launch, params, shapes, a, b, bias, res, a_scale, b_scale):
    del shapes  # only the sharding rule needs them
    return launch(a, b, bias, res, a_scale, b_scale, **dict(params))


def _rule(launch, params, shapes, mesh, value_types, result_types):
    del launch, mesh, value_types, result_types
    operands, lead = rule_operands(shapes[:4], False, False)  # both K-major
    (ba, *_), (bb, *_), *_, (na, *_), (nb, *_) = shapes
    scales = (f"{lead(ba, 'ba')} m kb, {lead(bb, 'bb')} nb kb"
              if dict(params)["scaling"] == "block" else f"{lead(na, 'sa')}, {lead(nb, 'sb')}")
    return f"{operands}, {scales} -> b m n", {"reduction_factors": ("k",)}


def _partition(launch, params, shapes, mesh, arg_shapes, result_shape):
    p = dict(params)
    a, b, bias, res, a_scale, b_scale = arg_shapes
    ba, bb = a.shape[0], b.shape[0]
    batch = broadcast_batch(ba, bb)
    sa, sb, so = spec_of(a), spec_of(b), spec_of(result_shape)
    unless_k = keep_k_axes(sa[2], sb[2])
    candidates = {
        "b": [sa[0] if ba == batch else None, sb[0] if bb == batch else None, unless_k(so[0])]
        if batch > 1 else [],
        "m": [sa[1], unless_k(so[1])],
        "n": [sb[1], unless_k(so[2])],
        "k": [sa[2], sb[2]],
    }
    axes, spec = assign_factors(mesh, candidates, a.shape[2])
    block = p["scaling"] == "block"

    def devices(factor):
        return math.prod(mesh.shape[x] for x in axes[factor])

    # Block scales come per 128 rows of b and per 128 of K: a split must keep blocks whole.
    for factor, extent in (("n", b.shape[1]), ("k", a.shape[2])):
        if block and axes[factor] and extent % (devices(factor) * catalog.FP8_SCALE_BLOCK):
            warnings.warn(f"hopper_fp8_matmul: {'N' if factor == 'n' else 'K'} ({extent}) split "
                          f"over {devices(factor)} devices is gathered: block scales split only "
                          f"in whole {catalog.FP8_SCALE_BLOCK}-wide blocks (under fp8_matmul's "
                          "weight gradient, K is the rows: fewer than 128 a device)",
                          stacklevel=2)
            axes[factor] = ()
    k_axes = axes["k"]
    scatter = k_scatter_dim(mesh, axes, so, result_shape.shape, ("m", "n"))
    a_lead, b_lead = "b" if ba == batch else None, "b" if bb == batch else None
    a_sh, b_sh = spec(a_lead, "m", "k"), spec(b_lead, "n", "k")
    scale_sh = ((spec(a_lead, "m", "k"), spec(b_lead, "n", "k")) if block  # per entry or one
                else tuple(spec("b" if s.shape[0] == batch else None) for s in (a_scale, b_scale)))
    if scatter:  # from here on: the output's dims, and the residual's and bias's that match them
        axes[{1: "m", 2: "n"}[scatter]] += k_axes
    bias_sh, res_sh = epilogue_shardings(spec, bias, res, batch)

    def lower_fn(a, b, bias, res, a_scale, b_scale):
        if not k_axes:
            return launch(a, b, bias, res, a_scale, b_scale, **p)
        f32 = jnp.dtype(jnp.float32)
        part = partial_dtype(p["out_dtype"])
        partial = launch(a, b, jnp.zeros((0,), f32), jnp.zeros((0, 0, 0), part), a_scale,
                         b_scale, **{**p, "out_dtype": part, "activation": 0})
        return apply_epilogue(sum_partials(partial, k_axes, scatter), bias, res,
                              activation=p["activation"], beta=p["beta"],
                              out_dtype=p["out_dtype"], family="matmul")

    return mesh, lower_fn, spec("b", "m", "n"), (a_sh, b_sh, bias_sh, res_sh, *scale_sh)


def_partition(_partitioned, _partition, _rule)
