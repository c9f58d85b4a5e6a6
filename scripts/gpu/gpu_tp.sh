#!/usr/bin/env bash
# Tensor-parallel serving of imported models on 2 GPUs (issue 27), over the staged folder
# (scripts/gpu/stage_gpu.sh). Needs transformers and torch on the machine (for the checkpoints
# and their reference). About 4.5 minutes; under 8. With --bench-only, steps 4, 4b and 4c only
# (about 3.5 minutes; no transformers needed).
#   run(command="bash stage/run.sh gpu_tp.sh", carry=["stage"], kind="nvidia-h100-x2")
#   run(command="bash stage/run.sh gpu_tp.sh --bench-only", carry=["stage"], kind="nvidia-h100-x2")
#
#   1. make two small real checkpoints with transformers (tools/make_tp_checkpoints.py): Llama
#      with grouped-query attention (8 heads, 4 KV heads, vocabulary 1001: padded at TP 2) and
#      GPT-2 (biases, fused c_attn, vocabulary 1003)
#   2. per model: recap generate greedy at TP 1 (one GPU) and TP 2 (recap launch --gpus 2, one
#      spec per rank from import-hf --tp 2), f32 and bf16, logits written by rank 0; then
#      tools/compare_tp.py: f32 TP 2 tokens == TP 1's and logits within the importer's rule of
#      TP 1 and of transformers; bf16 |TP 2 - TP 1 f32| <= 1.5 x |TP 1 bf16 - TP 1 f32|
#   3. the serving layout (--paged) at TP 2: the same greedy tokens as TP 1's contiguous run
#      (decode steps after the first carry only the run header)
#   4. benchmark at the Llama-3-8B shape (hidden 4096, 32 layers, 32 heads, 8 KV heads,
#      intermediate 14336, vocabulary 128256, untied; import-hf --random-weights, bf16, paged):
#      per-token decode latency at batch 1, TP 1 vs TP 2 (target: TP 2 <= 0.65 x TP 1); the
#      all_reduce at that size ([1, 4096] bf16) timed in a chain, x its 64 calls per token
#  4b. the same specs under recap bench-decode at batch 1 and 8, --profile, TP 1 on one GPU and
#      TP 2 on both (recap launch -- bench-decode --world 2): each rank's graph step with the
#      collectives inside it, its profiled eager step by op kind and by op name, the step's 64
#      all_reduces alone in one graph, and run_dist's cost per step; then
#      tools/tp_decode_report.py sets every op of TP 2's ranks against TP 1's. Then batch 1
#      with RECAP_PDL=0 at both TPs, and TP 2 imported with --no-tp-fold-residual (the residual
#      added after each all_reduce, against --tp's default fold; step 2 also judges that
#      import's f32 and bf16 logits against TP 1 by the same rules)
#  4c. serving throughput through the generation API (recap serve-bench --generate) at TP 1
#      and TP 2 (recap launch --gpus 2: rank 0 schedules, rank 1 follows), the 8B shape as a
#      paged serving spec with decode buckets up to 32: 64 requests, prompts 64-256, outputs
#      64-128, at most 32 running, one graph launch per decode step at both TPs
#      (RECAP_DECODE_LOOP=0: gpu_tp_loop.sh measures the loops); output tokens/s at each TP and
#      their ratio (random weights: TP 2's ranks
#      draw their own slices, so its tokens are not TP 1's; timing only). In the full run, the
#      small Llama (f32) serves 8 requests through the generator at TP 1 and TP 2: their greedy
#      tokens must be equal. About 90 s.
#   5. a rank killed (SIGKILL) mid-generation: rank 0 fails within its timeout, naming the
#      cause and the request it had in flight
# Prints PASS/FAIL per check, the numbers, and a summary line. Logs: $OUT/tp_logs.tgz.
set -uo pipefail
full=1
[ "${1:-}" = --bench-only ] && full=0
. "$(cd "$(dirname "$0")" && pwd)/gpu_multi_lib.sh" /tmp/recap_tp
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | head -4

