#!/usr/bin/env bash
# On a Hopper machine with jax[cuda] installed (no network needed): build the package, run the
# whole test suite including the GPU tests, check the kernels' SASS, run the benchmarks, and end
# with a short summary: GEMM benchmark, fused-epilogue benchmark, grouped (MoE) benchmark,
# transformer-layer and MoE-layer examples.
# Logs go to $OUT (or ./gpu_suite_logs).
#   bash scripts/gpu_suite.sh            # everything
#   SUITE_BENCH=0 bash scripts/gpu_suite.sh   # skip the benchmarks
#   SUITE_JOBS=6 bash scripts/gpu_suite.sh    # tests in 6 pytest processes side by side
#   SUITE_ARCHIVE=1 bash scripts/gpu_suite.sh # the logs as one file, gpu_suite_logs.tgz
#   SUITE_TEST_LIMIT=380 bash scripts/gpu_suite.sh  # stop each test process after 380 s
#   SUITE_JOBS=8 SUITE_PART=1/2 bash scripts/gpu_suite.sh  # half the test files (then 2/2)
#   SUITE_JOBS=8 SUITE_SKIP_CPU_FILES=1 bash scripts/gpu_suite.sh  # all but tests/test_*_cpu.py
#   SUITE_BUILD=0 bash scripts/gpu_suite.sh   # test the jax_hopper already installed
# SUITE_JOBS > 1 splits the test files into that many groups of about equal running time (the
# times recorded in scripts/suite_durations.json: scripts/suite_groups.py) and runs them at once,
# each GPU process allocating as it goes (XLA_PYTHON_CLIENT_PREALLOCATE=false): six processes ran
# every GPU test file in 5.7 min where one takes over 10 (H100, 2026-11-26), which matters where
# a device session's minutes are few; eight ran them in 7.4 min (2026-11-27), but by 2026-12-04
# eight groups of equal bytes of source took 207 to over 480 s (H200), hence the recorded times.
# A file longer than a group's mean share runs split into its tests (pytest node ids over the
# groups; suite_groups.split_long_files): with whole files the two longest (~300 s each) bound
# every SUITE_JOBS past 8. Twelve jobs so ran every GPU test file in 318 s against eight's ~330
# (H100, 2026-12-07): the one GPU, not the process count, bounds it past eight.
# SUITE_ARCHIVE=1 suits a machine that returns only a few files (the device tool: eight): the
# suite writes two or more per job. The archive is written however the script ends, a signal
# included: a device call that ran past its own limit lost a whole suite's logs so (2026-12-04).
# SUITE_TEST_LIMIT (seconds) interrupts each pytest process past it as Ctrl-C would, so that it
# still prints its summary and writes its junit XML (what passed, and where it stopped); the
# test files' times are then not recorded, a cut group's being partial.
# SUITE_SKIP_CPU_FILES=1 leaves out the test_*_cpu.py files, which the CPU CI runs on every
# commit: 1448 of the 3391 s the files' tests took in a suite run (scripts/suite_durations.json),
# so that the rest, every GPU test among them, fits one device call. Not the whole suite: a CPU
# test has failed on a GPU host only (test_tune_cpu keying an H200's entries, 2026-11-28), so the
# full run stays due after a change that such a test could see.
# SUITE_BUILD=0 tests the jax_hopper already installed instead of building this tree: after
# scripts/device_ab.sh installed it in the same device call (an A/B, then the change's GPU
# tests), the build's minute is not spent twice.
# SUITE_PART=i/n splits the test files into n x SUITE_JOBS groups of about equal recorded time
# and runs part i's SUITE_JOBS of them (i = 1..n): the suite over n calls of a device lent by
# the call, each within its limit (eight groups of the whole suite took over 380 s each on
# 2026-12-05, a call's 600 s less the build's minute).
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${OUT:-gpu_suite_logs}"
mkdir -p "$LOGS"
ARCHIVE_DIR=""
if [ "${SUITE_ARCHIVE:-0}" = 1 ]; then
  ARCHIVE_DIR="$LOGS"; LOGS=$(mktemp -d)
  trap 'tar czf "$ARCHIVE_DIR/gpu_suite_logs.tgz" -C "$LOGS" .' EXIT
