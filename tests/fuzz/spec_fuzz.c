/*
 * spec_fuzz.c: libFuzzer target for the load path: arbitrary bytes -> recap__load_string
 * -> every bucket's IR -> the memory plan, then everything destroyed.
 *
 * Besides "no crash, no leak, no hang" (ASan, LSan and libFuzzer's timeout watch those), the
 * target checks the loader's contract and aborts when it is broken, so that a silently wrong
 * result counts as a crash too:
 * - the status is RECAP_OK (with a spec and no error recorded), RECAP_STATUS_SPEC_ERROR (with
 *   no spec, at least one error, and every error "FILE:LINE:COL: error: ...") or
 *   RECAP_STATUS_OUT_OF_MEMORY;
 * - a spec that loaded builds the IR of every bucket (spec.h: "cannot fail on a spec that
 *   loaded, except OOM"), and the largest bucket's IR plans (plan.h: the planner fails only on
 *   an IR that breaks ir.h's contract).
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/plan_text.h"
#include "engine/load.h"

/* Larger inputs only make each run slower: the loader's size limit is tested by
 * spec_corpus_test, and every other limit is reachable well below this. */
enum { MAX_INPUT = 64 << 10 };

/* Specs that name files (init: file) are resolved inside this folder, which holds one small
 * raw file, so the fuzzer can reach both the accepted and the refused paths without ever
 * looking outside it. */
static char base_dir[512];

static void remove_base_dir(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/w.bin", base_dir);
  unlink(path);
  rmdir(base_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TEST_TMPDIR");
  if (!tmp) tmp = getenv("TMPDIR");
  snprintf(base_dir, sizeof base_dir, "%s/recap_spec_fuzz_XXXXXX", tmp ? tmp : "/tmp");
  if (!mkdtemp(base_dir)) {
    perror("spec_fuzz: mkdtemp");
    abort();
  }
  char path[600];
  snprintf(path, sizeof path, "%s/w.bin", base_dir);
  FILE *f = fopen(path, "wb");
  /* 64 bytes: 16 f32 values, 32 f16/bf16 values. */
  static const unsigned char bytes[64] = {0};
  if (!f || fwrite(bytes, 1, sizeof bytes, f) != sizeof bytes || fclose(f) != 0) {
    perror("spec_fuzz: writing the base folder's file");
    abort();
  }
  atexit(remove_base_dir);
  return 0;
}

#define REQUIRE(cond, ...)                                         \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "spec_fuzz: contract broken: " __VA_ARGS__); \
      fprintf(stderr, "\n  last error: %s\n", recap_last_error()); \
      abort();                                                     \
    }                                                              \
  } while (0)

/* A loaded model's plan holds every bucket and formats, as the engine and `recap plan` use
 * it. */
static void check_loaded(const recap__model *m) {
  for (size_t b = 0; b < m->num_buckets; ++b) {
    recap_status st = recap__plan_check_fits(m->plan, m->irs[b]);
    REQUIRE(st == RECAP_OK, "bucket %zu does not fit the plan of its own load: %s", b,
            recap_status_name(st));
  }
  char *text = NULL;
  recap_status st = cli_plan_format(m->irs[m->num_buckets - 1], m->plan, &text);
  REQUIRE(st == RECAP_OK || st == RECAP_STATUS_OUT_OF_MEMORY,
          "formatting the plan of a loaded spec fails: %s", recap_status_name(st));
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  /* On the host backend: fusion runs too, without NVRTC. */
  recap__load_options options = {.spec = {.base_dir = base_dir},
                                 .device = {RECAP_BACKEND_HOST, 0},
                                 .device_given = true,
                                 .device_memory_bytes = 80ull << 30};
  recap__diag diag = {0};
  recap__model *spec = NULL;
  recap_status st = recap__load_string((const char *)data, size, "<fuzz>", &options, &spec, &diag);
  if (st == RECAP_OK) {
    REQUIRE(spec != NULL, "RECAP_OK without a spec");
    REQUIRE(recap__diag_errors(&diag) == 0, "RECAP_OK with %zu errors recorded",
            recap__diag_errors(&diag));
    check_loaded(spec);
  } else {
    REQUIRE(spec == NULL, "%s with a spec", recap_status_name(st));
    REQUIRE(st == RECAP_STATUS_SPEC_ERROR || st == RECAP_STATUS_OUT_OF_MEMORY,
            "unexpected status %s", recap_status_name(st));
    REQUIRE(st != RECAP_STATUS_SPEC_ERROR || recap__diag_errors(&diag) > 0,
            "RECAP_STATUS_SPEC_ERROR without an error recorded");
    for (size_t i = 0; i < diag.count; ++i) {
      int line = 0, col = 0, used = 0;
      sscanf(diag.messages[i], "<fuzz>:%d:%d: error: %n", &line, &col, &used);
      REQUIRE(line > 0 && col > 0 && used > 0, "an error without FILE:LINE:COL: %s",
              diag.messages[i]);
    }
  }
  recap__model_free_loaded(spec);
  recap__diag_free(&diag);
  return 0;
}
