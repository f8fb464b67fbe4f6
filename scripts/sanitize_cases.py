"""The cases scripts/sanitize_driver.py runs under compute-sanitizer: per kernel family (GEMM,
the grouped GEMM, TMA ops, quantize, transpose) the case dataclass, the lists of cases (each list
one jitted program), and how a case's inputs are made, how it is called and how its result is
checked on the host (float64 for the GEMM, bit for bit for the others).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np

# Shapes (M, N, K): one row; tails past 128/256-row tiles and the 64-wide k-block; several tiles.
GEMM_SHAPES = [(1, 8, 8), (129, 136, 72), (300, 520, 264)]
BATCHED_SHAPE = (2, 136, 264, 72)  # (batch, M, N, K), both operands batched
LAYOUTS = list(itertools.product((False, True), repeat=2))  # (transpose_a, transpose_b)


def _round8(x: int) -> int:
    return -(-x // 8) * 8


def addressable(m, n, k, transpose_a, transpose_b):
    """(M, N, K) with the dimensions that are row pitches for this layout rounded up to a multiple
    of 8 elements, so TMA can address every operand and the kernel (not the fallback) runs."""
    if transpose_a:
        m = _round8(m)   # a is stored (K, M)
    else:
        k = _round8(k)   # a is stored (M, K)
    if transpose_b:
        k = _round8(k)   # b is stored (N, K)
    else:
        n = _round8(n)   # b is stored (K, N)
    return m, n, k


@dataclasses.dataclass(frozen=True)
class GemmCase:
    m: int
    n: int
    k: int
    dtype: str = "bfloat16"
    b_dtype: str | None = None     # fp8: b's dtype when it is not a's
    tile: object = None            # catalog.TileShape; None lets the heuristic choose
    cluster: tuple = (1, 1)
    raster: str = "m"
    transpose_a: bool = False
    transpose_b: bool = False
    batch: int = 0                 # 0: no batch dimension
    shared_b: bool = False         # b without the batch dimension (broadcast, not copied)
    out_dtype: str | None = None
    activation: str | None = None
    bias: bool = False
    residual: bool = False
    alpha: float = 1.0
    beta: float = 1.0
    scales: tuple = (1.0, 1.0)     # fp8: a_scale, b_scale
    block_scaled: bool = False     # fp8: random block scales (the fp8_block family) instead
    padded: bool = False           # row pitches TMA cannot address: padded by the lowering
    swap_ab: bool = False          # computed swapped on `tile` (GemmConfig.swap_ab): a tile of
                                   # the swap families (some shapes are also unswapped tiles)

    @property
    def fp8(self) -> bool:
        return self.dtype.startswith("float8")

    @property
    def config(self):
        from jax_hopper import GemmConfig
        if self.tile is None:
            return None
        return GemmConfig.for_tile(self.tile, cluster_m=self.cluster[0],
                                   cluster_n=self.cluster[1], raster=self.raster, group_size=3,
                                   swap_ab=self.swap_ab)

    def label(self) -> str:
        tile = self.tile.tag if self.tile is not None else "auto"
        lay = ("T" if self.transpose_a else "N") + ("T" if self.transpose_b else "N")
        batch = f"{self.batch}x" if self.batch else ""
        epi = ",".join(x for x in (self.activation, "bias" if self.bias else None,
                                   "res" if self.residual else None) if x)
        types = (self.dtype + (f"x{self.b_dtype}" if self.b_dtype else "") +
                 (" block-scaled" if self.block_scaled else ""))
        tile += " swapped" if self.swap_ab else ""
        return (f"gemm {types}->{self.out_dtype or self.dtype} {tile} "
                f"cluster{self.cluster[0]}x{self.cluster[1]} raster={self.raster} {lay} "
                f"{batch}{self.m}x{self.n}x{self.k}" + (f" [{epi}]" if epi else ""))


def stream_k_cases() -> list[GemmCase]:
    """Stream-K (cuda/gemm/scheduler/stream_k_plan.h) splits the last wave's tiles past a whole
    wave when it is at most 2/3 full and the tiles hold 24 k-blocks or more, and with fewer
    tiles than SMs cuts every tile into equal pieces; on 132 SMs: 144 tiles of 128 x 128 (12
    split into 4 pieces), 80 2-CTA cluster tiles of 128 x 256 (14 split; a partial k-block),
    64 tiles of 128 x 128 in 2 pieces each, and 8 in 4 pieces over k-blocks padded past K (a
    CPU test checks that each plan splits)."""
    from jax_hopper.kernels import catalog
    tiles = catalog.TILE_SHAPES
    wide = next(t for t in tiles if (t.block_m, t.block_n) == (128, 256))
    square = next(t for t in tiles if (t.block_m, t.block_n) == (128, 128))
    return [
        GemmCase(1536, 1536, 1536, tile=square),
        GemmCase(2560, 2048, 1560, tile=wide, cluster=(2, 1), bias=True, activation="silu",
                 out_dtype="float32"),
        # Small M: every tile split into 2 equal pieces of 32 k-blocks (64 tiles of 128 x 128).
        GemmCase(256, 4096, 4096, tile=square),
        # 157 k-blocks (prime) padded to 4 pieces of 40: the last reads 3 k-blocks past K.
        GemmCase(54, 1024, 10000, tile=square),
    ]


def gemm_groups(quick: bool) -> list[list[GemmCase]]:
    """Lists of cases; each list is one jitted program (fewer compiles, same launches)."""
    from jax_hopper.kernels import catalog
    tiles, clusters = catalog.TILE_SHAPES, catalog.CLUSTER_SHAPES
    groups = []
    # Every tile x cluster, bfloat16; the full run crosses them with every layout, the quick run
    # rotates the layout so each still appears. Rasters alternate.
    for i, (tile, cluster) in enumerate(itertools.product(tiles, clusters)):
        layouts = [LAYOUTS[i % 4]] if quick else LAYOUTS
        for j, (ta, tb) in enumerate(layouts):
            shapes = GEMM_SHAPES[2:] if quick else GEMM_SHAPES
            group = [GemmCase(*addressable(*s, ta, tb), tile=tile, cluster=cluster,
                              raster="mn"[(i + j) % 2], transpose_a=ta, transpose_b=tb)
                     for s in shapes]
            if not quick:
                b, m, n, k = BATCHED_SHAPE
                group.append(GemmCase(*addressable(m, n, k, ta, tb), batch=b, tile=tile,
                                      cluster=cluster, transpose_a=ta, transpose_b=tb))
            groups.append(group)
    # float16: the other half of the compiled instances (every tile x layout).
    for i, (tile, (ta, tb)) in enumerate(itertools.product(tiles, LAYOUTS)):
        if quick and i % 2:
            continue
        shapes = GEMM_SHAPES[2:] if quick else GEMM_SHAPES[1:]
        groups.append([GemmCase(*addressable(*s, ta, tb), dtype="float16", tile=tile,
                                cluster=clusters[i % len(clusters)], transpose_a=ta,
                                transpose_b=tb) for s in shapes])
    # Epilogues: every activation x output dtype with bias, residual, alpha and beta, per tile
    # (the epilogue is unrolled over BN). N=131 with b as (N, K): the N-padding path.
    activations = [None, "relu", "gelu_tanh", "gelu", "silu"]
    for tile in tiles:
        group = []
        for o, out_dtype in enumerate(catalog.OUTPUT_DTYPES):
            acts = activations[o::3] if quick else activations
            for act in acts:
                group.append(GemmCase(129, 131, 72, tile=tile, transpose_b=True,
                                      out_dtype=out_dtype, activation=act, bias=True,
                                      residual=True, alpha=0.5, beta=-1.5))
        groups.append(group)
    # Bias only, residual only; a batch against a shared operand with a batched residual.
    groups.append([
        GemmCase(300, 520, 264, bias=True, activation="gelu"),
        GemmCase(300, 520, 264, residual=True, out_dtype="float32", beta=2.0),
        GemmCase(130, 264, 72, batch=3, shared_b=True, bias=True, residual=True),
    ])
    groups.append(stream_k_cases())
    # Ping-pong: 18 x 18 tiles of 128 x 128 (36 x 9 of 64 x 256), 162 2-CTA cluster tiles on
    # 66 clusters: each takes 2-3, so both consumer warpgroups run and alternate.
    groups.append([GemmCase(2300, 2200, 200, tile=t, cluster=(2, 1), bias=True, residual=True,
                            activation="relu") for t in tiles if t.schedule == "pingpong"])
    # Odd row pitches (jax_hopper/gemm/pitch.py): operands longer or shorter than the problem
    # by a few elements along M, N or K, in every layout, with the output's N padded too.
    groups.append([GemmCase(37, 45, 1500, transpose_a=ta, transpose_b=tb, padded=True,
                            out_dtype="float32", bias=True, residual=True, activation="gelu")
                   for ta, tb in LAYOUTS] + [GemmCase(7, 1001, 1501, padded=True)])
    return groups + swap_groups(quick) + fp8_groups(quick)


def swap_groups(quick: bool) -> list[list[GemmCase]]:
    """The swap-AB kernels (GemmConfig.swap_ab): every token tile x weight layout x dtype (quick:
    the dtypes rotated), tokens short of the tile; the transposed epilogue in every out dtype;
    split weight streams summed by the last piece to arrive (16 x 4096 x 4096: 32 tiles in 4
    pieces; 1 x 1024 x 8192: 8 in 16; 3 x 1024 x 10000: 8 in 16 over 160 k-blocks, 3 past K),
    the same and 140 tiles (over a wave) two CTAs per SM (ctas_per_sm=2), the lean schedule's
    self-fed CTAs (four to an SM) split and over a wave, a batch against a shared weight, and
    the wide token tiles (their strips stored in passes) split, past M, over several token
    tiles, in 2-CTA clusters either way; a weight of odd width read in place (matmul_swap_odd),
    up to two token tiles, a split last wave too."""
    from jax_hopper.kernels import catalog
    Swapped = functools.partial(GemmCase, swap_ab=True)
    tiles = catalog.SWAP_TILES
    groups = []
    for i, (tile, tb, dtype) in enumerate(itertools.product(tiles, (False, True),
                                                            catalog.INPUT_DTYPES)):
        if quick and i % 2 != (i // 2) % 2:
            continue
        groups.append([Swapped(tile.block_n - 3, 328, 584, dtype=dtype, tile=tile,
                               transpose_b=tb)])
    groups.append([Swapped(24, 392, 264, tile=tiles[1], out_dtype=o, activation="gelu",
                           bias=True, residual=True, alpha=0.5, beta=-1.5)
                   for o in catalog.OUTPUT_DTYPES])
    two = [t for t in tiles if t.ctas_per_sm == 2]
    lean = [t for t in tiles if t.schedule == "lean"]
    groups.append([Swapped(1, 4096, 4096, tile=lean[0]),
                   Swapped(29, 1000, 1032, tile=lean[-1], bias=True, residual=True),
                   Swapped(7, 40960, 136, tile=lean[0]),  # 640 tiles: units in turn
                   Swapped(3, 1024, 10000, tile=lean[0])])
    groups.append([Swapped(16, 4096, 4096, tile=tiles[0]),
                   Swapped(1, 1024, 8192, tile=tiles[0]),
                   Swapped(3, 17920, 136, tile=two[0]), Swapped(1, 1024, 8192, tile=two[0]),
                   Swapped(3, 1024, 10000, tile=tiles[0]),  # 157 k-blocks padded to 160
                   Swapped(5, 264, 136, batch=3, shared_b=True, tile=tiles[0], bias=True,
                           residual=True)])
    narrow, wide = catalog.SWAP_WIDE_TILES
    groups.append([Swapped(181, 1544, 4104, tile=wide, bias=True, residual=True),  # split
                   Swapped(129, 392, 520, tile=wide, out_dtype="float32", cluster=(2, 1)),
                   Swapped(385, 264, 1032, tile=narrow, transpose_b=True, cluster=(1, 2)),
                   Swapped(140, 3072, 2056, tile=narrow, cluster=(2, 1), bias=True)])
    # A (K, N) weight with N odd read in place (matmul_swap_odd, staged and shifted by the
    # consumers): each decode tile's odd form, a split stream, a batch against it, two 64-token
    # tiles split; the 128- and 192-token odd tiles (the swapped family's unclustered tiles of
    # those widths) over several token tiles, split, with an epilogue.
    odd = [t for t in tiles if t.schedule != "lean" and t.ctas_per_sm == 1]
    mid128, mid160 = catalog.SWAP_MID_TILES
    groups.append([Swapped(t.block_n - 3, 333, 584, tile=t, padded=True) for t in odd] +
                  [Swapped(1, 1001, 8200, tile=odd[0], padded=True, bias=True),
                   Swapped(5, 1003, 1032, batch=3, shared_b=True, tile=odd[0], padded=True),
                   Swapped(100, 1001, 4096, tile=odd[-1], padded=True, residual=True),
                   Swapped(261, 333, 584, tile=mid128, padded=True, bias=True),
                   # 135 weight tiles on an H100's or H200's 132 SMs: a wave whole, the last
                   # three in pieces (plan_split_tail; 25 k-blocks padded to 27 in 3)
                   Swapped(125, 17213, 1544, tile=mid128, padded=True, bias=True),
                   Swapped(389, 1001, 4096, tile=wide, padded=True, residual=True,
                           out_dtype="float32")])
    groups.append([Swapped(792, 3000, 1032, tile=mid160, cluster=(2, 1), bias=True,
                           residual=True),
                   Swapped(300, 1544, 4104, tile=mid128, transpose_b=True, out_dtype="float32"),
                   Swapped(161, 392, 520, tile=mid160, cluster=(1, 2))])
    return groups


def fp8_groups(quick: bool) -> list[list[GemmCase]]:
    """The fp8 families: every dtype pair x tile (b as (N, K): the only layout it reads), the
    clusters rotated; K past the 128-wide k-block; an epilogue; split tiles (scaled pieces);
    block scales; the swapped kernels, per tensor (the wide token tiles too) and per block."""
    from jax_hopper.kernels import catalog
    fam = catalog.FAMILIES["fp8"]
    shapes = [(300, 520, 272)] if quick else [(1, 16, 16), (129, 136, 144), (300, 520, 272)]
    groups = []
    for i, ((da, db), tile) in enumerate(itertools.product(fam.dtypes, fam.tiles)):
        if quick and i % len(fam.tiles) != i // len(fam.tiles):
            continue  # quick: each pair and each tile once
        groups.append([GemmCase(*s, dtype=da, b_dtype=db if db != da else None, tile=tile,
                                cluster=fam.clusters[(i + j) % len(fam.clusters)],
                                transpose_b=True, out_dtype="bfloat16", scales=(0.5, 0.25))
                       for j, s in enumerate(shapes)])
    fp8 = dict(dtype="float8_e4m3fn", transpose_b=True, scales=(0.125, 2.0))
    groups.append([GemmCase(129, 131, 144, tile=fam.tiles[0], out_dtype="float32",
                            activation="gelu_tanh", bias=True, residual=True, alpha=0.5,
                            beta=-1.5, **fp8),
                   GemmCase(256, 4096, 4096, tile=fam.tiles[1], out_dtype="bfloat16", **fp8)])
    # Block scales (fp8_block): every tile, the clusters rotated, partial scale blocks of M, N
    # and K (rows and columns past them read no scale); an epilogue on a batch; split tiles.
    block = catalog.FAMILIES["fp8_block"]
    fp8b = dict(dtype="float8_e4m3fn", transpose_b=True, block_scaled=True)
    groups.append([GemmCase(300, 520, 272, tile=t, cluster=block.clusters[i % 3],
                            out_dtype="bfloat16", **fp8b)
                   for i, t in enumerate(block.tiles)])
    groups.append([GemmCase(129, 136, 144, batch=2, tile=block.tiles[1], out_dtype="float32",
                            activation="silu", bias=True, residual=True, alpha=0.5, **fp8b),
                   GemmCase(256, 4096, 4096, tile=block.tiles[1], out_dtype="bfloat16",
                            **fp8b)])
    Swapped = functools.partial(GemmCase, swap_ab=True)
    # Swapped per tensor (fp8_swap): the one-CTA token tiles, a mixed pair (the kernel's dtypes
    # are b's first), the transposed epilogue, a split weight stream (1 x 4096 x 4096).
    swap = catalog.SWAP_TILES_FP8
    groups.append([Swapped(swap[0].block_n - 3, 328, 584, tile=swap[0], out_dtype="bfloat16",
                           **fp8),
                   Swapped(24, 392, 1024, tile=swap[1], out_dtype="float32",
                           activation="gelu_tanh", bias=True, residual=True, alpha=0.5,
                           beta=-1.5, **fp8),
                   Swapped(61, 136, 272, dtype="float8_e5m2", b_dtype="float8_e4m3fn",
                           tile=swap[2], transpose_b=True, out_dtype="bfloat16",
                           scales=(0.5, 0.25)),
                   Swapped(1, 4096, 4096, tile=swap[0], out_dtype="bfloat16", **fp8)])
    # ... and on the lean tile: a split stream, and two token tiles of a mixed pair
    lean8 = [t for t in swap if t.schedule == "lean"]
    groups.append([Swapped(1, 4096, 4096, tile=lean8[0], out_dtype="bfloat16", **fp8),
                   Swapped(29, 392, 1032, dtype="float8_e5m2", b_dtype="float8_e4m3fn",
                           tile=lean8[0], transpose_b=True, out_dtype="float32", bias=True,
                           residual=True, scales=(0.5, 0.25))])
    # ... and on the wide token tiles (the cooperative stream-K, strips stored in passes):
    # split, several token tiles of a mixed pair in a 1x2 cluster, a 2x1 cluster past M.
    narrow8, wide8 = catalog.SWAP_WIDE_TILES_FP8
    groups.append([Swapped(181, 1544, 4104, tile=wide8, out_dtype="bfloat16", bias=True,
                           residual=True, **fp8),
                   Swapped(385, 264, 1032, dtype="float8_e5m2", b_dtype="float8_e4m3fn",
                           tile=narrow8, transpose_b=True, out_dtype="float32",
                           cluster=(1, 2), scales=(0.5, 0.25)),
                   Swapped(140, 3072, 2056, tile=narrow8, cluster=(2, 1), out_dtype="bfloat16",
                           **fp8)])
    # Swapped block scales (fp8_block_swap): every token tile, partial scale blocks of N and K,
    # the transposed epilogue, a split weight stream.
    bswap = catalog.FAMILIES["fp8_block_swap"].tiles
    groups.append([Swapped(t.block_n - 3, 328, 584, tile=t, out_dtype="bfloat16", **fp8b)
                   for t in bswap] +
                  [Swapped(24, 392, 1024, tile=bswap[1], out_dtype="float32",
                           activation="gelu_tanh", bias=True, residual=True, alpha=0.5, **fp8b),
                   Swapped(1, 4096, 4096, tile=bswap[0], out_dtype="bfloat16", **fp8b)])
    return groups


def gemm_inputs(c: GemmCase, rng) -> dict:
    import jax.numpy as jnp
    lead = (c.batch,) if c.batch else ()

    def normal(shape, dtype):
        return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(dtype))

    out_dtype = c.out_dtype or c.dtype
    arrays = {
        "a": normal((*lead, c.k, c.m) if c.transpose_a else (*lead, c.m, c.k), c.dtype),
        "b": normal(((() if c.shared_b else lead)) + ((c.n, c.k) if c.transpose_b else (c.k, c.n)),
                    c.b_dtype or c.dtype),
    }
    if c.bias:
        arrays["bias"] = normal((c.n,), "float32")
    if c.residual:
        arrays["residual"] = normal((*lead, c.m, c.n), out_dtype)
    if c.block_scaled:
        blocks = lambda x: -(-x // 128)  # noqa: E731
        arrays["a_scale"] = rng.uniform(0.25, 4.0, (*lead, c.m, blocks(c.k))).astype(np.float32)
        arrays["b_scale"] = rng.uniform(0.25, 4.0, ((() if c.shared_b else lead)) +
                                        (blocks(c.n), blocks(c.k))).astype(np.float32)
    return arrays


def gemm_call(c: GemmCase, arrays: dict):
    from jax_hopper import hopper_fp8_matmul, hopper_matmul
    if c.fp8:
        scales = (arrays["a_scale"], arrays["b_scale"]) if c.block_scaled else c.scales
        return hopper_fp8_matmul(arrays["a"], arrays["b"], *scales, bias=arrays.get("bias"),
                                 residual=arrays.get("residual"), activation=c.activation,
                                 alpha=c.alpha, beta=c.beta, out_dtype=c.out_dtype,
                                 config=c.config)
    return hopper_matmul(arrays["a"], arrays["b"], bias=arrays.get("bias"),
                         residual=arrays.get("residual"), activation=c.activation,
                         alpha=c.alpha, beta=c.beta, out_dtype=c.out_dtype, config=c.config,
                         transpose_a=c.transpose_a, transpose_b=c.transpose_b,
                         strict=not c.padded)


def gemm_check(c: GemmCase, arrays: dict, out) -> str | None:
    """None when out matches the float64 reference within the test suite's bound."""
    from gemm_helpers import act64, dequantize_blocks64
    f64 = {k: np.asarray(v).astype(np.float64) for k, v in arrays.items()}
    if c.block_scaled:  # fp8 operands are K-major: a (M, K), b (N, K)
        f64["a"] = dequantize_blocks64(f64["a"], f64["a_scale"], rows_per_scale=1)
        f64["b"] = dequantize_blocks64(f64["b"], f64["b_scale"], rows_per_scale=128)
    a = np.swapaxes(f64["a"], -1, -2) if c.transpose_a else f64["a"]
    b = np.swapaxes(f64["b"], -1, -2) if c.transpose_b else f64["b"]
    tensor_scale = c.scales[0] * c.scales[1] if c.fp8 and not c.block_scaled else 1.0
    ref = c.alpha * np.matmul(a, b) * tensor_scale
    if c.bias:
        ref = ref + f64["bias"]
    ref = act64(ref, c.activation)
    if c.residual:
        ref = ref + c.beta * f64["residual"]
    return matches64(out, ref, c.out_dtype or c.dtype, fp8=c.fp8)


