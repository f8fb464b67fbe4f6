"""hopper_ragged_dot without a GPU: the tile table the grouped kernel walks (against a plain
Python model, on random and adversarial sizes), the reference lowering against
jax.lax.ragged_dot and float64, gradients against jax.grad of the lax version, the config
choice, and the argument errors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (ADVERSARIAL_SIZES, REL_FROB_BOUND, check_ragged_entries,
                          check_ragged_grads, check_summed_entries_grad, count_eqns,
                          emulate_grouped_kernel, program_eqns, ragged_reference64, random_operand,
                          rel_frob, saved_per_element, to64)
from jax_hopper import GemmConfig, hopper_ragged_dot, ragged_dot
from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.heuristics import choose_grouped_config
from jax_hopper.kernels import catalog


# The table as the kernels' callers compute it, inside jit (m, block_m, paired static): run op
# by op, every jnp op compiles for each new shape, 6x slower on these random shapes.
tile_table = jax.jit(ragged_tiles.tile_table, static_argnums=(1, 2, 3))


@pytest.fixture(autouse=True)
def on_the_cpu():
    """The reference lowering, also when the suite runs on a GPU machine (there the default
    device would run the kernels, 1 ulp from lax.ragged_dot's own GPU lowering)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def tiles_model(sizes, m, block_m, paired=False):
    """(first row, rows, group) of every M tile, in order, from the documented rules; paired,
    an odd count of a group's tiles (or of the rows past the groups) gets a 0-row tile more."""
    ends, pos = [], 0
    for s in sizes:
        pos = min(pos + max(int(s), 0), m)
        ends.append(pos)

    def cut(start, end, g):
        tiles = [(r, min(block_m, end - r), g) for r in range(start, end, block_m)]
        if paired and len(tiles) % 2:
            tiles.append((start + len(tiles) * block_m, 0, g))
        return tiles

    tiles, start = [], 0
    for g, end in enumerate(ends):
        tiles += cut(start, end, g)
        start = end
    return tiles + cut(ends[-1], m, -1)


def _sizes(rng, kind, groups, m):
    if kind == "random":
        return rng.integers(-5, 2 * m // groups + 2, groups)
    if kind == "uniform":
        return rng.multinomial(m, np.ones(groups) / groups)
    if kind == "huge":
        return rng.integers(0, 2**31 - 1, groups)
    sizes = np.zeros(groups, np.int64)
    sizes[rng.integers(groups)] = m
    return sizes


@pytest.mark.parametrize("paired", [False, True], ids=["plain", "paired"])
@pytest.mark.parametrize("kind", ["random", "uniform", "huge", "one_group"])
@pytest.mark.parametrize("block_m", [64, 128])
def test_tile_table_matches_model(rng, kind, block_m, paired):
    for _ in range(8):
        groups, m = int(rng.integers(1, 40)), int(rng.integers(1, 900))
        sizes = _sizes(rng, kind, groups, m)
        table = np.asarray(tile_table(jnp.asarray(sizes, jnp.int32), m, block_m, paired))
        want = tiles_model(sizes, m, block_m, paired)
        slots = ragged_tiles.tile_slots(m, groups, block_m, paired)
        assert table.shape == (1 + catalog.GROUP_TILE_FIELDS * slots,)
        assert slots % 2 == 0 or not paired
        assert table[0] == len(want) <= slots
        fields = table[1:].reshape(slots, catalog.GROUP_TILE_FIELDS)
        assert [tuple(f) for f in fields[:table[0]]] == want, (sizes, m, block_m)
        assert np.all(fields[table[0]:] == 0)


def test_expert_major_rows_place_every_entrys_rows_of_an_expert_together(rng):
    """ragged_tiles.expert_major_rows (launch's entries sharing the experts, few rows an
    expert): a permutation of the E M rows that puts every expert's rows together, expert by
    expert, within one the entries in order and each entry's rows in order, the rows past
    every group last in stacked order; the totals are the experts' valid rows over the
    entries."""
    for _ in range(8):
        entries, groups, m = int(rng.integers(1, 6)), int(rng.integers(1, 12)), \
            int(rng.integers(1, 300))
        kinds = rng.choice(["random", "uniform", "huge", "one_group"], entries)
        sizes = np.stack([_sizes(rng, kind, groups, m) for kind in kinds])
        place, totals = map(np.asarray, ragged_tiles.expert_major_rows(
            jnp.asarray(sizes, jnp.int32), m))
        valid = np.stack([np.asarray(ragged_tiles.valid_sizes(jnp.asarray(s, jnp.int32), m))
                          for s in sizes])
        np.testing.assert_array_equal(totals, valid.sum(axis=0))
        order = [(g, e, r) for g in range(groups) for e in range(entries)
                 for r in range(valid[e, :g].sum(), valid[e, :g + 1].sum())]
        order += [(groups, e, r) for e in range(entries) for r in range(valid[e].sum(), m)]
        want = np.empty(entries * m, np.int64)
        for row, (_, e, r) in enumerate(order):
            want[e * m + r] = row
        np.testing.assert_array_equal(place, want, err_msg=str(sizes))


@pytest.mark.parametrize("case", ["shared", "paired"])
@pytest.mark.parametrize("m,expert_major", [(70, True), (400, False)])
def test_vmap_over_shared_experts_runs_few_rows_expert_by_expert(rng, kernel_emulation, m,
                                                                 expert_major, case):
    """Entries sharing the experts that route EXPERT_MAJOR_MAX_ROWS_PER_GROUP rows or fewer
    to an expert on average (70 rows over 5 experts) run as one product over their rows
    placed expert by expert (ragged_primitive.runs_expert_major); more (400) run each
    entry's tiles apart. Either way, unclustered or in 2-CTA pairs along M, the kernel
    (emulated) gives each entry's product with the epilogue and residual
    (check_ragged_entries: adversarial sizes per entry)."""
    from jax_hopper.gemm import ragged_primitive
    calls, real = [], ragged_primitive.expert_major
    kernel_emulation.setattr(ragged_primitive, "expert_major",
                             lambda *a: calls.append(1) or real(*a))
    emulate_grouped_kernel(kernel_emulation)
    check_ragged_entries(rng, m, 32, 24, case, 1e-6, launch=("pure_callback",))
    assert bool(calls) == expert_major
    assert ragged_primitive.runs_expert_major(m, jnp.zeros((6, 5), jnp.int32),
                                              jnp.zeros((6, m, 32))) == expert_major


@pytest.mark.parametrize("paired", [False, True], ids=["plain", "paired"])
@pytest.mark.parametrize("rhs_per_entry", [False, True], ids=["shared", "per_entry"])
def test_entries_table_tiles_each_entry_apart(rng, paired, rhs_per_entry):
    """vmap's one launch over E entries (ragged_primitive.launch): the table over
    entry_sizes' groups, named by entry_groups, holds each entry's own tiles (its model's,
    rows moved by e M), its group g read as rhs[e G + g] in entry order, or, the experts
    shared, rhs[g] expert by expert (each entry's tiles of an expert together, in entry
    order); its rows past every group as -1 (first, where sorted)."""
    for _ in range(6):
        entries, groups, m = int(rng.integers(1, 6)), int(rng.integers(1, 12)), \
            int(rng.integers(1, 400))
        kinds = rng.choice(["random", "uniform", "huge", "one_group"], entries)
        sizes = np.stack([_sizes(rng, kind, groups, m) for kind in kinds])
        flat = ragged_tiles.entry_sizes(jnp.asarray(sizes, jnp.int32), m)
        table = np.asarray(ragged_tiles.entry_groups(
            tile_table(flat, entries * m, 64, paired), groups, rhs_per_entry))
        want = [(e * m + row, rows, -1 if g < 0 else e * groups * rhs_per_entry + g)
                for e in range(entries) for row, rows, g in tiles_model(sizes[e], m, 64, paired)]
        if not rhs_per_entry:
            want.sort(key=lambda tile: tile[2])  # stable: entry order within an expert
        fields = table[1:].reshape(-1, catalog.GROUP_TILE_FIELDS)
        assert table[0] == len(want), (sizes, m)
        assert [tuple(f) for f in fields[:table[0]]] == want, (sizes, m)


def test_tile_slots_bound_is_reached():
    """ceil(M / block_m) + G slots are needed: every group ending one row into a tile."""
    block_m, groups = 64, 5
    sizes = [block_m + 1] * groups
    m = sum(sizes) + 1
    table = np.asarray(tile_table(jnp.asarray(sizes, jnp.int32), m, block_m))
    assert table[0] == len(tiles_model(sizes, m, block_m)) == 2 * groups + 1
    assert table[0] <= ragged_tiles.tile_slots(m, groups, block_m)


def test_valid_sizes_rules():
    sizes = jnp.asarray([-3, 5, 2**31 - 1, 4, 2**31 - 1], jnp.int32)
    assert list(np.asarray(ragged_tiles.valid_sizes(sizes, 20))) == [0, 5, 15, 0, 0]
    assert list(np.asarray(ragged_tiles.row_groups(jnp.asarray([2, 0, 1]), 5))) == \
        [0, 0, 2, 3, 3]


def test_sums_beyond_int32_saturate_at_m():
    """G * M >= 2^31: the saturating prefix sum (a plain one would overflow int32) and the
    sort-based search; every row falls into group 1, the groups after it are empty."""
    m, groups = 1 << 22, 1024
    sizes = jnp.asarray([5] + [2**31 - 1] * (groups - 1), jnp.int32)
    ends = np.asarray(ragged_tiles.group_ends(sizes, m))
    assert ends[0] == 5 and np.all(ends[1:] == m)
    table = np.asarray(tile_table(sizes, m, 128))
    fields = table[1:].reshape(-1, catalog.GROUP_TILE_FIELDS)
    assert table[0] == 1 + -(-(m - 5) // 128)
    assert tuple(fields[0]) == (0, 5, 0) and tuple(fields[1]) == (5, 128, 1)
    assert tuple(fields[table[0] - 1]) == (m - (m - 5) % 128, (m - 5) % 128, 1)


@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_reference_equals_lax_ragged_dot(rng, transpose_rhs):
    lhs = random_operand(rng, (300, 64), "bfloat16")
    rhs = random_operand(rng, (5, 64, 48), "bfloat16")
    sizes = jnp.asarray([50, 0, 120, 0, 100], jnp.int32)  # 30 rows past every group
    got = hopper_ragged_dot(lhs, jnp.swapaxes(rhs, 1, 2) if transpose_rhs else rhs, sizes,
                            transpose_rhs=transpose_rhs, out_dtype=jnp.float32)
    want = jax.lax.ragged_dot(lhs, rhs, sizes, preferred_element_type=jnp.float32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert np.all(np.asarray(got)[270:] == 0)
    assert ragged_dot(lhs, rhs, sizes).dtype == jnp.bfloat16


def test_epilogue_against_float64(rng):
    lhs = random_operand(rng, (200, 32), "bfloat16")
    rhs = random_operand(rng, (3, 32, 24), "bfloat16")
    bias = jnp.asarray(rng.standard_normal((3, 24)), jnp.float32)
    res = random_operand(rng, (200, 24), "float32")
    sizes = [60, -1, 100]  # group 1 empty, 40 rows past every group
    got = hopper_ragged_dot(lhs, rhs, jnp.asarray(sizes), bias=bias, residual=res,
                            activation="relu", alpha=0.5, beta=-2.0, out_dtype=jnp.float32)
    x = np.zeros((200, 24))
    l64, r64, b64 = to64(lhs), to64(rhs), to64(bias)
    x[:60] = 0.5 * l64[:60] @ r64[0] + b64[0]
    x[60:160] = 0.5 * l64[60:160] @ r64[2] + b64[2]
    want = np.maximum(x, 0) - 2.0 * to64(res)
    assert rel_frob(got, want) < REL_FROB_BOUND["float32"]


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
def test_any_pitch_runs_on_the_kernel(rng, transpose_rhs, out_dtype):
    """K = 37 and N = 45 are no whole 16-byte rows: launch pads lhs and rhs along K to 40 and
    rhs (and so the output) along N to 48, binds the kernel's primitive on those, and slices;
    no fallback, no warning, and the result is the unpadded product."""
    m, k, n = 100, 37, 45
    lhs = random_operand(rng, (m, k), "bfloat16")
    rhs = random_operand(rng, (3, n, k) if transpose_rhs else (3, k, n), "bfloat16")
    sizes = jnp.asarray([30, 0, 50])

    def f(lhs, rhs, sizes):
        return hopper_ragged_dot(lhs, rhs, sizes, transpose_rhs=transpose_rhs,
                                 out_dtype=out_dtype)

    binds = [eqn.outvars[0].aval.shape for eqn in program_eqns(jax.make_jaxpr(f)(
        lhs, rhs, sizes).jaxpr) if eqn.primitive.name == "hopper_ragged_dot"]
    assert binds and all(shape == (1, m, 48) for shape in binds), binds
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = f(lhs, rhs, sizes)
    r64 = to64(rhs).swapaxes(1, 2) if transpose_rhs else to64(rhs)
    want = np.zeros((m, n))
    want[:30] = to64(lhs)[:30] @ r64[0]
    want[30:80] = to64(lhs)[30:80] @ r64[2]
    assert got.shape == (m, n) and rel_frob(got, want) < REL_FROB_BOUND[out_dtype]


def test_grads_equal_lax_version(rng):
    m, k, n, g = 150, 32, 40, 4
    lhs = random_operand(rng, (m, k), "float16")
    rhs = random_operand(rng, (g, n, k), "float16")
    bias = jnp.asarray(rng.standard_normal((g, n)), jnp.float32)
    res = random_operand(rng, (m, n), "float32")
    sizes = jnp.asarray([40, 0, 70, 30], jnp.int32)  # 10 rows past every group
    dy = random_operand(rng, (m, n), "float32")

    def ours(lhs, rhs, bias, res):
        return hopper_ragged_dot(lhs, rhs, sizes, transpose_rhs=True, bias=bias, residual=res,
                                 activation="gelu_tanh", beta=0.5, out_dtype=jnp.float32)

    def lax_version(lhs, rhs, bias, res):
        x = jax.lax.ragged_dot(lhs, jnp.swapaxes(rhs, 1, 2), sizes,
                               preferred_element_type=jnp.float32)
        rows = jnp.repeat(jnp.arange(g + 1), np.array([40, 0, 70, 30, 10]),
                          total_repeat_length=m)
        x = x + jnp.concatenate([bias, jnp.zeros((1, n))])[rows]
        return jax.nn.gelu(x, approximate=True) + 0.5 * res

    def loss(fn):
        return lambda *a: jnp.sum(fn(*a) * dy)

    got = jax.grad(loss(ours), (0, 1, 2, 3))(lhs, rhs, bias, res)
    want = jax.grad(loss(lax_version), (0, 1, 2, 3))(lhs, rhs, bias, res)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert rel_frob(a, to64(b)) < 5e-3


@pytest.mark.parametrize("case", list(ADVERSARIAL_SIZES))
def test_grads_with_adversarial_sizes(rng, case):
    """Negative sizes, sums past M (to 2^32), empty groups: the backward pass follows the same
    rules as the forward (ragged_tiles.valid_sizes), zeros where no group has rows. (dz is
    rounded to bf16 for the products, as XLA's dot does: 2.4e-3 here.)"""
    check_ragged_grads(rng, 700, 24, 40, ADVERSARIAL_SIZES[case], REL_FROB_BOUND["bfloat16"])


@pytest.mark.parametrize("m,n,k,groups", [(0, 16, 16, 2), (8, 16, 0, 2), (8, 16, 16, 0)])
def test_empty_problems(rng, m, n, k, groups):
    lhs = random_operand(rng, (m, k), "bfloat16")
    rhs = random_operand(rng, (groups, k, n), "bfloat16")
    bias = jnp.ones((groups, n), jnp.float32)
    out = hopper_ragged_dot(lhs, rhs, jnp.full((groups,), m // max(groups, 1), jnp.int32),
                            bias=bias, out_dtype=jnp.float32)
    assert out.shape == (m, n)
    # k == 0: each group's rows get its bias; rows past every group (or no groups) get 0.
    filled = (m // max(groups, 1)) * groups
    assert np.all(np.asarray(out)[:filled] == 1) and np.all(np.asarray(out)[filled:] == 0)


def test_config_choice_follows_rows_per_group():
    decode = choose_grouped_config(256, 4096, 64)
    assert (decode.block_m, decode.schedule, decode.cluster_n) == (64, "pingpong", 2)
    # Past GROUPED_SMALL_TILE_ROWS rows per group (32): the 128-row tile, where a group of a
    # few rows more than 64 would take two 64-row tiles and read its weights twice.
    assert choose_grouped_config(32 * 64, 4096, 64).block_m == 64
    assert choose_grouped_config(32 * 64 + 64, 4096, 64).block_m == 128
    big = choose_grouped_config(16384, 14336, 8)
    # 16-bit 128 x 256 tiles run without a cluster; the fp8 ones pair along N.
    assert (big.block_m, big.block_n, big.schedule, big.cluster_n) == (128, 256, "cooperative", 1)
    assert choose_grouped_config(16384, 14336, 8, "grouped_fp8").cluster_n == 2
    assert choose_grouped_config(16384, 14336, 8, "grouped_fp8_block").cluster_n == 1
    narrow = choose_grouped_config(4096, 256, 4)
    assert narrow.cluster_n == 1  # one column tile: nothing to share A with
    # An odd count of column tiles pairs up only when there are many.
    assert choose_grouped_config(512, 768, 128).cluster_n == 1
    assert choose_grouped_config(512, 9 * 256, 128).cluster_n == 2
    for cfg in (decode, big, narrow):
        cfg.validate("bfloat16", False, True, family="grouped")


@pytest.mark.parametrize("call,match", [
    (lambda l, r, g: hopper_ragged_dot(l[0], r, g), r"lhs.shape=\(16,\) must be \(M, K\)"),
    (lambda l, r, g: hopper_ragged_dot(l, r[0], g), "rhs.shape=.* must be 3-D"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g[:2]), r"group_sizes .* \(G,\) = \(3,\)"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g.astype(jnp.float32)), "integer array"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g, transpose_rhs=True), "lhs's K"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g, transpose_rhs="no"),
     "transpose_rhs must be a bool, got 'no'"),
    (lambda l, r, g: hopper_ragged_dot(l, r.astype(jnp.float16), g), "differ"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g, bias=jnp.ones(32)), r"bias.shape=.* \(G, N\)"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g, residual=jnp.ones((3, 32))), "residual"),
    (lambda l, r, g: hopper_ragged_dot(l, r, g, config=GemmConfig()), "stream_k=True"),
    (lambda l, r, g: hopper_ragged_dot(
        l, r, g, config=GemmConfig(block_n=192, stream_k=False)), "not compiled for the grouped"),
])
def test_errors_name_the_argument(rng, call, match):
    lhs = random_operand(rng, (64, 16), "bfloat16")
    rhs = random_operand(rng, (3, 16, 32), "bfloat16")
    with pytest.raises((ValueError, NotImplementedError), match=match):
        call(lhs, rhs, jnp.asarray([20, 20, 24], jnp.int32))


