"""Property-based checks (hypothesis) of the GEMM's argument checks, without a GPU:
GemmConfig.validate and hopper_matmul's. (test_properties_layout_tma_cpu.py: the layout rules
and the TMA ops.)

Each rule is restated here as an independent oracle; for random arguments the library must raise
ValueError exactly when the oracle finds a violation, with a message naming an offending argument,
before anything is launched, and must return the right result when nothing is violated.
"""

import dataclasses
import re
import warnings
from contextlib import contextmanager
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gemm_helpers import REL_FROB_BOUND, reference64, rel_frob
from jax_hopper import GemmConfig, hopper_matmul
from jax_hopper.gemm import api
from jax_hopper.kernels import catalog
from properties import PROPERTY, RUNNING

ACTIVATIONS = [None, "relu", "gelu_tanh", "gelu", "silu"]


@contextmanager
def nothing_launched():
    """Fails the test if the call gets as far as running the product (kernel or fallback)."""
    def reached(*_, **__):
        raise AssertionError("the call reached the launch/fallback: validation missed the fault")
    with mock.patch.object(api.autodiff, "gemm", reached), \
            mock.patch.object(api, "empty_call", reached):
        yield


# ------------------------------------------------------------------ GemmConfig.validate

compiled_tiles = st.sampled_from(catalog.TILE_SHAPES)
input_dtypes = st.sampled_from(catalog.INPUT_DTYPES)


@st.composite
def valid_configs(draw):
    tile = draw(compiled_tiles)
    cm, cn = draw(st.sampled_from(catalog.CLUSTER_SHAPES))
    a_mn, b_mn = draw(st.booleans()), draw(st.booleans())
    cfg = GemmConfig.for_tile(tile, cluster_m=cm, cluster_n=cn,
                              raster=draw(st.sampled_from(catalog.RASTERS)),
                              group_size=draw(st.integers(1, 1024)),
                              swizzle=draw(st.sampled_from(catalog.SWIZZLES)),
                              a_mn_major=draw(st.sampled_from([None, a_mn])),
                              b_mn_major=draw(st.sampled_from([None, b_mn])))
    return cfg, draw(input_dtypes), a_mn, b_mn


@given(valid_configs())
@PROPERTY
def test_every_compiled_config_validates(case):
    cfg, dtype, a_mn, b_mn = case
    cfg.validate(dtype, a_mn, b_mn)


COMPILED = {(t.block_m, t.block_n, t.block_k, t.stages) for t in catalog.TILE_SHAPES}
tile_sizes = st.sampled_from([0, 1, 32, 64, 96, 128, 192, 256, 512])


