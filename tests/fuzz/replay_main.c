/*
 * replay_main.c: the main of a fuzz target in ordinary (non-fuzzing) builds. It runs the
 * target once on every file named on the command line, and on every file inside each folder
 * named there (sorted by name, so a failure is reproducible), which makes the saved corpus
 * and every crash input kept in tests/fuzz/regressions/ a regression test under gcc, ASan
 * and UBSan alike.
 *
 * Exit status 0 when at least one input ran; a target that finds a problem aborts (the
 * sanitizers and the targets' own checks do that), which fails the test. A run that found no
 * input fails too: a test that did nothing must not pass.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in libFuzzer too. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Inputs larger than this are not fuzz inputs (every target bounds its own input far below). */
enum { MAX_FILE = 16 << 20 };

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  uint8_t *data = malloc(MAX_FILE);
  if (!data) {
    fclose(f);
    fprintf(stderr, "%s: out of memory\n", path);
    return -1;
  }
  size_t size = fread(data, 1, MAX_FILE, f);
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(data);
    fprintf(stderr, "%s: read error\n", path);
    return -1;
  }
  /* A copy of exactly `size` bytes, so ASan sees any read past the input's end. */
  uint8_t *exact = malloc(size ? size : 1);
  if (!exact) {
    free(data);
    fprintf(stderr, "%s: out of memory\n", path);
    return -1;
  }
  memcpy(exact, data, size);
  free(data);
  LLVMFuzzerTestOneInput(exact, size);
  free(exact);
  return 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file in `dir`; returns how many ran, or -1 on an error. */
static long run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return -1;
  }
  char **names = NULL;
  size_t count = 0, capacity = 0;
  long ran = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (count == capacity) {
      capacity = capacity ? capacity * 2 : 64;
      char **grown = realloc(names, capacity * sizeof *names);
      if (!grown) {
        ran = -1;
        break;
      }
      names = grown;
    }
    if (!(names[count] = strdup(e->d_name))) {
      ran = -1;
      break;
    }
    ++count;
  }
  closedir(d);
  if (ran == 0 && count > 0) qsort(names, count, sizeof *names, compare_names);
  for (size_t i = 0; i < count; ++i) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat st;
    if (ran >= 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode))
      ran = run_file(path) == 0 ? ran + 1 : -1;
    free(names[i]);
  }
  free(names);
  return ran;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long total = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      return 1;
    }
    long ran = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0 ? 1 : -1;
    if (ran < 0) return 1;
    total += ran;
  }
  printf("replayed %ld inputs without a failure\n", total);
  if (total == 0) {
    fprintf(stderr, "no inputs: give the corpus files or folders as arguments\n");
    return 1;
  }
  return 0;
}
