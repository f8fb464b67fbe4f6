"""Reference results of the TMA ops: the pure-JAX branch that CPU (and any non-CUDA platform) runs
instead of a kernel, and a numpy box-by-box model that the tests compare against."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_hopper.layout import tma_box_byte_offset, tma_box_smem_bytes
from jax_hopper.tma.boxes import BoxGrid, parse_swizzle


def copy(x: jax.Array) -> jax.Array:
    return x


def multicast(x: jax.Array, cluster_size: int) -> jax.Array:
    return jnp.broadcast_to(x, (cluster_size, *x.shape))


def reduce_add(dst: jax.Array, src: jax.Array) -> jax.Array:
    return dst + src


def as_bytes(x: jax.Array) -> jax.Array:
    """x's memory as uint8, shape (*x.shape, itemsize) (the last axis dropped for 1-byte types)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)  # XLA stores a bool as one byte, 0 or 1
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        # bitcast_convert_type refuses complex; memory holds (real, imag) pairs.
        parts = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
        return jax.lax.bitcast_convert_type(parts, jnp.uint8).reshape(*x.shape, -1)
    return jax.lax.bitcast_convert_type(x, jnp.uint8)


def _smem_permutation(grid: BoxGrid) -> np.ndarray:
    """perm[s] = which byte of the row-major box lands at shared-memory byte s."""
    rows, inner = np.indices((grid.box[0], grid.inner_bytes))
    where = tma_box_byte_offset(rows, inner, grid.inner_bytes, grid.mode).reshape(-1)
    perm = np.empty_like(where)
    perm[where] = np.arange(where.size)
    return perm


def smem_bytes(x: jax.Array, grid: BoxGrid) -> jax.Array:
    """Each box, zero-padded past the array's edge as TMA loads it, in the byte order of the model
    jax_hopper.layout.tma_model: ([batch,] row_boxes, col_boxes, box_bytes) uint8."""
    b = as_bytes(x).reshape(grid.batch, grid.rows, grid.cols * grid.elem_bytes)
    box_rows, inner = grid.box[0], grid.inner_bytes
    b = jnp.pad(b, ((0, 0), (0, grid.row_boxes * box_rows - grid.rows),
                    (0, grid.col_boxes * inner - grid.cols * grid.elem_bytes)))
    b = b.reshape(grid.batch, grid.row_boxes, box_rows, grid.col_boxes, inner)
    b = b.transpose(0, 1, 3, 2, 4).reshape(grid.batch, grid.row_boxes, grid.col_boxes, -1)
    out = b[..., _smem_permutation(grid)]
    return out if len(grid.shape) == 3 else out[0]


def smem_bytes_numpy(x: np.ndarray, box: tuple[int, int], swizzle) -> np.ndarray:
    """tma_smem_bytes box by box through the model's own tma_box_smem_bytes, in numpy: the
    independent answer that the tests hold both the kernel and `smem_bytes` to."""
    mode = parse_swizzle(swizzle)
    x3 = x.reshape(math.prod(x.shape[:-2]), *x.shape[-2:])
    (batch, rows, cols), (box_rows, box_cols) = x3.shape, box
    row_boxes, col_boxes = -(-rows // box_rows), -(-cols // box_cols)
    padded = np.zeros((batch, row_boxes * box_rows, col_boxes * box_cols), x.dtype)
    padded[:, :rows, :cols] = x3
    out = np.stack([
        tma_box_smem_bytes(padded[b, r * box_rows:(r + 1) * box_rows,
                                  c * box_cols:(c + 1) * box_cols], mode)
        for b in range(batch) for r in range(row_boxes) for c in range(col_boxes)])
    return out.reshape(*x.shape[:-2], row_boxes, col_boxes, -1)
