"""Autotuning without a GPU: the cache's format, lookup and robustness, how calls use it, which
problems a function runs, and when the tuner caches a winner (timings stubbed: on a CPU they
would time XLA's reference)."""

import dataclasses
import json
import warnings
from unittest import mock

import jax
import jax.numpy as jnp
import pytest
from gemm_helpers import launched_configs, use_tune_cache

import jax_hopper.tune as tune
from jax_hopper import (GemmConfig, hopper_fp8_matmul, hopper_glu, hopper_matmul,
                        kernels_available)
from jax_hopper.gemm import pitch, tuned
from jax_hopper.gemm.heuristics import choose_config, heuristic_config
from jax_hopper.kernels import catalog

PROBLEM = tune.Problem("matmul", "bfloat16", False, True, 1, 256, 512, 128)
PINGPONG = next(t for t in catalog.TILE_SHAPES if t.schedule == "pingpong")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "tune.json"
    use_tune_cache(monkeypatch, path)
    return path


def _entry(config: GemmConfig) -> dict:
    return {"config": tuned.config_fields(config), "us": 1.0, "heuristic_us": 2.0,
            "date": "2026-11-23"}


def _config_of_the_call(a, b, **kw):
    with launched_configs() as seen:
        hopper_matmul(a, b, **kw)
    (config,) = {config for *_, config in seen}  # eager: the bind and its jitted trace
    return config


def test_a_cached_config_is_what_calls_without_one_use(cache):
    tuned_config = GemmConfig.for_tile(PINGPONG, cluster_m=2)
    tuned.store(tuned.gpu_key(), {PROBLEM.key: _entry(tuned_config)})
    assert json.loads(cache.read_text())["format"] == tuned.FORMAT
    a, b = jnp.ones((256, 128), jnp.bfloat16), jnp.ones((128, 512), jnp.bfloat16)
    assert _config_of_the_call(a, b) == tuned_config
    # Another problem, or an explicit config, is untouched by the cache.
    assert _config_of_the_call(a, b[:, :256]) == heuristic_config("matmul", False, 1, 256, 256, 128)
    explicit = GemmConfig(cluster_m=2)
    assert _config_of_the_call(a, b, config=explicit) == explicit


def test_a_function_traced_before_tuning_uses_the_entry_stored_after(cache):
    # The documented flow: problems_of traces the step, tune stores, the step is jitted. A jit
    # traced before the store must not keep its heuristic config (store clears JAX's caches).
    a, b = jnp.ones((256, 128), jnp.bfloat16), jnp.ones((128, 512), jnp.bfloat16)
    step = jax.jit(lambda a, b: hopper_matmul(a, b) * 2)
    with launched_configs() as seen:
        step.lower(a, b)
    assert {c for *_, c in seen} == {heuristic_config("matmul", False, 1, 256, 512, 128)}
    assert tune.problems_of(step, a, b) == [PROBLEM]
    tuned_config = GemmConfig.for_tile(PINGPONG, cluster_m=2)
    tuned.store(tuned.gpu_key(), {PROBLEM.key: _entry(tuned_config)})
    with launched_configs() as seen:
        step.lower(a, b)
    assert {c for *_, c in seen} == {tuned_config}


def test_entries_of_another_gpu_are_not_used(cache):
    # Another GPU than this machine's, whichever it is (the key of an H200 is an H200's).
    other = "another " + tuned.gpu_key()
    tuned.store(other, {PROBLEM.key: _entry(GemmConfig.for_tile(PINGPONG))})
    assert tuned.lookup("matmul", "bfloat16", False, True, 1, 256, 512, 128) is None


def test_store_merges_with_what_is_there(cache):
    tuned.store("gpu a", {"p1": _entry(GemmConfig())})
    tuned.store("gpu a", {"p2": _entry(GemmConfig())})
    tuned.store("gpu b", {"p1": _entry(GemmConfig())})
    gpus = json.loads(cache.read_text())["gpus"]
    assert set(gpus["gpu a"]) == {"p1", "p2"} and set(gpus["gpu b"]) == {"p1"}


