/*
 * safetensors_fuzz.c: libFuzzer target for the .safetensors reader (engine/safetensors_reader.h):
 * arbitrary bytes are a whole params file; the target reads its header length, then looks up
 * tensor "w" (and two other keys) with each of a few expectations, as the binder does.
 *
 * The header is copied into a buffer of exactly its length, so a read past it is an ASan
 * error. Besides crashes, leaks and hangs, the target aborts when the reader's contract breaks:
 * - a status other than RECAP_OK, RECAP_STATUS_IO_ERROR or RECAP_STATUS_OUT_OF_MEMORY;
 * - an IO_ERROR whose message does not name the file;
 * - an output written on failure;
 * - an accepted tensor whose byte range does not lie inside the data section (its bytes are
 *   then read, so ASan sees any range past the input as well).
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/safetensors_reader.h"

/* Larger headers only make each run slower: the 100 MB bound is checked arithmetically. */
enum { MAX_INPUT = 1 << 20 };

static const char PATH[] = "fuzz.safetensors";

#define REQUIRE(cond, ...)                                                \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "safetensors_fuzz: contract broken: " __VA_ARGS__); \
      fprintf(stderr, "\n  last error: %s\n", recap_last_error());        \
      abort();                                                            \
    }                                                                     \
  } while (0)

static void check_failure(recap_status st) {
  REQUIRE(st == RECAP_STATUS_IO_ERROR || st == RECAP_STATUS_OUT_OF_MEMORY, "unexpected status %s",
          recap_status_name(st));
  REQUIRE(strstr(recap_last_error(), PATH) != NULL, "%s without the file's name",
          recap_status_name(st));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  unsigned char prefix[8] = {0};
  memcpy(prefix, data, size < 8 ? size : 8);
  uint64_t header_len = UINT64_MAX;
  recap_status st = recap__safetensors_header_length(prefix, size, PATH, &header_len);
  if (st != RECAP_OK) {
    check_failure(st);
    REQUIRE(header_len == UINT64_MAX, "header length written on failure");
    return 0;
  }
  REQUIRE(header_len > 0 && header_len <= size - 8, "header length %llu in a %zu-byte file",
          (unsigned long long)header_len, size);
  char *header = malloc((size_t)header_len);
  if (!header) return 0;
  memcpy(header, data + 8, (size_t)header_len);

  static const int64_t shape_2x3[] = {2, 3}, shape_4[] = {4}, shape_1111[] = {1, 1, 1, 1},
                       shape_0[] = {0};
  static const recap__safetensors_want wants[] = {
      {RECAP_DTYPE_F32, 2, shape_2x3, 24}, {RECAP_DTYPE_F16, 1, shape_4, 8},
      {RECAP_DTYPE_BF16, 0, NULL, 2},      {RECAP_DTYPE_I64, 4, shape_1111, 8},
      {RECAP_DTYPE_I32, 1, shape_0, 0},
  };
  static const char *const keys[] = {"w", "__metadata__", ""};
  uint64_t data_size = size - 8 - header_len;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; ++k)
    for (size_t i = 0; i < sizeof wants / sizeof wants[0]; ++i) {
      uint64_t at = UINT64_MAX;
      st = recap__safetensors_find(header, (size_t)header_len, size, PATH, keys[k], &wants[i], &at);
      if (st != RECAP_OK) {
        check_failure(st);
        REQUIRE(at == UINT64_MAX, "offset written on failure");
        continue;
      }
      REQUIRE(at >= 8 + header_len && at - 8 - header_len <= data_size &&
                  wants[i].bytes <= data_size - (at - 8 - header_len),
              "tensor '%s' accepted at [%llu, +%llu) outside the data [%llu, %zu)", keys[k],
              (unsigned long long)at, (unsigned long long)wants[i].bytes,
              (unsigned long long)(8 + header_len), size);
      /* Touch the accepted range: ASan flags any byte outside the input. */
      volatile uint8_t sum = 0;
      for (uint64_t b = 0; b < wants[i].bytes; ++b) sum ^= data[at + b];
      (void)sum;
    }
  free(header);
  return 0;
}
