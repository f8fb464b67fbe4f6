"""TMA ops without a GPU: argument validation, the reference results, and the CUDA lowering."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_hopper import tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes
from jax_hopper.layout import SwizzleMode, tma_box_smem_bytes
from jax_hopper.tma import SWIZZLES
from jax_hopper.tma.reference import smem_bytes_numpy

# 1-, 2-, 4- and 8-byte types, including ones that need care to view as bytes (bool, complex).
DTYPES = ["uint8", "bool", "float8_e4m3fn", "bfloat16", "float16", "int32", "float32",
          "complex64"]
REDUCE_DTYPES = ["float32", "float16", "bfloat16"]


def random_array(rng, shape, dtype):
    """Random bits for integer/bool types, random normal for floats (never NaN)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if jnp.issubdtype(dtype, jnp.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def bits(x):
    """An array's bytes as unsigned integers, so comparisons are bitwise."""
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.itemsize in (1, 2, 4, 8) else x


# A swizzled box is exactly one span wide (jax_hopper/tma/boxes.py: box_grid); only swizzle
# "none" takes other widths: any multiple of 16 bytes up to 256 elements.
def wide_cols(mode, dtype):
    """Columns of a box as wide as the swizzle allows (256 bytes without swizzle)."""
    span = SWIZZLES[mode].span_bytes if mode != "none" else 256
    return span // jnp.dtype(dtype).itemsize


def narrow_cols(mode, dtype):
    """Columns of the narrowest legal box: one 16-byte chunk without swizzle, else one span."""
    inner = SWIZZLES[mode].span_bytes if mode != "none" else 16
    return inner // jnp.dtype(dtype).itemsize


def smem_boxes(mode, dtype, rows=(3, 8, 64)):
    """Boxes to hold tma_smem_bytes to the model with: one span wide at a few row counts when
    swizzled; without swizzle one chunk, an odd number of chunks (48 bytes) and 256 bytes."""
    widths = [SWIZZLES[mode].span_bytes] if mode != "none" else [16, 48, 256]
    return [(r, inner // jnp.dtype(dtype).itemsize) for inner in widths for r in rows]


def edge_shapes(dtype):
    """A single element, odd row counts, widths that are no multiple of any box, and a batch;
    every row pitch a multiple of 16 bytes as TMA needs."""
    unit = 16 // jnp.dtype(dtype).itemsize
    return [(1, 1), (37, 25 * unit), (300, 65 * unit), (3, 65, 17 * unit)]


# ---- validation: each error names the argument and the rule ---------------------------------

def _copy(shape, dtype="float32", **kw):
    kw.setdefault("box", (8, 4))
    kw.setdefault("swizzle", "none")
    return tma_copy(jnp.zeros(shape, dtype), **kw)


@pytest.mark.parametrize("call, message", [
    (lambda: _copy((16,)), r"x must be 2-D \(rows, cols\) or 3-D"),
    (lambda: _copy((2, 2, 8, 4)), r"x must be 2-D"),
    (lambda: _copy((8, 32), "int4", box=(8, 32)), r"x\.dtype=int4 \(4-bit\) is not supported"),
    (lambda: _copy((8, 4), box=(8,)), r"box must be a \(rows, cols\) pair"),
    (lambda: _copy((8, 4), box=(0, 4)), r"box=\(rows=0, cols=4\).*box_dims\[1\] must be in 1..256"),
    (lambda: _copy((8, 4), box=(257, 4)), r"box_dims\[1\] must be in 1..256"),
    (lambda: _copy((8, 4), box=(8, 3)), r"box_dims\[0\] must span a multiple of 16 bytes"),
    (lambda: _copy((8, 64), box=(8, 64), swizzle="128B"),
     r"spans 256 bytes, more than the 128-byte swizzle"),
    (lambda: _copy((8, 64), box=(8, 16), swizzle="128B"),
     r"inner dimension must be exactly one swizzle span, 128 bytes = 32 columns"),
    (lambda: _copy((8, 64), box=(8, 32), swizzle="64B"), r"spans 128 bytes, more than the 64"),
    (lambda: _copy((8, 4), swizzle="256B"), r"swizzle must be one of '128B', '64B'"),
    (lambda: _copy((8, 12), "float16", box=(8, 8)),
     (r"x of shape \(8, 12\) cannot be addressed by TMA: strides_bytes\[1\] must be a multiple "
      r"of 16.*last dimension must be a multiple of 8 for float16")),
    (lambda: _copy((3, 1, 2)), r"x of shape \(3, 1, 2\).*strides_bytes\[2\] must be a multiple"),
    (lambda: _copy((0, 4)), r"x of shape \(0, 4\).*shape\[1\] must be in 1"),
    (lambda: _copy((8, 256), box=(256, 256), swizzle="none"),
     r"box=\(rows=256, cols=256\) does not fit in shared memory"),
    # Every op refuses a swizzled box narrower than its span (the rule lives in box_grid).
    (lambda: tma_smem_bytes(jnp.zeros((8, 32), jnp.float16), box=(3, 16), swizzle="64B"),
     (r"box=\(rows=3, cols=16\) for float16 with swizzle B64: the box's inner dimension must be "
      r"exactly one swizzle span, 64 bytes = 32 columns \(got 32 bytes\)")),
    (lambda: tma_multicast(jnp.zeros((8, 32), jnp.uint8), box=(8, 16), swizzle="32B"),
     r"exactly one swizzle span, 32 bytes = 32 columns \(got 16 bytes\)"),
    (lambda: tma_reduce_add(jnp.zeros((8, 64)), jnp.zeros((8, 64)), box=(8, 16)),
     r"exactly one swizzle span, 128 bytes = 32 columns \(got 64 bytes\)"),
    (lambda: tma_multicast(jnp.zeros((8, 4)), box=(8, 4), cluster_size=3, swizzle="none"),
     r"cluster_size must be one of \(2, 4\), got 3"),
    (lambda: tma_multicast(jnp.zeros((8, 4)), box=(6, 4), cluster_size=4, swizzle="none"),
     r"box rows \(6\) must be divisible by cluster_size \(4\)"),
    (lambda: tma_multicast(jnp.zeros((1, 2)), box=(8, 4), swizzle="none"),
     (r"the output \(cluster_size, \*x\.shape\) of shape \(2, 1, 2\) cannot be addressed.*"
      r"the 1 x 2 planes of the output .* are 8 bytes apart")),
    (lambda: tma_reduce_add(jnp.zeros((8, 4), jnp.int32), jnp.zeros((8, 4), jnp.int32), box=(8, 4)),
     r"dst\.dtype=int32 is not supported: TMA reduce-add takes float32, float16, bfloat16"),
    (lambda: tma_reduce_add(jnp.zeros((8, 4)), jnp.zeros((8, 8)), box=(8, 4)),
     r"src \(\(8, 8\), float32\) must match dst \(\(8, 4\), float32\)"),
    (lambda: tma_reduce_add(jnp.zeros((8, 4)), jnp.zeros((8, 4), jnp.float16), box=(8, 4)),
     r"src .* must match dst"),
    (lambda: tma_reduce_add(jnp.zeros((8, 2)), jnp.zeros((8, 2)), box=(8, 4), swizzle="none"),
     r"dst of shape \(8, 2\) cannot be addressed"),
])
def test_validation_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_none_swizzle_allows_rows_past_the_span():
    # 256 float32 = 1024 bytes per box row: only legal without swizzle.
    x = jnp.arange(2 * 256, dtype=jnp.float32).reshape(2, 256)
    assert np.array_equal(tma_copy(x, box=(2, 256), swizzle="none"), x)
    with pytest.raises(ValueError, match="more than the 32-byte swizzle span"):
        tma_copy(x, box=(2, 256), swizzle="32B")


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "float32", "complex64"])
@pytest.mark.parametrize("mode", ["128B", "64B", "32B"])
def test_swizzled_boxes_are_exactly_one_span_wide(mode, dtype):
    span, itemsize = SWIZZLES[mode].span_bytes, jnp.dtype(dtype).itemsize
    x = jnp.zeros((8, 2 * span // itemsize), dtype)
    for rows in (1, 5, 8, 256):
        assert tma_copy(x, box=(rows, span // itemsize), swizzle=mode).shape == x.shape
        for inner in range(16, span, 16):
            box = (rows, inner // itemsize)
            with pytest.raises(ValueError, match=(rf"inner dimension must be exactly one swizzle "
                                                  rf"span, {span} bytes = {span // itemsize} "
                                                  rf"columns \(got {inner} bytes\)")):
                tma_copy(x, box=box, swizzle=mode)
            # The same width without swizzle is legal.
            assert tma_copy(x, box=box, swizzle="none").shape == x.shape


# ---- reference results -----------------------------------------------------------------------

@pytest.mark.parametrize("mode", list(SWIZZLES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_is_identity(rng, dtype, mode):
    for box in [(64, wide_cols(mode, dtype)), (5, narrow_cols(mode, dtype))]:
        for shape in edge_shapes(dtype):
            x = random_array(rng, shape, dtype)
            out = tma_copy(x, box=box, swizzle=mode)
            assert out.shape == x.shape and out.dtype == x.dtype
            assert np.array_equal(bits(out), bits(x)), (box, shape)


@pytest.mark.parametrize("mode", list(SWIZZLES))
@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "float32", "complex64"])
def test_smem_bytes_matches_the_model(rng, dtype, mode):
    itemsize = jnp.dtype(dtype).itemsize
    for box in smem_boxes(mode, dtype):
        # Two and a bit boxes wide, 37 rows: edge boxes are partly out of bounds (zero-filled).
        x = random_array(rng, (3, 37, 2 * box[1] + 16 // itemsize), dtype)
        out = tma_smem_bytes(x, box=box, swizzle=mode)
        want = smem_bytes_numpy(np.asarray(x), box, mode)
        assert out.dtype == jnp.uint8 and out.shape == want.shape
        assert np.array_equal(out, want), box


def test_smem_bytes_zero_fills_past_the_edge_and_swizzles():
    # One 8 x 64 uint16 box over a 5 x 8 array: rows 5..7 and cols 8..63 are zeros; row r's
    # 16-byte chunk c lands at chunk c ^ r (128B swizzle).
    x = np.arange(1, 41, dtype=np.uint16).reshape(5, 8)
    out = np.asarray(tma_smem_bytes(x, box=(8, 64), swizzle="128B"))
    assert out.shape == (1, 1, 1024)
    words = out[0, 0].view(np.uint16).reshape(8, 8, 8)  # (row, chunk, element)
    for r in range(8):
        for c in range(8):
            expect = x[r] if (r < 5 and c == 0) else np.zeros(8, np.uint16)
            assert np.array_equal(words[r, c ^ r], expect), (r, c)


def test_smem_bytes_of_a_2d_array_has_no_batch_axis(rng):
    x = random_array(rng, (20, 96), "float16")
    out = tma_smem_bytes(x, box=(8, 32), swizzle="64B")
    assert out.shape == (3, 3, 8 * 64)
    assert np.array_equal(out[1, 2], tma_box_smem_bytes(np.asarray(x)[8:16, 64:96],
                                                        SwizzleMode.B64))


@pytest.mark.parametrize("cluster_size", [2, 4])
@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "complex64"])
@pytest.mark.parametrize("mode", ["64B", "none"])
def test_multicast_stacks_copies(rng, mode, dtype, cluster_size):
    for box in [(16 * cluster_size, wide_cols(mode, dtype)),
                (cluster_size, narrow_cols(mode, dtype))]:
        # (1, 1) is left out: its copies would sit itemsize bytes apart (see
        # test_validation_errors).
        for shape in edge_shapes(dtype)[1:]:
            x = random_array(rng, shape, dtype)
            out = tma_multicast(x, box=box, cluster_size=cluster_size, swizzle=mode)
            assert out.shape == (cluster_size, *shape)
            for copy in out:
                assert np.array_equal(bits(copy), bits(x)), (box, shape)


@pytest.mark.parametrize("mode", list(SWIZZLES))
@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
def test_reduce_add_is_the_sum(rng, dtype, mode):
    dst, src = (random_array(rng, (3, 65, 136), dtype) for _ in range(2))
    for box in [(16, wide_cols(mode, dtype)), (5, narrow_cols(mode, dtype))]:
        out = tma_reduce_add(dst, src, box=box, swizzle=mode)
        assert out.dtype == jnp.dtype(dtype)
        assert np.array_equal(bits(out), bits(dst + src)), box


# ---- under jit, and what reaches each platform ----------------------------------------------

def _ops(box=(8, 64)):  # 128 bytes of bfloat16: one span of the default 128B swizzle
    return {
        "jax_hopper_tma_copy": lambda x: tma_copy(x, box=box),
        "jax_hopper_tma_smem_bytes": lambda x: tma_smem_bytes(x, box=box),
        "jax_hopper_tma_multicast": lambda x: tma_multicast(x, box=box, cluster_size=4),
        "jax_hopper_tma_reduce_add": lambda x: tma_reduce_add(x, x, box=box),
    }


@pytest.mark.parametrize("target", list(_ops()))
def test_jit_matches_eager(rng, target):
    fn = _ops()[target]
    x = random_array(rng, (2, 40, 96), "bfloat16")
    assert np.array_equal(bits(jax.jit(fn)(x)), bits(fn(x)))


@pytest.mark.parametrize("target", list(_ops()))
def test_cpu_program_has_no_custom_call(target):
    x = jnp.zeros((40, 96), jnp.bfloat16)
    lowered = jax.jit(_ops()[target]).trace(x).lower(lowering_platforms=("cpu",))
    assert "custom_call" not in lowered.as_text()


@pytest.mark.parametrize("target", list(_ops()))
def test_cuda_lowering_carries_box_and_swizzle(target):
    """The CUDA branch as XLA would get it, lowered here without a GPU or the extension."""
    x = jnp.zeros((40, 96), jnp.bfloat16)
    exported = jax.export.export(
        jax.jit(_ops()[target]), platforms=["cuda"],
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)])(x)
    calls = [line for line in exported.mlir_module().splitlines() if "custom_call" in line]
    assert len(calls) == 1 and f"@{target}(" in calls[0]
    attrs = dict(re.findall(r"(\w+) = (\d+) : i64", calls[0]))
    expected = {"box_rows": "8", "box_cols": "64", "swizzle": "3"}
    if target == "jax_hopper_tma_multicast":
        expected["cluster_size"] = "4"
    assert attrs == expected
    assert ("output_operand_alias" in calls[0]) == (target == "jax_hopper_tma_reduce_add")
