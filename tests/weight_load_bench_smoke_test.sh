#!/usr/bin/env bash
# The checkpoint-loading benchmark (bench/weight_load_bench.c) end to end at its small size on
# the host backend: it writes a sharded checkpoint, loads it as bf16 and cast to f32, checks
# every element and prints its RESULT lines. The GPU machine runs it at full size.
set -euo pipefail
bench=$1
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/weight_load_XXXXXX")
trap 'rm -rf "$dir"' EXIT
out=$("$bench" "$dir" --small --backend host --threads 3 --chunk-mib 1)
echo "$out"
for case in pinned bf16 'bf16->f32'; do
  grep -q "^RESULT $case " <<<"$out" || { echo "no RESULT line for $case"; exit 1; }
done
[ ! -e "$dir/ckpt" ] || { echo "the checkpoint was not removed"; exit 1; }
