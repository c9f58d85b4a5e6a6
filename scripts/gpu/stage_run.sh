#!/usr/bin/env bash
# Runs on the GPU machine: unpacks stage/bundle.tar.xz (made by scripts/gpu/stage_gpu.sh) into a
# scratch folder and runs one of its scripts there, e.g. `bash stage/run.sh gpu_run.sh`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=/tmp/recap_stage
rm -rf "$dest"
mkdir -p "$dest"
xz -dc "$here/bundle.tar.xz" | tar xf - -C "$dest"
script=${1:?usage: run.sh SCRIPT [ARGS...]}
shift
exec bash "$dest/$script" "$@"
