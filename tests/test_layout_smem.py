import numpy as np
import pytest

from jax_hopper.layout import (
    LayoutAtom,
    Major,
    SmemLayout,
    SwizzleMode,
    WgmmaDescFields,
    choose_widest_swizzle,
    encode_wgmma_desc,
    make_smem_layout,
    tma_box_smem_bytes,
)

ATOMS = [LayoutAtom(Major.K, mode, bits) for mode in SwizzleMode for bits in (8, 16, 32)] + \
        [LayoutAtom(Major.MN, mode, 16) for mode in SwizzleMode]
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def shapes_for(atom):
    """A few tiles: one atom, several atoms each way, and pipelined (3-stage) ones."""
    m, k = atom.shape
    return [(m, k), (4 * m, k), (m, 3 * k), (2 * m, 2 * k, 3), (2 * m, 4 * k, 2)]


def layouts():
    return [SmemLayout(a, s) for a in ATOMS for s in shapes_for(a)]


def ids(layout):
    a = layout.atom
    return f"{a.major.value}-{a.mode.name}-{a.elem_bits}b-{layout.shape}"


def all_offsets(lay):
    mn, k, s = np.indices((lay.mn, lay.k, lay.stages)).reshape(3, -1)
    return mn, k, s, lay.byte_offset(mn, k, s)


@pytest.mark.parametrize("lay", layouts(), ids=ids)
def test_offsets_are_a_bijection_onto_the_buffer(lay):
    *_, off = all_offsets(lay)
    eb = lay.atom.elem_bytes
    assert lay.size_bytes == lay.mn * lay.k * lay.stages * eb
    assert np.array_equal(np.sort(off), np.arange(0, lay.size_bytes, eb))


@pytest.mark.parametrize("lay", layouts(), ids=ids)
def test_stages_are_aligned(lay):
    for s in range(lay.stages):
        base = lay.byte_offset(0, 0, s)
        assert base == s * lay.stage_bytes
        assert base % lay.atom.mode.smem_alignment == 0


