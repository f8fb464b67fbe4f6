#!/usr/bin/env bash
# Install jax-hopper with its test extras and run the test suite (the README's test command).
# Without a Hopper GPU the GPU tests are skipped with a stated reason.
# The tests run in one pytest worker per core, up to TEST_JOBS (default 8; pytest-xdist, a
# test extra): on CI's two cores that took the suite from 25 to 15 minutes (2026-11-29). A test
# file goes to one worker whole (--dist loadfile), so a module's expensive fixture (test_sass.py's
# disassembly, test_sharding_cpu.py's child process: 70-100 s each) runs once. Each worker's GPU
# memory is allocated as it goes, so that workers share one GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "jax>=0.6" scikit-build-core nanobind
python -m pip install -q --no-build-isolation ".[test]"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
cd tests && python -m pytest -q -ra -p no:cacheprovider -n auto --dist loadfile \
    --maxprocesses="${TEST_JOBS:-8}" "$@" .