median_of() { grep -m1 "^rank 0 of [0-9]*: prefill" "$1" | sed 's/.*median \([0-9.]*\) ms.*/\1/'; }

if [ "$full" = 1 ]; then
# 1. The checkpoints.
python3 "$here/tools/make_tp_checkpoints.py" "$work/ckpt" >"$work/make.log" 2>&1
code=$?
cat "$work/make.log" | tail -3
row "checkpoints (transformers)" "$([ $code = 0 ] && echo 1 || echo 0)" \
  "$(python3 -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)' 2>&1 | tail -1)"

# 2-3. Greedy tokens and logits at TP 1 and TP 2.
for m in llama gpt2; do
  d=$work/$m
  mkdir -p "$d"
  ck=$work/ckpt/$m
  prompt=$(python3 -c "import json; e = json.load(open('$ck/expected.json')); print(','.join(map(str, e['tokens'][:e['prompt_length']])))" 2>/dev/null)
  ok_import=1
  for dt in f32 bf16; do
    "$recap" import-hf "$ck" -o "$d/tp1_$dt.yaml" --dtype $dt --max-seq 128 >>"$d/import.log" 2>&1 || ok_import=0
    "$recap" import-hf "$ck" -o "$d/tp2_$dt.rank{rank}.yaml" --dtype $dt --max-seq 128 --tp 2 >>"$d/import.log" 2>&1 || ok_import=0
  done
  [ "$ok_import" = 1 ] || tail -5 "$d/import.log"
  row "$m import --tp 2" "$ok_import" "$(grep -c 'tensor parallel' "$d/import.log") TP imports"
  gen "$d/tp1_f32.log" 1 "$d/tp1_f32.yaml" --prompt-ids "$prompt" --max-new 16 --logits-out "$d/tp1_f32.r{rank}.logits"
  c1=$?
  gen "$d/tp2_f32.log" 2 "$d/tp2_f32.rank{rank}.yaml" --prompt-ids "$prompt" --max-new 16 --logits-out "$d/tp2_f32.r{rank}.logits"
  c2=$?
  # bf16: the prompt's positions only (each run's own greedy tokens would differ after them).
  gen "$d/tp1_bf16.log" 1 "$d/tp1_bf16.yaml" --prompt-ids "$prompt" --max-new 1 --logits-out "$d/tp1_bf16.r{rank}.logits"
  c3=$?
  gen "$d/tp2_bf16.log" 2 "$d/tp2_bf16.rank{rank}.yaml" --prompt-ids "$prompt" --max-new 1 --logits-out "$d/tp2_bf16.r{rank}.logits"
  c4=$?
  for k in tp1_f32 tp2_f32 tp1_bf16 tp2_bf16; do cp "$d/$k.r0.logits" "$d/$k.logits" 2>/dev/null; done
  tokens_of "$d/tp1_f32.log" 0 >"$d/tp1_f32.tokens"
  tokens_of "$d/tp2_f32.log" 0 >"$d/tp2_f32.tokens"
  ranks_agree=0
  [ -n "$(tokens_of "$d/tp2_f32.log" 0)" ] && [ "$(tokens_of "$d/tp2_f32.log" 0)" = "$(tokens_of "$d/tp2_f32.log" 1)" ] && ranks_agree=1
  ran=0
  [ "$c1$c2$c3$c4" = 0000 ] && ran=1
  [ "$ran" = 1 ] || for l in tp1_f32 tp2_f32 tp1_bf16 tp2_bf16; do tail -4 "$d/$l.log"; done
  row "$m generate TP1/TP2" "$((ran * ranks_agree))" "exits $c1 $c2 $c3 $c4; both TP 2 ranks generated the same tokens: $ranks_agree"
  python3 "$here/tools/compare_tp.py" "$ck/expected.json" "$d" >"$d/compare.log" 2>&1
  cc=$?
  sed 's/^/    /' "$d/compare.log"
  row "$m TP2 == TP1 (rule)" "$([ $cc = 0 ] && echo 1 || echo 0)" "$(grep -c '^PASS' "$d/compare.log") checks passed, $(grep -c '^FAIL' "$d/compare.log") failed"
  # The same checks for TP 2 without the residual folded into rank 0's partial sums (import-hf
  # --no-tp-fold-residual: an add after each all_reduce; 16-bit sums rounded at the residual's
  # scale once; the default above folds it), against the same TP 1 runs.
  f=$d/unfolded
  mkdir -p "$f"
  for dt in f32 bf16; do
    "$recap" import-hf "$ck" -o "$f/tp2_$dt.rank{rank}.yaml" --dtype $dt --max-seq 128 --tp 2 \
      --no-tp-fold-residual >>"$f/import.log" 2>&1
  done
  gen "$f/tp2_f32.log" 2 "$f/tp2_f32.rank{rank}.yaml" --prompt-ids "$prompt" --max-new 16 --logits-out "$f/tp2_f32.r{rank}.logits"
  gen "$f/tp2_bf16.log" 2 "$f/tp2_bf16.rank{rank}.yaml" --prompt-ids "$prompt" --max-new 1 --logits-out "$f/tp2_bf16.r{rank}.logits"
  for k in tp2_f32 tp2_bf16; do cp "$f/$k.r0.logits" "$f/$k.logits" 2>/dev/null; done
  cp "$d/tp1_f32.logits" "$d/tp1_bf16.logits" "$d/tp1_f32.tokens" "$f/" 2>/dev/null
  tokens_of "$f/tp2_f32.log" 0 >"$f/tp2_f32.tokens"
  python3 "$here/tools/compare_tp.py" "$ck/expected.json" "$f" >"$f/compare.log" 2>&1
  cc=$?
  sed 's/^/    /' "$f/compare.log"
  row "$m TP2 unfolded == TP1" "$([ $cc = 0 ] && echo 1 || echo 0)" "--no-tp-fold-residual: $(grep -c '^PASS' "$f/compare.log") checks passed, $(grep -c '^FAIL' "$f/compare.log") failed"
