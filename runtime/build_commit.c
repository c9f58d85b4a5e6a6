/* build_commit.c: recap_build_commit(), the one object that knows the git commit.
 *
 * It is a file of its own so that a new commit recompiles this file alone. The commit comes
 * from the build system: Bazel's stamped header (runtime/BUILD, build_commit_stamp), or a
 * -DRECAP_BUILD_COMMIT="\"abc1234\"" that another build (CMake at configure time) passes for
 * this file; without either it is "unknown". */
#include "include/recap.h"

#ifdef RECAP_BUILD_COMMIT_STAMPED
#include "runtime/build_commit_stamp.h"
#endif

#ifndef RECAP_BUILD_COMMIT
#define RECAP_BUILD_COMMIT "unknown"
#endif

const char *recap_build_commit(void) {
  return RECAP_BUILD_COMMIT;
}
