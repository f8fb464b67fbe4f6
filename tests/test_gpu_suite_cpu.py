"""CPU tests of scripts/gpu_suite.sh's time limit and archive, with a stand-in Python whose
build succeeds at once and whose pytest runs until it is interrupted: a test process past
SUITE_TEST_LIMIT is stopped and said to be, SUITE_ARCHIVE=1 writes its archive however the
script ends (a signal from an outer time limit included), SUITE_PART's parts run every
test file once between them, SUITE_SKIP_CPU_FILES=1 every file but test_*_cpu.py, and
SUITE_BUILD=0 tests without building."""

import os
import re
import signal
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_suite.sh")

# pip: done; pytest: a run that waits (printing its test files first) until a signal ends it,
# as a long test file would; anything else (scripts/suite_groups.py): the real interpreter.
STAND_IN = f"""#!/usr/bin/env bash
if [ "$1 $2" = "-m pip" ]; then exit 0; fi
if [ "$1 $2" = "-m pytest" ]; then
  exec {sys.executable} -c 'import sys, time
print("files:", *[a for a in sys.argv[1:] if a.endswith(".py")], flush=True)
time.sleep(120)' "$@"
fi
exec {sys.executable} "$@"
"""


def _suite(tmp_path, stand_in=STAND_IN, **env):
    python = tmp_path / "python"
    python.write_text(stand_in)
    python.chmod(0o755)
    out = tmp_path / "out"
    # The caller's SUITE_* settings stay out: this file runs inside gpu_suite.sh itself, whose
    # SUITE_PART=2/2 once turned the one-process run below into a part's groups (2026-12-06).
    full = {k: v for k, v in os.environ.items() if not k.startswith("SUITE_")}
    full.update(PYTHON=str(python), OUT=str(out), SUITE_BENCH="0", SUITE_ARCHIVE="1", **env)
    return subprocess.Popen(["bash", SCRIPT], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True), out


def _archived(out):
    with tarfile.open(out / "gpu_suite_logs.tgz") as tar:
        return {os.path.basename(n) for n in tar.getnames()}


def test_a_test_process_past_the_limit_is_stopped_and_the_logs_archived(tmp_path):
    proc, out = _suite(tmp_path, SUITE_JOBS="2", SUITE_TEST_LIMIT="2")
    text, _ = proc.communicate(timeout=90)
    assert proc.returncode != 0, text
    assert text.count("stopped by SUITE_TEST_LIMIT, 2 s") == 2, text
    names = _archived(out)
    assert {"tests_0.log", "tests_1.log", "tests.log", "build.log"} <= names, names
    # a cut run's partial times are not offered as the files' recorded times
    assert "suite_durations.json" not in names


def test_the_archive_is_written_when_a_signal_ends_the_script(tmp_path):
    proc, out = _suite(tmp_path, SUITE_JOBS="1")
    time.sleep(3)  # the stand-in build is done, its pytest waiting
    os.killpg(proc.pid, signal.SIGTERM)  # as an outer `timeout` signals its process group
    proc.communicate(timeout=60)
    assert "tests.log" in _archived(out)


def _run_files(tmp_path, groups, **env):
    """The test files the stand-in pytest processes were given, over `groups` processes."""
    proc, out = _suite(tmp_path, SUITE_TEST_LIMIT="2", **env)
    text, _ = proc.communicate(timeout=90)
    # one process: "stopped by SUITE_TEST_LIMIT (2 s)"; each group: "(... LIMIT, 2 s)"
    assert len(re.findall(r"stopped by SUITE_TEST_LIMIT(?:, | \()2 s", text)) == groups, text
    with tarfile.open(out / "gpu_suite_logs.tgz") as tar:
        # tests.log: the one process's log, or every group's one after another
        log = next(tar.extractfile(m).read().decode() for m in tar.getmembers()
                   if os.path.basename(m.name) == "tests.log")
    return [f for line in log.splitlines() if line.startswith("files:")
            for f in line.split()[1:]]


def _part_files(tmp_path, part):
    return _run_files(tmp_path / part.replace("/", "_"), 2, SUITE_JOBS="2", SUITE_PART=part)


EVERY = sorted(f for f in os.listdir(os.path.join(ROOT, "tests"))
               if f.startswith("test_") and f.endswith(".py"))


def test_suite_parts_run_every_test_file_once(tmp_path):
    for sub in ("1_2", "2_2"):
        (tmp_path / sub).mkdir()
    first, second = _part_files(tmp_path, "1/2"), _part_files(tmp_path, "2/2")
    assert first and second and not set(first) & set(second)
    assert sorted(first + second) == EVERY


def test_skipping_the_cpu_files_runs_every_other_file_once(tmp_path):
    want = [f for f in EVERY if not f.endswith("_cpu.py")]
    assert want and len(want) < len(EVERY)
    for jobs, groups in (("1", 1), ("3", 3)):
        (tmp_path / jobs).mkdir()
        got = _run_files(tmp_path / jobs, groups, SUITE_JOBS=jobs, SUITE_SKIP_CPU_FILES="1")
        assert sorted(got) == want, jobs


def test_suite_build_0_tests_the_installed_package_without_building(tmp_path):
    """SUITE_BUILD=0: no pip install (a stand-in whose pip fails would stop the suite at the
    build), and the tests still run."""
    failing_pip = STAND_IN.replace('if [ "$1 $2" = "-m pip" ]; then exit 0; fi',
                                   'if [ "$1 $2" = "-m pip" ]; then exit 1; fi')
    assert failing_pip != STAND_IN
    proc, out = _suite(tmp_path, SUITE_BUILD="0", SUITE_JOBS="2", SUITE_TEST_LIMIT="2",
                       stand_in=failing_pip)
    text, _ = proc.communicate(timeout=90)
    assert "build: skipped (SUITE_BUILD=0)" in text, text
    assert "build rc=1" not in text and "build rc=0 tests rc=1" in text, text
    assert text.count("stopped by SUITE_TEST_LIMIT, 2 s") == 2, text
    # the same stand-in without SUITE_BUILD=0 stops at its failed build
    proc, out = _suite(tmp_path, SUITE_JOBS="2", SUITE_TEST_LIMIT="2", stand_in=failing_pip)
    text, _ = proc.communicate(timeout=90)
    assert proc.returncode == 1 and "build rc=1" in text and "stopped by" not in text, text


def test_a_bad_suite_part_is_refused(tmp_path):
    proc, _ = _suite(tmp_path, SUITE_JOBS="2", SUITE_PART="3/2")
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "SUITE_PART=3/2: want i/n" in text, text
