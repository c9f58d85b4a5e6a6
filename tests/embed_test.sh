#!/usr/bin/env bash
# Compiles, links and runs an embedding program (tests/embed/pipeline_embed.c) as a user would:
# the system C compiler, recap.h and librecap.so, nothing else of recap. The program builds a
# pipeline from a string and runs it in graph mode on the host backend, checking its outputs.
set -euo pipefail
lib=$(realpath "$1")
header=$(realpath "$2")
program=$(realpath "$3")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/include" "$work/lib"
cp "$header" "$work/include/recap.h"
# Installed as a package installs it: the file under its soname, and the development link
# librecap.so that -lrecap finds; the program then records librecap.so.0 (the ABI it needs).
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = librecap.so.0 ] || { echo "FAIL: librecap.so's soname is '$soname'"; exit 1; }
cp "$lib" "$work/lib/$soname"
ln -s "$soname" "$work/lib/librecap.so"
# A sanitizer build of the library needs the same sanitizer runtime in the program, loaded
# before every other library (the test's environment preloads nothing).
flags=()
preload=""
undefined=$(nm -D --undefined-only "$lib")
if grep -q '__asan_' <<<"$undefined"; then
  flags+=(-fsanitize=address,undefined)
  preload=$(${CC:-cc} -print-file-name=libasan.so)
fi
${CC:-cc} -std=c11 -Wall -Wextra -Werror "${flags[@]}" -I "$work/include" "$program" \
  -L "$work/lib" -lrecap -lm -o "$work/embed"
# The CUDA build's librecap.so needs libcublas: from the toolkit, as an embedder's loader path.
export LD_LIBRARY_PATH="$work/lib:${CUDA_PATH:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
needed=$(readelf -d "$work/embed" | grep NEEDED | grep -c 'librecap\.so\.0\]' || true)
[ "$needed" -eq 1 ] || { echo "FAIL: the program does not need librecap.so.0"; exit 1; }
# The program's references carry the version node, so a librecap.so.0 without it (or an ABI
# moved to RECAP_1) is refused by the loader instead of bound.
nm -D --undefined-only "$work/embed" | grep -q 'recap_pipeline_create_string@RECAP_0' ||
  { echo "FAIL: the program's recap symbols are not versioned RECAP_0"; exit 1; }
LD_PRELOAD="$preload" "$work/embed"
