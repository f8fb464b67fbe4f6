import numpy as np
import pytest

from jax_hopper.layout import (
    LayoutAtom,
    Major,
    SwizzleMode,
    tma_box_byte_offset,
    tma_box_smem_bytes,
)

RNG = np.random.default_rng(1)


def test_no_swizzle_is_plain_row_major():
    tile = RNG.integers(0, 2**16, size=(5, 24), dtype=np.uint16)
    out = tma_box_smem_bytes(tile, SwizzleMode.INTERLEAVE)
    assert out.dtype == np.uint8
    assert np.array_equal(out, tile.view(np.uint8).reshape(-1))


def test_128b_box_moves_chunk_c_of_row_r_to_chunk_c_xor_r():
    tile = np.arange(16 * 64, dtype=np.uint16).reshape(16, 64)  # 16 rows x 128 bytes
    out = tma_box_smem_bytes(tile, SwizzleMode.B128).view(np.uint16).reshape(16, 8, 8)
    for r in range(16):
        for c in range(8):
            assert np.array_equal(out[r, c ^ (r % 8)], tile[r, 8 * c:8 * c + 8])


@pytest.mark.parametrize("mode", [SwizzleMode.B32, SwizzleMode.B64, SwizzleMode.B128])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32])
def test_full_span_box_matches_the_k_major_atom(mode, dtype):
    itemsize = np.dtype(dtype).itemsize
    atom = LayoutAtom(Major.K, mode, 8 * itemsize)
    tile = RNG.standard_normal(atom.shape).astype(dtype) if itemsize > 1 else \
        RNG.integers(0, 256, size=atom.shape, dtype=np.uint8)
    out = tma_box_smem_bytes(tile, mode).view(dtype)
    mn, k = np.indices(atom.shape).reshape(2, -1)
    assert np.array_equal(out[atom.byte_offset(mn, k) // itemsize], tile[mn, k])


def test_narrow_box_in_wide_swizzle_keeps_every_byte():
    # A 64-byte inner box under 128B swizzle: rows pack at 64 bytes, then the address is swizzled.
    tile = np.arange(8 * 32, dtype=np.uint16).reshape(8, 32)
    out = tma_box_smem_bytes(tile, SwizzleMode.B128)
    assert np.array_equal(np.sort(out.view(np.uint16)), np.sort(tile.reshape(-1)))
    r, b = 3, 20  # byte 20 of row 3 is at linear 212: line 1 -> chunk 5 ^ 1 = 4
    assert tma_box_byte_offset(r, b, 64, SwizzleMode.B128) == 128 + 4 * 16 + 4
    assert out[128 + 64 + 4] == tile.view(np.uint8)[r, b]


@pytest.mark.parametrize(
    "tile, mode, message",
    [
        (np.zeros((2, 3, 8), np.uint16), SwizzleMode.B128, r"tile must be 2-D"),
        (np.zeros((8, 4), np.uint16), SwizzleMode.B128, r"box_dims\[0\] must span a multiple"),
        (np.zeros((8, 128), np.uint16), SwizzleMode.B128, r"box_dims\[0\] spans 256 bytes"),
        (np.zeros((300, 64), np.uint16), SwizzleMode.B128, r"box_dims\[1\] must be in 1..256"),
        (np.zeros((3, 32), np.uint16), SwizzleMode.B128, r"tile of 3 rows x 64 bytes must fill"),
    ],
)
def test_errors(tile, mode, message):
    with pytest.raises(ValueError, match=message):
        tma_box_smem_bytes(tile, mode)