def test_vmap_over_tokens_and_over_weights(rng):
    m, k, n, g = 100, 32, 24, 4
    lhs = random_operand(rng, (3, m, k), "float16")
    rhs = random_operand(rng, (3, g, k, n), "float16")
    sizes = jnp.asarray(rng.integers(-2, 40, (3, g)), jnp.int32)

    def lax_entry(lhs, rhs, sizes):
        return jax.lax.ragged_dot(lhs, rhs, ragged_tiles.valid_sizes(sizes, m),
                                  preferred_element_type=jnp.float32)

    def ours(lhs, rhs, sizes):
        return hopper_ragged_dot(lhs, rhs, sizes, out_dtype=jnp.float32)

    for in_axes, args, want in [
            ((0, None, 0), (lhs, rhs[0], sizes), [(lhs[i], rhs[0], sizes[i]) for i in range(3)]),
            ((None, 0, None), (lhs[0], rhs, sizes[0]),
             [(lhs[0], rhs[i], sizes[0]) for i in range(3)]),
            ((0, 0, 0), (lhs, rhs, sizes), [(lhs[i], rhs[i], sizes[i]) for i in range(3)])]:
        fn = jax.vmap(ours, in_axes=in_axes)
        np.testing.assert_array_equal(np.asarray(jax.jit(fn)(*args)),
                                      np.stack([lax_entry(*a) for a in want]))
        # one launch over every entry (ragged_primitive.fold_entries), no loop
        jaxpr = jax.make_jaxpr(fn)(*args)
        assert count_eqns(jaxpr.jaxpr, ("hopper_ragged_dot",)) == 1
        assert count_eqns(jaxpr.jaxpr, ("scan", "while")) == 0


