"""CPU smoke tests of the GEMM benchmark: timing helpers on plain jnp functions, the CLI end to
end on one tiny shape, and the pass/fail bookkeeping with a stand-in for jax_hopper."""

import argparse
import datetime
import json
import os
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "benchmarks")
sys.path.insert(0, BENCH_DIR)
import bench_gemm  # noqa: E402
import timing  # noqa: E402
from jax_hopper import timing as jax_hopper_timing  # noqa: E402  (what benchmarks/timing wraps)


def test_device_name_follows_the_results_naming_scheme():
    dev = lambda kind, platform="gpu": types.SimpleNamespace(device_kind=kind,  # noqa: E731
                                                             platform=platform)
    assert timing.device_name([dev("NVIDIA H100 80GB HBM3")]) == "h100"
    assert timing.device_name([dev("NVIDIA H200")]) == "h200"
    assert timing.device_name([dev("NVIDIA H200")] * 2) == "h200x2"
    assert timing.device_name([dev("NVIDIA GH200 480GB")]) == "gh200480gb"  # no bare model
    assert timing.device_name([dev("cpu", "cpu")]) == "cpu"


def test_tag_names_the_machine_that_ran():
    parser = argparse.ArgumentParser()
    timing.add_output_args(parser)
    today, here = datetime.date.today().strftime("%Y%m%d"), timing.device_name(jax.devices())
    assert parser.parse_args([]).tag == f"{here}_{today}"
    assert parser.parse_args(["--tag", "{gpu}_20261207_x"]).tag == f"{here}_20261207_x"
    assert parser.parse_args(["--tag", "h100_20261207_x"]).tag == "h100_20261207_x"


def test_n_sets_exceeds_the_byte_floor():
    assert timing.n_sets_for(300e6) == 2  # never fewer than two
    assert timing.n_sets_for(100e6) == 3  # 300 MB > 200 MB; two sets would only equal it
    assert timing.n_sets_for(34e6) * 34e6 > 200e6


@pytest.fixture(scope="module")
def sets():
    return timing.rotating_sets(jax.random.key(1), 64, 48, 32, 3)


def test_rotating_sets_are_random_bf16_and_distinct(sets):
    assert len(sets) == 3
    for a, b in sets:
        assert a.shape == (64, 32) and b.shape == (32, 48)
        assert a.dtype == b.dtype == jnp.bfloat16
        assert 0.5 < float(jnp.std(a.astype(jnp.float32))) < 1.5
    assert not np.array_equal(np.asarray(sets[0][0]), np.asarray(sets[1][0]))


def test_rotation_cycles_and_ends_with_set_0():
    assert timing.rotation(["s0", "s1", "s2"], 5) == ["s2", "s0", "s1", "s2", "s0"]


def test_chained_keeps_every_call(sets):
    """Repeats of one set must not be merged by XLA: the compiled flop count grows with calls."""
    run = timing.chained(jnp.dot)

    def flops(n_calls):
        cost = run.lower(timing.rotation(sets, n_calls)).compile().cost_analysis()
        return (cost[0] if isinstance(cost, list) else cost)["flops"]

    assert flops(6) == pytest.approx(6 * flops(1), rel=0.01)
    assert flops(1) >= 2 * 64 * 48 * 32


def test_time_chained_returns_set_0_product_and_positive_times(sets):
    pairs = timing.rotation(sets, 4)
    r = timing.time_chained(timing.chained(jnp.dot), pairs, reps=7)
    assert len(r["times_s"]) == 7 and r["median_s"] > 0 and r["compile_s"] > 0
    np.testing.assert_array_equal(np.asarray(r["out"]), np.asarray(jnp.dot(*sets[0])))


