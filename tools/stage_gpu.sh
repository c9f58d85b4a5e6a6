#!/usr/bin/env bash
# Builds every test binary, the CLI and librecap.so for the GPU machine (sm_90 only,
# stripped) and copies them, with specs and test data, into stage/ (git-ignored), together
# with gpu_run.sh, the one script that runs it all there. Then, from the device tool:
#   run(command="bash stage/gpu_run.sh", carry=["stage"])
# Arguments: test names to stage (default: every cc_test under //tests).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
if [ $# -gt 0 ]; then
  tests=("$@")
else
  mapfile -t tests < <(bazel query 'kind(cc_test, //tests:all)' 2>/dev/null | sed 's|//tests:||')
fi
bazel build --config=stage "${tests[@]/#/\/\/tests:}" //:recap_cli //:recap_shared
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
[ -d tests/data ] && cp -r tests/data stage/tests/data
[ -d specs ] && cp -r specs stage/specs
cp tools/gpu_run.sh stage/gpu_run.sh
# The benchmark run (issue 6): bash stage/tools/bench_all.sh runs the CLI, the PyTorch peer and
# the report over stage/specs.
mkdir -p stage/tools
cp tools/bench_all.sh tools/peer_torch.py tools/bench_report.py stage/tools/
chmod -R u+w stage
size_kib=$(du -sk stage | cut -f1)
echo "staged $(ls stage/tests | wc -l) test files and the CLI: $((size_kib / 1024)) MiB"
if [ "$size_kib" -gt $((48 * 1024)) ]; then
  echo "stage/ is over 48 MiB: the device tool carries at most 64 MiB" >&2
  exit 1
fi
