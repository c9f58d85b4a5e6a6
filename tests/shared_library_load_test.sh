#!/usr/bin/env bash
# librecap.so as a package ships it (docs/PACKAGING.md): its soname is librecap.so.0, its
# dynamic section names no RPATH/RUNPATH (nothing points into the build tree), and a host
# program that already loaded another cuBLAS into the global namespace (the stub, as a PyTorch
# wheel's libcublasLt.so.12 would be) can dlopen it and run a pipeline without recap binding
# to that cuBLAS (tests/preload/load_after_stub.c).
set -euo pipefail
lib=$(realpath "$1")
header=$(realpath "$2")
stub_src=$(realpath "$3")
program=$(realpath "$4")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

dynamic=$(readelf -d "$lib")
grep -q '(SONAME).*\[librecap\.so\.0\]' <<<"$dynamic" ||
  { echo "FAIL: the soname is not librecap.so.0"; grep SONAME <<<"$dynamic"; exit 1; }
if grep -E '\((RPATH|RUNPATH)\)' <<<"$dynamic"; then
  echo "FAIL: librecap.so carries a library search path (above); it must find its"
  echo "      dependencies through the loader's ordinary search"
  exit 1
fi

# A sanitizer build of the library needs the same runtime in the program, loaded first.
flags=()
preload=""
undefined=$(nm -D --undefined-only "$lib") # not piped into grep -q: pipefail would see SIGPIPE
if grep -q '__asan_' <<<"$undefined"; then
  flags+=(-fsanitize=address,undefined)
  preload=$(${CC:-cc} -print-file-name=libasan.so)
fi
mkdir "$work/include" "$work/stub"
cp "$header" "$work/include/recap.h"
cp "$lib" "$work/librecap.so.0"
${CC:-cc} -shared -fPIC -Wl,-soname,libcublasLt.so.12 "$stub_src" -o "$work/stub/libcublasLt.so.12"
${CC:-cc} -std=c11 -Wall -Wextra -Werror "${flags[@]}" -I "$work/include" "$program" -ldl \
  -o "$work/load_after_stub"
# The CUDA build finds the toolkit's cuBLAS as an embedder's would: through the loader's path.
export LD_LIBRARY_PATH="${CUDA_PATH:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LD_PRELOAD="$preload" "$work/load_after_stub" "$work/stub/libcublasLt.so.12" "$work/librecap.so.0"
