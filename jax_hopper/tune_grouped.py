"""The grouped families' side of jax_hopper.tune: what a grouped product or contraction is timed
on and the call that runs it with a candidate config.

A problem (tune.Problem) of catalog.GROUPED_FAMILIES is M rows over G groups (its batch field)
against one (K, N) weight per group; one of CONTRACTION_FAMILIES is out (G, P, Q) contracted
over M rows, keyed G x P x Q x M (tuned.py). Group sizes live on the device and a cached entry
serves whatever sizes a call brings, so the tuner times uniform routing: the rows drawn
multinomially over the groups (seeded), the case heuristics.choose_grouped_config's NOTES
measured. fp8 operands carry unit scales of the recipe's shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_hopper import timing
from jax_hopper.gemm.ragged import hopper_ragged_dot
from jax_hopper.gemm.ragged_contract import hopper_ragged_contract
from jax_hopper.gemm.ragged_fp8 import hopper_ragged_fp8_dot
from jax_hopper.gemm.ragged_fp8_contract import hopper_ragged_fp8_contract
from jax_hopper.gemm.ragged_glu import hopper_ragged_glu
from jax_hopper.kernels import catalog

_BLOCK = catalog.FP8_SCALE_BLOCK
_BLOCK_SCALED = ("grouped_fp8_block", "grouped_contraction_fp8_block")


def is_grouped(family: str) -> bool:
    return family in catalog.GROUPED_FAMILIES + catalog.CONTRACTION_FAMILIES


def _blocks(n: int) -> int:
    return -(-n // _BLOCK)


def _shapes(p) -> tuple[int, tuple, tuple]:
    """(rows the groups split, a's shape, b's shape) as p's call takes them."""
    g = p.batch
    if p.family in catalog.CONTRACTION_FAMILIES:  # out (G, P, Q) over M = p.k rows
        if p.a_mn:  # x (M, P), y (M, Q)
            return p.k, (p.k, p.m), (p.k, p.n)
        return p.k, (p.m, p.k), (p.n, p.k)  # x^T (P, M), y^T (Q, M)
    if p.family == "grouped_glu":
        return p.m, (p.m, p.k), (g, p.k, 2, p.n // 2)
    return p.m, (p.m, p.k), (g, p.k, p.n) if p.b_mn else (g, p.n, p.k)


def _scales(p) -> tuple:
    """Unit scales (a's, b's) of the family's recipe, or (None, None) for 16-bit operands."""
    if p.family not in _BLOCK_SCALED:
        if jnp.dtype(p.dtype).itemsize == 2:
            return None, None
        return jnp.float32(1.0), jnp.ones((p.batch,) if p.family == "grouped_fp8" else (),
                                          jnp.float32)
    if p.family == "grouped_fp8_block":  # lhs per row and 128 of K, each expert per block
        return (jnp.ones((p.m, _blocks(p.k)), jnp.float32),
                jnp.ones((p.batch, _blocks(p.n), _blocks(p.k)), jnp.float32))
    # x^T per row and 128 of the rows M, y^T per 128 x 128 block
    return (jnp.ones((p.m, _blocks(p.k)), jnp.float32),
            jnp.ones((_blocks(p.n), _blocks(p.k)), jnp.float32))


def operands(p, key):
    """timing.rotation of (a, b) pairs for p: a = (a operand, group sizes, a's scale), b = (b
    operand, b's scale), random-normal operands in p's dtypes rotated past L2."""
    rows, a_shape, b_shape = _shapes(p)
    sizes = jnp.asarray(np.random.default_rng(0).multinomial(rows, np.full(p.batch, 1 / p.batch)),
                        jnp.int32)
    a_scale, b_scale = _scales(p)
    b_dtype = p.b_dtype or p.dtype
    set_bytes = (np.prod(a_shape) * jnp.dtype(p.dtype).itemsize
                 + np.prod(b_shape) * jnp.dtype(b_dtype).itemsize)
    out = jax.eval_shape(call(p, None), *_abstract_operands(p))  # a contraction's: (G, P, Q)
    n_calls, n_sets = timing.call_plan(p.m, p.n, p.k, set_bytes=float(set_bytes),
                                       out_bytes=float(out.size * out.dtype.itemsize))
    sets = []
    for kk in jax.random.split(key, n_sets):
        ka, kb = jax.random.split(kk)
        a = jax.random.normal(ka, a_shape, jnp.bfloat16).astype(p.dtype)
        b = jax.random.normal(kb, b_shape, jnp.bfloat16).astype(b_dtype)
        sets.append(((a, sizes, a_scale), (b, b_scale)))
    jax.block_until_ready(sets)
    return timing.rotation(sets, n_calls)


def _abstract_operands(p) -> tuple:
    """(a, b) as operands() makes them, shapes and dtypes only."""
    _, a_shape, b_shape = _shapes(p)
    a_scale, b_scale = _scales(p)
    a = (jax.ShapeDtypeStruct(a_shape, p.dtype), jax.ShapeDtypeStruct((p.batch,), jnp.int32),
         a_scale)
    return a, (jax.ShapeDtypeStruct(b_shape, p.b_dtype or p.dtype), b_scale)


def kernel_problem(p):
    """p as its kernel runs it, what its launch looks a config up for: K and N (contractions:
    Q and M) padded where the call pads a pitch TMA cannot address. Traced, not run."""
    from jax_hopper.tune import traced_problems  # noqa: PLC0415 (tune imports this module)
    (kernel,) = traced_problems(call(p, None), *_abstract_operands(p))
    return kernel


def call(p, config):
    """(a, b) -> the product of p's family under `config`, the public call that runs it."""
    if p.family == "grouped":
        return lambda a, b: hopper_ragged_dot(a[0], b[0], a[1], transpose_rhs=not p.b_mn,
                                              config=config)
    if p.family == "grouped_glu":
        return lambda a, b: hopper_ragged_glu(a[0], b[0], a[1], config=config)
    if p.family in ("grouped_fp8", "grouped_fp8_block"):
        return lambda a, b: hopper_ragged_fp8_dot(a[0], b[0], a[1], a[2], b[1], config=config)
    if p.family == "grouped_contraction":
        return lambda a, b: hopper_ragged_contract(a[0], b[0], a[1], config=config)
    return lambda a, b: hopper_ragged_fp8_contract(a[0], b[0], a[1], a[2], b[1], config=config)
