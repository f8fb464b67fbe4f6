#!/usr/bin/env bash
# Runs scripts/sanitize_driver.py (every jax_hopper kernel on small and edge shapes) under
# compute-sanitizer's memcheck, racecheck, synccheck and initcheck on a Hopper machine with the
# package installed. One log per tool in the output directory, one summary line per tool.
#   bash scripts/sanitize.sh                     # all four tools, logs in $OUT or ./sanitize_logs
#   bash scripts/sanitize.sh DIR memcheck        # chosen tools, logs in DIR
#   SANITIZE_SELFTEST=1 bash scripts/sanitize.sh # first prove memcheck catches a planted fault
# Env: COMPUTE_SANITIZER (path), PYTHON, SANITIZE_QUICK=1 (reduced list for every tool),
#   SANITIZE_ALL_KERNELS=1 (check XLA's kernels too), SANITIZE_STRICT=1 (initcheck findings in
#   XLA's kernels fail the run too), SANITIZE_TIMEOUT (seconds per tool, default 900),
#   SANITIZE_EXTRA_ARGS (more compute-sanitizer options), SANITIZE_DRIVER_ARGS (more driver
#   options, e.g. "--only ragged").
# Exit status: 0 when every tool finished, reported no error in our kernels and the driver's
# own numerical checks passed; 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${1:-${OUT:-sanitize_logs}}"
shift $(( $# > 0 ? 1 : 0 ))
TOOLS=("$@")
[ ${#TOOLS[@]} -eq 0 ] && TOOLS=(memcheck racecheck synccheck initcheck)
mkdir -p "$LOGS"
PY="${PYTHON:-python3}"
CS="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
if [ ! -x "$CS" ]; then echo "compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 1; fi

# NOTES: XLA's default BFC allocator hands out pieces of one big cudaMalloc, so memcheck would
# see an access past the end of our buffer as in bounds. The platform allocator makes each buffer
# its own cudaMalloc; without preallocation memcheck also tracks far less memory.
export XLA_PYTHON_CLIENT_ALLOCATOR=platform
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"

# Our kernels: compute-sanitizer matches these substrings of the mangled kernel names
# (--kernel-name kns=...; several --kernel-name options are OR-ed). Only matching launches are
# instrumented, so XLA's kernels (copies, pads, converts) run natively and cannot add noise.
OURS=(sm90_gemm_kernel tma_store_back_kernel tma_smem_bytes_kernel tma_multicast_kernel
      quantize_fp8_kernel transpose_fp8_kernel grouped_tile_table_kernel)
FILTER=()
for k in "${OURS[@]}"; do FILTER+=(--kernel-name "kns=$k"); done
OURS_RE="$(IFS='|'; echo "${OURS[*]}")"

"$CS" --version > "$LOGS/compute-sanitizer-version.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$LOGS/compute-sanitizer-version.txt" 2>&1

# count_errors LOG TOOL -> "total ours" (total = the tool's summary; ours = error records whose
# device frame is one of OUR kernels; "?" when the summary line is missing, i.e. the tool died).
count_errors() {
  local log=$1 tool=$2 total
  if [ "$tool" = racecheck ]; then
    total=$(grep -Eo "RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)" "$log" \
            | tail -1 | sed -E 's/.*\(([0-9]+) errors?, ([0-9]+) warnings?\)/\1 \2/' | awk '{print $1 + $2}')
  else
    total=$(grep -Eo "ERROR SUMMARY: [0-9]+ errors?" "$log" | tail -1 | grep -Eo "[0-9]+")
  fi
  # An error record starts with a "========= " line that is not indented further; it is ours when
  # one of its lines names one of our kernels (device frames, "at <kernel>+0x..").
  local ours
  ours=$(awk -v re="$OURS_RE" '
    /^========= [^ ]/ && !/SUMMARY|COMPUTE-SANITIZER|Saved host backtrace|Process ID|Target application returned/ {
      if (inrec && hit) n++; inrec = 1; hit = ($0 ~ re); next }
    /^=========     / { if (inrec && $0 ~ re && $0 !~ /Host Frame/) hit = 1; next }
    { if (inrec && hit) n++; inrec = 0; hit = 0 }
    END { if (inrec && hit) n++; print n + 0 }' "$log")
  echo "${total:-?} $ours"
}

status=0
if [ "${SANITIZE_SELFTEST:-0}" = 1 ]; then
  log="$LOGS/selftest-memcheck.log"
  "$CS" --tool memcheck "${FILTER[@]}" "$PY" scripts/sanitize_driver.py --plant-fault > "$log" 2>&1
  read -r total ours <<< "$(count_errors "$log" memcheck)"
  if [ "$total" != "?" ] && [ "$total" -ge 1 ] && [ "$ours" -ge 1 ]; then
    echo "selftest: memcheck caught the planted out-of-bounds store ($total error(s), $ours in our kernels)"
  else
    echo "selftest: FAILED: memcheck reported '$total' errors ($ours ours) for a planted fault; see $log"
    status=1
  fi
fi

for tool in "${TOOLS[@]}"; do
  log="$LOGS/$tool.log"
  args=(--tool "$tool" --error-exitcode 99 --target-processes all --report-api-errors no)
  # shellcheck disable=SC2206
  driver_args=(${SANITIZE_DRIVER_ARGS:-})
  # racecheck instruments every shared-memory access: the reduced list keeps it to minutes.
  [ "$tool" = racecheck ] || [ "${SANITIZE_QUICK:-0}" = 1 ] && driver_args+=(--quick)
  # initcheck runs unfiltered: a buffer written by an uninstrumented XLA kernel would look
  # uninitialised to it. Its findings are attributed by kernel name below instead.
  if [ "${SANITIZE_ALL_KERNELS:-0}" != 1 ] && [ "$tool" != initcheck ]; then args+=("${FILTER[@]}"); fi
  # NOTES: initcheck does not see TMA (bulk tensor) stores, so every GEMM output looks
  # uninitialised when a cudaMemcpy reads it back: ~10^6 such API-copy reports (H100,
  # 2026-11-22), past the print limit, hid whatever else there was. The driver checks each
  # output against float64, which proves it written; initcheck is left to device-side reads
  # (operands, bias, residual, the stream-K workspace).
  # Its reports are then device reads of those outputs by XLA's kernels (slices, converts), tens
  # of thousands: every one is printed so each can be attributed to a kernel.
  # Each report's ~30-line host backtrace made the quick run's log 1.37 GB and outlasted a 420 s
  # timeout (H100, 2026-11-24; 123534 reports, all XLA's slices of our TMA-stored outputs): the
  # device frames ("at <kernel>+0x..") are all the attribution needs.
  [ "$tool" = initcheck ] && args+=(--check-api-memory-access no --print-limit 100000000
                                    --show-backtrace device)
  # shellcheck disable=SC2206
  args+=(${SANITIZE_EXTRA_ARGS:-})
  start=$(date +%s)
  timeout "${SANITIZE_TIMEOUT:-900}" "$CS" "${args[@]}" "$PY" scripts/sanitize_driver.py \
      "${driver_args[@]}" > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  read -r total ours <<< "$(count_errors "$log" "$tool")"
  driver_line=$(grep -E "^sanitize_driver: [0-9]+ calls" "$log" | tail -1)
  verdict=ok
  if [ "$total" = "?" ]; then verdict="FAILED (no summary: tool crashed or timed out, rc=$rc)"
  elif grep -q "errors were not printed" "$log"; then verdict="FAILED (errors past the print limit cannot be attributed)"
  elif [ -z "$driver_line" ]; then verdict="FAILED (driver did not finish, rc=$rc)"
  elif ! grep -qE "^sanitize_driver: [0-9]+ calls, 0 failures" "$log"; then verdict="FAILED (driver: wrong results)"
  elif [ "$ours" -gt 0 ]; then verdict="FAILED ($ours errors in our kernels)"
  elif [ "$total" -gt 0 ]; then
    if [ "$tool" != initcheck ] || [ "${SANITIZE_STRICT:-0}" = 1 ]; then verdict="FAILED"
    else verdict="ok (all $total in XLA's own kernels or API calls: see the log)"; fi
  fi
  [[ "$verdict" == ok* ]] || status=1
  printf "%-10s errors=%-4s ours=%-4s %4ss  %s  [%s]\n" "$tool" "$total" "$ours" "$secs" "$verdict" \
      "${driver_line#sanitize_driver: }"
done
exit $status
