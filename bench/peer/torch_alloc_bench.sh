#!/usr/bin/env bash
# On the GPU machine: builds bench/peer/torch_alloc_bench.cpp with g++ against the torch package's
# libtorch (headers and libraries inside the Python package; no Python at run time), runs it
# and recap's bench/alloc_bench (built here by Bazel, passed as $1), and prints one markdown
# table of both against raw cudaMalloc/cudaFree (docs/ALLOCATOR.md, "Benchmark").
#
#   [ROUNDS=3] bench/peer/torch_alloc_bench.sh PATH/TO/alloc_bench [OUT.md]
#
# Host timings on the shared GPU machine drift by up to 2x between runs a minute apart, so the
# two programs run ROUNDS times, alternating, and each cell is the median over the rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
ours=${1:?usage: torch_alloc_bench.sh PATH/TO/alloc_bench [OUT.md]}
out_md=${2:-/dev/stdout}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))') || exit 1
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))') || exit 1
cuda_inc=$(dirname "$(dirname "$(command -v nvcc)")")/include
torch_ok=1
if ! g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" bench/peer/torch_alloc_bench.cpp \
  -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -I"$cuda_inc" \
  -L"$torch_dir/lib" -Wl,--no-as-needed -ltorch -ltorch_cuda -ltorch_cpu -lc10_cuda -lc10 \
  -Wl,--as-needed -Wl,-rpath,"$torch_dir/lib" -o "$work/torch_alloc_bench"; then
  echo "torch_alloc_bench: the C++ driver did not build; recap and cudaMalloc only" >&2
  torch_ok=0
fi
rounds=${ROUNDS:-3}
: >"$work/ours.txt"
: >"$work/torch.txt"
for round in $(seq "$rounds"); do
  echo "round $round of $rounds"
  "$ours" | tee -a "$work/ours.txt" || exit 1
  if [ "$torch_ok" = 1 ]; then
    "$work/torch_alloc_bench" | tee -a "$work/torch.txt" || torch_ok=0
  fi
done
[ "$torch_ok" = 1 ] || : >"$work/torch.txt"
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
python3 - "$work/ours.txt" "$work/torch.txt" "$device" "$torch_version" "$rounds" >"$out_md" <<'PY'
import statistics, sys
runs = {}
for path in sys.argv[1:3]:
    for line in open(path):
        p = line.split()
        if len(p) == 4 and p[0] == "RESULT":
            runs.setdefault((p[1], p[2]), []).append(float(p[3]))
r = {k: statistics.median(v) for k, v in runs.items()}
cases = [c for (i, c) in r if i == "recap"]
print(f"Device: {sys.argv[3]}; PyTorch {sys.argv[4]} (libtorch from C++, raw_alloc/raw_delete).")
print("Nanoseconds per alloc+free pair (pair_*) or per operation (trace): the median over "
      f"{sys.argv[5]} alternating runs of each program, each run the median of 15 batches.\n")
print("| case | recap | PyTorch | cudaMalloc/cudaFree | recap vs cudaMalloc | recap vs PyTorch |")
print("|---|---:|---:|---:|---:|---:|")
for c in cases:
    ours, raw, torch = r[("recap", c)], r.get(("cudaMalloc", c)), r.get(("torch", c))
    cell = lambda v: f"{v:,.0f}" if v is not None else "n/a"
    vs_raw = f"{raw / ours:,.0f}x faster" if raw else "n/a"
    vs_torch = f"{torch / ours:.2f}x" if torch else "n/a"
    print(f"| {c.replace('_', ' ')} | {cell(ours)} | {cell(torch)} | {cell(raw)} | {vs_raw} | {vs_torch} |")
PY
