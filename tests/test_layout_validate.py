import numpy as np
import pytest

from jax_hopper.layout import (
    SMEM_LIMIT_BYTES,
    SwizzleMode,
    check_elem_bits,
    check_operand_major,
    check_smem_budget,
    check_tma_box,
    check_tma_global,
    check_wgmma_shape,
)
from jax_hopper.layout.validate import check_index


@pytest.mark.parametrize(
    "box, bits, mode",
    [
        ((64, 128), 16, SwizzleMode.B128),
        ((32, 256), 8, SwizzleMode.B32),
        ((8,), 16, SwizzleMode.INTERLEAVE),
        ((256, 1, 1, 1, 1), 16, SwizzleMode.INTERLEAVE),
        ((2, 64), 64, SwizzleMode.B32),
    ],
)
def test_tma_box_ok(box, bits, mode):
    check_tma_box(box, bits, mode)


@pytest.mark.parametrize(
    "box, bits, mode, message",
    [
        ((), 16, SwizzleMode.B128, r"box_dims must have rank 1..5"),
        ((8, 1, 1, 1, 1, 1), 16, SwizzleMode.INTERLEAVE, r"box_dims must have rank 1..5"),
        ((64, 257), 16, SwizzleMode.B128, r"box_dims\[1\] must be in 1..256"),
        ((0, 8), 16, SwizzleMode.B128, r"box_dims\[0\] must be in 1..256"),
        ((4, 8), 16, SwizzleMode.B128, r"box_dims\[0\] must span a multiple of 16 bytes, got 8"),
        ((128, 8), 16, SwizzleMode.B128, r"box_dims\[0\] spans 256 bytes, more than the 128-byte"),
        ((32, 8), 16, SwizzleMode.B32, r"box_dims\[0\] spans 64 bytes.*B32"),
        ((64, 8), 4, SwizzleMode.B128, r"elem_bits must be one of"),
    ],
)
def test_tma_box_errors(box, bits, mode, message):
    with pytest.raises(ValueError, match=message):
        check_tma_box(box, bits, mode)


def test_tma_global_ok():
    # bf16 row-major 4096 x 8192 matrix, innermost first.
    check_tma_global((8192, 4096), (2, 8192 * 2), 16)
    check_tma_global((7, 3, 5), (4, 32, 96), 32, base_alignment=256)


@pytest.mark.parametrize(
    "shape, strides, bits, align, message",
    [
        ((), (), 16, 16, r"shape must have rank 1..5"),
        ((2,) * 6, (2,) * 6, 16, 16, r"shape must have rank 1..5"),
        ((8, 8), (2,), 16, 16, r"strides_bytes must have one entry per dimension"),
        ((8, 8), (2, 16), 16, 8, r"base_alignment must be a multiple of 16"),
        ((2**32, 8), (2, 2**33), 16, 16, r"shape\[0\] must be in 1..2\^32-1"),
        ((8, 0), (2, 16), 16, 16, r"shape\[1\] must be in"),
        ((8, 8), (4, 16), 16, 16, r"strides_bytes\[0\] must equal the element size 2"),
        ((4095, 8), (2, 8190), 16, 16, r"strides_bytes\[1\] must be a multiple of 16 bytes"),
        ((8, 8, 8), (2, 16, 2**40), 16, 16, r"strides_bytes\[2\] must be in 0..2\^40-1"),
    ],
)
def test_tma_global_errors(shape, strides, bits, align, message):
    with pytest.raises(ValueError, match=message):
        check_tma_global(shape, strides, bits, base_alignment=align)


def test_smem_budget():
    assert SMEM_LIMIT_BYTES == 232448
    check_smem_budget(SMEM_LIMIT_BYTES)
    with pytest.raises(ValueError, match=r"nbytes: 232449 bytes .* limit of 232448"):
        check_smem_budget(SMEM_LIMIT_BYTES + 1)
    with pytest.raises(ValueError, match=r"nbytes: 2000 bytes .* limit of 1024"):
        check_smem_budget(2000, limit=1024)


@pytest.mark.parametrize("n", [8, 16, 24, 120, 136, 256])
@pytest.mark.parametrize("bits", [8, 16, 32])
def test_wgmma_shape_ok(n, bits):
    check_wgmma_shape(64, n, 256 // bits, bits)


@pytest.mark.parametrize("n", [8, 16, 24, 32, 48, 64, 208, 256])
def test_wgmma_integer_shape_ok(n):
    check_wgmma_shape(64, n, 32, 8, integer=True)


@pytest.mark.parametrize(
    "m, n, k, bits, integer, message",
    [
        (128, 128, 16, 16, False, r"m must be 64"),
        (64, 128, 32, 16, False, r"k must be 16 for 16-bit"),
        (64, 128, 16, 32, False, r"k must be 8 for 32-bit"),
        (64, 128, 16, 8, False, r"k must be 32 for 8-bit"),
        (64, 0, 16, 16, False, r"n must be a multiple of 8 in 8..256"),
        (64, 264, 16, 16, False, r"n must be a multiple of 8 in 8..256"),
        (64, 12, 16, 16, False, r"n must be a multiple of 8"),
        (64, 40, 32, 8, True, r"n must be 8, 16, 24, 32 or a multiple of 16"),
        (64, 56, 32, 8, True, r"n must be 8, 16, 24, 32 or a multiple of 16"),
        (64, 64, 16, 16, True, r"integer=True needs elem_bits=8"),
        (64, 64, 4, 64, False, r"elem_bits must be one of"),
    ],
)
def test_wgmma_shape_errors(m, n, k, bits, integer, message):
    with pytest.raises(ValueError, match=message):
        check_wgmma_shape(m, n, k, bits, integer=integer)


def test_operand_major():
    check_operand_major("MN", 16)
    for bits in (8, 16, 32):
        check_operand_major("K", bits)
    for bits in (8, 32):
        with pytest.raises(ValueError, match=r"major='MN' needs 16-bit elements.*tf32 and fp8"):
            check_operand_major("MN", bits)
    with pytest.raises(ValueError, match=r"major must be 'K' or 'MN', got 'N'"):
        check_operand_major("N", 16)
    with pytest.raises(ValueError, match=r"elem_bits must be one of \(8, 16, 32\), got 4"):
        check_operand_major("K", 4)


def test_elem_bits_and_index():
    check_elem_bits(16)
    with pytest.raises(ValueError, match="elem_bits"):
        check_elem_bits(12)
    check_index("row", np.arange(8), 8)
    check_index("row", np.array([], dtype=int), 0)
    with pytest.raises(ValueError, match=r"row must lie in \[0, 8\), got values in \[0, 8\]"):
        check_index("row", np.arange(9), 8)
