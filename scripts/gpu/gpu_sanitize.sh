#!/usr/bin/env bash
# Runs on the GPU machine over the staged folder: NVIDIA compute-sanitizer over the GPU test
# binaries and over every spec in specs/ run by the CLI, many runs at once (each is bound by
# the CPU work of the tool; the machine has the cores), each within a time budget (default
# 240 s; the whole script stays under about 5 minutes on an H100):
#   - memcheck over the ops_cuda_*_test binaries, runtime_cuda_test and graph_test with
#     RECAP_ALLOC_CONF=backend:cudaMalloc: every block is its own cudaMalloc, so an access past a
#     block is outside any allocation and memcheck sees it (the caching allocator would hide it
#     inside a larger segment); and over allocator_test (see below);
#   - racecheck, synccheck and initcheck over the ops_cuda_*_test binaries (our kernels);
#   - memcheck over the engine's tests (pipeline_*test) and over `recap run SPEC --mode graph`
#     and `--mode eager` for every spec in specs/ (one warmup, one timed run), each twice: with
#     RECAP_ARENA=0 (arena planning off: every intermediate its own allocation, so with
#     backend:cudaMalloc an overrun from one intermediate into the next is outside any allocation)
#     and with the default arena (what users run). pipeline_device_fault_test is left out: it
#     fails hundreds of cudaMalloc calls on purpose and runs no kernel the others do not; so
#     are spec_*test, which make no CUDA call (compute-sanitizer then exits 255, "terminated
#     before first instrumented API call"). Each run gets its own TEST_TMPDIR: two runs of one
#     binary at once must not share temporary files.
# ops_cuda_fault_test runs its deliberate device faults (out-of-range ids and positions that
# __trap()) in child processes (this binary re-executed). Every process is sanitized
# (--target-processes all; leaving the children out made them hang) and compute-sanitizer
# reports them in one log with one summary, so each report is classified by its host
# backtrace: one through run_fault_child (the child's entry point) is a deliberate trap,
# counted apart; any other is an error. CUDA API calls that return an error are not reported
# (--report-api-errors no): the tests provoke many on purpose and check each status
# themselves; the tools' job here is what kernels do to memory. allocator_test runs without
# RECAP_ALLOC_CONF: it sets each backend itself and checks the caching one's rounding.
# A run passes when it reports no error outside the deliberate traps AND its exit code is 0:
# the program's own (every test passed, the CLI run succeeded), or, for the runs that have no
# deliberate trap, the tool's --error-exitcode 99 when it found an error. One summary line per
# run, then "N passed, N failed" over the runs. The tests' timeouts and hang deadlines are
# stretched 8 times (RECAP_TEST_TIME_SCALE): the tools slow the host side too (NCCL's init of a
# rank took over 8 s under memcheck). With two GPUs the two-GPU suites run too (the dead-rank
# and tensor-parallel runs of pipeline_dist_test, the cross-device tests of runtime_cuda_test);
# each summary line of a binary that has two-GPU tests says whether they ran.
#   bash stage/run.sh tools/gpu_sanitize.sh [BUDGET_SECONDS]   (SANITIZE_JOBS=N: runs at once)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/recap_gpu_out}
budget=${1:-240}
jobs_max=${SANITIZE_JOBS:-$(nproc)}
logs=/tmp/recap_sanitize_logs
rm -rf "$logs"
mkdir -p "$out" "$logs"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
export RECAP_ALLOC_CONF=backend:cudaMalloc
export RECAP_TEST_TIME_SCALE=${RECAP_TEST_TIME_SCALE:-8}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$cs" --version | tail -1
cd "$here"
script_start=$(date +%s)

# classify LOG: prints "ERRORS TRAPS": the reports (blocks that start with an unindented
# "========= " line) outside and inside run_fault_child.
classify() {
  [ -f "$1" ] || { echo "0 0"; return; }
  awk '
    function close_block() { if (inb) { if (trap) t++; else e++ } inb = 0 }
    /^========= [^ ]/ && !/SUMMARY|COMPUTE-SANITIZER|Target application/ {
      close_block(); inb = 1; trap = 0; next
    }
    /^=========$|^========= $/ { close_block(); next }
    inb && /run_fault_child/ { trap = 1 }
    END { close_block(); print e + 0, t + 0 }' "$1"
}

