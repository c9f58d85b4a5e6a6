/*
 * expr_nvrtc_test.c: the NVRTC compile of generated expression kernels and its disk cache
 * (runtime/nvrtc.h); needs libnvrtc, not a GPU, and is inactive without it.
 *
 * The generated source compiles for sm_90 and sm_80, the disk cache hits on a second compile,
 * a truncated or corrupt cache file is ignored and replaced, and a warm cache serves a new
 * process (this binary re-executed with --cache-hit-probe) without opening libnvrtc. The first
 * test runs before anything loads NVRTC and checks the error when the library is missing.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/expr_util.h"

/* ------------------------------------------------------------------------------------------
 * NVRTC and the disk cache (host code; needs libnvrtc, not a GPU)
 * ---------------------------------------------------------------------------------------- */

/* Runs first in its suite, before anything has loaded NVRTC in this process. */
static void test_missing_nvrtc_is_not_supported_naming_libnvrtc(void) {
  CU_ASSERT_EQUAL_FATAL(setenv("RECAP_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1), 0);
  CHECK_STATUS(recap__nvrtc_version(NULL, NULL), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("libnvrtc");
  CHECK_ERROR_MENTIONS("/nonexistent/libnvrtc.so.13");
  char *cubin = NULL;
  size_t size = 0;
  CHECK_STATUS(
      recap__nvrtc_compile_cached("__global__ void k() {}", "k.cu", 90, &cubin, &size, NULL),
      RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(cubin);
  /* A failed load is not remembered: with the library back, it loads. */
  unsetenv("RECAP_NVRTC_LIBRARY");
  int major = 0;
  CHECK_OK(recap__nvrtc_version(&major, NULL));
  CU_ASSERT_TRUE(major >= 12);
}

static const char kEveryKind[] =
    "select(a < b, relu(a) + gelu(b) * gelu_tanh(c), silu(a) - sigmoid(b) / tanh(c)) + "
    "exp(neg(a)) + scale(b, 0.5) + cast(c, f16) + cast(a, bf16) + (a <= b) + (a > c) + "
    "(b >= c) + (a == b) + (a != c) - 2.5";

/* The CUDA source of kEveryKind (every node kind) over mixed dtypes; NULL on failure. Plain
 * code without CUnit asserts, for the probe process too. */
static char *every_kind_source_or_null(void) {
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  if (recap__expr_parse(kEveryKind, SIZE_MAX, kNames, 3, NULL, &p, &err) != RECAP_OK) return NULL;
  recap__expr_signature sig = sig_of(3, RECAP_DTYPE_F32, RECAP_DTYPE_BF16);
  sig.inputs[1] = RECAP_DTYPE_F16;
  sig.inputs[2] = RECAP_DTYPE_BF16;
  char *src = NULL;
  if (recap__expr_codegen_cuda(p, &sig, &src) != RECAP_OK) src = NULL;
  recap__expr_program_destroy(p);
  return src;
}

static char *every_kind_source(void) {
  char *src = every_kind_source_or_null();
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  return src;
}

/* `expr_test --cache-hit-probe DIR`: a fresh process compiles kEveryKind for sm_90 through the
 * cache in DIR, which the parent filled. Exit 0 when that was a hit that never opened libnvrtc,
 * printing how long it took. */
static int cache_hit_probe(const char *dir) {
  setenv("RECAP_CACHE_DIR", dir, 1);
  char *src = every_kind_source_or_null();
  if (!src) return 2;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *cubin = NULL;
  size_t size = 0;
  bool hit = false;
  recap_status st = recap__nvrtc_compile_cached(src, "probe.cu", 90, &cubin, &size, &hit);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  recap__nvrtc_stats stats;
  recap__nvrtc_stats_get(&stats);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("cache-hit-probe: %s, hit %d, libnvrtc opened %llu times, %.3f ms\n",
         recap_status_name(st), hit, (unsigned long long)stats.loads, ms);
  free(cubin);
  free(src);
  return st == RECAP_OK && hit && stats.loads == 0 ? 0 : 1;
}

/* A warm cache serves a new process without opening libnvrtc (which costs tens of ms). */
static void test_cache_hit_in_a_new_process_does_not_open_nvrtc(void) {
  char *src = every_kind_source();
  char *cubin = NULL;
  size_t size = 0;
  CHECK_OK(recap__nvrtc_compile_cached(src, "fill.cu", 90, &cubin, &size, NULL));
  free(cubin);
  free(src);
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (pid == 0) {
    char *const argv[] = {(char *)"expr_test", (char *)"--cache-hit-probe", cache_dir, NULL};
    execv("/proc/self/exe", argv);
    _exit(3);
  }
  int status = 0;
  CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
  CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_generated_source_compiles_for_sm90_and_sm80(void) {
  char *src = every_kind_source();
  static const int archs[] = {90, 80};
  for (int k = 0; k < 2; ++k) {
    char *cubin = NULL;
    size_t size = 0;
    CHECK_OK(recap__nvrtc_compile(src, "every_kind.cu", archs[k], &cubin, &size));
    CU_ASSERT_TRUE(size > 4 && memcmp(cubin,
                                      "\x7f"
                                      "ELF",
                                      4) == 0);
    free(cubin);
  }
  free(src);
  /* Source that does not compile reports NVRTC's log. */
  char *cubin = NULL;
  size_t size = 0;
  CHECK_STATUS(recap__nvrtc_compile("this is not C++", "bad.cu", 90, &cubin, &size),
               RECAP_STATUS_LIBRARY_ERROR);
  CHECK_ERROR_MENTIONS("bad.cu");
  char options[128];
  recap__nvrtc_options(90, options, sizeof options);
  CU_ASSERT_STRING_EQUAL(
      options, "--gpu-architecture=sm_90 --device-as-default-execution-space --fmad=false");
}

static void read_file(const char *path, char **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = malloc((size_t)n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(*data);
  CU_ASSERT_EQUAL((long)fread(*data, 1, (size_t)n, f), n);
  fclose(f);
  *size = (size_t)n;
}

static void write_file(const char *path, const char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, size, f), size);
  fclose(f);
}

/* Compiles through the cache and checks hit/miss and the counters' deltas. */
static void compile_expecting(const char *src, int arch, bool want_hit, int want_corrupt,
                              const char *want_cubin, size_t want_size) {
  recap__nvrtc_stats before, after;
  recap__nvrtc_stats_get(&before);
  char *cubin = NULL;
  size_t size = 0;
  bool hit = !want_hit;
  CHECK_OK(recap__nvrtc_compile_cached(src, "cached.cu", arch, &cubin, &size, &hit));
  recap__nvrtc_stats_get(&after);
  CU_ASSERT_EQUAL(hit, want_hit);
  CU_ASSERT_EQUAL(after.hits - before.hits, want_hit ? 1u : 0u);
  CU_ASSERT_EQUAL(after.compiles - before.compiles, want_hit ? 0u : 1u);
  CU_ASSERT_EQUAL(after.corrupt - before.corrupt, (uint64_t)want_corrupt);
  if (want_cubin) {
    CU_ASSERT_EQUAL(size, want_size);
    CU_ASSERT_TRUE(size == want_size && memcmp(cubin, want_cubin, size) == 0);
  }
  free(cubin);
}

static void test_second_compile_is_a_cache_hit(void) {
  char *src = every_kind_source();
  char dir[512];
  CU_ASSERT_TRUE(recap__nvrtc_cache_dir(dir, sizeof dir));
  CU_ASSERT_STRING_EQUAL(dir, cache_dir);
  char path[1024];
  CU_ASSERT_TRUE_FATAL(recap__nvrtc_cache_path(src, 90, path, sizeof path));
  CU_ASSERT_EQUAL(strncmp(path, cache_dir, strlen(cache_dir)), 0);
  unlink(path);
  compile_expecting(src, 90, false, 0, NULL, 0);
  struct stat sb;
  CU_ASSERT_EQUAL(stat(path, &sb), 0);
  CU_ASSERT_EQUAL(sb.st_mode & 0777, 0600);
  char *first = NULL;
  size_t first_size = 0;
  CHECK_OK(recap__nvrtc_compile(src, "x.cu", 90, &first, &first_size));
  compile_expecting(src, 90, true, 0, first, first_size);
  /* Another architecture is another key. */
  char path80[1024];
  CU_ASSERT_TRUE(recap__nvrtc_cache_path(src, 80, path80, sizeof path80));
  CU_ASSERT_STRING_NOT_EQUAL(path, path80);
  compile_expecting(src, 80, false, 0, NULL, 0);
  compile_expecting(src, 80, true, 0, NULL, 0);
  /* No temporary files are left behind. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", cache_dir);
  CU_ASSERT_NOT_EQUAL(system(cmd), 0);
  free(first);
  free(src);
}

static void test_corrupt_or_truncated_cache_file_is_recompiled(void) {
  char *src = every_kind_source();
  char path[1024];
  CU_ASSERT_TRUE_FATAL(recap__nvrtc_cache_path(src, 90, path, sizeof path));
  unlink(path);
  compile_expecting(src, 90, false, 0, NULL, 0);
  char *good = NULL;
  size_t good_size = 0;
  read_file(path, &good, &good_size);
  char *cubin = NULL;
  size_t cubin_size = 0;
  CHECK_OK(recap__nvrtc_compile(src, "x.cu", 90, &cubin, &cubin_size));

  /* Truncated to half, to its header only, and to nothing. */
  const size_t cuts[] = {good_size / 2, 32, 0};
  for (int k = 0; k < 3; ++k) {
    write_file(path, good, cuts[k]);
    compile_expecting(src, 90, false, 1, cubin, cubin_size);
    compile_expecting(src, 90, true, 0, cubin, cubin_size); /* rewritten whole */
  }
  /* One flipped byte in the cubin, and in the key. */
  good[good_size - 10] ^= 0x5a;
  write_file(path, good, good_size);
  compile_expecting(src, 90, false, 1, cubin, cubin_size);
  good[good_size - 10] ^= 0x5a;
  good[40] ^= 0x01;
  write_file(path, good, good_size);
  compile_expecting(src, 90, false, 1, cubin, cubin_size);
  /* Not a cache file at all. */
  write_file(path, "garbage garbage garbage garbage garbage", 39);
  compile_expecting(src, 90, false, 1, cubin, cubin_size);
  compile_expecting(src, 90, true, 0, cubin, cubin_size);
  free(good);
  free(cubin);
  free(src);
}

static void test_unwritable_cache_still_compiles(void) {
  char *src = every_kind_source();
  char blocker[600];
  snprintf(blocker, sizeof blocker, "%s/file_not_dir", cache_dir);
  write_file(blocker, "x", 1);
  char dir[700];
  snprintf(dir, sizeof dir, "%s/sub", blocker); /* a folder under a regular file */
  setenv("RECAP_CACHE_DIR", dir, 1);
  recap__nvrtc_stats before, after;
  recap__nvrtc_stats_get(&before);
  char *cubin = NULL;
  size_t size = 0;
  bool hit = true;
  CHECK_OK(recap__nvrtc_compile_cached(src, "x.cu", 90, &cubin, &size, &hit));
  CU_ASSERT_FALSE(hit);
  recap__nvrtc_stats_get(&after);
  CU_ASSERT_EQUAL(after.write_fails - before.write_fails, 1u);
  setenv("RECAP_CACHE_DIR", cache_dir, 1);
  free(cubin);
  free(src);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--cache-hit-probe") == 0) return cache_hit_probe(argv[2]);
  CU_pSuite nvrtc = test_add_suite("expr/nvrtc", nvrtc_suite_init, NULL);
  CU_ADD_TEST(nvrtc, test_missing_nvrtc_is_not_supported_naming_libnvrtc);
  CU_ADD_TEST(nvrtc, test_generated_source_compiles_for_sm90_and_sm80);
  CU_ADD_TEST(nvrtc, test_second_compile_is_a_cache_hit);
  CU_ADD_TEST(nvrtc, test_corrupt_or_truncated_cache_file_is_recompiled);
  CU_ADD_TEST(nvrtc, test_unwritable_cache_still_compiles);
  CU_ADD_TEST(nvrtc, test_cache_hit_in_a_new_process_does_not_open_nvrtc);
  if (!nvrtc_present()) {
    printf("expr/nvrtc: libnvrtc not found: suite INACTIVE (not passed)\n");
    CU_set_suite_active(nvrtc, CU_FALSE);
    CU_set_fail_on_inactive(CU_FALSE);
  }
  return test_run_all();
}
