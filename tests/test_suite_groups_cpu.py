"""CPU tests of scripts/suite_groups.py, which splits the test files into groups of about equal
running time for scripts/gpu_suite.sh: every file in one group, the longest group within the
longest file of the mean, unrecorded files costed by their bytes, junit times summed per file
and per test; a file past a group's mean share split into its tests (pytest node ids), each
test of it in exactly one group."""

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
    assert json.loads(out.read_text()) == {
        "seconds": {"test_gemm_gpu.py": 3.8, "test_old_cpu.py": 4.0, "test_tma_cpu.py": 0.5},
        "functions": {"test_gemm_gpu.py::test_a": 1.5, "test_gemm_gpu.py::test_b": round(2.25, 1),
                      "test_tma_cpu.py::TestMaps": 0.5}}
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


SPLITTABLE = '''import pytest
from helpers import check


@pytest.mark.parametrize("n", [1, 2])
def test_a(n):
    check(n)


def helper():
    pass


class TestB:
    def test_c(self):
        pass


async def test_d():
    pass
'''


def test_split_units_names_the_top_level_tests_as_node_ids(tmp_path):
    path = tmp_path / "test_x_gpu.py"
    path.write_text(SPLITTABLE)
    assert suite_groups.split_units(str(path)) == [
        "test_x_gpu.py::test_a", "test_x_gpu.py::TestB", "test_x_gpu.py::test_d"]


@pytest.mark.parametrize("line", [
    "test_e = test_a",                        # a test bound by assignment
    "from other import test_f",               # ... or imported
    "from other import check as test_g",
    "def pytest_generate_tests(metafunc):\n    pass",
    "def broken(:",                           # unreadable: run it whole
])
def test_split_units_refuses_a_file_whose_top_level_may_not_name_every_test(tmp_path, line):
    path = tmp_path / "test_y_gpu.py"
    path.write_text(SPLITTABLE + "\n" + line + "\n")
    assert suite_groups.split_units(str(path)) is None


def test_a_file_past_the_mean_share_is_split_into_its_tests(tmp_path):
    (tmp_path / "test_long_gpu.py").write_text(SPLITTABLE)
    (tmp_path / "test_whole_gpu.py").write_text(SPLITTABLE + "test_e = test_a\n")
    cost = {"test_long_gpu.py": 90.0, "test_whole_gpu.py": 80.0, "test_small.py": 10.0}
    recorded = {"test_long_gpu.py::test_a": 50.0, "test_gone.py::test_z": 7.0}
    got = suite_groups.split_long_files(cost, 4, str(tmp_path), recorded)
    # test_a at its recorded 50 s; the other two share what is left of the file's 90 s.
    assert got == {"test_long_gpu.py::test_a": 50.0, "test_long_gpu.py::TestB": 20.0,
                   "test_long_gpu.py::test_d": 20.0, "test_whole_gpu.py": 80.0,
                   "test_small.py": 10.0}
    # One group: nothing to balance, every file whole.
    assert suite_groups.split_long_files(cost, 1, str(tmp_path), recorded) == cost
    groups = suite_groups.split(got, 4)
    assert sorted(u for g in groups for u in g) == sorted(got)
    assert max(sum(got[u] for u in g) for g in groups) == 80.0


def test_split_shares_scale_to_the_files_cost_where_the_record_exceeds_it(tmp_path):
    (tmp_path / "test_long_gpu.py").write_text(SPLITTABLE)
    recorded = {"test_long_gpu.py::test_a": 120.0, "test_long_gpu.py::TestB": 60.0}
    got = suite_groups.split_long_files({"test_long_gpu.py": 90.0, "test_s.py": 1.0}, 2,
                                        str(tmp_path), recorded)
    assert got == pytest.approx({"test_long_gpu.py::test_a": 60.0,
                                 "test_long_gpu.py::TestB": 30.0,
                                 "test_long_gpu.py::test_d": 0.0, "test_s.py": 1.0})


def test_junit_seconds_per_function_sum_the_parametrisations(tmp_path):
    junit = tmp_path / "junit_0.xml"
    junit.write_text(JUNIT.replace('name="test_b"', 'name="test_a[2-x]"'))
    assert suite_groups.junit_seconds([str(junit)], per="function") == {
        "test_gemm_gpu.py::test_a": 3.75, "test_tma_cpu.py::TestMaps": 0.5}


def test_the_command_line_covers_every_test_of_a_split_file_once():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "suite_groups.py"), "16",
                          "--skip-cpu-files"], check=True, capture_output=True, text=True).stdout
    units = [u for line in out.strip().split("\n") for u in line.split()]
    assert len(units) == len(set(units))
    files = suite_groups.test_files(suite_groups.DEFAULT_TESTS, skip_cpu_files=True)
    split = {u.split("::")[0] for u in units if "::" in u}
    assert split, "16 groups split the longest files"
    for f in files:
        if f in split:
            assert f not in units
            expected = suite_groups.split_units(os.path.join(suite_groups.DEFAULT_TESTS, f))
            assert sorted(u for u in units if u.startswith(f + "::")) == sorted(expected)
        else:
            assert f in units


def _collected(args):
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", *args], cwd=suite_groups.DEFAULT_TESTS,
                         capture_output=True, text=True)
    # node ids relative to the tests directory, however pytest roots them
    return sorted(line.split("tests/", 1)[-1] if line.startswith("tests/") else line
                  for line in run.stdout.splitlines() if "::" in line)


def test_a_split_files_tests_collect_as_the_whole_file_does():
    """pytest, given a split file's node ids (16 groups), collects exactly the tests it collects
    from the file itself: nothing of the file is left out or run twice."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "suite_groups.py"), "16",
                          "--skip-cpu-files"], check=True, capture_output=True, text=True).stdout
    units = [u for u in out.split() if "::" in u]
    files = sorted({u.split("::")[0] for u in units})
    assert files
    whole = _collected(files)
    assert {node.split("::")[0] for node in whole} == set(files)
    assert _collected(units) == whole