@pytest.mark.parametrize("case", ["paired", "shared", "per_entry"])
def test_vmap_feeds_the_kernel_each_entrys_tiles(rng, kernel_emulation, case):
    """The folded launch's operands and table as the kernel reads them (emulated:
    gemm_helpers.emulate_grouped_kernel, the table built by its reference lowering) give each
    entry's product (gemm_helpers.check_ragged_entries: adversarial sizes per entry, the
    experts shared, their tiles reordered expert by expert, pairs kept for 2-CTA clusters, or
    one per entry). Every row is stored by a tile (NaN where none)."""
    emulate_grouped_kernel(kernel_emulation)
    # 400 rows over 5 experts: the shared experts' entries apart (runs_expert_major)
    check_ragged_entries(rng, 70 if case == "per_entry" else 400, 32, 24, case, 1e-6,
                         launch=("pure_callback",))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_a_fused_activation_keeps_one_product_for_the_backward_pass(rng, out_dtype):
    """Differentiated, the fused path's forward is the grouped product with the per-expert bias
    and no activation, kept in the output's dtype for act'(z): one M x N residual (some rows
    past every group), no float32 act' beside it, no launch recomputed in the backward pass."""
    m, k, n, g = 60, 32, 24, 3
    lhs, res = random_operand(rng, (m, k), "bfloat16"), random_operand(rng, (m, n), "float32")
    rhs, bias = random_operand(rng, (g, k, n), "bfloat16"), random_operand(rng, (g, n), "float32")
    sizes = jnp.asarray([25, -1, 20], jnp.int32)

    def unit(lhs, rhs, bias, res):
        return hopper_ragged_dot(lhs, rhs, sizes, bias=bias, activation="gelu", residual=res,
                                 alpha=0.5, beta=2.0, out_dtype=out_dtype)

    assert saved_per_element(unit, (lhs, rhs, bias, res), m * n) == [jnp.dtype(out_dtype)]


