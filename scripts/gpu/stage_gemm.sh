#!/usr/bin/env bash
# Builds the recap CLI for the GPU machine (sm_90, stripped, static cudart) and copies it with
# the PyTorch peer and the sweep script into DEST (default stage-gemm/, git-ignored), so that
# one device call runs the whole GEMM sweep: bash DEST/gemm_sweep.sh [GRID] [BUDGET_S].
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-stage-gemm}
bazel build --config=stage --jobs=2 //:recap_cli
bin=$(bazel info --config=stage bazel-bin 2>/dev/null)
mkdir -p "$dest"
cp -L "$bin/engine/recap" "$dest/recap"
chmod u+w "$dest/recap"
cp bench/peer/peer_torch_gemm.py scripts/gpu/gemm_sweep.sh "$dest/"
du -sh "$dest"