def test_run_spans_splits_runs_at_the_pause_and_lets_kernels_overlap():
    gap = timing.RUN_GAP_NS
    # run 1: two calls of two kernels, the second of each pair starting before the first ends;
    # run 2 after a pause: one call
    events = [(0, 100, "gemm"), (90, 20, "reduce"), (110, 100, "gemm"), (200, 30, "reduce"),
              (230 + 2 * gap, 50, "gemm"), (285 + 2 * gap, 10, "reduce")]
    spans, kernels = timing.run_spans(events)
    assert spans == [230, 65]
    assert kernels == {"gemm": [0.1, 0.1, 0.05], "reduce": [0.02, 0.03, 0.01]}
    # a kernel ending after the next one's start: the span is the latest end
    assert timing.run_spans([(0, 500, "a"), (10, 20, "b")])[0] == [500]


def test_run_spans_cuts_a_known_count_of_runs_at_the_widest_gaps():
    gap = timing.RUN_GAP_NS
    # two runs a pause apart, the first stalled inside for more than RUN_GAP_NS
    events = [(0, 10, "k"), (10 + 2 * gap, 10, "k"), (20 + 12 * gap, 10, "k"),
              (30 + 12 * gap, 10, "k")]
    assert timing.run_spans(events)[0] == [10, 10, 20]
    assert timing.run_spans(events, 2)[0] == [20 + 2 * gap, 20]
    # a count beyond the gaps over RUN_GAP_NS: fewer spans, never a cut inside a call's kernels
    assert timing.run_spans(events[2:], 3)[0] == [20]


def test_device_times_tells_the_runs_apart_in_their_trace_order(sets, monkeypatch):
    # A fake trace: each run's kernels, in the order device_times ran them, one call's kernel
    # per pair lasting a per-run length, runs a pause apart.
    pairs = timing.rotation(sets, 2)
    runs = {"a": (None, pairs), "b": (None, pairs[:1])}
    lengths = {id(runs["a"]): 300, id(runs["b"]): 500}

    def gpu_kernels(order):
        events, t = [], 0
        for run in order:
            for _ in run[1]:
                events.append((t, lengths[id(run)], "k"))
                t += lengths[id(run)]
            t += 2 * timing.RUN_GAP_NS
        return events

    monkeypatch.setattr(jax_hopper_timing, "_gpu_kernels", gpu_kernels)
    got = timing.device_times(runs, rounds=3)
    assert got == {"a": 300e-9, "b": 500e-9}  # per call: a run's span over its calls
    # a trace whose runs cannot be told apart gives nothing
    monkeypatch.setattr(jax_hopper_timing, "_gpu_kernels", lambda order: [(0, 10, "k")])
    assert timing.device_times(runs, rounds=3) is None


def test_device_time_comes_from_the_gpu_s_kernels_only(sets):
    # A CPU backend's trace has no GPU plane: nothing to report, and no error. On a GPU (the
    # GPU suite runs this file too) each run's kernels give a positive time per call.
    pairs = timing.rotation(sets, 3)
    run = timing.chained(jnp.dot)
    jax.block_until_ready(run(pairs))
    one = timing.device_time(run, pairs, reps=2)
    both = timing.device_times({"dot": (run, pairs), "again": (run, pairs)}, rounds=2)
    if jax.default_backend() != "gpu":
        assert one is None and both is None
    else:
        assert one["runs"] == 2 and one["median_s"] > 0 and one["kernels_us"]
        assert set(both) == {"dot", "again"} and all(t > 0 for t in both.values())


def test_device_time_is_none_under_another_trace(sets, tmp_path):
    # jax runs one profiler trace at a time: a caller's own trace leaves no room for ours.
    pairs = timing.rotation(sets, 2)
    run = timing.chained(jnp.dot)
    jax.block_until_ready(run(pairs))
    jax.profiler.start_trace(str(tmp_path))
    try:
        assert timing.device_time(run, pairs, reps=1) is None
    finally:
        jax.profiler.stop_trace()


def test_rel_fro_error():
    x = jnp.arange(1.0, 7.0).reshape(2, 3)
    assert float(timing.rel_fro_error(x, x)) == 0.0
    assert float(timing.rel_fro_error(2 * x, x)) == pytest.approx(1.0)
    assert np.isnan(float(timing.rel_fro_error(x.at[0, 0].set(jnp.nan), x)))