@pytest.mark.parametrize("content,message", [
    ("{not json", "could not be read"),
    (json.dumps({"format": 99, "gpus": {}}), "not a format-1"),
    (json.dumps([1, 2]), "not a format-1"),
])
def test_a_broken_or_foreign_cache_is_ignored_with_a_warning(cache, content, message):
    cache.parent.mkdir(parents=True)
    cache.write_text(content)
    with pytest.warns(UserWarning, match=message):
        got = tuned.default_config("matmul", "bfloat16", False, True, 1, 256, 512, 128)
    assert got == heuristic_config("matmul", False, 1, 256, 512, 128)
    tuned.store("gpu", {"p": _entry(GemmConfig())})  # and a store replaces it
    assert json.loads(cache.read_text())["format"] == tuned.FORMAT


def test_an_entry_that_is_no_longer_compiled_is_ignored_with_a_warning(cache):
    entry = _entry(GemmConfig())
    entry["config"]["block_n"] = 160
    tuned.store(tuned.gpu_key(), {PROBLEM.key: entry,
                                  "matmul bfloat16 kn 1x8x8x8": {"config": {"bogus": 1}}})
    with pytest.warns(UserWarning, match="not a compiled config"):
        assert tuned.lookup("matmul", "bfloat16", False, True, 1, 256, 512, 128) is None
    with pytest.warns(UserWarning, match="not a compiled config"):
        assert tuned.lookup("matmul", "bfloat16", False, True, 1, 8, 8, 8) is None


def test_a_gated_unit_at_decode_rows_is_tuned_as_its_product(cache):
    # 15 rows of hopper_glu run as the swap-AB product and the unit after it: problems_of
    # reports that matmul product, and a glu problem of so few rows is skipped, not cached.
    x, w = jnp.ones((15, 64), jnp.bfloat16), jnp.ones((64, 2, 24), jnp.bfloat16)
    with launched_configs() as seen:
        jax.jit(hopper_glu).lower(x, w)
    assert {c.swap_ab for *_, c in seen} == {True}
    assert tune.problems_of(hopper_glu, x, w) == [
        tune.Problem("matmul", "bfloat16", False, True, 1, 15, 48, 64)]
    lines = []
    glu = tune.Problem("glu", "bfloat16", False, True, 1, 15, 48, 64)
    with mock.patch.object(tune, "tune_problem") as timed:
        assert tune.tune([glu], allow_reference=True, log=lines.append) == {glu.key: None}
    assert not timed.called and not cache.exists() and "skipped" in lines[0]


def test_no_cache_file_is_quietly_the_heuristic(cache):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuned.default_config("glu", "float16", False, True, 2, 64, 256, 64) == \
            choose_config(64, 256, 64, 2, tiles=catalog.FAMILIES["glu"].tiles)


def test_problems_of_a_function_forward_and_backward():
    x = jnp.ones((4, 32, 64), jnp.bfloat16)
    w = jnp.ones((64, 96), jnp.bfloat16)
    wg = jnp.ones((64, 2, 40), jnp.bfloat16)

    def f(x, w, wg):
        return hopper_matmul(x, w).astype(jnp.float32).sum() + \
            hopper_glu(x, wg).astype(jnp.float32).sum()

    forward = tune.problems_of(f, x, w, wg)
    # The batch of x against the shared w (and the shared gated weight) is one product of
    # 4 x 32 rows.
    assert tune.Problem("matmul", "bfloat16", False, True, 1, 128, 96, 64) in forward
    assert tune.Problem("glu", "bfloat16", False, True, 1, 128, 80, 64) in forward
    backward = tune.problems_of(jax.grad(lambda w: f(x, w, wg)), w)
    # dW = x^T dY: K is the 4 x 32 rows, N the 96 columns.
    assert any(p.family == "matmul" and p.n == 96 and p.k == 128 and p.m == 64
               for p in backward), backward


