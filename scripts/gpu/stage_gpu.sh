#!/usr/bin/env bash
# Builds every test binary, the CLI and librecap.so for the GPU machine (sm_90 only,
# stripped) and packs them, with specs, test data and the GPU-side scripts, into
# stage/bundle.tar.xz (git-ignored). Every test binary links the whole library statically, so
# the files are alike: xz packs ~100 MiB into ~3 MiB, far under the device tool's 64 MiB.
# stage/run.sh unpacks the bundle there and runs one of its scripts:
#   run(command="bash stage/run.sh gpu_run.sh", carry=["stage"])           # every test
#   run(command="bash stage/run.sh tools/bench_all.sh", carry=["stage"])   # benchmarks
# Arguments: test names to stage (default: every cc_test under //tests).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/deps.sh
if [ $# -gt 0 ]; then
  tests=("$@")
else
  mapfile -t tests < <(bazel query 'kind(cc_test, //tests:all)' 2>/dev/null | sed 's|//tests:||')
fi
bazel build --config=stage "${tests[@]/#/\/\/tests:}" //:recap_cli //:recap_shared //bench:alloc_bench //bench:weight_load_bench \
  //bench:bench_sample
# The output folder itself, not the bazel-bin link (another Bazel run may have moved it).
bin=$(bazel info --config=stage bazel-bin 2>/dev/null)
rm -rf stage
mkdir -p stage/bin stage/tests
for name in "${tests[@]}"; do
  cp -L "$bin/tests/$name" "stage/tests/$name"
done
for so in "$bin"/tests/*.so; do
  [ -f "$so" ] && cp -L "$so" stage/tests/
done
cp -L "$bin/engine/recap" stage/bin/recap
cp -L "$bin/librecap.so" stage/bin/librecap.so
# librecap.so links libyaml and jansson as shared libraries (BUILD); the GPU machine has
# neither, so they travel beside it (the Python package loads it from stage/bin).
ldd "$bin/librecap.so" | awk '/libyaml|libjansson/ {print $3}' | xargs -r cp -L -t stage/bin
[ -d tests/data ] && cp -r tests/data stage/tests/data
[ -d specs ] && cp -r specs stage/specs
cp scripts/gpu/gpu_run.sh stage/gpu_run.sh
# Two-GPU checks and the NCCL benchmark (issue 10): bash stage/run.sh gpu_run_multi.sh on an
# nvidia-h200-x2 machine.
cp scripts/gpu/gpu_run_multi.sh stage/gpu_run_multi.sh
# Tensor-parallel imported models on 2 GPUs (issue 27): bash stage/run.sh gpu_tp.sh on an
# nvidia-h100-x2 machine (transformers and torch make the checkpoints there).
cp scripts/gpu/gpu_tp.sh stage/gpu_tp.sh
# Decode loops under tensor parallelism (issues 22 and 27): bash stage/run.sh gpu_tp_loop.sh on
# an nvidia-h100-x2 machine (no transformers needed).
cp scripts/gpu/gpu_tp_loop.sh stage/gpu_tp_loop.sh
# Tensor parallelism at world 4 (or any): bash stage/run.sh gpu_tp_world.sh 4 on an
# nvidia-h100-x4 machine (transformers and torch make the checkpoints there).
cp scripts/gpu/gpu_tp_world.sh stage/gpu_tp_world.sh
cp scripts/gpu/gpu_multi_lib.sh stage/gpu_multi_lib.sh
# The benchmark run (issue 6): bash stage/tools/bench_all.sh runs the CLI, the PyTorch peer and
# the report over stage/specs.
mkdir -p stage/tools
cp tests/models/make_fixtures.py tests/models/make_tp_checkpoints.py tests/models/compare_tp.py stage/tools/
cp bench/report/bench_all.sh bench/peer/peer_torch.py bench/peer/peer_torch_ops.py bench/report/bench_report.py \
  bench/report/tp_decode_report.py stage/tools/
# Reliability runs (issue 7): bash stage/run.sh tools/gpu_soak.sh (stage soak_test) and
# tools/gpu_sanitize.sh (compute-sanitizer over the GPU tests), inside the bundle.
cp scripts/gpu/gpu_soak.sh scripts/gpu/gpu_sanitize.sh stage/tools/
# The allocator benchmark (issue 9): bash stage/run.sh tools/torch_alloc_bench.sh bin/alloc_bench
# (builds the libtorch driver there with g++; prints the table for docs/ALLOCATOR.md).
cp -L "$bin/bench/alloc_bench" stage/bin/alloc_bench
cp -L "$bin/bench/weight_load_bench" stage/bin/weight_load_bench
# The sampling benchmark (issue "Batched decode for real serving"): bash stage/run.sh
# tools/sample_bench.sh runs the staged sampling tests, bench_sample and its PyTorch peer.
cp -L "$bin/bench/bench_sample" stage/bin/bench_sample
cp bench/peer/sample_bench.sh bench/peer/peer_torch_sample.py stage/tools/
# The serving benchmarks (docs/SERVING.md): bash stage/run.sh gpu_serving.sh.
cp scripts/gpu/gpu_serving.sh stage/gpu_serving.sh
# The norm folds into the decode GEMVs (engine/fuse.h): bash stage/run.sh
# gpu_fold.sh (their CUDA tests, then bench-decode with and without RECAP_FUSION=0).
cp scripts/gpu/gpu_fold.sh stage/gpu_fold.sh
# The decode loop (docs/SERVING.md, "The decode loop"): bash stage/run.sh gpu_decode_loop.sh.
cp scripts/gpu/gpu_decode_loop.sh stage/gpu_decode_loop.sh
# Every kernel's device time in one decode step (Nsight Compute): bash stage/run.sh
# gpu_kernel_times.sh.
cp scripts/gpu/gpu_kernel_times.sh stage/gpu_kernel_times.sh
cp tests/models/make_bench_checkpoint.py bench/peer/peer_hf_decode.py \
  bench/peer/peer_hf_generate_batch.py stage/tools/
cp bench/peer/torch_alloc_bench.sh bench/peer/torch_alloc_bench.cpp stage/tools/
# The Python package, its tests and the in-process benchmark (issue 25): bash stage/run.sh
# gpu_python.sh (needs torch there).
git ls-files python/recap python/tests | xargs cp --parents -t stage
cp scripts/gpu/gpu_python.sh stage/gpu_python.sh
cp bench/peer/inprocess_torch.py stage/tools/
# The consumers' CMake build with CUDA, installed (issue "recap as a package"): STAGE_CMAKE=1
# adds it for bash stage/run.sh gpu_cmake.sh (a few minutes of nvcc here).
if [ "${STAGE_CMAKE:-0}" = 1 ]; then scripts/gpu/stage_cmake.sh; fi
chmod -R u+w stage
unpacked_kib=$(du -sk stage | cut -f1)
tar cf - -C stage . | xz -9 -T2 >bundle.tar.xz.tmp
find stage -mindepth 1 -delete
mv bundle.tar.xz.tmp stage/bundle.tar.xz
cp scripts/gpu/stage_run.sh stage/run.sh
size_kib=$(du -sk stage | cut -f1)
echo "staged ${#tests[@]} tests and the CLI: $((unpacked_kib / 1024)) MiB, packed $((size_kib / 1024)) MiB"
# The device tool carries the whole working tree with stage/, at most 64 MiB: keep 2 MiB spare.
tree_kib=$(git ls-files -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
if [ $((size_kib + tree_kib)) -gt $((62 * 1024)) ]; then
  echo "stage/ ($((size_kib / 1024)) MiB) and the tracked tree ($((tree_kib / 1024)) MiB) are over" \
    "62 MiB: the device tool carries at most 64 MiB" >&2
  exit 1
fi
