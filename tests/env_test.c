/*
 * env_test.c: the boolean environment switches (runtime/env.h): every accepted spelling, the
 * caller's default for unset, empty and unknown values, and the warning an unknown value
 * prints (once per variable, naming it), captured from stderr; and the table of variables
 * (runtime/env_table.c) that `recap --help`, `recap env` and docs/ENVIRONMENT.md print.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/env.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_util.h"

/* Variable names no recap code reads, so the tests cannot change recap's behaviour; lower case,
 * so that scripts/check_env.py does not take them for RECAP_* variables missing from the table
 * (runtime/env_table.c). */
#define VAR "recap_env_test_switch"

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

/* Text that would break the table docs/ENVIRONMENT.md prints (a cell ends at '|', a row at a
 * newline). */
static bool fits_a_markdown_cell(const char *text) {
  return text == NULL || strpbrk(text, "|\n") == NULL;
}

static void test_table_is_sorted_unique_and_printable(void) {
  size_t n = 0;
  const recap__env_var *vars = recap__env_vars(&n);
  CU_ASSERT_FATAL(n > 0);
  for (size_t i = 0; i < n; i++) {
    const recap__env_var *v = &vars[i];
    CU_ASSERT_EQUAL(strncmp(v->name, "RECAP_", 6), 0);
    if (i > 0 && strcmp(vars[i - 1].name, v->name) >= 0)
      fprintf(stdout, "\n  %s is not after %s\n", v->name, vars[i - 1].name);
    CU_ASSERT(i == 0 || strcmp(vars[i - 1].name, v->name) < 0);
    CU_ASSERT_PTR_EQUAL(recap__env_find(v->name), v);
    CU_ASSERT(v->values && v->values[0] && v->fallback && v->fallback[0]);
    /* `recap --help` prints the summary after a 30-column name: 100 columns in all. */
    CU_ASSERT(v->summary && strlen(v->summary) <= 70);
    CU_ASSERT(fits_a_markdown_cell(v->values) && fits_a_markdown_cell(v->fallback) &&
              fits_a_markdown_cell(v->summary) && fits_a_markdown_cell(v->details));
    CU_ASSERT_STRING_NOT_EQUAL(recap__env_kind_name(v->kind), "?");
    /* A switch's default is what recap__env_bool falls back to: on, off, or the caller's own
     * choice ("auto"). */
    if (v->kind == RECAP__ENV_BOOL)
      CU_ASSERT(strcmp(v->fallback, "0") == 0 || strcmp(v->fallback, "1") == 0 ||
                strcmp(v->fallback, "auto") == 0);
  }
  CU_ASSERT_PTR_NULL(recap__env_find(VAR));
}

int main(void) {
  CU_pSuite s = test_add_suite("env", NULL, NULL);
  CU_ADD_TEST(s, test_every_accepted_spelling_parses_in_any_case);
  CU_ADD_TEST(s, test_unset_and_empty_give_the_default_silently);
  CU_ADD_TEST(s, test_unknown_value_gives_the_default_and_warns_once_naming_the_variable);
  CU_ADD_TEST(s, test_table_is_sorted_unique_and_printable);
  return test_run_all();
}