def test_candidates_are_every_compiled_config_of_the_family():
    got = tune.candidates(PROBLEM)
    for c in got:
        c.validate("bfloat16", False, True)
    plain = [c for c in got if not c.swap_ab]
    assert {c.tile for c in plain} == set(catalog.TILE_SHAPES)
    assert {(c.cluster_m, c.cluster_n) for c in plain} == set(catalog.CLUSTER_SHAPES)
    assert not any(c.stream_k for c in got if c.schedule == "pingpong")
    # a stored (M, K): the swap-AB tiles too, the wide token tiles in every cluster shape; a
    # stored (K, M): not.
    swapped = [c for c in got if c.swap_ab]
    assert {c.tile for c in swapped} == set(
        catalog.SWAP_TILES + catalog.SWAP_WIDE_TILES + catalog.SWAP_MID_TILES)
    assert {(c.cluster_m, c.cluster_n) for c in swapped
            if c.tile in catalog.SWAP_WIDE_TILES + catalog.SWAP_MID_TILES} \
        == set(catalog.CLUSTER_SHAPES)
    assert not any(c.swap_ab for c in tune.candidates(
        tune.Problem("matmul", "bfloat16", True, True, 1, 64, 256, 64)))
    glu = tune.candidates(tune.Problem("glu", "bfloat16", False, True, 1, 64, 256, 64))
    assert {c.tile for c in glu} == set(catalog.FAMILIES["glu"].tiles)


@pytest.mark.extension  # the plans that tell one launch from another
def test_candidates_are_one_per_launch():
    """stream_k=True is a candidate beside stream_k=False only where its plan splits tiles:
    over 2 k-blocks nothing splits (one candidate per tile and cluster shape); at 8192^3 the
    last wave of 128 x 256 tiles does."""
    def pairs(p):
        seen = [(c.tile, c.cluster_m, c.cluster_n, c.swap_ab) for c in tune.candidates(p)]
        return {x for x in seen if seen.count(x) > 1}
    got = tune.candidates(PROBLEM)
    assert len({tune.launch_key(PROBLEM, c) for c in got}) == len(got)
    assert not pairs(PROBLEM)
    big = tune.Problem("matmul", "bfloat16", False, True, 1, 8192, 8192, 8192)
    wide = next(t for t in catalog.TILE_SHAPES if (t.block_m, t.block_n) == (128, 256))
    assert (wide, 1, 1, False) in pairs(big)
    split = GemmConfig.for_tile(wide, stream_k=True)
    assert tune.launch_key(big, split) != tune.launch_key(big, dataclasses.replace(
        split, stream_k=False))
    assert tune.launch_key(PROBLEM, split) == tune.launch_key(PROBLEM, dataclasses.replace(
        split, stream_k=False))


def test_decode_tiles_launching_one_odd_kernel_are_one_candidate():
    # A (K, N) weight with N odd: every decode tile of a token width (one or two CTAs to an SM,
    # the lean 64 x 16) launches that width's matmul_swap_odd tile, timed once (per stream_k,
    # where no planner tells the two apart).
    odd = tune.Problem("matmul", "bfloat16", False, True, 1, 8, 50257, 768)
    decode = [c for c in tune.candidates(odd) if c.swap_ab and c.tile in catalog.SWAP_TILES]
    assert len({(c.block_n, c.stream_k) for c in decode}) == len(decode)
    assert {c.block_n for c in decode} == {t.block_n for t in catalog.SWAP_TILES}
    aligned = tune.Problem("matmul", "bfloat16", False, True, 1, 8, 50264, 768)
    assert len([c for c in tune.candidates(aligned)
                if c.swap_ab and c.tile in catalog.SWAP_TILES]) > len(decode)


def test_every_odd_tile_is_a_candidate_past_the_decode_tiles():
    # At 200 rows a (K, N) weight with N odd: the unclustered swapped configs of each token
    # width launch that width's matmul_swap_odd tile (pitch.shifted_weight_tile), every odd
    # tile once (per stream_k, where no planner tells the two apart); clustered ones copy it.
    p = tune.Problem("matmul", "bfloat16", False, True, 1, 200, 50257, 768)
    weight = jax.ShapeDtypeStruct((1, 768, 50257), jnp.bfloat16)
    launched = [(pitch.shifted_weight_tile(weight, True, c, "matmul"), c.stream_k)
                for c in tune.candidates(p)]
    odd = [x for x in launched if x[0] is not None]
    assert len(set(odd)) == len(odd)
    assert {tile for tile, _ in odd} == set(catalog.SWAP_ODD_TILES)
    assert len(odd) < len(launched)  # the unswapped and clustered candidates copy the weight