@pytest.mark.parametrize("lay", layouts(), ids=ids)
def test_tma_boxes_write_exactly_the_layout(lay):
    """Fill a stage through the TMA model box by box; it must equal placing every element by
    byte_offset."""
    atom = lay.atom
    rng = np.random.default_rng(0)
    tile = rng.integers(0, 2**atom.elem_bits, size=(lay.mn, lay.k), dtype=np.uint64).astype(
        UINT[atom.elem_bits])
    expected = np.zeros(lay.stage_bytes // atom.elem_bytes, dtype=tile.dtype)
    mn, k = np.indices(tile.shape).reshape(2, -1)
    expected[lay.byte_offset(mn, k) // atom.elem_bytes] = tile[mn, k]

    boxes = lay.tma_boxes()
    stored = tile if atom.major is Major.K else tile.T  # (rows, contiguous)
    got = np.zeros(lay.stage_bytes, dtype=np.uint8)
    inner, outer = boxes.box_dims
    assert boxes.boxes_per_stage * inner * outer * atom.elem_bytes == boxes.stage_bytes
    for start, off in zip(boxes.box_inner_starts, boxes.box_byte_offsets, strict=True):
        box = stored[:, start:start + inner]
        assert box.shape == (outer, inner)
        got[off:off + box.nbytes] = tma_box_smem_bytes(box, atom.mode)
    assert np.array_equal(got.view(tile.dtype), expected)
    assert boxes.tma_code == atom.mode.tma_code


def test_tma_boxes_of_standard_tiles():
    b = SmemLayout(LayoutAtom(Major.K, SwizzleMode.B128, 16), (128, 128, 4)).tma_boxes()
    assert (b.box_dims, b.boxes_per_stage) == ((64, 128), 2)
    assert b.box_byte_offsets == (0, 16384)
    assert (b.box_inner_starts, b.stage_bytes, b.tma_code) == ((0, 64), 32768, 3)
    b = SmemLayout(LayoutAtom(Major.MN, SwizzleMode.B128, 16), (256, 64)).tma_boxes()
    assert (b.box_dims, b.box_byte_offsets) == ((64, 64), (0, 8192, 16384, 24576))
    b = SmemLayout(LayoutAtom(Major.K, SwizzleMode.INTERLEAVE, 16), (128, 64)).tma_boxes()
    assert (b.box_dims, b.boxes_per_stage, b.tma_code) == ((8, 128), 8, 0)
    assert b.box_byte_offsets[1] == 2048
    with pytest.raises(ValueError, match=r"box_dims\[1\] must be in 1..256"):
        SmemLayout(LayoutAtom(Major.K, SwizzleMode.B128, 16), (512, 64)).tma_boxes()


def wgmma_reads(fields, atom, mn_extent):
    """Where wgmma reads each (mn, k) of its sub-tile, in bytes, transcribed from the PTX ISA
    canonical layouts (9.7.15.5.1.2.1.3) independently of SmemLayout.

    T elements make 16 bytes; W = span / 16."""
    eb, span = atom.elem_bytes, atom.mode.span_bytes
    T, W = 16 // eb, span // 16
    lbo, sbo = fields.lbo, fields.sbo
    mn, k = np.indices((mn_extent, 32 // eb)).reshape(2, -1)
    if atom.major is Major.K:
        if atom.mode is SwizzleMode.INTERLEAVE:  # ((8,m),(T,2k)):((1T,SBO),(1,LBO))
            rel = (mn % 8) * 16 + (mn // 8) * sbo + (k % T) * eb + (k // T) * lbo
        else:  # ((8,m),(T,2k)):((WT,SBO),(1,T))
            rel = (mn % 8) * span + (mn // 8) * sbo + k * eb
    elif atom.mode is SwizzleMode.INTERLEAVE:  # ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
        rel = (mn % T) * eb + (mn // T) * sbo + (k % 8) * 16 + (k // 8) * lbo
    else:  # ((T,W,m),(8,k)):((1,T,LBO),(WT,SBO))
        rel = ((mn % T) * eb + (mn // T % W) * 16 + (mn // (T * W)) * lbo
               + (k % 8) * span + (k // 8) * sbo)
    return mn, k, atom.mode.swizzle.apply(fields.start_offset + rel)


@pytest.mark.parametrize("lay", layouts(), ids=ids)
def test_wgmma_descriptor_reads_what_tma_wrote(lay):
    atom = lay.atom
    k_elems = 32 // atom.elem_bytes
    if lay.k % k_elems:
        with pytest.raises(ValueError, match="k-block"):
            lay.wgmma_desc()
        return
    unit = atom.shape[0]
    extent = min(lay.mn, 256) // unit * unit
    for stage in range(lay.stages):
        for mn_offset in range(0, lay.mn - extent + 1, unit):
            for k_block in range(lay.k // k_elems):
                f = lay.wgmma_desc(mn_offset, extent, k_block, stage)
                mn, k, addr = wgmma_reads(f, atom, extent)
                assert np.array_equal(
                    addr, lay.byte_offset(mn_offset + mn, k_block * k_elems + k, stage))
    # k_step_bytes is the k-block stride inside one atom column of a K-major swizzled tile, and
    # across the whole tile otherwise.
    swizzled_k = atom.major is Major.K and atom.mode is not SwizzleMode.INTERLEAVE
    n_blocks = (atom.width if swizzled_k else lay.k) // k_elems
    starts = [lay.wgmma_desc(mn_extent=extent, k_block=j).start_offset for j in range(n_blocks)]
    assert np.all(np.diff(starts) == lay.wgmma_desc(mn_extent=extent).k_step_bytes)


def test_standard_gemm_descriptors():
    a = SmemLayout(LayoutAtom(Major.K, SwizzleMode.B128, 16), (128, 64, 4))
    f = a.wgmma_desc(mn_extent=64)
    assert (f.sbo, f.swizzle_code, f.k_step_bytes, f.lbo, f.start_offset) == (1024, 1, 32, 16, 0)
    assert [a.wgmma_desc(mn_extent=64, k_block=j).start_offset for j in range(4)] == [0, 32, 64, 96]
    assert a.wgmma_desc(mn_offset=64, mn_extent=64, stage=2).start_offset == 2 * 16384 + 8192
    b = SmemLayout(LayoutAtom(Major.MN, SwizzleMode.B128, 16), (256, 64))
    f = b.wgmma_desc()
    assert (f.lbo, f.sbo, f.k_step_bytes, f.swizzle_code) == (64 * 128, 1024, 2048, 1)
    assert b.wgmma_desc(k_block=3).start_offset == 3 * 2048
    # K-major interleave: SBO = 8 rows x 16 B, LBO = next core matrix along K = next box.
    c = SmemLayout(LayoutAtom(Major.K, SwizzleMode.INTERLEAVE, 32), (16, 16))
    f = c.wgmma_desc()
    assert (f.lbo, f.sbo, f.swizzle_code, f.k_step_bytes) == (256, 128, 0, 512)
    # MN-major interleave: CuTe swaps the roles: SBO = next core matrix along MN.
    d = SmemLayout(LayoutAtom(Major.MN, SwizzleMode.INTERLEAVE, 16), (64, 32))
    f = d.wgmma_desc()
    assert (f.lbo, f.sbo, f.k_step_bytes) == (128, 32 * 16, 256)


def test_wgmma_desc_errors():
    a = SmemLayout(LayoutAtom(Major.K, SwizzleMode.B128, 16), (128, 64))
    with pytest.raises(ValueError, match="mn_offset must be a multiple of 8"):
        a.wgmma_desc(mn_offset=4, mn_extent=64)
    with pytest.raises(ValueError, match="mn_offset"):
        a.wgmma_desc(mn_offset=96, mn_extent=64)
    with pytest.raises(ValueError, match="mn_extent"):
        a.wgmma_desc(mn_extent=60)
    with pytest.raises(ValueError, match="k_block must lie in"):
        a.wgmma_desc(k_block=4)
    with pytest.raises(ValueError, match="k-block"):
        SmemLayout(LayoutAtom(Major.K, SwizzleMode.INTERLEAVE, 16), (64, 8)).wgmma_desc()


def test_encode_wgmma_desc():
    a = SmemLayout(LayoutAtom(Major.K, SwizzleMode.B128, 16), (128, 64, 2))
    assert encode_wgmma_desc(a.wgmma_desc(mn_extent=64)) == (1 << 16) | (64 << 32) | (1 << 62)
    d = encode_wgmma_desc(a.wgmma_desc(mn_extent=64, k_block=1, stage=1), smem_base_addr=3072)
    assert d & 0x3FFF == (3072 + 16384 + 32) >> 4
    assert (d >> 16) & 0x3FFF == 1 and (d >> 32) & 0x3FFF == 64
    assert (d >> 49) & 0x7 == 0 and d >> 62 == 1
    b = SmemLayout(LayoutAtom(Major.MN, SwizzleMode.B64, 16), (64, 32))
    d = encode_wgmma_desc(b.wgmma_desc())
    assert ((d >> 16) & 0x3FFF, (d >> 32) & 0x3FFF, d >> 62) == (32 * 64 >> 4, 512 >> 4, 2)


def test_encode_wgmma_desc_errors():
    f = WgmmaDescFields(start_offset=0, lbo=16, sbo=1024, swizzle_code=1, k_step_bytes=32)
    with pytest.raises(ValueError, match="smem_base_addr must be a multiple of 1024"):
        encode_wgmma_desc(f, smem_base_addr=512)
    encode_wgmma_desc(f, smem_base_addr=512 + 1024 * 3 - 512)
    with pytest.raises(ValueError, match="lbo must be a multiple of 16"):
        encode_wgmma_desc(WgmmaDescFields(0, 8, 1024, 1, 32))
    with pytest.raises(ValueError, match="sbo must be a multiple of 16 below 2"):
        encode_wgmma_desc(WgmmaDescFields(0, 16, 1 << 18, 1, 32))
    with pytest.raises(ValueError, match="start address"):
        encode_wgmma_desc(WgmmaDescFields(1 << 18, 16, 1024, 1, 32))


@pytest.mark.parametrize(
    "major, bits, extent, mode",
    [
        ("K", 16, 64, SwizzleMode.B128), ("K", 16, 128, SwizzleMode.B128),
        ("K", 16, 32, SwizzleMode.B64), ("K", 16, 96, SwizzleMode.B64),
        ("K", 16, 16, SwizzleMode.B32), ("K", 16, 8, SwizzleMode.INTERLEAVE),
        ("K", 16, 24, SwizzleMode.INTERLEAVE), ("K", 8, 128, SwizzleMode.B128),
        ("K", 32, 32, SwizzleMode.B128), ("K", 32, 8, SwizzleMode.B32),
        ("MN", 16, 256, SwizzleMode.B128), ("MN", 16, 48, SwizzleMode.B32),
    ],
)
def test_choose_widest_swizzle(major, bits, extent, mode):
    assert choose_widest_swizzle(major, bits, extent) is mode
    lay = make_smem_layout(major, bits, (64, 64) if major == "K" else (extent, 16))
    assert lay.atom.major is Major(major)


def test_choose_widest_swizzle_errors():
    with pytest.raises(ValueError, match="contiguous_extent_elems: 4 elements = 8 bytes"):
        choose_widest_swizzle("K", 16, 4)
    with pytest.raises(ValueError, match="major='MN'"):
        choose_widest_swizzle("MN", 8, 128)


def test_make_smem_layout_picks_mode():
    assert make_smem_layout("K", 16, (128, 64, 4)).atom.mode is SwizzleMode.B128
    assert make_smem_layout("K", 16, (128, 32)).atom.mode is SwizzleMode.B64
    assert make_smem_layout("K", 16, (128, 64), SwizzleMode.B32).atom.mode is SwizzleMode.B32


def test_bad_shapes_and_indices():
    atom = LayoutAtom(Major.K, SwizzleMode.B128, 16)
    with pytest.raises(ValueError, match="shape: k extent 32 must be a multiple"):
        SmemLayout(atom, (128, 32))
    with pytest.raises(ValueError, match="shape: mn extent 12"):
        SmemLayout(atom, (12, 64))
    with pytest.raises(ValueError, match="shape must be"):
        SmemLayout(atom, (128,))
    lay = SmemLayout(atom, (128, 64, 2))
    with pytest.raises(ValueError, match="stage must lie in"):
        lay.byte_offset(0, 0, 2)
    with pytest.raises(ValueError, match="mn must lie in"):
        lay.byte_offset(128, 0)
