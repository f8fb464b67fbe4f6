"""One tile-table build, three times, for ncu (the GPU time per build): the kernel
(ragged_primitive.build_tile_table) or the XLA ops it replaced (ragged_tiles.tile_table), over
M rows in G groups of uniform sizes, tiles of 128 rows. `names` prints a regex of the XLA
program's kernels for ncu's --kernel-name (the kernel's is regex:grouped_tile_table):

    ncu --kernel-name "regex:$(python scripts/ncu_tile_table.py names 1024 32)" \\
        --metrics gpu__time_duration.sum python scripts/ncu_tile_table.py xla 1024 32
"""

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.ragged_primitive import build_tile_table


def main(variant: str, m: int, groups: int) -> None:
    sizes = jnp.asarray(np.random.default_rng(0).multinomial(m, np.ones(groups) / groups),
                        jnp.int32)
    xla = jax.jit(ragged_tiles.tile_table, static_argnums=(1, 2))
    if variant == "names":
        text = xla.lower(sizes, m, 128).compile().as_text()
        names = re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = \S+ (?:fusion|custom-call)\(", text,
                           re.M)
        print("|".join(sorted({n.replace(".", "_").replace("-", "_") for n in names})))
        return
    fn = jax.jit(build_tile_table, static_argnums=(1, 2)) if variant == "kernel" else xla
    for _ in range(3):
        jax.block_until_ready(fn(sizes, m, 128))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
