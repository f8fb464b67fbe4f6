"""hopper_ragged_glu (the grouped_glu kernel family: every expert's gate and up in one launch)
on an sm_90 GPU against float64: every compiled tile with and without the 2-CTA cluster, both
dtypes, every activation with bias, residual, alpha and beta, group boundaries at every offset
of a tile, adversarial sizes, F not a multiple of 8, gradients, CUDA graphs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND, check_ragged_glu, check_ragged_glu_entry_grads,
                          ragged_glu_grads64, ragged_glu_reference64, random_operand, rel_frob,
                          run_in_command_buffer)
from jax_hopper import GemmConfig, hopper_ragged_glu
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

FAMILY = catalog.FAMILIES["grouped_glu"]


@pytest.mark.parametrize("cluster_n", [c[1] for c in FAMILY.clusters], ids=lambda c: f"c1x{c}")
@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_every_tile_and_cluster(rng, dtype, tile, cluster_n):
    sizes = rng.multinomial(1200, np.ones(6) / 6)
    check_ragged_glu(rng, 1200, 320, 392, list(sizes), dtype=dtype,
                     config=GemmConfig.for_tile(tile, stream_k=False, cluster_n=cluster_n))


@pytest.mark.parametrize("tile", FAMILY.tiles, ids=lambda t: t.tag)
def test_boundary_at_every_offset(rng, tile):
    sizes = [1 + (7 * i) % (tile.block_m + 3) for i in range(40)]
    check_ragged_glu(rng, sum(sizes) + 5, 128, 136, sizes,
                     config=GemmConfig.for_tile(tile, stream_k=False))


@pytest.mark.parametrize("activation", [a for a, _ in catalog.ACTIVATIONS])
@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_epilogue_options(rng, activation, out_dtype):
    check_ragged_glu(rng, 640, 256, 264, [100, 0, 313, 227], out_dtype=out_dtype, bias=True,
                     residual=True, alpha=0.5, beta=-2.0, activation=activation)


@pytest.mark.parametrize("case", ["empty_groups", "negative", "sum_above_m", "sum_below_m"])
def test_adversarial_sizes(rng, case):
    sizes = {"empty_groups": [0, 0, 350, 0, 350, 0],
             "negative": [-5, 300, -2**31, 400, 7],
             "sum_above_m": [500, 2**31 - 1, 2**31 - 1, 9],
             "sum_below_m": [100, 0, 250]}[case]
    check_ragged_glu(rng, 700, 192, 136, sizes)


# F not a multiple of 8 (padded), decode-like few rows per expert, one expert.
@pytest.mark.parametrize("m,k,f,groups", [(333, 64, 100, 3), (256, 512, 1024, 64),
                                          (500, 128, 256, 1)])
def test_shapes(rng, m, k, f, groups):
    check_ragged_glu(rng, m, k, f, list(rng.multinomial(m, np.ones(groups) / groups)))


@pytest.mark.parametrize("m,k,f", [(600, 1500, 392), (300, 256, 1001), (257, 999, 45)])
def test_unaddressable_pitches_run_on_the_kernel(rng, m, k, f):
    """K or F no whole 16-byte rows: x and the weights padded (launch), the kernel runs."""
    sizes = rng.multinomial(m - 5, np.ones(4) / 4)
    check_ragged_glu(rng, m, k, f, list(sizes), bias=True, residual=True,
                     activation="gelu_tanh")


def test_vmap_folds_the_entries_into_one_launch(rng):
    """vmap over entries with their own sizes and weights: one launch over every entry
    (ragged_primitive.fold_entries), each entry against float64."""
    e, m, k, f, g = 3, 500, 256, 192, 4
    x = random_operand(rng, (e, m, k), "bfloat16")
    w = random_operand(rng, (e, g, k, 2, f), "bfloat16")
    bias = random_operand(rng, (g, 2, f), "float32")
    sizes = [[-3, 200, 100, 2**31 - 1], [0, 0, 0, 0], [100, 100, 100, 100]]
    fn = jax.vmap(lambda x, w, s: hopper_ragged_glu(x, w, s, bias=bias, activation="silu",
                                                    out_dtype=jnp.float32))
    out = jax.jit(fn)(x, w, jnp.asarray(sizes, jnp.int32))
    for i in range(e):
        want = ragged_glu_reference64(x[i], w[i], sizes[i], bias=bias)
        assert rel_frob(out[i], want) < REL_FROB_BOUND["float32"], f"entry {i}"


def test_grads_against_float64(rng):
    m, k, f, g = 600, 256, 192, 4
    x = random_operand(rng, (m, k), "bfloat16")
    w = (random_operand(rng, (g, k, 2, f), "bfloat16").astype(jnp.float32) / 16
         ).astype(jnp.bfloat16)
    sizes = [200, 0, 250, 100]  # 50 rows past every group
    gs = jnp.asarray(sizes, jnp.int32)
    dy = random_operand(rng, (m, f), "float32")
    got = jax.jit(jax.grad(lambda x, w: jnp.sum(
        hopper_ragged_glu(x, w, gs, activation=None, out_dtype=jnp.float32) * dy), (0, 1)))(x, w)
    want_x, want_w = ragged_glu_grads64(x, w, sizes, dy)
    assert rel_frob(got[0], want_x) < 2e-2 and rel_frob(got[1], want_w) < 2e-2


@pytest.mark.parametrize("m", [600, 200])
def test_vmap_of_the_gradients_folds_the_products(rng, m):
    """vmap of jax.grad over entries with their own adversarial sizes, the weights shared: the
    gated product, d x and d w one launch each over every entry (no loop), each entry's
    gradients against float64 (gemm_helpers.check_ragged_glu_entry_grads; 200 rows over 5
    experts: the gated product's rows placed expert by expert)."""
    check_ragged_glu_entry_grads(rng, m, 256, 192, 2e-2)


@pytest.mark.parametrize("m", [600, 200])
def test_grad_of_the_sum_over_entries_is_one_weight_gradient(rng, m):
    """jax.grad of the sum over the vmapped entries sharing the experts: one weight gradient
    over every entry's rows (gated_product's dw_summed: at 200 rows placed expert by expert),
    against the entries' float64 gradients summed."""
    check_ragged_glu_entry_grads(rng, m, 256, 192, 2e-2, summed=True)


_GRAPH_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, {tests!r})
from gemm_helpers import ragged_glu_reference64, rel_frob
from jax_hopper import hopper_ragged_glu
x = jax.random.normal(jax.random.key(0), (512, 256), jnp.float32).astype(jnp.bfloat16)
w = (jax.random.normal(jax.random.key(1), (4, 256, 2, 192), jnp.float32) / 16).astype(jnp.bfloat16)
f = jax.jit(lambda x, w, g: hopper_ragged_glu(jnp.sin(x), w, g + 1, out_dtype=jnp.float32))
for sizes in ([99, 100, 200, 109], [0, 511, -1, 0], [10, 20, 30, 40]):
    g = jnp.asarray(sizes, jnp.int32)
    want = ragged_glu_reference64(jnp.sin(x), w, np.asarray(sizes) + 1)
    print("ERR", rel_frob(f(x, w, g), want), flush=True)
"""


def test_runs_inside_an_xla_command_buffer():
    errors = run_in_command_buffer(_GRAPH_CHILD, "hopper_ragged_dot", "jax_hopper_gemm_grouped_glu")
    assert len(errors) == 3 and max(errors) < REL_FROB_BOUND["bfloat16"], errors
