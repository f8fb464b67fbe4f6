#!/usr/bin/env bash
# Exits 0 where the baseline BASE (a git revision, or a source tree such as a `git archive` of
# one) compiles the same extension as this checkout: the same cuda/, ffi/, cmake/,
# CMakeLists.txt, pyproject.toml and kernel catalog (jax_hopper/kernels/), so that only its
# Python differs. scripts/install_baseline.sh then reuses an installed build of this checkout
# instead of compiling the baseline (a heuristic's A/B in half the device time).
#   bash scripts/kernel_inputs_match.sh BASE
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash scripts/kernel_inputs_match.sh BASE" >&2
  exit 2
fi
base=$1
[ -d "$base" ] && base=$(realpath "$base")
cd "$(dirname "$0")/.."
paths=(cuda ffi cmake CMakeLists.txt pyproject.toml jax_hopper/kernels)
if [ -d "$base" ]; then
  for p in "${paths[@]}"; do
    [ -e "$p" ] || [ -e "$base/$p" ] || continue
    diff -rq -x __pycache__ "$base/$p" "$p" > /dev/null 2>&1 || exit 1
  done
  exit 0
fi
# A revision: against the working tree (uncommitted changes count).
git diff --quiet "$base" -- "${paths[@]}"
