#!/usr/bin/env bash
# Runs on a machine with 2 GPUs (nvidia-h200-x2) over the staged folder (scripts/gpu/stage_gpu.sh):
#   1. tests/comm_test          NCCL collectives and torch.cuda.comm's functions over two GPUs
#                               in one process, every element checked
#   2. tests/pipeline_dist_test the tensor-parallel MLP on 2 ranks (one process each) equals the
#                               single-GPU MLP, eager and graph, two buckets; a rank that dies
#                               makes rank 0 fail with a clear error within its timeout
#   3. recap launch             the CLI end to end: specs/tp_mlp.yaml on 2 ranks, and a rank
#                               killed mid-run (the launcher stops the rest, reports exits)
#   4. benchmark                tensor-parallel speedup of a compute-bound MLP (batch 4096,
#                               width 8192, hidden 32768, bf16) at 2 GPUs over 1, and the
#                               all_reduce bus bandwidth at 8, 64 and 256 MiB
# Prints a table and one summary line; logs go to $OUT/multi_logs.tgz. Under 5 minutes.
#   run(command="bash stage/run.sh gpu_run_multi.sh", carry=["stage"], kind="nvidia-h200-x2")
set -uo pipefail
. "$(cd "$(dirname "$0")" && pwd)/gpu_multi_lib.sh" /tmp/recap_multi_logs
logs=$work
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | head -4
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $gpus"

