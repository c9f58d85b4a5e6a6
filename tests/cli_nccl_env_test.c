/*
 * cli_nccl_env_test.c: the command line's NCCL defaults (cli/nccl_env.h), which every command
 * that makes a communicator applies first: NCCL_GRAPH_MIXING_SUPPORT=0 when the environment
 * lacks it, and a user's own value (0, 1, even empty) left as it was.
 *
 * The commands themselves make a communicator only with NCCL (a world of 2 or more on CUDA),
 * so this checks the function they call; what NCCL then does with the value is checked on two
 * GPUs (scripts/gpu/gpu_tp_loop.sh: decode loops across ranks without setting it).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "cli/nccl_env.h"
#include "tests/test_util.h"

static void test_sets_graph_mixing_off_when_unset(void) {
  CU_ASSERT_EQUAL(unsetenv("NCCL_GRAPH_MIXING_SUPPORT"), 0);
  CU_ASSERT_TRUE(cli_nccl_env_defaults());
  const char *v = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  CU_ASSERT_PTR_NOT_NULL_FATAL(v);
  CU_ASSERT_STRING_EQUAL(v, "0");
  /* Twice is the same: the second call finds the value the first set. */
  CU_ASSERT_FALSE(cli_nccl_env_defaults());
  CU_ASSERT_STRING_EQUAL(getenv("NCCL_GRAPH_MIXING_SUPPORT"), "0");
}

static void test_leaves_a_users_value_alone(void) {
  static const char *const users[] = {"1", "0", "", "2"};
  for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
    CU_ASSERT_EQUAL(setenv("NCCL_GRAPH_MIXING_SUPPORT", users[i], 1), 0);
    CU_ASSERT_FALSE(cli_nccl_env_defaults());
    const char *v = getenv("NCCL_GRAPH_MIXING_SUPPORT");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_STRING_EQUAL(v, users[i]);
  }
  unsetenv("NCCL_GRAPH_MIXING_SUPPORT");
}

int main(void) {
  CU_pSuite s = test_add_suite("cli_nccl_env/host", NULL, NULL);
  CU_ADD_TEST(s, test_sets_graph_mixing_off_when_unset);
  CU_ADD_TEST(s, test_leaves_a_users_value_alone);
  return test_run_all();
}