@pytest.mark.parametrize("best_s,cached", [(0.90, True), (0.99, False), (1.10, False)])
def test_a_winner_is_cached_only_past_the_noise(cache, best_s, cached):
    winner = GemmConfig.for_tile(PINGPONG, cluster_n=2)
    timed = dict(times={}, clock="host", best=winner, best_s=best_s, heuristic_s=1.0)
    with mock.patch.object(tune, "tune_problem", return_value=timed):
        result = tune.tune([PROBLEM, PROBLEM], allow_reference=True, log=lambda *_: None)
    assert (result[PROBLEM.key] is not None) == cached
    if cached:
        assert tuned.lookup("matmul", "bfloat16", False, True, 1, 256, 512, 128) == winner
    else:
        assert not cache.exists()


def test_the_tuner_times_every_candidate(cache):
    # On a CPU it times XLA's reference (meaningless numbers); this checks the machinery: every
    # candidate compiles, runs and is timed, and the result is a valid config.
    for a_mn in (True, False):  # a stored (M, K) adds the swap-AB candidates
        p = tune.Problem("matmul", "bfloat16", a_mn, False, 2, 64, 128, 64)
        r = tune.tune_problem(p, reps=1)
        # The heuristic's launch is among the candidates' and timed once, as "heuristic".
        heuristic = tune.launch_key(p, heuristic_config("matmul", a_mn, 2, 64, 128, 64))
        assert heuristic in [tune.launch_key(p, c) for c in tune.candidates(p)]
        assert len(r["times"]) == len(tune.candidates(p))
        assert tune.launch_key(p, r["best"]) != heuristic
        r["best"].validate("bfloat16", a_mn, False)


def test_the_tuner_ranks_by_device_time_where_a_trace_has_it(cache):
    # A GPU's trace gives every candidate's device time (faked here: the reverse of the host's
    # order, the heuristic's config slowest, since the winner is never it); the tuner ranks by
    # it and says so. Without one (a CPU) the host clock ranks.
    # a stored (K, M): no swap-AB candidates, half the compiles on CI's two cores.
    p = tune.Problem("matmul", "bfloat16", True, False, 1, 64, 128, 64)
    with mock.patch.object(tune.timing, "device_times", return_value=None):
        on_cpu = tune.tune_problem(p, reps=1)
    assert on_cpu["clock"] == "host"

    def device_times(runs, rounds):
        order = sorted(runs, key=lambda label: (label != "heuristic", on_cpu["times"][label]))
        return {label: 1e-6 * (len(order) - i) for i, label in enumerate(order)}

    with mock.patch.object(tune.timing, "device_times", device_times):
        r = tune.tune_problem(p, reps=1)
    assert r["clock"] == "device" and set(r["times"]) == set(on_cpu["times"])
    slowest_on_host = max((label for label in on_cpu["times"] if label != "heuristic"),
                          key=on_cpu["times"].get)
    assert r["best"] == r["configs"][slowest_on_host] and r["best_s"] == 1e-6


def test_the_report_lists_every_candidate_fastest_first(cache, tmp_path):
    """--report: each problem's timed configs (the heuristic's marked), fastest first, and the
    failed ones by their fields; timings stubbed (on a CPU they would time XLA's reference)."""
    configs = {"heuristic": heuristic_config("matmul", False, 1, 256, 512, 128),
               "c0": GemmConfig.for_tile(PINGPONG), "c1": GemmConfig(cluster_m=2),
               "c2": GemmConfig(block_n=128, stages=6)}
    timed = dict(times={"heuristic": 3e-6, "c0": 2e-6, "c1": 4e-6}, clock="device",
                 best=configs["c0"], best_s=2e-6, heuristic_s=3e-6,
                 failed={"c2": ValueError("differs")},
                 configs=configs)
    path = tmp_path / "report.json"
    seen = []

    def tune_problem(p, reps, only=None):
        if only is not None:  # the confirmation round: c0 against the heuristic alone
            assert only == configs["c0"]
            return dict(timed, times={"heuristic": 3.1e-6, "c0": 2.2e-6}, best_s=2.2e-6,
                        heuristic_s=3.1e-6)
        if seen:  # the second problem: the first is already in the report
            assert list(json.loads(path.read_text())["problems"]) == [PROBLEM.key]
        seen.append(p)
        return dict(timed)
    other = tune.Problem("matmul", "bfloat16", False, True, 1, 512, 512, 128)
    with mock.patch.object(tune, "tune_problem", tune_problem):
        tune.tune([PROBLEM, other], allow_reference=True, log=lambda *_: None,
                  report=str(path))
    assert len(seen) == 2
    got = json.loads(path.read_text())
    assert list(got["problems"]) == [PROBLEM.key, other.key]
    assert got["gpu"] == tuned.gpu_key()
    entry = got["problems"][PROBLEM.key]
    assert [c["us"] for c in entry["candidates"]] == pytest.approx([2.0, 3.0, 4.0])
    assert [c["config"] for c in entry["candidates"]] == [
        tuned.config_fields(configs[label]) for label in ("c0", "heuristic", "c1")]
    assert [c["heuristic"] for c in entry["candidates"]] == [False, True, False]
    assert entry["heuristic_us"] == pytest.approx(3.0)
    assert entry["heuristic_rule"] == tune.heuristic_choice_for(PROBLEM).rule
    assert list(entry["failed"].values()) == ["ValueError: differs"]
    assert str(tuned.config_fields(configs["c2"])) in entry["failed"]
    assert entry["confirmed"] == {"best_us": pytest.approx(2.2), "heuristic_us": pytest.approx(3.1),
                                  "cached": True}


