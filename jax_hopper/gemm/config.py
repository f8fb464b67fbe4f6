"""GemmConfig: the layout descriptor of one GEMM launch, checked against the compiled set."""

from __future__ import annotations

import dataclasses
import numbers

from jax_hopper.kernels import catalog


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    """Tile shape, pipeline depth, cluster shape, tile order and swizzle of a GEMM launch.

    block_m x block_n is one CTA's output tile, block_k the k-extent of one pipeline stage
    (one 128-byte swizzle row of 16-bit elements), `stages` the depth of the shared-memory ring.
    A cluster of cluster_m x cluster_n CTAs (one of them 1) multicasts the shared operand.
    Tiles are visited in groups of `group_size` cluster tiles along M (raster="m") or N ("n").
    Operand majors come from the call (transpose_a/transpose_b); `a_mn_major`/`b_mn_major`, when
    set, must agree with them.
    With `stream_k`, the tiles of the last, partial wave are split along K between all clusters
    and their pieces summed in fp32 through a workspace (cuda/gemm/scheduler/stream_k_plan.h); with
    fewer tiles than clusters every tile is split into equal pieces (split-K) where K is long
    enough; without it every tile is computed whole by one cluster.
    `schedule` is how the consumer warpgroups share the tiles: "cooperative" (two, both on each
    tile), "pingpong" (two, alternate tiles, one's epilogue under the other's mainloop; whole
    tiles only, so stream_k=False) or "lean" (one that loads its own k-blocks, no producer
    warpgroup: the swap-AB lean tiles); jax_hopper.kernels.catalog.SCHEDULES.
    `swap_ab` (hopper_matmul with a stored (M, K), hopper_fp8_matmul per tensor) computes
    out^T = op(b)^T a^T on the catalog's swap-AB tiles (catalog.SWAP_TILES, SWAP_TILES_FP8):
    block_m counts the weight's N columns, which
    become wgmma's 64-row M, and block_n (16-64) the tokens, wgmma's N; the epilogue stores the
    tile transposed. For decode (M <= 64), where a 64-row MMA over a few tokens would waste
    most of its work.
    `ctas_per_sm`: CTAs of the kernel resident on an SM at once (catalog.TileShape.ctas_per_sm):
    1, or 2 for the swap-AB tiles compiled with half the stages, 4 for the lean ones.
    """

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    stages: int = 4
    cluster_m: int = 1
    cluster_n: int = 1
    raster: str = "m"
    group_size: int = 16
    swizzle: str = "128B"
    stream_k: bool = True
    schedule: str = "cooperative"
    swap_ab: bool = False
    a_mn_major: bool | None = None
    b_mn_major: bool | None = None
    ctas_per_sm: int = 1

    @classmethod
    def for_tile(cls, tile: catalog.TileShape, **fields) -> "GemmConfig":
        """The config that runs compiled tile `tile` (stream_k as its schedule allows, unless
        given) with the other `fields`."""
        fields.setdefault("stream_k", catalog.SCHEDULES[tile.schedule].stream_k)
        return cls(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k,
                   stages=tile.stages, schedule=tile.schedule, ctas_per_sm=tile.ctas_per_sm,
                   **fields)

    @property
    def tile(self) -> catalog.TileShape:
        return catalog.TileShape(self.block_m, self.block_n, self.block_k, self.stages,
                                 self.schedule, self.ctas_per_sm)

    def validate(self, dtype: str, a_mn_major: bool, b_mn_major: bool,
                 family: str = "matmul", b_dtype: str | None = None) -> None:
        """Raises ValueError naming the field and the rule when no compiled kernel of `family`
        (jax_hopper.kernels.catalog.FAMILIES) runs this; dtype is a's, b_dtype b's (None: a's)."""
        # A 128.0 or a "4" would otherwise pass (or fail) the compiled-set lookup by accident.
        for field in ("block_m", "block_n", "block_k", "stages", "cluster_m", "cluster_n",
                      "group_size", "ctas_per_sm"):
            value = getattr(self, field)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise ValueError(f"config: {field}={value!r} must be an int")
        for field, want, got in (("a_mn_major", a_mn_major, self.a_mn_major),
                                 ("b_mn_major", b_mn_major, self.b_mn_major)):
            if got is not None and got != want:
                raise ValueError(f"config: {field}={got} contradicts the call, whose operand "
                                 f"layout makes it {want} (set by transpose_a / transpose_b)")
        if not isinstance(self.swap_ab, bool):
            raise ValueError(f"config: swap_ab={self.swap_ab!r} must be a bool")
        if self.swap_ab:
            if family not in catalog.SWAP_FAMILIES:
                *first, last = (catalog.FAMILIES[f].what for f in catalog.SWAP_FAMILIES)
                swappable = f"{', '.join(first)} and {last}"
                raise ValueError(f"config: swap_ab=True is compiled for {swappable} only, not "
                                 f"for {catalog.FAMILIES[family].what}")
            if a_mn_major:
                raise ValueError("config: swap_ab=True needs a stored (M, K) (transpose_a=False): "
                                 "the swapped kernel reads the tokens K-major as wgmma's N operand")
            family = self.kernel_family(family)
            dtype, b_dtype, a_mn_major, b_mn_major = self._kernel_operands(
                dtype, b_dtype, a_mn_major, b_mn_major)
        if self.schedule not in catalog.SCHEDULES:
            raise ValueError(f"config: schedule={self.schedule!r} must be one of "
                             f"{tuple(catalog.SCHEDULES)}")
        compiled = catalog.FAMILIES[family].tiles
        if self.tile not in compiled:
            listed = ", ".join(t.tag for t in compiled)
            raise ValueError(
                f"config: (block_m, block_n, block_k, stages, schedule, ctas_per_sm) = "
                f"({self.block_m}, {self.block_n}, {self.block_k}, {self.stages}, "
                f"{self.schedule!r}, {self.ctas_per_sm}) is not "
                "compiled"
                f"{'' if family == 'matmul' else ' for ' + catalog.FAMILIES[family].what}; "
                "compiled tile shapes: "
                f"{listed}")
        clusters = catalog.FAMILIES[family].tile_clusters(self.tile)
        if (self.cluster_m, self.cluster_n) not in clusters:
            raise ValueError(f"config: cluster (cluster_m, cluster_n) = ({self.cluster_m}, "
                             f"{self.cluster_n}) must be one of {clusters}"
                             + ('' if family == 'matmul'
                                else ' for ' + catalog.FAMILIES[family].what))
        if self.raster not in catalog.RASTERS:
            raise ValueError(f"config: raster={self.raster!r} must be one of {catalog.RASTERS}")
        if not 1 <= self.group_size <= 1024:  # an integer: checked above
            raise ValueError(f"config: group_size={self.group_size!r} must be an int in 1..1024")
        if not isinstance(self.stream_k, bool):
            raise ValueError(f"config: stream_k={self.stream_k!r} must be a bool")
        if self.stream_k and not catalog.FAMILIES[family].stream_k:
            raise ValueError(f"config: stream_k=True, but {catalog.FAMILIES[family].what} "
                             "computes every tile whole (set stream_k=False)")
        if self.stream_k and not catalog.SCHEDULES[self.schedule].stream_k:
            raise ValueError(f"config: stream_k=True needs a schedule that splits tiles; "
                             f"schedule={self.schedule!r} computes every tile whole (set "
                             "stream_k=False)")
        if self.swizzle not in catalog.SWIZZLES:
            raise ValueError(f"config: swizzle={self.swizzle!r}; compiled kernels use "
                             f"{catalog.SWIZZLES} (one 128-byte row of 16-bit elements per "
                             "k-block)")
        pairs = catalog.FAMILIES[family].dtypes
        if (dtype, b_dtype or dtype) not in pairs:
            raise ValueError(f"config: input dtypes (a, b) = ({dtype}, {b_dtype or dtype}) are not "
                             f"compiled for {catalog.FAMILIES[family].what}: {pairs}")

    def kernel_family(self, family: str) -> str:
        """The family whose kernel runs a `family` call with this config (its FFI target is
        jax_hopper_gemm_<that>): the swapped one with swap_ab."""
        return catalog.SWAP_FAMILIES[family] if self.swap_ab else family

    def kernel(self, family: str, dtype: str, a_mn_major: bool, b_mn_major: bool,
               b_dtype: str = "") -> str:
        """The catalog name of the compiled kernel that runs this config (validate first); the
        majors and dtypes are the call's (swap_ab exchanges them: the kernel's A is b)."""
        dtype, b_dtype, a_mn_major, b_mn_major = self._kernel_operands(
            dtype, b_dtype, a_mn_major, b_mn_major)
        return catalog.KernelInstance(self.kernel_family(family), dtype, self.tile, a_mn_major,
                                      b_mn_major, b_dtype).name

    def _kernel_operands(self, dtype, b_dtype, a_mn_major, b_mn_major):
        """The kernel's (A dtype, B dtype, A major, B major) for a call's: swap_ab's kernel
        takes b as its A and a as its B."""
        if not self.swap_ab:
            return dtype, b_dtype, a_mn_major, b_mn_major
        return b_dtype or dtype, dtype, b_mn_major, a_mn_major

    def plan(self, kernel: str, batch: int, m: int, n: int, k: int,
             resident_clusters: int) -> dict:
        """The work plan of the call (cuda/gemm/scheduler/stream_k_plan.h) on a GPU that holds
        `resident_clusters` clusters of this config at once, with the bytes of the stream-K
        workspace it needs ('workspace_bytes', 0 when nothing is split); m, n are the call's
        output rows and columns (swap_ab's kernel tiles them the other way round). Made once,
        while the call is lowered; the launcher only checks it."""
        from jax_hopper import _ffi  # noqa: PLC0415 (the extension; only lowering needs it)
        if self.swap_ab:
            m, n = n, m
        return _ffi.extension().gemm_plan(kernel, batch, m, n, k, self.cluster_m, self.cluster_n,
                                          self.stream_k, resident_clusters)

    def ffi_attrs(self) -> dict:
        import numpy as np
        return dict(cluster_m=np.int64(self.cluster_m), cluster_n=np.int64(self.cluster_n),
                    group_size=np.int64(self.group_size),
                    raster_n=np.int64(1 if self.raster == "n" else 0))


def checked_config(config, dtype: str, a_mn_major: bool, b_mn_major: bool,
                   family: str = "matmul", b_dtype: str | None = None) -> GemmConfig | None:
    """A call's `config` argument: None (chosen at launch, for the problem each launch runs),
    or a GemmConfig that `family` compiles for these operands (GemmConfig.validate); anything
    else is a ValueError naming the rule."""
    if config is None:
        return None
    if not isinstance(config, GemmConfig):
        raise ValueError(f"config must be a GemmConfig, got {type(config).__name__}")
    config.validate(dtype, a_mn_major, b_mn_major, family=family, b_dtype=b_dtype)
    return config
