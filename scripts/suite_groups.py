"""Splits the test files into groups of about equal running time for scripts/gpu_suite.sh, and
records the per-file times a suite run measured.

    python3 scripts/suite_groups.py JOBS [--tests DIR] [--durations FILE] [--skip-cpu-files]
        one line per group: its test files, separated by spaces (--skip-cpu-files: all but
        test_*_cpu.py)
    python3 scripts/suite_groups.py --record JUNIT.xml... [--durations FILE] [--out FILE]
        the per-file seconds of those junit reports merged over FILE's, written to --out

Each file's cost is its recorded seconds (scripts/suite_durations.json: the time its tests took
in a suite run of several groups side by side, summed from pytest's junit reports), or, for a
file not recorded yet, its bytes of source at the recorded files' mean seconds per byte. The
groups are filled longest file first, each to the group with the least cost so far, so the
longest group is within the longest file of the mean.
NOTES: grouping by bytes of source alone (its predecessor) left the eight groups of the H200 run
of 2026-12-04 between 207 and over 480 s (tests_h200_20261204_suite_warp_producer.log): a file's
bytes say little about its device time (test_random_calls_gpu.py: 3 KB, 182 s), and the suite
ran past the device tool's 10-minute limit.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DURATIONS = os.path.join(HERE, "suite_durations.json")
DEFAULT_TESTS = os.path.join(os.path.dirname(HERE), "tests")


def load_durations(path: str) -> dict[str, float]:
    """The recorded seconds per test file (an empty record where there is no file)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {name: float(s) for name, s in json.load(f)["seconds"].items()}


def costs(files: dict[str, int], durations: dict[str, float]) -> dict[str, float]:
    """Each file's cost in seconds: recorded, else its bytes at the recorded files' mean rate
    (1 s per KB where nothing that exists is recorded)."""
    known = {f: durations[f] for f in files if f in durations}
    known_bytes = sum(files[f] for f in known)
    rate = sum(known.values()) / known_bytes if known and known_bytes else 1e-3
    return {f: known.get(f, files[f] * rate) for f in files}


def split(cost: dict[str, float], jobs: int) -> list[list[str]]:
    """The files in at most `jobs` non-empty groups: longest first, each to the cheapest group
    so far (ties to the lower index; names break ties between files, so the split is the same
    on every machine)."""
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


def junit_seconds(paths: list[str]) -> dict[str, float]:
    """Seconds per test file summed over the test cases of pytest junit reports (a case's
    classname is its module's dotted path, e.g. tests.test_gemm_gpu or test_gemm_gpu.TestX)."""
    seconds: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            module = next((part for part in case.get("classname", "").split(".")
                           if part.startswith("test_")), None)
            if module is not None:
                name = module + ".py"
                seconds[name] = seconds.get(name, 0.0) + float(case.get("time", 0.0))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, help="how many groups")
    parser.add_argument("--tests", default=DEFAULT_TESTS, help="the directory of test_*.py")
    parser.add_argument("--durations", default=DEFAULT_DURATIONS,
                        help="recorded seconds per file (JSON: {'seconds': {file: s}})")
    parser.add_argument("--record", nargs="+", metavar="JUNIT",
                        help="junit reports whose per-file seconds to merge into --durations")
    parser.add_argument("--out", help="where --record writes (default: --durations)")
    parser.add_argument("--skip-cpu-files", action="store_true",
                        help="leave out test_*_cpu.py (CI runs them on every commit)")
    args = parser.parse_args(argv)
    if args.record:
        merged = load_durations(args.durations)
        merged.update({f: round(s, 1) for f, s in junit_seconds(args.record).items()})
        with open(args.out or args.durations, "w") as f:
            json.dump({"seconds": dict(sorted(merged.items()))}, f, indent=1)
            f.write("\n")
        return 0
    if args.jobs is None:
        parser.error("give JOBS (how many groups) or --record")
    cost = costs(test_files(args.tests, args.skip_cpu_files), load_durations(args.durations))
    for group in split(cost, args.jobs):
        print(" ".join(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
