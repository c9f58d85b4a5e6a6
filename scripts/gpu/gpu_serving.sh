#!/usr/bin/env bash
# Runs on the GPU machine from the staged bundle (bash stage/run.sh gpu_serving.sh): the serving
# benchmarks of docs/SERVING.md.
#  1. A checkpoint at the shape of Llama 3.2 1B (random bf16 weights: the work does not depend
#     on them), imported in the paged serving layout, and `recap bench-decode` at batch 1, 8,
#     32 and 64 with 512-token contexts, decode tokens 1-128 (step time, tokens/s, the bytes a
#     step must read against a device-to-device copy measured in the same run, kernels per step,
#     GEMM share).
#     Then the peer: transformers' StaticCache decode under torch.compile(reduce-overhead).
#  2. `recap serve-bench --generate` on the same spec: 512 synthetic requests through the
#     generation API (continuous batching): output tokens/s, TTFT and TPOT, preemptions; then
#     transformers' continuous batching on the same request set (SKIP_PEER_BATCH=1 skips it).
#  3. Start-up: every decode and prefill bucket captured, timed from the end of weight loading.
#  4. The sampler against PyTorch's sort-based path captured in a CUDA graph, same run.
# Results go to $OUT when the device tool sets it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/recap_serving_out}
mkdir -p "$out"
work=/tmp/recap_serving
mkdir -p "$work"
status=0
if [ ! -f "$work/llama-1b-shape/model.safetensors" ]; then
  python3 "$here/tools/make_bench_checkpoint.py" "$work/llama-1b-shape" || status=1
fi
"$here/bin/recap" import-hf "$work/llama-1b-shape" -o "$work/llama-1b-paged.yaml" --paged \
  --dtype bf16 --batch 1,2,4,8,16,32,64 --max-seq 1024 --prefill 512 || status=1
"$here/bin/recap" bench-decode "$work/llama-1b-paged.yaml" --batch 1,8,32,64 --context 512 \
  --tokens 128 --repeats 5 --profile --json "$out/bench_decode.json" || status=1
# The peer at batch 1: transformers with a StaticCache and torch.compile(reduce-overhead).
python3 "$here/tools/peer_hf_decode.py" "$work/llama-1b-shape" --context 512 --tokens 128 \
  --json "$out/peer_hf_decode.json" || status=1
# Continuous batching through the generation API: 512 requests, prompts 64-512, outputs
# 64-256 tokens, all submitted at once, greedy, at most 64 running; then transformers'
# continuous batching (its CUDA graphs and paged attention, settings swept) on the same set.
"$here/bin/recap" serve-bench "$work/llama-1b-paged.yaml" --generate --requests 512 \
  --prompt-len 64,512 --output-len 64,256 --max-running 64 \
  --save-requests "$work/requests.json" --json "$out/serve_generate.json" || status=1
if [ "${SKIP_PEER_BATCH:-0}" != 1 ]; then
  timeout "${PEER_BATCH_TIMEOUT:-300}" python3 "$here/tools/peer_hf_generate_batch.py" \
    "$work/llama-1b-shape" "$work/requests.json" --max-running 64 \
    --json "$out/peer_hf_generate_batch.json" || status=1
fi
# Other shapes, untuned, at batch 1: the bandwidth fraction must stay within 10 points of the
# 1B's (SKIP_SHAPES=1 skips them).
if [ "${SKIP_SHAPES:-0}" != 1 ]; then
  for shape in qwen2-0.5b qwen3-1.7b llama-3b; do
    dir="$work/$shape-shape"
    [ -f "$dir/model.safetensors" ] ||
      python3 "$here/tools/make_bench_checkpoint.py" "$dir" --shape "$shape" || status=1
    "$here/bin/recap" import-hf "$dir" -o "$work/$shape.yaml" --paged --dtype bf16 --batch 1 \
      --max-seq 1024 --prefill 512 || status=1
    "$here/bin/recap" bench-decode "$work/$shape.yaml" --batch 1 --context 512 --tokens 128 \
      --repeats 3 --json "$out/bench_decode_$shape.json" || status=1
    rm -rf "$dir"  # the 3B's 6 GB would crowd the machine's disk
  done
  python3 - "$out" <<'PY' || status=1
import json, os, sys
out = sys.argv[1]
def fraction(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    rows = [r for r in json.load(open(path))["results"] if r["batch"] == 1]
    return rows[0]["fraction_of_copy"] if rows else None
base = fraction("bench_decode.json")
for shape in ("qwen2-0.5b", "qwen3-1.7b", "llama-3b"):
    f = fraction("bench_decode_%s.json" % shape)
    if base is None or f is None:
        print("shape %s: no result" % shape)
        continue
    print("shape %-11s batch 1: %.1f%% of copy bandwidth (1B shape %.1f%%): %s" %
          (shape, 100 * f, 100 * base, "within 10 points" if abs(f - base) <= 0.10 else "MISSES"))
PY
fi
# Start-up: decode buckets 1, 2, 4, 8, then steps of 8 to 256, and prefill buckets 64, 256 and
# 512, RECAP_TUNE off: the generator prints the graph memory before capturing and the time from
# the end of weight loading to every bucket captured.
decode_buckets="1,2,4,$(seq -s, 8 8 256)"
"$here/bin/recap" import-hf "$work/llama-1b-shape" -o "$work/llama-1b-startup.yaml" --paged \
  --dtype bf16 --batch "$decode_buckets" --max-seq 1024 --prefill 64,256,512 || status=1
RECAP_TUNE=0 "$here/bin/recap" generate "$work/llama-1b-startup.yaml" --prompt-ids 1,2,3 \
  --max-tokens 4 2>&1 | tee "$out/startup.txt" || status=1
# The sampler against PyTorch (its tests first when staged); its logs and JSON go to $OUT too.
OUT=$out bash "$here/tools/sample_bench.sh" || status=1
exit $status
