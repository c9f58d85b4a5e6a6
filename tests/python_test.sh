#!/usr/bin/env bash
# Runs the Python package's tests (python/tests) against the librecap.so of this build, on the
# host backend (arguments: the library, a test file, the package's __init__.py, the recap CLI,
# the llama fixture's config.json). They need numpy: without a python3 that has it, the test
# says so on an INACTIVE line and scripts/test.sh does not count it as passed.
set -euo pipefail
lib=$(realpath "$1")
tests=$(dirname "$(realpath "$2")")
package=$(dirname "$(dirname "$(realpath "$3")")")
cli=$(realpath "$4")
model=$(dirname "$(realpath "$5")")
# The first interpreter with numpy: the one on PATH, else Debian's, which python3-numpy serves.
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import numpy' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "INACTIVE suite python: no python3 with numpy (apt-get install python3-numpy;" \
    "scripts/deps.sh installs it)"
  echo "no test ran: numpy is missing"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# The generator tests' spec: the llama fixture as a small paged serving spec. The spec goes
# beside a copy of expected.json (the tests read it there); it names the model by its path.
cp "$model/expected.json" "$work/"
"$cli" import-hf "$model" -o "$work/serve.yaml" --max-seq 64 --paged --block-size 4 \
  --kv-blocks 20 --batch 1,2,4,8 --prefill 16,32 >/dev/null
# An ASan build of the library needs the sanitizer runtimes loaded before everything else in
# the interpreter, as embed_test.sh does for its program. CPython does not free everything at
# exit, so leak checking (which would report the interpreter's own memory) is off here.
preload=""
# (nm's output is read whole first: grep -q would stop early and, under pipefail, fail nm.)
undefined=$(nm -D --undefined-only "$lib")
if grep -q '__asan_' <<<"$undefined"; then
  preload="$(${CC:-cc} -print-file-name=libasan.so) $(${CC:-cc} -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
export RECAP_TEST_SERVE_SPEC=$work/serve.yaml RECAP_LIBRARY=$lib PYTHONPATH=$package
LD_PRELOAD="$preload" "$python" -m unittest discover -v -s "$tests" -t "$tests"
