#!/usr/bin/env bash
# `recap serve-bench` as a concurrency test: 8 worker threads, each with its own clone
# (shared weights, own stream and captured graphs), serve 100,000 requests of random batch
# size on the host backend, and every result is checked against an eager reference. Tagged
# "threads", so CI also runs it under ThreadSanitizer (halt_on_error: any race fails it).
# tests/data/serve_tiny.yaml keeps each request small enough for about a minute under TSan on
# two cores; the timeout bounds a hang. Then a spec whose kernel faults must make serve-bench
# exit with status 3 (device fault: restart the worker process), not hang or exit 1.
#   serve_bench_threads_test.sh RECAP SPEC FAULT_SPEC [REQUESTS]
set -uo pipefail
recap=$1
spec=$2
fault_spec=$3
requests=${4:-100000}
out=${TEST_TMPDIR:-/tmp}/serve_bench_threads.out
# Hang deadlines stretch with RECAP_TEST_TIME_SCALE (sanitizer runs), as in tests/test_util.h.
scale=${RECAP_TEST_TIME_SCALE:-1}
limit=$((600 * ${scale%%.*}))
start=$(date +%s)
timeout "$limit" "$recap" serve-bench "$spec" --device host --threads 8 --requests "$requests" \
  --seed 12345 >"$out" 2>&1
code=$?
cat "$out"
echo "serve-bench took $(($(date +%s) - start)) s (exit $code)"
[ "$code" -eq 124 ] && echo "FAIL: serve-bench hung (killed after $limit s)"
if [ "$code" -ne 0 ]; then
  echo "FAIL: serve-bench exited with $code"
  exit 1
fi
want="checked $requests of $requests results against eager references: 0 mismatches"
if ! grep -q "^$want" "$out"; then
  echo "FAIL: expected the line '$want ...'"
  exit 1
fi
if grep -q "ThreadSanitizer" "$out"; then
  echo "FAIL: ThreadSanitizer reported a problem"
  exit 1
fi
echo "PASS: 8 threads x $requests requests, every result checked"

timeout $((120 * ${scale%%.*})) "$recap" serve-bench "$fault_spec" --device host --threads 8 --requests 100 \
  --seed 1 >"$out" 2>&1
code=$?
cat "$out"
if [ "$code" -ne 3 ] || ! grep -q "device fault: .*restart the worker process" "$out"; then
  echo "FAIL: a faulting kernel made serve-bench exit with $code, expected 3 and a device fault"
  exit 1
fi
echo "PASS: a device fault exits with status 3"
