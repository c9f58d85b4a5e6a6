#!/usr/bin/env bash
# Runs on the GPU machine from the staged bundle (bash stage/run.sh gpu_decode_loop.sh): the
# decode loop (docs/SERVING.md, "The decode loop"), about 3 minutes.
#  1. The WHILE node on CUDA (runtime_while_test: loop semantics with copies and the condition
#     kernel; what the driver says to a host function in a body) and the decode loop on CUDA
#     (generator_loop_test: loop vs one launch per step, same tokens, greedy and seeded, also
#     with a step that draws from the device generator (noise on the logits) and the
#     generator's state after the loops; the loop API's ring order, block stop and
#     %globaltimer stamps, and that a return request ends only its own launch). The body is
#     the step with the publish kernel beside it, then the control kernel, which sets the
#     WHILE condition itself (cudaGraphSetConditional in decode_loop.cu).
#  2. The same with RECAP_PDL=0: recap's kernels launch with programmatic dependent launch, so
#     the decode step's graph has programmatic edges; run 1 passing with PDL on says the driver
#     accepts those edges inside a WHILE body (the summary line says which runs passed).
#  3. The switch: `recap generate` on a fixture with loops and with RECAP_DECODE_LOOP=0, same
#     tokens; the generator's start-up line says which mode it took.
#  4. The benchmark: `recap bench-loop` at batch 1 and 8 on a 4-layer, hidden-512 Llama
#     (random bf16 weights) and on the Llama 3.2 1B shape: ms per step, tokens/s and CPU us per
#     token for one launch per step with a sleep-poll wait per step (step-sync) and with a
#     blocking event wait (step-block), step N + 1 enqueued before step N's tokens are read
#     (step-ahead), loops read with recap_decode_loop_wait (loop) and with the sleep-poll
#     (loop-poll); the GPU's median gap between steps and the token delivery delay p50/p99
#     for both loop readers.
# Results go to $OUT when the device tool sets it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/recap_decode_loop_out}
mkdir -p "$out"
work=/tmp/recap_decode_loop
mkdir -p "$work"
status=0
summary=()
note() { summary+=("$1"); echo "== $1"; }

# From the stage root, as gpu_run.sh runs them: the tests read tests/data/ from there.
cd "$here" || exit 1
if tests/runtime_while_test > "$out/runtime_while_test.txt" 2>&1; then note "runtime_while_test: pass"
else note "runtime_while_test: FAIL"; status=1; fi
grep -A1 "host function in a WHILE body" "$out/runtime_while_test.txt" | head -4
if tests/generator_loop_test > "$out/generator_loop_test.txt" 2>&1; then
  note "generator_loop_test (PDL on): pass"
else
  note "generator_loop_test (PDL on): FAIL"; status=1
fi
if RECAP_PDL=0 tests/generator_loop_test > "$out/generator_loop_test_nopdl.txt" 2>&1; then
  note "generator_loop_test (RECAP_PDL=0): pass"
else
  note "generator_loop_test (RECAP_PDL=0): FAIL"; status=1
fi
tail -6 "$out/generator_loop_test.txt"

# The switch, on the Qwen3 fixture imported in the paged layout.
bin/recap import-hf tests/data/models/qwen3 -o "$work/qwen3_paged.yaml" --paged \
  --batch 1,2,4,8 --max-seq 256 --prefill 32 > /dev/null || status=1
bin/recap generate "$work/qwen3_paged.yaml" --prompt-ids 1,2,3,4,5 --max-tokens 100 \
  > "$out/generate_loop.txt" 2>&1 || status=1
RECAP_DECODE_LOOP=0 bin/recap generate "$work/qwen3_paged.yaml" --prompt-ids 1,2,3,4,5 \
  --max-tokens 100 > "$out/generate_step.txt" 2>&1 || status=1
grep "recap generator:" "$out/generate_loop.txt" "$out/generate_step.txt" | grep -i "loop\|launch"
if grep -q '^generated:' "$out/generate_loop.txt" &&
   diff <(grep '^generated:' "$out/generate_loop.txt") \
        <(grep '^generated:' "$out/generate_step.txt") > /dev/null; then
  note "generate: same tokens with loops and with RECAP_DECODE_LOOP=0"
else
  note "generate: tokens DIFFER between loops and RECAP_DECODE_LOOP=0"; status=1
fi

# The benchmark: the small model (launch overhead matters) and the 1B shape.
if [ ! -f "$work/small/model.safetensors" ]; then
  python3 "$here/tools/make_bench_checkpoint.py" "$work/small" --layers 4 --hidden 512 \
    --heads 8 --kv-heads 2 --ffn 2048 --vocab 32000 || status=1
fi
bin/recap import-hf "$work/small" -o "$work/small_paged.yaml" --paged --dtype bf16 \
  --batch 1,8 --max-seq 1024 --prefill 64 > /dev/null || status=1
bin/recap bench-loop "$work/small_paged.yaml" --batch 1,8 --context 128 --tokens 512 \
  --steps 64 --repeats 3 --json "$out/bench_loop_small.json" | tee "$out/bench_loop_small.txt" \
  || status=1
if [ ! -f "$work/llama-1b-shape/model.safetensors" ]; then
  python3 "$here/tools/make_bench_checkpoint.py" "$work/llama-1b-shape" || status=1
fi
bin/recap import-hf "$work/llama-1b-shape" -o "$work/llama-1b-paged.yaml" --paged --dtype bf16 \
  --batch 1,8 --max-seq 1024 --prefill 64 > /dev/null || status=1
bin/recap bench-loop "$work/llama-1b-paged.yaml" --batch 1,8 --context 512 --tokens 256 \
  --steps 64 --repeats 3 --json "$out/bench_loop_1b.json" | tee "$out/bench_loop_1b.txt" \
  || status=1

echo
printf '%s\n' "${summary[@]}"
exit $status