@pytest.mark.parametrize("alone,cached", [((0.90, 1.0), True), ((0.99, 1.0), False),
                                          ((None, 1.0), False)])
def test_a_winner_must_win_again_timed_alone(cache, alone, cached):
    """The fastest of many noisy medians wins partly by luck: before it is cached, it and the
    heuristic's config are timed again alone (CONFIRM_REPS times the reps), and it must beat
    the heuristic there too; the entry keeps those times."""
    winner = GemmConfig.for_tile(PINGPONG, cluster_n=2)
    calls = []

    def tune_problem(p, reps, only=None):
        calls.append((reps, only))
        if only is None:
            return dict(times={}, clock="host", best=winner, best_s=0.8, heuristic_s=1.0,
                        failed={})
        best_s, heuristic_s = alone
        return dict(times={}, clock="host", best=winner if best_s else None, best_s=best_s,
                    heuristic_s=heuristic_s, failed={})
    with mock.patch.object(tune, "tune_problem", tune_problem):
        result = tune.tune([PROBLEM], reps=4, allow_reference=True, log=lambda *_: None)
    assert calls == [(4, None), (tune.CONFIRM_REPS * 4, winner)]
    assert (result[PROBLEM.key] is not None) == cached
    if cached:
        assert result[PROBLEM.key]["us"] == pytest.approx(0.9e6)
        assert result[PROBLEM.key]["heuristic_us"] == pytest.approx(1e6)
        assert tuned.lookup("matmul", "bfloat16", False, True, 1, 256, 512, 128) == winner
    else:
        assert not cache.exists()


def test_the_confirmation_round_runs_on_the_kernels_path(cache):
    """tune_problem(only=config): the heuristic's config and that one alone, timed (here on
    XLA's reference: the machinery, not the numbers)."""
    p = tune.Problem("matmul", "bfloat16", False, False, 1, 64, 128, 64)
    other = GemmConfig.for_tile(PINGPONG)
    r = tune.tune_problem(p, reps=1, only=other)
    assert set(r["times"]) == {"heuristic", "c0"} and r["best"] == other


def test_a_candidate_with_a_different_result_is_never_the_winner(cache):
    """However fast, a config whose product differs from the heuristic config's is reported
    failed and not chosen (here: the fastest candidate made to scale its result; a stored
    (K, M), so no swap-AB candidates: half the compiles)."""
    p = tune.Problem("matmul", "bfloat16", True, False, 1, 64, 128, 64)
    first = tune.tune_problem(p, reps=1)
    bad = first["best"]
    real_call = tune._call

    def call(problem, config):
        f = real_call(problem, config)
        return (lambda a, b: 1.1 * f(a, b)) if config == bad else f
    with mock.patch.object(tune, "_call", call):
        r = tune.tune_problem(p, reps=1)
    label = next(label for label, e in r["failed"].items() if "differs" in str(e))
    assert "by 1.0" in str(r["failed"][label]) and "e-01" in str(r["failed"][label])  # ~0.1
    assert label not in r["times"]
    assert r["best"] is not None and r["best"] != bad
    assert len(r["times"]) == len(tune.candidates(p)) - 1