fi
LIMIT="${SUITE_TEST_LIMIT:-0}"
# A pytest run under SUITE_TEST_LIMIT: SIGINT past it (pytest's KeyboardInterrupt: summary and
# junit XML written, exit status 124 from timeout), SIGKILL 30 s later if it hangs.
limited() {
  if [ "$LIMIT" -gt 0 ]; then timeout --signal=INT --kill-after=30 "$LIMIT" "$@"; else "$@"; fi
}
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$LOGS/gpu.txt" 2>&1
if [ "${SUITE_BUILD:-1}" = 0 ]; then
  installed=$(cd /tmp && $PY -c "import jax_hopper, os; print(os.path.dirname(jax_hopper.__file__))" 2>&1 | tail -1)
  echo "== build: skipped (SUITE_BUILD=0); testing the installed jax_hopper: $installed" \
    | tee "$LOGS/build.log"
  build_rc=0
else
  echo "== build"
  start=$(date +%s)
  $PY -m pip install --no-build-isolation --no-deps -v . > "$LOGS/build.log" 2>&1
  build_rc=$?
  echo "build rc=$build_rc in $(( $(date +%s) - start )) s"
  grep -E "ptxas (warning|error)|spill|lmem" "$LOGS/build.log" | grep -v " 0 bytes spill" | head -20
  if [ $build_rc -ne 0 ]; then tail -40 "$LOGS/build.log"; exit 1; fi
fi

echo "== tests"
# Run from a neutral directory so the installed package (with its extension) is imported.
JOBS="${SUITE_JOBS:-1}"
PART="${SUITE_PART:-}"
part=1; parts=1
if [ -n "$PART" ]; then
  if [[ "$PART" =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] && \
     [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ]; then
    part=${BASH_REMATCH[1]}; parts=${BASH_REMATCH[2]}
  else
    echo "SUITE_PART=$PART: want i/n with 1 <= i <= n (part i of n)"; exit 2
  fi
fi
skip_cpu=""
[ "${SUITE_SKIP_CPU_FILES:-0}" = 1 ] && skip_cpu="--skip-cpu-files"
if [ "$JOBS" -le 1 ] && [ -z "$PART" ]; then
  files=.
  [ -z "$skip_cpu" ] || files=$($PY scripts/suite_groups.py 1 $skip_cpu)
  # shellcheck disable=SC2086
  ( cd tests && limited $PY -m pytest -q -ra -p no:cacheprovider --junitxml="$LOGS/junit.xml" \
      ${SUITE_PYTEST_ARGS:-} $files ) > "$LOGS/tests.log" 2>&1
  test_rc=$?
  [ $test_rc -ne 124 ] || echo "tests: stopped by SUITE_TEST_LIMIT (${LIMIT} s)"
else
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  # One line of test files per group, of about equal recorded time (scripts/suite_groups.py);
  # with SUITE_PART=i/n, part i's JOBS of n x JOBS groups.
  mapfile -t all_groups < <($PY scripts/suite_groups.py $((JOBS * parts)) $skip_cpu)
  groups=("${all_groups[@]:$(( (part - 1) * JOBS )):$JOBS}")
  pids=()
  for i in "${!groups[@]}"; do
    # shellcheck disable=SC2086
    ( cd tests && limited $PY -m pytest -q -ra -p no:cacheprovider \
        --junitxml="$LOGS/junit_$i.xml" ${SUITE_PYTEST_ARGS:-} ${groups[$i]} ) \
        > "$LOGS/tests_$i.log" 2>&1 &
    pids+=($!)
  done
  test_rc=0
  cut=0
  for i in "${!pids[@]}"; do
    # 5: pytest collected nothing in this group (a SUITE_PYTEST_ARGS filter), not a failure
    wait "${pids[$i]}"; rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 5 ] || test_rc=1
    stopped=""
    if [ $rc -eq 124 ]; then stopped=" (stopped by SUITE_TEST_LIMIT, ${LIMIT} s)"; cut=1; fi
    echo "group $i: $(tail -1 "$LOGS/tests_$i.log")$stopped"
  done
  cat "$LOGS"/tests_*.log > "$LOGS/tests.log"
  # This run's seconds per test file over the recorded ones: copy it to
  # scripts/suite_durations.json where the files' times have moved.
  if [ $cut -eq 0 ]; then
    $PY scripts/suite_groups.py --record "$LOGS"/junit_*.xml --out "$LOGS/suite_durations.json" \
      || echo "could not record the test files' times"
  fi
fi
tail -25 "$LOGS/tests.log"

bench_rc=skipped
if [ "${SUITE_BENCH:-1}" = 1 ]; then
  echo "== benchmarks"
  $PY benchmarks/bench_gemm.py --device-time --out-dir "$LOGS" --tag "$(date +%Y%m%d)" \
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
grep -E "^[0-9]+ (passed|failed)|passed|failed" "$LOGS/tests.log" | tail -"$JOBS"
echo "build rc=$build_rc tests rc=$test_rc bench rc=$bench_rc"
[ $test_rc -eq 0 ]
