"""TMA's row-pitch rule, and how the CUDA lowering meets it for any shape.

TMA addresses a 2-D (or 3-D) array only when its rows start 16 bytes apart (catalog.
TMA_PITCH_BYTES): a bf16 operand's last dimension must be a multiple of 8, the output's too
(4 for float32). An operand or output that breaks the rule is padded along its last dimension,
in the CUDA lowering only (the primitive, its transformations and the CPU reference keep the
true shapes):
- an operand's padding is a copy of it (jnp.pad, zeros), the one cost of an odd pitch;
- the handlers then accept operand extents that differ from the problem's by less than the pitch
  granule (ffi/gemm/matmul.cc, `within_pitch_pad`): a K-major operand padded along K meets a
  shorter K of the other operand (TMA reads the missing rows as zeros, so the padded columns add
  nothing), an MN-major operand padded along M or N is longer than the output (its extra columns
  are computed and never stored);
- an output whose pitch breaks the rule is computed with its N padded (bias and residual padded
  to match; b is not copied: its missing rows read as zeros) and sliced after the call.
  NOTES: the slice is XLA's, which fuses it into the output's consumer where there is one.
  Alone it can cost as much as the GEMM (251 x 100277 from 100280 bf16 columns: 120.4 us at
  0.67 TB/s, ncu_h200_20261203_odd_251.txt). A kernel of our own for it (aligned 16-byte stores
  of the dense rows, element loads from the padded ones; branch unpad-tried, ead09b5) ran that
  call 1.67x faster alone (234.2 -> 140.6 us, 1.01x XLA) and the others 1.00-1.01x, but
  followed by a reduction, whose fusion XLA's slice joins, 0.75-0.96x (2048 x 50257 x 768
  357.5 -> 476.6 us: a pass the fusion did not need; H200, 2026-12-03,
  ab_h200_20261203_unpad.json, ab_h200_20261203_unpad_fused.log). Not kept: an output is
  rarely the end of a program. The epilogue storing such rows itself was built next (branch
  odd-output, 04d2d6f): after each staging pass the consumer warpgroup's threads copied the
  rows out in 16-byte windows aligned in global memory (two staged chunks shifted by selects
  and byte permutes; the partial window at each end of a row element by element), the
  residual padded and loaded by TMA. Correct on the GPU (bit for bit against the TMA store of
  the same product; every swap-AB, odd-weight, fp8 and dense GPU test passed) but slow: the
  copy is synchronous, so both consumer warpgroups of a cooperative tile stop multiplying while
  it runs, and its loop is latency-bound (a shared load, then a store, per window, divergent
  element loops at row ends): 7-12 us more per 128 x 256 tile by the totals (not profiled).
  As the program's result 1.36x at 251 x 100277 x 560 but 0.80-0.96x on five other odd shapes;
  followed by a reduction 0.61-0.85x (2048 x 50257 x 768 355.0 -> 583.4 us; H200, 2026-12-03,
  ab_h200_20261203_odd_output.json, ab_h200_20261203_odd_output_fused.log). To beat the fused
  slice such a store has to stay asynchronous: staging laid out per row at the output's own
  16-byte phase, each row's aligned middle stored by a bulk copy (cp.async.bulk, 16-byte
  aligned at both ends) and only the few elements at its ends by threads (not built).
The gated weight of hopper_glu has its own layout (the handler needs its K exact), so a padded K
pads the weight's K too.
A weight is copied too, except up to 384 rows (heuristics.ODD_WEIGHT_MAX_M): there the copy
is much of the call (a (768, 50257) weight in a decode loop ran 0.44-0.61x jnp.dot;
benchmarks/bench_odd_weight.py), and a 16-bit (K, N) weight with N odd and K a multiple of 8 is
read in place by the matmul_swap_odd kernels (shifted_weight_tile).
NOTES: reading an MN-major operand in place through a view of 8 rows at a time (pitch 16 x N
bytes, which TMA can address; box (64, 8) at element r x N + column of row k0 / 8 + i for k
row k0 + 8 i + r, the other operand's K permuted to match) was built and failed on the GPU
with an illegal instruction (H200, 2026-12-02): a box's innermost start coordinate must itself
be a multiple of 16 bytes, which r x N with N odd is not. Any in-place read of such rows must
load from 16-byte-aligned starts and shift in shared memory: cuda/gemm/mainloop/ss_shifted.cuh.
A pitch TMA can address may still start rows off the 128-byte L2 line, which costs L2 requests
(rows_off_l2_line, row_lines; the heuristic weighs it: heuristics.choose_config,
heuristics.swap_mid_config).
"""

from __future__ import annotations

import math

import numpy as np

from jax_hopper.kernels import catalog


def pitch_granule(dtype) -> int:
    """The elements of `dtype` in one TMA pitch granule: a row of whole granules is
    addressable."""
    return catalog.TMA_PITCH_BYTES // np.dtype(dtype).itemsize


def pitch_pad(n: int, dtype) -> int:
    """Elements to add to a row of n `dtype` elements so that TMA can address its rows."""
    return -n % pitch_granule(dtype)


def row_bytes(n: int, dtype) -> int:
    """Bytes from one row of n `dtype` elements to the next as the kernels read them (padded
    to the pitch granule where the lowering pads)."""
    return (n + pitch_pad(n, dtype)) * np.dtype(dtype).itemsize


