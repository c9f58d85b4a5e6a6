/*
 * nvtx_test.c: recap_nvtx_* and RECAP_NVTX_SCOPE reach an attached NVTX tool, in order and in
 * recap's domain, and do nothing harmful when no tool is attached.
 *
 * The tool is tests/nvtx_recorder.c (libnvtx_recorder.so, passed as argv[1] by Bazel). NVTX
 * loads a tool once, on the process's first NVTX call, so main() sets NVTX_INJECTION64_PATH
 * before any test runs, and the tests run in registration order reading the record file from
 * where the previous test stopped. The no-tool case needs a fresh process: the test re-runs
 * this binary with --without-tool and without NVTX_INJECTION64_PATH.
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

extern char **environ;

static char record_path[PATH_MAX];
static long record_offset; /* how much of the record file earlier tests consumed */

static int make_temp_file(char *path, size_t size, const char *stem) {
  const char *dir = getenv("TEST_TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  int n = snprintf(path, size, "%s/%s.XXXXXX", dir, stem);
  if (n < 0 || (size_t)n >= size) return -1;
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

/* Reads what the recorder appended since the last call into buf (NUL-terminated). */
static void record_read_new(char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(record_path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL_FATAL(fseek(f, record_offset, SEEK_SET), 0);
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  record_offset += (long)n;
  fclose(f);
}

#define CHECK_RECORDED(expected)                                                                \
  do {                                                                                          \
    char recorded_[4096];                                                                       \
    record_read_new(recorded_, sizeof recorded_);                                               \
    if (strcmp(recorded_, (expected)) != 0)                                                     \
      fprintf(stderr, "\n  %s:%d: recorded:\n%s  expected:\n%s", __FILE__, __LINE__, recorded_, \
              (expected));                                                                      \
    CU_ASSERT_STRING_EQUAL(recorded_, (expected));                                              \
  } while (0)

/* Must stay the first test: the first call loads the tool and creates the domain. */
static void test_first_call_loads_tool_and_creates_recap_domain(void) {
  recap_nvtx_mark("first");
  CHECK_RECORDED(
      "domain recap\n"
      "recap: mark first\n");
}

static void test_marks_go_to_recap_domain_in_call_order(void) {
  recap_nvtx_mark("one");
  recap_nvtx_mark("two");
  recap_nvtx_mark("three");
  CHECK_RECORDED(
      "recap: mark one\n"
      "recap: mark two\n"
      "recap: mark three\n");
}

static void test_nested_ranges_push_and_pop_in_order(void) {
  recap_nvtx_range_push("outer");
  recap_nvtx_range_push("inner");
  recap_nvtx_mark("inside");
  recap_nvtx_range_pop();
  recap_nvtx_mark("between");
  recap_nvtx_range_pop();
  CHECK_RECORDED(
      "recap: push outer\n"
      "recap: push inner\n"
      "recap: mark inside\n"
      "recap: pop\n"
      "recap: mark between\n"
      "recap: pop\n");
}

static void test_scope_pops_at_end_of_block(void) {
  {
    RECAP_NVTX_SCOPE("block");
    recap_nvtx_mark("in block");
    {
      RECAP_NVTX_SCOPE("nested");
      recap_nvtx_mark("in nested");
    }
    recap_nvtx_mark("after nested");
  }
  recap_nvtx_mark("after block");
  CHECK_RECORDED(
      "recap: push block\n"
      "recap: mark in block\n"
      "recap: push nested\n"
      "recap: mark in nested\n"
      "recap: pop\n"
      "recap: mark after nested\n"
      "recap: pop\n"
      "recap: mark after block\n");
}

static int scoped_function(int leave_early) {
  RECAP_NVTX_SCOPE("function");
  if (leave_early) return 1;
  recap_nvtx_mark("late");
  return 0;
}

static void test_scope_pops_on_early_return_and_continue(void) {
  CU_ASSERT_EQUAL(scoped_function(1), 1);
  for (int i = 0; i < 2; i++) {
    RECAP_NVTX_SCOPE("iteration");
    if (i == 0) continue;
    recap_nvtx_mark("second iteration");
  }
  CHECK_RECORDED(
      "recap: push function\n"
      "recap: pop\n"
      "recap: push iteration\n"
      "recap: pop\n"
      "recap: push iteration\n"
      "recap: mark second iteration\n"
      "recap: pop\n");
}

static void test_null_message_reaches_tool_as_empty_text(void) {
  recap_nvtx_mark(NULL);
  recap_nvtx_range_push(NULL);
  recap_nvtx_range_pop();
  CHECK_RECORDED(
      "recap: mark \n"
      "recap: push \n"
      "recap: pop\n");
}

/* The child half of the no-tool test: calls that would crash or misbehave if NVTX had no
 * safe no-tool path (including an unbalanced pop). */
static int run_without_tool(void) {
  if (getenv("NVTX_INJECTION64_PATH")) {
    fprintf(stderr, "child: NVTX_INJECTION64_PATH is still set\n");
    return 2;
  }
  recap_nvtx_mark("no tool");
  recap_nvtx_mark(NULL);
  recap_nvtx_range_pop();
  for (int i = 0; i < 1000; i++) {
    RECAP_NVTX_SCOPE("no tool scope");
    recap_nvtx_range_push("no tool range");
    recap_nvtx_range_pop();
  }
  return 0;
}

static void test_calls_without_tool_are_harmless_and_record_nothing(void) {
  char child_record[PATH_MAX];
  CU_ASSERT_EQUAL_FATAL(make_temp_file(child_record, sizeof child_record, "nvtx_child"), 0);
  char record_var[PATH_MAX + 32];
  snprintf(record_var, sizeof record_var, "RECAP_NVTX_RECORD_FILE=%s", child_record);

  /* The child's environment: ours, minus the tool, with its own record file. */
  size_t count = 0;
  while (environ[count]) count++;
  char **child_env = calloc(count + 2, sizeof *child_env);
  CU_ASSERT_PTR_NOT_NULL_FATAL(child_env);
  size_t k = 0;
  for (size_t i = 0; i < count; i++) {
    if (strncmp(environ[i], "NVTX_INJECTION64_PATH=", 22) == 0) continue;
    if (strncmp(environ[i], "RECAP_NVTX_RECORD_FILE=", 23) == 0) continue;
    child_env[k++] = environ[i];
  }
  child_env[k++] = record_var;
  child_env[k] = NULL;

  char *child_argv[] = {"nvtx_test", "--without-tool", NULL};
  pid_t pid = fork();
  if (pid == 0) {
    execve("/proc/self/exe", child_argv, child_env);
    _exit(127);
  }
  free(child_env);
  CU_ASSERT_FATAL(pid > 0);
  int wstatus = 0;
  CU_ASSERT_EQUAL_FATAL(waitpid(pid, &wstatus, 0), pid);
  CU_ASSERT_TRUE(WIFEXITED(wstatus));
  CU_ASSERT_EQUAL(WEXITSTATUS(wstatus), 0);

  struct stat st;
  CU_ASSERT_EQUAL(stat(child_record, &st), 0);
  CU_ASSERT_EQUAL(st.st_size, 0);
  unlink(child_record);
}

/* An eager run's op ranges carry the ops' names, a block's expanded ones included. */
static void test_pipeline_op_ranges_carry_expanded_block_names(void) {
  static const char yaml[] =
      "name: ranges\ndevice: host\ndims: {D: 4}\n"
      "blocks:\n"
      "  layer: {input: x, output: y, ops: [{op: relu, in: [x], out: y, name: act}]}\n"
      "tensors: {x0: {shape: [D], role: input}}\n"
      "ops:\n"
      "  - {block: layer, count: 2, in: x0, out: h, name: layers}\n"
      "  - {op: neg, in: [h], out: out, name: last}\n";
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_mode = 1, .mode = RECAP_MODE_EAGER, .no_fusion = 1};
  recap_pipeline *p = NULL;
  CU_ASSERT_EQUAL_FATAL(recap_pipeline_create_string(yaml, sizeof yaml - 1, "r.yaml", &o, &p),
                        RECAP_OK);
  char skipped[4096];
  record_read_new(skipped, sizeof skipped); /* whatever creating the pipeline recorded */
  CU_ASSERT_EQUAL(recap_pipeline_run(p, 0), RECAP_OK);
  CHECK_RECORDED(
      "recap: push ranges eager bucket 0\n"
      "recap: push layers.0.act\n"
      "recap: pop\n"
      "recap: push layers.1.act\n"
      "recap: pop\n"
      "recap: push last\n"
      "recap: pop\n"
      "recap: pop\n");
  CU_ASSERT_EQUAL(recap_pipeline_destroy(p), RECAP_OK);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--without-tool") == 0) return run_without_tool();
  if (argc != 2) {
    fprintf(stderr, "usage: %s <path to libnvtx_recorder.so>\n", argv[0]);
    return 1;
  }
  /* NVTX hands the path to dlopen, which searches the library path for a bare name. */
  char recorder[PATH_MAX];
  if (!realpath(argv[1], recorder)) {
    fprintf(stderr, "cannot resolve %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  if (make_temp_file(record_path, sizeof record_path, "nvtx_record") != 0) {
    fprintf(stderr, "cannot create a record file: %s\n", strerror(errno));
    return 1;
  }
  setenv("NVTX_INJECTION64_PATH", recorder, 1);
  setenv("RECAP_NVTX_RECORD_FILE", record_path, 1);

  CU_pSuite tool = test_add_suite("nvtx/recorder", NULL, NULL);
  CU_ADD_TEST(tool, test_first_call_loads_tool_and_creates_recap_domain);
  CU_ADD_TEST(tool, test_marks_go_to_recap_domain_in_call_order);
  CU_ADD_TEST(tool, test_nested_ranges_push_and_pop_in_order);
  CU_ADD_TEST(tool, test_scope_pops_at_end_of_block);
  CU_ADD_TEST(tool, test_scope_pops_on_early_return_and_continue);
  CU_ADD_TEST(tool, test_null_message_reaches_tool_as_empty_text);
  CU_ADD_TEST(tool, test_pipeline_op_ranges_carry_expanded_block_names);
  CU_pSuite none = test_add_suite("nvtx/no tool", NULL, NULL);
  CU_ADD_TEST(none, test_calls_without_tool_are_harmless_and_record_nothing);
  int code = test_run_all();
  unlink(record_path);
  return code;
}
