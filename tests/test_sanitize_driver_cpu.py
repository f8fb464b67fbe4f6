"""scripts/sanitize_driver.py's grouped-GEMM cases without a GPU: the adversarial group sizes
run through the reference lowering and pass the driver's float64 check, and the check rejects a
wrong result (so a sanitizer run cannot pass on wrong answers)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import sanitize_cases  # noqa: E402
import sanitize_driver  # noqa: E402


def test_ragged_cases_run_and_check_on_cpu(capsys):
    assert sanitize_driver.main(["--only", "ragged", "--quick", "--allow-cpu"]) == 0
    assert ", 0 failures" in capsys.readouterr().out


def test_ragged_check_rejects_a_wrong_result():
    case = sanitize_cases.RaggedCase(40, 16, 8, (10, -3, 2**31 - 1))
    arrays = sanitize_cases.ragged_inputs(case, np.random.default_rng(0))
    good = np.asarray(sanitize_cases.ragged_call(case, arrays))
    assert sanitize_cases.ragged_check(case, arrays, good) is None
    wrong = good.copy()
    wrong[10:] = 0  # the second nonempty group left unwritten
    assert "error" in sanitize_cases.ragged_check(case, arrays, wrong)


def test_full_tma_list_runs_and_checks_on_cpu(capsys):
    # Every TMA case of the full list must pass the ops' argument checks and the driver's bitwise
    # check through the reference path: a case the ops refuse would fail the GPU run instead
    # (2026-11-24, H100: twelve narrow swizzled boxes did).
    assert sanitize_driver.main(["--only", "tma", "--allow-cpu"]) == 0
    assert ", 0 failures" in capsys.readouterr().out


def test_fp8_cases_run_and_check_on_cpu():
    # The fp8 family's cases through the reference lowering: inputs, call and float64 check agree.
    rng = np.random.default_rng(0)
    for group in sanitize_cases.fp8_groups(quick=False):
        assert sanitize_driver.run_group(group, sanitize_cases.gemm_inputs,
                                         sanitize_cases.gemm_call, sanitize_cases.gemm_check,
                                         rng) == []


@pytest.mark.extension  # the planner is C++, reached through the extension
def test_the_stream_k_cases_split_tiles():
    """Each stream-K case of the sanitizer run splits tiles on a 132-SM GPU, so the sanitizer
    keeps covering the fix-up whatever the planner's rules become."""
    from jax_hopper.kernels import catalog
    for case in sanitize_cases.stream_k_cases():
        cfg = case.config
        kernel = cfg.kernel("matmul", case.dtype, case.transpose_a, not case.transpose_b)
        resident = catalog.DEFAULT_NUM_SMS // (cfg.cluster_m * cfg.cluster_n)
        plan = cfg.plan(kernel, 1, case.m, case.n, case.k, resident)
        assert plan["workspace_bytes"] > 0, case.label()
