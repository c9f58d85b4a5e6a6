/*
 * env_test.c: the boolean environment switches (runtime/env.h): every accepted spelling, the
 * caller's default for unset, empty and unknown values, and the warning an unknown value
 * prints (once per variable, naming it), captured from stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/env.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_util.h"

/* Variable names no recap code reads, so the tests cannot change recap's behaviour. */
#define VAR "RECAP_ENV_TEST_SWITCH"

static void test_every_accepted_spelling_parses_in_any_case(void) {
  static const struct {
    const char *value;
    int want;
  } cases[] = {{"1", 1},    {"true", 1},  {"TRUE", 1}, {"True", 1}, {"yes", 1},
               {"YES", 1},  {"on", 1},    {"On", 1},   {"0", 0},    {"false", 0},
               {"False", 0}, {"no", 0},   {"NO", 0},   {"off", 0},  {"OFF", 0}};
  test_stderr_capture_begin();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    setenv(VAR, cases[i].value, 1);
    /* The default is the opposite of the answer, and -1, so it cannot pass by accident. */
    int got = recap__env_bool(VAR, 1 - cases[i].want);
    int got_unset = recap__env_bool(VAR, -1);
    if (got != cases[i].want || got_unset != cases[i].want)
      fprintf(stdout, "\n  %s=%s gave %d / %d\n", VAR, cases[i].value, got, got_unset);
    CU_ASSERT_EQUAL(got, cases[i].want);
    CU_ASSERT_EQUAL(got_unset, cases[i].want);
  }
  unsetenv(VAR);
  char *text = test_stderr_capture_end();
  CU_ASSERT_STRING_EQUAL(text, ""); /* accepted values print nothing */
  free(text);
}

static void test_unset_and_empty_give_the_default_silently(void) {
  test_stderr_capture_begin();
  unsetenv(VAR);
  CU_ASSERT_EQUAL(recap__env_bool(VAR, 1), 1);
  CU_ASSERT_EQUAL(recap__env_bool(VAR, 0), 0);
  CU_ASSERT_EQUAL(recap__env_bool(VAR, -1), -1);
  setenv(VAR, "", 1);
  CU_ASSERT_EQUAL(recap__env_bool(VAR, 1), 1);
  CU_ASSERT_EQUAL(recap__env_bool(VAR, -1), -1);
  unsetenv(VAR);
  char *text = test_stderr_capture_end();
  CU_ASSERT_STRING_EQUAL(text, "");
  free(text);
}

static void test_unknown_value_gives_the_default_and_warns_once_naming_the_variable(void) {
  test_stderr_capture_begin();
  setenv(VAR "_BAD", "maybe", 1);
  CU_ASSERT_EQUAL(recap__env_bool(VAR "_BAD", 1), 1);
  CU_ASSERT_EQUAL(recap__env_bool(VAR "_BAD", 0), 0);
  setenv(VAR "_BAD", "2", 1); /* not 1/0 either; the variable was warned about already */
  CU_ASSERT_EQUAL(recap__env_bool(VAR "_BAD", -1), -1);
  setenv(VAR "_OTHER", "enable", 1);
  CU_ASSERT_EQUAL(recap__env_bool(VAR "_OTHER", 0), 0);
  unsetenv(VAR "_BAD");
  unsetenv(VAR "_OTHER");
  char *text = test_stderr_capture_end();
  CU_ASSERT_EQUAL(test_count_occurrences(text, "recap: warning: "), 2);
  CU_ASSERT_EQUAL(test_count_occurrences(text, VAR "_BAD='maybe'"), 1);
  CU_ASSERT_EQUAL(test_count_occurrences(text, VAR "_OTHER='enable'"), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "expected 1/0, true/false, yes/no or on/off"));
  free(text);
}

int main(void) {
  CU_pSuite s = test_add_suite("env", NULL, NULL);
  CU_ADD_TEST(s, test_every_accepted_spelling_parses_in_any_case);
  CU_ADD_TEST(s, test_unset_and_empty_give_the_default_silently);
  CU_ADD_TEST(s, test_unknown_value_gives_the_default_and_warns_once_naming_the_variable);
  return test_run_all();
}
