"""Shared-memory layout descriptors for Hopper TMA + wgmma: pure Python (numpy), no JAX needed.

swizzle (Swizzle<B,M,S>, SwizzleMode) -> atoms (LayoutAtom) -> smem_layout (SmemLayout: TMA boxes,
wgmma descriptors); tma_model is the byte-level model of a TMA box; validate holds the hardware
rules; picture draws a layout.
"""
from .atoms import ATOM_ROWS, LayoutAtom, Major
from .picture import chunk_grid, describe, draw
from .smem_layout import (
    SmemLayout,
    TmaBoxes,
    WgmmaDescFields,
    choose_widest_swizzle,
    encode_wgmma_desc,
    make_smem_layout,
)
from .swizzle import Swizzle, SwizzleMode
from .tma_model import tma_box_byte_offset, tma_box_smem_bytes
from .validate import (
    SMEM_LIMIT_BYTES,
    check_elem_bits,
    check_operand_major,
    check_smem_budget,
    check_tma_box,
    check_tma_global,
    check_wgmma_shape,
)

__all__ = [
    "ATOM_ROWS", "LayoutAtom", "Major",
    "chunk_grid", "describe", "draw",
    "SmemLayout", "TmaBoxes", "WgmmaDescFields", "choose_widest_swizzle", "encode_wgmma_desc",
    "make_smem_layout",
    "Swizzle", "SwizzleMode",
    "tma_box_byte_offset", "tma_box_smem_bytes",
    "SMEM_LIMIT_BYTES", "check_elem_bits", "check_operand_major", "check_smem_budget",
    "check_tma_box", "check_tma_global", "check_wgmma_shape",
]
