"""Property-based checks (hypothesis) of every argument check, without a GPU.

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
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gemm_helpers import REL_FROB_BOUND, reference64, rel_frob
from jax_hopper import GemmConfig, hopper_matmul, tma_copy, tma_multicast, tma_reduce_add
from jax_hopper import tma_smem_bytes
from jax_hopper.gemm import api
from jax_hopper.kernels import catalog
from jax_hopper.layout import SwizzleMode, validate
from jax_hopper.tma import SWIZZLES
from jax_hopper.tma.reference import smem_bytes_numpy

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
# Valid calls run the CPU reference (a compile per new shape): fewer examples.
RUNNING = settings(PROPERTY, max_examples=50)

ACTIVATIONS = [None, "relu", "gelu_tanh", "gelu", "silu"]


@contextmanager
def nothing_launched():
    """Fails the test if the call gets as far as running the product (kernel or fallback)."""
    def reached(*_, **__):
        raise AssertionError("the call reached the launch/fallback: validation missed the fault")
    with mock.patch.object(api.autodiff, "gemm", reached), mock.patch.object(api, "reference",
                                                                              reached):
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
                                       r"schedule\) = .* is not compiled"
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
    api._warned_fallback.clear()
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
    fell_back = [w for w in caught if "falls back" in str(w.message)]
    messages = [str(w.message) for w in caught]
    assert bool(fell_back) == bool(facts["unaddressable"]), (facts, messages)
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


# ------------------------------------------------------------------ jax_hopper.layout.validate

ELEM_BITS = st.sampled_from([1, 4, 8, 16, 24, 32, 64, 128])
MODES = st.sampled_from(list(SwizzleMode))


def tma_box_violation(box, bits, mode):
    """The oracle: which argument check_tma_box must blame, or None."""
    if bits not in (8, 16, 32, 64):
        return "elem_bits"
    if not 1 <= len(box) <= 5 or any(not 1 <= d <= 256 for d in box):
        return "box_dims"
    inner = box[0] * bits // 8
    if inner % 16 or (mode is not SwizzleMode.INTERLEAVE and inner > mode.span_bytes):
        return "box_dims"
    return None


@given(st.lists(st.one_of(st.integers(-2, 300), st.sampled_from([8, 16, 32, 64, 128, 256])),
                max_size=6), ELEM_BITS, MODES)
@PROPERTY
def test_check_tma_box_matches_the_rules(box, bits, mode):
    blame = tma_box_violation(box, bits, mode)
    if blame is None:
        validate.check_tma_box(box, bits, mode)
    else:
        with pytest.raises(ValueError, match=rf"^{blame}"):
            validate.check_tma_box(box, bits, mode)


def tma_global_violation(shape, strides, bits, align):
    if bits not in (8, 16, 32, 64):
        return "elem_bits"
    if not 1 <= len(shape) <= 5:
        return "shape"
    if len(strides) != len(shape):
        return "strides_bytes"
    if align % 16:
        return "base_alignment"
    if any(not 1 <= d < 2**32 for d in shape):
        return "shape"
    if strides[0] != bits // 8 or any(s % 16 or not 0 <= s < 2**40 for s in strides[1:]):
        return "strides_bytes"
    return None


@st.composite
def tma_globals(draw):
    bits = draw(ELEM_BITS)
    rank = draw(st.integers(0, 6))
    shape = [draw(st.one_of(st.integers(1, 300), st.sampled_from([0, 2**32 - 1, 2**32])))
             for _ in range(rank)]
    # Mostly row-major strides padded to 16 bytes (valid), sometimes perturbed.
    strides, step = [], max(bits // 8, 1)
    for d in shape:
        strides.append(step)
        step = -(-step * d // 16) * 16
    if draw(st.booleans()) and strides:
        i = draw(st.integers(0, len(strides) - 1))
        strides[i] = draw(st.one_of(st.integers(-16, 2**12), st.just(2**40)))
    if draw(st.integers(0, 9)) == 0:
        strides = strides[:-1]
    align = draw(st.sampled_from([16, 16, 32, 256, 8, 4]))
    return shape, strides, bits, align


@given(tma_globals())
@PROPERTY
def test_check_tma_global_matches_the_rules(case):
    shape, strides, bits, align = case
    blame = tma_global_violation(shape, strides, bits, align)
    if blame is None:
        validate.check_tma_global(shape, strides, bits, base_alignment=align)
    else:
        with pytest.raises(ValueError, match=rf"^{blame}"):
            validate.check_tma_global(shape, strides, bits, base_alignment=align)


@given(st.integers(0, 2 * validate.SMEM_LIMIT_BYTES),
       st.one_of(st.none(), st.integers(1, 2 * validate.SMEM_LIMIT_BYTES)))
@PROPERTY
def test_check_smem_budget_matches_the_rule(nbytes, limit):
    limit_ = validate.SMEM_LIMIT_BYTES if limit is None else limit
    kwargs = {} if limit is None else {"limit": limit}
    if nbytes <= limit_:
        validate.check_smem_budget(nbytes, **kwargs)
    else:
        with pytest.raises(ValueError, match=rf"^nbytes: {nbytes} bytes .* limit of {limit_}"):
            validate.check_smem_budget(nbytes, **kwargs)


def wgmma_violation(m, n, k, bits, integer):
    if bits not in (8, 16, 32):
        return "elem_bits"
    if m != 64:
        return "m"
    if k != 256 // bits:
        return "k"
    if integer:
        if bits != 8:
            return "integer"
        if not (n in (8, 16, 24, 32) or (48 <= n <= 256 and n % 16 == 0)):
            return "n"
    elif not (8 <= n <= 256 and n % 8 == 0):
        return "n"
    return None


@given(st.sampled_from([32, 64, 128]), st.integers(0, 300), st.sampled_from([8, 16, 32, 4]),
       ELEM_BITS, st.booleans())
@PROPERTY
def test_check_wgmma_shape_matches_the_rules(m, n, k, bits, integer):
    blame = wgmma_violation(m, n, k, bits, integer)
    if blame is None:
        validate.check_wgmma_shape(m, n, k, bits, integer=integer)
    else:
        with pytest.raises(ValueError, match=rf"^{blame}"):
            validate.check_wgmma_shape(m, n, k, bits, integer=integer)


@given(st.sampled_from(["K", "MN", "M", "k", ""]), ELEM_BITS)
@PROPERTY
def test_check_operand_major_matches_the_rules(major, bits):
    if major not in ("K", "MN"):
        blame = "major"
    elif bits not in (8, 16, 32):
        blame = "elem_bits"
    elif major == "MN" and bits != 16:
        blame = "major='MN' needs 16-bit"
    else:
        validate.check_operand_major(major, bits)
        return
    with pytest.raises(ValueError, match=rf"^{re.escape(blame)}"):
        validate.check_operand_major(major, bits)


@given(st.lists(st.integers(-5, 40), max_size=8), st.integers(1, 32))
@PROPERTY
def test_check_index_names_the_argument(values, extent):
    if all(0 <= v < extent for v in values):
        validate.check_index("row_index", np.asarray(values, dtype=np.int64), extent)
    else:
        with pytest.raises(ValueError, match=rf"^row_index must lie in \[0, {extent}\)"):
            validate.check_index("row_index", np.asarray(values, dtype=np.int64), extent)


# ------------------------------------------------------------------ TMA op argument checks

TMA_DTYPES = ["uint8", "int8", "bool", "float8_e4m3fn", "bfloat16", "float16", "int16", "int32",
              "float32", "complex64", "int4"]
REDUCE = ("float32", "float16", "bfloat16")
SMEM_LIMIT = 227 * 1024
# How each argument is named in the messages (x is the array of tma_copy/smem_bytes/multicast).
NAMED = {"x": r"\bx( of shape|\.dtype=| must be)", "dst": r"\bdst\b", "src": r"\bsrc\b",
         "box": r"\bbox\b", "swizzle": r"\bswizzle must be", "cluster_size": r"\bcluster_size\b",
         "output": r"\bthe output\b"}


def _round_up(x, m):
    return -(-x // m) * m


def tma_violations(op, shape, dtype, box, swizzle, cluster_size):
    """The oracle: the set of arguments that break a rule (empty when the call is valid)."""
    name = "dst" if op == "reduce_add" else "x"
    bad = set()
    bits = jnp.dtype(dtype).itemsize * 8 if dtype != "int4" else 4
    if op == "reduce_add" and dtype not in REDUCE:
        bad.add("dst")
    if len(shape) not in (2, 3) or bits not in (8, 16, 32, 64):
        return bad | {name}
    if len(box) != 2 or not all(isinstance(v, (int, np.integer)) for v in box):
        return bad | {"box"}
    if not isinstance(swizzle, SwizzleMode) and swizzle not in SWIZZLES:
        return bad | {"swizzle"}
    itemsize = bits // 8
    mode = swizzle if isinstance(swizzle, SwizzleMode) else SWIZZLES[swizzle]
    span = mode.span_bytes if mode is not SwizzleMode.INTERLEAVE else None
    rows_b, cols_b = box
    inner = cols_b * itemsize
    # A swizzled box is exactly one swizzle span wide (jax_hopper/tma/boxes.py, box_grid).
    if not (1 <= rows_b <= 256 and 1 <= cols_b <= 256) or inner % 16 or (span and inner != span):
        return bad | {"box"}

    def unaddressable(shape):
        *lead, rows, cols = shape
        batch = int(np.prod(lead)) if lead else 1
        pitch, plane = cols * itemsize, rows * cols * itemsize
        return (min(rows, cols, batch) < 1 or (rows > 1 and pitch % 16)
                or (batch > 1 and plane % 16))

    if unaddressable(shape):
        bad.add(name)
    box_bytes = rows_b * inner
    if _round_up(box_bytes, 128) + 1024 + 16 > SMEM_LIMIT:  # + the kernels' static mbarrier
        bad.add("box")
    if op == "multicast":
        if cluster_size not in (2, 4):
            bad.add("cluster_size")
        elif rows_b % cluster_size:
            bad |= {"box", "cluster_size"}
        elif cluster_size * _round_up(box_bytes // cluster_size, 1024) + 1024 + 16 > SMEM_LIMIT:
            bad.add("box")
        elif unaddressable((cluster_size, *shape)):
            bad.add("output")
    return bad


def _random_array(rng, shape, dtype):
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.name == "int4":
        return jnp.zeros(shape, dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return rng.integers(-100, 100, size=shape).astype(dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


@st.composite
def tma_calls(draw):
    """Half the time a call built to be valid, otherwise one with a single argument broken (the
    oracle, not the generator, decides what is valid: a "valid" call may still break a rule)."""
    op = draw(st.sampled_from(["copy", "smem_bytes", "multicast", "reduce_add"]))
    valid_dtypes = [d for d in TMA_DTYPES if d != "int4" and (op != "reduce_add" or d in REDUCE)]
    dtype = draw(st.sampled_from(valid_dtypes))
    itemsize = jnp.dtype(dtype).itemsize
    unit = 16 // itemsize
    swizzle = draw(st.sampled_from(list(SWIZZLES)))
    span = SWIZZLES[swizzle].span_bytes if swizzle != "none" else 256
    cluster_size = draw(st.sampled_from([2, 4])) if op == "multicast" else None
    rows = draw(st.integers(1, 70))
    shape = (rows, unit * draw(st.integers(1, 12)))
    if draw(st.booleans()):
        shape = (draw(st.integers(1, 3)), *shape)
    # Box rows: often a multiple of the cluster size (multicast), sometimes not.
    box_rows = draw(st.sampled_from([1, 2, 3, 5, 8, 12, 16, 64]))
    if draw(st.integers(0, 3)):
        box_rows *= cluster_size or 1
    # Swizzled boxes must be one span wide: mostly that, sometimes narrower (a broken call).
    widths = [w for w in (16, 32, 64, 128, 256) if w <= span]
    width = span if swizzle != "none" and draw(st.integers(0, 3)) else draw(st.sampled_from(widths))
    box_cols = width // itemsize
    box = (box_rows, box_cols)

    broken = draw(st.sampled_from(["nothing"] * 6 + [
        "dtype", "rank", "empty", "pitch", "box_rows", "box_cols", "box_form", "swizzle",
        "big_box"] + ["cluster_size"] * (3 if op == "multicast" else 0)))
    if broken == "dtype":
        dtype = draw(st.sampled_from(["int4", *[d for d in TMA_DTYPES if d != dtype]]))
    elif broken == "rank":
        shape = draw(st.sampled_from([shape[-1:], (2, 1, *shape[-2:])]))
    elif broken == "empty":
        shape = tuple(0 if i == draw(st.integers(0, len(shape) - 1)) else d
                      for i, d in enumerate(shape))
    elif broken == "pitch":
        shape = (*shape[:-1], shape[-1] + draw(st.integers(1, 15)))
    elif broken == "box_rows":
        box = (draw(st.sampled_from([0, -1, 257, 300, 5, 7])), box_cols)
    elif broken == "box_cols":
        box = (box_rows, draw(st.integers(-1, 300)))
    elif broken == "box_form":
        box = draw(st.sampled_from([(box_rows,), (box_rows, box_cols, 1),
                                    (float(box_rows), box_cols), (str(box_rows), box_cols)]))
    elif broken == "swizzle":
        swizzle = draw(st.sampled_from(["256B", "128", "None", "16B", SwizzleMode.B64]))
    elif broken == "cluster_size":
        cluster_size = draw(st.sampled_from([3, 3, 0, 1, 8, "2"]))
        box = (24, box_cols)  # divisible by 1, 2, 3, 4 and 8: only the size itself is wrong
    elif broken == "big_box":
        box = (256, draw(st.sampled_from([128, 256])))
        swizzle = "none"
    seed = draw(st.integers(0, 2**32 - 1))
    return op, shape, dtype, box, swizzle, cluster_size, seed


def _call_tma(op, x, src, box, swizzle, cluster_size):
    if op == "copy":
        return tma_copy(x, box=box, swizzle=swizzle)
    if op == "smem_bytes":
        return tma_smem_bytes(x, box=box, swizzle=swizzle)
    if op == "multicast":
        return tma_multicast(x, box=box, cluster_size=cluster_size, swizzle=swizzle)
    return tma_reduce_add(x, src, box=box, swizzle=swizzle)


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


@given(tma_calls())
@settings(PROPERTY, max_examples=300)
def test_tma_ops_raise_exactly_when_a_rule_breaks(call):
    op, shape, dtype, box, swizzle, cluster_size, seed = call
    rng = np.random.default_rng(seed)
    x = _random_array(rng, shape, dtype)
    src = _random_array(rng, shape, dtype) if op == "reduce_add" else None
    bad = tma_violations(op, shape, dtype, box, swizzle, cluster_size)
    if bad:
        with pytest.raises(ValueError) as info:
            _call_tma(op, x, src, box, swizzle, cluster_size)
        message = str(info.value)
        assert any(re.search(NAMED[arg], message) for arg in bad), (bad, message)
        return
    out = _call_tma(op, x, src, box, swizzle, cluster_size)
    if op == "copy":
        want = np.asarray(x)
    elif op == "smem_bytes":
        want = smem_bytes_numpy(np.asarray(x), box, swizzle)  # the byte-level model
    elif op == "multicast":
        want = np.broadcast_to(np.asarray(x), (cluster_size, *shape))
    else:
        want = (np.asarray(x).astype(np.float32) + np.asarray(src).astype(np.float32)).astype(
            jnp.dtype(dtype))
    assert out.shape == want.shape and out.dtype == want.dtype
    if jnp.dtype(dtype) == jnp.bool_:
        assert np.array_equal(np.asarray(out), want)
    else:
        assert np.array_equal(_bits(out), _bits(np.ascontiguousarray(want)))


@given(st.sampled_from(REDUCE), st.sampled_from(REDUCE), st.integers(1, 40), st.integers(1, 40))
@settings(PROPERTY, max_examples=40)
def test_reduce_add_refuses_mismatched_src(dst_dtype, src_dtype, rows, extra_rows):
    dst = np.zeros((rows, 64), jnp.dtype(dst_dtype))
    src = np.zeros((rows + extra_rows, 64), jnp.dtype(src_dtype))
    with pytest.raises(ValueError, match=r"^src \(.*\) must match dst \(.*\) in shape and dtype"):
        tma_reduce_add(dst, src, box=(8, 8))
