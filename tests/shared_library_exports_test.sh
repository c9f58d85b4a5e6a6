#!/usr/bin/env bash
# librecap.so must export the public API and nothing else (no recap__ internals, no CUDA
# runtime symbols that could clash with an embedding program's own cudart).
set -euo pipefail
lib=$1
exported=$(nm -D --defined-only "$lib" | awk '{print $3}')
count=$(grep -c . <<<"$exported" || true)
stray=$(grep -v '^recap_[a-z]' <<<"$exported" || true)
for required in recap_version recap_stream_create recap_malloc recap_graph_replay; do
  grep -qx "$required" <<<"$exported" || { echo "FAIL: $required is not exported"; exit 1; }
done
if [ -n "$stray" ]; then
  echo "FAIL: librecap.so exports symbols outside the public API:"
  echo "$stray" | head -20
  exit 1
fi
echo "librecap.so exports $count symbols, all recap_*"
