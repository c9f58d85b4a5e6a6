#!/usr/bin/env bash
# The main job: builds recap and runs it (on the host backend when there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
bazel build //:recap_cli 2>&1 | grep -v '^INFO\|^Loading\|^Analyzing' >&2 || true
exec bazel-bin/engine/recap info "$@"
