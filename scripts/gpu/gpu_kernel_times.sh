#!/usr/bin/env bash
# Device time of every kernel of one decode step, in order and by kernel, measured by Nsight
# Compute (ncu: on the GPU machine; nsys is not), over the staged folder:
#   run(command="bash stage/run.sh gpu_kernel_times.sh [HIDDEN LAYERS HEADS KV_HEADS FFN [BATCH [CONTEXT]]]",
#       carry=["stage"])
# Default: the Llama 3.2 1B shape (2048 16 32 8 8192), random bf16 weights, batch 1, context 512.
# ncu runs `recap bench-decode` with caches and clocks left alone (--cache-control none
# --clock-control none) and one metric (gpu__time_duration), so each kernel runs once, as in
# the step, but serialized: the sum of the durations exceeds the graph step's time by the
# overlap that programmatic dependent launch gives. What it is for: which kernels of a step
# are far from their bytes' time (docs/SERVING.md, "Where a batch-1 step's kernels go").
set -uo pipefail
. "$(cd "$(dirname "$0")" && pwd)/gpu_multi_lib.sh" /tmp/recap_kernel_times
shape=("${1:-2048}" "${2:-16}" "${3:-32}" "${4:-8}" "${5:-8192}")
batch=${6:-1}
context=${7:-512}
m=$work/model
llama_config "$m" "${shape[@]}" true
"$recap" import-hf "$m" -o "$m/m.yaml" --random-weights --paged --max-seq 2048 --prefill 64 \
  --batch "$batch" >"$work/import.log" 2>&1 || { tail -5 "$work/import.log"; exit 1; }
timeout 300 /usr/local/cuda/bin/ncu --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum --csv --print-units base -c 2500 \
  "$recap" bench-decode "$m/m.yaml" --batch "$batch" --context "$context" --tokens 2 --repeats 1 \
  >"$work/ncu.csv" 2>"$work/ncu.err" || { tail -5 "$work/ncu.err"; exit 1; }
cp "$work/ncu.csv" "$out/kernel_times.csv"
python3 - "$work/ncu.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
grid, block = head.index("Grid Size"), head.index("Block Size")
kernels = [(r[name].split("(")[0].replace("void ", "").replace("<unnamed>::", "")[:64],
            float(r[value].replace(",", "")) / 1e3, r[grid], r[block]) for r in rows]
# A decode step ends with its sampler: the last whole step lies between the last two.
ends = [i for i, k in enumerate(kernels) if k[0].startswith("sample_kernel")]
if len(ends) < 2:
    sys.exit("fewer than two decode steps profiled")
step = kernels[ends[-2] + 1:ends[-1] + 1]
print("one decode step: %d kernels, %.1f us of kernel time" % (len(step), sum(k[1] for k in step)))
print("\nits kernels by name (us):")
by = collections.OrderedDict()
for k in step:
    n, t = by.get(k[0], (0, 0.0))
    by[k[0]] = (n + 1, t + k[1])
for k, (n, t) in sorted(by.items(), key=lambda x: -x[1][1]):
    print("  %-64s %4d %9.1f  %7.2f each" % (k, n, t, t / n))
# Layers repeat: the attention kernels' spacing is a layer's kernel count.
attention = [i for i, k in enumerate(step) if k[0].startswith("paged_attention")]
first = next(i for i, k in enumerate(step) if k[0].startswith("norm"))
if len(attention) < 2:
    sys.exit("fewer than two layers' attention kernels in the step")
per_layer = attention[1] - attention[0]
start = attention[1] - (attention[0] - first)
print("\nthe second layer's %d kernels in order (us; grid, block):" % per_layer)
for k in step[start:start + per_layer]:
    print("  %-64s %7.2f  %s %s" % k)
PY