def test_vmap_of_vmap_and_of_the_gradient_fold_the_entries(rng):
    """Nested vmaps fold into one launch of every entry; under vmap of jax.grad the forward
    product, d lhs and d rhs (the grouped contraction) are one launch each, no loop; all equal
    the products entry by entry."""
    m, k, n, g = 60, 32, 24, 3
    lhs = random_operand(rng, (2, 3, m, k), "bfloat16")
    rhs = random_operand(rng, (g, k, n), "bfloat16")
    bias = random_operand(rng, (g, n), "float32")
    sizes = jnp.asarray(rng.integers(-2, 30, (2, 3, g)), jnp.int32)

    def ours(lhs, sizes):
        return hopper_ragged_dot(lhs, rhs, sizes, bias=bias, activation="silu",
                                 out_dtype=jnp.float32)

    nested = jax.vmap(jax.vmap(ours))
    assert count_eqns(jax.make_jaxpr(nested)(lhs, sizes).jaxpr, ("hopper_ragged_dot",)) == 1
    np.testing.assert_array_equal(
        np.asarray(jax.jit(nested)(lhs, sizes)),
        np.stack([[ours(lhs[i, j], sizes[i, j]) for j in range(3)] for i in range(2)]))

    def grads(lhs, sizes):
        return jax.grad(lambda x, w: jnp.sum(jnp.sin(hopper_ragged_dot(
            x, w, sizes, bias=bias, activation="silu", out_dtype=jnp.float32))), (0, 1))(
                lhs, rhs)

    batched = jax.vmap(grads)
    jaxpr = jax.make_jaxpr(batched)(lhs[0], sizes[0]).jaxpr
    assert count_eqns(jaxpr, ("hopper_ragged_dot",)) == 2  # forward (z), d lhs
    assert count_eqns(jaxpr, ("hopper_ragged_contract",)) == 1  # d rhs
    assert count_eqns(jaxpr, ("scan", "while")) == 0
    got = jax.jit(batched)(lhs[0], sizes[0])
    for i in range(3):
        for a, want in zip(got, grads(lhs[0, i], sizes[0, i])):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(want), rtol=2e-2,
                                       atol=2e-2)


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
def test_grad_of_a_sum_over_entries_sharing_the_experts_is_one_contraction(rng, transpose_rhs):
    """Under jax.grad of a sum over jax.vmap'd calls sharing the experts' weights (a model's
    step over a vmapped layer), the weights' gradient is one grouped contraction over every
    entry's rows, shaped as the weights: no entry's own gradient (E, G, K, N) is formed and
    then summed (ragged_product.py). d lhs is one launch over every entry. Both against
    float64."""
    check_summed_entries_grad(rng, 3, 64, 32, 24, 4, transpose_rhs)