@pytest.mark.skipif(bool(kernels_available()), reason="this machine has the kernels; the "
                    "refusal is for machines without them")
def test_the_cli_refuses_without_the_kernels(cache, capsys):
    assert tune.main(["--shapes", "64x64x64"]) == 2
    assert "needs the kernels" in capsys.readouterr().err
    assert not cache.exists()


class _FakeGpu:
    """A device as jax reports an H100 PCIe: 114 SMs."""
    platform, device_kind, core_count = "gpu", "NVIDIA H100 PCIe", 114


def test_the_heuristic_weighs_tiles_against_this_gpus_sms(cache):
    # 1 x 16000 x 4096 has 125 weight tiles of 128 columns: past one wave of 114 SMs (two CTAs
    # to an SM) but not of 132; 384 x 5120 x 8192's 120 tiles of 128 x 128 fill more than half
    # of 132 SMs in one wave (ping-pong), more than a wave of 114.
    shapes = [("matmul", 1, 16000, 4096), ("matmul", 384, 5120, 8192)]
    with mock.patch.object(tuned.jax, "devices", return_value=[_FakeGpu()]):
        assert tuned.device_sms() == 114 and tuned.gpu_key() == "NVIDIA H100 PCIe, 114 SMs"
        got = [tuned.default_config(f, "bfloat16", False, True, 1, m, n, k)
               for f, m, n, k in shapes]
    for config, (family, m, n, k) in zip(got, shapes):
        assert config == heuristic_config(family, False, 1, m, n, k, num_sms=114)
        assert config != heuristic_config(family, False, 1, m, n, k, num_sms=132)
    assert got[0].ctas_per_sm == 2 and got[1].schedule == "cooperative"
    assert tuned.device_sms() == catalog.DEFAULT_NUM_SMS  # a CPU reports no SMs


def test_a_vmapped_call_gets_the_config_of_its_whole_batch():
    # One row per entry is a decode product (swap-AB); vmapped over 256 entries against one
    # weight it is one product of 256 rows, and the config is chosen for that (unswapped: the
    # weight's column tiles keep every SM busy: heuristics.swap_for_narrow_weight).
    x = jnp.ones((256, 1, 64), jnp.bfloat16)
    w = jnp.ones((64, 16384), jnp.bfloat16)
    with launched_configs() as seen:
        jax.jit(jax.vmap(lambda x: hopper_matmul(x, w))).lower(x)
    # (custom_vmap also traces the unmapped call: one row, launched nowhere)
    (config,) = {config for a_shape, _, config in seen if a_shape == (1, 256, 64)}
    assert config == heuristic_config("matmul", False, 1, 256, 16384, 64) and not config.swap_ab


@pytest.mark.parametrize("gpus", [[1, 2], "x", {"p": "not an entry"}, {"p": {"config": 3}}])
def test_a_malformed_gpu_section_or_entry_is_ignored(cache, gpus):
    cache.parent.mkdir(parents=True)
    section = {PROBLEM.key: gpus["p"]} if isinstance(gpus, dict) else gpus
    cache.write_text(json.dumps({"format": tuned.FORMAT, "gpus": {tuned.gpu_key(): section}}))
    with pytest.warns(UserWarning, match="not a mapping|not a compiled config"):
        got = tuned.default_config("matmul", "bfloat16", False, True, 1, 256, 512, 128)
    assert got == heuristic_config("matmul", False, 1, 256, 512, 128)
    # ...warned once per version of the file, not once per trace
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuned.default_config("matmul", "bfloat16", False, True, 1, 256, 512, 128)
    winner = GemmConfig.for_tile(PINGPONG)
    tuned.store(tuned.gpu_key(), {PROBLEM.key: _entry(winner)})  # a store replaces it
    assert tuned.lookup("matmul", "bfloat16", False, True, 1, 256, 512, 128) == winner


