"""The TMA ops: one XLA FFI custom call each on CUDA, a pure-JAX reference everywhere else.

`jax.lax.platform_dependent` picks the branch when the platform is known at lowering, so a CPU
program never contains the custom call and never needs the compiled extension. Every argument is
checked here, before tracing reaches the GPU (jax_hopper/tma/boxes.py).
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jax_hopper import _ffi
from jax_hopper.layout import SwizzleMode
from jax_hopper.tma import boxes, reference

Box = Sequence[int]
Swizzle = str | SwizzleMode

_REDUCE_DTYPES = tuple(jnp.dtype(d) for d in ("float32", "float16", "bfloat16"))


def _custom_call(target: str, out_type, **kwargs):
    # Traced for every platform (platform_dependent stages all branches) but lowered only for
    # CUDA; on a Hopper machine a missing extension is a clear error here, not an unknown target.
    if _ffi.hopper_devices():
        _ffi.extension()
        _ffi.register_targets()
    return jax.ffi.ffi_call(target, out_type, **kwargs)


def tma_copy(x, *, box: Box, swizzle: Swizzle = "128B") -> jax.Array:
    """x copied box by box through shared memory: TMA load, then TMA store at the same place.

    x: (rows, cols) or (batch, rows, cols), any dtype of 1, 2, 4 or 8 bytes. box: (rows, cols),
    rows 1..256. With swizzle "128B", "64B" or "32B" a box is exactly one swizzle span wide:
    cols * itemsize == 128, 64 or 32 bytes, any rows (a narrower swizzled box is refused: the
    hardware does not lay its rows out at their own width). With "none", cols * itemsize is any
    multiple of 16 bytes, cols up to 256. Boxes may hang past the edges. These box rules hold for
    every TMA op. Returns x exactly.
    """
    x = jnp.asarray(x)
    grid = boxes.box_grid("x", x, box, swizzle)

    def gpu(x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return _custom_call("jax_hopper_tma_copy", out)(x, **grid.ffi_attrs())

    return jax.lax.platform_dependent(x, cuda=gpu, default=reference.copy)


def tma_smem_bytes(x, *, box: Box, swizzle: Swizzle = "128B") -> jax.Array:
    """The raw shared-memory bytes of every box as the TMA load lays them out (swizzle included).

    Returns uint8 of shape ([batch,] row_boxes, col_boxes, box_rows * box_cols * itemsize): box
    (r, c) holds rows [r * box_rows, ...) and cols [c * box_cols, ...) of x, zero past the edge.
    Box and swizzle as for tma_copy. The reference is the model jax_hopper.layout.tma_model.
    """
    x = jnp.asarray(x)
    grid = boxes.box_grid("x", x, box, swizzle)
    shape = (*x.shape[:-2], grid.row_boxes, grid.col_boxes, grid.box_bytes)

    def gpu(x):
        out = jax.ShapeDtypeStruct(shape, jnp.uint8)
        return _custom_call("jax_hopper_tma_smem_bytes", out)(x, **grid.ffi_attrs())

    return jax.lax.platform_dependent(x, cuda=gpu,
                                      default=lambda x: reference.smem_bytes(x, grid))


def tma_multicast(x, *, box: Box, cluster_size: int = 2, swizzle: Swizzle = "128B") -> jax.Array:
    """cluster_size copies of x, shape (cluster_size, *x.shape), made by thread-block clusters.

    Each cluster of cluster_size CTAs handles one box: every CTA loads box_rows / cluster_size
    rows with `.multicast::cluster` to all CTAs, so each receives the whole box, then stores it
    into its own copy. box rows must be divisible by cluster_size (2 or 4).
    """
    x = jnp.asarray(x)
    grid = boxes.box_grid("x", x, box, swizzle)
    boxes.check_cluster(grid, cluster_size)
    cluster_size = int(cluster_size)
    out_shape = (cluster_size, *x.shape)
    boxes.check_addressable("the output (cluster_size, *x.shape)", out_shape, x.dtype)

    def gpu(x):
        out = jax.ShapeDtypeStruct(out_shape, x.dtype)
        return _custom_call("jax_hopper_tma_multicast", out)(
            x, cluster_size=np.int64(cluster_size), **grid.ffi_attrs())

    return jax.lax.platform_dependent(x, cuda=gpu,
                                      default=lambda x: reference.multicast(x, cluster_size))


def tma_reduce_add(dst, src, *, box: Box, swizzle: Swizzle = "128B") -> jax.Array:
    """dst + src, computed as TMA loads of src boxes reduced into dst with
    `cp.reduce.async.bulk.tensor ... .add` (the output buffer aliases dst).

    dst, src: same shape and dtype, float32, float16 or bfloat16; the add rounds in that type.
    """
    dst, src = jnp.asarray(dst), jnp.asarray(src)
    if dst.dtype not in _REDUCE_DTYPES:
        raise ValueError(f"dst.dtype={dst.dtype} is not supported: TMA reduce-add takes "
                         f"{', '.join(d.name for d in _REDUCE_DTYPES)}")
    if src.dtype != dst.dtype or src.shape != dst.shape:
        raise ValueError(f"src ({src.shape}, {src.dtype}) must match dst ({dst.shape}, "
                         f"{dst.dtype}) in shape and dtype")
    grid = boxes.box_grid("dst", dst, box, swizzle)

    def gpu(dst, src):
        out = jax.ShapeDtypeStruct(dst.shape, dst.dtype)
        return _custom_call("jax_hopper_tma_reduce_add", out, input_output_aliases={0: 0})(
            dst, src, **grid.ffi_attrs())

    return jax.lax.platform_dependent(dst, src, cuda=gpu, default=reference.reduce_add)
