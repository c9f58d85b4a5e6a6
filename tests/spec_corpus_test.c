/*
 * spec_corpus_test.c: every malformed spec in tests/data/bad_specs/ is rejected with the
 * error its first line promises, and a 100 MB spec (written here, not checked in) is refused
 * by the size limit before it is read.
 *
 * Each corpus file starts with `# expect: LINE:COL: <substring>`: loading it must return
 * RECAP_STATUS_SPEC_ERROR with a message "FILE:LINE:COL: error: ..." containing the substring.
 * The corpus is loaded as a server would load untrusted specs: file paths restricted to the
 * corpus folder, and 80 GiB of device memory. It is loaded from a copy in TEST_TMPDIR:
 * Bazel's runfiles are symbolic links out of the folder, which the base-directory check
 * rightly refuses to follow.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/load.h"
#include "tests/test_util.h"

#define CORPUS "tests/data/bad_specs"

enum { MIN_CORPUS = 60 };

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static char corpus_copy[512];

/* Copies CORPUS/name into corpus_copy. */
static int copy_file(const char *name) {
  char from[800], to[800];
  snprintf(from, sizeof from, "%s/%s", CORPUS, name);
  snprintf(to, sizeof to, "%s/%s", corpus_copy, name);
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  int ok = in && out;
  char buf[1 << 16];
  size_t n;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  if (in) fclose(in);
  if (out && fclose(out) != 0) ok = 0;
  return ok;
}

/* Checks one file; returns 1 if it behaved as promised. */
static int check_file(const char *name) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", corpus_copy, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "\n  %s: cannot open\n", path);
    return 0;
  }
  char first[512] = "";
  if (!fgets(first, sizeof first, f)) first[0] = '\0';
  fclose(f);
  first[strcspn(first, "\n")] = '\0';
  int line = 0, col = 0, used = 0;
  /* A malformed header still loads the file and prints what the loader said, which is
   * how a new corpus entry's header is written. */
  bool header = sscanf(first, "# expect: %d:%d: %n", &line, &col, &used) == 2 && used > 0;
  if (!header)
    fprintf(stderr, "\n  %s: first line is not '# expect: LINE:COL: text': %s\n", path, first);
  const char *needle = header ? first + used : "";

  recap__load_options opts = {
      .spec = {.base_dir = corpus_copy}, .device_memory_bytes = 80ull << 30, .no_fusion = true};
  recap__diag diag = {0};
  recap__model *spec = NULL;
  recap_status st = recap__load_file(path, &opts, &spec, &diag);
  char prefix[800];
  snprintf(prefix, sizeof prefix, "%s:%d:%d: error: ", path, line, col);
  int found = 0;
  for (size_t i = 0; i < diag.count && !found; ++i)
    found = strncmp(diag.messages[i], prefix, strlen(prefix)) == 0 &&
            strstr(diag.messages[i] + strlen(prefix), needle) != NULL;
  int ok = header && st == RECAP_STATUS_SPEC_ERROR && spec == NULL && found &&
           strstr(recap_last_error(), diag.count ? diag.messages[0] : "") != NULL;
  if (!ok) {
    fprintf(stderr, "\n  %s: expected %s...%s; got %s:\n", name, prefix, needle,
            recap_status_name(st));
    for (size_t i = 0; i < diag.count; ++i) fprintf(stderr, "    | %s\n", diag.messages[i]);
  }
  recap__model_free_loaded(spec);
  recap__diag_free(&diag);
  return ok;
}

static void test_every_corpus_spec_fails_with_its_promised_error(void) {
  DIR *dir = opendir(CORPUS);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char *names[1024];
  size_t count = 0;
  struct dirent *e;
  const char *tmp = getenv("TEST_TMPDIR");
  snprintf(corpus_copy, sizeof corpus_copy, "%s/bad_specs_XXXXXX", tmp ? tmp : "/tmp");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(corpus_copy));
  while ((e = readdir(dir)) && count < 1024) {
    if (e->d_name[0] == '.') continue;
    CU_ASSERT_TRUE(copy_file(e->d_name));
    size_t n = strlen(e->d_name);
    if (n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0) names[count++] = strdup(e->d_name);
  }
  closedir(dir);
  qsort(names, count, sizeof *names, compare_names);
  size_t passed = 0;
  for (size_t i = 0; i < count; ++i) {
    passed += (size_t)check_file(names[i]);
    free(names[i]);
  }
  printf("\n  corpus: %zu of %zu malformed specs rejected as promised\n", passed, count);
  CU_ASSERT_TRUE(count >= MIN_CORPUS);
  CU_ASSERT_EQUAL(passed, count);
}

static void test_100mb_spec_is_refused_by_the_size_limit_quickly(void) {
  const char *tmp = getenv("TEST_TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/huge_spec.yaml", tmp ? tmp : "/tmp");
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  /* Valid-looking YAML all the way, so only the size can stop it. */
  enum { CHUNK = 1 << 20 };
  char *chunk = malloc(CHUNK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(chunk);
  const char *line = "  - {op: relu, in: [x], out: y}  # padding padding padding padding\n";
  size_t len = strlen(line), used = 0;
  while (used + len <= CHUNK) {
    memcpy(chunk + used, line, len);
    used += len;
  }
  fputs("ops:\n", f);
  for (int i = 0; i < 100; ++i) CU_ASSERT_EQUAL(fwrite(chunk, 1, used, f), used);
  free(chunk);
  CU_ASSERT_EQUAL(fclose(f), 0);

  recap__diag diag = {0};
  recap__spec *spec = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_STATUS(recap__spec_load_file(path, NULL, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  CU_ASSERT_PTR_NULL(spec);
  CU_ASSERT_EQUAL(diag.count, 1);
  char prefix[600];
  snprintf(prefix, sizeof prefix, "%s:1:1: error: the spec is ", path);
  CU_ASSERT_TRUE(diag.count == 1 && strncmp(diag.messages[0], prefix, strlen(prefix)) == 0 &&
                 strstr(diag.messages[0], "larger than the limit of 16777216 bytes"));
  /* Refused from its size alone: no reading, no parsing. */
  CU_ASSERT_TRUE(ms < 50.0);
  printf("\n  100 MB spec refused in %.3f ms\n", ms);
  recap__diag_free(&diag);
  remove(path);
}

int main(void) {
  CU_pSuite s = test_add_suite("spec_corpus", NULL, NULL);
  CU_ADD_TEST(s, test_every_corpus_spec_fails_with_its_promised_error);
  CU_ADD_TEST(s, test_100mb_spec_is_refused_by_the_size_limit_quickly);
  return test_run_all();
}
