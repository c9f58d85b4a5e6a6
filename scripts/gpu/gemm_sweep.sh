#!/usr/bin/env bash
# Runs on the GPU machine: `recap bench-gemm` against PyTorch over the full grid, then the
# candidate losses re-run interleaved (recap, PyTorch, recap, PyTorch) to confirm them
# (docs/perf/gemm_sweep.md). Staged by scripts/gpu/stage_gemm.sh next to the recap binary and
# bench/peer/peer_torch_gemm.py:
#   run(command="bash stage-gemm/gemm_sweep.sh", carry=["stage-gemm"], kind="nvidia-h100-x1")
# Arguments: GRID (default full; a grid file works too), a time budget in seconds for the
# whole script (default 440): the confirmation re-runs are skipped when too little is left,
# and optionally VAR=VALUE, an environment setting the candidates are re-run under as a third
# side (recap, PyTorch, recap with VAR, twice), compared with PyTorch in confirm_env.txt.
# Writes under $OUT (or ./gemm_out): sweep.txt (the comparison), heat.svg, confirm.txt and
# all.tar.xz (every JSON file and log).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
grid=${1:-full}
budget=${2:-440}
ab_env=${3:-}
out=${OUT:-./gemm_out}
work=$(mktemp -d)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
recap="$here/recap"
peer="$here/peer_torch_gemm.py"
left() { echo $((budget - SECONDS)); }

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  >"$work/gpu.txt" 2>&1
"$recap" bench-gemm --grid-out "$work/grid.json" --grid "$grid" || exit 1
echo "== recap (RECAP_TUNE off) $(date -u +%T)"
timeout $(($(left) / 3)) "$recap" bench-gemm --grid "$work/grid.json" --json "$work/recap1.json" \
  >"$work/recap1.txt" 2>&1
echo "recap exit $?; $(tail -1 "$work/recap1.txt")"
echo "== torch $(date -u +%T)"
timeout $(($(left) * 2 / 3)) python3 "$peer" --grid "$work/grid.json" --json "$work/torch1.json" \
  >"$work/torch1.txt" 2>&1
echo "torch exit $?; $(tail -2 "$work/torch1.txt" | head -1)"
"$recap" bench-gemm --recap "$work/recap1.json" --peer "$work/torch1.json" --svg "$out/heat.svg" \
  --losses "$work/candidates.json" --json "$work/compare1.json" >"$out/sweep.txt" 2>&1
grep -A30 "^geomean" "$out/sweep.txt"

# Interleaved re-runs of the candidates: A B A B.
n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["points"]))' \
  "$work/candidates.json" 2>/dev/null || echo 0)
echo "== $n candidate losses; $(left) s left $(date -u +%T)"
if [ "$n" -gt 0 ] && [ "$(left)" -gt 40 ]; then
  for i in 1 2; do
    timeout $(($(left) / 4)) "$recap" bench-gemm --grid "$work/candidates.json" \
      --json "$work/recapA$i.json" >"$work/recapA$i.txt" 2>&1
    timeout $(($(left) / 3)) python3 "$peer" --grid "$work/candidates.json" \
      --json "$work/torchB$i.json" >"$work/torchB$i.txt" 2>&1
    if [ -n "$ab_env" ]; then
      env "$ab_env" timeout $(($(left) / 3)) "$recap" bench-gemm --grid "$work/candidates.json" \
        --json "$work/recapC$i.json" >"$work/recapC$i.txt" 2>&1
    fi
  done
  if [ -n "$ab_env" ]; then
    echo "== the candidates with $ab_env"
    "$recap" bench-gemm --recap "$work/recapC1.json,$work/recapC2.json" \
      --peer "$work/torchB1.json,$work/torchB2.json" --losses "$work/losses_env.json" \
      --json "$work/confirm_env.json" >"$out/confirm_env.txt" 2>&1
    grep -v "^ *[0-9]" "$out/confirm_env.txt"
    grep "LOSS" "$out/confirm_env.txt" | head -60
  fi
  "$recap" bench-gemm --recap "$work/recapA1.json,$work/recapA2.json" \
    --peer "$work/torchB1.json,$work/torchB2.json" --losses "$work/losses.json" \
    --json "$work/confirm.json" >"$out/confirm.txt" 2>&1
  grep -v "^ *[0-9]" "$out/confirm.txt"
  grep "LOSS" "$out/confirm.txt" | head -60
fi
tar cf - -C "$work" . | xz -6 >"$out/all.tar.xz"
echo "done in $SECONDS s"
