"""The swap-AB kernels on a weight stored (K, N) whose rows TMA cannot address (N not a multiple
of 8), read in place (matmul_swap_odd: cuda/gemm/mainloop/ss_shifted.cuh,
pitch.shifted_weight_tile), on an sm_90 GPU against float64: every tile and dtype, every
residue of N modulo 8, K off whole k-blocks, split and whole plans (a split last wave too),
batches, the epilogue, and no copy of the weight in the compiled program."""

import math
import re

import jax
import jax.numpy as jnp
import pytest

from gemm_helpers import (REL_FROB_BOUND, check_matmul, matmul_operands, random_operand,
                          reference64, rel_frob)
from jax_hopper import GemmConfig, hopper_matmul
from jax_hopper.gemm import heuristics, pitch, tuned
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu


def _swap(tile, stream_k=True):
    return GemmConfig.for_tile(tile, swap_ab=True, stream_k=stream_k)


def _lowered_targets(a, b, config=None):
    """The gemm custom-call targets of hopper_matmul(a, b) (split or not), and the element
    counts of the pads in its program."""
    text = jax.jit(lambda a, b: hopper_matmul(a, b, config=config)).lower(a, b).as_text()
    targets = {t.removesuffix("_split")
               for t in re.findall(r"custom_call @(jax_hopper_gemm_\w+)", text)}
    padded = [math.prod(int(d) for d in s.split("x")[:-1])
              for s in re.findall(r"stablehlo\.pad .*-> tensor<([^>]*)>", text)]
    return targets, padded


# The odd tiles wider than every decode tile, each as the swapped family's tile whose
# unclustered config launches it on an odd weight (pitch.shifted_config_tile).
WIDE_ODD = [pitch.shifted_config_tile("matmul", odd) for odd in catalog.SWAP_ODD_TILES
            if odd.block_n > max(d.block_n for d in catalog.SWAP_TILES)]


@pytest.mark.parametrize("tile", [t for t in catalog.SWAP_TILES if t.schedule != "lean"
                                  and t.ctas_per_sm == 1], ids=lambda t: t.tag)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_every_tile(rng, tile, dtype):
    # 333 weight columns (three 128-column tiles, the last part past N), K = 584: 9 k-blocks,
    # the last one of 8 k rows.
    check_matmul(rng, tile.block_n - 3, 333, 584, dtype=dtype, config=_swap(tile), strict=False)


@pytest.mark.parametrize("n", [1001, 1002, 1003, 1004, 1005, 1006, 1007, 9])
def test_every_residue_of_n(rng, n):
    check_matmul(rng, 5, n, 1024, strict=False)


@pytest.mark.parametrize("m,n,k", [(1, 50257, 768), (8, 32001, 760), (64, 4099, 4096),
                                   (7, 13, 8), (16, 28673, 1032), (33, 1001, 8200)])
@pytest.mark.parametrize("stream_k", (True, False))
def test_decode_shapes_split_and_whole(rng, m, n, k, stream_k):
    tile = next(t for t in catalog.SWAP_TILES if t.block_n >= m and t.ctas_per_sm == 1
                and t.schedule != "lean")
    check_matmul(rng, m, n, k, config=_swap(tile, stream_k), strict=False)


# decode tiles up to 64 rows; past them up to heuristics.ODD_WEIGHT_MAX_M one or two token tiles
# of 128 or 192 (odd_weight_config), split at 1001 and 4097 columns
@pytest.mark.parametrize("m,n,k", [(1, 50257, 768), (8, 32001, 4096), (64, 1001, 520),
                                   (100, 50257, 768), (128, 1001, 4096), (160, 50257, 768),
                                   (200, 1001, 4096), (384, 4097, 1032)])
def test_default_config_reads_the_weight_in_place(rng, m, n, k):
    check_matmul(rng, m, n, k, strict=False)
    targets, padded = _lowered_targets(*matmul_operands(rng, m, n, k, "bfloat16", False, False))
    assert targets == {"jax_hopper_gemm_matmul_swap_odd"}
    assert all(size < k * n for size in padded), padded


