#!/usr/bin/env bash
# The main job: builds recap and runs it (on the host backend when there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
bazel build --noshow_progress --ui_event_filters=-info //:recap_cli
# The bazel-bin symlink may point at another configuration's tree; ask Bazel where it is.
bin=$(bazel info bazel-bin 2>/dev/null)
# Eager against graph replay on the decode MLP; on a machine without a GPU this runs on the
# host backend (it says so) with the iteration count capped.
exec "$bin/engine/recap" bench specs/mlp_decode.yaml "$@"
