"""What the C++ planner (GemmConfig.plan) makes of a config: its busy CTAs and the work of
the busiest, which the swap-AB rules weigh."""

from __future__ import annotations

from jax_hopper.gemm import pitch
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.heuristics.dense import SPLIT_PIECE_KBLOCKS
from jax_hopper.kernels import catalog


def can_plan() -> bool:
    """Whether the C++ planner (the compiled extension) is here. Without it (a build without
    kernels, a shadowed source tree) every op runs its XLA reference and never uses its config,
    so the rules that read a plan (swap_for_narrow_weight, swap_token_tile) are skipped."""
    from jax_hopper import _ffi  # noqa: PLC0415 (as GemmConfig.plan)
    return _ffi.has_extension()


def plan_of(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
            family: str = "matmul") -> dict:
    """The work plan the lowering would make for a `family` call with `config` on a GPU of
    `num_sms` SMs (GemmConfig.plan, the C++ gemm_plan: cluster tiles, each cut into the pieces
    of a split where config.stream_k, the family's k-block padding included). The plan depends
    on the tile, not on the dtypes or majors, so the family's first of each stands in."""
    fam = catalog.FAMILIES[family]
    kernel = config.kernel(family, fam.dtypes[0][0], *fam.majors[0])
    cluster = config.cluster_m * config.cluster_n
    return config.plan(kernel, batch, m, n, k, num_sms * config.ctas_per_sm // cluster)


def odd_plan_of(tile: catalog.TileShape, batch: int, m: int, n: int, k: int,
                num_sms: int, stream_k: bool = True) -> dict:
    """plan_of for a swapped call whose weight the matmul_swap_odd kernel of odd tile `tile`
    (catalog.SWAP_ODD_TILES) reads in place (pitch.shifted_weight_tile), split as its
    family splits (the last partial wave too: plan_split_tail) where stream_k."""
    kernel = pitch.shifted_kernel("bfloat16", tile)  # the plan does not depend on the dtype
    config = GemmConfig.for_tile(tile, swap_ab=True, stream_k=stream_k)
    return config.plan(kernel, batch, m, n, k, num_sms * tile.ctas_per_sm)


def busy_ctas(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
              family: str = "matmul") -> int:
    """The CTAs that the work plan of an unswapped `config` keeps busy on a GPU of `num_sms`
    SMs (plan_of)."""
    plan = plan_of(config, batch, m, n, k, num_sms, family)
    return plan["grid_clusters"] * config.cluster_m * config.cluster_n


def busiest_cta(plan: dict) -> tuple[int, int]:
    """(k-blocks, pieces) of the busiest CTA under a work `plan` (plan_of): the k-blocks of its
    waves of whole tiles and of its stream-K range, and the pieces its split tile is cut into
    (1 where nothing is split), whose partials that tile's last piece sums."""
    waves = -(-plan["dp_tiles"] // plan["grid_clusters"]) if plan["dp_tiles"] else 0
    if not plan["sk_clusters"]:
        return waves * plan["k_blocks"], 1
    quota = plan["sk_quota"] + (1 if plan["sk_extra"] else 0)
    return waves * plan["k_blocks"] + quota, -(-plan["k_blocks"] // quota)


def plan_cost(config: GemmConfig, batch: int, m: int, n: int, k: int, num_sms: int,
              family: str = "matmul") -> float:
    """The work of the busiest SM under `config`'s plan, in MACs over block_k: its CTAs' tile
    area times the busiest CTA's k-blocks (busiest_cta), plus SPLIT_PIECE_KBLOCKS for each
    other piece of its split tile."""
    k_blocks, pieces = busiest_cta(plan_of(config, batch, m, n, k, num_sms, family))
    return ((k_blocks + SPLIT_PIECE_KBLOCKS * (pieces - 1))
            * config.block_m * config.block_n * config.ctas_per_sm)