done

# 3. The serving layout across ranks: the same greedy tokens as TP 1 (contiguous).
d=$work/llama
ck=$work/ckpt/llama
prompt=$(python3 -c "import json; e = json.load(open('$ck/expected.json')); print(','.join(map(str, e['tokens'][:e['prompt_length']])))" 2>/dev/null)
"$recap" import-hf "$ck" -o "$d/paged.rank{rank}.yaml" --dtype f32 --max-seq 128 --paged --prefill 16,32 --tp 2 >"$d/paged_import.log" 2>&1
gen "$d/paged.log" 2 "$d/paged.rank{rank}.yaml" --prompt-ids "$prompt" --max-new 16
c=$?
paged_tokens=$(tokens_of "$d/paged.log" 0)
ok=0
[ "$c" = 0 ] && [ -n "$paged_tokens" ] && [ "$paged_tokens" = "$(cat "$d/tp1_f32.tokens")" ] && ok=1
[ "$ok" = 1 ] || { tail -5 "$d/paged.log"; echo "  TP 1: $(cat "$d/tp1_f32.tokens")"; echo "  paged TP 2: $paged_tokens"; }
row "llama paged TP2 tokens" "$ok" "exit $c; paged TP 2 == contiguous TP 1 greedy: $ok"
fi

# 4. Benchmark: the Llama-3-8B shape, random weights, bf16, serving layout, batch 1 (buckets
# 1 and 8: bench-decode times both; generate runs bucket 1).
b=$work/llama8b
llama_config "$b" 4096 32 32 8 14336 false
bench_prompt=$(seq -s, 1 16)
"$recap" import-hf "$b" -o "$b/tp1.yaml" --random-weights --paged --max-seq 2048 --prefill 16 --batch 1,8 >"$b/import.log" 2>&1
"$recap" import-hf "$b" -o "$b/tp2.rank{rank}.yaml" --random-weights --paged --max-seq 2048 --prefill 16 --batch 1,8 --tp 2 >>"$b/import.log" 2>&1
gen "$b/tp1.log" 1 "$b/tp1.yaml" --prompt-ids "$bench_prompt" --max-new 257
c1=$?
gen "$b/tp2.log" 2 "$b/tp2.rank{rank}.yaml" --prompt-ids "$bench_prompt" --max-new 257
c2=$?
l1=$(median_of "$b/tp1.log")
l2=$(median_of "$b/tp2.log")
ratio=$(python3 -c "print('%.3f' % ($l2 / $l1))" 2>/dev/null)
ok=0
[ "$c1" = 0 ] && [ "$c2" = 0 ] && [ -n "$ratio" ] && ok=1
[ "$ok" = 1 ] || { tail -5 "$b/tp1.log"; tail -5 "$b/tp2.log"; }
row "8B decode latency" "$ok" "batch 1, bf16: TP 1 ${l1:-?} ms/token, TP 2 ${l2:-?} ms/token: ${ratio:-?}x"
target=0
[ -n "$ratio" ] && target=$(python3 -c "print(int($ratio <= 0.65))")
row "8B TP2 <= 0.65 x TP1" "$target" "ratio ${ratio:-?} on $gpu_name"