def matches64(out, ref, out_dtype, fp8=False) -> str | None:
    """None when out has the reference's shape and `out_dtype`, is finite, and is within the
    test suite's relative Frobenius bound of the float64 reference (fp8 products: their own)."""
    from gemm_helpers import REL_FROB_BOUND, REL_FROB_BOUND_FP8
    out = np.asarray(out)
    want_dtype = np.dtype(out_dtype)
    if out.shape != ref.shape or out.dtype != want_dtype:
        return f"shape/dtype {out.shape} {out.dtype}, expected {ref.shape} {want_dtype}"
    out64 = out.astype(np.float64)
    if not np.all(np.isfinite(out64)):
        return f"{np.sum(~np.isfinite(out64))} non-finite outputs"
    err = np.linalg.norm(out64 - ref) / max(np.linalg.norm(ref), 1e-30)
    bound = (REL_FROB_BOUND_FP8 if fp8 else REL_FROB_BOUND)[want_dtype.name]
    return None if err < bound else f"relative Frobenius error {err:.2e} >= {bound:.0e}"


# ------------------------------------------------------------------------------ grouped GEMM

# Device-side group sizes are never checked on the host: whatever they hold, no access may leave
# the operands. Adversarial sizes: negative, 2^31 - 1 (sums that overflow int32), a sum above M
# and below it, empty groups, every row in one group, one-row groups.
RAGGED_SIZES = {
    "random": None,
    "negative": [-5, 150, -2**31, 100, 7],
    "huge": [100, 2**31 - 1, 2**31 - 1, 9],
    "sum_below_m": [40, 0, 101],
    "one_group": [0, 0, 300, 0],
    "single_rows": [1] * 12 + [5],
}


