"""hopper_glu on an sm_90 GPU against float64 references: the fused gated unit's tiles, edges,
epilogue options, stream-K splits, and its gradient and vmap paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND, check_summed_weight_grad, glu_reference64,
                          poisoned_call, random_operand, rel_frob, to64)
from jax_hopper import GemmConfig, _ffi, hopper_glu
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

# The unit multiplies two rounded products' worth of error: allow twice the GEMM bound.
GLU_BOUND = {name: 2 * bound for name, bound in REL_FROB_BOUND.items()}


def _check(rng, rows, f, k, *, dtype="bfloat16", out_dtype=None, lead=(), activation="silu",
           config=None, bias=False, residual=False, alpha=1.0, beta=1.0):
    x = random_operand(rng, (*lead, rows, k), dtype)
    w = (random_operand(rng, (k, 2, f), dtype).astype(jnp.float32) / np.sqrt(k)).astype(dtype)
    out_dtype = out_dtype or dtype
    arrays = {}
    if bias:
        arrays["bias"] = jnp.asarray(rng.standard_normal((2, f)), jnp.float32)
    if residual:
        arrays["residual"] = random_operand(rng, (rows, f), out_dtype)

    def fn(x, w, *extra):
        return hopper_glu(x, w, activation=activation, out_dtype=out_dtype, config=config,
                          alpha=alpha, beta=beta, strict=True, **dict(zip(arrays, extra)))

    out = poisoned_call(fn, (*lead, rows, f), out_dtype, x, w, *arrays.values())
    ref = glu_reference64(x, w, activation=activation, alpha=alpha, beta=beta, **arrays)
    err = rel_frob(out, ref)
    assert out.dtype == jnp.dtype(out_dtype)
    assert err < GLU_BOUND[jnp.dtype(out_dtype).name], (rows, f, k, err)
    return out


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "relu", None])
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_activations_and_dtypes(rng, dtype, activation):
    _check(rng, 384, 520, 320, dtype=dtype, activation=activation)


# F = 8 (one partial box), F not a multiple of any tile width, a 16385-row problem, a single
# row, and the layer's own shape family in small.
@pytest.mark.parametrize("rows,f,k", [
    (1, 8, 8), (7, 16, 64), (127, 136, 72), (129, 264, 136), (1000, 1000, 1000),
    (16385, 64, 64), (300, 1432, 512)])
def test_edge_shapes(rng, rows, f, k):
    _check(rng, rows, f, k)


@pytest.mark.parametrize("tile,stream_k", [
    (t, sk) for t in catalog.FAMILIES["glu"].tiles
    for sk in ((False, True) if catalog.SCHEDULES[t.schedule].stream_k else (False,))],
    ids=lambda x: x.tag if isinstance(x, catalog.TileShape) else f"stream_k={x}")
@pytest.mark.parametrize("cluster", catalog.CLUSTER_SHAPES)
def test_every_config(rng, tile, cluster, stream_k):
    cfg = GemmConfig.for_tile(tile, cluster_m=cluster[0], cluster_n=cluster[1],
                              stream_k=stream_k)
    _check(rng, 1100, 1352, 1000, config=cfg)


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_epilogue_options(rng, out_dtype):
    _check(rng, 520, 264, 384, out_dtype=out_dtype, bias=True, residual=True, alpha=0.5,
           beta=-2.0, activation="gelu")


@pytest.mark.parametrize("rows,f,k,tile,cluster_m", [
    (1536, 768, 4096, dict(block_n=128, stages=6), 1),   # 144 tiles on 132 SMs: 12 split in 4
    (2560, 1024, 3000, dict(block_n=256, stages=4), 2),  # 80 cluster tiles on 66: 14 split
])
def test_stream_k_split_tiles(rng, rows, f, k, tile, cluster_m):
    """The pieces of a split tile are summed in fp32 before the unit: a unit applied to partial
    sums would not match the reference. The tiles cover the 2F product columns."""
    cfg = GemmConfig(**tile, cluster_m=cluster_m)
    kernel = cfg.kernel("glu", "bfloat16", False, True)
    plan = cfg.plan(kernel, 1, rows, f, k, _ffi.resident_clusters(kernel, cluster_m))
    assert plan["sk_clusters"] > 0, "this shape must split tiles"
    _check(rng, rows, f, k, config=cfg, bias=True, activation="gelu")


def test_leading_dims_and_bitwise_repeatable(rng):
    x = random_operand(rng, (2, 3, 100, 256), "bfloat16")
    w = random_operand(rng, (256, 2, 136), "bfloat16")
    fn = jax.jit(hopper_glu)
    first = np.asarray(fn(x, w).astype(jnp.float32))
    assert first.shape == (2, 3, 100, 136)
    ref = glu_reference64(x, w)
    assert rel_frob(first, ref) < GLU_BOUND["bfloat16"]
    for _ in range(3):
        assert np.array_equal(np.asarray(fn(x, w).astype(jnp.float32)), first)


def test_unaligned_f_runs_unfused(rng):
    """F = 100 cannot be addressed as two halves: the kernel computes the fp32 product and jnp
    the unit; the result is the same function."""
    _check(rng, 256, 100, 128, bias=True)


def test_unaddressable_k_pads_x_and_w(rng):
    """K = 1500 (3000-byte rows of x): the CUDA lowering pads x's K and the weight's K to 1504
    (jax_hopper/gemm/pitch.py); the fused kernel runs on the padded pair."""
    x = random_operand(rng, (256, 1500), "bfloat16")
    w = (random_operand(rng, (1500, 2, 264), "bfloat16").astype(jnp.float32) / 40
         ).astype(jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((2, 264)), jnp.float32)
    out = poisoned_call(lambda x, w, b: hopper_glu(x, w, bias=b), (256, 264), jnp.bfloat16, x,
                        w, bias)
    assert rel_frob(out, glu_reference64(x, w, bias=bias)) < GLU_BOUND["bfloat16"]
    with pytest.raises(ValueError, match=r"strict=True\): x's rows are 3000 bytes apart"):
        hopper_glu(x, w, strict=True)


def test_grad_matches_jnp_layer(rng):
    """The gradient path (unfused forward, kept product) against the same unit in jnp."""
    x = random_operand(rng, (256, 512), "bfloat16")
    w = (random_operand(rng, (512, 2, 264), "bfloat16").astype(jnp.float32) / 20
         ).astype(jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((2, 264)), jnp.float32)
    dy = random_operand(rng, (256, 264), "bfloat16")

    def jnp_glu(x, w, bias):
        h = jnp.einsum("mk,kpf->mpf", x, w, preferred_element_type=jnp.float32) + bias
        return (jax.nn.silu(h[:, 0]) * h[:, 1]).astype(x.dtype)

    def loss(fn):
        return lambda x, w, bias: jnp.sum(fn(x, w, bias).astype(jnp.float32) * dy)

    got = jax.jit(jax.grad(loss(lambda x, w, b: hopper_glu(x, w, bias=b)), (0, 1, 2)))(x, w, bias)
    want = jax.grad(loss(jnp_glu), (0, 1, 2))(x, w, bias)
    for g, r in zip(got, want):
        assert g.shape == r.shape and g.dtype == r.dtype
        assert rel_frob(g, to64(r)) < 2e-2


def test_vmap_over_x_and_over_w(rng):
    x = random_operand(rng, (3, 128, 192), "bfloat16")
    w = random_operand(rng, (2, 192, 2, 72), "bfloat16")
    over_x = jax.jit(jax.vmap(hopper_glu, in_axes=(0, None)))(x, w[0])
    assert rel_frob(over_x, glu_reference64(x, w[0])) < GLU_BOUND["bfloat16"]
    over_w = jax.jit(jax.vmap(hopper_glu, in_axes=(None, 0)))(x[0], w)
    ref = np.stack([glu_reference64(x[0], w[i]) for i in range(2)])
    assert rel_frob(over_w, ref) < GLU_BOUND["bfloat16"]


@pytest.mark.parametrize("m", [256, 77])
def test_grad_of_the_sum_over_vmapped_calls_is_one_weight_gradient(rng, m):
    """jax.grad of the sum over vmapped hopper_glu calls sharing w (a per-example model
    vmapped over its batch): w's gradient one GEMM over every entry's rows, against float64."""
    check_summed_weight_grad(rng, 4, m, 512, 768, 2e-2, glu=True)