# The all_reduce at the decode size: chains of 10 and 40 in one graph; the difference over 30
# is one all_reduce's cost without the run's fixed costs (header broadcast, host wait).
ar_ms() { # CHAIN: median ms per run of a chain of CHAIN all_reduces of [1, 4096] bf16
  local chain=$1 spec=$work/allreduce_$1.yaml
  {
    echo "name: allreduce-decode"
    echo "device: cuda"
    echo "dtype: bf16"
    echo "dims: {B: 1, D: 4096}"
    echo "tensors:"
    echo "  x0: {shape: [B, D], role: input}"
    echo "ops:"
    for i in $(seq 1 "$chain"); do echo "  - {op: all_reduce, in: x$((i - 1)), out: x$i}"; done
    echo "outputs: [x$chain]"
    echo "run: {warmup: 20, iters: 300}"
  } >"$spec"
  timeout 120 "$recap" launch --gpus 2 --timeout 60 -- run "$spec" --json - >"$work/ar_$chain.log" 2>&1
  grep '^{"rank": 0' "$work/ar_$chain.log" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["median_ms"])' 2>/dev/null
}
a10=$(ar_ms 10)
a40=$(ar_ms 40)
per_ar=$(python3 -c "print('%.4f' % (($a40 - $a10) / 30))" 2>/dev/null)
ar_total=$(python3 -c "print('%.3f' % (64 * $per_ar))" 2>/dev/null)
# What a distributed step costs besides its graph: the run header's broadcast, the launch and
# the host's wait (the chain of 10's run time less its 10 all_reduces).
step_cost=$(python3 -c "print('%.4f' % ($a10 - 10 * $per_ar))" 2>/dev/null)
ok=0
[ -n "$per_ar" ] && ok=1
row "all_reduce [1,4096] bf16" "$ok" "${per_ar:-?} ms each (chain 10: ${a10:-?} ms, 40: ${a40:-?} ms per run); x 64 per token (2 per layer) = ${ar_total:-?} ms of TP 2's ${l2:-?} ms; run_dist's own cost per step ${step_cost:-?} ms"

# 4b. bench-decode at TP 1 and TP 2, batch 1 and 8, with the profile on every rank.
bench_flags=(--batch 1,8 --context 512 --tokens 128 --repeats 3 --profile)
timeout 200 "$recap" bench-decode "$b/tp1.yaml" "${bench_flags[@]}" --json "$b/bench_tp1.json" \
  >"$b/bench_tp1.log" 2>&1