def test_tflops_and_geomean():
    assert timing.tflops(1000, 1000, 1000, 1e-6) == pytest.approx(2000.0)
    assert timing.geomean([0.5, 2.0]) == pytest.approx(1.0)


def test_calls_for_bounds():
    assert timing.calls_for(1e-3, out_bytes=1) == 30
    assert timing.calls_for(1.0, out_bytes=1) == 10
    assert timing.calls_for(1e-9, out_bytes=1) == 100
    assert timing.calls_for(1e-3, out_bytes=int(2e9)) == 4  # 8 GB of outputs at most


def test_transformer_shapes_cover_forward_and_backward():
    shapes = bench_gemm.transformer_shapes("8192,4096,14336")
    assert shapes[:4] == [(8192, 12288, 4096), (8192, 4096, 4096), (8192, 28672, 4096),
                          (8192, 4096, 14336)]
    assert (8192, 14336, 4096) in shapes and (14336, 4096, 8192) in shapes  # dX, dW of down
    # The output projection's dX has its forward shape (d x d weight): listed once.
    assert len(shapes) == len(set(shapes)) == 11
    with pytest.raises(argparse.ArgumentTypeError, match="TOKENS,D_MODEL,D_FF"):
        bench_gemm.transformer_shapes("8192x4096")


def test_call_plan_never_has_more_sets_than_calls():
    calls, sets = timing.call_plan(256, 256, 256, calls=5, min_set_bytes=1e9)
    assert (calls, sets) == (5, 5)
    calls, sets = timing.call_plan(4096, 4096, 4096, calls=40)
    assert calls == 40 and sets == timing.n_sets_for(2 * (4096 * 4096 * 2), 200e6)


@pytest.mark.parametrize("env,warned", [
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, True),
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "False"}, True),
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "0.95"}, False),
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"}, False),
    ({}, False),
])
def test_pool_limit_warning(env, warned):
    """Preallocation off with no memory fraction caps JAX's pool at 75% of the device: the
    benchmarks say so, since an out-of-memory row would then understate the device."""
    warning = timing.pool_limit_warning(env)
    assert (warning is not None) == warned
    if warned:
        assert "75%" in warning and "XLA_CLIENT_MEM_FRACTION" in warning


def test_parse_shape():
    assert bench_gemm.parse_shape("4000x3000x2056") == (4000, 3000, 2056)
    assert bench_gemm.parse_shape("256") == (256, 256, 256)


def test_large_shape_summary():
    shapes = bench_gemm.LARGE_SHAPES[:2] + [(256, 4096, 4096)]  # the last is not "large"
    rows = [dict(shape=list(s), hopper_over_xla=r, best_hopper_over_xla=None)
            for s, r in zip(shapes, (0.5, 2.0, 9.0), strict=True)]
    s = bench_gemm.large_shape_summary(rows)["hopper_over_xla"]
    assert s["geomean"] == pytest.approx(1.0) and s["min"] == 0.5 and s["n_shapes"] == 2
    assert s["min_shape"] == "4096x4096x4096"


def test_random_shapes_are_reproducible_and_span_the_m_classes():
    shapes = timing.random_shapes(52, 27)
    assert shapes == timing.random_shapes(52, 27) != timing.random_shapes(52, 28)
    assert shapes[:2] == [(62, 6144, 7168), (26, 1536, 1536)]  # the 2026-11-27 sweep's
    counts = [sum(lo <= m <= hi for m, _, _ in shapes)
              for _, lo, hi, _ in timing.RANDOM_M_CLASSES]
    assert counts == [14, 12, 16, 10]
    dims = set(timing.RANDOM_DIMS) | set(timing.RANDOM_ODD_DIMS) | {4096}
    assert all(n in dims and k in dims for _, n, k in shapes)
    off_line = sum(n % 64 != 0 or k % 64 != 0 for _, n, k in shapes)
    assert 0.3 * len(shapes) <= off_line <= 0.6 * len(shapes)
    assert len(timing.random_shapes(8, 1)) == 8