@st.composite
def broken_configs(draw):
    """A valid config with one field broken; returns (config, dtype, a_mn, b_mn, message regex)."""
    cfg, dtype, a_mn, b_mn = draw(valid_configs())
    field = draw(st.sampled_from(["tile", "schedule", "cluster", "raster", "group_size",
                                  "swizzle", "dtype", "a_mn_major", "b_mn_major"]))
    if field == "tile":
        tile = (draw(tile_sizes), draw(tile_sizes), draw(tile_sizes), draw(st.integers(0, 9)))
        assume(tile not in COMPILED)
        cfg = GemmConfig(*tile, cluster_m=cfg.cluster_m, cluster_n=cfg.cluster_n)
        return cfg, dtype, a_mn, b_mn, r"^config: \(block_m, block_n, block_k, stages, " \
                                       r"schedule, ctas_per_sm\) = .* is not compiled"
    if field == "schedule":
        # An unknown schedule; a known one at a tile it is not compiled for; or stream-K
        # under a schedule that computes whole tiles.
        case = draw(st.sampled_from(["unknown", "tile", "stream_k"]))
        if case == "unknown":
            name = draw(st.text(max_size=12))
            assume(name not in catalog.SCHEDULES)
            return GemmConfig(schedule=name), dtype, a_mn, b_mn, r"^config: schedule="
        whole = [s for s, d in catalog.SCHEDULES.items() if not d.stream_k]
        name = draw(st.sampled_from(whole))
        if case == "tile":
            tile = draw(st.sampled_from([t for t in catalog.TILE_SHAPES if t.schedule != name]))
            assume(dataclasses.replace(tile, schedule=name) not in catalog.TILE_SHAPES)
            return (GemmConfig.for_tile(dataclasses.replace(tile, schedule=name)), dtype, a_mn,
                    b_mn, r"^config: \(block_m, .* is not compiled")
        cfg = GemmConfig.for_tile(draw(st.sampled_from(
            [t for t in catalog.TILE_SHAPES if t.schedule == name])), stream_k=True)
        return cfg, dtype, a_mn, b_mn, r"^config: stream_k=True needs a schedule"
    if field == "cluster":
        cluster = (draw(st.integers(0, 4)), draw(st.integers(0, 4)))
        assume(cluster not in catalog.CLUSTER_SHAPES)
        cfg = GemmConfig(cluster_m=cluster[0], cluster_n=cluster[1])
        return cfg, dtype, a_mn, b_mn, r"^config: cluster \(cluster_m, cluster_n\)"
    if field == "raster":
        raster = draw(st.text(max_size=6))
        assume(raster not in catalog.RASTERS)
        return GemmConfig(raster=raster), dtype, a_mn, b_mn, r"^config: raster="
    if field == "group_size":
        size = draw(st.one_of(st.integers(max_value=0), st.integers(min_value=1025),
                              st.floats(allow_nan=True), st.text(max_size=3), st.none()))
        return GemmConfig(group_size=size), dtype, a_mn, b_mn, r"^config: group_size="
    if field == "swizzle":
        swizzle = draw(st.one_of(st.sampled_from(["64B", "32B", "none", "128b", "128"]),
                                 st.text(max_size=5)))
        assume(swizzle not in catalog.SWIZZLES)
        return GemmConfig(swizzle=swizzle), dtype, a_mn, b_mn, r"^config: swizzle="
    if field == "dtype":
        bad = draw(st.sampled_from(["float32", "float64", "int8", "float8_e4m3fn", "int32"]))
        return cfg, bad, a_mn, b_mn, r"^config: input dtype"
    # A major that contradicts the call's operand layout.
    if field == "a_mn_major":
        return GemmConfig(a_mn_major=not a_mn), dtype, a_mn, b_mn, r"^config: a_mn_major="
    return GemmConfig(b_mn_major=not b_mn), dtype, a_mn, b_mn, r"^config: b_mn_major="


@given(broken_configs())
@PROPERTY
def test_broken_config_is_refused_naming_the_field(case):
    cfg, dtype, a_mn, b_mn, message = case
    with pytest.raises(ValueError, match=message):
        cfg.validate(dtype, a_mn, b_mn)


# ------------------------------------------------------------------ hopper_matmul argument checks

@st.composite
def matmul_calls(draw, max_dim=40):
    """A valid call: (a, b, kwargs, facts) with small random shapes, layouts, batch, epilogue."""
    dtype = draw(input_dtypes)
    m, n, k = (draw(st.integers(1, max_dim)) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    batch = draw(st.sampled_from(["none", "both", "a_only", "b_only", "broadcast"]))
    lead_a, lead_b = {"none": ((), ()), "both": ((2,), (2,)), "a_only": ((3,), ()),
                      "b_only": ((), (2,)), "broadcast": ((2, 1), (3,))}[batch]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)

    def operand(shape):  # numpy (ml_dtypes) arrays: no per-shape compile to make them
        return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(dtype))

    a = operand((*lead_a, k, m) if ta else (*lead_a, m, k))
    b = operand((*lead_b, n, k) if tb else (*lead_b, k, n))
    out_dtype = draw(st.sampled_from([None, *catalog.OUTPUT_DTYPES]))
    kwargs = dict(transpose_a=ta, transpose_b=tb, out_dtype=out_dtype,
                  activation=draw(st.sampled_from(ACTIVATIONS)))
    out_shape = (*np.broadcast_shapes(lead_a, lead_b), m, n)
    if draw(st.booleans()):
        kwargs["bias"] = operand((n,))
    if draw(st.booleans()):
        res_shape = draw(st.sampled_from([out_shape, out_shape[-2:], (1, n), (m, 1)]))
        kwargs["residual"] = operand(res_shape)
        kwargs["beta"] = draw(st.sampled_from([1.0, -0.5, 2.0]))
    kwargs["alpha"] = draw(st.sampled_from([1.0, 0.25, -2.0]))
    if draw(st.booleans()):
        cfg, *_ = draw(valid_configs())
        kwargs["config"] = GemmConfig(**{**cfg.__dict__, "a_mn_major": None, "b_mn_major": None})
    # TMA can address an operand when its row pitch (last dimension) is a multiple of 16 bytes.
    unaddressable = [name for name, x in (("a", a), ("b", b)) if (x.shape[-1] * 2) % 16]
    facts = dict(m=m, n=n, k=k, out_shape=out_shape, dtype=dtype, unaddressable=unaddressable)
    return a, b, kwargs, facts


