#!/usr/bin/env bash
# Runs on the GPU machine from the staged bundle (bash stage/run.sh gpu_fold.sh): the folds
# into the decode GEMVs (engine/fuse.h: the norms as prologues when RECAP_FUSION_PROLOGUES=1;
# SwiGLU as the gate_up projection's gated output by default, or apart when gate_up takes its
# norm: docs/SERVING.md "Prologue folds" and "SwiGLU in the gate_up projection's epilogue").
#  1. The CUDA suites that check them: gemm_prologue_test (the folded linear on every path
#     against the host reference, M 1, 3, 16, 17, 64, f32/f16/bf16; the gated unit's refusal)
#     and pipeline_fusion_test.
#  2. `recap bench-decode` at the Llama 3.2 1B shape (batch 1 and 8) and the Qwen2 0.5B shape
#     (batch 1), with the folds and with RECAP_FUSION=0, alternated twice: step time, bandwidth
#     fraction and kernels per step of each.
# Results go to $OUT when the device tool sets it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/recap_fold_out}
mkdir -p "$out"
work=/tmp/recap_serving
mkdir -p "$work"
status=0
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
for t in gemm_prologue_test pipeline_fusion_test; do
  # From the stage root, as gpu_run.sh runs them: specs/ lies there.
  (cd "$here" && timeout 300 "tests/$t") >"$out/$t.log" 2>&1 || status=1
  grep -E "Run Summary|suites|tests|asserts|FAILED" "$out/$t.log"
done
for shape in llama-1b qwen2-0.5b; do
  dir="$work/$shape-shape"
  if [ ! -f "$dir/model.safetensors" ]; then
    if [ "$shape" = llama-1b ]; then
      python3 "$here/tools/make_bench_checkpoint.py" "$dir" || status=1
    else
      python3 "$here/tools/make_bench_checkpoint.py" "$dir" --shape "$shape" || status=1
    fi
  fi
  batches=1
  [ "$shape" = llama-1b ] && batches=1,8
  "$here/bin/recap" import-hf "$dir" -o "$work/$shape-fold.yaml" --paged --dtype bf16 \
    --batch 1,2,4,8 --max-seq 1024 --prefill 512 || status=1
  for round in 1 2; do
    for fusion in 1 0; do
      echo "== $shape round $round RECAP_FUSION=$fusion"
      RECAP_FUSION=$fusion "$here/bin/recap" bench-decode "$work/$shape-fold.yaml" \
        --batch "$batches" --context 512 --tokens 128 --repeats 5 --profile \
        --json "$out/bench_decode_${shape}_fusion${fusion}_round$round.json" || status=1
    done
  done
done
exit $status
