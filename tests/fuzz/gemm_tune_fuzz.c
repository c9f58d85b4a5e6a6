/*
 * gemm_tune_fuzz.c: libFuzzer target for the GEMM tuning cache's parser (recap__tune_parse,
 * kernels/gemm/tune_file.c), which reads a file others may edit or corrupt.
 *
 * Checked besides "no crash, no leak, no hang": parsing never fails on content (only on
 * memory); every loaded entry is valid, formats back to a line within the limit, and parses
 * back to itself; counts stay within the input's lines.
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/tune.h"
#include "runtime/error.h"

#define REQUIRE(cond, ...)                                               \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "gemm_tune_fuzz: contract broken: " __VA_ARGS__);  \
      fprintf(stderr, "\n");                                             \
      abort();                                                           \
    }                                                                    \
  } while (0)

/* The versions the corpus files were written for. */
static const recap__tune_versions versions = {
    .cublaslt = 130100, .cudart = 13000, .device = "NVIDIA H100 80GB HBM3", .sms = 132, .cc = 90};

static const char head[] =
    "recap-gemm-tune 1\n"
    "versions cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 cc=90\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > RECAP_TUNE_MAX_FILE_BYTES) return 0;
  recap__tune_table *t = NULL;
  if (recap__tune_table_create(&t) != RECAP_OK) return 0;
  recap__tune_load_report r;
  memset(&r, 0, sizeof r);
  const recap_status st =
      recap__tune_parse(t, (const char *)data, size, "fuzz", &versions, true, &r);
  REQUIRE(st == RECAP_OK || st == RECAP_STATUS_OUT_OF_MEMORY, "status %d", (int)st);
  size_t lines = 0;
  for (size_t i = 0; i < size; ++i) lines += data[i] == '\n';
  REQUIRE(r.loaded + r.ignored + r.stale <= lines + 1, "%zu + %zu + %zu records from %zu lines",
          r.loaded, r.ignored, r.stale, lines);
  REQUIRE(recap__tune_table_count(t) <= RECAP_TUNE_MAX_ENTRIES, "%zu entries",
          recap__tune_table_count(t));
  /* Each loaded entry is valid and round-trips through its own line. */
  static char text[sizeof head + RECAP_TUNE_MAX_LINE + 2];
  for (size_t i = 0; i < recap__tune_table_count(t); ++i) {
    const recap__tune_entry *e = recap__tune_table_at(t, i);
    REQUIRE(recap__tune_entry_valid(e), "entry %zu loaded but invalid", i);
    memcpy(text, head, sizeof head - 1);
    REQUIRE(recap__tune_format_entry(e, text + sizeof head - 1, RECAP_TUNE_MAX_LINE + 1),
            "entry %zu does not format", i);
    strcat(text, "\n");
    recap__tune_table *back = NULL;
    if (recap__tune_table_create(&back) != RECAP_OK) break;
    recap__tune_load_report rb;
    memset(&rb, 0, sizeof rb);
    REQUIRE(recap__tune_parse(back, text, strlen(text), "fuzz", &versions, true, &rb) == RECAP_OK,
            "reparse failed");
    const recap__tune_entry *again = recap__tune_table_find(back, &e->key);
    REQUIRE(rb.loaded == 1 && rb.warnings == 0 && again &&
                recap__tune_choice_equal(&again->choice, &e->choice),
            "entry %zu does not round-trip: %s", i, text);
    recap__tune_table_destroy(back);
  }
  recap__tune_table_destroy(t);
  return 0;
}
