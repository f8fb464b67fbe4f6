"""hopper_ragged_dot (the grouped kernel family) on an sm_90 GPU against float64 references:
random and adversarial group sizes (empty groups, one row, every row in one group, boundaries
at every offset of a tile, negative sizes, sums above and below M), both rhs layouts, every
compiled tile and cluster, the fused epilogue, gradients, CUDA graphs and repeatability; and the
tile table built on the device against its jnp model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (ADVERSARIAL_SIZES, REL_FROB_BOUND, check_ragged, check_ragged_entries,
                          check_ragged_grads, check_summed_entries_grad, count_eqns,
                          entry_sizes, ragged_grads64,
                          ragged_reference64, random_operand, rel_frob, run_in_command_buffer,
                          to64)
from jax_hopper import GemmConfig, hopper_ragged_dot, ragged_dot
from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.ragged_primitive import build_tile_table
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

TILES = catalog.FAMILIES["grouped"].tiles


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.tag)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_every_tile_both_layouts(rng, dtype, tile, transpose_rhs):
    sizes = rng.multinomial(1500, np.ones(7) / 7)
    check_ragged(rng, 1500, 320, 520, list(sizes), dtype=dtype, transpose_rhs=transpose_rhs,
                 config=GemmConfig.for_tile(tile, stream_k=False))


@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.tag)
def test_cluster_along_n(rng, tile):
    check_ragged(rng, 900, 256, 1000, [300, 1, 0, 299, 300],
                 config=GemmConfig.for_tile(tile, stream_k=False, cluster_n=2))


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.tag)
def test_cluster_along_m(rng, tile, transpose_rhs):
    """Two M tiles of one group share its weights by multicast (a paired table): groups of an
    odd and an even count of tiles, empty ones, one row, and rows past every group."""
    b = tile.block_m
    sizes = [3 * b + 5, 0, 1, 2 * b, b - 7, 4 * b + 1]
    check_ragged(rng, sum(sizes) + b + 3, 256, 520, sizes, transpose_rhs=transpose_rhs,
                 config=GemmConfig.for_tile(tile, stream_k=False, cluster_m=2))


@pytest.mark.parametrize("case", list(ADVERSARIAL_SIZES))
def test_cluster_along_m_adversarial_sizes(rng, case):
    check_ragged(rng, 700, 192, 136, ADVERSARIAL_SIZES[case],
                 config=GemmConfig.for_tile(TILES[0], stream_k=False, cluster_m=2))


@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.tag)
def test_boundary_at_every_offset(rng, tile):
    """Group boundaries at every row offset of a 64-row strip and of the tile: a tile
    straddling two groups is computed for each and stores only its own rows."""
    sizes = [1 + (7 * i) % (tile.block_m + 3) for i in range(40)]
    check_ragged(rng, sum(sizes) + 5, 128, 264, sizes,
                 config=GemmConfig.for_tile(tile, stream_k=False))


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2)], ids=lambda c: f"c{c[0]}x{c[1]}")
@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.tag)
def test_groups_ending_in_the_first_half_of_their_last_tile(rng, tile, cluster):
    """Every group but the last ends 1-64 rows into its last 128-row tile (the half of the
    cooperative tiles' first warpgroup), one group of 64 rows fills no more; the poisoned
    output shows any row the kernel should have stored."""
    sizes = [129, 64, 192, 1, 300, 250]
    check_ragged(rng, sum(sizes) + 7, 256, 264, sizes, out_dtype="float32",
                 config=GemmConfig.for_tile(tile, stream_k=False, cluster_m=cluster[0],
                                            cluster_n=cluster[1]))


@pytest.mark.parametrize("case", list(ADVERSARIAL_SIZES))
def test_adversarial_sizes(rng, case):
    m = 700
    sizes = ADVERSARIAL_SIZES[case]
    check_ragged(rng, m, 192, 136, sizes)


@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_epilogue_options(rng, out_dtype):
    check_ragged(rng, 640, 256, 264, [100, 0, 313, 227], out_dtype=out_dtype, bias=True,
                 residual=True, alpha=0.5, beta=-2.0, activation="gelu")


@pytest.mark.parametrize("activation", ["silu", "relu", "gelu_tanh"])
def test_activations_with_rows_past_groups(rng, activation):
    check_ragged(rng, 512, 128, 200, [100, 200, 50], activation=activation, bias=True)


# n not a multiple of 8 (the output is padded), one row, G = 1024, many groups with a few rows,
# an odd count of column tiles (no cluster).
@pytest.mark.parametrize("m,k,n,groups", [(333, 64, 100, 3), (1, 64, 64, 1), (2048, 64, 128, 1024),
                                          (256, 512, 4096, 64), (512, 2048, 768, 128)])
def test_shapes(rng, m, k, n, groups):
    sizes = rng.multinomial(m, np.ones(groups) / groups)
    check_ragged(rng, m, k, n, list(sizes))


# Row pitches TMA cannot address (K, or N where rhs is (G, K, N) or the output is 16-bit):
# launch pads them with zeros, so the kernel runs (no fallback); poisoned_call checks every
# output element of the unpadded result was written.
@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
@pytest.mark.parametrize("m,k,n,out_dtype", [(700, 1500, 388, "bfloat16"),
                                             (300, 256, 1001, "float32"),
                                             (513, 999, 1003, "bfloat16")])
def test_unaddressable_pitches_run_on_the_kernel(rng, m, k, n, out_dtype, transpose_rhs):
    sizes = rng.multinomial(m - 7, np.ones(5) / 5)
    check_ragged(rng, m, k, n, list(sizes), out_dtype=out_dtype, transpose_rhs=transpose_rhs,
                 bias=True, residual=True, activation="gelu_tanh", alpha=0.5, beta=2.0)


@pytest.mark.parametrize("kind", ["random", "huge", "one_group", "negative"])
@pytest.mark.parametrize("groups", [1, 255, 256, 257, 1000, 3000])
def test_tile_table_kernel_matches_model(rng, kind, groups):
    """The table built on the device (one CTA, 256 groups at a time) is ragged_tiles.py's, for
    any sizes, plain and paired: across chunk boundaries, sums above M and beyond int32,
    negative sizes."""
    m = int(rng.integers(1, 5000))
    sizes = {"random": rng.integers(0, 2 * m // groups + 2, groups),
             "huge": rng.integers(0, 2**31 - 1, groups),
             "one_group": np.eye(groups, dtype=np.int64)[rng.integers(groups)] * m,
             "negative": rng.integers(-2**31, 50, groups)}[kind]
    gs = jnp.asarray(sizes, jnp.int32)
    cpu = jax.devices("cpu")[0]
    for block, paired in ((64, False), (128, False), (128, True)):
        got = np.asarray(jax.jit(build_tile_table, static_argnums=(1, 2, 3))(gs, m, block,
                                                                              paired))
        want = np.asarray(jax.jit(ragged_tiles.tile_table, static_argnums=(1, 2, 3))(
            jax.device_put(gs, cpu), m, block, paired))
        assert got.shape == want.shape and np.array_equal(got, want), (kind, groups, m, block,
                                                                       paired)


def test_drop_in_ragged_dot_matches_lax(rng):
    lhs = random_operand(rng, (600, 256), "bfloat16")
    rhs = random_operand(rng, (8, 256, 384), "bfloat16")
    gs = jnp.asarray(rng.multinomial(600, np.ones(8) / 8), jnp.int32)
    got = jax.jit(ragged_dot)(lhs, rhs, gs)
    want = jax.lax.ragged_dot(lhs, rhs, gs, preferred_element_type=jnp.float32)
    assert got.dtype == jnp.bfloat16
    assert rel_frob(got, to64(want)) < REL_FROB_BOUND["bfloat16"]


# 30 rows past every group; a decode-sized one (64 x 256 tiles forward and for d lhs); K and N
# no whole 16-byte rows (every product pads some operand: launch, ragged_contract).
@pytest.mark.parametrize("m,k,n,sizes", [
    (700, 256, 384, [120, 0, 200, 180, 150, 20]),
    (200, 256, 384, [9, 0, 17, 3, 30, 12, 1, 0, 25, 14, 8, 11, 19, 2, 26, 13]),
    (333, 1501, 389, [100, 0, 150, 50])], ids=["rows", "decode", "odd_pitch"])
def test_grad_matches_lax_ragged_dot(rng, m, k, n, sizes):
    g = len(sizes)
    lhs = random_operand(rng, (m, k), "bfloat16")
    rhs = (random_operand(rng, (g, k, n), "bfloat16").astype(jnp.float32) / 16
           ).astype(jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((g, n)), jnp.float32)
    gs = jnp.asarray(sizes, jnp.int32)
    dy = random_operand(rng, (m, n), "float32")

    def ours(lhs, rhs, bias):
        return hopper_ragged_dot(lhs, rhs, gs, bias=bias, activation="silu",
                                 out_dtype=jnp.float32)

    def lax_version(lhs, rhs, bias):
        x = jax.lax.ragged_dot(lhs, rhs, gs, preferred_element_type=jnp.float32)
        rows = jnp.repeat(jnp.arange(g + 1), np.append(np.asarray(gs), m - int(gs.sum())),
                          total_repeat_length=m)
        return jax.nn.silu(x + jnp.concatenate([bias, jnp.zeros((1, n))])[rows])

    def loss(fn):
        return lambda *a: jnp.sum(fn(*a) * dy)

    got = jax.jit(jax.grad(loss(ours), (0, 1, 2)))(lhs, rhs, bias)
    want = jax.grad(loss(lax_version), (0, 1, 2))(lhs, rhs, bias)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert rel_frob(a, to64(b)) < 2e-2


@pytest.mark.parametrize("case", list(ADVERSARIAL_SIZES))
def test_grads_with_adversarial_sizes_against_float64(rng, case):
    """The backward kernels (d lhs on the grouped GEMM, d rhs on the grouped contraction) under
    negative sizes, sums past M and empty groups: float64 within bf16 bounds, exact zeros for
    the rows past every group and the groups without rows."""
    check_ragged_grads(rng, 700, 256, 136, ADVERSARIAL_SIZES[case], REL_FROB_BOUND["bfloat16"])


_GRAPH_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, {tests!r})
from gemm_helpers import ragged_reference64, rel_frob
from jax_hopper import hopper_ragged_dot
lhs = jax.random.normal(jax.random.key(0), (512, 256), jnp.float32).astype(jnp.bfloat16)
rhs = jax.random.normal(jax.random.key(1), (4, 256, 384), jnp.float32).astype(jnp.bfloat16)
f = jax.jit(lambda l, r, g: jnp.tanh(hopper_ragged_dot(jnp.sin(l), r, g + 1)) * 2)
for sizes in ([99, 100, 200, 109], [0, 511, -1, 0], [10, 20, 30, 40]):
    g = jnp.asarray(sizes, jnp.int32)
    want = 2 * np.tanh(ragged_reference64(jnp.sin(lhs), rhs, np.asarray(sizes) + 1))
    print("ERR", rel_frob(f(lhs, rhs, g).astype(jnp.float32), want), flush=True)
"""


def test_runs_inside_an_xla_command_buffer():
    """The handler is command-buffer compatible and its launch does not depend on the sizes: in
    a CUDA-graph command buffer, replays with other group sizes compute the right thing."""
    errors = run_in_command_buffer(_GRAPH_CHILD, "hopper_ragged_dot",
                                   "jax_hopper_gemm_grouped")
    assert len(errors) == 3 and max(errors) < REL_FROB_BOUND["bfloat16"], errors


def test_scan_with_changing_sizes(rng):
    """The sizes change from step to step of a lax.scan (one compiled call, its launch the same
    each time): every step matches its own reference."""
    m, k, n = 512, 128, 256
    lhs = random_operand(rng, (m, k), "bfloat16")
    rhs = random_operand(rng, (4, k, n), "bfloat16")
    steps = np.stack([rng.multinomial(m - 10 * i, np.ones(4) / 4) for i in range(5)])

    def body(carry, gs):
        return carry, hopper_ragged_dot(lhs, rhs, gs, out_dtype=jnp.float32)

    _, outs = jax.jit(lambda s: jax.lax.scan(body, 0, s))(jnp.asarray(steps, jnp.int32))
    for i in range(len(steps)):
        ref = ragged_reference64(lhs, rhs, steps[i])
        assert rel_frob(outs[i], ref) < REL_FROB_BOUND["float32"]


def test_bitwise_repeatable(rng):
    lhs = random_operand(rng, (1000, 256), "bfloat16")
    rhs = random_operand(rng, (5, 256, 512), "bfloat16")
    gs = jnp.asarray([200, 0, 500, 1, 299], jnp.int32)
    fn = jax.jit(hopper_ragged_dot)
    first = np.asarray(fn(lhs, rhs, gs).astype(jnp.float32))
    for _ in range(3):
        assert np.array_equal(np.asarray(fn(lhs, rhs, gs).astype(jnp.float32)), first)


@pytest.mark.parametrize("m", [700, 200])
@pytest.mark.parametrize("case", ["shared", "per_entry", "paired"])
def test_vmap_folds_the_entries_into_one_launch(rng, case, m):
    """vmap over entries, each with its own (adversarial) group sizes: one launch over every
    entry's rows, each entry against float64 (gemm_helpers.check_ragged_entries: experts
    shared, one set per entry stored (G, N, K), or shared in 2-CTA pairs along M). Over 5
    shared experts 700 rows an entry run each entry's tiles apart, 200 the entries' rows
    placed expert by expert (ragged_primitive.runs_expert_major)."""
    check_ragged_entries(rng, m, 136, 192, case, REL_FROB_BOUND["float32"])


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
@pytest.mark.parametrize("m", [700, 200])
def test_grad_of_a_sum_over_entries_is_one_weight_gradient(rng, m, transpose_rhs):
    """jax.grad of the sum over vmapped calls sharing 6 experts (a model's step over a vmapped
    layer): the weights' gradient one contraction over every entry's rows placed expert by
    expert (no per-entry gradient summed), d lhs one launch, against float64; 700 rows an
    entry tile the forward per entry, 200 run it expert by expert too."""
    check_summed_entries_grad(rng, 4, m, 136, 192, 6, transpose_rhs)


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
@pytest.mark.parametrize("m", [700, 200])
def test_grad_of_a_sum_over_entries_with_a_fused_epilogue(rng, m, transpose_rhs):
    """The same with a bias, GELU and a shared residual fused (the fused path's custom JVP):
    still one weight gradient, and z the forward's own launch for every entry; bias and
    residual gradients against float64 too."""
    check_summed_entries_grad(rng, 4, m, 136, 192, 6, transpose_rhs, epilogue=True)


@pytest.mark.parametrize("m", [700, 200])
def test_vmap_of_the_gradient_folds_the_products(rng, m):
    """vmap of jax.grad over entries with their own sizes: the forward product, d lhs and d rhs
    (the grouped contraction, its groups bounded per entry) one launch each over every entry,
    no loop; each entry's gradients against float64 (200 rows over 5 experts: the forward
    product and d lhs over the rows placed expert by expert)."""
    sizes = entry_sizes(m)
    e, k, n, g = len(sizes), 128, 256, 5
    lhs = random_operand(rng, (e, m, k), "bfloat16")
    rhs = (random_operand(rng, (g, k, n), "bfloat16").astype(jnp.float32) / np.sqrt(k)
           ).astype(jnp.bfloat16)
    bias = random_operand(rng, (g, n), "float32")
    dout = random_operand(rng, (e, m, n), "float32")

    def grads(lhs, sizes, dout):
        def loss(lhs, rhs, bias):
            y = hopper_ragged_dot(lhs, rhs, sizes, bias=bias, activation="silu",
                                  out_dtype=jnp.float32)
            return jnp.sum(y * dout)
        return jax.grad(loss, (0, 1, 2))(lhs, rhs, bias)

    args = (lhs, jnp.asarray(sizes, jnp.int32), dout)
    jaxpr = jax.make_jaxpr(jax.vmap(grads))(*args).jaxpr
    assert count_eqns(jaxpr, ("scan", "while")) == 0
    assert count_eqns(jaxpr, ("hopper_ragged_contract",)) == 1
    got = jax.jit(jax.vmap(grads))(*args)
    for i in range(e):
        want = ragged_grads64(lhs[i], rhs, bias, dout[i], sizes[i])
        for name, a, w in zip(("lhs", "rhs", "bias"), got, want):
            assert rel_frob(to64(a[i]), w) < REL_FROB_BOUND["bfloat16"], f"entry {i}: d {name}"


def test_vmap_over_tokens_shares_the_weights(rng):
    lhs = random_operand(rng, (3, 400, 128), "bfloat16")
    rhs = random_operand(rng, (5, 128, 264), "bfloat16")
    sizes = np.stack([rng.multinomial(400 - 7 * i, np.ones(5) / 5) for i in range(3)])
    out = jax.jit(jax.vmap(lambda x, s: hopper_ragged_dot(x, rhs, s, out_dtype=jnp.float32)))(
        lhs, jnp.asarray(sizes, jnp.int32))
    for i in range(3):
        assert rel_frob(out[i], ragged_reference64(lhs[i], rhs, sizes[i])) < \
            REL_FROB_BOUND["float32"]
