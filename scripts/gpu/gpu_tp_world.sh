#!/usr/bin/env bash
# Tensor parallelism beyond two GPUs (issue 27 at world 4, or any world the machine has), over
# the staged folder (scripts/gpu/stage_gpu.sh). Needs transformers and torch there (the
# checkpoints and their reference). About 4 minutes at world 4.
#   run(command="bash stage/run.sh gpu_tp_world.sh 4", carry=["stage"], kind="nvidia-h100-x4")
# Checks at TP W (the argument, default 4; the machine needs W GPUs):
#   1. tools/make_tp_checkpoints.py's Llama (8 heads, 4 KV heads, vocabulary 1001: padded at
#      TP 4) and GPT-2 (8 heads, vocabulary 1003, fused c_attn): recap generate greedy at TP 1 and
#      TP W, f32 and bf16, judged by tools/compare_tp.py (the importer's rule against
#      transformers and against TP 1; bf16 TP W within 1.5x of TP 1 bf16's error)
#   2. the Llama in the serving layout (--paged) at TP W: TP 1's greedy tokens
#   3. the Llama (f32) serving 8 requests through the generator (decode loops on) at TP 1 and
#      TP W: the same greedy tokens for every request
#   4. the Llama-3-8B shape (random bf16 weights), batch-1 TPOT through the generator with
#      loops at TP 1, TP 2 and TP W, on the same machine
#   5. rank 1 of W killed mid-generation: rank 0 fails within its timeout, naming the cause
# Prints PASS/FAIL per check and a summary line. Logs: $OUT/tp_world_logs.tgz.
set -uo pipefail
world=${1:-4}
. "$(cd "$(dirname "$0")" && pwd)/gpu_multi_lib.sh" /tmp/recap_tp_world
nvidia-smi --query-gpu=index,name --format=csv,noheader 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge "$world" ] || { echo "TP $world needs $world GPUs; this machine has $gpus"; exit 1; }