@dataclasses.dataclass(frozen=True)
class RaggedCase:
    m: int
    n: int
    k: int
    sizes: tuple
    tile: object = None             # catalog.TileShape; None: the default config
    cluster_n: int = 1
    transpose_rhs: bool = False
    dtype: str = "bfloat16"
    out_dtype: str | None = None
    activation: str | None = None
    bias: bool = False
    residual: bool = False
    # hopper_ragged_contract instead: x (m, k) and y (m, n) ("lhs", "rhs"), out (G, k, n);
    # with fp8, hopper_ragged_fp8_contract on x^T (k, m) and y^T (n, m), scales 0.5 and 0.25
    # (block_scaled: random, per row and 128 of m, per 128 x 128 block).
    contract: bool = False
    # hopper_ragged_glu instead: rhs the gated weights (G, k, 2, n), out (m, n), SwiGLU.
    glu: bool = False
    cluster_m: int = 1
    # hopper_ragged_fp8_dot instead: fp8 lhs and rhs (G, n, k), lhs scale 0.5, one per expert;
    # with block_scaled, random scales per row and 128 of k, per expert's 128 x 128 block.
    fp8: bool = False
    block_scaled: bool = False
    # hopper_ragged_contract under jax.vmap over this many entries (one launch: each group
    # given its bounds), entry e's sizes `sizes` rotated by e places.
    entries: int = 0

    def entry_sizes(self) -> list:
        return [list(np.roll(self.sizes, e)) for e in range(self.entries)]

    @property
    def config(self):
        from jax_hopper import GemmConfig
        return None if self.tile is None else GemmConfig.for_tile(
            self.tile, stream_k=False, cluster_m=self.cluster_m, cluster_n=self.cluster_n,
            group_size=3)

    def label(self) -> str:
        tile = self.tile.tag if self.tile is not None else "auto"
        epi = ",".join(x for x in (self.activation, "bias" if self.bias else None,
                                   "res" if self.residual else None) if x)
        op = ("contract_fp8_block" if self.contract and self.block_scaled else
              "contract_fp8" if self.contract and self.fp8 else "contract" if self.contract else
              "glu" if self.glu else
              "fp8_block" if self.block_scaled else "fp8" if self.fp8 else
              "gnk" if self.transpose_rhs else "gkn")
        op += f" vmap{self.entries}" if self.entries else ""
        return (f"ragged {self.dtype}->{self.out_dtype or self.dtype} {tile} cluster"
                f"{self.cluster_m}x{self.cluster_n} {op} {self.m}x{self.n}x"
                f"{self.k} G={len(self.sizes)} sizes={list(self.sizes)[:6]}"
                + (f" [{epi}]" if epi else ""))


