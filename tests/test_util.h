/*
 * test_util.h: what every CUnit test file shares.
 *
 *   static void test_stream_query_reports_idle(void) { CHECK_OK(recap_stream_query(s)); }
 *   int main(void) {
 *     CU_pSuite host = test_add_suite("streams/host", NULL, NULL);
 *     CU_ADD_TEST(host, test_stream_query_reports_idle);
 *     CU_pSuite cuda = test_add_cuda_suite("streams/cuda", NULL, NULL);   // inactive w/o GPU
 *     ...
 *     return test_run_all();
 *   }
 *
 * A CUDA suite on a machine without a CUDA device is registered INACTIVE and the run says
 * so: CUnit then lists it under "Inactive", never as passed.
 */
#ifndef RECAP_TESTS_TEST_UTIL_H
#define RECAP_TESTS_TEST_UTIL_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "include/recap.h"

/* Asserts that a recap call succeeded; on failure prints the status and detail message. */
#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    recap_status check_status_ = (expr);                                      \
    if (check_status_ != RECAP_OK)                                            \
      fprintf(stderr, "\n  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, \
              recap_status_name(check_status_), recap_last_error());          \
    CU_ASSERT_EQUAL_FATAL(check_status_, RECAP_OK);                           \
  } while (0)

/* Asserts that a recap call failed with `expected`. */
#define CHECK_STATUS(expr, expected)                                                              \
  do {                                                                                            \
    recap_status check_status_ = (expr);                                                          \
    if (check_status_ != (expected))                                                              \
      fprintf(stderr, "\n  %s:%d: %s -> %s (expected %s): %s\n", __FILE__, __LINE__, #expr,       \
              recap_status_name(check_status_), recap_status_name(expected), recap_last_error()); \
    CU_ASSERT_EQUAL(check_status_, (expected));                                                   \
  } while (0)

/* Asserts that this thread's detail message contains `needle`. */
#define CHECK_ERROR_MENTIONS(needle)                                                         \
  do {                                                                                       \
    if (!strstr(recap_last_error(), (needle)))                                               \
      fprintf(stderr, "\n  %s:%d: message lacks \"%s\": %s\n", __FILE__, __LINE__, (needle), \
              recap_last_error());                                                           \
    CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), (needle)));                            \
  } while (0)

/* Starts CUnit's registry on first use. */
CU_pSuite test_add_suite(const char *name, CU_InitializeFunc init, CU_CleanupFunc cleanup);
/* A suite that needs a CUDA device: inactive, with a printed message, when none is present. */
CU_pSuite test_add_cuda_suite(const char *name, CU_InitializeFunc init, CU_CleanupFunc cleanup);
/* Whether a CUDA device is present (computed once). */
int test_have_cuda(void);
/* Sends this process's stderr to a temporary file until test_stderr_capture_end, which
 * restores it and returns what was written (at most 64 KiB; the caller frees it). For
 * checking recap's warnings. Not nestable. */
void test_stderr_capture_begin(void);
char *test_stderr_capture_end(void);
/* How many times `needle` occurs in `text` (overlapping occurrences count). */
int test_count_occurrences(const char *text, const char *needle);
/* `seconds` times RECAP_TEST_TIME_SCALE (default 1; a number >= 1, anything else is warned
 * about and ignored). For the timeouts a test gives recap and for the deadlines after which it
 * calls a run hung, which must hold on loaded machines and under sanitizers (.bazelrc's asan
 * and tsan configs and scripts/gpu/gpu_sanitize.sh set the scale); never for speed targets, which
 * are benchmarks. */
double test_scaled_seconds(double seconds);
/* Runs every suite, prints the summary, returns the process exit code (0 only if all ran
 * tests passed and at least one test ran, or, in a binary of CUDA suites only, when every
 * suite is inactive for want of a device). */
int test_run_all(void);

/* The device a suite runs on, for test files that run one body on both backends: pass
 * test_suite_use_host / test_suite_use_cuda as the suite's init function. */
extern recap_device test_device;
int test_suite_use_host(void);
int test_suite_use_cuda(void);

/* One body run on both backends: every test in "AREA/host", and those marked device-specific
 * also in "AREA/cuda" (a CUDA suite: inactive, with a message, without a device). */
typedef struct {
  const char *name;
  CU_TestFunc fn;
  bool device_specific; /* re-run on CUDA */
} test_case;
void test_add_host_and_cuda_suites(const char *area, const test_case *tests, size_t count);

/* A small deterministic generator for test data (xorshift64*), seeded per test from the
 * clock unless RECAP_TEST_SEED is set; the seed is printed so a failure can be replayed. */
typedef struct {
  uint64_t state;
} test_rng;
void test_rng_init(test_rng *rng);
uint64_t test_rng_next(test_rng *rng);
/* Uniform in [lo, hi). */
double test_rng_uniform(test_rng *rng, double lo, double hi);

/* Whether every element of a and b (bytes of dtype) agrees within the pipeline tests'
 * tolerance for the dtype (|a - b| <= atol + rtol |b|: 1e-4 for f32, 1e-2 f16, 3e-2 bf16);
 * prints `what` and the first element that does not. */
int test_buffers_close(const char *what, recap_dtype dtype, const void *a, const void *b,
                       size_t bytes);

/* Calls fn(path, file, ctx) for every .yaml file in dir (path is "dir/file") and returns how
 * many there were, so that tests over every example spec cover a new one without a list to
 * update. A missing dir is a fatal assertion. */
int test_for_each_yaml(const char *dir, void (*fn)(const char *path, const char *file, void *ctx),
                       void *ctx);

/* The `dims` overrides (NULL-terminated) that make the example specs/<file> small enough for
 * the host reference in a test, or NULL when its own dims are small already. One table for
 * every test that runs all the examples. */
const char *const *test_example_dims(const char *file);

#endif
