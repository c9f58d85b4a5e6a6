#!/usr/bin/env bash
# Installs what building recap needs on Debian/Ubuntu (the CUDA toolkit is assumed present at
# $CUDA_PATH or /usr/local/cuda). Quiet when everything is already there.
set -euo pipefail

need=()
command -v bazel >/dev/null 2>&1 || need+=(bazel-bootstrap)
[ -f /usr/lib/x86_64-linux-gnu/libcunit.a ] || need+=(libcunit1-dev)
[ -f /usr/lib/x86_64-linux-gnu/libyaml.a ] || need+=(libyaml-dev)
[ -f /usr/lib/x86_64-linux-gnu/libjansson.a ] || need+=(libjansson-dev)
command -v clang-14 >/dev/null 2>&1 || need+=(clang-14)
# scripts/fuzz.sh: libFuzzer's runtime and the lld linker (.bazelrc's --config=fuzz).
ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
  need+=(libclang-rt-14-dev)
command -v ld.lld-14 >/dev/null 2>&1 || need+=(lld-14)
# scripts/cmake_check.sh (.ci/run): the CMake build for consumers, which finds libyaml and
# jansson through pkg-config.
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# scripts/check_layers.py (.ci/run's layering check): python3, standard library only.
command -v python3 >/dev/null 2>&1 || need+=(python3)
# scripts/check_schema.py (.ci/run's spec schema check): YAML and JSON Schema for python3.
python3 -c 'import yaml' >/dev/null 2>&1 || need+=(python3-yaml)
python3 -c 'import jsonschema' >/dev/null 2>&1 || need+=(python3-jsonschema)
# tests/python_test.sh (the Python package's tests): numpy for python3, or for Debian's own.
python3 -c 'import numpy' >/dev/null 2>&1 || /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 ||
  need+=(python3-numpy)
if [ ${#need[@]} -gt 0 ]; then
  echo "recap: installing ${need[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${need[@]}"
fi
cuda="${CUDA_PATH:-/usr/local/cuda}"
if [ ! -x "$cuda/bin/nvcc" ]; then
  echo "recap: the CUDA toolkit is required (nvcc not found under $cuda; set CUDA_PATH)" >&2
  exit 1
fi