# sanitize ID TOOL TRAPS ARENA -- COMMAND...: one run of COMMAND (from the stage root) under
# TOOL; TRAPS is 1 for a binary with deliberate traps (no --error-exitcode: its children's
# traps are errors to the tool), ARENA is "0" for RECAP_ARENA=0, "default" to leave it unset,
# "-" where it does not apply. Writes $logs/ID.summary, $logs/ID.errors and $logs/ID.ok.
sanitize() {
  local id=$1 tool=$2 traps_expected=$3 arena=$4
  shift 5
  local run=$logs/$id
  if [ ! -x "$1" ]; then
    printf '%-10s %-44s not staged\n' "$tool" "$id" >"$run.summary"
    echo 0 >"$run.errors"
    echo 1 >"$run.ok"
    return
  fi
  mkdir -p "$run.tmp"
  # env's options (-u) must come before its assignments.
  local unset=() assign=(TEST_TMPDIR="$run.tmp")
  if [ "$arena" = 0 ]; then assign+=(RECAP_ARENA=0); else unset+=(-u RECAP_ARENA); fi
  case "$id" in memcheck.allocator_test*) unset+=(-u RECAP_ALLOC_CONF) ;; esac
  local exitcode=()
  [ "$traps_expected" = 1 ] || exitcode=(--error-exitcode 99)
  local start
  start=$(date +%s)
  env "${unset[@]}" "${assign[@]}" timeout "$budget" "$cs" --tool "$tool" --target-processes all \
    --report-api-errors no --print-limit 0 "${exitcode[@]}" --log-file "$run.sanlog" "$@" \
    >"$run.out" 2>&1
  local code=$? took=$(($(date +%s) - start))
  local state="exit $code"
  [ "$code" -eq 124 ] && state="TIMED OUT (partial)"
  [ "$code" -eq 99 ] && state="exit 99 (tool errors)"
  local counts errors traps summary result
  counts=$(classify "$run.sanlog")
  errors=${counts% *}
  traps=${counts#* }
  # Traps outside the binaries that have them are errors like any other.
  [ "$traps_expected" = 1 ] || { errors=$((errors + traps)); traps=0; }
  summary=$(grep -oE '(ERROR|RACECHECK) SUMMARY: .*' "$run.sanlog" 2>/dev/null |
    grep -v 'not printed' | tail -1)
  result=$(grep -E '^ +tests ' "$run.out" | awk '{print "tests: "$3" run, "$4" passed, "$5" failed"}')
  [ -n "$result" ] || result="program: $(grep -m1 -oE 'error: .*' "$run.out" || echo "no error printed")"
  # CUnit names each suite it runs; test_util names those it left inactive for want of GPUs.
  local two_gpu=""
  if grep -q "needs 2 CUDA devices" "$run.out"; then
    two_gpu="; two-GPU tests not run ($gpus GPU)"
  elif grep -qE "^Suite: dist/cuda2|Test: test_elapsed_across_devices" "$run.out"; then
    two_gpu="; two-GPU tests ran"
  fi
  result="$result$two_gpu"
  local ok=0
  [ "$code" -eq 0 ] && [ "$errors" -eq 0 ] && ok=1
  local verdict=FAIL
  [ "$ok" = 1 ] && verdict=PASS
  printf '%-4s %-10s %-44s %4s s  %-22s %s errors (+ %s deliberate traps; tool: %s); %s\n' \
    "$verdict" "$tool" "$id" "$took" "$state" "$errors" "$traps" "${summary:-no summary}" \
    "$result" >"$run.summary"
  echo "$errors" >"$run.errors"
  echo "$ok" >"$run.ok"
}

ids=()
# queue ID TOOL TRAPS ARENA -- COMMAND...: starts a run once fewer than jobs_max are running.
queue() {
  ids+=("$1")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  sanitize "$@" &
}