def test_class_summary_groups_by_m():
    rows = [dict(shape=[m, 64, 64], hopper_over_xla=r)
            for m, r in ((1, 0.5), (64, 2.0), (100, 0.9), (5000, None))]
    s = timing.class_summary(rows, lambda r: r["hopper_over_xla"])
    assert s["M 1-64"]["geomean"] == pytest.approx(1.0) and s["M 1-64"]["n_shapes"] == 2
    assert s["M 65-256"] == dict(geomean=pytest.approx(0.9), min=0.9, max=0.9, n_shapes=1)
    assert "M 2049-8192" not in s and "M 257-2048" not in s


def test_fp8_ratio_is_the_default_over_the_best_peer_and_none_when_unusable():
    import bench_fp8  # noqa: PLC0415 (imports jax_hopper)

    def row(hopper, peer="xla_fp8_dot"):
        return dict(shape=[8, 64, 64], peer_best=peer,
                    variants={"hopper": hopper, "xla_fp8_dot": dict(us=30.0)})

    assert bench_fp8.hopper_over_peer(row(dict(us=20.0))) == pytest.approx(1.5)
    assert bench_fp8.hopper_over_peer(row(dict(us=20.0, wrong=True))) is None
    assert bench_fp8.hopper_over_peer(row(dict(error="x"))) is None
    assert bench_fp8.hopper_over_peer(row(dict(us=20.0), peer=None)) is None


def test_fp8_device_ratio_takes_the_best_peer_by_device_time():
    """--device-time: the default over the peer fastest on the device, which may be another
    than the fastest chained; None where the trace gave no device time (a CPU)."""
    import bench_fp8  # noqa: PLC0415 (imports jax_hopper)

    r = dict(shape=[8, 64, 64], peer_best="xla_fp8_dot", peer_best_device="xla_fp8_dequant",
             variants={"hopper": dict(us=20.0, device_us=6.0),
                       "xla_fp8_dot": dict(us=30.0, device_us=9.0),
                       "xla_fp8_dequant": dict(us=31.0, device_us=7.5)})
    assert bench_fp8.hopper_over_peer(r) == pytest.approx(1.5)
    assert bench_fp8.hopper_over_peer_device(r) == pytest.approx(1.25)
    del r["variants"]["hopper"]["device_us"]
    assert bench_fp8.hopper_over_peer_device(r) is None
    assert bench_fp8.hopper_over_peer_device(dict(r, peer_best_device=None)) is None


def test_fp8_json_is_written_per_shape_and_wrong_results_are_named(tmp_path, capsys):
    import bench_fp8  # noqa: PLC0415

    row = dict(shape=[8, 64, 64], peer_best=None,
               variants={"hopper": dict(us=1.0, wrong=True), "xla_fp8_dot": dict(us=2.0)})
    assert bench_fp8.wrong_variants(row) == [([8, 64, 64], "hopper")]
    assert "WRONG RESULT: hopper at [8, 64, 64]" in capsys.readouterr().out
    path = tmp_path / "fp8_t.json"
    timing.write_run_json(str(path), complete=False, environment={"device": "x"}, results=[row])
    data = json.loads(path.read_text())
    assert data["complete"] is False and data["results"] == [row]
    timing.write_run_json(str(path), complete=True, environment={"device": "x"},
                          results=[row, row], m_class_summary={"M 1-64": {}})
    data = json.loads(path.read_text())
    assert data["complete"] is True and len(data["results"]) == 2 and data["m_class_summary"]


