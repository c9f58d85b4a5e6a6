#!/usr/bin/env bash
# Checks the CMake build (CMakeLists.txt) as a consumer uses it, against Bazel's:
#   1. configure, build (-j2) and install into a temporary prefix;
#   2. the installed tree: include/, lib/ (librecap.so with its SONAME), bin/recap, recap.pc,
#      the CMake package, and no RPATH or RUNPATH in the installed binaries;
#   3. CMake compiles exactly the .c/.cu files of Bazel's //:librecap.so and //engine:recap
#      (bazel cquery), so the two source lists cannot drift apart;
#   4. its librecap.so exports the same dynamic symbols as Bazel's bazel-bin/librecap.so built
#      with the same backend;
#   5. examples/ built against the installed prefix alone, with pkg-config and with
#      find_package, under -Wall -Wextra -Werror, and run: the threaded pipeline checks its own
#      outputs, and generate_tokens must reproduce transformers' greedy ids of the tiny llama
#      fixture (tests/data/models/llama/expected.json) from a spec the installed
#      `recap import-hf` wrote.
# Ends with "N passed, N failed" (one count per check) and exits non-zero on a failure.
#
#   scripts/cmake_check.sh [--host-only]   # default: the CUDA backend when nvcc is found
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

host_only=0
case "${1:-}" in
  --host-only) host_only=1 ;;
  "") ;;
  *) echo "usage: scripts/cmake_check.sh [--host-only]" >&2; exit 2 ;;
esac
cuda="${CUDA_PATH:-/usr/local/cuda}"
[ -x "$cuda/bin/nvcc" ] || host_only=1

scripts/deps.sh || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build=$work/build
prefix=$work/prefix
passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

if [ "$host_only" -eq 1 ]; then
  cmake_backend=(-DRECAP_CUDA=OFF)
  bazel_backend=(--config=hostonly)
  echo "backend: host only"
else
  cmake_backend=(-DRECAP_CUDA=ON)
  bazel_backend=()
  echo "backend: CUDA ($cuda)"
fi

# --- 1. configure, build, install ---
if cmake -S . -B "$build" "${cmake_backend[@]}" >"$work/configure.log" 2>&1; then
  pass "cmake configure"
else
  cat "$work/configure.log"
  fail "cmake configure"
  finish
fi
start=$(date +%s)
if cmake --build "$build" -j2 >"$work/build.log" 2>&1; then
  pass "cmake build ($(($(date +%s) - start)) s)"
else
  tail -40 "$work/build.log"
  fail "cmake build"
  finish
fi
# Build warnings are errors for the project (Bazel shows them; here they would scroll by).
if grep -E 'warning:' "$work/build.log"; then
  fail "cmake build is warning-free"
else
  pass "cmake build is warning-free"
fi
if cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
  pass "cmake install"
else
  cat "$work/install.log"
  fail "cmake install"
  finish
fi

# --- 2. the installed tree ---
lib=$prefix/lib/librecap.so
layout_ok=1
for f in include/recap.h lib/librecap.so bin/recap lib/pkgconfig/recap.pc \
  lib/cmake/recap/recapConfig.cmake lib/cmake/recap/recapConfigVersion.cmake \
  lib/cmake/recap/recapTargets.cmake; do
  [ -e "$prefix/$f" ] || { echo "missing: $f"; layout_ok=0; }
done
soname=$(readelf -d "$lib" 2>/dev/null | sed -nE 's/.*Library soname: \[(.*)\]/\1/p')
[ -n "$soname" ] && [ -e "$prefix/lib/$soname" ] || { echo "no SONAME link: '$soname'"; layout_ok=0; }
for f in "$prefix"/bin/recap "$prefix"/lib/librecap.so.*; do
  if readelf -d "$f" | grep -E 'RPATH|RUNPATH'; then
    echo "$f has a run path into the build tree"
    layout_ok=0
  fi
done
if [ "$layout_ok" -eq 1 ]; then pass "installed layout ($soname, no run paths)"; else fail "installed layout"; fi

