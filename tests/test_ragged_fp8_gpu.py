"""hopper_ragged_fp8_dot's kernels (the grouped_fp8 family) on an sm_90 GPU against float64: one
scale per expert, every tile and dtype pair, clusters along N and M, group boundaries anywhere,
adversarial sizes, the epilogue, rhs stored (G, K, N), into a poisoned output."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND_FP8, fp8_operand, poisoned_call,
                          ragged_fp8_reference64, rel_frob)
from jax_hopper import GemmConfig, hopper_ragged_fp8_dot
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu
FAMILY = catalog.FAMILIES["grouped_fp8"]


def _check(rng, m, n, k, sizes, pair=("float8_e4m3fn", "float8_e4m3fn"), config=None,
           out_dtype="float32", transpose_rhs=True, **epilogue):
    groups = len(sizes)
    lhs, rhs = fp8_operand(rng, (m, k), pair[0]), fp8_operand(rng, (groups, n, k), pair[1])
    gs = jnp.asarray(sizes, jnp.int32)
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

    assert "jax_hopper_gemm_grouped_fp8" in jax.jit(fn).lower(
        lhs, rhs_in, gs, ls, rs, *extra.values()).as_text()
    out = poisoned_call(fn, (m, n), out_dtype, lhs, rhs_in, gs, ls, rs, *extra.values())
    want = ragged_fp8_reference64(lhs, rhs, sizes, 0.25, rs, **extra, **epilogue)
    err = rel_frob(out, want)
    assert err < REL_FROB_BOUND_FP8[out_dtype], (err, m, n, k, sizes, config)


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
