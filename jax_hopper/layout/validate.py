"""Checks for the hardware rules that TMA and wgmma enforce, raised early as ValueError.

Each message names the offending argument and the rule, so a bad config fails in Python rather
than as an illegal-instruction or a silent wrong answer on the GPU. This module is a leaf (the
other layout modules import it), so it compares Major by its string value.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jax_hopper.kernels.catalog import SMEM_LIMIT_BYTES

from .swizzle import SwizzleMode


def check_elem_bits(elem_bits: int, allowed: Sequence[int] = (8, 16, 32)) -> None:
    if elem_bits not in allowed:
        raise ValueError(f"elem_bits must be one of {tuple(allowed)}, got {elem_bits}")


def check_operand_major(major: str, elem_bits: int) -> None:
    """wgmma's transpose bits exist only for f16/bf16: tf32 and 8-bit operands must be K-major."""
    if major not in ("K", "MN"):
        raise ValueError(f"major must be 'K' or 'MN', got {major!r}")
    check_elem_bits(elem_bits)
    if major == "MN" and elem_bits != 16:
        raise ValueError(
            f"major='MN' needs 16-bit elements (elem_bits={elem_bits}): wgmma transposes only "
            "f16/bf16 operands; tf32 and fp8/int8 operands must be K-major in shared memory")


def check_index(name: str, value: int | np.ndarray, extent: int) -> None:
    """Every entry of value must lie in [0, extent)."""
    v = np.asarray(value)
    if v.size and (v.min() < 0 or v.max() >= extent):
        raise ValueError(f"{name} must lie in [0, {extent}), got values in [{v.min()}, {v.max()}]")


def check_tma_box(box_dims: Sequence[int], elem_bits: int, mode: SwizzleMode) -> None:
    """box_dims innermost first, as CUtensorMap's boxDim."""
    check_elem_bits(elem_bits, (8, 16, 32, 64))
    if not 1 <= len(box_dims) <= 5:
        raise ValueError(f"box_dims must have rank 1..5 (TMA tensor rank), got {len(box_dims)}")
    for i, d in enumerate(box_dims):
        if not 1 <= d <= 256:
            raise ValueError(f"box_dims[{i}] must be in 1..256 (TMA box limit), got {d}")
    inner_bytes = box_dims[0] * elem_bits // 8
    if inner_bytes % 16:
        raise ValueError(f"box_dims[0] must span a multiple of 16 bytes, got {inner_bytes} bytes")
    if mode is not SwizzleMode.INTERLEAVE and inner_bytes > mode.span_bytes:
        raise ValueError(f"box_dims[0] spans {inner_bytes} bytes, more than the "
                         f"{mode.span_bytes}-byte swizzle span of {mode.name}")


def check_tma_global(shape: Sequence[int], strides_bytes: Sequence[int], elem_bits: int,
                     base_alignment: int = 16) -> None:
    """shape and strides_bytes innermost first; strides_bytes[0] is the element size (contiguous).

    base_alignment is what the global base address is known to be aligned to.
    """
    check_elem_bits(elem_bits, (8, 16, 32, 64))
    if not 1 <= len(shape) <= 5:
        raise ValueError(f"shape must have rank 1..5 (TMA tensor rank), got {len(shape)}")
    if len(strides_bytes) != len(shape):
        raise ValueError(f"strides_bytes must have one entry per dimension of shape "
                         f"({len(shape)}), got {len(strides_bytes)}")
    if base_alignment % 16:
        raise ValueError(f"base_alignment must be a multiple of 16 bytes (TMA global address "
                         f"alignment), got {base_alignment}")
    for i, d in enumerate(shape):
        if not 1 <= d < 2**32:
            raise ValueError(f"shape[{i}] must be in 1..2^32-1 (TMA globalDim), got {d}")
    if strides_bytes[0] != elem_bits // 8:
        raise ValueError(f"strides_bytes[0] must equal the element size {elem_bits // 8} "
                         f"(TMA's innermost dimension is contiguous), got {strides_bytes[0]}")
    for i, s in enumerate(strides_bytes[1:], start=1):
        if s % 16:
            raise ValueError(f"strides_bytes[{i}] must be a multiple of 16 bytes "
                             f"(TMA globalStrides), got {s}")
        if not 0 <= s < 2**40:
            raise ValueError(
                f"strides_bytes[{i}] must be in 0..2^40-1 (TMA globalStrides), got {s}")


def check_smem_budget(nbytes: int, limit: int = SMEM_LIMIT_BYTES) -> None:
    if nbytes > limit:
        raise ValueError(f"nbytes: {nbytes} bytes of shared memory exceed the per-block limit "
                         f"of {limit} bytes")


def check_wgmma_shape(m: int, n: int, k: int, elem_bits: int, *, integer: bool = False) -> None:
    """PTX ISA wgmma.mma_async shapes: m64nNk(256/elem_bits).

    N is 8..256 in steps of 8 for f16/bf16 (k16), tf32 (k8) and fp8 e4m3/e5m2 (k32); the integer
    s8/u8 variant (integer=True) allows only N in {8, 16, 24, 32} or 48..256 in steps of 16.
    """
    check_elem_bits(elem_bits)
    if m != 64:
        raise ValueError(f"m must be 64 (one warpgroup's wgmma), got {m}")
    if k != 256 // elem_bits:
        raise ValueError(f"k must be {256 // elem_bits} for {elem_bits}-bit inputs "
                         f"(32 bytes of K per wgmma), got {k}")
    if integer:
        if elem_bits != 8:
            raise ValueError(f"integer=True needs elem_bits=8 (s8/u8 wgmma), got {elem_bits}")
        if not (n in (8, 16, 24, 32) or (48 <= n <= 256 and n % 16 == 0)):
            raise ValueError(f"n must be 8, 16, 24, 32 or a multiple of 16 in 48..256 for "
                             f"integer wgmma, got {n}")
    elif not (8 <= n <= 256 and n % 8 == 0):
        raise ValueError(f"n must be a multiple of 8 in 8..256, got {n}")
