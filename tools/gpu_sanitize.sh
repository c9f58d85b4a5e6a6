#!/usr/bin/env bash
# Runs on the GPU machine over the staged folder: NVIDIA compute-sanitizer over the GPU test
# binaries, all runs at once (each is bound by the CPU work of the tool; the machine has the
# cores), each within a time budget (default 540 s, under the device tool's 10-minute limit):
#   - memcheck over ops_cuda_test, runtime_cuda_test and graph_test with
#     RECAP_ALLOC_CONF=backend:native: every block is its own cudaMalloc, so an access past a
#     block is outside any allocation and memcheck sees it (the caching allocator would hide it
#     inside a larger segment); and over allocator_test (see below);
#   - racecheck, synccheck and initcheck over ops_cuda_test (our kernels).
# ops_cuda_test runs its deliberate device faults (out-of-range ids and positions that
# __trap()) in child processes (this binary re-executed). Every process is sanitized
# (--target-processes all; leaving the children out made them hang) and compute-sanitizer
# reports them in one log with one summary, so each report is classified by its host
# backtrace: one through run_fault_child (the child's entry point) is a deliberate trap,
# counted apart; any other is an error. CUDA API calls that return an error are not reported
# (--report-api-errors no): the tests provoke many on purpose and check each status
# themselves; the tools' job here is what kernels do to memory. allocator_test runs without
# RECAP_ALLOC_CONF: it sets each backend itself and checks the caching one's rounding.
#   bash stage/run.sh tools/gpu_sanitize.sh [BUDGET_SECONDS]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/recap_gpu_out}
budget=${1:-540}
logs=/tmp/recap_sanitize_logs
rm -rf "$logs"
mkdir -p "$out" "$logs"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
export RECAP_ALLOC_CONF=backend:native
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$cs" --version | tail -1
cd "$here"

# classify LOG: prints "ERRORS TRAPS": the reports (blocks that start with an unindented
# "========= " line) outside and inside run_fault_child.
classify() {
  awk '
    function close_block() { if (inb) { if (trap) t++; else e++ } inb = 0 }
    /^========= [^ ]/ && !/SUMMARY|COMPUTE-SANITIZER|Target application/ {
      close_block(); inb = 1; trap = 0; next
    }
    /^=========$|^========= $/ { close_block(); next }
    inb && /run_fault_child/ { trap = 1 }
    END { close_block(); print e + 0, t + 0 }' "$1"
}

# sanitize TOOL TEST: one run; writes its summary line to $logs/TOOL.TEST.summary and its
# error count (deliberate traps excluded) to $logs/TOOL.TEST.errors.
sanitize() {
  local tool=$1 name=$2 run=$logs/$1.$2
  if [ ! -x "tests/$name" ]; then
    printf '%-10s %-18s not staged\n' "$tool" "$name" >"$run.summary"
    echo 0 >"$run.errors"
    return
  fi
  local env=()
  [ "$name" = allocator_test ] && env=(-u RECAP_ALLOC_CONF)
  local start
  start=$(date +%s)
  env "${env[@]}" timeout "$budget" "$cs" --tool "$tool" --target-processes all \
    --report-api-errors no --print-limit 0 --log-file "$run.sanlog" "tests/$name" \
    >"$run.out" 2>&1
  local code=$? took=$(($(date +%s) - start))
  local state="exit $code"
  [ "$code" -eq 124 ] && state="TIMED OUT (partial)"
  local counts errors traps summary
  counts=$(classify "$run.sanlog")
  errors=${counts% *}
  traps=${counts#* }
  summary=$(grep -oE '(ERROR|RACECHECK) SUMMARY: .*' "$run.sanlog" | grep -v 'not printed' | tail -1)
  local tests
  tests=$(grep -E '^ +tests ' "$run.out" | awk '{print $3" run, "$4" passed, "$5" failed"}')
  printf '%-10s %-18s %4s s  %-20s %s errors (+ %s deliberate traps in child processes; tool: %s); tests: %s\n' \
    "$tool" "$name" "$took" "$state" "$errors" "$traps" "${summary:-no summary}" \
    "${tests:-no summary}" >"$run.summary"
  echo "$errors" >"$run.errors"
}

runs=("memcheck ops_cuda_test" "racecheck ops_cuda_test" "synccheck ops_cuda_test"
  "initcheck ops_cuda_test" "memcheck runtime_cuda_test" "memcheck graph_test"
  "memcheck allocator_test")
for r in "${runs[@]}"; do
  # shellcheck disable=SC2086
  sanitize $r &
done
wait

tool_errors=0
for r in "${runs[@]}"; do
  set -- $r
  run=$logs/$1.$2
  tool_errors=$((tool_errors + $(cat "$run.errors")))
  if [ "$(cat "$run.errors")" -gt 0 ]; then
    echo "--- $1 $2: first reports ---"
    grep -E '^========= [^ ]' "$run.sanlog" | grep -v -E 'SUMMARY|COMPUTE-SANITIZER' | head -10
  fi
done
tar czf "$out/sanitize_logs.tgz" -C "$logs" .
echo
echo "=== compute-sanitizer summary (RECAP_ALLOC_CONF=$RECAP_ALLOC_CONF, budget ${budget} s per run, all at once) ==="
for r in "${runs[@]}"; do
  set -- $r
  cat "$logs/$1.$2.summary"
done
echo "sanitizer errors (deliberate traps excluded): $tool_errors"
if [ "$tool_errors" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
[ "$tool_errors" -eq 0 ]
