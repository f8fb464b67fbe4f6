"""CPU tests of scripts/suite_groups.py, which splits the test files into groups of about equal
running time for scripts/gpu_suite.sh: every file in one group, the longest group within the
longest file of the mean, unrecorded files costed by their bytes, junit times summed per file."""

import json
import os
import random
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import suite_groups  # noqa: E402


@pytest.mark.parametrize("seed", range(20))
def test_split_puts_every_file_in_one_group_and_balances(seed):
    rng = random.Random(seed)
    cost = {f"test_{i}.py": rng.choice([0.1, 1.0, 10.0, 100.0]) * rng.random()
            for i in range(rng.randint(1, 60))}
    jobs = rng.randint(1, 12)
    groups = suite_groups.split(cost, jobs)
    placed = [f for g in groups for f in g]
    assert sorted(placed) == sorted(cost)
    assert 1 <= len(groups) <= jobs and all(groups)
    # Filling the cheapest group with the longest file left bounds the longest group by the
    # mean plus the longest file.
    longest = max(sum(cost[f] for f in g) for g in groups)
    assert longest <= sum(cost.values()) / jobs + max(cost.values()) + 1e-9


def test_split_is_the_same_whatever_the_order_of_the_files():
    cost = {"test_a.py": 5.0, "test_b.py": 5.0, "test_c.py": 3.0, "test_d.py": 2.0}
    reordered = dict(reversed(list(cost.items())))
    assert suite_groups.split(cost, 2) == suite_groups.split(reordered, 2)
    assert suite_groups.split(cost, 2) == [["test_a.py", "test_c.py"], ["test_b.py", "test_d.py"]]


def test_split_rejects_no_jobs():
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        suite_groups.split({"test_a.py": 1.0}, 0)


def test_unrecorded_files_cost_their_bytes_at_the_recorded_rate():
    files = {"test_known.py": 1000, "test_other.py": 3000, "test_new.py": 500}
    got = suite_groups.costs(files, {"test_known.py": 20.0, "test_other.py": 60.0,
                                     "test_gone.py": 99.0})
    assert got == {"test_known.py": 20.0, "test_other.py": 60.0, "test_new.py": 10.0}
    # Nothing recorded: 1 s per KB.
    assert suite_groups.costs({"test_x.py": 2000}, {}) == {"test_x.py": 2.0}


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_gemm_gpu" name="test_a" time="1.5"/>
<testcase classname="tests.test_gemm_gpu" name="test_b" time="2.25"/>
<testcase classname="test_tma_cpu.TestMaps" name="test_c" time="0.5"/>
<testcase classname="" name="collection_error" time="3.0"/>
</testsuite></testsuites>
"""


def test_record_sums_junit_times_per_file_over_the_recorded_ones(tmp_path):
    junit = tmp_path / "junit_0.xml"
    junit.write_text(JUNIT)
    old = tmp_path / "durations.json"
    old.write_text(json.dumps({"seconds": {"test_gemm_gpu.py": 9.0, "test_old_cpu.py": 4.0}}))
    out = tmp_path / "new.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "suite_groups.py"), "--record",
                    str(junit), "--durations", str(old), "--out", str(out)], check=True)
    assert json.loads(out.read_text()) == {"seconds": {
        "test_gemm_gpu.py": 3.8, "test_old_cpu.py": 4.0, "test_tma_cpu.py": 0.5}}
    assert json.loads(old.read_text())["seconds"]["test_gemm_gpu.py"] == 9.0  # left as it was


def test_the_recorded_file_names_test_files_that_exist():
    recorded = suite_groups.load_durations(suite_groups.DEFAULT_DURATIONS)
    present = suite_groups.test_files(suite_groups.DEFAULT_TESTS)
    assert recorded and set(recorded) <= set(present), set(recorded) - set(present)
    assert all(s >= 0 for s in recorded.values())


def test_the_command_line_prints_one_line_per_group_covering_every_test_file():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "suite_groups.py"), "8"],
                         check=True, capture_output=True, text=True).stdout
    lines = out.strip().split("\n")
    assert len(lines) == 8
    files = [f for line in lines for f in line.split()]
    assert sorted(files) == sorted(suite_groups.test_files(suite_groups.DEFAULT_TESTS))
