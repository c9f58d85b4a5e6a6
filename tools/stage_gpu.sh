#!/usr/bin/env bash
# Builds every test binary, the CLI and librecap.so for the GPU machine (sm_90 only,
# stripped) and copies them, with specs and test data, into stage/ (git-ignored), together
# with gpu_run.sh, the one script that runs it all there. Then, from the device tool:
#   run(command="bash stage/gpu_run.sh", carry=["stage"])
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
bazel build --config=stage //tests/... //:recap_cli //:recap_shared "$@"
rm -rf stage
mkdir -p stage/bin stage/tests
for t in $(bazel query 'kind(cc_test, //tests/...)' 2>/dev/null); do
  name=${t#//tests:}
  cp -L "bazel-bin/tests/$name" "stage/tests/$name"
done
for so in bazel-bin/tests/*.so; do
  [ -f "$so" ] && cp -L "$so" stage/tests/
done
cp -L bazel-bin/engine/recap stage/bin/recap
cp -L bazel-bin/librecap.so stage/bin/librecap.so
[ -d tests/data ] && cp -r tests/data stage/tests/data
[ -d specs ] && cp -r specs stage/specs
cp tools/gpu_run.sh stage/gpu_run.sh
chmod -R u+w stage
size_kib=$(du -sk stage | cut -f1)
echo "staged $(ls stage/tests | wc -l) test files and the CLI: $((size_kib / 1024)) MiB"
if [ "$size_kib" -gt $((48 * 1024)) ]; then
  echo "stage/ is over 48 MiB: the device tool carries at most 64 MiB" >&2
  exit 1
fi
