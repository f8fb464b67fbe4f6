"""The tuner on an sm_90 GPU: candidates ranked by their device time (a profiler trace), not by
the host clock that times short chained calls (jax_hopper.timing.device_times)."""

import pytest

from jax_hopper import tune
from jax_hopper.gemm import tuned

pytestmark = pytest.mark.gpu


def test_the_tuner_ranks_candidates_by_device_time():
    # A short decode-like problem: chained, its calls are timed by the host.
    p = tune.Problem("matmul", "bfloat16", False, True, 1, 80, 1024, 1024)
    r = tune.tune_problem(p, reps=2)
    assert r["clock"] == "device", r["clock"]
    assert not r["failed"], r["failed"]
    # every candidate timed (the one equal to the heuristic's config only as "heuristic")
    assert set(r["times"]) == set(r["configs"]) and "heuristic" in r["times"]
    # a short GEMM's device time per call: more than nothing, far under the host's ~20 us
    assert all(0 < t < 20e-6 for t in r["times"].values()), r["times"]
    r["best"].validate("bfloat16", False, True)
    assert tuned.config_fields(r["best"]) != tuned.config_fields(r["configs"]["heuristic"])