@pytest.mark.parametrize("transpose_rhs", [False, True], ids=["gkn", "gnk"])
def test_grad_of_the_sum_with_a_fused_epilogue_is_one_weight_gradient(rng, transpose_rhs):
    """The same with a bias, GELU and a shared residual fused (the fused path's custom JVP over
    the plain product): still one contraction for the weights, d lhs one launch; the bias's
    and residual's gradients too, against float64."""
    check_summed_entries_grad(rng, 3, 64, 32, 24, 4, transpose_rhs, epilogue=True)


def test_forward_mode_of_the_plain_product(rng):
    """With nothing fused, hopper_ragged_dot has forward-mode derivatives too (jax.jvp: the
    product is linear in each operand), against float64."""
    m, k, n, g = 90, 32, 24, 3
    lhs, t_lhs = (random_operand(rng, (m, k), "bfloat16") for _ in range(2))
    rhs, t_rhs = (random_operand(rng, (g, k, n), "bfloat16") for _ in range(2))
    sizes = jnp.asarray([30, 0, 50], jnp.int32)
    _, tangent = jax.jvp(lambda x, w: hopper_ragged_dot(x, w, sizes, out_dtype=jnp.float32),
                         (lhs, rhs), (t_lhs, t_rhs))
    want = np.zeros((m, n))
    for j, rows in enumerate((slice(0, 30), slice(30, 30), slice(30, 80))):
        want[rows] = (to64(t_lhs[rows]) @ to64(rhs[j]) + to64(lhs[rows]) @ to64(t_rhs[j]))
    assert rel_frob(tangent, want) < REL_FROB_BOUND["float32"]


