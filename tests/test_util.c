/* test_util.c: CUnit registry setup, CUDA-suite gating, the run summary and shared checks. */
#include "tests/test_util.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/half.h"

static int registry_ready;

static void ensure_registry(void) {
  if (registry_ready) return;
  if (CU_initialize_registry() != CUE_SUCCESS) {
    fprintf(stderr, "CUnit: cannot initialize the registry\n");
    exit(1);
  }
  CU_set_fail_on_inactive(CU_FALSE);
  registry_ready = 1;
}

CU_pSuite test_add_suite(const char *name, CU_InitializeFunc init, CU_CleanupFunc cleanup) {
  ensure_registry();
  CU_pSuite suite = CU_add_suite(name, init, cleanup);
  if (!suite) {
    fprintf(stderr, "CUnit: cannot add suite %s\n", name);
    exit(1);
  }
  return suite;
}

int test_have_cuda(void) {
  static int known = -1;
  if (known < 0) known = recap_device_is_available(RECAP_BACKEND_CUDA);
  return known;
}

/* CUDA suites left inactive for want of a device (see test_run_all). */
static unsigned cuda_suites_inactive;

CU_pSuite test_add_cuda_suite(const char *name, CU_InitializeFunc init, CU_CleanupFunc cleanup) {
  CU_pSuite suite = test_add_suite(name, init, cleanup);
  if (!test_have_cuda()) {
    CU_set_suite_active(suite, CU_FALSE);
    cuda_suites_inactive++;
    printf(
        "INACTIVE suite '%s': no CUDA device on this machine (%s); its tests did not run "
        "and are not counted as passed\n",
        name, recap_backend_compiled(RECAP_BACKEND_CUDA) ? "no driver or GPU" : "host-only build");
  }
  return suite;
}

static char capture_path[PATH_MAX];
static int saved_stderr = -1;

