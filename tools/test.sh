#!/usr/bin/env bash
# Runs every test (GPU suites show as inactive without a GPU) and ends with the line
# "N passed, N failed", derived from Bazel's "Executed N out of M tests: K tests pass" summary
# (failed = M - K, so a test that fails to build counts as failed). Extra arguments go to
# `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh || exit 1
log=$(mktemp)
bazel test "$@" //tests/... 2>&1 | tee "$log"
code=${PIPESTATUS[0]}
summary=$(grep -E '^Executed [0-9]+ out of [0-9]+ tests?' "$log" | tail -1)
rm -f "$log"
for f in bazel-testlogs/tests/*/test.log; do
  [ -f "$f" ] && grep -h "^INACTIVE suite" "$f" | sort -u
done
if [ -z "$summary" ]; then
  echo "no test summary from bazel (the build failed before testing)"
  echo "0 passed, 1 failed"
  exit 1
fi
total=$(sed -E 's/^Executed [0-9]+ out of ([0-9]+) tests?.*/\1/' <<<"$summary")
passed=$(grep -oE '[0-9]+ tests? pass' <<<"$summary" | grep -oE '^[0-9]+' || echo 0)
echo "$passed passed, $((total - passed)) failed"
exit "$code"
