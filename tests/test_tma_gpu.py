"""TMA ops on an sm_90 GPU, compared bit for bit with the input or with the Python model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_tma_cpu import (  # shared input generation and box choices
    bits,
    edge_shapes,
    narrow_cols,
    random_array,
    smem_boxes,
    wide_cols,
)

from jax_hopper import _ffi, tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes
from jax_hopper.tma import SWIZZLES
from jax_hopper.tma.reference import smem_bytes_numpy

pytestmark = pytest.mark.gpu

MODES = list(SWIZZLES)
# One type per element size: 1, 2, 4 and 8 bytes.
DTYPES = ["uint8", "bfloat16", "float32", "complex64"]
REDUCE_DTYPES = ["float32", "float16", "bfloat16"]


def copy_boxes(mode, dtype):
    # A swizzled box is one span wide (wide == narrow), so its rows vary: 64, an odd 5 and 256.
    # Without swizzle the 5-row box is one 16-byte chunk wide, and the 256-row box is 64 KiB:
    # past the 48 KiB that needs no opt-in.
    return [(64, wide_cols(mode, dtype)), (5, narrow_cols(mode, dtype)),
            (256, wide_cols(mode, dtype))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_copy_roundtrips_every_shape(rng, mode, dtype):
    for box in copy_boxes(mode, dtype):
        for shape in edge_shapes(dtype):
            x = random_array(rng, shape, dtype)
            out = jax.jit(lambda x, box=box: tma_copy(x, box=box, swizzle=mode))(x)
            assert out.shape == x.shape and out.dtype == x.dtype
            assert np.array_equal(bits(out), bits(x)), (box, shape)


def test_copy_runs_eagerly(rng):
    x = random_array(rng, (3, 65, 136), "bfloat16")
    assert np.array_equal(bits(tma_copy(x, box=(64, 64))), bits(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_smem_bytes_match_the_model(rng, mode, dtype):
    boxes = smem_boxes(mode, dtype)
    assert boxes
    for box in boxes:
        itemsize = jnp.dtype(dtype).itemsize
        # Two and a bit boxes wide and 70 rows: edge boxes are partly out of bounds (zero-filled).
        x = random_array(rng, (2, 70, 2 * box[1] + 16 // itemsize), dtype)
        out = jax.jit(lambda x, box=box: tma_smem_bytes(x, box=box, swizzle=mode))(x)
        want = smem_bytes_numpy(np.asarray(x), box, mode)
        assert out.shape == want.shape
        mismatch = np.argwhere(np.asarray(out) != want)
        assert mismatch.size == 0, (box, f"{len(mismatch)} bytes differ, first at {mismatch[:4]}")


@pytest.mark.parametrize("cluster_size", [2, 4])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_multicast_gives_every_cta_the_whole_box(rng, mode, dtype, cluster_size):
    # Slices of 16 rows, and of a single row each (box rows == cluster_size).
    for box in [(16 * cluster_size, wide_cols(mode, dtype)),
                (cluster_size, narrow_cols(mode, dtype))]:
        # (1, 1) is left out: its copies would sit itemsize bytes apart, which TMA cannot address.
        for shape in edge_shapes(dtype)[1:]:
            x = random_array(rng, shape, dtype)
            out = jax.jit(lambda x, box=box: tma_multicast(
                x, box=box, cluster_size=cluster_size, swizzle=mode))(x)
            assert out.shape == (cluster_size, *shape)
            for rank, copy in enumerate(np.asarray(out)):
                assert np.array_equal(bits(copy), bits(x)), (box, shape, rank)


def _numpy_sum(dst, src, dtype):
    # One rounding in the element type, as the TMA reduce does (numpy's float16/bfloat16 add
    # rounds the exact sum once: float32 holds it without a second rounding).
    return (np.asarray(dst).astype(np.float32) + np.asarray(src).astype(np.float32)).astype(
        jnp.dtype(dtype))


@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_reduce_add_sums_and_leaves_dst_alone(rng, mode, dtype):
    for box in [(64, wide_cols(mode, dtype)), (5, narrow_cols(mode, dtype))]:
        for shape in edge_shapes(dtype):
            dst_np, src_np = (random_array(rng, shape, dtype) for _ in range(2))
            dst, src = jnp.asarray(dst_np), jnp.asarray(src_np)
            out = jax.jit(lambda d, s, box=box: tma_reduce_add(d, s, box=box, swizzle=mode))(
                dst, src)
            assert np.array_equal(bits(out), bits(_numpy_sum(dst_np, src_np, dtype))), (box, shape)
            # The kernel writes into dst's buffer; without donation XLA must have copied it first.
            assert np.array_equal(bits(dst), bits(dst_np)), (box, shape)


@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
def test_reduce_add_in_place_with_donation(rng, dtype):
    dst_np, src_np = (random_array(rng, (300, 520), dtype) for _ in range(2))
    fn = jax.jit(lambda d, s: tma_reduce_add(d, s, box=(128, 64 // jnp.dtype(dtype).itemsize),
                                             swizzle="64B"), donate_argnums=0)
    out = fn(jnp.asarray(dst_np), jnp.asarray(src_np))
    assert np.array_equal(bits(out), bits(_numpy_sum(dst_np, src_np, dtype)))


@pytest.mark.parametrize("op, target", [
    (lambda x: tma_copy(x, box=(8, 64)), "jax_hopper_tma_copy"),
    (lambda x: tma_smem_bytes(x, box=(8, 64)), "jax_hopper_tma_smem_bytes"),
    (lambda x: tma_multicast(x, box=(8, 64)), "jax_hopper_tma_multicast"),
    (lambda x: tma_reduce_add(x, x, box=(8, 64)), "jax_hopper_tma_reduce_add"),
])
def test_gpu_program_calls_the_kernel(op, target):
    # Otherwise every other test here could pass on the pure-JAX reference.
    text = jax.jit(op).lower(jnp.zeros((16, 64), jnp.bfloat16)).as_text()
    assert f"custom_call @{target}(" in text


def _ffi_call(target, out_type, **kwargs):
    """jax.ffi.ffi_call with the handlers registered, as ops.py would, so a test run alone works."""
    _ffi.extension()
    _ffi.register_targets()
    return jax.ffi.ffi_call(target, out_type, **kwargs)


def test_handler_rejects_what_python_would_have(rng):
    # Straight to the custom call, past the Python checks: the C++ side refuses the box.
    x = jnp.asarray(random_array(rng, (16, 64), "bfloat16"))
    call = _ffi_call("jax_hopper_tma_copy", jax.ShapeDtypeStruct(x.shape, x.dtype))
    with pytest.raises(Exception, match=r"box \(300, 64\) outside 1..256"):
        jax.block_until_ready(call(x, box_rows=np.int64(300), box_cols=np.int64(64),
                                   swizzle=np.int64(3)))


def _raw_call(target, x, box):
    """target's custom call on x, output typed as ops.py would, with no Python checks."""
    rows, cols = x.shape
    row_boxes, col_boxes = -(-rows // box[0]), -(-cols // box[1])
    outs = {
        "jax_hopper_tma_copy": (x.shape, x.dtype, {}),
        "jax_hopper_tma_smem_bytes": ((row_boxes, col_boxes, box[0] * box[1] * x.dtype.itemsize),
                                      jnp.uint8, {}),
        "jax_hopper_tma_multicast": ((2, *x.shape), x.dtype, {"cluster_size": np.int64(2)}),
        "jax_hopper_tma_reduce_add": (x.shape, x.dtype, {}),
    }
    shape, dtype, attrs = outs[target]
    aliases = {0: 0} if target == "jax_hopper_tma_reduce_add" else {}
    call = _ffi_call(target, jax.ShapeDtypeStruct(shape, dtype), input_output_aliases=aliases)
    args = (x, x) if target == "jax_hopper_tma_reduce_add" else (x,)
    return lambda swizzle: call(*args, box_rows=np.int64(box[0]), box_cols=np.int64(box[1]),
                                swizzle=np.int64(swizzle), **attrs)


@pytest.mark.parametrize("swizzle, name, span", [(1, "32B", 32), (2, "64B", 64), (3, "128B", 128)])
@pytest.mark.parametrize("target", ["jax_hopper_tma_copy", "jax_hopper_tma_smem_bytes",
                                    "jax_hopper_tma_multicast", "jax_hopper_tma_reduce_add"])
def test_handler_rejects_a_swizzled_box_narrower_than_its_span(rng, target, swizzle, name, span):
    # One 16-byte chunk (8 bfloat16) in 2 rows: narrower than every span, which box_grid refuses
    # in Python. The handler must refuse it too, before encoding or launching. (The box is kept to
    # 2 rows so that, were the check missing, the kernel would be unlikely to fault the device.)
    x = jnp.asarray(random_array(rng, (16, 64), "bfloat16"))
    cols = 16 // x.dtype.itemsize
    with pytest.raises(Exception, match=(
            rf"with swizzle {name} the box's inner dimension must be exactly one swizzle span, "
            rf"{span} bytes = {span // x.dtype.itemsize} columns of {x.dtype.itemsize} bytes "
            rf"\(got {cols} columns = 16 bytes\)")):
        jax.block_until_ready(_raw_call(target, x, (2, cols))(swizzle))
    # Exactly one span passes the same handler.
    ok = _raw_call(target, x, (2, span // x.dtype.itemsize))(swizzle)
    jax.block_until_ready(ok)
