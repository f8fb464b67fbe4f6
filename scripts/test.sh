#!/usr/bin/env bash
# Install jax-hopper with its test extras and run the test suite (the README's test command).
# Without a Hopper GPU the GPU tests are skipped with a stated reason.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "jax>=0.6" scikit-build-core nanobind
python -m pip install -q --no-build-isolation ".[test]"
cd tests && python -m pytest -q -ra -p no:cacheprovider "$@" .
