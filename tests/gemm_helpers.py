"""Float64 references, error bounds and input generation for the GEMM tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import warnings
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

import jax_hopper
from jax_hopper.gemm import ragged_tiles, traced_primitive
from jax_hopper.kernels import catalog

# Relative Frobenius error bounds per out dtype. Inputs are exact in their dtype and the
# reference uses those exact values in float64, so the error is fp32 accumulation plus one
# rounding to the out dtype: ~2^-9/sqrt(3) for bf16, ~2^-11/sqrt(3) for fp16.
REL_FROB_BOUND = {"bfloat16": 6e-3, "float16": 1.5e-3, "float32": 1e-4}
# fp8 products: the tensor cores sum fp8 products with fewer bits than fp32 (DeepSeek-V3's report
# puts it near 14 on the H800), so a float32 output is as accurate as that sum: 5.4e-4 measured
# at K = 1024 (H100, 2026-11-24). The 16-bit outputs' own rounding dominates theirs.
REL_FROB_BOUND_FP8 = {"bfloat16": 6e-3, "float16": 2e-3, "float32": 2e-3}
# Block-scaled fp8 (the fp8_block family) sums each 128-wide k-block on the tensor cores and
# adds the scaled block sums in fp32, so the narrow sum spans one k-block, not all of K.
REL_FROB_BOUND_FP8_BLOCK = {"bfloat16": 6e-3, "float16": 1.5e-3, "float32": 2e-4}


def random_operand(rng, shape, dtype):
    """Random-normal values rounded to `dtype` (never zeros: they hide unwritten outputs)."""
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(dtype)


@contextlib.contextmanager
def launched_configs():
    """[(a's shape, b's shape, config)] of every GEMM launched (bound, at trace time) inside the
    block, dense, fp8 or grouped (fp8 too): the config that reaches the kernel, on one device's
    operands (a grouped contraction's a and b are its x and y, or x^T and y^T)."""
    from jax_hopper.gemm.fp8 import hopper_fp8_gemm_p
    from jax_hopper.gemm.primitive import hopper_gemm_p
    from jax_hopper.gemm.ragged_contract import hopper_ragged_contract_p
    from jax_hopper.gemm.ragged_fp8 import hopper_ragged_fp8_p
    from jax_hopper.gemm.ragged_fp8_contract import hopper_ragged_fp8_contract_p
    from jax_hopper.gemm.ragged_primitive import hopper_ragged_p
    seen = []

    def spy(prim):
        real = prim.bind

        def bind(*args, **params):
            seen.append((tuple(args[0].shape), tuple(args[1].shape), params["config"]))
            return real(*args, **params)
        return mock.patch.object(prim, "bind", bind)

    with spy(hopper_gemm_p), spy(hopper_fp8_gemm_p), spy(hopper_ragged_p), \
            spy(hopper_ragged_contract_p), spy(hopper_ragged_fp8_p), \
            spy(hopper_ragged_fp8_contract_p):
        yield seen


def use_tune_cache(monkeypatch, path) -> None:
    """Points the tune cache (jax_hopper/gemm/tuned.py) at `path` for one test, and clears
    JAX's caches: a GEMM traced by an earlier test keeps the config its trace chose (JAX reuses
    the trace, on an H100 with jax 0.11), whatever this test's cache holds."""
    monkeypatch.setenv("JAX_HOPPER_TUNE_CACHE", str(path))
    jax.clear_caches()


def to64(x):
    """float64 values of x (through float32, where x is no float64 array already)."""
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        return x
    return np.asarray(jnp.asarray(x).astype(jnp.float32), dtype=np.float64)


def act64(x, activation):
    from scipy.special import erf  # noqa: PLC0415 (only the GPU tests need scipy)
    if activation is None:
        return x
    if activation == "relu":
        return np.maximum(x, 0)
    if activation == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    if activation == "gelu":
        return 0.5 * x * (1 + erf(x / np.sqrt(2)))
    if activation == "silu":  # x * sigmoid(x), the sigmoid as (1 + tanh(x / 2)) / 2: no overflow
        return 0.5 * x * (1 + np.tanh(x / 2))
    raise ValueError(activation)


def gelu_grad64(x):
    """d gelu(x) / dx of the exact (erf) GELU: Phi(x) + x phi(x)."""
    from scipy.special import erf  # noqa: PLC0415 (as act64's)
    return 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def reference64(a, b, *, transpose_a=False, transpose_b=False, bias=None, activation=None,
                residual=None, alpha=1.0, beta=1.0):
    a64, b64 = to64(a), to64(b)
    if transpose_a:
        a64 = np.swapaxes(a64, -1, -2)
    if transpose_b:
        b64 = np.swapaxes(b64, -1, -2)
    x = alpha * np.matmul(a64, b64)
    if bias is not None:
        x = x + to64(bias)
    x = act64(x, activation)
    if residual is not None:
        x = x + beta * to64(residual)
    return x


def rel_frob(out, ref):
    out64 = to64(out)
    assert out64.shape == ref.shape, (out64.shape, ref.shape)
    assert np.all(np.isfinite(out64)), "non-finite values in the output (unwritten or NaN)"
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out64 - ref) / (denom if denom > 0 else 1.0))


def poisoned_call(fn, out_shape, out_dtype, *args):
    """Runs fn(*args) right after a NaN buffer of the output's size was freed, donating it.

    XLA may place the custom call's output in the donated buffer and its allocator tends to
    reuse a freed block of the same size: either way elements the kernel skips stay NaN, and
    rel_frob rejects NaN.
    """
    poison = jnp.full(out_shape, jnp.nan, out_dtype)
    call = jax.jit(lambda p, *a: fn(*a), donate_argnums=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        return call(poison, *args)


def fp8_operand(rng, shape, dtype):
    """Random-normal values scaled into the fp8 range and rounded to `dtype`."""
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * 4).astype(dtype)


def fp8_reference64(a, b, a_scale, b_scale, *, alpha=1.0, **epilogue):
    """hopper_fp8_matmul in float64: b is (..., N, K); the scales fold into alpha."""
    return reference64(a, b, transpose_b=True, alpha=alpha * a_scale * b_scale, **epilogue)


def block_scales(rng, shape, spread=4.0):
    """Positive float32 block scales spanning 2^-spread .. 2^spread (each block its own)."""
    return jnp.asarray(2.0 ** rng.uniform(-spread, spread, shape), jnp.float32)


def dequantize_blocks64(x, scale, *, rows_per_scale):
    """x (..., R, K) times its block scales (..., R / rows_per_scale, K / 128) (ceil), float64."""
    s = np.repeat(to64(scale), 128, axis=-1)[..., :x.shape[-1]]
    s = np.repeat(s, rows_per_scale, axis=-2)[..., :x.shape[-2], :]
    return to64(x) * s


def fp8_block_reference64(a, b, a_scale, b_scale, **epilogue):
    """hopper_fp8_matmul with block scales in float64: the dequantised a @ b^T, the epilogue."""
    a64 = dequantize_blocks64(a, a_scale, rows_per_scale=1)
    b64 = dequantize_blocks64(b, b_scale, rows_per_scale=128)
    return reference64(a64, b64, transpose_b=True, **epilogue)


