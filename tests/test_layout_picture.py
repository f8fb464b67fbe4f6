import sys

import numpy as np
import pytest

from jax_hopper.layout import LayoutAtom, Major, SmemLayout, SwizzleMode, chunk_grid, describe, draw


def test_describe_standard_tile():
    text = describe(SmemLayout(LayoutAtom(Major.K, SwizzleMode.B128, 16), (128, 64, 4)))
    assert "Swizzle<3,4,3>" in text and "mn=128 k=64 stages=4" in text
    assert "(inner 64 elements, outer 128 rows)" in text
    assert "SBO 1024 B" in text and "LBO 16 B" in text and "k-step 32 B" in text
    text = describe(SmemLayout(LayoutAtom(Major.MN, SwizzleMode.B128, 16), (256, 64)))
    assert "LBO 8192 B" in text and "4 box(es)" in text


def test_describe_atom_and_unreadable_tile():
    assert "8 x 64 elements" in describe(LayoutAtom(Major.K, SwizzleMode.B128, 16))
    text = describe(LayoutAtom(Major.K, SwizzleMode.INTERLEAVE, 16))  # k=8 < one wgmma k-block
    assert "wgmma: not readable as is" in text


def test_chunk_grid_shows_the_xor_pattern():
    rows_at, chunks_at = chunk_grid(LayoutAtom(Major.K, SwizzleMode.B128, 16))
    r, p = np.indices((8, 8))
    assert np.array_equal(rows_at, r)
    assert np.array_equal(chunks_at, p ^ r)


def test_chunk_grid_multi_box_covers_every_chunk_once():
    lay = SmemLayout(LayoutAtom(Major.MN, SwizzleMode.B64, 16), (64, 16))
    rows_at, chunks_at = chunk_grid(lay)
    assert rows_at.shape == (lay.stage_bytes // 64, 4)
    pairs = set(zip(rows_at.ravel().tolist(), chunks_at.ravel().tolist(), strict=True))
    assert pairs == {(r, c) for r in range(16) for c in range(8)}


def test_draw_writes_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional; draw() needs it")
    for i, obj in enumerate([LayoutAtom(Major.K, SwizzleMode.B128, 16),
                             SmemLayout(LayoutAtom(Major.MN, SwizzleMode.B32, 16), (32, 16, 2)),
                             SmemLayout(LayoutAtom(Major.K, SwizzleMode.INTERLEAVE, 8), (16, 32))]):
        path = tmp_path / f"layout{i}.png"
        draw(obj, path)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_draw_without_matplotlib_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="needs matplotlib"):
        draw(LayoutAtom(Major.K, SwizzleMode.B128, 16), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
