#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the commit recap_build_commit() reports.
# STABLE_ keys rebuild what stamps them when they change: only runtime/build_commit.c and the
# links of librecap.so and the CLI. Outside git (a source tarball) the commit is "unknown".
commit=$(git rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
  commit="$commit-dirty"
fi
echo "STABLE_RECAP_COMMIT $commit"