def test_a_problem_whose_candidates_all_fail_keeps_the_heuristic(cache):
    timed = dict(times={}, clock="host", best=None, best_s=None, heuristic_s=None,
                 failed={"c0": RuntimeError("boom")})
    lines = []
    with mock.patch.object(tune, "tune_problem", return_value=timed):
        result = tune.tune([PROBLEM], allow_reference=True, log=lines.append)
    assert result == {PROBLEM.key: None} and not cache.exists()
    assert any("c0 failed (RuntimeError: boom)" in line for line in lines), lines
    assert any("no candidate ran" in line for line in lines), lines


FP8_PROBLEM = tune.Problem("fp8", "float8_e4m3fn", False, False, 1, 32, 256, 128,
                           "float8_e5m2")


def test_fp8_problems_are_found_cached_and_used(cache):
    x = jnp.ones((32, 128), jnp.float8_e4m3fn)
    w = jnp.ones((256, 128), jnp.float8_e5m2)
    sa, sb = jnp.ones((32, 1)), jnp.ones((2, 1))

    def per_tensor(x, w):
        return hopper_fp8_matmul(x, w, 1.0, 1.0)

    def per_block(x, w):
        return hopper_fp8_matmul(x, w.astype(jnp.float8_e4m3fn), sa, sb)

    found = tune.problems_of(lambda x, w: per_tensor(x, w) + per_block(x, w), x, w)
    assert FP8_PROBLEM in found
    assert tune.Problem("fp8_block", "float8_e4m3fn", False, False, 1, 32, 256, 128) in found
    assert "float8_e4m3fn*float8_e5m2" in FP8_PROBLEM.key
    winner = GemmConfig.for_tile(next(t for t in catalog.FAMILIES["fp8"].tiles
                                      if t.schedule == "pingpong"))
    tuned.store(tuned.gpu_key(), {FP8_PROBLEM.key: _entry(winner)})
    configs = []
    for f in (per_tensor, per_block):
        with launched_configs() as seen:
            jax.jit(f).lower(x, w)
        configs.append({c for *_, c in seen})
    # The entry is the e4m3 x e5m2 pair's: the block-scaled e4m3 x e4m3 call keeps the
    # heuristic's config (as would an e4m3 x e4m3 call per tensor).
    assert configs == [{winner}, {heuristic_config("fp8_block", False, 1, 32, 256, 128)}]
    assert tuned.lookup("fp8", "float8_e4m3fn", False, False, 1, 32, 256, 128) is None


def test_the_tuner_times_every_fp8_candidate(cache):
    # The machinery on a CPU (reference timings): every fp8 candidate, swap-AB ones included,
    # runs on unit-scaled operands of the family's shapes, per tensor and per block.
    for p in (FP8_PROBLEM, tune.Problem("fp8_block", "float8_e4m3fn", False, False, 2, 32,
                                        160, 200)):
        r = tune.tune_problem(p, reps=1)
        assert not r["failed"], r["failed"]
        assert len(r["times"]) == len(tune.candidates(p))
        r["best"].validate(p.dtype, False, False, family=p.family, b_dtype=p.b_dtype)
    assert any(c.swap_ab for c in tune.candidates(FP8_PROBLEM))


@pytest.mark.parametrize("argv,message", [
    (["--family", "fp8", "--layout", "nn"], "--layout nt"),
    (["--family", "fp8_block", "--b-dtype", "float8_e5m2"], "dtype pairs"),
    (["--family", "glu", "--dtype", "float8_e4m3fn"], "takes --dtype"),
])
def test_the_cli_names_the_rule_for_a_bad_family_layout_or_dtype(argv, message, capsys):
    with pytest.raises(SystemExit):
        tune.main(["--shapes", "64x64x64", *argv])
    assert message in capsys.readouterr().err


def test_recording_collects_the_problems_launches_look_up():
    x, w = jnp.ones((8, 32), jnp.bfloat16), jnp.ones((32, 16), jnp.bfloat16)
    with jax.default_device(jax.devices("cpu")[0]):
        with tuned.recording() as seen:
            jax.jit(hopper_matmul).lower(x, w)
            jax.jit(lambda x, w: hopper_matmul(x, w, config=GemmConfig())).lower(x, w)
        jax.jit(hopper_matmul).lower(x[:4], w)  # outside: not recorded
    # The call with a config of its own looks nothing up.
    assert seen == [("matmul", "bfloat16", False, True, 1, 8, 16, 32, None)]
