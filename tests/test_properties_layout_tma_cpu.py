"""Property-based checks (hypothesis) of jax_hopper.layout.validate's rules and of the TMA ops'
argument checks, without a GPU (test_properties_cpu.py: the GEMM's).

Each rule is restated here as an independent oracle; for random arguments the library must raise
ValueError exactly when the oracle finds a violation, with a message naming an offending argument,
and must return the right result when nothing is violated.
"""

import re

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_hopper import tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes
from jax_hopper.layout import SwizzleMode, validate
from jax_hopper.tma import SWIZZLES
from jax_hopper.tma.reference import smem_bytes_numpy
from properties import PROPERTY


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