def test_cli_quick_on_cpu(tmp_path):
    """The documented CPU invocation runs, and writes the JSON and the PNG."""
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH_DIR, "bench_gemm.py"), "--quick", "--shapes",
         "256x256x256", "--device-time", "--out-dir", str(tmp_path), "--tag", "t"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "gemm_t.json").read_text())
    (row,) = data["shapes"]
    assert row["shape"] == [256, 256, 256]
    assert row["variants"]["xla"]["tflops"] > 0
    assert row["variants"]["xla"]["rel_err"] < 1e-2
    # --device-time: a CPU's trace has no GPU kernels, so no device time and no device ratio
    assert "device_us" not in row["variants"]["xla"] and row["hopper_over_xla_device"] is None
    assert "error" in row["variants"]["mgpu_128x128x64_s4_wgN"]  # no Mosaic GPU on a CPU
    assert data["environment"]["jax"] == jax.__version__ and data["complete"] is True
    assert (tmp_path / "gemm_t.png").stat().st_size > 0


def test_epilogue_follows_every_variant(tmp_path, monkeypatch):
    """--bias --activation: the hopper variants get the bias and activation as arguments (the
    fused kernel's), XLA applies them in jnp, and both agree with act(y + bias) of the float32
    product; without the epilogue XLA's plain product would be far from that reference."""
    import jax_hopper
    seen = []
    real = jax_hopper.hopper_matmul

    def recorded(a, b, **kwargs):
        seen.append(kwargs)
        return real(a, b, **kwargs)
    monkeypatch.setattr(jax_hopper, "hopper_matmul", recorded)
    rc = bench_gemm.main(["--shapes", "128x96x64", "--impls", "xla,hopper", "--reps", "2",
                          "--bias", "--activation", "gelu_tanh", "--out-dir", str(tmp_path),
                          "--tag", "e"])
    assert rc == 0
    data = json.loads((tmp_path / "gemm_e.json").read_text())
    assert data["epilogue"] == {"bias": True, "activation": "gelu_tanh"}
    (row,) = data["shapes"]
    for name in ("xla", "hopper"):
        assert row["variants"][name]["rel_err"] < 1e-2, name
    assert seen and all(kw["activation"] == "gelu_tanh" and kw["bias"].shape == (96,)
                        for kw in seen)


def test_no_epilogue_leaves_the_variants_as_they_are():
    """Without --bias or --activation nothing follows the product, and the variants stay as
    they are."""
    epilogue = bench_gemm.Epilogue()
    assert not epilogue
    variants = {"xla": jnp.dot}
    assert epilogue.wrap(variants, {"xla": "xla"}, {}) is variants
    y = jnp.arange(6.0).reshape(2, 3) - 2
    operands = bench_gemm.Epilogue(activation="relu").operands(jax.random.key(0), 3)
    assert operands["bias"] is None
    np.testing.assert_array_equal(bench_gemm.Epilogue(activation="relu").apply(y, operands),
                                  jnp.maximum(y, 0))


def test_unknown_activation_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="activation='swish' must be one of .*'gelu_tanh'"):
        bench_gemm.main(["--shapes", "64x64x64", "--impls", "xla", "--activation", "swish",
                         "--out-dir", str(tmp_path)])


def _fake_jax_hopper():
    """A stand-in for jax_hopper: GemmConfig(scale=...) multiplies the product by scale, and the
    default config is wrong (x2) when M == 64."""
    class GemmConfig:
        def __init__(self, scale=1.0):
            self.scale = scale

    def hopper_matmul(a, b, config=None):
        scale = config.scale if config else 2.0 if a.shape[0] == 64 else 1.0
        return (jnp.dot(a, b) * scale).astype(a.dtype)

    # (On a GPU machine the bench asks whether the kernels run; the stand-in says they do.)
    ffi = types.SimpleNamespace(kernels_available=lambda: True)
    return types.SimpleNamespace(GemmConfig=GemmConfig, hopper_matmul=hopper_matmul, _ffi=ffi)