def test_forward_mode_of_a_fused_epilogue(rng):
    """jax.jvp of hopper_ragged_dot with a per-expert bias, tanh-GELU and a residual fused (its
    custom JVP), every operand with a tangent, some rows past every group, against the float64
    reference's central difference."""
    m, k, n, g = 60, 32, 24, 3
    lhs, t_lhs = (random_operand(rng, (m, k), "bfloat16") for _ in range(2))
    rhs, t_rhs = ((random_operand(rng, (g, k, n), "float32") / np.sqrt(k)).astype(jnp.bfloat16)
                  for _ in range(2))
    bias, t_bias = (random_operand(rng, (g, n), "float32") for _ in range(2))
    res, t_res = (random_operand(rng, (m, n), "float32") for _ in range(2))
    sizes = jnp.asarray([20, 0, 30], jnp.int32)
    kw = dict(activation="gelu_tanh", alpha=0.5, beta=2.0, out_dtype=jnp.float32)
    _, tangent = jax.jvp(lambda x, w, b, r: hopper_ragged_dot(x, w, sizes, bias=b, residual=r,
                                                               **kw),
                         (lhs, rhs, bias, res), (t_lhs, t_rhs, t_bias, t_res))
    eps = 1e-4
    at = [np.asarray(v, np.float64) for v in (lhs, rhs, bias, res)]
    steps = [eps * np.asarray(t, np.float64) for t in (t_lhs, t_rhs, t_bias, t_res)]
    kw64 = dict(activation="gelu_tanh", alpha=0.5, beta=2.0)
    plus, minus = (ragged_reference64(at[0] + s * steps[0], at[1] + s * steps[1], sizes,
                                      bias=at[2] + s * steps[2], residual=at[3] + s * steps[3],
                                      **kw64) for s in (1, -1))
    want = (plus - minus) / (2 * eps)
    assert rel_frob(tangent, want) < REL_FROB_BOUND["float32"]


