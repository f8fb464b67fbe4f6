import itertools

import numpy as np
import pytest

from jax_hopper.layout import LayoutAtom, Major, Swizzle, SwizzleMode

VALID = [(Major.K, mode, bits) for mode in SwizzleMode for bits in (8, 16, 32)] + \
        [(Major.MN, mode, 16) for mode in SwizzleMode]


def all_offsets(atom):
    mn, k = np.indices(atom.shape).reshape(2, -1)
    return mn, k, atom.byte_offset(mn, k)


@pytest.mark.parametrize(
    "major, mode, bits, shape, swizzle",
    [
        ("K", SwizzleMode.B128, 16, (8, 64), Swizzle(3, 4, 3)),
        ("MN", SwizzleMode.B128, 16, (64, 8), Swizzle(3, 4, 3)),
        ("K", SwizzleMode.B64, 16, (8, 32), Swizzle(2, 4, 3)),
        ("MN", SwizzleMode.B64, 16, (32, 8), Swizzle(2, 4, 3)),
        ("K", SwizzleMode.B32, 16, (8, 16), Swizzle(1, 4, 3)),
        ("MN", SwizzleMode.B32, 16, (16, 8), Swizzle(1, 4, 3)),
        ("K", SwizzleMode.INTERLEAVE, 16, (8, 8), Swizzle(0, 4, 3)),
        ("MN", SwizzleMode.INTERLEAVE, 16, (8, 8), Swizzle(0, 4, 3)),
        ("K", SwizzleMode.B128, 8, (8, 128), Swizzle(3, 4, 3)),
        ("K", SwizzleMode.B128, 32, (8, 32), Swizzle(3, 4, 3)),
        ("K", SwizzleMode.B32, 32, (8, 8), Swizzle(1, 4, 3)),
        ("K", SwizzleMode.INTERLEAVE, 8, (8, 16), Swizzle(0, 4, 3)),
        ("K", SwizzleMode.INTERLEAVE, 32, (8, 4), Swizzle(0, 4, 3)),
    ],
)
def test_known_atoms(major, mode, bits, shape, swizzle):
    atom = LayoutAtom(major, mode, bits)
    assert atom.major is Major(major)
    assert atom.shape == shape
    assert atom.swizzle == swizzle
    assert atom.size_bytes == 8 * mode.span_bytes == shape[0] * shape[1] * bits // 8


@pytest.mark.parametrize("major, mode, bits", VALID)
def test_atom_is_a_bijection_onto_its_bytes(major, mode, bits):
    atom = LayoutAtom(major, mode, bits)
    _, _, off = all_offsets(atom)
    eb = bits // 8
    assert np.array_equal(np.sort(off), np.arange(0, atom.size_bytes, eb))


@pytest.mark.parametrize("major, mode, bits", VALID)
def test_contiguous_run_of_16_bytes_stays_together(major, mode, bits):
    atom = LayoutAtom(major, mode, bits)
    mn, k, off = all_offsets(atom)
    contiguous = k if major is Major.K else mn
    per_chunk = 16 // (bits // 8)
    first = atom.byte_offset(mn - (mn % per_chunk if major is Major.MN else 0),
                             k - (k % per_chunk if major is Major.K else 0))
    assert np.array_equal(off - first, (contiguous % per_chunk) * (bits // 8))
    assert np.all(first % 16 == 0)


def test_known_offsets():
    k128 = LayoutAtom(Major.K, SwizzleMode.B128, 16)
    assert k128.byte_offset(0, 0) == 0
    assert k128.byte_offset(1, 0) == 128 + 16  # row 1's chunk 0 sits in chunk 1
    assert k128.byte_offset(1, 8) == 128  # and its chunk 1 in chunk 0
    assert k128.byte_offset(7, 63) == 7 * 128 + (7 ^ 7) * 16 + 14
    mn128 = LayoutAtom(Major.MN, SwizzleMode.B128, 16)
    assert mn128.byte_offset(0, 1) == 128 + 16
    assert mn128.byte_offset(8, 1) == 128
    assert mn128.byte_offset(63, 0) == 126
    inter = LayoutAtom(Major.MN, SwizzleMode.INTERLEAVE, 16)
    assert inter.byte_offset(3, 5) == 5 * 16 + 3 * 2


def test_array_and_scalar_agree():
    atom = LayoutAtom("K", SwizzleMode.B64, 8)
    mn, k, off = all_offsets(atom)
    assert [atom.byte_offset(int(a), int(b)) for a, b in zip(mn, k, strict=True)] == off.tolist()


@pytest.mark.parametrize("mode, bits", list(itertools.product(SwizzleMode, (8, 32))))
def test_mn_major_needs_16_bit(mode, bits):
    with pytest.raises(ValueError, match=r"major='MN'.*16-bit.*K-major"):
        LayoutAtom(Major.MN, mode, bits)


def test_bad_arguments():
    with pytest.raises(ValueError, match="elem_bits"):
        LayoutAtom(Major.K, SwizzleMode.B128, 64)
    with pytest.raises(ValueError, match="major"):
        LayoutAtom("N", SwizzleMode.B128, 16)
    atom = LayoutAtom(Major.K, SwizzleMode.B128, 16)
    with pytest.raises(ValueError, match="mn must lie in"):
        atom.byte_offset(8, 0)
    with pytest.raises(ValueError, match="k must lie in"):
        atom.byte_offset(np.array([0, 1]), np.array([0, -1]))


def test_description():
    text = LayoutAtom(Major.K, SwizzleMode.B128, 16).description()
    assert "K-major B128" in text and "8 x 64" in text and "Swizzle<3,4,3>" in text
    assert "1024 B" in text