def test_pass_fail_bookkeeping(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax_hopper", _fake_jax_hopper())
    rc = bench_gemm.main(["--shapes", "128x64x32", "64x64x32", "--impls", "hopper",
                          "--reps", "3", "--out-dir", str(tmp_path), "--tag", "f",
                          "--hopper-configs", '[{"scale": 1.0}, {"scale": 3.0}, {"bogus": 1}]'])
    ok, fail = json.loads((tmp_path / "gemm_f.json").read_text())["shapes"]
    for row in ok, fail:
        v = row["variants"]
        assert v["hopper:scale=3.0"]["wrong"]  # never the best, however fast
        assert "unexpected keyword" in v["hopper:bogus=1"]["error"]
    assert ok["status"] == "ok" and ok["best_hopper"] in ("hopper", "hopper:scale=1.0")
    assert fail["status"] == "FAIL" and fail["best_hopper"] == "hopper:scale=1.0"
    assert rc == 1


def test_time_interleaved_shuffles_order_and_reports_failures(sets):
    calls = []

    def tagged(name, fail_on=None):
        run = timing.chained(jnp.dot)

        def f(pairs):
            calls.append(name)
            if len(calls) == fail_on:
                raise RuntimeError(f"{name} broke")
            return run(pairs)
        return f

    pairs = timing.rotation(sets, 3)
    runs = {"a": (tagged("a"), pairs), "b": (tagged("b"), pairs), "c": (tagged("c"), pairs)}
    r = timing.time_interleaved(runs, reps=12, warmup=2, pipeline=1)
    # Two warm-up runs each, then rounds of each variant once, in a new order each round.
    assert calls[:6] == ["a", "a", "b", "b", "c", "c"]
    timed = calls[6:]
    rounds = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    assert len(rounds) == 12 and all(sorted(order) == list("abc") for order in rounds)
    # No variant always follows the same one (a fixed predecessor biases it alike every round).
    for name in "abc":
        after = {timed[i - 1] for i in range(1, len(timed)) if timed[i] == name}
        assert len(after - {name}) == 2, (name, after)
    # Seeded: the same variants are timed in the same order.
    calls.clear()
    timing.time_interleaved(runs, reps=12, warmup=2, pipeline=1)
    assert calls[6:] == timed
    calls.clear()
    timing.time_interleaved(runs, reps=2, warmup=1, pipeline=2)
    # A timed sample is `pipeline` runs back to back.
    timed = calls[3:]
    assert calls[:3] == ["a", "b", "c"] and all(timed[i] == timed[i + 1] for i in range(0, 12, 2))
    for name in "abc":
        assert len(r[name]["times_s"]) == 12 and r[name]["median_s"] > 0
        np.testing.assert_array_equal(np.asarray(r[name]["out"]), np.asarray(jnp.dot(*sets[0])))

    calls.clear()
    runs["b"] = (tagged("b", fail_on=2), pairs)  # b's warm-up run (a's was call 1)
    r = timing.time_interleaved(runs, reps=2, warmup=1)
    assert isinstance(r["b"], RuntimeError) and "b broke" in str(r["b"])
    # Kept without its traceback: its frames would keep the failed run's buffers alive.
    assert r["b"].__traceback__ is None
    assert len(r["a"]["times_s"]) == len(r["c"]["times_s"]) == 2

    # Per-variant depths: c's samples are single runs, the others' the default's pairs.
    calls.clear()
    runs["b"] = (tagged("b"), pairs)
    timing.time_interleaved(runs, reps=3, warmup=1, pipeline=2, pipelines={"c": 1})
    timed = calls[3:]
    assert timed.count("a") == timed.count("b") == 6 and timed.count("c") == 3

    # With a check, each variant's last output is checked once, after its warm-up, and not kept.
    seen = []
    r = timing.time_interleaved(runs, reps=2, warmup=1, pipeline=1,
                                check=lambda name, out: seen.append(name) or float(out[0, 0]))
    assert seen == ["a", "b", "c"]
    assert all("out" not in r[n] and r[n]["err"] == float(jnp.dot(*sets[0])[0, 0]) for n in "abc")


def test_sharding_bench_on_two_cpu_devices(tmp_path):
    """bench_sharding.py runs its four cases end to end (timings meaningless on a CPU) and
    reports the collectives: the K split asked for rows is one reduce-scatter, never a gather."""
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH_DIR, "bench_sharding.py"), "--shape", "256x128x256",
         "--reps", "2", "--calls", "2", "--out-dir", str(tmp_path), "--tag", "t"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu",
             "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rows = {r["case"]: r for r in json.loads((tmp_path / "sharding_t.json").read_text())["results"]}
    assert set(rows) == {"data", "tensor", "k_split_rows", "k_split_replica"}
    assert rows["k_split_rows"]["hopper"]["collectives"] == {"reduce-scatter": 1}
    assert rows["k_split_replica"]["hopper"]["collectives"] == {"all-reduce": 1}
    assert rows["data"]["hopper"]["collectives"] == {} == rows["tensor"]["hopper"]["collectives"]
    assert all(r["rel_err"] < 1e-2 for r in rows.values())