def check_fp8(rng, m, n, k, *, block, pair=("float8_e4m3fn", "float8_e4m3fn"),
              out_dtype="bfloat16", batch=(), b_batch=(), config=None, activation=None,
              alpha=1.0, beta=1.0, with_bias=False, with_residual=False, spread=4.0,
              epilogue_scale=1.0):
    """hopper_fp8_matmul on fresh fp8 operands into a poisoned output against float64, per
    tensor (two random scalar scales) or per block (block_scales with `spread`); bias and
    residual random-normal times epilogue_scale. Asserts the mode's bound; returns the error."""
    from jax_hopper import hopper_fp8_matmul  # noqa: PLC0415
    a = fp8_operand(rng, (*batch, m, k), pair[0])
    b = fp8_operand(rng, (*b_batch, n, k), pair[1])
    if block:
        sa = block_scales(rng, (*batch, m, -(-k // 128)), spread)
        sb = block_scales(rng, (*b_batch, -(-n // 128), -(-k // 128)), spread)
    else:
        sa, sb = (jnp.asarray(rng.uniform(0.05, 0.5), jnp.float32) for _ in range(2))
    extra = {}
    if with_bias:
        extra["bias"] = jnp.asarray(rng.standard_normal(n) * epilogue_scale, jnp.float32)
    if with_residual:
        extra["residual"] = jnp.asarray(rng.standard_normal((*batch, m, n)) * epilogue_scale,
                                        out_dtype)
    scalars = dict(activation=activation, alpha=alpha, beta=beta)

    def fn(a, b, sa, sb, *arrays):
        return hopper_fp8_matmul(a, b, sa, sb, out_dtype=out_dtype, config=config,
                                 **dict(zip(extra, arrays)), **scalars)

    out_shape = (*jnp.broadcast_shapes(tuple(batch), tuple(b_batch)), m, n)
    out = poisoned_call(fn, out_shape, out_dtype, a, b, sa, sb, *extra.values())
    if block:
        ref = fp8_block_reference64(a, b, sa, sb, **extra, **scalars)
    else:
        ref = fp8_reference64(a, b, float(sa), float(sb), **extra, **scalars)
    bound = REL_FROB_BOUND_FP8_BLOCK if block else REL_FROB_BOUND_FP8
    err = rel_frob(out, ref)
    assert err < bound[out_dtype], (err, m, n, k, pair, config)
    return err


def glu_reference64(x, w, *, activation="silu", bias=None, residual=None, alpha=1.0, beta=1.0):
    """act(alpha x w[:, 0] + bias[0]) * (alpha x w[:, 1] + bias[1]) + beta residual, float64."""
    x64, w64 = to64(x), to64(w)
    gate, up = alpha * (x64 @ w64[:, 0]), alpha * (x64 @ w64[:, 1])
    if bias is not None:
        gate, up = gate + to64(bias)[0], up + to64(bias)[1]
    y = act64(gate, activation) * up
    if residual is not None:
        y = y + beta * to64(residual)
    return y


def sizes64(group_sizes, m):
    """The rows each group of a grouped GEMM really has: its sizes made valid as
    jax_hopper/gemm/ragged_tiles.py documents (negative 0, cut at M)."""
    out, pos = [], 0
    for s in np.asarray(group_sizes):
        take = min(max(int(s), 0), m - pos)
        out.append(take)
        pos += take
    return out


def ragged_reference64(lhs, rhs, group_sizes, *, transpose_rhs=False, bias=None,
                       activation=None, residual=None, alpha=1.0, beta=1.0):
    """hopper_ragged_dot in float64: rows of group g get act(alpha rows @ rhs[g] + bias[g]) +
    beta residual, rows past every group act(0) + beta residual. Host arrays only (numpy), so
    the sanitizer driver's check launches nothing."""
    def f64(x):
        return np.asarray(x).astype(np.float64)
    l64, r64 = f64(lhs), f64(rhs)
    if transpose_rhs:
        r64 = np.swapaxes(r64, 1, 2)
    m, n = l64.shape[0], r64.shape[2]
    x, row = np.zeros((m, n)), 0
    for g, size in enumerate(sizes64(group_sizes, m)):
        x[row:row + size] = alpha * l64[row:row + size] @ r64[g]
        if bias is not None:
            x[row:row + size] += f64(bias)[g]
        row += size
    x = act64(x, activation)
    if residual is not None:
        x = x + beta * f64(residual)
    return x


def check_ragged(rng, m, k, n, group_sizes, *, dtype="bfloat16", out_dtype=None,
                 transpose_rhs=False, config=None, bias=False, residual=False, activation=None,
                 alpha=1.0, beta=1.0):
    """hopper_ragged_dot on random operands, its output poisoned, against ragged_reference64
    within the out dtype's bound (the helper the grouped tests share); without an epilogue, rows
    past every group must be exactly 0. Returns the output."""
    groups = len(group_sizes)
    lhs = random_operand(rng, (m, k), dtype)
    shape = (groups, n, k) if transpose_rhs else (groups, k, n)
    rhs = (random_operand(rng, shape, dtype).astype(jnp.float32) / np.sqrt(k)).astype(dtype)
    gs = jnp.asarray(group_sizes, jnp.int32)
    out_dtype = out_dtype or dtype
    arrays = {}
    if bias:
        arrays["bias"] = jnp.asarray(rng.standard_normal((groups, n)), jnp.float32)
    if residual:
        arrays["residual"] = random_operand(rng, (m, n), out_dtype)

    def fn(lhs, rhs, gs, *extra):
        return jax_hopper.hopper_ragged_dot(lhs, rhs, gs, out_dtype=out_dtype,
                                            transpose_rhs=transpose_rhs, config=config,
                                            activation=activation, alpha=alpha, beta=beta,
                                            **dict(zip(arrays, extra)))

    out = poisoned_call(fn, (m, n), out_dtype, lhs, rhs, gs, *arrays.values())
    ref = ragged_reference64(lhs, rhs, group_sizes, transpose_rhs=transpose_rhs,
                             activation=activation, alpha=alpha, beta=beta, **arrays)
    assert out.dtype == jnp.dtype(out_dtype)
    err = rel_frob(out, ref)
    assert err < REL_FROB_BOUND[jnp.dtype(out_dtype).name], (m, k, n, group_sizes, err)
    # Rows past every group are the epilogue of a zero product: exactly 0 here.
    filled = sum(sizes64(group_sizes, m))
    if not bias and not residual and activation is None:
        assert np.all(to64(out)[filled:] == 0)
    return out


def ragged_glu_reference64(x, w, group_sizes, *, activation="silu", bias=None, residual=None,
                           alpha=1.0, beta=1.0):
    """hopper_ragged_glu in float64: rows of group g get act(alpha x w[g,:,0] + bias[g,0]) *
    (alpha x w[g,:,1] + bias[g,1]) + beta residual; rows past every group act(0) * 0 + beta
    residual. Host arrays only."""
    x64, w64 = np.asarray(x).astype(np.float64), np.asarray(w).astype(np.float64)
    m, f = x64.shape[0], w64.shape[3]
    gate, up, row = np.zeros((m, f)), np.zeros((m, f)), 0
    for g, size in enumerate(sizes64(group_sizes, m)):
        rows = slice(row, row + size)
        gate[rows] = alpha * x64[rows] @ w64[g, :, 0]
        up[rows] = alpha * x64[rows] @ w64[g, :, 1]
        if bias is not None:
            gate[rows] += np.asarray(bias, np.float64)[g, 0]
            up[rows] += np.asarray(bias, np.float64)[g, 1]
        row += size
    out = act64(gate, activation) * up
    return out if residual is None else out + beta * np.asarray(residual).astype(np.float64)


def ragged_glu_grads64(x, w, group_sizes, dy):
    """The float64 gradients in x and w of sum(hopper_ragged_glu(x, w, ..., activation=None)
    * dy), the bilinear unit: per group d gate = dy * up, d up = dy * gate; rows past every
    group get none. Host arrays only."""
    x64, w64, d64 = to64(x), to64(w), to64(dy)
    dx, dw, row = np.zeros(x64.shape), np.zeros(w64.shape), 0
    for g, size in enumerate(sizes64(group_sizes, x64.shape[0])):
        rows = slice(row, row + size)
        gate, up = x64[rows] @ w64[g, :, 0], x64[rows] @ w64[g, :, 1]
        dgate, dup = d64[rows] * up, d64[rows] * gate
        dx[rows] = dgate @ w64[g, :, 0].T + dup @ w64[g, :, 1].T
        dw[g, :, 0], dw[g, :, 1] = x64[rows].T @ dgate, x64[rows].T @ dup
        row += size
    return dx, dw


def check_ragged_glu_entry_grads(rng, m, k, f, bound, launches=None, summed=False):
    """jax.vmap of jax.grad of hopper_ragged_glu (bilinear) over entries with their own sizes
    (entry_sizes), the weights shared: the gated product, d x and d w (the grouped contraction)
    one launch each over every entry (gated_product's _entries roles), no loop; each entry's
    gradients in x and w within `bound` of float64. summed: jax.grad of the sum over the
    vmapped entries (a model's step over a vmapped layer): the weights' gradient one
    contraction shaped as the weights (gated_product's dw_summed, no (E, G, K, 2, F)), against
    the entries' float64 gradients summed. launches: the launch primitives' names and how many
    of each (default 2 hopper_ragged_dot, 1 hopper_ragged_contract)."""
    sizes = entry_sizes(m)
    e, g = len(sizes), len(sizes[0])
    x = random_operand(rng, (e, m, k), "bfloat16")
    w = (random_operand(rng, (g, k, 2, f), "bfloat16").astype(jnp.float32) / np.sqrt(k)
         ).astype(jnp.bfloat16)
    dy = random_operand(rng, (e, m, f), "float32")

    def unit(x, w, sizes, dy):
        return jnp.sum(jax_hopper.hopper_ragged_glu(x, w, sizes, activation=None,
                                                    out_dtype=jnp.float32) * dy)

    if summed:
        fn = jax.grad(lambda x, sizes, dy, w: jnp.sum(jax.vmap(unit, (0, None, 0, 0))(
            x, w, sizes, dy)), (0, 3))
    else:
        fn = jax.vmap(lambda x, sizes, dy, w: jax.grad(unit, (0, 1))(x, w, sizes, dy),
                      (0, 0, 0, None))
    args = (x, jnp.asarray(sizes, jnp.int32), dy, w)
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    assert count_eqns(jaxpr, ("scan", "while")) == 0
    for name, count in (launches or {"hopper_ragged_dot": 2,
                                     "hopper_ragged_contract": 1}).items():
        assert count_eqns(jaxpr, (name,)) == count, name
    if summed:
        shapes = [eqn.outvars[0].aval.shape for eqn in program_eqns(jaxpr)
                  if eqn.primitive.name == "hopper_ragged_contract"]
        assert all(s[0] == g for s in shapes), shapes  # one sum, not (E, G, ...)
    dx, dw = jax.jit(fn)(*args)
    assert dw.shape == (w.shape if summed else (e, *w.shape))
    wants = [ragged_glu_grads64(x[i], w, sizes[i], dy[i]) for i in range(e)]
    for i, (want_dx, want_dw) in enumerate(wants):
        assert rel_frob(to64(dx[i]), want_dx) < bound, f"entry {i}: d x"
        if not summed:
            assert rel_frob(to64(dw[i]), want_dw) < bound, f"entry {i}: d w"
    if summed:
        assert rel_frob(to64(dw), sum(want for _, want in wants)) < bound, "d w"


def check_summed_weight_grad(rng, e, m, k, n, bound, *, glu=False, transpose_b=False,
                             epilogue=False):
    """jax.grad of the sum over jax.vmap'd calls sharing the weight (a per-example model
    vmapped over its batch): hopper_matmul's plain product (w (K, N), or (N, K) with
    transpose_b), with epilogue a fused one (alpha 0.7, bias, exact GELU, a residual shared by
    the entries with beta 0.5; its custom JVP, autodiff.py), or hopper_glu (bilinear; w (K, 2,
    N / 2)). The product, d x and d w launched once each (a fused activation's forward is z,
    kept for act'(z): never a fourth launch), d w one GEMM over every entry's rows shaped as w
    (the plain product's and the gated products' transposes: no per-entry gradients summed
    after); every gradient within `bound` of float64."""
    x = random_operand(rng, (e, m, k), "bfloat16")
    shape = (k, 2, n // 2) if glu else (n, k) if transpose_b else (k, n)
    w = (random_operand(rng, shape, "bfloat16").astype(jnp.float32) / np.sqrt(k)
         ).astype(jnp.bfloat16)
    dy = random_operand(rng, (e, m, n // 2 if glu else n), "float32")
    bias = random_operand(rng, (n,), "float32")
    res = random_operand(rng, (m, n), "float32")

    def unit(a, w, bias, res):
        if glu:
            return jax_hopper.hopper_glu(a, w, activation=None, out_dtype=jnp.float32)
        if epilogue:
            return jax_hopper.hopper_matmul(a, w, transpose_b=transpose_b, bias=bias,
                                            activation="gelu", residual=res, alpha=0.7,
                                            beta=0.5, out_dtype=jnp.float32)
        return jax_hopper.hopper_matmul(a, w, transpose_b=transpose_b, out_dtype=jnp.float32)

    step = jax.grad(lambda x, w, bias, res: jnp.sum(
        jax.vmap(lambda a: unit(a, w, bias, res))(x) * dy), (0, 1, 2, 3))
    jaxpr = jax.make_jaxpr(step)(x, w, bias, res).jaxpr
    launches = [eqn.outvars[0].aval.shape for eqn in program_eqns(jaxpr)
                if eqn.primitive.name == "hopper_gemm"]
    stored = (1, n, k) if transpose_b else (1, k, n)
    assert len(launches) == 3 and stored in launches, launches
    assert count_eqns(jaxpr, ("scan", "while")) == 0
    dx, dw, dbias, dres = jax.jit(step)(x, w, bias, res)
    x64, w64, d64 = to64(x), to64(w), to64(dy)
    if glu:
        gate, up = x64 @ w64[:, 0], x64 @ w64[:, 1]
        dgate, dup = d64 * up, d64 * gate
        want_dx = dgate @ w64[:, 0].T + dup @ w64[:, 1].T
        want_dw = np.stack([np.einsum("emk,emf->kf", x64, dgate),
                            np.einsum("emk,emf->kf", x64, dup)], axis=1)
    else:
        w_kn = w64.T if transpose_b else w64
        dz, alpha = d64, 1.0
        if epilogue:
            alpha = 0.7
            dz = d64 * gelu_grad64(alpha * x64 @ w_kn + to64(bias))
            assert rel_frob(dbias, dz.sum((0, 1))) < bound
            assert rel_frob(dres, 0.5 * d64.sum(0)) < bound
        want_dx = alpha * dz @ w_kn.T
        want_dw = alpha * np.einsum("emk,emn->kn", x64, dz)
        want_dw = want_dw.T if transpose_b else want_dw
    assert dx.shape == x.shape and dw.shape == w.shape
    assert rel_frob(dx, want_dx) < bound
    assert rel_frob(dw, want_dw) < bound


def check_ragged_glu(rng, m, k, f, group_sizes, *, dtype="bfloat16", out_dtype=None,
                     config=None, bias=False, residual=False, activation="silu", alpha=1.0,
                     beta=1.0):
    """hopper_ragged_glu on random operands, its output poisoned, against
    ragged_glu_reference64 within the out dtype's bound (the helper the grouped GLU tests
    share); without a residual, rows past every group must be exactly 0. Returns the output."""
    groups = len(group_sizes)
    x = random_operand(rng, (m, k), dtype)
    w = (random_operand(rng, (groups, k, 2, f), dtype).astype(jnp.float32) / np.sqrt(k)
         ).astype(dtype)
    gs = jnp.asarray(group_sizes, jnp.int32)
    out_dtype = out_dtype or dtype
    arrays = {}
    if bias:
        arrays["bias"] = jnp.asarray(rng.standard_normal((groups, 2, f)), jnp.float32)
    if residual:
        arrays["residual"] = random_operand(rng, (m, f), out_dtype)

    def fn(x, w, gs, *extra):
        return jax_hopper.hopper_ragged_glu(x, w, gs, out_dtype=out_dtype, config=config,
                                            activation=activation, alpha=alpha, beta=beta,
                                            **dict(zip(arrays, extra)))

    out = poisoned_call(fn, (m, f), out_dtype, x, w, gs, *arrays.values())
    ref = ragged_glu_reference64(x, w, group_sizes, activation=activation, alpha=alpha,
                                 beta=beta, **arrays)
    assert out.dtype == jnp.dtype(out_dtype)
    err = rel_frob(out, ref)
    assert err < REL_FROB_BOUND[jnp.dtype(out_dtype).name], (m, k, f, group_sizes, err)
    if not residual:  # rows past every group: act(0) * 0
        assert np.all(to64(out)[sum(sizes64(group_sizes, m)):] == 0)
    return out


def contract_reference64(x, y, group_sizes):
    """hopper_ragged_contract in float64: out[g] = x_g^T y_g over group g's rows (sizes made
    valid as sizes64 says), (G, P, Q). Host arrays only."""
    x64, y64 = np.asarray(x).astype(np.float64), np.asarray(y).astype(np.float64)
    out, row = np.zeros((len(group_sizes), x64.shape[1], y64.shape[1])), 0
    for g, size in enumerate(sizes64(group_sizes, x64.shape[0])):
        out[g] = x64[row:row + size].T @ y64[row:row + size]
        row += size
    return out


def contract_grads64(x, y, dout, group_sizes):
    """The float64 gradients of sum(hopper_ragged_contract(x, y) * dout): d x_g = y_g dout[g]^T
    and d y_g = x_g dout[g] over each group's rows, 0 for rows past every group."""
    x64, y64, d64 = (np.asarray(a).astype(np.float64) for a in (x, y, dout))
    dx, dy, row = np.zeros(x64.shape), np.zeros(y64.shape), 0
    for g, size in enumerate(sizes64(group_sizes, x64.shape[0])):
        rows = slice(row, row + size)
        dx[rows], dy[rows] = y64[rows] @ d64[g].T, x64[rows] @ d64[g]
        row += size
    return dx, dy


def ragged_grads64(lhs, rhs, bias, dout, group_sizes):
    """The float64 gradients (d lhs, d rhs, d bias) of sum(dout * silu(lhs_g @ rhs[g] +
    bias[g])) over each group's rows (sizes64): exact zeros for the rows past every group and
    for the groups without rows."""
    l64, r64, b64, d64 = (np.asarray(a).astype(np.float64) for a in (lhs, rhs, bias, dout))
    dl, dr, db, row = np.zeros(l64.shape), np.zeros(r64.shape), np.zeros(b64.shape), 0
    for g, size in enumerate(sizes64(group_sizes, l64.shape[0])):
        rows = slice(row, row + size)
        z = l64[rows] @ r64[g] + b64[g]
        s = 1 / (1 + np.exp(-z))
        dz = d64[rows] * s * (1 + z * (1 - s))  # silu'(z)
        dl[rows], dr[g], db[g] = dz @ r64[g].T, l64[rows].T @ dz, dz.sum(0)
        row += size
    return dl, dr, db


def check_ragged_grads(rng, m, k, n, group_sizes, bound):
    """jax.grad of hopper_ragged_dot (silu, bias; under jit) against ragged_grads64: within
    `bound` (relative Frobenius), and exactly zero where the reference is (rows past every
    group, groups without rows), whatever the sizes say."""
    g = len(group_sizes)
    lhs = random_operand(rng, (m, k), "bfloat16")
    rhs = (random_operand(rng, (g, k, n), "bfloat16").astype(jnp.float32) / np.sqrt(k)
           ).astype(jnp.bfloat16)
    bias = random_operand(rng, (g, n), "float32")
    dout = random_operand(rng, (m, n), "float32")
    gs = jnp.asarray(group_sizes, jnp.int32)

    def loss(lhs, rhs, bias):
        y = jax_hopper.hopper_ragged_dot(lhs, rhs, gs, bias=bias, activation="silu",
                                         out_dtype=jnp.float32)
        return jnp.sum(y * dout)

    got = jax.jit(jax.grad(loss, (0, 1, 2)))(lhs, rhs, bias)
    for name, a, want in zip(("lhs", "rhs", "bias"), got,
                             ragged_grads64(lhs, rhs, bias, dout, group_sizes)):
        got64 = to64(a)
        assert np.array_equal(got64[want == 0], want[want == 0]), f"d {name}: not zero"
        assert rel_frob(got64, want) < bound, f"d {name}"


def entry_sizes(m: int) -> list:
    """One set of 5 group sizes per vmap entry over m rows, the adversarial ones of
    ADVERSARIAL_SIZES scaled to m: negative, past int32's reach, one group holding every
    row, single rows, a sum below m, all empty."""
    return [[-5, 3 * m // 7, -2**31, 4 * m // 7, 7], [5 * m // 7, 2**31 - 1, 2**31 - 1, 9, 0],
            [0, 0, m, 0, 0], [1, 1, 1, 1, m - 4], [m // 7, 0, 5 * m // 14, 0, 0], [0] * 5]


def check_ragged_entries(rng, m, k, n, case, bound, launch=("hopper_ragged_dot",)):
    """jax.vmap of hopper_ragged_dot over entries with their own sizes (entry_sizes): one
    launch over every entry's rows (ragged_primitive.fold_entries), no loop, each entry within
    `bound` of float64, with the bias, residual, gelu_tanh and alpha fused. case: "shared"
    experts, "per_entry" (one set an entry, stored (G, N, K)), or "paired" (shared, in 2-CTA
    pairs along M: a paired table per entry, reordered expert by expert). launch: the
    primitive that binds a launch (emulate_grouped_kernel's is a pure_callback)."""
    sizes = entry_sizes(m)
    e, g = len(sizes), len(sizes[0])
    per_entry = case == "per_entry"
    lhs = random_operand(rng, (e, m, k), "bfloat16")
    rhs = random_operand(rng, (e, g, n, k) if per_entry else (g, k, n), "bfloat16")
    bias = random_operand(rng, (g, n), "float32")
    res = random_operand(rng, (e, m, n), "float32")
    tile = catalog.FAMILIES["grouped"].tiles[0]
    config = (jax_hopper.GemmConfig.for_tile(tile, stream_k=False, cluster_m=2)
              if case == "paired" else None)
    epi = dict(bias=bias, activation="gelu_tanh", alpha=0.5)

    def one(lhs, rhs, sizes, res):
        return jax_hopper.hopper_ragged_dot(lhs, rhs, sizes, residual=res,
                                            transpose_rhs=per_entry, out_dtype=jnp.float32,
                                            config=config, **epi)

    fn = jax.vmap(one, in_axes=(0, 0 if per_entry else None, 0, 0))
    args = (lhs, rhs, jnp.asarray(sizes, jnp.int32), res)
    assert count_eqns(jax.make_jaxpr(fn)(*args).jaxpr, (*launch, "scan", "while")) == 1
    out = jax.jit(fn)(*args)
    for i in range(e):
        want = ragged_reference64(lhs[i], rhs[i] if per_entry else rhs, sizes[i],
                                  transpose_rhs=per_entry, residual=res[i], **epi)
        assert rel_frob(out[i], want) < bound, f"entry {i}"


def check_summed_entries_grad(rng, e, m, k, n, g, transpose_rhs, epilogue=False):
    """jax.grad of the sum over jax.vmap'd hopper_ragged_dot calls sharing G experts (E
    entries of M rows, their own sizes, some negative): the weights' gradient one grouped
    contraction shaped as the weights (ragged_contract.summed_over_entries, no (E, G, K, N)),
    d lhs one launch, no loop; with epilogue a fused one (alpha 0.7, a per-expert bias, exact
    GELU, a residual the entries share with beta 0.5; ragged._ragged's JVP: its forward z,
    kept for act'(z), no launch more), the bias's and residual's gradients too; all within the
    bf16 bound of float64, the rows past every group of an entry getting none (nor any bias)."""
    lhs = random_operand(rng, (e, m, k), "bfloat16")
    rhs = random_operand(rng, (g, n, k) if transpose_rhs else (g, k, n), "bfloat16")
    rhs = (rhs.astype(jnp.float32) / np.sqrt(k)).astype(jnp.bfloat16)
    sizes = jnp.asarray(rng.integers(-2, max(2 * m // g, 3), (e, g)), jnp.int32)
    dy = random_operand(rng, (e, m, n), "float32")
    bias, res = random_operand(rng, (g, n), "float32"), random_operand(rng, (m, n), "float32")
    fused = dict(bias=bias, activation="gelu", residual=res, alpha=0.7, beta=0.5) \
        if epilogue else {}

    def loss(lhs, rhs, bias, res):
        kw = dict(fused, bias=bias, residual=res) if epilogue else {}
        out = jax.vmap(lambda x, s: jax_hopper.hopper_ragged_dot(
            x, rhs, s, transpose_rhs=transpose_rhs, out_dtype=jnp.float32, **kw))(lhs, sizes)
        return jnp.sum(out * dy)

    step = jax.grad(loss, (0, 1, 2, 3))
    jaxpr = jax.make_jaxpr(step)(lhs, rhs, bias, res).jaxpr
    weight_grads = [eqn.outvars[0].aval.shape for eqn in program_eqns(jaxpr)
                    if eqn.primitive.name == "hopper_ragged_contract"]
    assert len(weight_grads) == 1 and weight_grads[0][0] == g, weight_grads
    # forward (z with an activation), d lhs
    assert count_eqns(jaxpr, ("hopper_ragged_dot",)) == 2
    assert count_eqns(jaxpr, ("scan", "while")) == 0
    dlhs, drhs, dbias, dres = jax.jit(step)(lhs, rhs, bias, res)
    w64 = to64(rhs).swapaxes(1, 2) if transpose_rhs else to64(rhs)  # (G, K, N)
    want_dlhs, want_drhs = np.zeros((e, m, k)), np.zeros((g, k, n))
    want_dbias, alpha = np.zeros((g, n)), (0.7 if epilogue else 1.0)
    for i in range(e):
        valid = np.asarray(ragged_tiles.valid_sizes(sizes[i], m))
        ends = np.cumsum(valid)
        for j in range(g):
            rows = slice(ends[j] - valid[j], ends[j])
            dz = to64(dy[i, rows])
            if epilogue:
                dz = dz * gelu_grad64(alpha * to64(lhs[i, rows]) @ w64[j] + to64(bias[j]))
            want_dlhs[i, rows] = alpha * dz @ w64[j].T
            want_drhs[j] += alpha * to64(lhs[i, rows]).T @ dz
            want_dbias[j] += dz.sum(0)
    if transpose_rhs:
        want_drhs = want_drhs.swapaxes(1, 2)
    assert drhs.shape == rhs.shape and dlhs.shape == lhs.shape
    assert rel_frob(dlhs, want_dlhs) < REL_FROB_BOUND["bfloat16"]
    assert rel_frob(drhs, want_drhs) < REL_FROB_BOUND["bfloat16"]
    if epilogue:
        assert rel_frob(dbias, want_dbias) < REL_FROB_BOUND["bfloat16"]
        assert rel_frob(dres, 0.5 * to64(dy).sum(0)) < REL_FROB_BOUND["float32"]


def emulate_grouped_kernel(monkeypatch) -> None:
    """(monkeypatch: conftest's kernel_emulation fixture, which clears jax's trace caches.)
    The grouped primitives (hopper_ragged_dot, hopper_ragged_glu, hopper_ragged_fp8_dot)
    bound as the grouped kernels read their operands and tile table
    (cuda/gemm/scheduler/grouped.cuh), in numpy: each slot in use stores the epilogue of
    alpha * its rows @ rhs[group] (+ bias[group]; gated: act(gate) * up of the (G K, 2, N)
    weights' halves; fp8: scaled per tensor, lhs_scale * rhs_scale[group], or the operands
    dequantised per block) over its rows, a zero product for group -1, whatever order the
    slots come in; rows no slot stores are NaN. On a CPU the primitives' own lowerings are the
    reference, which never reads the table."""
    from jax_hopper.gemm import ragged_fp8, ragged_primitive

    def slots(x, weight, tiles, bias, res, *, out_dtype, alpha, beta, activation, gated,
              group_scale=None):
        """The output rows the slots store: x (R, K) and weight(g) (K, N) float64."""
        act = catalog.ACTIVATIONS[activation][0] if activation else None
        b = bias.reshape(bias.shape[0], -1) if bias.size else bias
        out = np.full((x.shape[0], weight(0).shape[1] // (2 if gated else 1)), np.nan)
        for row0, rows, g in tiles[1:].reshape(-1, catalog.GROUP_TILE_FIELDS)[:tiles[0]]:
            w = weight(g if g >= 0 else 0)
            z = alpha * x[row0:row0 + rows] @ w if g >= 0 else np.zeros((rows, w.shape[1]))
            if group_scale is not None and g >= 0:
                z = z * group_scale(g)
            if b.size and g >= 0:
                z = z + b[g]
            if gated:
                half = z.shape[1] // 2
                z = act64(z[:, :half], act) * z[:, half:]
            else:
                z = act64(z, act)
            out[row0:row0 + rows] = z + (beta * res[0, row0:row0 + rows] if res.size else 0)
        return out[None].astype(out_dtype)

    def bind(lhs, rhs, gs, tiles, bias, res, *, b_mn_major, out_dtype, alpha, beta, activation,
             family, **_):
        gated = family == "grouped_glu"

        def run(lhs, rhs, tiles, bias, res):
            lhs, rhs, tiles, bias, res = map(np.asarray, (lhs, rhs, tiles, bias, res))
            x = lhs[0].astype(np.float64)
            if gated:  # (G K, 2, N) -> (G, K, 2 N): [gate | up]
                w = rhs.astype(np.float64).reshape(-1, x.shape[1], 2 * rhs.shape[2])
            else:
                w = rhs.astype(np.float64)
                w = w if b_mn_major else np.swapaxes(w, 1, 2)
            return slots(x, lambda g: w[g], tiles, bias, res, out_dtype=out_dtype, alpha=alpha,
                         beta=beta, activation=activation, gated=gated)

        cols = rhs.shape[2] if gated or b_mn_major else rhs.shape[1]
        shape = jax.ShapeDtypeStruct((1, lhs.shape[1], cols), out_dtype)
        return jax.pure_callback(run, shape, lhs, rhs, tiles, bias, res)

    def bind_fp8(lhs, rhs, gs, tiles, bias, res, lhs_scale, rhs_scale, *, family, out_dtype,
                 alpha, beta, activation, **_):
        block = family.endswith("_block")

        def run(lhs, rhs, tiles, bias, res, lhs_scale, rhs_scale):
            lhs, rhs, tiles, bias, res, ls, rs = map(
                np.asarray, (lhs, rhs, tiles, bias, res, lhs_scale, rhs_scale))
            if block:  # each operand dequantised per block: (R, K) and (G, N, K)
                x = dequantize_blocks64(lhs[0], ls[0], rows_per_scale=1)
                w = dequantize_blocks64(rhs, rs, rows_per_scale=128)
                scale = None
            else:
                x, w = to64(lhs[0]), to64(rhs)
                per_group = np.broadcast_to(rs.astype(np.float64), (w.shape[0],))
                scale = lambda g: float(ls[0]) * per_group[g]  # noqa: E731
            return slots(x, lambda g: w[g].T, tiles, bias, res, out_dtype=out_dtype,
                         alpha=alpha, beta=beta, activation=activation, gated=False,
                         group_scale=scale)

        shape = jax.ShapeDtypeStruct((1, lhs.shape[1], rhs.shape[1]), out_dtype)
        return jax.pure_callback(run, shape, lhs, rhs, tiles, bias, res, lhs_scale, rhs_scale)

    monkeypatch.setattr(ragged_primitive.hopper_ragged_p, "bind", bind, raising=False)
    monkeypatch.setattr(ragged_fp8.hopper_ragged_fp8_p, "bind", bind_fp8, raising=False)


def emulate_contraction_kernel(monkeypatch) -> None:
    """(monkeypatch: conftest's kernel_emulation fixture, which clears jax's trace caches.)
    The grouped contraction primitive (hopper_ragged_contract) bound as the kernel reads
    its operands (cuda/gemm/scheduler/grouped_contraction.cuh), in numpy: group g owns rows
    [ends[g - 1], ends[g]), or [starts[g], ends[g]) given the bounds (2, G), each clamped to
    the rows and every end to at least its start. On a CPU the primitive's own lowering is
    the reference, which assumes ordered, disjoint bounds; this reads them one by one."""
    from jax_hopper.gemm import ragged_contract

    def bind(x3, y3, ends, *, out_dtype, config):
        del config

        def run(x3, y3, ends):
            x, y, ends = (np.asarray(a) for a in (x3[0], y3[0], ends))
            x, y = x.astype(np.float64), y.astype(np.float64)
            rows = x.shape[0]
            if ends.ndim == 2:
                starts, ends = ends
            else:
                starts = np.concatenate([[0], ends[:-1]])
            out = np.empty((ends.shape[0], x.shape[1], y.shape[1]))
            for g, (start, end) in enumerate(zip(starts, ends)):
                first = min(max(int(start), 0), rows)
                last = min(max(int(end), first), rows)
                out[g] = x[first:last].T @ y[first:last]
            return out.astype(out_dtype)

        shape = jax.ShapeDtypeStruct((ends.shape[-1], x3.shape[2], y3.shape[2]), out_dtype)
        return jax.pure_callback(run, shape, x3, y3, ends)

    monkeypatch.setattr(ragged_contract.hopper_ragged_contract_p, "bind", bind, raising=False)


def check_contract_entries(rng, m, p, q, bound, config=None,
                           launch=("hopper_ragged_contract",)):
    """jax.vmap of hopper_ragged_contract over entries with their own sizes (entry_sizes): one
    launch over every entry's rows (ragged_contract.fold_entries), no loop, each entry within
    `bound` of float64 and its empty groups exactly zero; x per entry, y shared by them
    (broadcast), and a vmap of that vmap (nested: still one launch). launch: the primitive
    that binds a launch (emulate_contraction_kernel's is a pure_callback)."""
    sizes = entry_sizes(m)
    e = len(sizes)
    x = random_operand(rng, (2, e, m, p), "bfloat16")
    y = (random_operand(rng, (m, q), "bfloat16").astype(jnp.float32) / np.sqrt(m)
         ).astype(jnp.bfloat16)
    gs = jnp.asarray(sizes, jnp.int32)

    def one(x, sizes):
        return jax_hopper.hopper_ragged_contract(x, y, sizes, out_dtype=jnp.float32,
                                                 config=config)

    for fn, args in ((jax.vmap(one), (x[0], gs)),
                     (jax.vmap(jax.vmap(one), in_axes=(0, None)), (x, gs))):
        assert count_eqns(jax.make_jaxpr(fn)(*args).jaxpr, (*launch, "scan", "while")) == 1
        out = np.asarray(jax.jit(fn)(*args)).reshape(-1, len(sizes[0]), p, q)
        for i, xi in enumerate(np.asarray(args[0]).reshape(-1, m, p)):
            want = contract_reference64(xi, y, sizes[i % e])
            assert rel_frob(out[i], want) < bound, f"entry {i}"
            assert not out[i][~want.reshape(len(want), -1).any(axis=1)].any(), \
                f"entry {i}: an empty group is not zero"


# Group sizes that stress the grouped kernels' bookkeeping, for 700 rows.
ADVERSARIAL_SIZES = {"empty_groups": [0, 0, 350, 0, 350, 0],
                     "one_group_all_rows": [0, 0, 700, 0],
                     "single_rows": [1] * 16 + [684],
                     "negative": [-5, 300, -2**31, 400, 7],
                     "sum_above_m": [500, 2**31 - 1, 2**31 - 1, 9],
                     "sum_below_m": [100, 0, 250],
                     "all_zero": [0, 0, 0]}


def run_in_command_buffer(child: str, *custom_call: str) -> list[float]:
    """Runs the script `child` (formatted with tests=this folder; it prints "ERR <error>" lines)
    in a process whose XLA puts custom calls into CUDA-graph command buffers, asserts that the
    thunk-level conversion pass captured one of the names `custom_call` (the primitive's or the
    FFI target's; its log names the thunks it captures; the conversion
    happens after HLO, so the compiled HLO text does not show it) and returns the errors."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ,
           "XLA_FLAGS": "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL "
                        "--xla_gpu_graph_min_graph_size=1",
           "TF_CPP_MIN_LOG_LEVEL": "0",
           # The parent pytest process may already hold XLA's default 75% of the GPU.
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           # The pass logs the thunks it captures above verbosity 1 (seen at 5, jax 0.11.2).
           "TF_CPP_VMODULE": "command_buffer_conversion_pass=5"}
    proc = subprocess.run([sys.executable, "-c", child.format(tests=tests)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    captured = [line for line in proc.stderr.splitlines()
                if "Creating command buffer thunk with the following thunks" in line]
    assert any(name in line for line in captured for name in custom_call), \
        "\n".join(captured) or proc.stderr[-3000:]
    return [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("ERR")]


# fp8_matmul (jax_hopper/gemm/fp8_matmul.py): relative Frobenius error of each product against
# float64 of the unquantized inputs. e4m3 keeps 3 mantissa bits (a product of two rounded
# operands: ~3.6% rms for normal data), e5m2 (the tensor recipe's gradient) 2 bits.
FP8_MATMUL_BOUND = {"tensor": dict(y=0.06, dx=0.09, dw=0.09),
                    "delayed": dict(y=0.06, dx=0.09, dw=0.09),
                    "block": dict(y=0.06, dx=0.06, dw=0.06)}


def check_fp8_ragged_dot(rng, m, k, n, sizes, recipe, dtype=jnp.bfloat16, jit=False):
    """Forward and both gradients of fp8_ragged_dot against float64 of the unquantized inputs
    (the helper the GPU tests share): y, dx and dw (fp8 on the transposed copies) within
    fp8_matmul's bounds; rows past every group 0 in y and in dx."""
    groups = len(sizes)
    x = jnp.asarray(rng.standard_normal((m, k)), dtype)
    w = jnp.asarray(rng.standard_normal((groups, k, n)) / np.sqrt(k), dtype)
    g = jnp.asarray(rng.standard_normal((m, n)), dtype)
    gs = jnp.asarray(sizes, jnp.int32)
    if recipe == "delayed":  # histories whose largest entries are this step's amaxes
        w_amax = np.abs(np.asarray(w, np.float32)).max(axis=(1, 2))
        amaxes = [amax_of(x), w_amax, amax_of(g)]
        meta = jax_hopper.Fp8Meta(*(jnp.asarray(np.stack([a, a / 2, a / 4], -1), jnp.float32)
                                    for a in amaxes), uses=jnp.float32(1))
        f = lambda x, w, meta: jax_hopper.fp8_ragged_dot(  # noqa: E731
            x, w, gs, recipe=recipe, meta=meta)
        y, vjp = jax.vjp(jax.jit(f) if jit else f, x, w, meta)
        dx, dw, new_meta = vjp(g)
        for got, a, old in zip(new_meta[:3], amaxes, meta[:3], strict=True):  # pushed on
            np.testing.assert_array_equal(got, np.concatenate([np.asarray(a)[..., None],
                                                               np.asarray(old)[..., :-1]], -1))
        assert float(new_meta.uses) == 1.0  # one call's gradient counts one use
    else:
        f = lambda x, w: jax_hopper.fp8_ragged_dot(x, w, gs, recipe=recipe)  # noqa: E731
        y, vjp = jax.vjp(jax.jit(f) if jit else f, x, w)
        dx, dw = vjp(g)
    assert (y.dtype, dx.dtype, dw.dtype) == (x.dtype, x.dtype, w.dtype)
    x64, w64, g64 = to64(x), to64(w), to64(g)
    want = dict(y=np.zeros((m, n)), dx=np.zeros((m, k)), dw=np.zeros((groups, k, n)))
    pos = 0
    for i, size in enumerate(sizes64(sizes, m)):
        rows = slice(pos, pos + size)
        want["y"][rows] = x64[rows] @ w64[i]
        want["dx"][rows] = g64[rows] @ w64[i].T
        want["dw"][i] = x64[rows].T @ g64[rows]
        pos += size
    assert np.all(to64(y)[pos:] == 0) and np.all(to64(dx)[pos:] == 0)
    bounds = FP8_MATMUL_BOUND[recipe]
    for name, got in (("y", y), ("dx", dx), ("dw", dw)):
        assert np.all(np.isfinite(np.asarray(got, np.float32))), name
        if np.any(want[name]):
            err = rel_frob(got, want[name])
            assert err < bounds[name], (name, err, recipe, sizes)
        else:
            assert not np.any(to64(got)), name


def amax_of(a) -> np.float32:
    return np.float32(np.abs(np.asarray(a, np.float32)).max())


def check_fp8_matmul(rng, lead, k, n, recipe, dtype=jnp.bfloat16, jit=False, epilogue=False):
    """Forward and both gradients of fp8_matmul against float64 (the helper the GPU tests share).
    Recipe "delayed" runs with histories whose largest entries are this step's amaxes (the
    newest entry, the older ones smaller), so it must meet "tensor"'s bounds, and its meta's
    gradient must be each history pushed on by the amax just seen. epilogue: with a float32
    bias (N,) and a residual (..., N) in x's dtype, whose gradients (dy summed over the rows,
    and dy) must come out too."""
    x = jnp.asarray(rng.standard_normal((*lead, k)), dtype)
    w = jnp.asarray(rng.standard_normal((k, n)) / np.sqrt(k), dtype)
    g = jnp.asarray(rng.standard_normal((*lead, n)), dtype)
    extra = dict(bias=jnp.asarray(rng.standard_normal(n), jnp.float32),
                 residual=jnp.asarray(rng.standard_normal((*lead, n)), dtype)) if epilogue else {}
    if recipe == "delayed":
        amaxes = [amax_of(a) for a in (x, w, g)]
        meta = jax_hopper.Fp8Meta(*(jnp.asarray([a, a / 2, a / 4], jnp.float32) for a in amaxes),
                                  uses=jnp.float32(1))
        f = lambda x, w, extra, meta: jax_hopper.fp8_matmul(  # noqa: E731
            x, w, recipe=recipe, meta=meta, **extra)
        y, vjp = jax.vjp(jax.jit(f) if jit else f, x, w, extra, meta)
        dx, dw, dextra, new_meta = vjp(g)
        for got, a, old in zip(new_meta[:3], amaxes, meta[:3], strict=True):
            np.testing.assert_array_equal(got, np.concatenate([[a], old[:-1]]))
        assert float(new_meta.uses) == 1.0
    else:
        f = lambda x, w, extra: jax_hopper.fp8_matmul(x, w, recipe=recipe, **extra)  # noqa: E731
        y, vjp = jax.vjp(jax.jit(f) if jit else f, x, w, extra)
        dx, dw, dextra = vjp(g)
    assert (y.dtype, dx.dtype, dw.dtype) == (x.dtype, x.dtype, w.dtype)
    x64, w64, g64 = (np.asarray(a, np.float64) for a in (x, w, g))
    want = dict(y=x64 @ w64, dx=g64 @ w64.T,
                dw=x64.reshape(-1, k).T @ g64.reshape(-1, n))
    if epilogue:
        want["y"] = want["y"] + to64(extra["bias"]) + to64(extra["residual"])
        assert dextra["residual"].dtype == dtype and dextra["bias"].dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(dextra["residual"]), np.asarray(g))
        assert rel_frob(dextra["bias"], g64.reshape(-1, n).sum(0)) < 1e-5
    for name, got in (("y", y), ("dx", dx), ("dw", dw)):
        assert np.all(np.isfinite(np.asarray(got, np.float32))), name
        err = rel_frob(got, want[name])
        assert err < FP8_MATMUL_BOUND[recipe][name], (name, err)


def bit_pattern(a):
    """An array's bytes for bit-for-bit comparison, every NaN as one pattern: XLA's CPU code and
    the kernels may give NaNs different signs, and only NaN-ness is the contract."""
    a = np.array(a).reshape(-1)
    if a.dtype.kind == "V" or jnp.issubdtype(a.dtype, jnp.floating):
        a[np.isnan(a.astype(np.float32))] = np.nan
    return a.view(np.uint8)


def matmul_operands(rng, m, n, k, dtype, transpose_a, transpose_b, batch=()):
    a = random_operand(rng, (*batch, k, m) if transpose_a else (*batch, m, k), dtype)
    b = random_operand(rng, (*batch, n, k) if transpose_b else (*batch, k, n), dtype)
    return a, b


def check_matmul(rng, m, n, k, *, dtype="bfloat16", out_dtype=None, transpose_a=False,
                 transpose_b=False, batch=(), config=None, activation=None, alpha=1.0, beta=1.0,
                 strict=True, **arrays):
    """hopper_matmul on fresh random operands, its output poisoned first, against float64 within
    the out dtype's bound; arrays: bias / residual. strict=False lets the CUDA lowering pad row
    pitches TMA cannot address. Returns the output."""
    a, b = matmul_operands(rng, m, n, k, dtype, transpose_a, transpose_b, batch)
    out_dtype = out_dtype or dtype
    scalars = dict(activation=activation, alpha=alpha, beta=beta)

    def fn(a, b, *extra):
        return jax_hopper.hopper_matmul(a, b, out_dtype=out_dtype, transpose_a=transpose_a,
                             transpose_b=transpose_b, config=config, strict=strict,
                             **dict(zip(arrays, extra)), **scalars)

    out = poisoned_call(fn, (*batch, m, n), out_dtype, a, b, *arrays.values())
    ref = reference64(a, b, transpose_a=transpose_a, transpose_b=transpose_b, **arrays,
                      **scalars)
    err = rel_frob(out, ref)
    assert out.dtype == jnp.dtype(out_dtype)
    assert err < REL_FROB_BOUND[jnp.dtype(out_dtype).name], (m, n, k, err)
    return out


def ragged_fp8_reference64(lhs, rhs_nk, group_sizes, lhs_scale, rhs_scale, *, bias=None,
                           activation=None, residual=None, alpha=1.0, beta=1.0):
    """hopper_ragged_fp8_dot in float64: rows of group g are act(alpha * (lhs_scale * lhs_rows)
    @ (rhs_scale[g] * rhs[g])^T + bias[g]) + beta * residual; rows past every group act(0) +
    beta * residual. rhs_nk (G, N, K); rhs_scale one or (G,); or block scales, lhs_scale
    (M, ceil(K/128)) and rhs_scale (G, ceil(N/128), ceil(K/128)), dequantising the operands."""
    if np.ndim(lhs_scale) == 2:
        x = dequantize_blocks64(lhs, lhs_scale, rows_per_scale=1)
        w = dequantize_blocks64(rhs_nk, rhs_scale, rows_per_scale=128)
        lhs_scale, rhs_scale = 1.0, 1.0
    else:
        x, w = to64(lhs), to64(rhs_nk)
    groups, n = w.shape[0], w.shape[1]
    rs = np.broadcast_to(np.asarray(rhs_scale, np.float64).reshape(-1), (groups,))
    y = np.zeros((x.shape[0], n))
    pos = 0
    for g, size in enumerate(sizes64(group_sizes, x.shape[0])):
        rows = slice(pos, pos + size)
        y[rows] = alpha * float(lhs_scale) * rs[g] * (x[rows] @ w[g].T)
        if bias is not None:
            y[rows] += to64(bias)[g]
        pos += size
    y = act64(y, activation)
    if residual is not None:
        y = y + beta * to64(residual)
    return y


def check_ragged_fp8_entries(rng, m, n, k, block, bound, launch=("hopper_ragged_fp8_dot",),
                             config=None):
    """jax.vmap of hopper_ragged_fp8_dot over entries with their own sizes (entry_sizes): one
    launch over every entry's rows (ragged_fp8._fold_entries), no loop, each entry within
    `bound` of float64, with the bias, residual, gelu_tanh and alpha fused; the experts and
    their scales shared; block (DeepSeek-V3's scales: each entry its own lhs block scales) or
    per tensor (one lhs scale shared, one per expert). A per-tensor lhs scale per entry runs
    one launch per entry (a loop), as the kernel takes one lhs scale a launch. launch: the
    primitive that binds a launch (emulate_grouped_kernel's is a pure_callback)."""
    sizes = entry_sizes(m)
    e, g = len(sizes), len(sizes[0])
    e4m3 = jnp.float8_e4m3fn
    lhs, rhs = fp8_operand(rng, (e, m, k), e4m3), fp8_operand(rng, (g, n, k), e4m3)
    if block:
        ls = block_scales(rng, (e, m, -(-k // 128)))
        rs = block_scales(rng, (g, -(-n // 128), -(-k // 128)))
    else:
        ls, rs = jnp.float32(0.5), jnp.asarray(rng.uniform(0.1, 2, g), jnp.float32)
    bias = random_operand(rng, (g, n), "float32")
    res = random_operand(rng, (e, m, n), "float32")
    epi = dict(bias=bias, activation="gelu_tanh", alpha=0.5)

    def one(lhs, sizes, res, ls):
        return jax_hopper.hopper_ragged_fp8_dot(lhs, rhs, sizes, ls, rs, residual=res,
                                                out_dtype=jnp.float32, config=config, **epi)

    fn = jax.vmap(one, in_axes=(0, 0, 0, 0 if block else None))
    args = (lhs, jnp.asarray(sizes, jnp.int32), res, ls)
    assert count_eqns(jax.make_jaxpr(fn)(*args).jaxpr, (*launch, "scan", "while")) == 1
    out = jax.jit(fn)(*args)
    for i in range(e):
        want = ragged_fp8_reference64(lhs[i], rhs, sizes[i], ls[i] if block else 0.5, rs,
                                      residual=res[i], **epi)
        assert rel_frob(out[i], want) < bound, f"entry {i}"
    if not block:  # a per-tensor lhs scale per entry: a loop of launches
        per_entry = jax.vmap(one, in_axes=(0, 0, 0, 0))
        jaxpr = jax.make_jaxpr(per_entry)(*args[:3], jnp.full((e,), 0.5, jnp.float32)).jaxpr
        assert count_eqns(jaxpr, ("scan", "while")) == 1


def check_ragged_fp8(rng, m, n, k, sizes, pair=("float8_e4m3fn", "float8_e4m3fn"), config=None,
                     out_dtype="float32", transpose_rhs=True, block=False, on_kernel=True,
                     scale_spread=4.0, **epilogue):
    """hopper_ragged_fp8_dot on random fp8 operands, its output poisoned, against
    ragged_fp8_reference64 within the fp8 bound of out_dtype (the helper the grouped fp8 tests
    share). Scales: one for lhs and one per expert, or with `block` per row and 128 of K and
    per expert's 128 x 128 block (grouped_fp8_block), spanning 2^-scale_spread ..
    2^scale_spread. on_kernel: also assert that the call lowers to the family's kernel (on a
    GPU; the reference lowering has none)."""
    groups = len(sizes)
    lhs, rhs = fp8_operand(rng, (m, k), pair[0]), fp8_operand(rng, (groups, n, k), pair[1])
    gs = jnp.asarray(sizes, jnp.int32)
    if block:
        ls = block_scales(rng, (m, -(-k // 128)), scale_spread)
        rs = block_scales(rng, (groups, -(-n // 128), -(-k // 128)), scale_spread)
    else:
        ls, rs = jnp.float32(0.25), jnp.asarray(rng.uniform(0.1, 2, groups), jnp.float32)
    extra = {}
    if epilogue.pop("with_bias", False):
        extra["bias"] = jnp.asarray(rng.standard_normal((groups, n)), jnp.float32)
    if epilogue.pop("with_residual", False):
        extra["residual"] = jnp.asarray(rng.standard_normal((m, n)), out_dtype)
    rhs_in = rhs if transpose_rhs else jnp.swapaxes(rhs, 1, 2)

    def fn(lhs, rhs, gs, ls, rs, *arrays):
        return jax_hopper.hopper_ragged_fp8_dot(lhs, rhs, gs, ls, rs, out_dtype=out_dtype,
                                                config=config, transpose_rhs=transpose_rhs,
                                                **dict(zip(extra, arrays)), **epilogue)

    if on_kernel:
        family = "grouped_fp8_block" if block else "grouped_fp8"
        assert f"@jax_hopper_gemm_{family}(" in jax.jit(fn).lower(
            lhs, rhs_in, gs, ls, rs, *extra.values()).as_text()
    out = poisoned_call(fn, (m, n), out_dtype, lhs, rhs_in, gs, ls, rs, *extra.values())
    want = ragged_fp8_reference64(lhs, rhs, sizes, ls, rs, **extra, **epilogue)
    err = rel_frob(out, want)
    bound = (REL_FROB_BOUND_FP8_BLOCK if block else REL_FROB_BOUND_FP8)[out_dtype]
    assert err < bound, (err, m, n, k, sizes, config)


def program_eqns(jaxpr):
    """Every equation of a jaxpr, sub-jaxprs included, and those of the launch each traced
    primitive lowers to (traced_primitive.inner_jaxprs: the grouped and gated products)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in traced_primitive.inner_jaxprs(eqn):
            yield from program_eqns(sub)


def saved_per_element(f, args, elements: int) -> list:
    """The dtypes of what jax.vjp of f(*args) keeps for its backward pass (the leaves of the
    VJP function) that hold `elements` values: an op's per-element residuals, e.g. a fused
    activation's pre-activation."""
    _, vjp = jax.vjp(f, *args)
    return [x.dtype for x in jax.tree_util.tree_leaves(vjp) if x.size == elements]


def count_eqns(jaxpr, names) -> int:
    """The equations of a (closed) jaxpr whose primitive is one of `names`, sub-jaxprs and
    grouped products' launches included (kernel calls: "hopper_gemm"; loops: "scan",
    "while")."""
    return sum(eqn.primitive.name in names for eqn in program_eqns(jaxpr))
