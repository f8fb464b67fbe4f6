"""Regenerates the layout pictures of docs/layout.md with jax_hopper.layout.draw.

    python docs/make_images.py          # needs matplotlib (pip install 'jax-hopper[plot]')

Each PNG shows stage 0 of a bf16 shared-memory tile: one cell per 16-byte chunk, placed where
the swizzle puts it and labelled with the logical (row, chunk) it holds.
"""
from pathlib import Path

from jax_hopper.layout import SwizzleMode, draw, make_smem_layout

OUT = Path(__file__).resolve().parent / "images"

# (file name, major, (mn, k) in elements, swizzle): two atoms along the strided dimension, so
# the pictures show the pattern repeating every 8 rows.
PICTURES = [
    ("k_major_sw128_bf16.png", "K", (16, 64), SwizzleMode.B128),
    ("mn_major_sw128_bf16.png", "MN", (128, 16), SwizzleMode.B128),
    ("k_major_sw64_bf16.png", "K", (16, 32), SwizzleMode.B64),
    ("mn_major_sw32_bf16.png", "MN", (16, 16), SwizzleMode.B32),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, major, shape, mode in PICTURES:
        path = OUT / name
        draw(make_smem_layout(major, 16, shape, mode), path)
        print(f"{path.relative_to(OUT.parent.parent)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