def test_grouped_bench_on_cpu(tmp_path, monkeypatch, capsys):
    """bench_grouped.py end to end on a tiny case of its own (the reference lowering here: the
    numbers mean nothing, the bookkeeping is what is checked): every variant timed or its error
    kept, the training step's temporaries recorded, Pallas skipped with the reason (where no
    GPU is: on a GPU machine it runs or its reason is kept)."""
    import bench_grouped  # noqa: PLC0415
    monkeypatch.setattr(bench_grouped.timing, "require_kernels", lambda *mods: None)
    monkeypatch.setattr(bench_grouped, "CASES", dict(bench_grouped.CASES))
    assert bench_grouped.main(["--shape", "200x4x64x48", "--routing", "skewed", "--reps", "1",
                               "--pallas", "--train", "--fp8", "--out-dir", str(tmp_path),
                               "--tag", "t"]) == 0
    (row,) = json.loads((tmp_path / "grouped_t.json").read_text())["rows"]
    assert (row["m"], row["groups"], row["k"], row["n"]) == (200, 4, 64, 48)
    for impl in ("xla", "hopper", "dense", "xla_train", "hopper_train",
                 "xla_wgrad", "hopper_wgrad", "hopper_fp8", "xla_fp8", "hopper_fp8_block",
                 "xla_fp8_block", "hopper_fp8_tensor_train", "hopper_fp8_block_train",
                 "hopper_fp8_wgrad"):
        assert row[impl]["us"] > 0, (impl, row[impl])
        # Every output checked against the float32 product of its operands; fp8_ragged_dot's
        # steps quantize theirs, so only they may be off by more than bf16 rounding.
        bound = 0.1 if impl.startswith("hopper_fp8_") and impl.endswith("_train") else 1e-2
        assert row[impl]["err"] < bound and "wrong" not in row[impl], (impl, row[impl])
    assert "temp_bytes" in row["hopper_train"]
    if jax.default_backend() == "gpu":  # the suite on a GPU machine: Pallas runs there
        assert row["best_pallas"] is not None or row["pallas_skipped"]
    else:
        assert row["best_pallas"] is None and "GPU" in row["pallas_skipped"]
    # Where XLA's step fails (out of memory at DeepSeek's size), the fp8 steps still report
    # their time against our bf16 step.
    capsys.readouterr()
    bench_grouped.report({**row, "xla_train": {"error": "RESOURCE_EXHAUSTED: out of memory"}},
                         sweep=False)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "fp8_ragged_dot" in ln]
    assert len(lines) == 2 and all(" ms (" in ln and "x our bf16 step)" in ln for ln in lines)


