"""Autotuning the grouped families without a GPU: the problems a MoE step runs (forward, d lhs
and the weight gradient's contraction, bf16 and fp8), a cached entry reaching the launches that
pass no config, the candidates, the tuner's machinery on every grouped family (reference
timings on a CPU), and the command line's rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemm_helpers import launched_configs, use_tune_cache

import jax_hopper.tune as tune
from jax_hopper import (GemmConfig, fp8_ragged_dot, hopper_ragged_contract, hopper_ragged_dot,
                        ragged_dot)
from jax_hopper.gemm import ragged_primitive, tuned
from jax_hopper.gemm.heuristics import grouped_heuristic_config
from jax_hopper.kernels import catalog

M, K, N, G = 96, 64, 80, 3
SIZES = jnp.asarray([40, 0, 50], jnp.int32)  # 6 rows past every group


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "tune.json"
    use_tune_cache(monkeypatch, path)
    return path


def _store(problem: tune.Problem, config: GemmConfig) -> None:
    tuned.store(tuned.gpu_key(), {problem.key: {"config": tuned.config_fields(config),
                                                "us": 1.0, "heuristic_us": 2.0,
                                                "date": "2026-11-27"}})


def _configs(fn, *args):
    with launched_configs() as seen:
        jax.jit(fn).lower(*args)
    return {config for *_, config in seen}


def _other(family: str, problem_config: GemmConfig) -> GemmConfig:
    """A compiled config of `family` that is not `problem_config` (what a tuner could cache)."""
    fam = catalog.FAMILIES[family]
    return next(c for t in fam.tiles for cm, cn in fam.clusters
                if (c := GemmConfig.for_tile(t, stream_k=False, cluster_m=cm,
                                             cluster_n=cn)) != problem_config)


def test_a_moe_step_runs_a_grouped_product_its_transpose_and_a_contraction():
    x, w = jnp.ones((M, K), jnp.bfloat16), jnp.ones((G, K, N), jnp.bfloat16)

    def loss(x, w):
        return ragged_dot(x, w, SIZES).astype(jnp.float32).sum()
    forward = tune.Problem("grouped", "bfloat16", False, True, G, M, N, K)
    assert tune.problems_of(loss, x, w) == [forward]
    found = tune.problems_of(jax.grad(loss, (0, 1)), x, w)
    # d lhs = dy (M, N) against each w[g] read as (N, K) rows: the product's b K-major; d w[g]
    # = x_g^T dy_g: out (G, K, N) over the M rows, x and dy read MN-major (the backward pass
    # in the order jax transposes them)
    assert found[0] == forward and len(found) == 3
    assert set(found[1:]) == {
        tune.Problem("grouped", "bfloat16", False, False, G, M, K, N),
        tune.Problem("grouped_contraction", "bfloat16", True, True, G, K, N, M)}


@pytest.mark.parametrize("m", [M, 7 * M])
def test_a_vmapped_grouped_product_is_tuned_as_its_one_launch(m):
    """vmap over E entries with their own sizes, sharing the experts: one launch of E M rows,
    the problem its config is looked up for: over the G experts where an entry routes few
    rows to each (96 rows over 3: the rows placed expert by expert,
    ragged_primitive.runs_expert_major), else over E G groups (672 rows: each entry's groups
    tiled apart, ragged_primitive.fold_entries)."""
    x, w = jnp.ones((3, m, K), jnp.bfloat16), jnp.ones((G, K, N), jnp.bfloat16)
    sizes = jnp.stack([SIZES] * 3)
    fn = jax.vmap(lambda x, s: ragged_dot(x, w, s))
    groups = G if m <= ragged_primitive.EXPERT_MAJOR_MAX_ROWS_PER_GROUP * G else 3 * G
    assert groups == (G if m == M else 3 * G)
    assert tune.problems_of(fn, x, sizes) == [
        tune.Problem("grouped", "bfloat16", False, True, groups, 3 * m, N, K)]


def test_a_vmapped_weight_gradient_is_tuned_as_its_one_contraction():
    """vmap of the weight gradient over E entries: one contraction of E G groups over E M
    rows (ragged_contract.fold_entries; each group bounded by its own rows)."""
    x, dy = jnp.ones((3, M, K), jnp.bfloat16), jnp.ones((3, M, N), jnp.bfloat16)
    sizes = jnp.stack([SIZES] * 3)
    fn = jax.vmap(lambda x, dy, s: hopper_ragged_contract(x, dy, s))
    assert tune.problems_of(fn, x, dy, sizes) == [
        tune.Problem("grouped_contraction", "bfloat16", True, True, 3 * G, K, N, 3 * M)]


def test_the_fp8_moe_step_runs_the_fp8_grouped_families():
    x, w = jnp.ones((M, 256), jnp.bfloat16), jnp.ones((G, 256, 128), jnp.bfloat16)
    for recipe, suffix in (("tensor", ""), ("block", "_block")):
        found = tune.problems_of(jax.grad(lambda x, w: fp8_ragged_dot(
            x, w, SIZES, recipe=recipe).astype(jnp.float32).sum(), (0, 1)), x, w)
        assert [p.family for p in found] == [f"grouped_fp8{suffix}", f"grouped_fp8{suffix}",
                                             f"grouped_contraction_fp8{suffix}"], found
        forward, dlhs, dw = found
        assert (forward.m, forward.n, forward.k, dlhs.n, dlhs.k) == (M, 128, 256, 256, 128)
        assert (dw.batch, dw.m, dw.n, dw.k) == (G, 256, 128, M)


# The launches choose at trace time, and a trace of the same function and shapes is reused:
# each check below traces shapes no other test here traces.
@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_a_cached_grouped_config_is_what_calls_without_one_use(cache, transpose_rhs):
    m = 112
    x = jnp.ones((m, K), jnp.bfloat16)
    w = jnp.ones((G, N, K) if transpose_rhs else (G, K, N), jnp.bfloat16)
    problem = tune.Problem("grouped", "bfloat16", False, not transpose_rhs, G, m, N, K)
    winner = _other("grouped", grouped_heuristic_config("grouped", G, m, N, K))
    _store(problem, winner)
    assert _configs(lambda x, w: hopper_ragged_dot(x, w, SIZES, transpose_rhs=transpose_rhs),
                    x, w) == {winner}
    # Another expert count is another problem: the heuristic's.
    assert _configs(lambda x, w: hopper_ragged_dot(x, w[:2], SIZES[:2],
                                                   transpose_rhs=transpose_rhs), x, w) == \
        {grouped_heuristic_config("grouped", G - 1, m, N, K)}


def test_a_cached_contraction_config_is_what_the_weight_gradient_uses(cache):
    m = 104
    x, y = jnp.ones((m, K), jnp.bfloat16), jnp.ones((m, N), jnp.bfloat16)
    problem = tune.Problem("grouped_contraction", "bfloat16", True, True, G, K, N, m)
    winner = _other("grouped_contraction", grouped_heuristic_config(
        "grouped_contraction", G, K, N, m))
    _store(problem, winner)
    assert _configs(lambda x, y: hopper_ragged_contract(x, y, SIZES), x, y) == {winner}


@pytest.mark.parametrize("family", catalog.GROUPED_FAMILIES + catalog.CONTRACTION_FAMILIES)
def test_candidates_are_every_compiled_tile_and_cluster_whole(family):
    fam = catalog.FAMILIES[family]
    a_mn, b_mn = fam.majors[0]
    p = tune.Problem(family, fam.dtypes[0][0], a_mn, b_mn, G, 256, 256, 256)
    got = tune.candidates(p)
    assert not any(c.stream_k or c.swap_ab for c in got)
    assert {(c.tile, c.cluster_m, c.cluster_n) for c in got} == {
        (t, cm, cn) for t in fam.tiles for cm, cn in fam.clusters}
    heuristic = tuned.config_fields(grouped_heuristic_config(family, G, 256, 256, 256))
    assert heuristic in [tuned.config_fields(c) for c in got]


@pytest.mark.parametrize("family", catalog.GROUPED_FAMILIES + catalog.CONTRACTION_FAMILIES)
def test_the_tuner_times_every_grouped_candidate(cache, family):
    # The machinery on a CPU (reference timings): each candidate runs on the family's operands
    # (fp8 with unit scales of the recipe's shapes), and the best is a config of the family.
    fam = catalog.FAMILIES[family]
    a_mn, b_mn = fam.majors[-1]
    dtype, b_dtype = fam.dtypes[-1]
    p = tune.Problem(family, dtype, a_mn, b_mn, G, 160, 256 if family.endswith("glu") else 144,
                     200, None if b_dtype == dtype else b_dtype)
    r = tune.tune_problem(p, reps=1)
    assert not r["failed"], r["failed"]
    assert len(r["times"]) == len(tune.candidates(p))
    if len(r["times"]) == 1:  # the heuristic's config is the only compiled one: nothing to win
        assert r["best"] is None
    else:
        r["best"].validate(p.dtype, a_mn, b_mn, family=family, b_dtype=p.b_dtype)


def test_the_cli_tunes_a_grouped_problem(cache):
    # On a CPU the reference runs (--allow-reference): whether a winner is cached depends on
    # meaningless timings, so only the run and the cache's format are checked.
    assert tune.main(["--family", "grouped", "--groups", "3", "--shapes", "96x80x64",
                      "--reps", "1", "--allow-reference"]) == 0
    gpus = tuned._load(str(cache), cache.stat().st_mtime) if cache.exists() else {}
    for entries in gpus.values():
        assert set(entries) <= {tune.Problem("grouped", "bfloat16", False, True, 3, 96, 80,
                                             64).key}


@pytest.mark.parametrize("argv,message", [
    (["--family", "grouped"], "--groups G"),
    (["--family", "matmul", "--groups", "8"], "--groups G"),
    (["--family", "grouped", "--groups", "8", "--batch", "2"], "--groups G"),
    (["--family", "grouped_fp8", "--groups", "8", "--layout", "nn"], "--layout nt"),
    (["--family", "grouped_contraction", "--groups", "8", "--layout", "nn"], "--layout tn"),
    (["--family", "grouped_fp8_block", "--groups", "8", "--b-dtype", "float8_e5m2"],
     "dtype pairs"),
])
def test_the_cli_names_the_rule_for_grouped_problems(argv, message, capsys):
    with pytest.raises(SystemExit):
        tune.main(["--shapes", "256x256x256", *argv])
    assert message in capsys.readouterr().err


def test_uniform_routing_splits_every_row():
    p = tune.Problem("grouped", "bfloat16", False, True, 7, 1000, 64, 64)
    (a, sizes, _), _ = tune.tune_grouped.operands(p, jax.random.key(0))[0]
    assert int(np.sum(sizes)) == 1000 and sizes.shape == (7,) and a.shape == (1000, 64)


@pytest.mark.parametrize("problem,out_bytes", [
    # A contraction's output is (G, P, Q): G times its (P, Q) product (the plan's count before,
    # which ran the tuner out of memory on an H100 at 64 groups of 2048 x 1536).
    (tune.Problem("grouped_contraction", "bfloat16", True, True, 5, 96, 80, 300), 5 * 96 * 80 * 2),
    (tune.Problem("grouped", "bfloat16", False, True, 5, 300, 80, 64), 300 * 80 * 2),
])
def test_the_call_plan_counts_the_output_the_call_makes(problem, out_bytes, monkeypatch):
    planned = []
    real = tune.timing.call_plan

    def spy(*args, **kwargs):
        planned.append(kwargs["out_bytes"])
        return real(*args, **kwargs)
    monkeypatch.setattr(tune.timing, "call_plan", spy)
    tune.tune_grouped.operands(problem, jax.random.key(0))
    assert planned == [out_bytes]
    # Every call's output is kept until a timed run ends: 8 GB of them at most.
    assert tune.timing.calls_for(1e-6, out_bytes=403e6) * 403e6 <= 8e9


def test_an_unaligned_problem_is_keyed_as_its_kernel_runs_it(cache):
    # K = 60 bf16 elements is not whole 16-byte rows: the call pads K to 64, and the tuner, the
    # launch and problems_of all key the problem with 64.
    m = 120
    kernel = tune.tune_grouped.kernel_problem(
        tune.Problem("grouped", "bfloat16", False, True, G, m, N, 60))
    assert kernel == tune.Problem("grouped", "bfloat16", False, True, G, m, N, 64)
    winner = _other("grouped", grouped_heuristic_config("grouped", G, m, N, 64))
    _store(kernel, winner)
    x, w = jnp.ones((m, 60), jnp.bfloat16), jnp.ones((G, 60, N), jnp.bfloat16)

    def call(x, w):
        return hopper_ragged_dot(x, w, SIZES)
    assert _configs(call, x, w) == {winner}
    assert tune.problems_of(call, x, w) == [kernel]
