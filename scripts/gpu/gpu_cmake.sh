#!/usr/bin/env bash
# Runs on the GPU machine from the staged bundle (bash stage/run.sh gpu_cmake.sh): the CUDA
# CMake build's installed files (scripts/gpu/stage_cmake.sh) on the GPU. recap --version and
# info from the installed CLI, the threaded pipeline example (it checks its own outputs against
# plain C), and greedy generation through the installed library against transformers' ids of
# the tiny llama fixture. Ends with "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=$here/cmake
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
passed=0
failed=0
check() { # NAME COMMAND...
  local name=$1
  shift
  if "$@"; then echo "PASS: $name"; passed=$((passed + 1)); else echo "FAIL: $name"; failed=$((failed + 1)); fi
}
check "installed recap --version" "$prefix/bin/recap" --version
check "installed recap info sees the GPU" bash -c "'$prefix/bin/recap' info | tee /dev/stderr | grep -q NVIDIA"
# The example checks its outputs and says which backend it ran on: here it must be the GPU.
on_the_gpu() {
  local out
  out=$("$@") || return 1
  echo "$out"
  ! grep -q 'host backend' <<<"$out"
}
check "embed_pipeline on the GPU" on_the_gpu "$prefix/examples/embed_pipeline"
work=$(mktemp -d)
# The tiny llama's prompt and transformers' greedy continuation, as scripts/cmake_check.sh reads
# them (every choice in it is clear).
model=$here/tests/data/models/llama
read -r prompt want < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
n = d["prompt_length"]
print(",".join(map(str, d["tokens"][:n])), ",".join(map(str, d["tokens"][n:])))
' "$model/expected.json")
"$prefix/bin/recap" import-hf "$model" -o "$work/llama.yaml" --paged --max-seq 64 >/dev/null
max_new=$(tr ',' '\n' <<<"$want" | grep -c .)
got=$("$prefix/examples/generate_tokens" "$work/llama.yaml" "$max_new" ${prompt//,/ })
got=${got// /,}
echo "generate_tokens on the GPU: got $got, transformers $want"
check "generate_tokens reproduces transformers' greedy ids" test "$got" = "$want"
rm -rf "$work"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
