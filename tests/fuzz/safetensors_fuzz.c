/*
 * safetensors_fuzz.c: libFuzzer target for the .safetensors reader (engine/safetensors_reader.h):
 * arbitrary bytes are a whole params file; the target reads its header length, parses the
 * header into its table and looks a few names up in it, as engine/checkpoint.c does.
 *
 * The header is copied into a buffer of exactly its length, so a read past it is an ASan
 * error. Besides crashes, leaks and hangs, the target aborts when the reader's contract breaks:
 * - a status other than RECAP_OK, RECAP_STATUS_IO_ERROR or RECAP_STATUS_OUT_OF_MEMORY;
 * - an IO_ERROR whose message does not name the file;
 * - an output written on failure;
 * - a table not sorted by name, or holding a name twice or "__metadata__";
 * - an entry whose byte range does not lie inside the data section, or, for one of recap's
 *   dtypes, does not span its element count times its element size (its bytes are then read,
 *   so ASan sees any range past the input as well);
 * - a lookup that misses a name of the table.
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

  recap__safetensors_header table = {.count = SIZE_MAX};
  st = recap__safetensors_parse(header, (size_t)header_len, size, PATH, &table);
  if (st != RECAP_OK) {
    check_failure(st);
    REQUIRE(table.count == SIZE_MAX && table.entries == NULL, "table written on failure");
    free(header);
    return 0;
  }
  uint64_t data_start = 8 + header_len;
  for (size_t i = 0; i < table.count; ++i) {
    const recap__safetensors_entry *e = &table.entries[i];
    REQUIRE(e->name && strcmp(e->name, "__metadata__") != 0, "entry %zu has a bad name", i);
    REQUIRE(i == 0 || strcmp(table.entries[i - 1].name, e->name) < 0,
            "entries %zu and %zu are not sorted and distinct", i - 1, i);
    REQUIRE(recap__safetensors_lookup(&table, e->name) == e, "lookup misses '%s'", e->name);
    REQUIRE(e->offset >= data_start && e->offset <= size && e->bytes <= size - e->offset,
            "tensor '%s' accepted at [%llu, +%llu) outside the data [%llu, %zu)", e->name,
            (unsigned long long)e->offset, (unsigned long long)e->bytes,
            (unsigned long long)data_start, size);
    REQUIRE(e->ndim >= 0 && e->ndim <= RECAP__SAFETENSORS_MAX_NDIM, "ndim %d", e->ndim);
    if (e->dtype >= 0) {
      uint64_t numel = 1;
      for (int d = 0; d < e->ndim && d < RECAP_MAX_DIMS; ++d) numel *= (uint64_t)e->shape[d];
      if (e->ndim <= RECAP_MAX_DIMS)
        REQUIRE(numel * recap_dtype_size((recap_dtype)e->dtype) == e->bytes,
                "tensor '%s' spans %llu bytes for %llu elements of %s", e->name,
                (unsigned long long)e->bytes, (unsigned long long)numel, e->dtype_name);
    }
    /* Touch the accepted range: ASan flags any byte outside the input. */
    volatile uint8_t sum = 0;
    for (uint64_t b = 0; b < e->bytes; ++b) sum ^= data[e->offset + b];
    (void)sum;
  }
  static const char *const keys[] = {"w", "__metadata__", ""};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; ++k) {
    const recap__safetensors_entry *e = recap__safetensors_lookup(&table, keys[k]);
    REQUIRE(!e || strcmp(e->name, keys[k]) == 0, "lookup of '%s' found '%s'", keys[k], e->name);
  }
  recap__safetensors_header_free(&table);
  free(header);
  return 0;
}
