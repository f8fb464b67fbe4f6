"""hopper_fp8_matmul with block scales (the fp8_block family, and fp8_block_swap for few rows) on
an sm_90 GPU against float64 of the dequantised operands: every compiled instance, out dtypes
with the fused epilogue, edge shapes (one scale block, partial blocks of M, N and K), clusters,
split tiles, batches, vmap, traced scales, and the accuracy that promoting each k-block in fp32
buys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND_FP8, REL_FROB_BOUND_FP8_BLOCK as REL_FROB_BOUND,
                          block_scales, check_fp8, fp8_block_reference64, fp8_operand,
                          fp8_reference64, rel_frob)
from jax_hopper import GemmConfig, hopper_fp8_matmul
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

FAM = catalog.FAMILIES["fp8_block"]
SWAP_FAM = catalog.FAMILIES["fp8_block_swap"]
E4M3 = jnp.float8_e4m3fn


def _check(rng, m, n, k, **kwargs):
    # Bias and residual of the size of block-scaled products (scales up to 2^spread each).
    return check_fp8(rng, m, n, k, block=True, epilogue_scale=100.0, **kwargs)


@pytest.mark.parametrize("tile", FAM.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_every_instance(tile, out_dtype):
    # M, N and K no multiple of the tile or of the 128-wide scale blocks (the last ones are
    # partial: rows and columns past M and N read no scale).
    config = GemmConfig.for_tile(tile, stream_k=False)
    _check(np.random.default_rng(), 300, 392, 400, out_dtype=out_dtype, config=config)


@pytest.mark.parametrize("k_blocks", [8, 11, 15, 17])
@pytest.mark.parametrize("tile", FAM.tiles, ids=lambda t: t.tag)
def test_k_loop_steps_and_remainders(tile, k_blocks):
    # The k-loop takes 8 k-blocks per step (cooperative tiles) and the rest in shorter steps
    # (pairs, then singles, on 128 x 128): whole steps with each kind of remainder, the last
    # k-block partial.
    config = GemmConfig.for_tile(tile, stream_k=False)
    _check(np.random.default_rng(), 200, 300, 128 * k_blocks - 40, config=config)


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_out_dtypes_and_epilogue(out_dtype):
    # Scales within 2^-1 .. 2^1: products of K = 1024 stay inside float16's range (65504).
    _check(np.random.default_rng(), 257, 520, 1024, out_dtype=out_dtype, activation="gelu_tanh",
           alpha=0.75, beta=-0.5, with_bias=True, with_residual=True, spread=1.0)


@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (7, 13, 48), (65, 4096, 4096),
                                   (8192, 256, 512), (128, 128, 128),
                                   # K not whole 16-byte rows: a and b padded (launch)
                                   (7, 13, 40), (130, 264, 1000)])
def test_edge_shapes(m, n, k):
    _check(np.random.default_rng(), m, n, k)


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("tile", FAM.tiles, ids=lambda t: t.tag)
def test_clusters(cluster, tile):
    config = GemmConfig.for_tile(tile, cluster_m=cluster[0], cluster_n=cluster[1])
    _check(np.random.default_rng(), 640, 768, 512, config=config)


@pytest.mark.parametrize("tile", [t for t in FAM.tiles if t.schedule == "cooperative"],
                         ids=lambda t: t.tag)
def test_split_k_and_stream_k(tile):
    # Split tiles: each piece promotes its own k-blocks with their own scales before the sum.
    _check(np.random.default_rng(), 256, 512, 8192, out_dtype="float32",
           config=GemmConfig.for_tile(tile, stream_k=True))
    _check(np.random.default_rng(), 2048, 3072, 3072,  # a split tail: 24 k-blocks of 128
           config=GemmConfig.for_tile(tile, stream_k=True, cluster_m=2))


@pytest.mark.parametrize("m", [1, 7, 16, 33, 64])
@pytest.mark.parametrize("tile", SWAP_FAM.tiles, ids=lambda t: t.tag)
def test_every_swapped_instance(tile, m):
    # out^T = b a^T: the weight's rows are wgmma's M (a scale per 128 x 128 block), the tokens
    # its N (a scale per row). Rows within one token tile and past it, N and K off the scale
    # blocks (partial last ones), K split in pieces that each promote their own k-blocks.
    config = GemmConfig.for_tile(tile, swap_ab=True, stream_k=True)
    _check(np.random.default_rng(), m, 392, 2000, out_dtype="float32", config=config)


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_swapped_epilogue_and_batch(out_dtype):
    # The transposed store with the bias per output column (a strip row) and the residual;
    # scales within 2^-1 .. 2^1, as test_out_dtypes_and_epilogue.
    config = GemmConfig.for_tile(SWAP_FAM.tiles[1], swap_ab=True, stream_k=True)
    _check(np.random.default_rng(), 24, 520, 1024, out_dtype=out_dtype, activation="gelu_tanh",
           alpha=0.75, beta=-0.5, with_bias=True, with_residual=True, spread=1.0, config=config)
    _check(np.random.default_rng(), 20, 200, 256, batch=(3,), with_residual=True, config=config)


def test_batched_scales_follow_their_operands():
    _check(np.random.default_rng(), 96, 200, 256, batch=(3,), with_residual=True)
    _check(np.random.default_rng(), 96, 200, 256, batch=(2,), b_batch=(2,))


def test_promotion_is_as_accurate_as_dequantising():
    # Scales spanning 2^-12 .. 2^12 across blocks, K = 4096 (32 k-blocks), fp32 out: within
    # the block bound, and several times tighter than the per-tensor kernel's unpromoted sum.
    rng = np.random.default_rng()
    err = _check(rng, 512, 1024, 4096, out_dtype="float32", spread=12.0)
    a, b = fp8_operand(rng, (512, 4096), E4M3), fp8_operand(rng, (1024, 4096), E4M3)
    tensor = rel_frob(hopper_fp8_matmul(a, b, 1.0, 1.0, out_dtype=jnp.float32),
                      fp8_reference64(a, b, 1.0, 1.0))
    assert tensor < REL_FROB_BOUND_FP8["float32"]
    assert err < tensor / 2, (err, tensor)


def test_scales_change_without_recompiling():
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (256, 512), E4M3), fp8_operand(rng, (384, 512), E4M3)
    f = jax.jit(lambda sa, sb: hopper_fp8_matmul(a, b, sa, sb, out_dtype=jnp.float32))
    for spread in (0.0, 3.0, 9.0):
        sa, sb = block_scales(rng, (256, 4), spread), block_scales(rng, (3, 4), spread)
        err = rel_frob(f(sa, sb), fp8_block_reference64(a, b, sa, sb))
        assert err < REL_FROB_BOUND["float32"], (spread, err)
    assert f._cache_size() == 1


def test_vmap_runs_one_launch_per_entry():
    rng = np.random.default_rng()
    a = fp8_operand(rng, (3, 64, 256), E4M3)
    b = fp8_operand(rng, (96, 256), E4M3)
    sa, sb = block_scales(rng, (3, 64, 2)), block_scales(rng, (1, 2))
    out = jax.vmap(lambda x, s: hopper_fp8_matmul(x, b, s, sb, out_dtype=jnp.float32))(a, sa)
    for i in range(3):
        ref = fp8_block_reference64(a[i], b, sa[i], sb)
        assert rel_frob(out[i], ref) < REL_FROB_BOUND["float32"]