# The kernels and the runtime (as before), arena not involved.
# A binary with a run_fault_child (ops_cuda_fault_test, and the paged and sampling tests'
# invalid-metadata children) has deliberate traps. ops_cuda_registry_test checks the
# registry's entry points and launches nothing: the tool would end it before its first CUDA
# call (exit 255), as with the spec tests. The binaries whose kernels are slowest under the
# tools (the row ops' every-length sweep, the sampler's 10^5-draw fits, whose 1024-thread
# blocks racecheck serializes) start first and get SLOW_BUDGET seconds, so they are not the
# last to start on a busy GPU.
slow_budget=${SLOW_BUDGET:-$((budget * 7 / 4))}
kernel_tests=()
for slow in ops_cuda_rows_test ops_cuda_sample_test; do
  [ -x "tests/$slow" ] && kernel_tests+=("tests/$slow")
done
for t in tests/ops_cuda_*_test; do
  case " ${kernel_tests[*]} " in *" $t "*) continue ;; esac
  kernel_tests+=("$t")
done
for t in "${kernel_tests[@]}"; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  [ "$name" = ops_cuda_registry_test ] && continue
  traps=0
  grep -qa run_fault_child "$t" && traps=1
  run_budget=$budget
  case "$name" in ops_cuda_rows_test | ops_cuda_sample_test) run_budget=$slow_budget ;; esac
  for tool in memcheck racecheck synccheck initcheck; do
    budget=$run_budget queue "$tool.$name" "$tool" "$traps" - -- "$t"
  done
done
queue memcheck.runtime_cuda_test memcheck 0 - -- tests/runtime_cuda_test
queue memcheck.graph_test memcheck 0 - -- tests/graph_test
queue memcheck.allocator_test memcheck 0 - -- tests/allocator_test
# The engine's tests, arena off and on.
for t in tests/pipeline_*test; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  [ "$name" = pipeline_device_fault_test ] && continue
  for arena in 0 default; do
    queue "memcheck.$name.arena_$arena" memcheck 0 "$arena" -- "$t"
  done
done
# Every spec through the CLI, both modes, arena off and on. A spec whose plain run fails
# (without the tool) is skipped with its error: that is not the sanitizer's finding.
skipped=()
for spec in specs/*.yaml; do
  name=$(basename "$spec" .yaml)
  if ! timeout 120 bin/recap run "$spec" --device cuda --warmup 1 --iters 1 --seed 1 \
    >"$logs/plain.$name.out" 2>&1; then
    skipped+=("SKIP $name: fails without compute-sanitizer: $(grep -m1 -E 'error|failed' \
      "$logs/plain.$name.out" | cut -c1-200)")
    continue
  fi
  for mode in graph eager; do
    for arena in 0 default; do
      queue "memcheck.run.$name.$mode.arena_$arena" memcheck 0 "$arena" -- \
        bin/recap run "$spec" --device cuda --mode "$mode" --warmup 1 --iters 1 --seed 1
    done
  done
done
wait

tool_errors=0
passed=0
failed=0
for id in "${ids[@]}"; do
  run=$logs/$id
  tool_errors=$((tool_errors + $(cat "$run.errors")))
  if [ "$(cat "$run.ok")" = 1 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "--- $id: exit status, first reports, end of output ---"
    grep -E '^========= [^ ]' "$run.sanlog" 2>/dev/null | grep -v -E 'SUMMARY|COMPUTE-SANITIZER' |
      head -10
    tail -5 "$run.out" 2>/dev/null
  fi
done
tar czf "$out/sanitize_logs.tgz" --exclude="*.tmp" -C "$logs" .
echo
echo "=== compute-sanitizer summary (RECAP_ALLOC_CONF=$RECAP_ALLOC_CONF except allocator_test;" \
  "budget ${budget} s per run, $jobs_max at once; $(($(date +%s) - script_start)) s in all;" \
  "$gpus GPU(s); test time scale $RECAP_TEST_TIME_SCALE) ==="
for id in "${ids[@]}"; do cat "$logs/$id.summary"; done
[ ${#skipped[@]} -eq 0 ] || printf '%s\n' "${skipped[@]}"
echo "sanitizer errors (deliberate traps excluded): $tool_errors"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
