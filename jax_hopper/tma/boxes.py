"""How the TMA ops cut an array into boxes, and the checks that run before anything reaches the GPU.

Every op views its array as (batch, rows, cols) (a 2-D array is one batch) and handles it in boxes
of (box_rows, box_cols); boxes at the far edges hang past the array (TMA fills zeros on load and
skips on store). The hardware rules come from jax_hopper.layout.validate; this module only says
which argument broke them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np

from jax_hopper.layout import (
    SwizzleMode,
    check_smem_budget,
    check_tma_box,
    check_tma_global,
)

SWIZZLES = {
    "128B": SwizzleMode.B128,
    "64B": SwizzleMode.B64,
    "32B": SwizzleMode.B32,
    "none": SwizzleMode.INTERLEAVE,
}
CLUSTER_SIZES = (2, 4)
# TMA moves whole elements of these sizes (CUtensorMap UINT8/16/32/64).
_ELEM_BITS = (8, 16, 32, 64)


def parse_swizzle(swizzle: str | SwizzleMode) -> SwizzleMode:
    if isinstance(swizzle, SwizzleMode):
        return swizzle
    if not isinstance(swizzle, str) or swizzle not in SWIZZLES:
        raise ValueError(f"swizzle must be one of {', '.join(map(repr, SWIZZLES))} or a "
                         f"SwizzleMode, got {swizzle!r}")
    return SWIZZLES[swizzle]


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class BoxGrid:
    shape: tuple[int, ...]  # the array as given: (rows, cols) or (batch, rows, cols)
    dtype: np.dtype
    box: tuple[int, int]  # (rows, cols)
    mode: SwizzleMode

    @property
    def batch(self) -> int:
        return self.shape[0] if len(self.shape) == 3 else 1

    @property
    def rows(self) -> int:
        return self.shape[-2]

    @property
    def cols(self) -> int:
        return self.shape[-1]

    @property
    def elem_bytes(self) -> int:
        return self.dtype.itemsize

    @property
    def row_boxes(self) -> int:
        return -(-self.rows // self.box[0])

    @property
    def col_boxes(self) -> int:
        return -(-self.cols // self.box[1])

    @property
    def inner_bytes(self) -> int:
        return self.box[1] * self.elem_bytes

    @property
    def box_bytes(self) -> int:
        return self.box[0] * self.inner_bytes

    def ffi_attrs(self) -> dict[str, np.int64]:
        return {"box_rows": np.int64(self.box[0]), "box_cols": np.int64(self.box[1]),
                "swizzle": np.int64(self.mode.tma_code)}


def box_grid(name: str, x: jax.Array, box: Sequence[int], swizzle: str | SwizzleMode) -> BoxGrid:
    """Validated geometry of `x` (the argument called `name`) cut into `box`es."""
    if x.ndim not in (2, 3):
        raise ValueError(f"{name} must be 2-D (rows, cols) or 3-D (batch, rows, cols), got shape "
                         f"{x.shape}")
    bits = jax.dtypes.itemsize_bits(x.dtype)
    if bits not in _ELEM_BITS:
        raise ValueError(f"{name}.dtype={x.dtype} ({bits}-bit) is not supported: TMA moves "
                         "elements of 1, 2, 4 or 8 bytes")
    if (len(box) != 2 or not all(isinstance(b, (int, np.integer)) for b in box)):
        raise ValueError(f"box must be a (rows, cols) pair of ints, got {box!r}")
    grid = BoxGrid(tuple(x.shape), np.dtype(x.dtype), (int(box[0]), int(box[1])),
                   parse_swizzle(swizzle))
    try:
        check_tma_box((grid.box[1], grid.box[0], 1), bits, grid.mode)
    except ValueError as e:
        raise ValueError(f"box=(rows={grid.box[0]}, cols={grid.box[1]}) for {x.dtype} with "
                         f"swizzle {grid.mode.name}: {e} (box_dims are innermost first: "
                         "box_dims[0] is cols)") from None
    if grid.mode is not SwizzleMode.INTERLEAVE and grid.inner_bytes != grid.mode.span_bytes:
        # NOTES: measured on an H100 (2026-11-22): a swizzled box narrower than its span
        # (e.g. 5 rows x 16 bytes under 128B) made the copy kernel fault with an illegal address
        # when shared memory held only the packed box, i.e. the hardware does not pack such rows
        # at their own width. Until that layout is measured and modelled these ops take only
        # boxes one swizzle span wide: exactly the wgmma atoms.
        raise ValueError(f"box=(rows={grid.box[0]}, cols={grid.box[1]}) for {x.dtype} with "
                         f"swizzle {grid.mode.name}: the box's inner dimension must be exactly "
                         f"one swizzle span, {grid.mode.span_bytes} bytes = "
                         f"{grid.mode.span_bytes // grid.elem_bytes} columns (got "
                         f"{grid.inner_bytes} bytes); use swizzle='none' for other widths")
    check_addressable(name, x.shape, x.dtype)
    check_box_smem(grid.box, tma_box_smem_bytes(grid.box_bytes))
    return grid


def check_addressable(name: str, shape: Sequence[int], dtype) -> None:
    """The array, as a row-major (batch, rows, cols) tensor, must satisfy TMA's global rules.

    A dimension of extent 1 is never stepped over, so its stride is free; it is rounded up to
    TMA's 16 bytes (ffi/tma_handlers.cc does the same), which makes e.g. a (1, 1) array legal.
    """
    *lead, rows, cols = shape
    batch = math.prod(lead)
    itemsize = np.dtype(dtype).itemsize
    # The op kernels address boxes with int32 coordinates (cuda/tma/ops.cu): tighter than
    # TMA's own globalDim limit of 2^32-1.
    for dim, extent in (("cols", cols), ("rows", rows), ("batch", batch)):
        if extent > 2**31 - 1:
            raise ValueError(f"{name} of shape {tuple(shape)}: {dim} = {extent} exceeds 2^31-1, "
                             "the largest coordinate the TMA op kernels address (int32)")
    pitch, plane = cols * itemsize, rows * cols * itemsize
    strides = (itemsize, _round_up(pitch, 16) if rows == 1 else pitch,
               _round_up(plane, 16) if batch == 1 else plane)
    try:
        check_tma_global((cols, rows, batch), strides, 8 * itemsize)
    except ValueError as e:
        hint = ""
        if rows > 1 and pitch % 16:
            hint = (f"; rows of {name} are {pitch} bytes apart, TMA needs a multiple of 16 "
                    f"(the last dimension must be a multiple of {16 // itemsize} for "
                    f"{np.dtype(dtype).name})")
        elif batch > 1 and plane % 16:
            hint = (f"; the {rows} x {cols} planes of {name} are {plane} bytes apart, TMA needs "
                    "a multiple of 16")
        raise ValueError(f"{name} of shape {tuple(shape)} cannot be addressed by TMA: {e} "
                         f"(TMA dims innermost first: cols, rows, batch){hint}") from None


# The op kernels' static shared memory (one mbarrier, 16 bytes per ptxas -v) counts against the
# same per-block limit as the dynamic bytes (cuda/tma/ops.cu, launch).
OP_STATIC_SMEM_BYTES = 16


def check_box_smem(box: tuple[int, int], nbytes: int) -> None:
    try:
        check_smem_budget(nbytes + OP_STATIC_SMEM_BYTES)
    except ValueError as e:
        raise ValueError(f"box=(rows={box[0]}, cols={box[1]}) does not fit in shared memory: "
                         f"{e}") from None


# Mirrors tma_box_smem_bytes / tma_multicast_smem_bytes in cuda/tma/ops.h.
def tma_box_smem_bytes(box_bytes: int) -> int:
    return _round_up(box_bytes, 128) + 1024


def tma_multicast_smem_bytes(box_bytes: int, cluster_size: int) -> int:
    return cluster_size * _round_up(box_bytes // cluster_size, 1024) + 1024


def check_cluster(grid: BoxGrid, cluster_size: int) -> None:
    if cluster_size not in CLUSTER_SIZES:
        raise ValueError(f"cluster_size must be one of {CLUSTER_SIZES}, got {cluster_size!r}")
    if grid.box[0] % cluster_size:
        raise ValueError(f"box rows ({grid.box[0]}) must be divisible by cluster_size "
                         f"({cluster_size}): each CTA of a cluster loads box_rows / cluster_size "
                         "rows and multicasts them to the others")
    check_box_smem(grid.box, tma_multicast_smem_bytes(grid.box_bytes, cluster_size))

