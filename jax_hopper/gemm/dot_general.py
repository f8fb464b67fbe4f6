"""dot_general: `jax.lax.dot_general` on the GEMM kernel wherever free reshapes reach it.

Drop-in for a `dot_general=` argument (flax linen `Dense`/`DenseGeneral`, nnx `Linear`/
`LinearGeneral`, `jnp.einsum(..., _dot_general=...)` and so nnx `Einsum` via its `einsum_op`):

    nnx.Linear(4096, 14336, dot_general=jax_hopper.dot_general, rngs=rngs)

A contraction runs on `hopper_matmul` when, in each operand, the batch dimensions lead (in the
same order), the free dimensions are contiguous and the contracting dimensions are contiguous
and paired in the same order: then lhs is (batch, M, K) or (batch, K, M) and rhs (batch, K, N)
or (batch, N, K) by reshapes alone, and the transpose flags read the rest in place. Inputs must
be both bfloat16 or both float16, the result bfloat16, float16 or float32; fp32 accumulation
always (`precision` changes nothing for 16-bit inputs). fp8 inputs (a pair hopper_fp8_matmul
takes, catalog.FP8_PAIRS) with a 16- or 32-bit `preferred_element_type` run on
hopper_fp8_matmul with unit scales (the exact products, fp32 accumulation, as XLA's fp8 dot);
an operand stored MN-major costs a transpose_fp8 copy there, and gradients, where asked for,
are lax.dot_general's. Anything else (fp8 without a
preferred_element_type gives an fp8 result, which no kernel writes), or an `out_sharding`,
goes to `lax.dot_general` unchanged; each such call is logged at DEBUG level on the
"jax_hopper" logger with the reason and counted in FALLBACKS.
"""

from __future__ import annotations

import collections
import logging
import math

import jax
import jax.numpy as jnp
from jax import lax

from jax_hopper.gemm.api import SUPPORTED_INPUTS, SUPPORTED_OUTPUTS, hopper_matmul
from jax_hopper.gemm.fp8 import hopper_fp8_matmul
from jax_hopper.gemm.typed_reshape import reshape
from jax_hopper.kernels import catalog

_LOG = logging.getLogger("jax_hopper")
# Calls that went to lax.dot_general, by reason (a diagnostic; tests read it).
FALLBACKS: collections.Counter = collections.Counter()


def _span(dims: list[int], start: int) -> bool:
    """Whether `dims` (in order) are exactly start, start + 1, ..."""
    return dims == list(range(start, start + len(dims)))


def _operand_layout(ndim: int, batch: tuple, contract: list[int]):
    """(contract_first, free dims) when this operand is batch + free + contracting dims, each
    run contiguous (contract_first: contracting dims before the free ones); None otherwise."""
    nb = len(batch)
    if list(batch) != list(range(nb)):
        return None
    free = [d for d in range(nb, ndim) if d not in contract]
    if _span(contract, nb) and _span(free, nb + len(contract)):
        return True, free
    if _span(free, nb) and _span(contract, nb + len(free)):
        return False, free
    return None