@given(matmul_calls(), st.booleans())
@RUNNING
def test_valid_calls_run_and_match_float64(call, strict):
    a, b, kwargs, facts = call
    arrays = {k: v for k, v in kwargs.items() if k in ("bias", "residual")}
    static = {k: v for k, v in kwargs.items() if k not in arrays}
    # One jitted program per example (one compile instead of one per eager op).
    call = jax.jit(lambda a, b, arrays: hopper_matmul(a, b, strict=strict, **static, **arrays))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if strict and facts["unaddressable"]:
            # strict=True refuses exactly the operands TMA cannot address, naming the operand.
            name = facts["unaddressable"][0]
            with nothing_launched(), pytest.raises(
                    ValueError, match=rf"strict=True.*{name}'s rows are \d+ bytes apart"):
                call(a, b, arrays)
            return
        out = call(a, b, arrays)
    messages = [str(w.message) for w in caught]
    assert not any("falls back" in m for m in messages), (facts, messages)
    out_dtype = jnp.dtype(kwargs["out_dtype"] or facts["dtype"])
    assert out.shape == facts["out_shape"] and out.dtype == out_dtype
    ref = reference64(a, b, **{k: v for k, v in kwargs.items()
                               if k not in ("out_dtype", "config")})
    assert rel_frob(out, ref) < REL_FROB_BOUND[out_dtype.name]


BAD_DTYPES = ["float32", "int8", "int32", "uint8", "complex64", "float8_e4m3fn", "bool"]