def test_derivatives_of_a_bias_per_entry_under_vmap(rng):
    """vmap over entries each with its own bias (G, N) and group sizes, shared experts, GELU
    fused: vmap of grad, grad of the sum and vmap of jvp in the bias (group_rows.per_row's
    vmap rule, the tables of every entry stacked) equal each entry's own."""
    e, m, k, n, g = 3, 40, 32, 16, 4
    x = random_operand(rng, (e, m, k), "bfloat16")
    w = (random_operand(rng, (g, k, n), "float32") / np.sqrt(k)).astype(jnp.bfloat16)
    b = random_operand(rng, (e, g, n), "float32")
    s = jnp.asarray(rng.integers(-1, 12, (e, g)), jnp.int32)

    def loss(x, b, s):
        return (hopper_ragged_dot(x, w, s, bias=b, activation="gelu",
                                  out_dtype=jnp.float32) ** 2).sum()

    def tangent(x, b, s):
        return jax.jvp(lambda b: hopper_ragged_dot(x, w, s, bias=b, activation="gelu",
                                                   out_dtype=jnp.float32), (b,), (b,))[1]

    own = [jax.grad(loss, (0, 1))(x[i], b[i], s[i]) for i in range(e)]
    want = [np.stack([np.asarray(o[j]) for o in own]) for j in range(2)]
    got = {"vmap of grad": jax.jit(jax.vmap(jax.grad(loss, (0, 1))))(x, b, s),
           "grad of the sum": jax.jit(jax.grad(
               lambda x, b: jax.vmap(loss)(x, b, s).sum(), (0, 1)))(x, b)}
    for how, grads in got.items():
        for a, ref in zip(grads, want):
            np.testing.assert_allclose(np.asarray(a), ref, rtol=1e-5, atol=1e-5 * np.abs(
                ref).max(), err_msg=how)
    np.testing.assert_allclose(
        np.asarray(jax.jit(jax.vmap(tangent))(x, b, s)),
        np.stack([np.asarray(tangent(x[i], b[i], s[i])) for i in range(e)]), rtol=1e-5,
        atol=1e-5)