def _plan(lhs, rhs, dimension_numbers, preferred_element_type):
    """How the call maps onto hopper_matmul, or the reason it does not."""
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (tuple(int(d) for d in x) for x in (lc, rc, lb, rb))
    fp8 = (lhs.dtype.name, rhs.dtype.name) in catalog.FP8_PAIRS
    if not fp8 and (lhs.dtype != rhs.dtype or lhs.dtype not in SUPPORTED_INPUTS):
        return None, (f"input dtypes {lhs.dtype}, {rhs.dtype} (needs both bfloat16 or float16, "
                      "or an fp8 pair)")
    out = jnp.dtype(preferred_element_type) if preferred_element_type is not None else lhs.dtype
    if out not in SUPPORTED_OUTPUTS:
        return None, f"preferred_element_type {out}"
    # Pair the contracting dims in lhs order; rhs must then run in the same order.
    pairs = sorted(zip(lc, rc))
    lc_sorted, rc_paired = [p[0] for p in pairs], [p[1] for p in pairs]
    if rc_paired != sorted(rc_paired):
        return None, "contracting dimensions paired in a different order"
    left = _operand_layout(lhs.ndim, lb, lc_sorted)
    right = _operand_layout(rhs.ndim, rb, rc_paired)
    if left is None or right is None:
        return None, "batch dimensions not leading, or free/contracting dimensions interleaved"
    return (left, right, out), None


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
    """`lax.dot_general` semantics; runs on hopper_matmul (hopper_fp8_matmul for fp8 inputs)
    where the layout allows (module docstring), else on lax.dot_general."""
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    # Dimension numbers lax.dot_general refuses (out of range, repeated, unequal sizes) get its
    # own error here, before the plan reads them.
    jax.eval_shape(lambda lhs, rhs: lax.dot_general(
        lhs, rhs, dimension_numbers, preferred_element_type=preferred_element_type),
        jax.ShapeDtypeStruct(lhs.shape, lhs.dtype), jax.ShapeDtypeStruct(rhs.shape, rhs.dtype))
    plan, why = _plan(lhs, rhs, dimension_numbers, preferred_element_type)
    if plan is None or out_sharding is not None:
        return fallback(why or "out_sharding given", "dot_general", lhs, rhs, dimension_numbers,
                        precision, preferred_element_type, out_sharding)
    (a_contract_first, lfree), (b_contract_first, rfree), out_dtype = plan
    nb = len(dimension_numbers[1][0])
    batch = lhs.shape[:nb]
    m = math.prod(lhs.shape[d] for d in lfree)
    n = math.prod(rhs.shape[d] for d in rfree)
    k = math.prod(lhs.shape[d] for d in dimension_numbers[0][0])
    flags = dict(transpose_a=a_contract_first, transpose_b=not b_contract_first)
    out_shape = (*batch, *(lhs.shape[d] for d in lfree), *(rhs.shape[d] for d in rfree))
    fp8 = lhs.dtype.itemsize == 1  # an fp8 pair (_plan)

    # A dense layer's lhs (..., K) keeps its leading dimensions: a batch of a against the
    # shared b, which hopper_matmul folds into M on each device's shards, so that a split of
    # one of them (a sequence) is not gathered, as merging them here would.
    lead = not batch and not a_contract_first and list(lfree) == list(range(len(lfree)))

    def on_kernel(lhs, rhs):
        # (batch, K, M) with transpose_a; (batch, N, K) with transpose_b.
        a = reshape(lhs, (*lhs.shape[:len(lfree)], k) if lead else
                    (*batch, *((k, m) if a_contract_first else (m, k))))
        b = reshape(rhs, (*batch, *((k, n) if b_contract_first else (n, k))))
        if fp8:  # the product of the values as they are
            one = jnp.float32(1)
            out = hopper_fp8_matmul(a, b, one, one, out_dtype=out_dtype, **flags)
        else:
            out = hopper_matmul(a, b, out_dtype=out_dtype, **flags)
        return reshape(out, out_shape)

    if not fp8:
        return on_kernel(lhs, rhs)
    return _with_lax_gradients(on_kernel, lambda lhs, rhs: lax.dot_general(
        lhs, rhs, dimension_numbers, precision=precision,
        preferred_element_type=preferred_element_type), lhs, rhs)


def _with_lax_gradients(on_kernel, on_lax, lhs, rhs):
    """on_kernel(lhs, rhs), differentiated as on_lax: hopper_fp8_matmul has no differentiation
    rule (fp8_matmul is the differentiable fp8 product), XLA's fp8 dot has one, and a drop-in
    keeps it."""
    f = jax.custom_vjp(on_kernel)
    f.defvjp(lambda lhs, rhs: (on_kernel(lhs, rhs), (lhs, rhs)),
             lambda res, g: jax.vjp(on_lax, *res)[1](g))
    return f(lhs, rhs)


def fallback(why, op, lhs, rhs, dimension_numbers, precision, preferred_element_type,
             out_sharding):
    """lax.dot_general for a call `op` does not take, counted in FALLBACKS and logged."""
    FALLBACKS[why] += 1
    _LOG.debug("jax_hopper.%s -> lax.dot_general: %s (lhs %s %s, rhs %s %s, %s)", op, why,
               lhs.shape, lhs.dtype, rhs.shape, rhs.dtype, dimension_numbers)
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type,
                           out_sharding=out_sharding)
