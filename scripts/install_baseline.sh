#!/usr/bin/env bash
# Builds jax_hopper at git revision REV (or from the source tree SRC, e.g. a `git archive` of it
# carried to a machine without the repository) and installs it as the package
# `jax_hopper_base` into DIR, beside the current build, so benchmarks/bench_ab.py can time both in one process:
# module imports and FFI target and type names are renamed (jax_hopper_* -> jax_hopper_base_*), so the
# two builds register distinct custom calls.
#   bash scripts/install_baseline.sh REV|SRC DIR   # then PYTHONPATH=DIR python benchmarks/bench_ab.py
set -euo pipefail
rev=$1
dest=$(realpath -m "$2")
cd "$(dirname "$0")/.."
src=$(mktemp -d)
if [ -d "$rev" ]; then cp -r "$rev"/. "$src"; else git archive "$rev" | tar -x -C "$src"; fi
python3 -m pip install -q --no-build-isolation --no-deps --target "$dest/build" "$src"
rm -rf "$dest/jax_hopper_base"
mv "$dest/build/jax_hopper" "$dest/jax_hopper_base"
find "$dest/jax_hopper_base" -name '*.py' -exec sed -i -E \
  -e 's/\bjax_hopper\./jax_hopper_base./g' \
  -e 's/from jax_hopper import/from jax_hopper_base import/g' \
  -e 's/^import jax_hopper$/import jax_hopper_base as jax_hopper/' \
  -e 's/"jax_hopper_/"jax_hopper_base_/g' \
  -e 's/register_ffi_(target|type)\(name,/register_ffi_\1(name.replace("jax_hopper_", "jax_hopper_base_", 1),/' {} +
rm -rf "$dest/build" "$src"
echo "installed $rev as jax_hopper_base in $dest"
