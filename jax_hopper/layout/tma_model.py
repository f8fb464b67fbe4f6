"""What a TMA load writes into shared memory: the one place the box-to-bytes arithmetic lives.

The atoms, the tiled layouts and the GPU tests all derive byte positions from
`tma_box_byte_offset`, so the Python model and the hardware are compared through one formula.
"""
from __future__ import annotations

import numpy as np

from .swizzle import Offset, SwizzleMode
from .validate import check_tma_box


def tma_box_byte_offset(row: Offset, inner_byte: Offset, inner_bytes: int,
                        mode: SwizzleMode) -> Offset:
    """Shared-memory byte of (row, inner_byte) in a box whose rows are inner_bytes long.

    TMA packs the box rows at a pitch of inner_bytes, then swizzles the shared *address*; with the
    box base aligned to mode.smem_alignment that equals swizzling the offset inside the box.
    """
    return mode.swizzle.apply(row * inner_bytes + inner_byte)


def tma_box_smem_bytes(tile: np.ndarray, mode: SwizzleMode) -> np.ndarray:
    """The bytes of a (rows, inner) box as TMA lays them out at an aligned shared-memory base."""
    if tile.ndim != 2:
        raise ValueError(f"tile must be 2-D (rows, inner), got shape {tile.shape}")
    rows, inner = tile.shape
    check_tma_box((inner, rows), tile.itemsize * 8, mode)
    inner_bytes = inner * tile.itemsize
    # The swizzle permutes 16-byte chunks inside each span-aligned block; a box that ends mid-block
    # would send bytes past its own end, so the model refuses it rather than guess.
    if (rows * inner_bytes) % mode.span_bytes:
        raise ValueError(f"tile of {rows} rows x {inner_bytes} bytes must fill whole "
                         f"{mode.span_bytes}-byte swizzle spans")
    src = np.ascontiguousarray(tile).view(np.uint8).reshape(rows, inner_bytes)
    r, b = np.indices(src.shape)
    out = np.empty(src.size, dtype=np.uint8)
    out[tma_box_byte_offset(r, b, inner_bytes, mode)] = src
    return out
