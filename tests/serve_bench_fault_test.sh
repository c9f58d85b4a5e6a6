#!/usr/bin/env bash
# `recap serve-bench`'s exit status as a supervisor reads it (docs/RELIABILITY.md, "Device
# faults"): 3 means the device context of the process is lost and the worker process must be
# restarted; 1 means a failure a restart does not repair (out of memory, a bad spec); both
# print why and return promptly. On the host backend, whose failing kernels are sticky faults
# like a CUDA context's:
#   - a kernel that faults in every worker (tests/data/serve_fault.yaml: kv_append past its
#     cache), with 1 and with 8 workers: exit 3, the "restart the worker process" line, and
#     the --json file written with "ok": false;
#   - the device out of memory at creation (RECAP_HOST_MEMORY_BYTES=1048576, below one 2 MiB
#     segment): exit 1 naming the out-of-memory, never 3;
#   - a spec that does not load: exit 1, never 3.
#   serve_bench_fault_test.sh RECAP TINY_SPEC FAULT_SPEC
set -uo pipefail
recap=$1
tiny=$2
fault=$3
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# run NAME CMD...: runs a serve-bench command bounded by 120 s (times RECAP_TEST_TIME_SCALE,
# as in tests/test_util.h); sets $code and $out.
scale=${RECAP_TEST_TIME_SCALE:-1}
limit=$((120 * ${scale%%.*}))
run() {
  out=$tmp/$1.out
  shift
  timeout "$limit" "$@" >"$out" 2>&1
  code=$?
  [ "$code" -eq 124 ] && echo "(hung: killed after $limit s)" >>"$out"
  cat "$out"
}

for threads in 1 8; do
  run "fault_t$threads" "$recap" serve-bench "$fault" --device host --threads "$threads" \
    --requests 20 --seed 3 --json "$tmp/fault_t$threads.json"
  [ "$code" -eq 3 ] || fail "a device fault with $threads worker(s) exited with $code, not 3"
  grep -q "device fault: the device context is lost; restart the worker process" "$out" ||
    fail "a device fault with $threads worker(s) printed no restart line"
  grep -q '"ok": false' "$tmp/fault_t$threads.json" 2>/dev/null ||
    fail "a device fault with $threads worker(s) left no --json file saying \"ok\": false"
done

run oom env RECAP_HOST_MEMORY_BYTES=1048576 "$recap" serve-bench "$tiny" --device host \
  --threads 2 --requests 20 --seed 3
[ "$code" -eq 1 ] || fail "the device out of memory exited with $code, not 1"
grep -qi "out of memory" "$out" || fail "the device out of memory was not reported as such"
grep -q "restart the worker" "$out" && fail "an out-of-memory was reported as a device fault"

printf 'name: broken\nops: []\n' >"$tmp/broken.yaml"
run broken "$recap" serve-bench "$tmp/broken.yaml" --device host --requests 5
[ "$code" -eq 1 ] || fail "a spec that does not load exited with $code, not 1"
grep -q "restart the worker" "$out" && fail "a spec error was reported as a device fault"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: device fault -> 3 (1 and 8 workers, JSON ok=false), out of memory -> 1, bad spec -> 1"
