#!/usr/bin/env bash
# Runs on the GPU machine over the staged folder (scripts/gpu/stage_gpu.sh): the Python
# package's tests against the bundle's CUDA librecap.so with PyTorch (python/tests, the torch
# ones included), then the in-process benchmark of recap's Pipeline next to
# torch.cuda.CUDAGraph replay (tools/inprocess_torch.py over specs/mlp_decode.yaml). One
# PASS/FAIL line each at the end; logs and the benchmark's JSON go to $OUT.
#   run(command="bash stage/run.sh gpu_python.sh", carry=["stage"])
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/recap_gpu_out}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
export RECAP_LIBRARY=$here/bin/librecap.so PYTHONPATH=$here/python
python=${PYTHON:-python3}
"$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch",
  torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' 2>&1
lines=()
failed=0
# line NAME PASS|FAIL DETAIL...: one summary line.
line() {
  local name=$1 verdict=$2
  shift 2
  [ "$verdict" = PASS ] || failed=$((failed + 1))
  lines+=("$(printf '%-10s %s  %s' "$name" "$verdict" "$*")")
}

# 1. The tests. The generator tests read a small serving spec of the llama fixture, made here
#    as tests/python_test.sh makes it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/tests/data/models/llama/expected.json" "$work/"
"$here/bin/recap" import-hf "$here/tests/data/models/llama" -o "$work/serve.yaml" --max-seq 64 \
  --paged --block-size 4 --kv-blocks 20 --batch 1,2,4,8 --prefill 16,32 >/dev/null 2>&1 &&
  export RECAP_TEST_SERVE_SPEC=$work/serve.yaml
log=$out/python_tests.log
(cd "$work" && timeout 600 "$python" -m unittest discover -v -s "$here/python/tests" \
  -t "$here/python/tests") >"$log" 2>&1
code=$?
ran=$(grep -Eo '^Ran [0-9]+ tests' "$log" | grep -Eo '[0-9]+')
skipped=$(grep -c ' \.\.\. skipped' "$log")
torch_skipped=$(grep -c 'test_torch_cuda.* \.\.\. skipped' "$log")
tail -40 "$log"
if [ "$code" = 0 ] && [ "${torch_skipped:-0}" = 0 ] && [ -n "$ran" ]; then
  line unittest PASS "$ran tests, $skipped skipped (none of the torch ones)"
else
  line unittest FAIL "exit $code, ${ran:-no} tests, $skipped skipped ($torch_skipped torch" \
    "tests skipped): $log"
fi

# 2. The in-process benchmark: every bucket of mlp_decode, outputs checked against torch's.
log=$out/inprocess_torch.log
(cd "$here" && timeout 600 "$python" tools/inprocess_torch.py specs/mlp_decode.yaml \
  --json "$out/inprocess_torch.json") >"$log" 2>&1
code=$?
cat "$log"
if [ "$code" = 0 ]; then
  line inprocess PASS "$(grep -c 'check ok' "$log") batches, outputs match torch's:" \
    "$out/inprocess_torch.json"
else
  line inprocess FAIL "exit $code: $log"
fi

echo
printf '%s\n' "${lines[@]}"
exit $((failed > 0))
