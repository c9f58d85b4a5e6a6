#!/usr/bin/env bash
# Runs on the GPU machine over the staged folder (tools/stage_gpu.sh): every test binary,
# then the CLI, each with a time limit; full logs go to $OUT, and a summary table comes last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/recap_gpu_out}
# The device tool returns at most 8 files: logs go to a scratch folder and come back as one
# archive.
logs=/tmp/recap_gpu_logs
rm -rf "$logs"
mkdir -p "$out" "$logs"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$here/bin:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
summary=()
failed=0
for t in "$here"/tests/*_test; do
  name=$(basename "$t")
  log="$logs/$name.log"
  args=()
  # Bazel passes nvtx_test the recorder tool's path; here it lies beside the test.
  [ "$name" = nvtx_test ] && args=("$here/tests/libnvtx_recorder.so")
  # From the stage root, as from Bazel's runfiles root: specs/ and tests/data/ lie there.
  (cd "$here" && timeout 300 "$t" "${args[@]}") >"$log" 2>&1
  code=$?
  runs=$(grep -E '^ +tests ' "$log" | awk '{print $3" run, "$4" passed, "$5" failed, "$6" inactive"}')
  [ "$code" -ne 0 ] && failed=$((failed + 1)) && tail -30 "$log"
  summary+=("$(printf '%-34s exit %-3s %s' "$name" "$code" "${runs:-no CUnit summary}")")
done
"$here/bin/recap" info >"$logs/recap_info.log" 2>&1
info_code=$?
cat "$logs/recap_info.log"
tar czf "$out/logs.tgz" -C "$logs" .
echo
echo "=== GPU summary ==="
printf '%s\n' "${summary[@]}"
printf '%-34s exit %s\n' "recap info" "$info_code"
echo "$(( ${#summary[@]} - failed )) passed, $failed failed (test binaries)"