void test_stderr_capture_begin(void) {
  const char *dir = getenv("TEST_TMPDIR");
  snprintf(capture_path, sizeof capture_path, "%s/stderr.XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(capture_path);
  CU_ASSERT_FATAL(fd >= 0);
  fflush(stderr);
  saved_stderr = dup(STDERR_FILENO);
  CU_ASSERT_FATAL(saved_stderr >= 0);
  CU_ASSERT_FATAL(dup2(fd, STDERR_FILENO) >= 0);
  close(fd);
}

char *test_stderr_capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  saved_stderr = -1;
  FILE *f = fopen(capture_path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  const size_t cap = 1 << 16;
  char *text = malloc(cap);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  size_t n = fread(text, 1, cap - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(capture_path);
  return text;
}

int test_count_occurrences(const char *text, const char *needle) {
  int count = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) count++;
  return count;
}

double test_scaled_seconds(double seconds) {
  static double scale = 0;
  if (scale == 0) {
    const char *text = getenv("RECAP_TEST_TIME_SCALE");
    char *end = NULL;
    double v = text ? strtod(text, &end) : 1;
    if (text && (end == text || *end || !isfinite(v) || v < 1)) {
      fprintf(stderr, "warning: RECAP_TEST_TIME_SCALE='%s' is not a number >= 1; using 1\n", text);
      v = 1;
    }
    scale = v;
  }
  return seconds * scale;
}

int test_run_all(void) {
  ensure_registry();
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned ran = CU_get_number_of_tests_run();
  unsigned failed = CU_get_number_of_tests_failed();
  unsigned asserts_failed = CU_get_number_of_failures();
  /* A binary of CUDA suites only (ops_cuda_*_test, ...) runs nothing without a device: every
   * suite is inactive, as the run printed, and that is no failure of the binary. Any other
   * run in which no test ran is one. */
  unsigned suites = CU_get_registry()->uiNumberOfSuites;
  int gpu_only = ran == 0 && suites > 0 && cuda_suites_inactive == suites;
  int code = (failed == 0 && asserts_failed == 0 && (ran > 0 || gpu_only)) ? 0 : 1;
  if (gpu_only)
    printf("no test ran: every suite needs a CUDA device (all INACTIVE, none counted as passed)\n");
  else if (ran == 0)
    printf("no test ran: counted as a failure\n");
  CU_cleanup_registry();
  return code;
}

recap_device test_device = {RECAP_BACKEND_HOST, 0};

int test_suite_use_host(void) {
  test_device = (recap_device){RECAP_BACKEND_HOST, 0};
  return 0;
}

int test_suite_use_cuda(void) {
  test_device = (recap_device){RECAP_BACKEND_CUDA, 0};
  return 0;
}

void test_add_host_and_cuda_suites(const char *area, const test_case *tests, size_t count) {
  char name[128];
  snprintf(name, sizeof name, "%s/host", area);
  CU_pSuite host = test_add_suite(name, test_suite_use_host, NULL);
  for (size_t i = 0; i < count; i++) CU_add_test(host, tests[i].name, tests[i].fn);
  snprintf(name, sizeof name, "%s/cuda", area);
  CU_pSuite cuda = test_add_cuda_suite(name, test_suite_use_cuda, test_suite_use_host);
  for (size_t i = 0; i < count; i++)
    if (tests[i].device_specific) CU_add_test(cuda, tests[i].name, tests[i].fn);
}

void test_rng_init(test_rng *rng) {
  static uint64_t seed;
  if (!seed) {
    const char *env = getenv("RECAP_TEST_SEED");
    seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
    if (!seed) seed = 1;
    printf("test data seed: RECAP_TEST_SEED=%llu\n", (unsigned long long)seed);
  }
  rng->state = seed;
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  if (!seed) seed = 1;
}

uint64_t test_rng_next(test_rng *rng) {
  uint64_t x = rng->state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  rng->state = x;
  return x * 2685821657736338717ull;
}

double test_rng_uniform(test_rng *rng, double lo, double hi) {
  return lo + (hi - lo) * (double)(test_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

int test_buffers_close(const char *what, recap_dtype dtype, const void *a, const void *b,
                       size_t bytes) {
  double tol = dtype == RECAP_DTYPE_F16 ? 1e-2 : dtype == RECAP_DTYPE_BF16 ? 3e-2 : 1e-4;
  size_t n = bytes / recap_dtype_size(dtype);
  for (size_t i = 0; i < n; ++i) {
    double x = recap__load_f32(a, dtype, (int64_t)i), y = recap__load_f32(b, dtype, (int64_t)i);
    if (!(fabs(x - y) <= tol + tol * fabs(y))) {
      fprintf(stderr, "\n  %s: element %zu differs: %.8g vs %.8g\n", what, i, x, y);
      return 0;
    }
  }
  return 1;
}

int test_for_each_yaml(const char *dir, void (*fn)(const char *path, const char *file, void *ctx),
                       void *ctx) {
  DIR *d = opendir(dir);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 5, ".yaml") != 0) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    fn(path, e->d_name, ctx);
    count++;
  }
  closedir(d);
  return count;
}

static const struct {
  const char *file;
  const char *dims[8];
} example_dims[] = {
    {"decode_step.yaml", {"B=1,2,4", "D=32", "H=2", "Dh=16", "Smax=8", NULL}},
    {"prefill_decode.yaml", {"B=1,2", "D=32", "H=2", "Dh=16", "Smax=32", NULL}},
    {"fork_join.yaml", {"B=4", "D=32", NULL}},
    {"mlp_decode.yaml", {"B=1,2,4", "H=32", NULL}},
    {"mlp_large.yaml", {"B=8", "H=32", NULL}},
    {"overlap_serial.yaml", {"D=2048", NULL}},
    {"overlap_streams.yaml", {"D=2048", NULL}},
    /* w_qkv's 3072 rows are literal: D stays 1024, the rest shrinks. */
    {"transformer_block.yaml", {"B=1", "S=8", "F=64", NULL}},
};

const char *const *test_example_dims(const char *file) {
  for (size_t i = 0; i < sizeof example_dims / sizeof example_dims[0]; ++i)
    if (strcmp(example_dims[i].file, file) == 0) return example_dims[i].dims;
  return NULL;
}
