"""A shared-memory operand tile (mn, k[, stages]) of one atom, as TMA fills it and wgmma reads it.

Atoms are stacked along the strided dimension first (for K-major: along MN; for MN-major: along
K), so one TMA box of (inner = atom width, outer = all rows) lands as one column of atoms; wider
tiles take several such boxes one after another; stages follow each other. This is CUTLASS's
sm90 choice (tile_to_shape with Step<_2,_1,_3> for MN-major operands, "Tile along modes in a way
that maximizes the TMA box size"). wgmma descriptor fields follow CuTe's make_gmma_desc
(cute/atom/mma_traits_sm90_gmma.hpp) and PTX ISA 9.7.15.5.1.2 "Canonical Layouts".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .atoms import ATOM_ROWS, LayoutAtom, Major
from .swizzle import Offset, SwizzleMode
from .tma_model import tma_box_byte_offset
from .validate import check_index, check_operand_major, check_tma_box

# One wgmma consumes 32 bytes of K: k16 for 16-bit, k8 for tf32, k32 for 8-bit types.
WGMMA_K_BYTES = 32
# The descriptor's address fields keep bits 4..17 of a byte value (PTX matrix-descriptor-encode).
_DESC_FIELD_LIMIT = 1 << 18


@dataclass(frozen=True)
class TmaBoxes:
    """How TMA fills one stage: boxes_per_stage boxes of box_dims, box i at box_byte_offsets[i]."""

    box_dims: tuple[int, int]  # (inner elements, outer rows): CUtensorMap boxDim order
    boxes_per_stage: int
    box_byte_offsets: tuple[int, ...]  # inside a stage
    box_inner_starts: tuple[int, ...]  # first element of each box along the contiguous dimension
    stage_bytes: int  # also the mbarrier expect_tx byte count of one stage
    tma_code: int


@dataclass(frozen=True)
class WgmmaDescFields:
    """Byte-valued fields of a wgmma shared-memory matrix descriptor (see encode_wgmma_desc).

    k_step_bytes: how far start_offset moves from one k-block to the next inside an atom; for a
    K-major tile several atoms wide in K, crossing into the next atom jumps by the box stride
    instead, which wgmma_desc(k_block=...) accounts for.
    """

    start_offset: int
    lbo: int
    sbo: int
    swizzle_code: int
    k_step_bytes: int


@dataclass(frozen=True)
class SmemLayout:
    atom: LayoutAtom
    shape: tuple[int, ...]  # (mn, k) or (mn, k, stages), in elements

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if len(shape) not in (2, 3) or min(shape) < 1:
            raise ValueError(
                f"shape must be (mn, k) or (mn, k, stages) of positive ints, got {shape}")
        object.__setattr__(self, "shape", shape)
        for extent, unit, name in zip(shape[:2], self.atom.shape, ("mn", "k"), strict=True):
            if extent % unit:
                raise ValueError(f"shape: {name} extent {extent} must be a multiple of the atom's "
                                 f"{unit} ({self.atom.description()})")

    @property
    def mn(self) -> int:
        return self.shape[0]

    @property
    def k(self) -> int:
        return self.shape[1]

    @property
    def stages(self) -> int:
        return self.shape[2] if len(self.shape) == 3 else 1

    @property
    def rows(self) -> int:
        """Extent along the strided dimension (the TMA box's outer dimension)."""
        return self.atom.strided_and_contiguous(self.mn, self.k)[0]

    @property
    def boxes_per_stage(self) -> int:
        return self.atom.strided_and_contiguous(self.mn, self.k)[1] // self.atom.width

    @property
    def box_bytes(self) -> int:
        return self.rows * self.atom.mode.span_bytes

    @property
    def stage_bytes(self) -> int:
        # A whole number of atoms, and an atom's size is the mode's alignment (8 rows x span), so
        # every box and stage starts aligned without padding.
        return self.boxes_per_stage * self.box_bytes

    @property
    def size_bytes(self) -> int:
        return self.stages * self.stage_bytes

    def byte_offset(self, mn: Offset, k: Offset, stage: Offset = 0) -> Offset:
        check_index("mn", mn, self.mn)
        check_index("k", k, self.k)
        check_index("stage", stage, self.stages)
        row, col = self.atom.strided_and_contiguous(mn, k)
        box, col_in_box = col // self.atom.width, col % self.atom.width
        # Box and stage bases are multiples of the swizzle period, so they add outside the swizzle.
        return (stage * self.stage_bytes + box * self.box_bytes
                + tma_box_byte_offset(row, col_in_box * self.atom.elem_bytes,
                                      self.atom.mode.span_bytes, self.atom.mode))

    def tma_boxes(self) -> TmaBoxes:
        box_dims = (self.atom.width, self.rows)
        check_tma_box(box_dims, self.atom.elem_bits, self.atom.mode)
        n = self.boxes_per_stage
        return TmaBoxes(box_dims=box_dims, boxes_per_stage=n,
                        box_byte_offsets=tuple(i * self.box_bytes for i in range(n)),
                        box_inner_starts=tuple(i * self.atom.width for i in range(n)),
                        stage_bytes=self.stage_bytes, tma_code=self.atom.mode.tma_code)

    def wgmma_desc(self, mn_offset: int = 0, mn_extent: int | None = None, k_block: int = 0,
                   stage: int = 0) -> WgmmaDescFields:
        """Descriptor of the (mn_extent x one k-block) sub-tile at (mn_offset, k_block) of a stage.

        mn_extent defaults to the whole tile (64 for an A operand, N for B); it only bounds-checks.
        """
        atom, mode = self.atom, self.atom.mode
        k_elems = WGMMA_K_BYTES // atom.elem_bytes
        mn_extent = self.mn if mn_extent is None else mn_extent
        mn_unit = atom.shape[0]
        if not (8 <= mn_extent <= 256 and mn_extent % mn_unit == 0):
            raise ValueError(
                f"mn_extent must be a multiple of {mn_unit} in 8..256, got {mn_extent}")
        # Starting on an atom boundary keeps the descriptor's base offset (pattern phase) at 0.
        if mn_offset % mn_unit or mn_offset < 0 or mn_offset + mn_extent > self.mn:
            raise ValueError(f"mn_offset must be a multiple of {mn_unit} with mn_offset + "
                             f"mn_extent <= {self.mn}, got {mn_offset} + {mn_extent}")
        if self.k % k_elems:
            raise ValueError(f"shape: k extent {self.k} must be a multiple of the wgmma k-block "
                             f"({k_elems} elements = {WGMMA_K_BYTES} bytes)")
        check_index("k_block", k_block, self.k // k_elems)
        # The sub-tile starts at row 0 of an atom, where the swizzle is the identity, so this is
        # also the plain address wgmma expects.
        start = self.byte_offset(mn_offset, k_block * k_elems, stage)
        eight_rows = ATOM_ROWS * mode.span_bytes
        if atom.major is Major.K:
            # LBO: next 16-byte column along K. Swizzled: inside the atom, "assumed 1" (16 bytes)
            # per PTX; interleave: the next box. SBO: next 8 rows along MN.
            lbo = 16 if mode is not SwizzleMode.INTERLEAVE else self.box_bytes
            sbo = eight_rows
            k_step = (k_elems * atom.elem_bytes if atom.width >= k_elems
                      else (k_elems // atom.width) * self.box_bytes)
        else:
            # Swizzled: LBO = next atom along MN (next box), SBO = next 8 rows along K.
            # Interleave swaps the two, as CuTe's make_gmma_desc<Major::MN> does.
            lbo, sbo = self.box_bytes, eight_rows
            if mode is SwizzleMode.INTERLEAVE:
                lbo, sbo = sbo, lbo
            k_step = k_elems * mode.span_bytes
        return WgmmaDescFields(start_offset=start, lbo=lbo, sbo=sbo,
                               swizzle_code=mode.wgmma_code, k_step_bytes=k_step)


def choose_widest_swizzle(major: Major | str, elem_bits: int,
                          contiguous_extent_elems: int) -> SwizzleMode:
    """The widest mode whose span divides the tile's contiguous byte extent (fewest bank conflicts
    and the longest global-memory rows per TMA box)."""
    check_operand_major(major, elem_bits)
    nbytes = contiguous_extent_elems * elem_bits // 8
    for mode in (SwizzleMode.B128, SwizzleMode.B64, SwizzleMode.B32, SwizzleMode.INTERLEAVE):
        if nbytes > 0 and nbytes % mode.span_bytes == 0:
            return mode
    raise ValueError(f"contiguous_extent_elems: {contiguous_extent_elems} elements = {nbytes} "
                     "bytes, must be a positive multiple of 16 bytes")


def encode_wgmma_desc(fields: WgmmaDescFields, smem_base_addr: int = 0) -> int:
    """The 64-bit descriptor (PTX ISA "Matrix Descriptor Format"), base offset 0.

    Bits 0-13 start address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset, 62-63 swizzle.
    smem_base_addr is the shared address of the layout's buffer.
    """
    mode = SwizzleMode.from_wgmma_code(fields.swizzle_code)
    if smem_base_addr % mode.smem_alignment:
        raise ValueError(f"smem_base_addr must be a multiple of {mode.smem_alignment} for "
                         f"{mode.name} (base offset 0), got {smem_base_addr}")
    start = smem_base_addr + fields.start_offset
    for name, value in (("start address", start), ("lbo", fields.lbo), ("sbo", fields.sbo)):
        if value % 16 or not 0 <= value < _DESC_FIELD_LIMIT:
            raise ValueError(f"{name} must be a multiple of 16 below 2^18 bytes, got {value}")
    return ((start >> 4) | (fields.lbo >> 4) << 16 | (fields.sbo >> 4) << 32
            | fields.swizzle_code << 62)


def make_smem_layout(major: Major | str, elem_bits: int, shape: Sequence[int],
                     mode: SwizzleMode | None = None) -> SmemLayout:
    """SmemLayout of shape (mn, k[, stages]) with mode, or the widest swizzle that fits."""
    contiguous = shape[1] if Major(major) is Major.K else shape[0]
    mode = mode or choose_widest_swizzle(major, elem_bits, contiguous)
    return SmemLayout(LayoutAtom(major, mode, elem_bits), tuple(shape))
