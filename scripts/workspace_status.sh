#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc), run in the workspace root: the commit
# recap_build_commit() reports. STABLE_ keys rebuild what stamps them when they change: only
# runtime/build_commit.c and the links of librecap.so and the CLI. Outside a git checkout of
# this tree (a source tarball, even one unpacked inside another repository) it is "unknown".
commit=unknown
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
  if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
    commit="$commit-dirty"
  fi
fi
echo "STABLE_RECAP_COMMIT $commit"
