#!/usr/bin/env bash
# On a Hopper machine with jax[cuda] installed (no network needed): build the package, run the
# whole test suite including the GPU tests, check the kernels' SASS, run the benchmarks, and end
# with a short summary: GEMM benchmark, fused-epilogue benchmark, grouped (MoE) benchmark,
# transformer-layer and MoE-layer examples.
# Logs go to $OUT (or ./gpu_suite_logs).
#   bash scripts/gpu_suite.sh            # everything
#   SUITE_BENCH=0 bash scripts/gpu_suite.sh   # skip the benchmarks
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${OUT:-gpu_suite_logs}"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$LOGS/gpu.txt" 2>&1
echo "== build"
start=$(date +%s)
$PY -m pip install --no-build-isolation --no-deps -v . > "$LOGS/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc in $(( $(date +%s) - start )) s"
grep -E "ptxas (warning|error)|spill|lmem" "$LOGS/build.log" | grep -v " 0 bytes spill" | head -20
if [ $build_rc -ne 0 ]; then tail -40 "$LOGS/build.log"; exit 1; fi

echo "== tests"
# Run from a neutral directory so the installed package (with its extension) is imported.
( cd tests && $PY -m pytest -q -ra -p no:cacheprovider --junitxml="$LOGS/junit.xml" \
    ${SUITE_PYTEST_ARGS:-} . ) > "$LOGS/tests.log" 2>&1
test_rc=$?
tail -25 "$LOGS/tests.log"

bench_rc=skipped
if [ "${SUITE_BENCH:-1}" = 1 ]; then
  echo "== benchmarks"
  $PY benchmarks/bench_gemm.py --out-dir "$LOGS" --tag "$(date +%Y%m%d)" \
      ${SUITE_BENCH_ARGS:-} > "$LOGS/bench.log" 2>&1
  bench_rc=$?
  tail -20 "$LOGS/bench.log"
  echo "== fused vs unfused epilogues"
  $PY benchmarks/bench_epilogue.py --out-dir "$LOGS" --tag "$(date +%Y%m%d)" \
      > "$LOGS/epilogue.log" 2>&1 || bench_rc=1
  tail -5 "$LOGS/epilogue.log"
  echo "== grouped GEMM (MoE) against jax.lax.ragged_dot and Pallas, forward and training step"
  $PY benchmarks/bench_grouped.py --pallas --train --out-dir "$LOGS" --tag "$(date +%Y%m%d)" \
      > "$LOGS/grouped.log" 2>&1 || bench_rc=1
  tail -30 "$LOGS/grouped.log"
  echo "== MoE layer example"
  $PY examples/moe_layer.py > "$LOGS/moe_layer.log" 2>&1 || bench_rc=1
  tail -8 "$LOGS/moe_layer.log"
  echo "== transformer layer example"
  $PY examples/transformer_layer.py --json "$LOGS/transformer_layer.json" \
      > "$LOGS/transformer_layer.log" 2>&1 || bench_rc=1
  tail -15 "$LOGS/transformer_layer.log"
fi

echo "== summary"
cat "$LOGS/gpu.txt"
grep -E "^[0-9]+ (passed|failed)|passed|failed" "$LOGS/tests.log" | tail -1
echo "build rc=$build_rc tests rc=$test_rc bench rc=$bench_rc"
[ $test_rc -eq 0 ]
