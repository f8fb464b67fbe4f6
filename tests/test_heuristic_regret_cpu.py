"""benchmarks/heuristic_regret.py: the heuristic's current choice looked up in a tuner report."""

import os
import sys

import pytest

import jax_hopper.tune as tune
from jax_hopper import GemmConfig
from jax_hopper.gemm import heuristics, tuned

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
    assert rows[kept.key]["rule"] == tune.heuristic_choice_for(kept).rule


@pytest.mark.extension  # the rules that read a plan
@pytest.mark.parametrize("family,a_mn,m,n,k,off_line,odd_weight,rule", [
    ("matmul", False, 8, 1024, 1024, (0, 0), False, "lean_swap_tile"),
    ("matmul", False, 40, 2048, 2048, (0, 0), False, "swap_token_tile"),
    ("matmul", False, 16, 28672, 4096, (0, 0), False, "choose_swap_config"),
    ("matmul", False, 200, 4097, 4096, (0, 0), True, "odd_weight_config"),
    ("matmul", False, 80, 1024, 5120, (0, 0), False, "swap_narrow_config"),
    ("matmul", False, 150, 4096, 4096, (0, 0), False, "swap_wide_config"),
    ("matmul", False, 792, 3000, 14336, (0, 0), False, "swap_mid_config"),
    ("matmul", False, 2093, 6144, 2560, (0, 0), False, "swap_past_wave_config"),
    ("matmul", False, 559, 3000, 3072, (0, 0), False, "pingpong_mid_m"),
    ("matmul", False, 256, 4096, 14336, (0, 0), False, "long_k_split_tile"),
    ("matmul", False, 512, 4096, 4096, (0, 0), False, "pingpong_mid_m"),  # 64 k-blocks: no split
    ("matmul", False, 4000, 3000, 2056, (16, 112), False, "off_line_tile"),
    ("matmul", False, 8192, 8192, 8192, (0, 0), False, "wave_cost"),
    ("matmul", True, 8, 4096, 8192, (0, 0), False, "long_k_split_tile"),  # no swap for a (K, M)
    ("glu", False, 384, 4096, 4096, (0, 0), False, "wave_cost"),
])
def test_heuristic_choice_names_the_rule_behind_the_config(family, a_mn, m, n, k, off_line,
                                                          odd_weight, rule):
    """heuristics.heuristic_choice: heuristic_config's config, and the rule that picked it, a
    function of the heuristics package (whose NOTES hold its measurements)."""
    args = (family, a_mn, 1, m, n, k)
    kw = dict(off_line=off_line, odd_weight=odd_weight)
    choice = heuristics.heuristic_choice(*args, **kw)
    assert choice.rule == rule
    assert callable(getattr(heuristics, choice.rule))
    assert choice.config == heuristics.heuristic_config(*args, **kw)


def test_by_rule_scores_each_rule_over_its_timed_problems():
    rows = [dict(problem="a", best_us=10.0, now_us=12.0, rule="wave_cost"),
            dict(problem="b", best_us=10.0, now_us=10.0, rule="wave_cost"),
            dict(problem="c", best_us=10.0, now_us=None, rule="swap_mid_config"),
            dict(problem="d", best_us=10.0, now_us=11.0, rule="pingpong_mid_m")]
    got = heuristic_regret.by_rule(rows)
    # the untimed problem's rule has nothing to score; most time lost (count x log) first
    assert list(got) == ["wave_cost", "pingpong_mid_m"]
    assert got["wave_cost"]["problems"] == 2
    assert got["wave_cost"]["geomean"] == pytest.approx(1.2 ** 0.5)
    assert got["wave_cost"]["worst"] == pytest.approx(1.2)
    assert got["wave_cost"]["worst_problem"] == "a"


def test_set_constant_changes_what_the_rules_read(monkeypatch):
    """--set: long_k_split_tile past every K (LONG_K_BLOCKS huge) leaves a long-K mid-M product
    to the rule after it; a constant imported into another rule module (swap.py's
    LONG_K_BLOCKS, plan.py's SPLIT_PIECE_KBLOCKS) changes there too, where its rules read it;
    a name that is no constant of the rules, or a value of another type, is refused naming the
    rule."""
    from jax_hopper.gemm.heuristics import dense, plan, swap
    for module, name in [(dense, "LONG_K_BLOCKS"), (swap, "LONG_K_BLOCKS"),
                         (dense, "SPLIT_PIECE_KBLOCKS"), (plan, "SPLIT_PIECE_KBLOCKS")]:
        monkeypatch.setattr(module, name, getattr(module, name))  # restored after
    args = ("matmul", True, 1, 384, 4096, 8192)  # a (K, M) lhs: no swap-AB
    assert heuristics.heuristic_choice(*args).rule == "long_k_split_tile"
    heuristic_regret.set_constant("LONG_K_BLOCKS=1000000")
    assert dense.LONG_K_BLOCKS == swap.LONG_K_BLOCKS == 1000000
    assert heuristics.heuristic_choice(*args).rule != "long_k_split_tile"
    heuristic_regret.set_constant("SPLIT_PIECE_KBLOCKS=7.5")
    assert dense.SPLIT_PIECE_KBLOCKS == plan.SPLIT_PIECE_KBLOCKS == 7.5
    for bad, match in [("NO_SUCH_CONSTANT=1", "NAME=VALUE"), ("LONG_K_BLOCKS", "NAME=VALUE"),
                       ("choose_config=1", "NAME=VALUE"), ("LONG_K_BLOCKS=2.5", "is int")]:
        with pytest.raises(ValueError, match=match):
            heuristic_regret.set_constant(bad)


def test_main_names_and_skips_a_file_that_is_not_a_tuner_report(tmp_path, capsys):
    cache = tmp_path / "tune_cache.json"
    cache.write_text('{"format": 2, "gpus": {}}')
    sweep = tmp_path / "tune_sweep.json"
    sweep.write_text('{"1470x1000x11008": {"us": 12.0}}')
    assert heuristic_regret.main([str(cache), str(sweep)]) == 0
    out = capsys.readouterr()
    assert f"{cache}: not a tuner report" in out.err and f"{sweep}: not a tuner report" in out.err
    assert "0 problems timed both ways" in out.out
