"""Text and PNG views of a layout, so a reader can see where each 16-byte chunk lands."""
from __future__ import annotations

import os

import numpy as np

from .atoms import LayoutAtom, Major
from .smem_layout import SmemLayout

CHUNK_BYTES = 16  # swizzles move whole 16-byte chunks (Swizzle<B,4,3>: the low 4 bits stay)


def _as_layout(layout: SmemLayout | LayoutAtom) -> SmemLayout:
    return layout if isinstance(layout, SmemLayout) else SmemLayout(layout, layout.shape)


def describe(layout: SmemLayout | LayoutAtom) -> str:
    """Multi-line summary: atom, swizzle, shapes, TMA boxes, wgmma LBO/SBO."""
    lay = _as_layout(layout)
    box = lay.tma_boxes()
    lines = [
        f"SmemLayout mn={lay.mn} k={lay.k} stages={lay.stages}",
        f"  atom: {lay.atom.description()}",
        f"  stage: {lay.stage_bytes} B, total {lay.size_bytes} B, "
        f"stages aligned to {lay.atom.mode.smem_alignment} B",
        f"  TMA: {box.boxes_per_stage} box(es) per stage of (inner {box.box_dims[0]} elements, "
        f"outer {box.box_dims[1]} rows), {lay.box_bytes} B apart, swizzle code {box.tma_code}",
    ]
    try:
        d = lay.wgmma_desc(mn_extent=min(lay.mn, 256) // lay.atom.shape[0] * lay.atom.shape[0])
        lines.append(f"  wgmma: LBO {d.lbo} B, SBO {d.sbo} B, swizzle code {d.swizzle_code}, "
                     f"k-step {d.k_step_bytes} B")
    except ValueError as e:  # e.g. a K extent shorter than one wgmma k-block
        lines.append(f"  wgmma: not readable as is ({e})")
    return "\n".join(lines)


def chunk_grid(layout: SmemLayout | LayoutAtom) -> tuple[np.ndarray, np.ndarray]:
    """For stage 0, drawn as rows of one swizzle span: the logical (row, chunk) at each cell.

    'row' counts along the strided dimension, 'chunk' counts 16-byte chunks along the contiguous
    one. Returns two int arrays of shape (stage_bytes / span, span / 16).
    """
    lay = _as_layout(layout)
    atom = lay.atom
    per_chunk = CHUNK_BYTES // atom.elem_bytes
    n_chunks = lay.boxes_per_stage * atom.width // per_chunk
    row, chunk = np.indices((lay.rows, n_chunks)).reshape(2, -1)
    mn, k = (row, chunk * per_chunk) if atom.major is Major.K else (chunk * per_chunk, row)
    where = lay.byte_offset(mn, k) // CHUNK_BYTES
    shape = (lay.stage_bytes // atom.mode.span_bytes, atom.mode.span_bytes // CHUNK_BYTES)
    rows_at, chunks_at = np.empty(shape, dtype=np.int64), np.empty(shape, dtype=np.int64)
    rows_at.reshape(-1)[where] = row
    chunks_at.reshape(-1)[where] = chunk
    return rows_at, chunks_at


def draw(layout: SmemLayout | LayoutAtom, path: str | os.PathLike, max_rows: int = 64) -> None:
    """Write a PNG of stage 0: each cell is a 16-byte chunk of shared memory, labelled and
    coloured by the logical (row, chunk) stored there, so the XOR pattern is visible."""
    try:
        from matplotlib.figure import Figure  # optional: only pictures need it
    except ImportError as e:
        raise ImportError("jax_hopper.layout.picture.draw needs matplotlib "
                          "(pip install matplotlib, or jax-hopper[plot])") from e
    lay = _as_layout(layout)
    rows_at, chunks_at = (a[:max_rows] for a in chunk_grid(lay))
    per_row = rows_at.shape[1]
    fig = Figure(figsize=(max(4.0, 1.0 + 0.7 * per_row), 1.2 + 0.3 * len(rows_at)))
    ax = fig.add_subplot()
    ax.imshow(chunks_at % per_row, cmap="tab10" if per_row <= 10 else "tab20",
              vmin=0, vmax=max(per_row - 1, 1), aspect="auto")
    for (y, x), r in np.ndenumerate(rows_at):
        ax.text(x, y, f"{r},{chunks_at[y, x]}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(per_row), [f"+{CHUNK_BYTES * i}" for i in range(per_row)], fontsize=6)
    ax.set_yticks(range(len(rows_at)), [f"{lay.atom.mode.span_bytes * y}" for y in
                                        range(len(rows_at))], fontsize=6)
    ax.set_xlabel("byte within span (16-byte chunks)")
    ax.set_ylabel("byte offset of span")
    row_dim, chunk_dim = ("mn", "k") if lay.atom.major is Major.K else ("k", "mn")
    ax.set_title(f"{lay.atom.major.value}-major {lay.atom.mode.name} {lay.atom.swizzle}, "
                 f"{lay.atom.elem_bits}-bit, mn x k = {lay.mn} x {lay.k}\n"
                 f"cell = logical ({row_dim} row, 16-byte chunk along {chunk_dim})", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=120)