c1=$?
timeout 200 "$recap" launch --gpus 2 --timeout 60 -- bench-decode "$b/tp2.rank{rank}.yaml" \
  "${bench_flags[@]}" --json "$b/bench_tp2.r{rank}.json" >"$b/bench_tp2.log" 2>&1
c2=$?
echo "--- bench-decode TP 1 (exit $c1) ---"
cat "$b/bench_tp1.log"
echo "--- bench-decode TP 2 (exit $c2), every rank ---"
grep "^rank 0: " "$b/bench_tp2.log"
grep "^rank 1: " "$b/bench_tp2.log"
grep -v "^rank [01]: " "$b/bench_tp2.log" | tail -8
echo "--- TP 2 against TP 1 (tools/tp_decode_report.py) ---"
python3 "$here/tools/tp_decode_report.py" "$b/bench_tp1.json" "$b/bench_tp2.r0.json" \
  "$b/bench_tp2.r1.json" 2>&1 | tee "$b/bench_report.txt"
ok=0
[ "$c1" = 0 ] && [ "$c2" = 0 ] && [ -s "$b/bench_tp2.r1.json" ] && ok=1
bench_ratio=$(python3 -c "import json; a = json.load(open('$b/bench_tp1.json'))['results'][0]; b = json.load(open('$b/bench_tp2.r0.json'))['results'][0]; print('%.3f' % (b['graph_ms_per_step'] / a['graph_ms_per_step']))" 2>/dev/null)
row "8B bench-decode TP1/TP2" "$ok" "exits $c1 $c2; batch 1 graph step ratio ${bench_ratio:-?}x (report above)"
# What programmatic dependent launch is worth at each TP (the NCCL kernels are launched the
# ordinary way, so the chain of overlapped launches breaks at each of TP 2's 64 all_reduces):
# batch 1 again with RECAP_PDL=0.
pdl_ms() { # LOG: rank 0's (or the only) batch-1 graph ms
  grep -E "^(rank 0: )? +1 " "$1" | head -1 | awk '{print $(NF-8)}'
}
RECAP_PDL=0 timeout 120 "$recap" bench-decode "$b/tp1.yaml" --batch 1 --context 512 --tokens 64 \
  --repeats 2 >"$b/nopdl_tp1.log" 2>&1
RECAP_PDL=0 timeout 120 "$recap" launch --gpus 2 --timeout 60 -- bench-decode "$b/tp2.rank{rank}.yaml" \
  --batch 1 --context 512 --tokens 64 --repeats 2 >"$b/nopdl_tp2.log" 2>&1
p1=$(pdl_ms "$b/nopdl_tp1.log")
p2=$(pdl_ms "$b/nopdl_tp2.log")
g1=$(pdl_ms "$b/bench_tp1.log")
g2=$(pdl_ms "$b/bench_tp2.log")
ok=0
[ -n "$p1" ] && [ -n "$p2" ] && ok=1
[ "$ok" = 1 ] || { tail -3 "$b/nopdl_tp1.log"; tail -3 "$b/nopdl_tp2.log"; }
row "8B batch 1, PDL off" "$ok" "graph ms PDL on/off: TP 1 ${g1:-?}/${p1:-?}, TP 2 ${g2:-?}/${p2:-?}"
# TP 2 with the fold off (import-hf --no-tp-fold-residual: the residual added after each
# all_reduce, 64 add kernels more per step) against --tp's default, the fold on (tp2 above).
"$recap" import-hf "$b" -o "$b/tp2u.rank{rank}.yaml" --random-weights --paged --max-seq 2048 --prefill 16 --batch 1,8 --tp 2 --no-tp-fold-residual >>"$b/import.log" 2>&1
timeout 120 "$recap" launch --gpus 2 --timeout 60 -- bench-decode "$b/tp2u.rank{rank}.yaml" \
  --batch 1,8 --context 512 --tokens 64 --repeats 2 >"$b/unfolded_tp2.log" 2>&1
