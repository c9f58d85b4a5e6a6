#!/usr/bin/env bash
# On the GPU machine, over the staged folder (scripts/gpu/stage_gpu.sh puts bench_sample in
# stage/bin, this script and peer_torch_sample.py in stage/tools): the sampling tests when they
# are staged (ops_cuda_sample_test, ops_host_sample_test), then bin/bench_sample and
# tools/peer_torch_sample.py (PyTorch's sort-based sampler captured as a CUDA graph) on the same
# logits, and the table of both with the ratios; the last line says whether recap's sample with
# every filter on, batch 64, takes at most half PyTorch's time. Logs and JSON go to $OUT.
#   scripts/gpu/stage_gpu.sh ops_cuda_sample_test ops_host_sample_test     # here
#   run(command="bash stage/run.sh tools/sample_bench.sh", carry=["stage"])  # the device tool
# Exit 0 only when every step ran, every staged test passed and the target was met.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/recap_sample_out}
py=${PYTHON:-python3}
logits=/tmp/recap_sample_logits.f32
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
status=0
for t in ops_cuda_sample_test ops_host_sample_test; do
  [ -x "$here/tests/$t" ] || continue
  (cd "$here" && timeout 600 "tests/$t") >"$out/$t.log" 2>&1
  code=$?
  echo "=== $t: exit $code"
  grep -E '^ +(suites|tests|asserts) |chi-square|drew another|FAILED|failed|inactive' "$out/$t.log"
  [ "$code" -ne 0 ] && status=1 && tail -40 "$out/$t.log"
done
echo "=== bench_sample"
timeout 300 "$here/bin/bench_sample" --logits "$logits" --json "$out/bench_sample.json" ||
  status=1
echo "=== peer_torch_sample"
timeout 300 "$py" "$here/tools/peer_torch_sample.py" --logits "$logits" \
  --json "$out/torch_sample.json" --recap-json "$out/bench_sample.json" || status=1
rm -f "$logits"
exit $status