def _family_groups(rng, quick: bool, family: str, **kind) -> list[list[RaggedCase]]:
    """One group per compiled tile of a grouped `family`: every entry of RAGGED_SIZES (half of
    them with quick), the family's clusters in rotation; the grouped family alternates its rhs
    layouts too. `kind`: the RaggedCase fields that pick the op (glu, contract)."""
    from jax_hopper.kernels import catalog
    fam, groups = catalog.FAMILIES[family], []
    for i, tile in enumerate(fam.tiles):
        cases = []
        for j, sizes in enumerate(RAGGED_SIZES.values()):
            if quick and j % 2:
                continue
            sizes = tuple(int(s) for s in (rng.multinomial(300, np.ones(7) / 7)
                                           if sizes is None else sizes))
            cm, cn = fam.clusters[(i + j) % len(fam.clusters)]
            cases.append(RaggedCase(300, 264, 136, sizes, tile=tile, cluster_m=cm, cluster_n=cn,
                                    transpose_rhs=family == "grouped" and bool(j % 2), **kind))
        groups.append(cases)
    return groups


def ragged_groups(quick: bool) -> list[list[RaggedCase]]:
    rng = np.random.default_rng(1)
    groups = _family_groups(rng, quick, "grouped")
    # The epilogue with bias per group, residual and an activation, both dtypes; 300 groups.
    groups.append([
        RaggedCase(257, 136, 72, (60, 0, 101, 50), out_dtype="float32", activation="silu",
                   bias=True, residual=True),
        RaggedCase(257, 136, 72, (-1, 200), dtype="float16", activation="gelu", bias=True),
        RaggedCase(600, 64, 64, tuple(int(s) for s in rng.integers(0, 4, 300))),
    ])
    # The grouped contraction under vmap: three entries, adversarial sizes rotated per entry
    # (rows past an entry's groups, a size past int32, a negative one), every tile.
    from jax_hopper.kernels import catalog
    groups.append([RaggedCase(300, 264, 136, tuple(RAGGED_SIZES[name]), tile=tile,
                              contract=True, entries=3)
                   for tile in catalog.FAMILIES["grouped_contraction"].tiles
                   for name in ("negative", "huge", "sum_below_m")])
    # The grouped GLU, and the grouped contraction (the weight gradient).
    return (groups + _family_groups(rng, quick, "grouped_glu", glu=True)
            + _family_groups(rng, quick, "grouped_contraction", contract=True)
            + _family_groups(rng, quick, "grouped_contraction_fp8", contract=True, fp8=True,
                             dtype="float8_e4m3fn", out_dtype="bfloat16")
            + _family_groups(rng, quick, "grouped_contraction_fp8_block", contract=True,
                             fp8=True, block_scaled=True, dtype="float8_e4m3fn",
                             out_dtype="bfloat16")
            + _family_groups(rng, quick, "grouped_fp8", fp8=True, dtype="float8_e4m3fn",
                             out_dtype="bfloat16")
            + _family_groups(rng, quick, "grouped_fp8_block", fp8=True, block_scaled=True,
                             dtype="float8_e4m3fn", out_dtype="bfloat16"))