grep "^rank 0: " "$b/unfolded_tp2.log" | head -8
u2=$(pdl_ms "$b/unfolded_tp2.log")
ok=0
[ -n "$u2" ] && ok=1
[ "$ok" = 1 ] || tail -3 "$b/unfolded_tp2.log"
row "8B TP 2 fold off vs on" "$ok" "batch 1 graph ms: TP 2 fold off ${u2:-?}, on (default) ${g2:-?} (TP 1 ${g1:-?})"

# 4c. Serving throughput through the generation API at TP 1 and TP 2.
serve_flags=(--generate --requests 64 --prompt-len 64,256 --output-len 64,128 --max-running 32 --kv-fraction 0.15 --seed 7)
"$recap" import-hf "$b" -o "$b/serve_tp1.yaml" --random-weights --paged --max-seq 512 --prefill 64,256 \
  --batch 1,2,4,8,16,32 >>"$b/import.log" 2>&1
"$recap" import-hf "$b" -o "$b/serve_tp2.rank{rank}.yaml" --random-weights --paged --max-seq 512 \
  --prefill 64,256 --batch 1,2,4,8,16,32 --tp 2 >>"$b/import.log" 2>&1
# Both TPs without decode loops (the ranks inherit the variable), so each launches one graph
# per decode step; gpu_tp_loop.sh compares loops.
RECAP_DECODE_LOOP=0 timeout 150 "$recap" serve-bench "$b/serve_tp1.yaml" "${serve_flags[@]}" \
  >"$b/serve_tp1.log" 2>&1
c1=$?
RECAP_DECODE_LOOP=0 timeout 150 "$recap" launch --gpus 2 --timeout 60 -- serve-bench "$b/serve_tp2.rank{rank}.yaml" \
  "${serve_flags[@]}" >"$b/serve_tp2.log" 2>&1
c2=$?
s1=$(grep -m1 "^output tokens/s" "$b/serve_tp1.log" | awk '{print $3}')
s2=$(grep -m1 "^output tokens/s" "$b/serve_tp2.log" | awk '{print $3}')
serve_ratio=$(python3 -c "print('%.3f' % ($s2 / $s1))" 2>/dev/null)
echo "--- serve-bench --generate TP 1 (exit $c1) ---"
grep -v "^recap generator" "$b/serve_tp1.log" | tail -9
echo "--- serve-bench --generate TP 2 (exit $c2) ---"
grep -v "^recap generator" "$b/serve_tp2.log" | tail -12
ok=0
[ "$c1" = 0 ] && [ "$c2" = 0 ] && [ -n "$serve_ratio" ] && ok=1
[ "$ok" = 1 ] || { tail -5 "$b/serve_tp1.log"; tail -5 "$b/serve_tp2.log"; }
row "8B serving TP1/TP2" "$ok" "64 requests, <= 32 running, bf16: TP 1 ${s1:-?}, TP 2 ${s2:-?} output tokens/s: ${serve_ratio:-?}x"
if [ "$full" = 1 ]; then
  d=$work/llama
  ck=$work/ckpt/llama
  small_flags=(--generate --requests 8 --prompt-len 8,32 --output-len 8,32 --max-running 4 --kv-fraction 0.01 --seed 3)
  "$recap" import-hf "$ck" -o "$d/serve_tp1.yaml" --dtype f32 --max-seq 128 --paged --prefill 16,32 \
    --batch 1,2,4 >"$d/serve_import.log" 2>&1
  "$recap" import-hf "$ck" -o "$d/serve_tp2.rank{rank}.yaml" --dtype f32 --max-seq 128 --paged \
    --prefill 16,32 --batch 1,2,4 --tp 2 >>"$d/serve_import.log" 2>&1
  RECAP_DECODE_LOOP=0 timeout 120 "$recap" serve-bench "$d/serve_tp1.yaml" "${small_flags[@]}" \
    --tokens-out "$d/serve_tp1.tokens" \
    >"$d/serve_tp1.log" 2>&1
  c1=$?
  RECAP_DECODE_LOOP=0 timeout 120 "$recap" launch --gpus 2 --timeout 60 -- serve-bench \
    "$d/serve_tp2.rank{rank}.yaml" "${small_flags[@]}" --tokens-out "$d/serve_tp2.tokens" \
    >"$d/serve_tp2.log" 2>&1
  c2=$?
  agree=$(tokens_agree "$d/serve_tp1.tokens" "$d/serve_tp2.tokens")
  ok=0
  [ "$c1" = 0 ] && [ "$c2" = 0 ] && [ "${agree%% *}" = 8/8 ] && ok=1
  [ "$ok" = 1 ] || { tail -5 "$d/serve_tp1.log"; tail -5 "$d/serve_tp2.log"; }
  row "llama serving TP2 == TP1" "$ok" "f32, 8 requests through the generator: exits $c1 $c2; equal / all, mean common prefix: ${agree:-?}"