@st.composite
def faulty_calls(draw):
    """A valid call with one fault injected: (a, b, kwargs, message regex)."""
    a, b, kwargs, facts = draw(matmul_calls(max_dim=24))
    m, n, k = facts["m"], facts["n"], facts["k"]
    ta, tb = kwargs["transpose_a"], kwargs["transpose_b"]
    fault = draw(st.sampled_from(["a_dtype", "b_dtype", "mixed_dtypes", "contraction",
                                  "out_dtype", "preferred_disagrees", "bias", "residual",
                                  "activation", "batch", "scalar", "vector_transpose",
                                  "config_type", "config", "config_major", "strict_pitch"]))
    if fault == "a_dtype":
        a = a.astype(jnp.dtype(draw(st.sampled_from(BAD_DTYPES))))
        return a, b, kwargs, rf"^a\.dtype={a.dtype} is not supported"
    if fault == "b_dtype":
        b = b.astype(jnp.dtype(draw(st.sampled_from(BAD_DTYPES))))
        return a, b, kwargs, rf"^b\.dtype={b.dtype} is not supported"
    if fault == "mixed_dtypes":
        other = [d for d in catalog.INPUT_DTYPES if d != a.dtype][0]
        return a, b.astype(jnp.dtype(other)), kwargs, r"^a\.dtype=\w+ and b\.dtype=\w+ differ"
    if fault == "contraction":
        extra = draw(st.integers(1, 9))
        # Grow K of op(b) only: b is (N, K) with transpose_b, else (K, N).
        if tb:
            b = np.concatenate([b] + [b[..., :1]] * extra, axis=-1)
        else:
            b = np.concatenate([b] + [b[..., :1, :]] * extra, axis=-2)
        return a, b, kwargs, r"^contraction dimensions differ: op\(a\) is \(\d+, \d+\) " \
                             r"and op\(b\) is \(\d+, \d+\)"
    if fault == "out_dtype":
        kwargs["out_dtype"] = draw(st.sampled_from(["int8", "float64", "int32", "uint8",
                                                    "float8_e4m3fn", "complex64"]))
        return a, b, kwargs, r"^out_dtype=\w+ must be one of"
    if fault == "preferred_disagrees":
        out, pref = draw(st.permutations(catalog.OUTPUT_DTYPES))[:2]
        kwargs.update(out_dtype=out, preferred_element_type=pref)
        return a, b, kwargs, r"^out_dtype and preferred_element_type disagree"
    if fault == "bias":
        shape = draw(st.sampled_from([(n + 1,), (1, n), (n, 1), (), (max(n - 1, 0),)]))
        assume(shape != (n,))
        kwargs["bias"] = np.ones(shape, np.float32)
        return a, b, kwargs, rf"^bias\.shape=.* must be \(N,\) = \({n},\)"
    if fault == "residual":
        shape = draw(st.sampled_from([(m + 1, n), (m, n + 2), (5, m, n), (n,) if n != m else (2,)]))
        if shape == (n,):  # (n,) broadcasts fine: make it the wrong length
            shape = (n + 1,)
        kwargs["residual"] = np.ones(shape, np.float32)
        return a, b, kwargs, r"^residual\.shape=.* must broadcast to the output shape"
    if fault == "activation":
        kwargs["activation"] = draw(st.one_of(
            st.sampled_from(["tanh", "RELU", "gelu_erf", "sigmoid", ""]), st.integers(0, 5)))
        return a, b, kwargs, r"^activation=.* must be one of"
    if fault == "batch":
        a = np.broadcast_to(a.reshape(-1, *a.shape[-2:])[0], (2, *a.shape[-2:]))
        b = np.broadcast_to(b.reshape(-1, *b.shape[-2:])[0], (3, *b.shape[-2:]))
        return a, b, kwargs, r"^batch dimensions of a \(2,\) and b \(3,\) do not broadcast"
    if fault == "scalar":
        a = a.reshape(-1)[0]
        kwargs.update(transpose_a=False, bias=None, residual=None)
        return a, b, kwargs, r"^a and b must have at least 1 dimension"
    if fault == "vector_transpose":
        kwargs.update(transpose_a=True, transpose_b=False, bias=None, residual=None)
        return a.reshape(-1)[:k], b, kwargs, r"^transpose_a needs a at least 2-D"
    if fault == "config_type":
        kwargs["config"] = draw(st.sampled_from([{"block_m": 128}, "128x256", (128, 256, 64, 4)]))
        return a, b, kwargs, r"^config must be a GemmConfig"
    if fault == "config":
        cfg, _, _, _, message = draw(broken_configs().filter(
            lambda c: not re.search("dtype|mn_major", c[4])))
        kwargs["config"] = cfg
        return a, b, kwargs, message
    if fault == "config_major":
        kwargs["config"] = GemmConfig(a_mn_major=not ta)
        return a, b, kwargs, r"^config: a_mn_major=.* contradicts the call"
    # strict_pitch: make a's pitch unaddressable.
    kwargs.update(transpose_a=False, strict=True)
    a = np.ones((m, 8 * draw(st.integers(0, 3)) + draw(st.integers(1, 7))), a.dtype)
    kb = a.shape[1]
    b = np.ones((n, kb) if tb else (kb, n), a.dtype)
    kwargs.pop("residual", None)
    return a, b, kwargs, r"^hopper_matmul\(strict=True\): a's rows are \d+ bytes apart; TMA " \
                         r"needs a multiple of 16"


@given(faulty_calls())
@PROPERTY
def test_faulty_calls_raise_naming_the_argument_before_launch(call):
    a, b, kwargs, message = call
    with nothing_launched(), pytest.raises(ValueError, match=message):
        hopper_matmul(a, b, **kwargs)


@given(faulty_calls())
@settings(PROPERTY, max_examples=40)
def test_faulty_calls_raise_at_trace_time_under_jit(call):
    # The checks run on shapes and dtypes only, so jit raises them while tracing.
    a, b, kwargs, message = call
    arrays = {k: v for k, v in kwargs.items() if k in ("bias", "residual") and v is not None}
    static = {k: v for k, v in kwargs.items() if k not in arrays}

    def f(a, b, arrays):
        return hopper_matmul(a, b, **static, **arrays)
    with nothing_launched(), pytest.raises(ValueError, match=message):
        jax.jit(f)(a, b, arrays)
