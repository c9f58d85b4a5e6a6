#!/usr/bin/env bash
# Fuzzes every target in tests/fuzz/ for SECONDS each (default 60): builds them with
# --config=fuzz (clang-14, libFuzzer, ASan, UBSan), runs each over a temporary copy of its
# seed corpus and saved regressions (libFuzzer writes into its corpus folder; the checked-in
# one stays untouched), and copies any input that crashed, leaked, hung or ran out of memory
# into tests/fuzz/regressions/<target>/, where the ordinary test build replays it from then
# on. Fails if any target found something.
#
#   scripts/fuzz.sh [SECONDS]      BAZEL="bazel --output_base=/tmp/mine" scripts/fuzz.sh 600
#
# Prints each target's executions, and ends with "1 passed, 0 failed" or "0 passed, 1 failed"
# (the whole fuzz run is one test for .ci/run's count).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bazel_cmd=${BAZEL:-bazel}
# The targets are the keys of FUZZ_TARGETS in tests/fuzz/BUILD: one declared there is fuzzed
# here too, with no second list to keep in step.
mapfile -t targets < <(sed -n '/^FUZZ_TARGETS = {/,/^}/s/^ *"\([a-z0-9_]*\)":.*/\1/p' \
  tests/fuzz/BUILD)

fail() {
  echo "fuzz: $*" >&2
  echo "0 passed, 1 failed"
  exit 1
}

scripts/deps.sh || fail "dependencies missing"
[ ${#targets[@]} -gt 0 ] || fail "no FUZZ_TARGETS found in tests/fuzz/BUILD"
labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:${t}_fuzz"); done
$bazel_cmd build --config=fuzz "${labels[@]}" || fail "the fuzz build failed"
bin=$($bazel_cmd info --config=fuzz bazel-bin 2>/dev/null) || fail "bazel info failed"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
found=0
for t in "${targets[@]}"; do
  corpus="$work/$t/corpus"
  artifacts="$work/$t/artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  cp tests/fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=$PWD/tests/fuzz/$t.dict")
  log="$work/$t/log"
  echo "=== fuzzing $t for $seconds s ==="
  # -timeout: one input running 10 s is a hang. -max_len bounds inputs below each target's
  # own limit, so that time goes to inputs the target really parses.
  (cd "$work/$t" && UBSAN_OPTIONS=print_stacktrace=1 "$bin/tests/fuzz/${t}_fuzz" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$corpus") >"$log" 2>&1
  code=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$log"
  grep -E '^#[0-9]+.*(cov|DONE)' "$log" | tail -1
  shopt -s nullglob
  saved=("$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*)
  shopt -u nullglob
  if [ "$code" -ne 0 ] || [ ${#saved[@]} -gt 0 ]; then
    found=1
    grep -E 'ERROR|SUMMARY|runtime error|contract broken|==[0-9]+==' "$log" | head -20
    mkdir -p "tests/fuzz/regressions/$t"
    for f in "${saved[@]}"; do
      cp "$f" "tests/fuzz/regressions/$t/"
      echo "fuzz: $t: saved tests/fuzz/regressions/$t/$(basename "$f")"
    done
    [ ${#saved[@]} -gt 0 ] || tail -30 "$log"
    echo "fuzz: $t FAILED (exit $code)"
  else
    echo "fuzz: $t: no crash, leak, hang or broken contract"
  fi
done

if [ "$found" -ne 0 ]; then
  echo "fuzz: fix the code, keep the saved inputs as regressions (tests/fuzz:<target>_fuzz)"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