fi

if [ "$full" = 1 ]; then
# 5. A rank killed mid-generation (the 8B TP 2 specs: ~5 ms per step, so 2000 steps last long
# enough): rank 0 must fail on its own within --timeout 10, naming the request in flight.
t0=$(date +%s)
timeout 150 "$recap" launch --gpus 2 --timeout 10 --grace 20 -- generate "$b/tp2.rank{rank}.yaml" \
  --prompt-ids "$bench_prompt" --max-new 2000 >"$work/kill.log" 2>&1 &
kill_rank1_after "^rank 1 of 2: prompt done" "$work/kill.log" $!
ok=0
[ -n "$victim" ] && [ "$code" = 1 ] && grep -q "rank 1: killed by signal 9" "$work/kill.log" &&
  grep -q "rank 0: exit 1" "$work/kill.log" && grep -q "(rank 0): request in flight" "$work/kill.log" &&
  [ $((ended_at - killed_at)) -lt 30 ] && ok=1
[ "$ok" = 1 ] || tail -12 "$work/kill.log"
why=$(grep -m1 "(rank 0): a decode step" "$work/kill.log" | cut -c1-150)
row "rank killed mid-decode" "$ok" "launch exit $code, rank 0 failed $((ended_at - killed_at)) s after the kill: ${why:-no message}"
grep -m1 "(rank 0): request in flight" "$work/kill.log"
fi

tar czf "$out/tp_logs.tgz" -C "$work" --exclude='*.logits' --exclude='*.safetensors' . 2>/dev/null
echo
echo "=== tensor-parallel summary ($gpu_name, $(($(date +%s) - start)) s) ==="
printf '%s\n' "${rows[@]}"
echo
echo "Benchmark (docs/BENCHMARKS.md): Llama-3-8B shape, bf16, random weights, batch 1, paged, graph"
echo "| GPUs | decode latency per token | vs 1 GPU |"
echo "|---|---|---|"
echo "| 1 x $gpu_name | ${l1:-?} ms | 1.00x |"
echo "| 2 x $gpu_name (TP 2) | ${l2:-?} ms | ${ratio:-?}x |"
echo "all_reduce per token: 64 x ${per_ar:-?} ms = ${ar_total:-?} ms; run_dist per step (header broadcast, launch, wait): ${step_cost:-?} ms"
echo
echo "Serving (recap serve-bench --generate): Llama-3-8B shape, bf16, random weights, 64 requests,"
echo "prompts 64-256, outputs 64-128, at most 32 running, one graph launch per decode step (RECAP_DECODE_LOOP=0 at both TPs)"
echo "| GPUs | output tokens/s | vs 1 GPU |"
echo "|---|---|---|"
echo "| 1 x $gpu_name | ${s1:-?} | 1.00x |"
echo "| 2 x $gpu_name (TP 2) | ${s2:-?} | ${serve_ratio:-?}x |"
echo "$(( ${#rows[@]} - failed )) passed, $failed failed (tensor-parallel checks)"
