#!/usr/bin/env bash
# A/B of a kernel change on a Hopper machine, in one call: builds this tree (installed as
# jax_hopper) and the baseline BASE (installed as jax_hopper_base by scripts/install_baseline.sh)
# side by side (or, where BASE compiles the same extension and only its Python differs, builds
# this tree once and puts BASE's Python over that build: scripts/kernel_inputs_match.sh),
# compares the two builds' SASS per GEMM kernel (scripts/sass.py), then times both in one
# process with benchmarks/bench_ab.py, whose arguments follow BASE.
#   bash scripts/device_ab.sh BASE [bench_ab.py arguments...]
#     BASE: a git revision, or a source tree (a `git archive` of the revision: the device tool's
#           copy of the working tree has no repository, so carry one, e.g. in an ignored .dev/)
#   e.g. bash scripts/device_ab.sh .dev/base --device-time --reps 5 --tag {gpu}_20261204_x \
#            --shapes 792x3072x14336 16x4096x4096 --epilogue-cases
#   (a bare --epilogue-cases times no fused-epilogue case; left out, bench_ab times them all)
# Its build of this tree stays installed: `SUITE_BUILD=0 bash scripts/gpu_suite.sh` after it, in
# the same call, runs the change's GPU tests without building again.
# Logs and bench_ab's JSON go to $OUT (or ./device_ab_logs): build_new.log, build_base.log,
# sass.txt (AB_SASS_KERNELS: the kernels' regex, default every GEMM kernel), ab.log; the last
# lines of each step are printed. The baseline is built into AB_BASE_DIR
# (default /tmp/jax_hopper_ab_base). Exit status: bench_ab's (1 where a build failed).
# AB_OTHERS="TREE..." (source trees or revisions, as BASE) builds more candidates beside the two,
# each as a baseline of its own (AB_BASE_DIR_<i>), and after the A/B times this tree against
# each in turn (ab_vs_<name>.log, sass_vs_<name>.txt, bench_ab's tag + _vs_<name>): a candidate
# against BASE is then the two ratios chained (new/BASE over new/candidate). The builds share the
# cores: three took 171 s together on the device's 16 (H200 machine, 2026-12-07), where each
# more device call costs a machine's start and two builds.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: bash scripts/device_ab.sh BASE [bench_ab.py arguments...]" >&2
  exit 2
fi
base=$1
shift
[ -d "$base" ] && base=$(realpath "$base")
cd "$(dirname "$0")/.."
repo=$(pwd)
LOGS=$(realpath -m "${OUT:-device_ab_logs}")
BASE_DIR=$(realpath -m "${AB_BASE_DIR:-/tmp/jax_hopper_ab_base}")
PY="${PYTHON:-python3}"
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -1

start=$(date +%s)
$PY -m pip install --no-build-isolation --no-deps . > "$LOGS/build_new.log" 2>&1 &
new_pid=$!
read -r -a others <<< "${AB_OTHERS:-}"
other_pids=()
for i in "${!others[@]}"; do
  [ -d "${others[$i]}" ] && others[$i]=$(realpath "${others[$i]}")
  bash scripts/install_baseline.sh "${others[$i]}" "${BASE_DIR}_$i" \
    > "$LOGS/build_$(basename "${others[$i]}").log" 2>&1 &
  other_pids+=($!)
done
if bash scripts/kernel_inputs_match.sh "$base"; then
  # Only the Python differs (a heuristic's change): one build, the baseline its extension under
  # BASE's Python files (install_baseline.sh's PKG). This tree's build took 56-61 s alone on the
  # device's 16 cores (H200 machine, 2026-12-04).
  wait $new_pid; new_rc=$?
  base_rc=1
  if [ $new_rc -eq 0 ]; then
    pkg=$(cd /tmp && $PY -c "import jax_hopper, os; print(os.path.dirname(jax_hopper.__file__))")
    bash scripts/install_baseline.sh "$base" "$BASE_DIR" "$pkg" > "$LOGS/build_base.log" 2>&1
    base_rc=$?
  fi
else
  # The two builds share the machine's cores (each a parallel ninja build): together they took
  # 95-111 s on the device's 16 cores (H200 machine, 2026-12-04), about one build's time.
  bash scripts/install_baseline.sh "$base" "$BASE_DIR" > "$LOGS/build_base.log" 2>&1 &
  base_pid=$!
  wait $new_pid; new_rc=$?
  wait $base_pid; base_rc=$?
fi
other_rcs=()
for i in "${!other_pids[@]}"; do wait "${other_pids[$i]}"; other_rcs[$i]=$?; done
echo "builds: new rc=$new_rc, base rc=$base_rc, others rc=${other_rcs[*]:-none}," \
  "$(( $(date +%s) - start )) s"
tail -1 "$LOGS/build_base.log"
if [ $new_rc -ne 0 ] || [ $base_rc -ne 0 ]; then
  tail -20 "$LOGS/build_new.log" "$LOGS/build_base.log"
  exit 1
fi

# From a neutral directory, so that the installed package (with its extension) is imported.
new_so=$(cd /tmp && $PY -c "from jax_hopper import _ffi; print(_ffi.extension().__file__)")

# against DIR SASS_LOG AB_LOG [bench_ab.py arguments...]: this tree's build against the baseline
# installed in DIR (install_baseline.sh's): their GEMM kernels' SASS side by side, then bench_ab;
# bench_ab's exit status.
against() {
  local dir=$1 sass_log=$2 ab_log=$3
  shift 3
  $PY scripts/sass.py "$new_so" "$(ls "$dir"/jax_hopper_base/_jax_hopper*.so)" \
    --kernels "${AB_SASS_KERNELS:-sm90_gemm_kernel}" > "$sass_log" 2>&1 \
    || echo "the SASS comparison failed: $sass_log"
  tail -2 "$sass_log"
  ( cd /tmp && PYTHONPATH="$dir" $PY "$repo/benchmarks/bench_ab.py" --out-dir "$LOGS" "$@" ) \
    > "$ab_log" 2>&1
}

against "$BASE_DIR" "$LOGS/sass.txt" "$LOGS/ab.log" "$@"
ab_rc=$?
tail -30 "$LOGS/ab.log"
echo "bench_ab rc=$ab_rc"

# The other candidates, each as the baseline of this tree, under bench_ab's tag + _vs_<name>.
tag="{gpu}_$(date +%Y%m%d)"
args=("$@")
for i in "${!args[@]}"; do [ "${args[$i]}" = --tag ] && tag=${args[$((i + 1))]:-$tag}; done
for i in "${!others[@]}"; do
  name=$(basename "${others[$i]}")
  if [ "${other_rcs[$i]}" -ne 0 ]; then tail -20 "$LOGS/build_$name.log"; ab_rc=1; continue; fi
  against "${BASE_DIR}_$i" "$LOGS/sass_vs_$name.txt" "$LOGS/ab_vs_$name.log" \
    "$@" --tag "${tag}_vs_$name"
  rc=$?
  echo "== this tree (new) against $name (base): bench_ab rc=$rc"
  tail -4 "$LOGS/ab_vs_$name.log"
  [ $rc -eq 0 ] || ab_rc=$rc
done
exit $ab_rc
