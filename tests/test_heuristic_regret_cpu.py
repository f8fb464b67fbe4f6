"""benchmarks/heuristic_regret.py: the heuristic's current choice looked up in a tuner report."""

import os
import sys

import pytest

import jax_hopper.tune as tune
from jax_hopper import GemmConfig
from jax_hopper.gemm import tuned

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import heuristic_regret  # noqa: E402


@pytest.mark.parametrize("args", [
    ("matmul", "bfloat16", False, True, 1, 256, 512, 128, None),
    ("fp8", "float8_e4m3fn", True, False, 3, 7, 4096, 1000, "float8_e5m2"),
    ("grouped", "float16", False, False, 64, 32768, 1536, 2048, None),
])
def test_problem_keys_parse_back(args):
    assert tuned.parse_problem_key(tuned.problem_key(*args)) == args


def _candidate(config, us, heuristic=False):
    return dict(config=tuned.config_fields(config), us=us, **({"heuristic": True} if heuristic
                                                             else {}))


def test_score_finds_the_current_choice_among_the_candidates():
    kept = tune.Problem("matmul", "bfloat16", False, True, 1, 256, 512, 128)
    moved = tune.Problem("matmul", "bfloat16", False, True, 1, 8192, 8192, 8192)
    now = tune.heuristic_for(kept)
    other = GemmConfig(block_n=128, stages=6, cluster_m=2)
    assert tuned.config_fields(other) != tuned.config_fields(now)
    report = {"problems": {
        # the heuristic's config timed (12 us) beside a faster one (10 us)
        kept.key: dict(heuristic_us=12.0, candidates=[_candidate(other, 10.0),
                                                      _candidate(now, 12.0, True)]),
        # the report's heuristic config is not today's, which the report never timed
        moved.key: dict(heuristic_us=50.0, candidates=[_candidate(other, 50.0, True)]),
    }}
    rows = {r["problem"]: r for r in heuristic_regret.score(report)}
    assert rows[kept.key]["best_us"] == 10.0 and rows[kept.key]["now_us"] == 12.0
    assert not rows[kept.key]["changed"]
    assert tuned.config_fields(tune.heuristic_for(moved)) != tuned.config_fields(other)
    assert rows[moved.key]["now_us"] is None and rows[moved.key]["changed"]
