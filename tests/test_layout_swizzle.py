import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax_hopper.layout import Swizzle, SwizzleMode

# name: (span, Swizzle bits, CUtensorMapSwizzle, wgmma bits 62-63, alignment)
EXPECTED = {
    SwizzleMode.INTERLEAVE: (16, 0, 0, 0, 128),
    SwizzleMode.B32: (32, 1, 1, 3, 256),
    SwizzleMode.B64: (64, 2, 2, 2, 512),
    SwizzleMode.B128: (128, 3, 3, 1, 1024),
}


@pytest.mark.parametrize("mode", list(SwizzleMode))
def test_mode_table(mode):
    span, bits, tma, wgmma, align = EXPECTED[mode]
    assert mode.span_bytes == span
    assert mode.swizzle == Swizzle(bits, 4, 3)
    assert mode.tma_code == tma
    assert mode.wgmma_code == wgmma
    assert mode.smem_alignment == align
    assert SwizzleMode.from_wgmma_code(wgmma) is mode


@pytest.mark.parametrize("mode", [SwizzleMode.B32, SwizzleMode.B64, SwizzleMode.B128])
def test_alignment_is_one_swizzle_period(mode):
    # The PTX base-offset rule: the pattern must start on its own period (8 rows x span).
    assert mode.smem_alignment == mode.swizzle.period_bytes == 8 * mode.span_bytes


@pytest.mark.parametrize("mode", list(SwizzleMode))
def test_bijection_inside_period_and_chunks_stay_whole(mode):
    sw = mode.swizzle
    off = np.arange(sw.period_bytes)
    out = sw.apply(off)
    assert sorted(out.tolist()) == off.tolist()
    assert np.array_equal(out & 15, off & 15)  # low 4 bits untouched: 16-byte chunks move whole
    assert np.array_equal(out - (out & 15), sw.apply(off - (off & 15)))


@pytest.mark.parametrize("mode", list(SwizzleMode))
def test_periodic_and_scalar_matches_array(mode):
    sw = mode.swizzle
    off = np.arange(sw.period_bytes)
    for n in (1, 5):
        shifted = off + n * sw.period_bytes
        assert np.array_equal(sw.apply(shifted), sw.apply(off) + n * sw.period_bytes)
    assert [sw.apply(int(o)) for o in off[::7]] == sw.apply(off[::7]).tolist()


def test_known_values():
    sw = SwizzleMode.B128.swizzle
    assert str(sw) == "Swizzle<3,4,3>"
    assert sw.apply(128) == 128 + 16  # row 1, chunk 0 -> chunk 1
    assert sw.apply(7 * 128 + 3 * 16 + 5) == 7 * 128 + (3 ^ 7) * 16 + 5
    assert SwizzleMode.B64.swizzle.apply(3 * 64 + 16) == 3 * 64  # 64-B row 3: chunks 0,1 swap
    assert SwizzleMode.B64.swizzle.apply(64 + 16) == 64 + 16  # rows 0-1 (first 128 B) unchanged
    assert SwizzleMode.B64.swizzle.apply(2 * 128) == 2 * 128 + 2 * 16
    assert SwizzleMode.B32.swizzle.apply(128) == 128 + 16
    assert SwizzleMode.INTERLEAVE.swizzle.apply(12345) == 12345


@given(st.integers(0, 3), st.integers(0, 2**20))
def test_swizzle_is_an_involution(bits, offset):
    sw = Swizzle(bits, 4, 3)
    assert sw.apply(sw.apply(offset)) == offset


def test_bad_swizzle_and_code():
    with pytest.raises(ValueError, match="shift must be >= bits"):
        Swizzle(3, 4, 2)
    with pytest.raises(ValueError, match="bits and base"):
        Swizzle(-1, 4, 3)
    with pytest.raises(ValueError, match="wgmma swizzle code"):
        SwizzleMode.from_wgmma_code(4)