@pytest.mark.parametrize("tile", WIDE_ODD, ids=lambda t: t.tag)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_wide_token_tiles(rng, tile, dtype):
    # One token tile 3 rows short, then three (the last 5 rows deep); 1001 columns: 8 weight
    # tiles, split along K = 1032 (17 k-blocks, the last of 8 k rows) where they are few.
    config = _swap(tile)
    for m in (tile.block_n - 3, 2 * tile.block_n + 5):
        check_matmul(rng, m, 1001, 1032, dtype=dtype, config=config, strict=False)
    targets, padded = _lowered_targets(
        *matmul_operands(rng, 7, 1001, 1032, dtype, False, False), config)
    assert targets == {"jax_hopper_gemm_matmul_swap_odd"} and not padded, (targets, padded)


def test_epilogue(rng):
    m, n, k = 12, 1001, 1000
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.float32)
    for out_dtype in ("float32", "bfloat16"):
        check_matmul(rng, m, n, k, activation="gelu", alpha=0.5, beta=-1.5, bias=bias,
                     residual=residual, out_dtype=out_dtype, strict=False)


@pytest.mark.parametrize("odd", catalog.SWAP_ODD_TILES, ids=lambda t: t.tag)
def test_epilogue_between_tiles_of_a_cta(rng, odd):
    # 40001 columns: 313 weight tiles, more than the SMs, each whole, so every CTA stores a
    # tile's strips (the residual loaded into its staging) and then shifts its next tile's
    # k-blocks into the same bytes (the consumers' scratch shares the staging: kernel.cuh).
    m, n, k = odd.block_n - 3, 40001, 264
    config = _swap(pitch.shifted_config_tile("matmul", odd), stream_k=False)
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.float32)
    check_matmul(rng, m, n, k, activation="gelu", alpha=0.5, beta=-1.5, bias=bias,
                 residual=residual, config=config, strict=False)
    targets, _ = _lowered_targets(*matmul_operands(rng, m, n, k, "bfloat16", False, False), config)
    assert targets == {"jax_hopper_gemm_matmul_swap_odd"}, targets


@pytest.mark.parametrize("odd", catalog.SWAP_ODD_TILES, ids=lambda t: t.tag)
@pytest.mark.parametrize("k", [1544, 2048])
def test_split_tail(rng, odd, k):
    # A wave of weight tiles and three more (counted from this GPU's SMs), one token tile 3
    # rows short: the plan keeps the wave whole and cuts the last three tiles into pieces that
    # CTAs take after their whole tile (plan_split_tail; K = 1544: 25 k-blocks padded to 27 in
    # 3 pieces, K = 2048: 32 in 4), whose last arrival sums them and runs the epilogue.
    sms = tuned.device_sms()
    m, n = odd.block_n - 3, 128 * (sms + 2) + 61
    plan = heuristics.odd_plan_of(odd, 1, m, n, k, sms)
    assert plan["dp_tiles"] == sms and plan["sk_clusters"] > 3, plan
    config = _swap(pitch.shifted_config_tile("matmul", odd))
    bias = random_operand(rng, (n,), jnp.float32)
    residual = random_operand(rng, (m, n), jnp.float32)
    check_matmul(rng, m, n, k, activation="gelu", alpha=0.5, beta=-1.5, bias=bias,
                 residual=residual, config=config, strict=False)


def test_batched_and_shared_weights(rng):
    check_matmul(rng, 5, 1001, 264, batch=(3,), strict=False)  # (3, K, N): a weight per entry
    a = random_operand(rng, (3, 5, 264), "bfloat16")
    b = random_operand(rng, (264, 1001), "bfloat16")
    got = jax.jit(hopper_matmul)(a, b)
    assert rel_frob(got, reference64(a, b)) < REL_FROB_BOUND["bfloat16"]
