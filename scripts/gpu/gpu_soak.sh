#!/usr/bin/env bash
# Runs on the GPU machine over the staged folder (scripts/gpu/stage_gpu.sh ... soak_test): the soak
# and the GPU half of the concurrency test, each with a time limit; logs go to $OUT.
#   1. tests/soak_test: 1,000,000 graph replays of tests/data/serve_tiny.yaml; process RSS,
#      allocator statistics and device free memory identical before and after (after a
#      warm-up), every 10,000th replay's result bit-identical (RECAP_SOAK_REPLAYS overrides).
#   2. recap serve-bench on the GPU: 8 worker threads, 100,000 requests, every result checked
#      against an eager reference.
#   bash stage/run.sh tools/gpu_soak.sh
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/recap_gpu_out}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
cd "$here"
failed=0
summary=()

(timeout 300 tests/soak_test) >"$out/soak_test.log" 2>&1
code=$?
grep -E '^soak|soak:|FAILED|INACTIVE' "$out/soak_test.log"
[ "$code" -ne 0 ] && failed=$((failed + 1)) && tail -20 "$out/soak_test.log"
summary+=("$(printf '%-40s exit %s' 'soak_test (1,000,000 replays)' "$code")")

(timeout 240 bin/recap serve-bench tests/data/serve_tiny.yaml --device cuda --threads 8 \
  --requests 100000 --seed 7) >"$out/serve_bench_gpu.log" 2>&1
code=$?
cat "$out/serve_bench_gpu.log"
[ "$code" -ne 0 ] && failed=$((failed + 1))
summary+=("$(printf '%-40s exit %s' 'serve-bench cuda 8 x 100,000' "$code")")

echo
echo "=== soak summary ==="
printf '%s\n' "${summary[@]}"
echo "$(( ${#summary[@]} - failed )) passed, $failed failed"
[ "$failed" -eq 0 ]
