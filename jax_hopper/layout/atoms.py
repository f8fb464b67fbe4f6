"""The eight wgmma-compatible shared-memory layout atoms (K-/MN-major x four swizzle modes).

An atom is 8 rows along its strided dimension times one swizzle span (16/32/64/128 bytes) along
its contiguous dimension, stored row after row and swizzled: PTX ISA 9.7.15.5.1.2 "Shared Memory
Matrix Layout" (Table "swizzle atom layout") and CuTe's GMMA::Layout_{K,MN}_{INTER,SW32,SW64,
SW128}_Atom in cute/atom/mma_traits_sm90_gmma.hpp.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .swizzle import Offset, Swizzle, SwizzleMode
from .tma_model import tma_box_byte_offset
from .validate import check_index, check_operand_major

# Every atom has 8 rows along its strided dimension: the 8 rows of a wgmma core matrix.
ATOM_ROWS = 8


class Major(str, enum.Enum):
    """Which logical dimension is contiguous in shared memory (str-valued so 'K'/'MN' work too)."""

    K = "K"
    MN = "MN"


@dataclass(frozen=True)
class LayoutAtom:
    major: Major
    mode: SwizzleMode
    elem_bits: int

    def __post_init__(self) -> None:
        check_operand_major(self.major, self.elem_bits)
        object.__setattr__(self, "major", Major(self.major))

    @property
    def elem_bytes(self) -> int:
        return self.elem_bits // 8

    @property
    def width(self) -> int:
        """Elements along the contiguous dimension: one swizzle span."""
        return self.mode.span_bytes * 8 // self.elem_bits

    @property
    def shape(self) -> tuple[int, int]:
        """(mn_extent, k_extent) in elements."""
        return (ATOM_ROWS, self.width) if self.major is Major.K else (self.width, ATOM_ROWS)

    @property
    def size_bytes(self) -> int:
        return ATOM_ROWS * self.mode.span_bytes

    @property
    def swizzle(self) -> Swizzle:
        return self.mode.swizzle

    def strided_and_contiguous(self, mn: Offset, k: Offset) -> tuple[Offset, Offset]:
        """(row, column) of a logical (mn, k) in the atom's storage order."""
        return (mn, k) if self.major is Major.K else (k, mn)

    def byte_offset(self, mn: Offset, k: Offset) -> Offset:
        check_index("mn", mn, self.shape[0])
        check_index("k", k, self.shape[1])
        row, col = self.strided_and_contiguous(mn, k)
        return tma_box_byte_offset(row, col * self.elem_bytes, self.mode.span_bytes, self.mode)

    def description(self) -> str:
        m, k = self.shape
        return (f"{self.major.value}-major {self.mode.name} atom, {self.elem_bits}-bit: "
                f"{m} x {k} elements (mn x k), {ATOM_ROWS} rows x {self.mode.span_bytes} B = "
                f"{self.size_bytes} B, {self.swizzle}, TMA swizzle code {self.mode.tma_code}, "
                f"wgmma swizzle code {self.mode.wgmma_code}, "
                f"base aligned to {self.mode.smem_alignment} B")