json() { python3 -c 'import json, sys; d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }

# 1-2. The test binaries.
for t in comm_test pipeline_dist_test; do
  log=$logs/$t.log
  (cd "$here" && timeout 200 "$here/tests/$t") >"$log" 2>&1
  code=$?
  summary=$(grep -E '^ +tests ' "$log" | awk '{print $3" run, "$4" passed, "$5" failed, "$6" inactive"}')
  inactive=$(grep -E '^ +tests ' "$log" | awk '{print $6}')
  ok=0
  [ "$code" = 0 ] && [ "${inactive:-1}" = 0 ] && ok=1
  [ "$ok" = 1 ] || tail -40 "$log"
  row "$t" "$ok" "exit $code; ${summary:-no CUnit summary}"
done
grep -h "dead-rank run" "$logs/pipeline_dist_test.log" | head -1

# 3. The CLI: two ranks of the TP MLP spec (default small sizes), graph mode.
(cd "$here" && timeout 120 "$recap" launch --gpus 2 --timeout 60 -- run specs/tp_mlp.yaml \
  --dim F=2048 --iters 20) >"$logs/launch_tp.log" 2>&1
code=$?
ok=0
[ "$code" = 0 ] && grep -q "rank 1: exit 0" "$logs/launch_tp.log" && ok=1
[ "$ok" = 1 ] || tail -20 "$logs/launch_tp.log"
row "launch tp_mlp" "$ok" "exit $code; $(grep -c 'timing:' "$logs/launch_tp.log") ranks timed"
# The same eagerly (the collective launched op by op): both ranks print the same checksum.
(cd "$here" && timeout 120 "$recap" launch --gpus 2 --timeout 60 -- run specs/tp_mlp.yaml \
  --dim F=2048 --iters 5 --mode eager) >"$logs/launch_tp_eager.log" 2>&1
code=$?
sums=$(grep -E '^ +y +sum' "$logs/launch_tp_eager.log" | sort -u | wc -l)
ok=0
[ "$code" = 0 ] && grep -q "rank 1: exit 0" "$logs/launch_tp_eager.log" && [ "$sums" = 1 ] && ok=1
[ "$ok" = 1 ] || tail -20 "$logs/launch_tp_eager.log"
row "launch tp_mlp eager" "$ok" "exit $code; $sums distinct checksum line(s) over the ranks"

# A rank killed mid-run: rank 1 gets SIGKILL after its first runs; rank 0 must fail (its
# collectives time out: --timeout 10) and the launcher must report both exits, well before
# the 90 s limit.
t0=$(date +%s)
(cd "$here" && timeout 90 "$recap" launch --gpus 2 --timeout 10 --grace 20 -- run \
  specs/tp_mlp.yaml --dim F=2048 --iters 10000000) >"$logs/launch_kill.log" 2>&1 &
lpid=$!
sleep 8
victim=$(pgrep -f -- "--rank 1 --init" | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait $lpid
code=$?
t1=$(date +%s)
ok=0
[ "$code" = 1 ] && grep -q "rank 1: killed by signal 9" "$logs/launch_kill.log" &&
  grep -q "rank 0: exit 1" "$logs/launch_kill.log" && [ $((t1 - t0)) -lt 80 ] && ok=1
[ "$ok" = 1 ] || tail -20 "$logs/launch_kill.log"
why=$(grep -m1 -E "aborted|TIMEOUT|timed out|NCCL reported" "$logs/launch_kill.log" | cut -c1-160)
row "launch rank killed" "$ok" "exit $code after $((t1 - t0)) s; rank 0: ${why:-no message}"

# 4. Benchmark. Both sides go through the same path (recap launch, run_dist: host wall clock
# per run, including the 32-byte header broadcast and the wait), graph mode.
big=(--dim B=4096 --dim D=8192 --iters 20 --warmup 3 --json -)
(cd "$here" && timeout 200 "$recap" launch --gpus 1 --timeout 120 -- run specs/tp_mlp.yaml \
  "${big[@]}" --dim F=32768) >"$logs/bench_tp1.log" 2>&1
c1=$?
(cd "$here" && timeout 200 "$recap" launch --gpus 2 --timeout 120 -- run specs/tp_mlp.yaml \
  "${big[@]}" --dim F=16384) >"$logs/bench_tp2.log" 2>&1
c2=$?
grep '^{' "$logs/bench_tp1.log" >"$logs/tp1.json"
grep '^{"rank": 0' "$logs/bench_tp2.log" >"$logs/tp2.json"
t1=$(json "$logs/tp1.json" '"%.3f" % d["median_ms"]')
t2=$(json "$logs/tp2.json" '"%.3f" % d["median_ms"]')
speedup=$(python3 -c "print('%.2f' % ($t1 / $t2))" 2>/dev/null)
tflops1=$(python3 -c "print('%.0f' % (2*2*4096*8192*32768 / ($t1 * 1e-3) / 1e12))" 2>/dev/null)
ok=0
[ "$c1" = 0 ] && [ "$c2" = 0 ] && [ -n "$speedup" ] && ok=$(python3 -c "print(int($speedup > 1.5))")
[ "$ok" = 1 ] || { tail -5 "$logs/bench_tp1.log"; tail -8 "$logs/bench_tp2.log"; }
row "tp speedup (2 GPUs)" "$ok" "MLP 4096x8192x32768 bf16: 1 GPU ${t1:-?} ms (${tflops1:-?} TFLOP/s), 2 GPUs ${t2:-?} ms: ${speedup:-?}x (needs > 1.5)"

# all_reduce bus bandwidth: a spec with a chain of CHAIN all_reduces of N f32 elements each,
# captured in one graph, so the per-run cost (the header broadcast, the host's wait) is shared
# by CHAIN collectives; time per all_reduce = run time / CHAIN.
chain=10
{
  echo "name: allreduce-bench"
  echo "device: cuda"
  echo "dtype: f32"
  echo "dims: {B: 1, N: 1048576}"
  echo "tensors:"
  echo "  x0: {shape: [B, N], role: input}"
  echo "ops:"
  for i in $(seq 1 $chain); do echo "  - {op: all_reduce, in: x$((i - 1)), out: x$i}"; done
  echo "outputs: [x$chain]"
  echo "run: {warmup: 5, iters: 50}"
} >"$logs/allreduce.yaml"
bw_rows=()
bw_ok=1
for mib in 8 64 256; do
  n=$((mib * 1024 * 1024 / 4))
  (cd "$here" && timeout 120 "$recap" launch --gpus 2 --timeout 60 -- run "$logs/allreduce.yaml" \
    --dim N=$n --json -) >"$logs/allreduce_$mib.log" 2>&1
  c=$?
  grep '^{"rank": 0' "$logs/allreduce_$mib.log" >"$logs/ar_$mib.json"
  t=$(json "$logs/ar_$mib.json" '"%.4f" % (d["median_ms"] / '$chain')')
  # Bus bandwidth as nccl-tests defines it: bytes * 2 (n - 1) / n / time.
  bw=$(python3 -c "print('%.1f' % ($mib * 1048576 * 2 * 1 / 2 / ($t * 1e-3) / 1e9))" 2>/dev/null)
  [ "$c" = 0 ] && [ -n "$bw" ] || bw_ok=0
  bw_rows+=("$(printf '| %4d MiB | %9s ms | %7s GB/s |' "$mib" "${t:-?}" "${bw:-?}")")
done
row "all_reduce busbw" "$bw_ok" "$(for r in "${bw_rows[@]}"; do echo -n "$r "; done)"

tar czf "$out/multi_logs.tgz" -C "$logs" .
echo
echo "=== multi-GPU summary ==="
printf '%s\n' "${rows[@]}"
echo
echo "Benchmark table (docs/BENCHMARKS.md):"
echo "| case | 1 GPU | 2 GPUs | speedup |"
echo "|---|---|---|---|"
echo "| TP MLP B4096 D8192 F32768 bf16, graph | ${t1:-?} ms | ${t2:-?} ms | ${speedup:-?}x |"
echo "| all_reduce size | time per all_reduce (chain of $chain in one graph, run_dist) | bus bandwidth |"
echo "|---|---|---|"
printf '%s\n' "${bw_rows[@]}"
echo "$(( ${#rows[@]} - failed )) passed, $failed failed (multi-GPU checks)"