def test_vmap_of_a_bias_over_shared_weights_runs_per_entry(rng):
    """A mapped bias over shared weights would need the weights once per entry: each entry
    launches on its own (ragged_primitive.fold_entries' None), with the same result."""
    lhs = random_operand(rng, (3, 50, 16), "bfloat16")
    rhs = random_operand(rng, (2, 16, 8), "bfloat16")
    bias = random_operand(rng, (3, 2, 8), "float32")
    sizes = jnp.asarray([20, 25], jnp.int32)

    def ours(lhs, bias):
        return hopper_ragged_dot(lhs, rhs, sizes, bias=bias, out_dtype=jnp.float32)

    fn = jax.vmap(ours)
    assert count_eqns(jax.make_jaxpr(fn)(lhs, bias).jaxpr, ("scan", "while")) == 1
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(lhs, bias)),
                                  np.stack([ours(lhs[i], bias[i]) for i in range(3)]))


def test_drop_in_falls_back_to_lax_where_the_kernel_does_not_apply(rng):
    from jax_hopper.gemm import ragged
    lhs = random_operand(rng, (64, 16), "float32")
    rhs = random_operand(rng, (3, 16, 32), "float32")
    sizes = jnp.asarray([20, 20, 24], jnp.int32)
    before = sum(ragged.FALLBACKS.values())
    got = ragged_dot(lhs, rhs, sizes)
    np.testing.assert_array_equal(np.asarray(got),
                                  np.asarray(jax.lax.ragged_dot(lhs, rhs, sizes)))
    assert sum(ragged.FALLBACKS.values()) == before + 1
    assert any("float32" in why for why in ragged.FALLBACKS)


@pytest.mark.parametrize("kind", ["random", "uniform", "huge", "one_group"])
def test_local_sizes_cut_the_groups_to_a_shard(rng, kind):
    """A row shard's group sizes (sharded jit): each group's rows inside the shard, the sizes
    made valid over all M first, so the shards' sizes add up to the whole."""
    for _ in range(8):
        groups, shards = int(rng.integers(1, 20)), int(rng.integers(1, 5))
        m = shards * int(rng.integers(1, 200))
        sizes = _sizes(rng, kind, groups, m)
        rows = m // shards
        per_shard = [np.asarray(ragged_tiles.local_sizes(jnp.asarray(sizes, jnp.int32), m,
                                                         s * rows, rows)) for s in range(shards)]
        want = np.asarray(ragged_tiles.valid_sizes(jnp.asarray(sizes, jnp.int32), m))
        np.testing.assert_array_equal(sum(per_shard), want)
        for s, local in enumerate(per_shard):  # every shard's groups in row order, inside it
            starts = np.concatenate([[0], np.cumsum(want)[:-1]]) - s * rows
            expect = np.clip(starts + want, 0, rows) - np.clip(starts, 0, rows)
            np.testing.assert_array_equal(local, expect)
