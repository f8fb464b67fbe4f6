"""hopper_ragged_fp8_dot's kernels on an sm_90 GPU against float64, into a poisoned output: the
grouped_fp8 family (one scale per expert: every tile and dtype pair, clusters along N and M)
and grouped_fp8_block (block scales: every tile), group boundaries anywhere, adversarial sizes,
the epilogue, rhs stored (G, K, N)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND_FP8, REL_FROB_BOUND_FP8_BLOCK, block_scales,
                          fp8_operand, poisoned_call, ragged_fp8_reference64, rel_frob)
from jax_hopper import GemmConfig, hopper_ragged_fp8_dot
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu
FAMILY = catalog.FAMILIES["grouped_fp8"]
BLOCK_FAMILY = catalog.FAMILIES["grouped_fp8_block"]


def _check(rng, m, n, k, sizes, pair=("float8_e4m3fn", "float8_e4m3fn"), config=None,
           out_dtype="float32", transpose_rhs=True, block=False, **epilogue):
    """block: scales per row and 128 of K, per expert's 128 x 128 block (grouped_fp8_block)."""
    groups = len(sizes)
    lhs, rhs = fp8_operand(rng, (m, k), pair[0]), fp8_operand(rng, (groups, n, k), pair[1])
    gs = jnp.asarray(sizes, jnp.int32)
    if block:
        ls = block_scales(rng, (m, -(-k // 128)))
        rs = block_scales(rng, (groups, -(-n // 128), -(-k // 128)))
    else:
        ls, rs = jnp.float32(0.25), jnp.asarray(rng.uniform(0.1, 2, groups), jnp.float32)
    extra = {}
    if epilogue.pop("with_bias", False):
        extra["bias"] = jnp.asarray(rng.standard_normal((groups, n)), jnp.float32)
    if epilogue.pop("with_residual", False):
        extra["residual"] = jnp.asarray(rng.standard_normal((m, n)), out_dtype)
    rhs_in = rhs if transpose_rhs else jnp.swapaxes(rhs, 1, 2)

    def fn(lhs, rhs, gs, ls, rs, *arrays):
        return hopper_ragged_fp8_dot(lhs, rhs, gs, ls, rs, out_dtype=out_dtype, config=config,
                                     transpose_rhs=transpose_rhs,
                                     **dict(zip(extra, arrays)), **epilogue)

    family = (BLOCK_FAMILY if block else FAMILY).name
    assert f"@jax_hopper_gemm_{family}(" in jax.jit(fn).lower(
        lhs, rhs_in, gs, ls, rs, *extra.values()).as_text()
    out = poisoned_call(fn, (m, n), out_dtype, lhs, rhs_in, gs, ls, rs, *extra.values())
    want = ragged_fp8_reference64(lhs, rhs, sizes, ls, rs, **extra, **epilogue)
    err = rel_frob(out, want)
    bound = (REL_FROB_BOUND_FP8_BLOCK if block else REL_FROB_BOUND_FP8)[out_dtype]
    assert err < bound, (err, m, n, k, sizes, config)


@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("cluster", FAMILY.clusters, ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("pair", FAMILY.dtypes, ids=lambda p: "x".join(p))
def test_every_tile_cluster_and_pair(tile, cluster, pair):
    config = GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0],
                                 cluster_n=cluster[1])
    _check(np.random.default_rng(), 700, 520, 384, [130, 0, 257, 1, 300], pair=pair,
           config=config)


@pytest.mark.parametrize("sizes", [[0, 0, 0], [-7, 2**31 - 1, 5], [600, 0, 0], [100, 100, 100]])
def test_adversarial_sizes(sizes):
    _check(np.random.default_rng(), 512, 256, 256, sizes)


@pytest.mark.parametrize("m,n,k", [(1, 128, 128), (2048, 4096, 1024), (300, 200, 136),
                                   (96, 1000, 7168)])
def test_shapes_and_the_default_config(m, n, k):
    rng = np.random.default_rng()
    _check(rng, m, n, k, list(rng.multinomial(m, np.ones(8) / 8)))


def test_epilogue_and_rhs_stored_kn():
    rng = np.random.default_rng()
    _check(rng, 400, 384, 256, [100, 50, 250], out_dtype="bfloat16", with_bias=True,
           with_residual=True, activation="silu", alpha=0.5, beta=2.0, transpose_rhs=False)


@pytest.mark.parametrize("tile", BLOCK_FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("m,n,k,sizes", [(700, 520, 384, [130, 0, 257, 1, 300]),
                                         (300, 200, 136, [0, 299, 1]),
                                         (513, 384, 1000, [-3, 2**31 - 1, 7])])
def test_block_scales_every_tile(tile, m, n, k, sizes):
    """Partial 128-wide blocks of K and N, a group of one row, a huge size clamped to M."""
    config = GemmConfig.for_tile(tile, stream_k=False)
    _check(np.random.default_rng(), m, n, k, sizes, config=config, block=True)


@pytest.mark.parametrize("m,n,k,groups", [(4096, 4096, 7168, 32), (64, 2048, 512, 16),
                                          (1, 128, 128, 4)])
def test_block_scales_default_config(m, n, k, groups):
    rng = np.random.default_rng()
    _check(rng, m, n, k, list(rng.multinomial(m, np.ones(groups) / groups)), block=True)


def test_block_scales_epilogue_and_rhs_stored_kn():
    rng = np.random.default_rng()
    _check(rng, 400, 384, 256, [100, 50, 250], out_dtype="bfloat16", with_bias=True,
           with_residual=True, activation="gelu_tanh", alpha=0.5, beta=2.0, transpose_rhs=False,
           block=True)
