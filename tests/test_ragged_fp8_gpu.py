"""hopper_ragged_fp8_dot's kernels on an sm_90 GPU against float64, into a poisoned output: the
grouped_fp8 family (one scale per expert: every tile and dtype pair, clusters along N and M)
and grouped_fp8_block (block scales: every tile), group boundaries anywhere, adversarial sizes,
the epilogue, rhs stored (G, K, N), vmap's entries in one launch."""

import numpy as np
import pytest

from gemm_helpers import REL_FROB_BOUND_FP8, check_ragged_fp8, check_ragged_fp8_entries
from jax_hopper import GemmConfig
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu
FAMILY = catalog.FAMILIES["grouped_fp8"]
BLOCK_FAMILY = catalog.FAMILIES["grouped_fp8_block"]


@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("cluster", FAMILY.clusters, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("pair", FAMILY.dtypes, ids=lambda p: "x".join(p))
def test_every_tile_cluster_and_pair(tile, cluster, pair):
    config = GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0],
                                 cluster_n=cluster[1])
    check_ragged_fp8(np.random.default_rng(), 700, 520, 384, [130, 0, 257, 1, 300], pair=pair,
                     config=config)


@pytest.mark.parametrize("sizes", [[0, 0, 0], [-7, 2**31 - 1, 5], [600, 0, 0], [100, 100, 100]])
def test_adversarial_sizes(sizes):
    check_ragged_fp8(np.random.default_rng(), 512, 256, 256, sizes)


@pytest.mark.parametrize("m,n,k", [(1, 128, 128), (2048, 4096, 1024), (300, 200, 136),
                                   (96, 1000, 7168)])
def test_shapes_and_the_default_config(m, n, k):
    rng = np.random.default_rng()
    check_ragged_fp8(rng, m, n, k, list(rng.multinomial(m, np.ones(8) / 8)))


def test_epilogue_and_rhs_stored_kn():
    rng = np.random.default_rng()
    check_ragged_fp8(rng, 400, 384, 256, [100, 50, 250], out_dtype="bfloat16", with_bias=True,
                     with_residual=True, activation="silu", alpha=0.5, beta=2.0,
                     transpose_rhs=False)


@pytest.mark.parametrize("tile", BLOCK_FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("m,n,k,sizes", [(700, 520, 384, [130, 0, 257, 1, 300]),
                                         (300, 200, 136, [0, 299, 1]),
                                         (513, 384, 1000, [-3, 2**31 - 1, 7])])
def test_block_scales_every_tile(tile, m, n, k, sizes):
    """Partial 128-wide blocks of K and N, a group of one row, a huge size clamped to M."""
    config = GemmConfig.for_tile(tile, stream_k=False)
    check_ragged_fp8(np.random.default_rng(), m, n, k, sizes, config=config, block=True)


@pytest.mark.parametrize("m,n,k,groups", [(4096, 4096, 7168, 32), (64, 2048, 512, 16),
                                          (1, 128, 128, 4)])
def test_block_scales_default_config(m, n, k, groups):
    rng = np.random.default_rng()
    check_ragged_fp8(rng, m, n, k, list(rng.multinomial(m, np.ones(groups) / groups)),
                     block=True)


def test_block_scales_epilogue_and_rhs_stored_kn():
    rng = np.random.default_rng()
    check_ragged_fp8(rng, 400, 384, 256, [100, 50, 250], out_dtype="bfloat16", with_bias=True,
                     with_residual=True, activation="gelu_tanh", alpha=0.5, beta=2.0,
                     transpose_rhs=False, block=True)


@pytest.mark.parametrize("m", [700, 200])
@pytest.mark.parametrize("block", [False, True], ids=["tensor", "block"])
def test_vmap_folds_the_entries_into_one_launch(block, m):
    """vmap over entries, each with its own adversarial sizes (and block lhs scales): one
    launch over every entry's rows, the experts and their scales shared, each entry against
    float64 (gemm_helpers.check_ragged_fp8_entries); 200 rows over 5 experts placed expert
    by expert (ragged_primitive.runs_expert_major), 700 each entry's tiles apart."""
    check_ragged_fp8_entries(np.random.default_rng(), m, 264, 384, block,
                             REL_FROB_BOUND_FP8["float32"])
