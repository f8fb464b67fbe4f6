"""Splits the test files into groups of about equal running time for scripts/gpu_suite.sh, and
records the per-file and per-test times a suite run measured.

    python3 scripts/suite_groups.py JOBS [--tests DIR] [--durations FILE] [--skip-cpu-files]
        one line per group: its test files (or a long file's tests, file.py::test_x),
        separated by spaces (--skip-cpu-files: all but test_*_cpu.py)
    python3 scripts/suite_groups.py --record JUNIT.xml... [--durations FILE] [--out FILE]
        the per-file and per-test seconds of those junit reports merged over FILE's, written
        to --out

Each file's cost is its recorded seconds (scripts/suite_durations.json: the time its tests took
in a suite run of several groups side by side, summed from pytest's junit reports), or, for a
file not recorded yet, its bytes of source at the recorded files' mean seconds per byte. A file
that costs more than a group's mean share is split into its test functions and classes (pytest
node ids, file.py::test_x), each at its recorded seconds (the file's cost shared evenly among
those not recorded), where the file's top level names all its tests (split_units). The groups
are filled longest first, each to the group with the least cost so far, so the longest group is
within the longest unit of the mean.
NOTES: grouping by bytes of source alone (its predecessor) left the eight groups of the H200 run
of 2026-12-04 between 207 and over 480 s (tests_h200_20261204_suite_warp_producer.log): a file's
bytes say little about its device time (test_random_calls_gpu.py: 3 KB, 182 s), and the suite
ran past the device tool's 10-minute limit. Whole files only, the two longest
(test_random_calls_gpu 304 s, test_ragged_gpu 298 s recorded) bound the longest group at ~304 s
however many groups run, where twelve groups of the suite without the CPU files have a mean
share of 199 s (the recorded times, 2026-12-07).
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DURATIONS = os.path.join(HERE, "suite_durations.json")
DEFAULT_TESTS = os.path.join(os.path.dirname(HERE), "tests")


def load_durations(path: str, key: str = "seconds") -> dict[str, float]:
    """The recorded seconds per test file, or with key="functions" per test function or class
    (file.py::name); an empty record where there is no file or no such key."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {name: float(s) for name, s in json.load(f).get(key, {}).items()}


def split_units(path: str) -> list[str] | None:
    """The tests of the file at `path` as pytest node ids (name.py::test_x for each top-level
    test function, name.py::TestX for each test class), or None where its top level may not
    name all of its tests: a test bound by assignment or import, a pytest_generate_tests or
    a syntax error (such a file runs whole). pytest runs every parametrisation of a node id."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return None
    name = os.path.basename(path)
    units = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "pytest_generate_tests":
                return None
            if node.name.startswith("test"):
                units.append(f"{name}::{node.name}")
        elif isinstance(node, ast.ClassDef):
            if node.name.startswith("Test"):
                units.append(f"{name}::{node.name}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id.lower().startswith("test")
                   for t in targets for n in ast.walk(t)):
                return None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name).split(".")[-1].lower().startswith("test")
                   for a in node.names):
                return None
    return units


def split_long_files(cost: dict[str, float], jobs: int, tests_dir: str,
                     functions: dict[str, float]) -> dict[str, float]:
    """`cost` with each file that costs more than a group's mean share (of `jobs`) replaced by
    its tests (split_units), each costed by `functions`' recorded seconds, those not recorded
    sharing what is left of the file's cost evenly; the shares are scaled to sum to the file's
    cost. A file of fewer than two units, or one split_units cannot read, stays whole."""
    mean = sum(cost.values()) / max(jobs, 1)
    out: dict[str, float] = {}
    for f, c in cost.items():
        units = split_units(os.path.join(tests_dir, f)) if jobs > 1 and c > mean else None
        if not units or len(units) < 2:
            out[f] = c
            continue
        known = {u: functions[u] for u in units if u in functions}
        rest = [u for u in units if u not in known]
        left = max(c - sum(known.values()), 0.0)
        share = {**known, **{u: left / len(rest) for u in rest}}
        total = sum(share.values())
        out.update({u: (share[u] * c / total if total else c / len(units)) for u in units})
    return out


def costs(files: dict[str, int], durations: dict[str, float]) -> dict[str, float]:
    """Each file's cost in seconds: recorded, else its bytes at the recorded files' mean rate
    (1 s per KB where nothing that exists is recorded)."""
    known = {f: durations[f] for f in files if f in durations}
    known_bytes = sum(files[f] for f in known)
    rate = sum(known.values()) / known_bytes if known and known_bytes else 1e-3
    return {f: known.get(f, files[f] * rate) for f in files}


def split(cost: dict[str, float], jobs: int) -> list[list[str]]:
    """The files (or tests: split_long_files) in at most `jobs` non-empty groups: longest
    first, each to the cheapest group so far (ties to the lower index; names break ties, so
    the split is the same on every machine)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    groups: list[tuple[float, list[str]]] = [(0.0, []) for _ in range(jobs)]
    for f in sorted(cost, key=lambda f: (-cost[f], f)):
        i = min(range(jobs), key=lambda i: groups[i][0])
        groups[i] = (groups[i][0] + cost[f], groups[i][1] + [f])
    return [files for _, files in groups if files]


