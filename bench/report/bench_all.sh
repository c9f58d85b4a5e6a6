#!/usr/bin/env bash
# Runs on the GPU machine over the staged folder (scripts/gpu/stage_gpu.sh puts this script, the
# peer and the report in stage/tools/, the CLI in stage/bin/, the specs in stage/specs/):
# for every spec, `recap run --save-tensors` (the exact params, inputs and outputs),
# bench/peer/peer_torch.py (the same pipeline in PyTorch, checked against recap's outputs, eager
# and CUDA-graph timings, graph memory) and `recap bench --json`, all after one measurement of
# the hardware floors; then bench/report/bench_report.py writes BENCHMARKS.md (copy it to docs/) and
# benchmarks.svg to $OUT and prints a one-line summary last. From the device tool:
#   run(command="bash stage/run.sh tools/bench_all.sh", carry=["stage"])
# Arguments: spec files to run (default: every stage/specs/*.yaml). Per-spec JSON and logs come
# back as $OUT/bench_raw.tgz; the tensor files stay in $BENCH_WORK (large: mlp-large's is 670 MB)
# and are deleted after each spec. PEER_ARGS adds options to every peer_torch.py call (e.g.
# "--iters 50"; "--device cpu" for a dry run of this script without a GPU). PEER_COMPILE=0
# leaves out the torch.compile column (on by default; its runs share COMPILE_BUDGET_S, default
# 210 s, and a spec past it shows "-").
# After the specs: `recap bench-ops` and bench/peer/peer_torch_ops.py (single ops at 64M elements,
# GEMMs 4096^3 and 8192^3, PyTorch's host overhead), then `recap bench-capture` (capture,
# update and bucket costs). The last lines printed are the targets, met or MISSED.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/recap_bench_out}
work=${BENCH_WORK:-/tmp/recap_bench}
recap="$here/bin/recap"
py=${PYTHON:-python3}
read -r -a peer_args <<<"${PEER_ARGS:-}"
rm -rf "$work"
mkdir -p "$out" "$work"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0

if [ $# -gt 0 ]; then specs=("$@"); else specs=("$here"/specs/*.yaml); fi

# Device, driver and date for the report's header.
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
"$py" - "$work/meta.json" "$gpu" <<'EOF'
import json, sys, time
name, _, driver = sys.argv[2].partition(",")
json.dump({"gpu": name.strip() or None, "driver": driver.strip() or None,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, open(sys.argv[1], "w"))
EOF

# The floors once, in this run, before any pipeline touches the GPU.
if ! timeout 300 "$py" "$here/tools/peer_torch.py" --floors --json "$work/floors.json" \
    >"$work/floors.log" 2>&1; then
  echo "floor measurement failed:" >&2
  tail -20 "$work/floors.log" >&2
else
  cat "$work/floors.log"
fi

# torch.compile's runs share one time budget (seconds; inductor compiles each spec cold).
compile_budget=${COMPILE_BUDGET_S:-210}
compile_used=0

# recap bench gets the same rotation as the peer when it knows the option.
rotate_flag=0
"$recap" bench --help 2>&1 | grep -q -- '--rotate' && rotate_flag=1

for spec in "${specs[@]}"; do
  name=$(basename "$spec" .yaml)
  st="$work/$name.safetensors"
  echo "=== $name"
  timeout 300 "$recap" run "$spec" --save-tensors "$st" >"$work/$name.run.log" 2>&1
  echo "recap run exit $?" | tee "$work/$name.status"
  if [ ! -s "$st" ]; then
    tail -5 "$work/$name.run.log"
    echo "peer skipped: no tensor file" >>"$work/$name.status"
  else
    timeout 400 "$py" "$here/tools/peer_torch.py" "$spec" --tensors "$st" --rotate auto \
      --floors-from "$work/floors.json" --json "$work/$name.torch.json" \
      ${peer_args[@]+"${peer_args[@]}"} >"$work/$name.torch.log" 2>&1
    echo "peer exit $?" | tee -a "$work/$name.status"
    cat "$work/$name.torch.log"
    # torch.compile in a process of its own, with its own limit, so that a slow or failing
    # compile costs only its column; skipped once the compile budget is spent.
    left=$((compile_budget - compile_used))
    if [ "${PEER_COMPILE:-1}" = 1 ] && [ "$left" -gt 20 ]; then
      limit=$((left < 150 ? left : 150))
      t0=$SECONDS
      timeout "$limit" "$py" "$here/tools/peer_torch.py" "$spec" --tensors "$st" --rotate 1 \
        --compile-only --json "$work/$name.compile.json" >"$work/$name.compile.log" 2>&1
      echo "torch.compile peer exit $? (limit ${limit}s)" | tee -a "$work/$name.status"
      compile_used=$((compile_used + SECONDS - t0))
      grep -E "torch.compile" "$work/$name.compile.log"
    elif [ "${PEER_COMPILE:-1}" = 1 ]; then
      echo "torch.compile skipped: its ${compile_budget}s budget is spent" \
        | tee -a "$work/$name.status" "$work/$name.compile.log"
    fi
  fi
  bench_args=()
  if [ "$rotate_flag" = 1 ] && [ -s "$work/$name.torch.json" ]; then
    k=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["rotate"])' \
      "$work/$name.torch.json")
    bench_args=(--rotate "$k")
  fi
  timeout 300 "$recap" bench "$spec" --json "$work/$name.recap.json" \
    ${bench_args[@]+"${bench_args[@]}"} >"$work/$name.bench.log" 2>&1
  echo "recap bench exit $?" | tee -a "$work/$name.status"
  tail -5 "$work/$name.bench.log"
  rm -f "$st"  # large; nothing later needs it
done

# Single ops and capture cost (issue 6). Their files have no .status, so the per-spec tables
# of the report do not take them for specs.
echo "=== bench-ops"
timeout 240 "$recap" bench-ops --json "$work/ops.recap.json" >"$work/ops.recap.log" 2>&1
echo "recap bench-ops exit $?"
cat "$work/ops.recap.log"
timeout 300 "$py" "$here/tools/peer_torch_ops.py" --json "$work/ops.torch.json" \
  >"$work/ops.torch.log" 2>&1
echo "peer_torch_ops exit $?"
cat "$work/ops.torch.log"
echo "=== bench-capture"
(cd "$here" && timeout 240 "$recap" bench-capture --json "$work/capture.recap.json") \
  >"$work/capture.recap.log" 2>&1
echo "recap bench-capture exit $?"
cat "$work/capture.recap.log"

tar czf "$out/bench_raw.tgz" -C "$work" --exclude='*.safetensors' .
echo "=== report"
"$py" "$here/tools/bench_report.py" --work "$work" --out "$out" \
  --recap-rotates "$rotate_flag"
