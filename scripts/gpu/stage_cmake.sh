#!/usr/bin/env bash
# Builds the CUDA CMake tree (CMakeLists.txt, the consumers' build; sm_90 only, like the Bazel
# stage) and installs it into stage/cmake with the examples built against the installed files
# alone (pkg-config) and the distribution's libyaml and jansson beside librecap.so, which the
# GPU machine lacks. scripts/gpu/stage_gpu.sh calls it before packing when STAGE_CMAKE=1;
# gpu_cmake.sh runs what it staged there.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/cmake-cuda-stage
prefix=$PWD/stage/cmake
cmake -S . -B "$build" -DRECAP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build" -j2 >/dev/null
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
mkdir -p "$prefix/examples"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=c11 -O2 -Wall -Wextra -Werror examples/embed_pipeline.c $(pkg-config --cflags --libs recap) \
  -pthread -lm -o "$prefix/examples/embed_pipeline"
cc -std=c11 -O2 -Wall -Wextra -Werror examples/generate_tokens.c $(pkg-config --cflags --libs recap) \
  -o "$prefix/examples/generate_tokens"
cp -L /usr/lib/x86_64-linux-gnu/libyaml-0.so.2 /usr/lib/x86_64-linux-gnu/libjansson.so.4 "$prefix/lib/"
strip "$prefix/lib/librecap.so"* "$prefix/bin/recap" 2>/dev/null || true
cp scripts/gpu/gpu_cmake.sh stage/gpu_cmake.sh
echo "staged the CUDA CMake install: $(du -sh "$prefix" | cut -f1)"
