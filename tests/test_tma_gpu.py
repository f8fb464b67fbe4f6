"""TMA ops on an sm_90 GPU, compared bit for bit with the input or with the Python model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_tma_cpu import bits, edge_shapes, random_array  # shared input generation

from jax_hopper import tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes
from jax_hopper.tma import SWIZZLES
from jax_hopper.tma.reference import smem_bytes_numpy

pytestmark = pytest.mark.gpu

MODES = list(SWIZZLES)
# One type per element size: 1, 2, 4 and 8 bytes.
DTYPES = ["uint8", "bfloat16", "float32", "complex64"]
REDUCE_DTYPES = ["float32", "float16", "bfloat16"]


def wide_cols(mode, dtype):
    """Columns of a box as wide as the swizzle allows (256 bytes without swizzle)."""
    span = SWIZZLES[mode].span_bytes if mode != "none" else 256
    return span // jnp.dtype(dtype).itemsize


def narrow_cols(dtype):
    """Columns of one 16-byte chunk, the narrowest legal box."""
    return 16 // jnp.dtype(dtype).itemsize


def copy_boxes(mode, dtype):
    # The 256-row box without swizzle is 64 KiB: past the 48 KiB that needs no opt-in.
    return [(64, wide_cols(mode, dtype)), (5, narrow_cols(dtype)), (256, wide_cols(mode, dtype))]


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


def smem_boxes(mode, dtype):
    """Every inner width from one 16-byte chunk up to the span, at a few row counts, restricted
    to boxes of whole swizzle spans (the model's domain)."""
    itemsize = jnp.dtype(dtype).itemsize
    span = SWIZZLES[mode].span_bytes
    widths = [w for w in (16, 32, 64, 128) if w <= span] if mode != "none" else [16, 48, 256]
    return [(rows, inner // itemsize) for inner in widths for rows in (3, 8, 64)
            if (rows * inner) % span == 0]


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
    for box in [(16 * cluster_size, wide_cols(mode, dtype)), (cluster_size, narrow_cols(dtype))]:
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
    for box in [(64, wide_cols(mode, dtype)), (5, narrow_cols(dtype))]:
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


def test_handler_rejects_what_python_would_have(rng):
    # Straight to the custom call, past the Python checks: the C++ side refuses the box.
    x = jnp.asarray(random_array(rng, (16, 64), "bfloat16"))
    call = jax.ffi.ffi_call("jax_hopper_tma_copy", jax.ShapeDtypeStruct(x.shape, x.dtype))
    with pytest.raises(Exception, match=r"box \(300, 64\) outside 1..256"):
        jax.block_until_ready(call(x, box_rows=np.int64(300), box_cols=np.int64(64),
                                   swizzle=np.int64(3)))