def test_files(tests_dir: str, skip_cpu_files: bool = False) -> dict[str, int]:
    """test_*.py in `tests_dir`, with their sizes in bytes; skip_cpu_files leaves out the
    test_*_cpu.py files, which the CPU CI runs on every commit (the GPU files and the unsuffixed
    ones, whose GPU cases CI skips, stay)."""
    return {os.path.basename(p): os.path.getsize(p)
            for p in glob.glob(os.path.join(tests_dir, "test_*.py"))
            if not (skip_cpu_files and p.endswith("_cpu.py"))}


def junit_seconds(paths: list[str], per: str = "file") -> dict[str, float]:
    """Seconds per test file (per="file") or per test function or class (per="function":
    file.py::test_x, file.py::TestX, over all their parametrisations) summed over the test
    cases of pytest junit reports (a case's classname is its module's dotted path and class,
    e.g. tests.test_gemm_gpu or test_gemm_gpu.TestX; its name the function and parameters)."""
    seconds: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            parts = case.get("classname", "").split(".")
            i = next((i for i, part in enumerate(parts) if part.startswith("test_")), None)
            if i is None:
                continue
            name = parts[i] + ".py"
            if per == "function":
                inner = parts[i + 1] if i + 1 < len(parts) else case.get("name", "").split("[")[0]
                name = f"{name}::{inner}"
            seconds[name] = seconds.get(name, 0.0) + float(case.get("time", 0.0))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, help="how many groups")
    parser.add_argument("--tests", default=DEFAULT_TESTS, help="the directory of test_*.py")
    parser.add_argument("--durations", default=DEFAULT_DURATIONS,
                        help="recorded seconds (JSON: {'seconds': {file: s}, "
                             "'functions': {file::test: s}})")
    parser.add_argument("--record", nargs="+", metavar="JUNIT",
                        help="junit reports whose seconds to merge into --durations")
    parser.add_argument("--out", help="where --record writes (default: --durations)")
    parser.add_argument("--skip-cpu-files", action="store_true",
                        help="leave out test_*_cpu.py (CI runs them on every commit)")
    args = parser.parse_args(argv)
    if args.record:
        record = {}
        for key, per in (("seconds", "file"), ("functions", "function")):
            merged = load_durations(args.durations, key)
            merged.update({f: round(s, 1) for f, s in junit_seconds(args.record, per).items()})
            record[key] = dict(sorted(merged.items()))
        with open(args.out or args.durations, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        return 0
    if args.jobs is None:
        parser.error("give JOBS (how many groups) or --record")
    cost = costs(test_files(args.tests, args.skip_cpu_files), load_durations(args.durations))
    cost = split_long_files(cost, args.jobs, args.tests,
                            load_durations(args.durations, "functions"))
    for group in split(cost, args.jobs):
        print(" ".join(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
