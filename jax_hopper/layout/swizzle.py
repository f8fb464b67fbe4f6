"""CuTe's Swizzle<B, M, S> on shared-memory byte offsets, and the four Hopper swizzle modes."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

Offset = TypeVar("Offset", int, np.ndarray)


@dataclass(frozen=True)
class Swizzle:
    """Swizzle<B, M, S>: XOR bits [M+S, M+S+B) of a byte offset into bits [M, M+B)."""

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        if self.bits < 0 or self.base < 0:
            raise ValueError(f"{self}: bits and base must be >= 0")
        # With shift < bits the source and target bit ranges overlap and the map is no bijection.
        if self.shift < self.bits:
            raise ValueError(f"{self}: shift must be >= bits for the swizzle to be a bijection")

    def __str__(self) -> str:
        return f"Swizzle<{self.bits},{self.base},{self.shift}>"

    @property
    def mask(self) -> int:
        """The source bits (the 'row' bits that pick the XOR pattern)."""
        return ((1 << self.bits) - 1) << (self.base + self.shift)

    @property
    def period_bytes(self) -> int:
        """The pattern repeats every this many bytes; multiples of it pass through unchanged."""
        return 1 << (self.base + self.shift + self.bits)

    def apply(self, offset: Offset) -> Offset:
        """Swizzled offset; works on Python ints and integer numpy arrays alike."""
        return offset ^ ((offset & self.mask) >> self.shift)


class SwizzleMode(enum.Enum):
    """The shared-memory layouts that both TMA and wgmma understand.

    Each member carries (span_bytes, tma_code, wgmma_code, smem_alignment):
    - span_bytes: width of one swizzle-atom row; INTERLEAVE is the 16-byte core-matrix column.
    - tma_code: CUtensorMapSwizzle (NONE=0, 32B=1, 64B=2, 128B=3).
    - wgmma_code: descriptor bits 62-63 (none=0, 128B=1, 64B=2, 32B=3): NOT the TMA numbering.
    - smem_alignment: the buffer base alignment that keeps the pattern phase at zero. PTX ISA
      9.7.15.5.1.2.2 "Matrix Descriptor Format": descriptor base offset is 0 when the repeating
      pattern starts on a 1024 (128B) / 512 (64B) / 256 (32B) byte boundary, i.e. one atom of
      8 rows x span. For no swizzle, 128 is the TMA shared-memory destination alignment
      (CUDA C++ Programming Guide, TMA section); wgmma alone would need only 16.
    """

    INTERLEAVE = (16, 0, 0, 128)
    B32 = (32, 1, 3, 256)
    B64 = (64, 2, 2, 512)
    B128 = (128, 3, 1, 1024)

    def __init__(self, span_bytes: int, tma_code: int, wgmma_code: int, smem_alignment: int):
        self.span_bytes = span_bytes
        self.tma_code = tma_code
        self.wgmma_code = wgmma_code
        self.smem_alignment = smem_alignment

    @property
    def swizzle(self) -> Swizzle:
        """Swizzle<log2(span/16), 4, 3>: 16-byte chunks (M=4) permuted by the row inside 8 rows."""
        return Swizzle(bits=(self.span_bytes // 16).bit_length() - 1, base=4, shift=3)

    @classmethod
    def from_wgmma_code(cls, code: int) -> SwizzleMode:
        for mode in cls:
            if mode.wgmma_code == code:
                return mode
        raise ValueError(f"wgmma swizzle code must be 0..3, got {code}")
