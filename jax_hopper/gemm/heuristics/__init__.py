"""Picks a GemmConfig from the compiled set for a problem shape: the dense families (matmul,
glu, fp8; swap-AB at small M) and the grouped ones (grouped, grouped_glu, grouped_contraction).
Calls without a config take it at launch, for the problem one device runs.

One module a job: dense.py (the unswapped tile, clusters and split), swap.py (the swap-AB rules),
plan.py (what the C++ planner makes of a config), grouped.py (the grouped families); here
heuristic_config (through heuristic_choice: the config and the rule that picked it) weighs the
first three, and the package's names are theirs (heuristics.X)."""

from __future__ import annotations

from jax_hopper.kernels import catalog
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.heuristics.dense import (  # noqa: F401 (the package's names: heuristics.X)
    DEFAULT_NUM_SMS, LONG_K_BLOCKS, SPLIT_PIECE_KBLOCKS, TILE_EFFICIENCY, Choice, choose_config,
    dense_choice, long_k_split_tile, off_line_tile, pair_along_m, pingpong_mid_m, split_k_pays,
    tile_count, wave_cost)
from jax_hopper.gemm.heuristics.grouped import (  # noqa: F401
    choose_contraction_config, choose_grouped_config, choose_grouped_glu_config,
    grouped_heuristic_config)
from jax_hopper.gemm.heuristics.plan import (  # noqa: F401
    busiest_cta, busy_ctas, can_plan, odd_plan_of, plan_cost, plan_of)
from jax_hopper.gemm.heuristics.swap import (  # noqa: F401
    L2_REQUEST_COST, MID_TOKEN_TILES, NARROW_WIDE_MIN_K_BLOCKS, ODD_WEIGHT_MAX_M, SWAP_MAX_M,
    SWAP_MID_MAX_COST, SWAP_NARROW_BUSY_SHARE, SWAP_NARROW_MAX_WEIGHT_BYTES,
    SWAP_PAST_WAVE_MAX_COST, SWAP_PAST_WAVE_MAX_M, SWAP_TOKEN_TILE_EFFICIENCY, WIDE_TILES_YIELD,
    choose_swap_config, lean_swap_tile, mid_token_configs, odd_weight_config, swap_cta_bytes,
    swap_for_narrow_weight, swap_l2_requests, swap_mid_config, swap_narrow_config,
    swap_past_wave_config, swap_token_tile, swap_wide_config, weight_fits_l2)


def heuristic_config(family: str, a_mn_major: bool, batch: int, m: int, n: int, k: int,
                     num_sms: int = DEFAULT_NUM_SMS,
                     off_line: tuple[int, int] = (0, 0),
                     odd_weight: bool = False) -> GemmConfig:
    """The heuristic's config for a `family` call: heuristic_choice's."""
    return heuristic_choice(family, a_mn_major, batch, m, n, k, num_sms, off_line,
                            odd_weight).config


def heuristic_choice(family: str, a_mn_major: bool, batch: int, m: int, n: int, k: int,
                     num_sms: int = DEFAULT_NUM_SMS,
                     off_line: tuple[int, int] = (0, 0),
                     odd_weight: bool = False) -> Choice:
    """The heuristic's config for a `family` call on a GPU of `num_sms` SMs, and the rule that
    picked it (Choice: benchmarks/heuristic_regret.py scores the rules so): swap-AB where the
    family has it, a is stored (M, K) and m <= SWAP_MAX_M (the lean tile for a small weight:
    lean_swap_tile); otherwise dense_choice over the
    family's tiles, swapped after all where the product's weight is narrow
    (swap_for_narrow_weight) or its rows fit the wide token tiles better (swap_wide_config;
    where both apply, the one whose plan keeps more CTAs busy, the wide on a tie, the narrow
    for WIDE_TILES_YIELD's families), or past 192 rows where neither applies, the mid-M token
    tiles fill one wave at less cost (swap_mid_config), or past a wave of unswapped tiles the
    160- or 192-token tile costs less (swap_past_wave_config). A swapped
    product whose weight fits in L2 takes the token tile
    of swap_token_tile (at m <= SWAP_MAX_M, no wider than the rows need; past it, among the wide
    token tiles too over a long K: swap_narrow_config). off_line: a's and b's
    rows' bytes past whole L2 lines (pitch.rows_off_l2_line), for dense_choice. odd_weight:
    the weight is one the matmul_swap_odd tiles read in place (pitch.weight_read_shifted),
    which they then do up to ODD_WEIGHT_MAX_M rows (odd_weight_config), where it would
    otherwise be copied."""
    swaps = family in catalog.SWAP_FAMILIES and not a_mn_major
    # The swapped family's decode tiles; its wide and mid-M token tiles have rules of their own
    swap_tiles = tuple(t for t in catalog.FAMILIES[catalog.SWAP_FAMILIES[family]].tiles
                       if t in catalog.SWAP_TILES + catalog.SWAP_TILES_FP8) if swaps else ()
    if swaps and m <= SWAP_MAX_M:
        lean = lean_swap_tile(swap_tiles, family, batch, m, n, k)
        if lean is not None:
            return Choice(GemmConfig.for_tile(lean, swap_ab=True, stream_k=True),
                          "lean_swap_tile")
        config = choose_swap_config(m, swap_tiles, n, batch, num_sms)
        narrower = tuple(t for t in swap_tiles
                         if t.block_n <= config.block_n and t.ctas_per_sm == 1)
        if (config.ctas_per_sm == 1 and len(narrower) > 1
                and weight_fits_l2(family, batch, n, k) and can_plan()):
            tile = swap_token_tile(narrower, batch, m, n, k, num_sms, family)
            return Choice(GemmConfig.for_tile(tile, swap_ab=True, stream_k=True),
                          "swap_token_tile")
        return Choice(config, "choose_swap_config")
    if swaps and odd_weight and m <= ODD_WEIGHT_MAX_M:
        return Choice(odd_weight_config(family, batch, m, n, k, num_sms), "odd_weight_config")
    fam = catalog.FAMILIES[family]
    dense = dense_choice(m, n, k, batch, num_sms, tiles=fam.tiles, multicast=fam.multicast,
                         pingpong=fam.pingpong_mid_m, off_line=off_line,
                         off_line_rule=fam.off_line_rule, long_k_split=fam.long_k_split)
    if not swaps:
        return dense
    config = dense.config
    wide = swap_wide_config(family, batch, m, n, k, num_sms)
    if swap_for_narrow_weight(config, batch, m, n, k, num_sms, family):
        narrow = swap_narrow_config(family, batch, m, n, k, num_sms, swap_tiles)
        if wide is None or family in WIDE_TILES_YIELD or (
                busy_ctas(narrow, batch, m, n, k, num_sms, family)
                > busy_ctas(wide, batch, m, n, k, num_sms, family)):
            return Choice(narrow, "swap_narrow_config")
    if wide is not None:
        return Choice(wide, "swap_wide_config")
    for rule in (swap_mid_config, swap_past_wave_config):
        if (swapped := rule(family, batch, m, n, k, config, num_sms, off_line)) is not None:
            return Choice(swapped, rule.__name__)
    return dense
