"""hopper_fp8_matmul on an sm_90 GPU against float64: every compiled fp8 instance (dtype pair x
tile), every out dtype, the fused epilogue, edge shapes, clusters, split tiles, traced scales."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND_FP8 as REL_FROB_BOUND, check_fp8, fp8_operand,
                          fp8_reference64, poisoned_call, rel_frob)
from jax_hopper import GemmConfig, hopper_fp8_matmul
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

FAM = catalog.FAMILIES["fp8"]


def _check(rng, m, n, k, **kwargs):
    return check_fp8(rng, m, n, k, block=False, **kwargs)


@pytest.mark.parametrize("pair", catalog.FP8_PAIRS)
@pytest.mark.parametrize("tile", FAM.tiles, ids=lambda t: t.tag)
def test_every_instance(pair, tile):
    # K not a multiple of the 128-element k-block (TMA zero-fills the last one), M and N no
    # multiple of the tile.
    config = GemmConfig.for_tile(tile, stream_k=False)
    _check(np.random.default_rng(), 300, 264, 400, pair=pair, config=config)


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_out_dtypes_and_epilogue(out_dtype):
    _check(np.random.default_rng(), 257, 520, 1024, out_dtype=out_dtype, activation="gelu_tanh",
           alpha=0.75, beta=-0.5, with_bias=True, with_residual=True)


@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (7, 13, 48), (65, 4096, 4096),
                                   (8192, 256, 512),
                                   # K not whole 16-byte rows: a and b padded (launch)
                                   (7, 13, 40), (130, 264, 1000)])
def test_edge_shapes(m, n, k):
    _check(np.random.default_rng(), m, n, k)


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("tile", FAM.tiles, ids=lambda t: t.tag)
def test_clusters(cluster, tile):
    config = GemmConfig.for_tile(tile, cluster_m=cluster[0], cluster_n=cluster[1])
    _check(np.random.default_rng(), 640, 768, 512, config=config)


def test_split_k_and_stream_k():
    # Fewer tiles than SMs with a long K: the tiles are split along K and summed in fp32; each
    # piece is scaled before the sum.
    tile = FAM.tiles[0]
    _check(np.random.default_rng(), 256, 512, 8192,
           config=GemmConfig.for_tile(tile, stream_k=True))
    _check(np.random.default_rng(), 2048, 3072, 3072,  # a split tail: 24 k-blocks of 128
           config=GemmConfig.for_tile(tile, stream_k=True, cluster_m=2))
    # 79 k-blocks (prime): 2 pieces of 40, the last reading a k-block of zeros past K.
    _check(np.random.default_rng(), 54, 1024, 10000,
           config=GemmConfig.for_tile(tile, stream_k=True))


def test_batched_with_shared_weight():
    _check(np.random.default_rng(), 96, 200, 256, batch=(3,), with_residual=True)
    _check(np.random.default_rng(), 96, 200, 256, batch=(2,), b_batch=(2,))


def test_scale_changes_without_recompiling():
    rng = np.random.default_rng()
    a = fp8_operand(rng, (256, 512), jnp.float8_e4m3fn)
    b = fp8_operand(rng, (384, 512), jnp.float8_e4m3fn)
    f = jax.jit(lambda sa, sb: hopper_fp8_matmul(a, b, sa, sb, out_dtype=jnp.float32))
    for sa, sb in ((1.0, 1.0), (2.0 ** -7, 3.5), (100.0, 0.01)):
        out = f(jnp.float32(sa), jnp.float32(sb))
        assert rel_frob(out, fp8_reference64(a, b, sa, sb)) < REL_FROB_BOUND["float32"]
    assert f._cache_size() == 1


@pytest.mark.parametrize("m", [64, 200])  # the swap-AB kernels (M <= 64) and the plain ones
def test_vmap_over_per_tensor_scales_is_one_launch(m):
    # Each entry's a_scale (and b_scale, b mapped too) read by its tiles' batch entry
    # (TensorScaling per entry), the entries split as the plan splits them.
    rng = np.random.default_rng()
    a = fp8_operand(rng, (3, m, 128), jnp.float8_e4m3fn)
    b = fp8_operand(rng, (3, 96, 128), jnp.float8_e4m3fn)
    sa = jnp.asarray([0.5, 1.0, 2.0], jnp.float32)
    sb = jnp.asarray([4.0, 0.25, 1.0], jnp.float32)
    f = jax.jit(jax.vmap(lambda x, y, s, t: hopper_fp8_matmul(x, y, s, t,
                                                               out_dtype=jnp.float32)))
    text = f.lower(a, b, sa, sb).as_text()
    assert text.count("jax_hopper_gemm_fp8") == 1 and "while" not in text  # no lax.map loop
    out = poisoned_call(f, (3, m, 96), jnp.float32, a, b, sa, sb)
    for i in range(3):
        ref = fp8_reference64(a[i], b[i], float(sa[i]), float(sb[i]))
        assert rel_frob(out[i], ref) < REL_FROB_BOUND["float32"]


def test_vmap_over_rows_is_one_folded_launch():
    # a and the residual mapped against a shared b and shared scales: one launch of 4 x 48
    # rows (fp8_batching), within fp8 bounds of float64 entry by entry.
    rng = np.random.default_rng()
    a = fp8_operand(rng, (4, 48, 256), jnp.float8_e4m3fn)
    b = fp8_operand(rng, (200, 256), jnp.float8_e4m3fn)
    res = jnp.asarray(rng.standard_normal((4, 48, 200)), jnp.float32)
    f = jax.jit(jax.vmap(lambda x, r: hopper_fp8_matmul(x, b, 0.5, 2.0, residual=r,
                                                        out_dtype=jnp.float32)))
    text = f.lower(a, res).as_text()
    assert text.count("jax_hopper_gemm_fp8") == 1 and "while" not in text  # no lax.map loop
    out = f(a, res)
    for i in range(4):
        ref = fp8_reference64(a[i], b, 0.5, 2.0, residual=res[i])
        assert rel_frob(out[i], ref) < REL_FROB_BOUND["float32"]