# 1. Greedy tokens and logits at TP 1 and TP W.
python3 "$here/tools/make_tp_checkpoints.py" "$work/ckpt" >"$work/make.log" 2>&1
row "checkpoints (transformers)" "$([ $? = 0 ] && echo 1 || echo 0)" "$(tail -1 "$work/make.log")"
for m in llama gpt2; do
  d=$work/$m
  mkdir -p "$d"
  ck=$work/ckpt/$m
  prompt=$(python3 -c "import json; e = json.load(open('$ck/expected.json')); print(','.join(map(str, e['tokens'][:e['prompt_length']])))" 2>/dev/null)
  codes=""
  for dt in f32 bf16; do
    "$recap" import-hf "$ck" -o "$d/tp1_$dt.yaml" --dtype $dt --max-seq 128 >>"$d/import.log" 2>&1
    "$recap" import-hf "$ck" -o "$d/tp${world}_$dt.rank{rank}.yaml" --dtype $dt --max-seq 128 \
      --tp "$world" >>"$d/import.log" 2>&1 || tail -3 "$d/import.log"
    # bf16: the prompt's positions only (each run's own greedy tokens would differ after them).
    new=16
    [ $dt = bf16 ] && new=1
    gen "$d/tp1_$dt.log" 1 "$d/tp1_$dt.yaml" --prompt-ids "$prompt" --max-new $new \
      --logits-out "$d/tp1_$dt.r{rank}.logits"
    codes="$codes $?"
    gen "$d/tp${world}_$dt.log" "$world" "$d/tp${world}_$dt.rank{rank}.yaml" --prompt-ids "$prompt" \
      --max-new $new --logits-out "$d/tp${world}_$dt.r{rank}.logits"
    codes="$codes $?"
    for k in tp1_$dt tp${world}_$dt; do cp "$d/$k.r0.logits" "$d/$k.logits" 2>/dev/null; done
  done
  tokens_of "$d/tp1_f32.log" 0 >"$d/tp1_f32.tokens"
  tokens_of "$d/tp${world}_f32.log" 0 >"$d/tp${world}_f32.tokens"
  agree=1
  for r in $(seq 1 $((world - 1))); do
    [ "$(tokens_of "$d/tp${world}_f32.log" $r)" = "$(cat "$d/tp${world}_f32.tokens")" ] || agree=0
  done
  [ "$codes" = " 0 0 0 0" ] || for l in "$d"/*.log; do tail -3 "$l"; done
  row "$m generate TP1/TP$world" "$([ "$codes" = " 0 0 0 0" ] && echo $agree || echo 0)" \
    "exits$codes; every rank generated rank 0's tokens: $agree"
  python3 "$here/tools/compare_tp.py" "$ck/expected.json" "$d" "$world" >"$d/compare.log" 2>&1
  cc=$?
  sed 's/^/    /' "$d/compare.log"
  row "$m TP$world == TP1 (rule)" "$([ $cc = 0 ] && echo 1 || echo 0)" \
    "$(grep -c '^PASS' "$d/compare.log") checks passed, $(grep -c '^FAIL' "$d/compare.log") failed"
done

# 2. The serving layout at TP W: TP 1's greedy tokens (contiguous layout).
d=$work/llama
ck=$work/ckpt/llama
prompt=$(python3 -c "import json; e = json.load(open('$ck/expected.json')); print(','.join(map(str, e['tokens'][:e['prompt_length']])))" 2>/dev/null)
"$recap" import-hf "$ck" -o "$d/paged.rank{rank}.yaml" --dtype f32 --max-seq 128 --paged \
  --prefill 16,32 --tp "$world" >"$d/paged_import.log" 2>&1
gen "$d/paged.log" "$world" "$d/paged.rank{rank}.yaml" --prompt-ids "$prompt" --max-new 16
c=$?
ok=0
[ "$c" = 0 ] && [ -n "$(tokens_of "$d/paged.log" 0)" ] &&
  [ "$(tokens_of "$d/paged.log" 0)" = "$(cat "$d/tp1_f32.tokens")" ] && ok=1
[ "$ok" = 1 ] || tail -5 "$d/paged.log"
row "llama paged TP$world tokens" "$ok" "exit $c; paged TP $world == contiguous TP 1 greedy: $ok"

# 3. Eight requests through the generator, decode loops on, at TP 1 and TP W.
small=(--generate --requests 8 --prompt-len 8,32 --output-len 8,32 --max-running 4 --kv-fraction 0.01 --seed 3)
"$recap" import-hf "$ck" -o "$d/serve_tp1.yaml" --dtype f32 --max-seq 128 --paged --prefill 16,32 \
  --batch 1,2,4 >"$d/serve_import.log" 2>&1
"$recap" import-hf "$ck" -o "$d/serve_tpw.rank{rank}.yaml" --dtype f32 --max-seq 128 --paged \
  --prefill 16,32 --batch 1,2,4 --tp "$world" >>"$d/serve_import.log" 2>&1
timeout 120 "$recap" serve-bench "$d/serve_tp1.yaml" "${small[@]}" --tokens-out "$d/serve_tp1.tokens" \
  >"$d/serve_tp1.log" 2>&1
c1=$?
timeout 120 "$recap" launch --gpus "$world" --timeout 60 -- serve-bench "$d/serve_tpw.rank{rank}.yaml" \
  "${small[@]}" --tokens-out "$d/serve_tpw.tokens" >"$d/serve_tpw.log" 2>&1
c2=$?
agree=$(tokens_agree "$d/serve_tp1.tokens" "$d/serve_tpw.tokens")
ok=0
[ "$c1$c2" = 00 ] && [ "${agree%% *}" = 8/8 ] && ok=1
[ "$ok" = 1 ] || { tail -5 "$d/serve_tp1.log"; tail -5 "$d/serve_tpw.log"; }
row "llama serving TP$world == TP1" "$ok" "f32, 8 requests, loops: exits $c1 $c2; equal / all, mean common prefix: ${agree:-?}; $(grep -m1 '^decode loops' "$d/serve_tpw.log")"

# 4. Batch-1 TPOT at the 8B shape with loops, TP 1, 2 and W on this machine.
b=$work/llama8b
llama_config "$b" 4096 32 32 8 14336 false
one=(--generate --requests 1 --prompt-len 16,16 --output-len 257,257 --max-running 1 --kv-fraction 0.2 --seed 5)
tpot=()
tps=(1 2)
[ "$world" = 2 ] || tps+=("$world")
for tp in "${tps[@]}"; do
  spec=$b/tp$tp.rank{rank}.yaml
  [ "$tp" = 1 ] && spec=$b/tp1.yaml
  split=()
  [ "$tp" = 1 ] || split=(--tp "$tp")
  "$recap" import-hf "$b" -o "$spec" --random-weights --paged --max-seq 2048 --prefill 64 --batch 1,8 \
    "${split[@]}" >>"$b/import.log" 2>&1
  if [ "$tp" = 1 ]; then
    timeout 150 "$recap" serve-bench "$spec" "${one[@]}" >"$b/tp$tp.log" 2>&1
  else
    timeout 150 "$recap" launch --gpus "$tp" --timeout 30 -- serve-bench "$spec" "${one[@]}" >"$b/tp$tp.log" 2>&1
  fi
  tpot+=("$(grep -m1 "TPOT ms" "$b/tp$tp.log" | awk '{print $4}')")
done
ratios=$(python3 -c "
t = [float(x) for x in '${tpot[*]}'.split()]
tps = '${tps[*]}'.split()
print(', '.join('TP %s %.3f ms (%.3fx)' % (p, v, v / t[0]) for p, v in zip(tps, t)))" 2>/dev/null)
ok=0
[ -n "$ratios" ] && [ ${#tpot[@]} = ${#tps[@]} ] && ok=1
[ "$ok" = 1 ] || for tp in "${tps[@]}"; do tail -3 "$b/tp$tp.log"; done
row "8B batch-1 TPOT, loops" "$ok" "${ratios:-?} on $gpu_name"

# 5. Rank 1 of W killed mid-generation: rank 0 fails within its timeout.
timeout 150 "$recap" launch --gpus "$world" --timeout 10 --grace 20 -- generate "$b/tp$world.rank{rank}.yaml" \
  --prompt-ids "$(seq -s, 1 16)" --max-new 2000 >"$work/kill.log" 2>&1 &
kill_rank1_after "^rank 1 of $world: prompt done" "$work/kill.log" $!
ok=0
[ -n "$victim" ] && [ "$code" = 1 ] && grep -q "rank 1: killed by signal 9" "$work/kill.log" &&
  grep -q "(rank 0): request in flight" "$work/kill.log" && [ $((ended_at - killed_at)) -lt 30 ] && ok=1
[ "$ok" = 1 ] || tail -12 "$work/kill.log"
row "rank killed mid-decode" "$ok" "launch exit $code, $((ended_at - killed_at)) s after the kill: $(grep -m1 "(rank 0): a decode step" "$work/kill.log" | cut -c1-120)"

tar czf "$out/tp_world_logs.tgz" -C "$work" --exclude='*.logits' --exclude='*.safetensors' . 2>/dev/null
echo
echo "=== tensor parallelism at TP $world ($gpu_name, $(($(date +%s) - start)) s) ==="
printf '%s\n' "${rows[@]}"
echo "$(( ${#rows[@]} - failed )) passed, $failed failed"