def test_group_by_group_references_match_a_loop_over_groups():
    """bench_grouped's references: rows of group g times w[g] (rows past every group zero), and
    x_g^T y_g per group (an empty group's zero)."""
    import bench_grouped  # noqa: PLC0415
    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal(s) for s in ((12, 5), (12, 3), (4, 5, 3)))
    sizes = np.array([3, 0, 5, 2], np.int32)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    groups = list(zip(offsets[:-1], offsets[1:]))
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    got = np.asarray(bench_grouped.ragged_groups(f32(x), f32(w), sizes))
    want = np.zeros((12, 3))
    for g, (a, b) in enumerate(groups):
        want[a:b] = x[a:b] @ w[g]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = np.asarray(bench_grouped.contract_groups(f32(x), f32(y), sizes))
    want = np.stack([x[a:b].T @ y[a:b] for a, b in groups])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not got[1].any()


def test_grouped_bench_never_picks_a_wrong_pallas_config(tmp_path, monkeypatch):
    """A peer config whose output is wrong is marked so and not reported as the best, even
    when it is the fastest (here: two stand-ins for Pallas configs, one scaling its output)."""
    import bench_grouped  # noqa: PLC0415
    monkeypatch.setattr(bench_grouped.timing, "require_kernels", lambda *mods: None)
    monkeypatch.setattr(bench_grouped, "CASES", dict(bench_grouped.CASES))
    right = lambda a, r: jax.lax.ragged_dot(a[0], r, a[1])  # noqa: E731
    monkeypatch.setattr(bench_grouped, "pallas_variants", lambda: (
        {"pallas_wrong": lambda a, r: 1.1 * right(a, r), "pallas_right": right}, None))
    assert bench_grouped.main(["--shape", "200x4x64x48", "--routing", "uniform", "--reps", "1",
                               "--pallas", "--out-dir", str(tmp_path), "--tag", "t"]) == 0
    (row,) = json.loads((tmp_path / "grouped_t.json").read_text())["rows"]
    assert row["pallas_wrong"]["wrong"] and row["pallas_wrong"]["err"] > 0.05
    assert "wrong" not in row["pallas_right"] and row["best_pallas"] == "pallas_right"


def test_grouped_memory_bench_on_cpu(tmp_path, monkeypatch):
    """bench_grouped_memory.py end to end on a tiny shape: both implementations run in their
    own process and report a time (the numbers mean nothing on a CPU). The children inherit
    JAX_PLATFORMS, so they run on the CPU on a GPU machine too."""
    import bench_grouped_memory  # noqa: PLC0415
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert bench_grouped_memory.main(["--shape", "128x3x32x16", "--reps", "1", "--out-dir",
                                      str(tmp_path), "--tag", "t"]) == 0
    rows = json.loads((tmp_path / "grouped_memory_t.json").read_text())["rows"]
    assert [r["impl"] for r in rows] == list(bench_grouped_memory.IMPLS)
    assert all(r["ms"] > 0 and "error" not in r and r["backend"] == "cpu" for r in rows), rows


def test_quantize_bench_on_cpu(tmp_path):
    """bench_quantize.py's documented CPU run: every mode timed for both variants, each checked
    against the jnp version (timings meaningless on a CPU)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH_DIR, "bench_quantize.py"), "--shapes", "256x512",
         "--reps", "2", "--out-dir", str(tmp_path), "--tag", "t"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "quantize_t.json").read_text())["results"]
    assert {r["mode"] for r in rows} == {"tensor", "tensor+T", "row", "row+T:row", "row+T:tile",
                                         "tile+T"}
    for r in rows:
        assert r["variants"]["hopper"]["us"] > 0 and not r["variants"]["hopper"]["wrong"]


def test_odd_weight_decode_loop_is_the_steps_it_says():
    """bench_odd_weight's loop: `steps` updates x <- x + 1e-3 product(x, w)[:, :K], as a Python
    loop computes them (what it times is the decode loop it describes)."""
    import bench_odd_weight  # noqa: PLC0415 (imports jax_hopper)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 8)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).standard_normal((8, 13)), jnp.float32)
    got = bench_odd_weight.decode_loop(jnp.dot, 5)(x, w)
    want = x
    for _ in range(5):
        want = want + 1e-3 * jnp.dot(want, w)[:, :8]
    np.testing.assert_allclose(got, want, rtol=1e-6)