def ragged_inputs(c: RaggedCase, rng) -> dict:
    import jax.numpy as jnp

    def normal(shape, dtype):
        return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(dtype))

    g = len(c.sizes)
    if c.contract and c.fp8:
        arrays = {"lhs": normal((c.k, c.m), c.dtype), "rhs": normal((c.n, c.m), c.dtype),
                  "sizes": np.asarray(c.sizes, np.int32)}
        if c.block_scaled:  # per row of x^T and 128 of M; per 128 x 128 block of y^T
            mb = -(-c.m // 128)
            arrays["lhs_scale"] = (2.0 ** rng.uniform(-2, 2, (c.k, mb))).astype(np.float32)
            arrays["rhs_scale"] = (2.0 ** rng.uniform(-2, 2, (-(-c.n // 128), mb))
                                   ).astype(np.float32)
        return arrays
    if c.entries:  # the contraction's x (E, m, k), y (E, m, n), sizes (E, G)
        return {"lhs": normal((c.entries, c.m, c.k), c.dtype),
                "rhs": normal((c.entries, c.m, c.n), c.dtype),
                "sizes": np.asarray(c.entry_sizes(), np.int32)}
    rhs_shape = ((c.m, c.n) if c.contract else (g, c.k, 2, c.n) if c.glu else
                 (g, c.n, c.k) if c.transpose_rhs or c.fp8 else (g, c.k, c.n))
    arrays = {"lhs": normal((c.m, c.k), c.dtype), "rhs": normal(rhs_shape, c.dtype),
              "sizes": np.asarray(c.sizes, np.int32)}
    if c.bias:
        arrays["bias"] = normal((g, c.n), "float32")
    if c.residual:
        arrays["residual"] = normal((c.m, c.n), c.out_dtype or c.dtype)
    if c.block_scaled:
        kb, nb = -(-c.k // 128), -(-c.n // 128)
        arrays["lhs_scale"] = (2.0 ** rng.uniform(-2, 2, (c.m, kb))).astype(np.float32)
        arrays["rhs_scale"] = (2.0 ** rng.uniform(-2, 2, (g, nb, kb))).astype(np.float32)
    elif c.fp8:
        arrays["rhs_scale"] = rng.uniform(0.5, 2, g).astype(np.float32)
    return arrays


def ragged_call(c: RaggedCase, arrays: dict):
    import jax
    from jax_hopper import (hopper_ragged_contract, hopper_ragged_dot,
                            hopper_ragged_fp8_contract, hopper_ragged_fp8_dot, hopper_ragged_glu)
    if c.entries:
        return jax.vmap(lambda x, y, s: hopper_ragged_contract(
            x, y, s, out_dtype=c.out_dtype, config=c.config))(
                arrays["lhs"], arrays["rhs"], arrays["sizes"])
    if c.contract and c.fp8:
        return hopper_ragged_fp8_contract(arrays["lhs"], arrays["rhs"], arrays["sizes"],
                                          arrays.get("lhs_scale", 0.5),
                                          arrays.get("rhs_scale", 0.25), out_dtype=c.out_dtype,
                                          config=c.config)
    if c.fp8:
        return hopper_ragged_fp8_dot(arrays["lhs"], arrays["rhs"], arrays["sizes"],
                                     arrays.get("lhs_scale", 0.5), arrays["rhs_scale"],
                                     out_dtype=c.out_dtype, config=c.config)
    if c.glu:
        return hopper_ragged_glu(arrays["lhs"], arrays["rhs"], arrays["sizes"],
                                 out_dtype=c.out_dtype, config=c.config)
    if c.contract:
        return hopper_ragged_contract(arrays["lhs"], arrays["rhs"], arrays["sizes"],
                                      out_dtype=c.out_dtype, config=c.config)
    return hopper_ragged_dot(arrays["lhs"], arrays["rhs"], arrays["sizes"],
                             transpose_rhs=c.transpose_rhs, bias=arrays.get("bias"),
                             residual=arrays.get("residual"), activation=c.activation,
                             out_dtype=c.out_dtype, config=c.config)


def ragged_check(c: RaggedCase, arrays: dict, out) -> str | None:
    """None when out matches the float64 reference (sizes made valid as documented)."""
    from gemm_helpers import (contract_reference64, dequantize_blocks64, ragged_fp8_reference64,
                              ragged_glu_reference64, ragged_reference64, to64)
    if c.contract and c.fp8:
        if c.block_scaled:
            x64 = dequantize_blocks64(arrays["lhs"], arrays["lhs_scale"], rows_per_scale=1)
            y64 = dequantize_blocks64(arrays["rhs"], arrays["rhs_scale"], rows_per_scale=128)
        else:
            x64, y64 = to64(arrays["lhs"]) * 0.5, to64(arrays["rhs"]) * 0.25
        return matches64(out, contract_reference64(x64.T, y64.T, c.sizes), c.out_dtype,
                         fp8=True)
    if c.fp8:
        return matches64(out, ragged_fp8_reference64(arrays["lhs"], arrays["rhs"], c.sizes,
                                                     arrays.get("lhs_scale", 0.5),
                                                     arrays["rhs_scale"]), c.out_dtype, fp8=True)
    if c.glu:
        return matches64(out, ragged_glu_reference64(arrays["lhs"], arrays["rhs"], c.sizes),
                         c.out_dtype or c.dtype)
    if c.entries:
        return matches64(out, np.stack([
            contract_reference64(x, y, sizes) for x, y, sizes in zip(
                arrays["lhs"], arrays["rhs"], c.entry_sizes())]), c.out_dtype or c.dtype)
    if c.contract:
        return matches64(out, contract_reference64(arrays["lhs"], arrays["rhs"], c.sizes),
                         c.out_dtype or c.dtype)
    ref = ragged_reference64(arrays["lhs"], arrays["rhs"], c.sizes, transpose_rhs=c.transpose_rhs,
                             bias=arrays.get("bias"), activation=c.activation,
                             residual=arrays.get("residual"))
    return matches64(out, ref, c.out_dtype or c.dtype)


# ---------------------------------------------------------------------------------------- TMA

@dataclasses.dataclass(frozen=True)
class TmaCase:
    op: str          # copy | smem_bytes | multicast | reduce_add
    mode: str
    dtype: str
    box: tuple
    shape: tuple
    cluster_size: int = 0

    def label(self) -> str:
        cs = f" cluster={self.cluster_size}" if self.cluster_size else ""
        return f"tma_{self.op} {self.mode} {self.dtype} box={self.box} x{self.shape}{cs}"


def tma_groups(quick: bool) -> list[list[TmaCase]]:
    import jax.numpy as jnp
    from jax_hopper.tma import SWIZZLES
    modes = ["128B"] if quick else list(SWIZZLES)
    dtypes = ["bfloat16"] if quick else ["uint8", "bfloat16", "float32", "complex64"]
    groups = []
    for mode, dtype in itertools.product(modes, dtypes):
        size = jnp.dtype(dtype).itemsize
        unit = 16 // size                                   # one 16-byte chunk
        span = SWIZZLES[mode].span_bytes if mode != "none" else 256
        wide = span // size
        # A single element (its row pitch is free), a row count and width that are no multiple
        # of any box, and a batch.
        shapes = [(1, 1), (37, 25 * unit), (3, 65, 17 * unit)]
        if quick:
            shapes = shapes[1:2]
        # A swizzled box is exactly one swizzle span wide (ops.py); the narrowest box, one
        # 16-byte chunk, exists only without a swizzle.
        narrow = unit if mode == "none" else wide
        copy_boxes = [(64, wide)] if quick else [(64, wide), (5, narrow)]
        group = [TmaCase("copy", mode, dtype, box, s) for box in copy_boxes for s in shapes]
        group += [TmaCase("smem_bytes", mode, dtype, box, s)
                  for box in [(8, wide), (8, narrow)][: 1 if quick else 2] for s in shapes]
        for cs in (2, 4):
            # (1, 1) cannot be multicast: its copies would sit itemsize bytes apart.
            group += [TmaCase("multicast", mode, dtype, box, s, cs)
                      for box in [(16 * cs, wide), (cs, narrow)][: 1 if quick else 2]
                      for s in shapes if s != (1, 1)]
        if dtype in ("bfloat16", "float32"):
            group += [TmaCase("reduce_add", mode, dtype, box, s)
                      for box in copy_boxes for s in shapes]
        groups.append(group)
    if not quick:
        groups.append([TmaCase("reduce_add", m, "float16", (64, SWIZZLES[m].span_bytes // 2),
                               (3, 65, 136)) for m in SWIZZLES if m != "none"])
    return groups


def tma_inputs(c: TmaCase, rng) -> dict:
    import jax.numpy as jnp
    dtype = jnp.dtype(c.dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        def make():
            return rng.integers(0, 256, size=c.shape).astype(dtype)
    elif jnp.issubdtype(dtype, jnp.complexfloating):
        def make():
            return (rng.standard_normal(c.shape) + 1j * rng.standard_normal(c.shape)).astype(dtype)
    else:
        def make():
            return rng.standard_normal(c.shape).astype(np.float32).astype(dtype)
    return {"x": make(), "src": make()} if c.op == "reduce_add" else {"x": make()}


def tma_call(c: TmaCase, arrays: dict):
    from jax_hopper import tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes
    x = arrays["x"]
    if c.op == "copy":
        return tma_copy(x, box=c.box, swizzle=c.mode)
    if c.op == "smem_bytes":
        return tma_smem_bytes(x, box=c.box, swizzle=c.mode)
    if c.op == "multicast":
        return tma_multicast(x, box=c.box, cluster_size=c.cluster_size, swizzle=c.mode)
    return tma_reduce_add(x, arrays["src"], box=c.box, swizzle=c.mode)


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def tma_check(c: TmaCase, arrays: dict, out) -> str | None:
    from jax_hopper.tma.reference import smem_bytes_numpy
    x, out = arrays["x"], np.asarray(out)
    if c.op == "copy":
        want = x
    elif c.op == "smem_bytes":
        want = smem_bytes_numpy(x, c.box, c.mode)
    elif c.op == "multicast":
        want = np.broadcast_to(x, (c.cluster_size, *x.shape))
    else:  # one rounding in the element type, as the TMA reduction does
        want = (x.astype(np.float32) + arrays["src"].astype(np.float32)).astype(x.dtype)
    if out.shape != want.shape or out.dtype != want.dtype:
        return f"shape/dtype {out.shape} {out.dtype}, expected {want.shape} {want.dtype}"
    bad = int(np.sum(_bits(out) != _bits(np.ascontiguousarray(want))))
    return None if bad == 0 else f"{bad} elements differ"


# ------------------------------------------------------------------------- quantize_fp8

@dataclasses.dataclass(frozen=True)
class QuantCase:
    in_dtype: str
    dtype: str        # fp8 out
    scaling: str      # tensor | block
    block: str        # row | tile (block scaling)
    transpose: bool
    transpose_block: str
    shape: tuple
    amax: float | None = None  # per tensor: scale by it, the kernel records x's (delayed)

    def label(self) -> str:
        t = f" +T({self.transpose_block})" if self.transpose else ""
        given = f" amax={self.amax}" if self.amax is not None else ""
        return (f"quantize_fp8 {self.in_dtype}->{self.dtype} {self.scaling}/{self.block}{t}"
                f"{given} x{self.shape}")


def quant_groups(quick: bool) -> list[list[QuantCase]]:
    # Partial tiles both ways (rows 208, cols 304: multiples of 16, so the kernel runs), one
    # whole tile, a batch.
    shapes = [(208, 304)] if quick else [(208, 304), (128, 128), (3, 144, 272)]
    ins = ["bfloat16"] if quick else ["bfloat16", "float16", "float32"]
    outs = ["float8_e4m3fn"] if quick else ["float8_e4m3fn", "float8_e5m2"]
    modes = [("tensor", "row", "row", None), ("tensor", "row", "row", 2.0),
             ("block", "row", "row", None), ("block", "row", "tile", None),
             ("block", "tile", "tile", None)]
    group = [QuantCase(i, o, s, b, t, tb, shape, amax)
             for i, o, (s, b, tb, amax), shape in itertools.product(ins, outs, modes, shapes)
             for t in ((True,) if quick else (False, True))]
    return [group]


def quant_inputs(c: QuantCase, rng) -> dict:
    return {"x": (3 * rng.standard_normal(c.shape)).astype(np.float32).astype(c.in_dtype)}


def quant_call(c: QuantCase, arrays: dict):
    from jax_hopper import quantize_fp8
    return quantize_fp8(arrays["x"], dtype=c.dtype, scaling=c.scaling, block=c.block,
                        transpose=c.transpose, transpose_block=c.transpose_block,
                        amax=None if c.amax is None else np.float32(c.amax))


def quant_check(c: QuantCase, arrays: dict, out) -> str | None:
    """Bit for bit against the same op on the CPU (its jnp reference)."""
    import jax
    with jax.default_device(jax.devices("cpu")[0]):
        want = quant_call(c, {"x": jax.device_put(arrays["x"], jax.devices("cpu")[0])})
    for name, got, ref in zip(want._fields, out, want):
        if ref is None:
            continue
        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return f"{name}: shape/dtype {got.shape} {got.dtype}, expected {ref.shape} {ref.dtype}"
        bad = int(np.sum(_bits(got) != _bits(ref)))
        if bad:
            return f"{name}: {bad} elements differ"
    return None


@dataclasses.dataclass(frozen=True)
class TransposeCase:
    dtype: str        # fp8
    shape: tuple

    def label(self) -> str:
        return f"transpose_fp8 {self.dtype} x{self.shape}"


def transpose_groups(quick: bool) -> list[list[TransposeCase]]:
    # Partial tiles both ways, a batch, one tile smaller than the box.
    shapes = [(208, 304)] if quick else [(208, 304), (3, 144, 272), (16, 16)]
    return [[TransposeCase(d, s) for d in ("float8_e4m3fn", "float8_e5m2") for s in shapes]]


def transpose_inputs(c: TransposeCase, rng) -> dict:
    return {"x": (3 * rng.standard_normal(c.shape)).astype(np.float32).astype(c.dtype)}


def transpose_call(c: TransposeCase, arrays: dict):
    from jax_hopper import transpose_fp8
    return transpose_fp8(arrays["x"])


def transpose_check(c: TransposeCase, arrays: dict, out) -> str | None:
    """Bit for bit against the bytes swapped on the host."""
    got, want = np.asarray(out), np.swapaxes(np.asarray(arrays["x"]), -1, -2)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    bad = int(np.sum(_bits(got) != _bits(want)))
    return f"{bad} elements differ" if bad else None