def rows_off_l2_line(dtype, a_mn: bool, b_mn: bool, m: int, n: int, k: int,
                     b_dtype=None) -> tuple[int, int]:
    """How far a's and b's rows run past whole L2 lines (catalog.L2_LINE_BYTES), in bytes, as
    (a's, b's): 0 where every row starts on a line; a multiple of catalog.L2_SECTOR_BYTES where
    they start off it but on a sector boundary. a stored as (m, k), or (k, m) if a_mn; b as
    (n, k), or (k, n) if b_mn; b_dtype where b's differs from a's."""
    a_row, b_row = (m if a_mn else k), (n if b_mn else k)
    return tuple(row_bytes(e, d) % catalog.L2_LINE_BYTES
                 for e, d in ((a_row, dtype), (b_row, dtype if b_dtype is None else b_dtype)))


def row_lines(off: int) -> float:
    """The L2 lines a 128-byte box row spans on average, for rows whose pitch runs `off`
    bytes past whole lines (rows_off_l2_line): one on the line; otherwise the rows start at
    each multiple of gcd(off, 128) in turn, and all but those on a line span two."""
    line = catalog.L2_LINE_BYTES
    return 1.0 if off % line == 0 else 2.0 - math.gcd(off, line) / line


def tma_unaddressable(*arrays, names=("a", "b")) -> str | None:
    """Why TMA cannot load one of `arrays` (called `names`) as stored (its row pitch), or None
    when it can."""
    for name, x in zip(names, arrays):
        pitch = x.shape[-1] * np.dtype(x.dtype).itemsize
        if pitch % catalog.TMA_PITCH_BYTES:
            return (f"{name}'s rows are {pitch} bytes apart; TMA needs a multiple of "
                    f"{catalog.TMA_PITCH_BYTES} (its last dimension, {x.shape[-1]}, must be a "
                    f"multiple of {catalog.TMA_PITCH_BYTES // np.dtype(x.dtype).itemsize})")
    return None


def weight_read_shifted(family: str, dtype, b_mn_major: bool, n: int, k: int) -> bool:
    """Whether a `family` call's weight (k x n, of `dtype`) is one the matmul_swap_odd kernels
    read in place on a decode tile (shifted_weight_tile): hopper_matmul's 16-bit weights stored
    (K, N) with N not a multiple of 8 (TMA cannot address their rows) and K a multiple of
    catalog.INTERLEAVE_ROWS (the rows of the view they are staged through)."""
    return (family == "matmul" and b_mn_major and np.dtype(dtype).itemsize == 2
            and pitch_pad(n, dtype) != 0 and k % catalog.INTERLEAVE_ROWS == 0)


def shifted_weight_tile(b, b_mn_major: bool, config, family: str):
    """The matmul_swap_odd tile (catalog.SWAP_ODD_TILES) that runs a swapped product whose
    weight b (3-D, as stored (batch, K, N)) TMA cannot address, reading it in place
    (cuda/gemm/mainloop/ss_shifted.cuh), or None where the weight is copied into a padded pitch:
    a weight_read_shifted weight on an unclustered swapped config whose token width (16-192
    tokens a tile) an odd tile has."""
    if not (config.swap_ab and (config.cluster_m, config.cluster_n) == (1, 1)
            and weight_read_shifted(family, b.dtype, b_mn_major, b.shape[2], b.shape[1])):
        return None
    return next((t for t in catalog.SWAP_ODD_TILES if t.block_n == config.block_n), None)


# The family of the kernels that read a weight_read_shifted weight in place.
SHIFTED_FAMILY = "matmul_swap_odd"


def shifted_kernel(dtype, odd: catalog.TileShape) -> str:
    """The catalog name of the SHIFTED_FAMILY kernel of odd tile `odd` for a `dtype` weight:
    its A is the weight, stored (K, N) (MN-major), its B the tokens, K-major."""
    return catalog.KernelInstance(SHIFTED_FAMILY, np.dtype(dtype).name, odd, True, False).name


def shifted_config_tile(family: str, odd: catalog.TileShape) -> catalog.TileShape:
    """The tile of `family`'s swapped family whose unclustered swapped config launches odd tile
    `odd` on a weight_read_shifted weight (shifted_weight_tile's inverse): the first of its
    token width, one CTA to an SM, on the odd tile's schedule."""
    return next(t for t in catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
                if t.block_n == odd.block_n and t.ctas_per_sm == 1
                and t.schedule == odd.schedule)


def lowering_pads(a, b, bias, res, out, *, family: str, b_in_place: bool = False):
    """((pad widths of a, b, bias, residual: None where unpadded), output columns to add) for
    the abstract values of one GEMM call (3-D operands as stored, primitive.py); b_in_place:
    b is read as stored whatever its pitch (shifted_weight_tile)."""
    a_pad, b_pad = pitch_pad(a.shape[2], a.dtype), pitch_pad(b.shape[2], b.dtype)
    out_pad = pitch_pad(out.shape[2], out.dtype)
    a_w = [(0, 0), (0, 0), (0, a_pad)] if a_pad else None
    if family == "glu":  # x is (M, K); w (K, 2, F) has F a multiple of 8 (launch): pad its K
        b_w = [(0, a_pad), (0, 0), (0, 0)] if a_pad else None
    else:
        b_w = [(0, 0), (0, 0), (0, b_pad)] if b_pad and not b_in_place else None
    bias_w = [(0, 0)] * (len(bias.shape) - 1) + [(0, out_pad)] if out_pad and bias.size else None
    res_w = [(0, 0), (0, 0), (0, out_pad)] if out_pad and res.size else None
    return (a_w, b_w, bias_w, res_w), out_pad
