#!/usr/bin/env bash
# Runs every test (GPU suites show as inactive without a GPU, and a binary of GPU suites only
# is not counted as passed) and ends with the line
# "N passed, N failed", derived from Bazel's "Executed N out of M tests: K tests pass" summary
# (failed = M - K, so a test that fails to build counts as failed). Extra arguments go to
# `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh || exit 1
log=$(mktemp)
# --test_summary=short lists every test run, which the inactive count below reads.
bazel test --test_summary=short "$@" //tests/... 2>&1 | tee "$log"
code=${PIPESTATUS[0]}
summary=$(grep -E '^Executed [0-9]+ out of [0-9]+ tests?' "$log" | tail -1)
# A binary whose suites all need a GPU exits 0 without running anything (tests/test_util.c), and
# so does python_test without numpy (tests/python_test.sh):
# Bazel calls it passed, so it is taken out of the passed count and reported as inactive.
# Only this run's tests count (the log folder keeps other runs' logs).
inactive=0
for name in $(sed -nE 's|^//tests:([A-Za-z0-9_]+) .*PASSED.*|\1|p' "$log"); do
  f=bazel-testlogs/tests/$name/test.log
  [ -f "$f" ] || continue
  grep -h "^INACTIVE suite" "$f" | sort -u
  grep -qE "^no test ran: (every suite needs a CUDA device|numpy is missing)" "$f" &&
    inactive=$((inactive + 1))
done
rm -f "$log"
if [ -z "$summary" ]; then
  echo "no test summary from bazel (the build failed before testing)"
  echo "0 passed, 1 failed"
  exit 1
fi
total=$(sed -E 's/^Executed [0-9]+ out of ([0-9]+) tests?.*/\1/' <<<"$summary")
passed=$(grep -oE '[0-9]+ tests? pass' <<<"$summary" | grep -oE '^[0-9]+' || echo 0)
if [ "$inactive" -gt 0 ]; then
  echo "$inactive test binaries inactive: every suite needs a GPU, or numpy (not counted as passed)"
  passed=$((passed - inactive))
  total=$((total - inactive))
fi
echo "$passed passed, $((total - passed)) failed"
exit "$code"
