#!/usr/bin/env bash
# librecap.so must export exactly the public API: every function recap.h declares RECAP_API, and
# nothing else (no recap__ internals, no CUDA runtime symbols that could clash with an embedding
# program's own cudart).
set -euo pipefail
lib=$1
header=$2
# Each export is NAME@@RECAP_0 (bazel/recap.lds): every one must carry the version node.
versioned=$(nm -D --defined-only "$lib" | awk '{print $3}')
unversioned=$(grep -v '@@RECAP_0$' <<<"$versioned" | grep -v '^RECAP_0$' || true)
if [ -n "$unversioned" ]; then
  echo "FAIL: exports without the version node RECAP_0:"
  echo "$unversioned" | head -20
  exit 1
fi
exported=$(grep -v '^RECAP_0$' <<<"$versioned" | sed 's/@@RECAP_0$//' | sort -u)
# The preprocessor drops comments and macros and turns RECAP_API into the visibility attribute;
# declarations may span lines, so join them and take the name before each declaration's "(".
declared=$(${CC:-cc} -E -P -x c "$header" | tr '\n' ' ' |
  grep -oE 'visibility *\( *"default" *\) *\) *\) [^;{}]*\(' |
  grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\($' | tr -d '( ' | sort -u)
count=$(grep -c . <<<"$declared" || true)
if [ "$count" -lt 100 ]; then
  echo "FAIL: found only $count RECAP_API declarations in $header (the parser is broken)"
  exit 1
fi
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "FAIL: $(grep -c . <<<"$missing") RECAP_API functions are not exported by librecap.so:"
  echo "$missing" | head -40
fi
if [ -n "$extra" ]; then
  echo "FAIL: librecap.so exports symbols that recap.h does not declare RECAP_API:"
  echo "$extra" | head -40
fi
[ -z "$missing$extra" ] || exit 1
echo "librecap.so exports the $count RECAP_API functions of recap.h (version RECAP_0) and nothing else"