# --- 3 and 4. the same sources and the same exports as Bazel ---
if bazel build "${bazel_backend[@]}" --jobs=2 //:librecap.so >"$work/bazel.log" 2>&1; then
  bazel_sources=$(bazel cquery "${bazel_backend[@]}" \
    'kind("source file", deps(//:librecap.so) union deps(//engine:recap))' --output=label \
    2>/dev/null | sed -nE 's/ \(null\)$//; s|^//:||; s|^//([^:]*):|\1/|p' |
    grep -E '\.(c|cu)$' | sort)
  cmake_sources=$(sort "$build/recap_sources.txt")
  if [ -z "$bazel_sources" ]; then
    fail "sources: bazel cquery listed none"
  elif diff_out=$(diff <(echo "$bazel_sources") <(echo "$cmake_sources")); then
    pass "CMake compiles Bazel's $(grep -c . <<<"$bazel_sources") library and CLI sources"
  else
    echo "< only in Bazel's targets, > only in CMakeLists.txt:"
    echo "$diff_out"
    fail "sources: CMakeLists.txt and the BUILD files differ"
  fi
  symbols() { nm -D --defined-only "$1" | awk '{print $3}' | sort -u; }
  bazel_symbols=$(symbols bazel-bin/librecap.so)
  cmake_symbols=$(symbols "$lib")
  if diff_out=$(diff <(echo "$bazel_symbols") <(echo "$cmake_symbols")); then
    pass "exports: the same $(grep -c . <<<"$cmake_symbols") symbols as bazel-bin/librecap.so"
  else
    echo "< only in Bazel's librecap.so, > only in CMake's:"
    echo "$diff_out"
    fail "exports: librecap.so differs from Bazel's"
  fi
else
  tail -30 "$work/bazel.log"
  fail "bazel build //:librecap.so (sources and exports not compared)"
fi

# --- 5. the examples, against the installed prefix alone ---
# A copy of examples/, so nothing of the source tree is near them.
cp -r examples "$work/examples"
flags=(-std=c11 -Wall -Wextra -Werror)
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
pc=$work/pc
mkdir "$pc"
if cc "${flags[@]}" "$work/examples/embed_pipeline.c" $(pkg-config --cflags --libs recap) \
  -pthread -lm -o "$pc/embed_pipeline" &&
  cc "${flags[@]}" "$work/examples/generate_tokens.c" $(pkg-config --cflags --libs recap) \
    -o "$pc/generate_tokens"; then
  pass "examples build with pkg-config"
else
  fail "examples build with pkg-config"
fi
if LD_LIBRARY_PATH=$prefix/lib "$pc/embed_pipeline"; then
  pass "embed_pipeline (pkg-config build) runs"
else
  fail "embed_pipeline (pkg-config build) runs"
fi

fp=$work/fp
if cmake -S "$work/examples" -B "$fp" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$work/fp.log" 2>&1 &&
  grep -qx "recap_DIR:PATH=$prefix/lib/cmake/recap" "$fp/CMakeCache.txt" &&
  cmake --build "$fp" -j2 >>"$work/fp.log" 2>&1; then
  pass "examples build with find_package(recap)"
else
  cat "$work/fp.log"
  fail "examples build with find_package(recap)"
fi
# CMake gives the programs a build-tree run path to the prefix's lib/.
if "$fp/embed_pipeline"; then
  pass "embed_pipeline (find_package build) runs"
else
  fail "embed_pipeline (find_package build) runs"
fi

# The tiny llama's prompt and transformers' greedy continuation (every choice in it is clear:
# expected.json's top-two margins are far above float noise, as tests/generator_test.c checks).
model=tests/data/models/llama
read -r prompt want < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
n = d["prompt_length"]
print(",".join(map(str, d["tokens"][:n])), ",".join(map(str, d["tokens"][n:])))
' "$model/expected.json")
spec=$work/llama_serve.yaml
if "$prefix/bin/recap" import-hf "$model" -o "$spec" --paged --max-seq 64 >"$work/import.log" 2>&1; then
  max_new=$(tr ',' '\n' <<<"$want" | grep -c .)
  got=$("$fp/generate_tokens" "$spec" "$max_new" ${prompt//,/ })
  got=${got// /,}
  if [ "$got" = "$want" ]; then
    pass "generate_tokens reproduces transformers' $max_new greedy ids"
  else
    echo "generate_tokens: got  $got"
    echo "                 want $want"
    fail "generate_tokens reproduces transformers' greedy ids"
  fi
else
  cat "$work/import.log"
  fail "installed recap import-hf"
fi

finish
