#!/usr/bin/env bash
# Builds jax_hopper at git revision REV (or from the source tree SRC, e.g. a `git archive` of it
# carried to a machine without the repository) and installs it as the package
# `jax_hopper_base` into DIR, beside the current build, so benchmarks/bench_ab.py can time both in one process:
# module imports and FFI target and type names are renamed (jax_hopper_* -> jax_hopper_base_*), so the
# two builds register distinct custom calls.
#   bash scripts/install_baseline.sh REV|SRC DIR [PKG]   # then PYTHONPATH=DIR python benchmarks/bench_ab.py
# PKG: the installed jax_hopper package (with its extension) built from this checkout. Where the
# baseline compiles the same extension (scripts/kernel_inputs_match.sh: only its Python differs)
# that extension is copied and the baseline's Python files put over it: no build.
set -euo pipefail
rev=$1
dest=$(realpath -m "$2")
pkg=${3:-}
cd "$(dirname "$0")/.."
src=$(mktemp -d)
if [ -d "$rev" ]; then cp -r "$rev"/. "$src"; else git archive "$rev" | tar -x -C "$src"; fi
rm -rf "$dest/jax_hopper_base"
if [ -n "$pkg" ] && bash scripts/kernel_inputs_match.sh "$src"; then
  mkdir -p "$dest"
  cp -r "$pkg" "$dest/jax_hopper_base"
  # Every Python file the baseline's own (the build's record of itself kept), no stale bytecode.
  find "$dest/jax_hopper_base" -name __pycache__ -prune -exec rm -rf {} +
  find "$dest/jax_hopper_base" -name '*.py' ! -name _build_info.py -delete
  (cd "$src/jax_hopper" && find . -name '*.py' ! -path '*/__pycache__/*' \
     -exec cp --parents {} "$dest/jax_hopper_base/" \;)
  how="its Python over the extension of $pkg"
else
  python3 -m pip install -q --no-build-isolation --no-deps --target "$dest/build" "$src"
  mv "$dest/build/jax_hopper" "$dest/jax_hopper_base"
  how="built"
fi
find "$dest/jax_hopper_base" -name '*.py' -exec sed -i -E \
  -e 's/\bjax_hopper\./jax_hopper_base./g' \
  -e 's/from jax_hopper import/from jax_hopper_base import/g' \
  -e 's/^import jax_hopper$/import jax_hopper_base as jax_hopper/' \
  -e 's/"jax_hopper_/"jax_hopper_base_/g' \
  -e 's/register_ffi_(target|type)\(name,/register_ffi_\1(name.replace("jax_hopper_", "jax_hopper_base_", 1),/' {} +
rm -rf "$dest/build" "$src"
echo "installed $rev as jax_hopper_base in $dest ($how)"
