/*
 * alloc_conf_fuzz.c: libFuzzer target for RECAP_ALLOC_CONF parsing (recap__alloc_config_parse),
 * the other text recap reads from outside: an environment variable a server's operator sets.
 *
 * Checked besides "no crash, no leak, no hang": a refusal is RECAP_STATUS_INVALID_ARGUMENT
 * with a message that names RECAP_ALLOC_CONF and leaves *out untouched; an accepted
 * configuration holds only values the parser documents, and its size rounding never rounds a
 * request down or off the 512-byte grid.
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"

/* The variable is a handful of settings; longer inputs only slow the fuzzer down. */
enum { MAX_INPUT = 4096 };

#define REQUIRE(cond, ...)                                               \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "alloc_conf_fuzz: contract broken: " __VA_ARGS__); \
      fprintf(stderr, "\n  last error: %s\n", recap_last_error());       \
      abort();                                                           \
    }                                                                    \
  } while (0)

static bool is_pow2_or_0(unsigned v) {
  return (v & (v - 1)) == 0;
}

static void check_config(const recap__alloc_config *c) {
  REQUIRE(c->max_split_size == SIZE_MAX || c->max_split_size > RECAP__ALLOC_LARGE_BUFFER,
          "max_split_size %zu accepted", c->max_split_size);
  REQUIRE(c->gc_threshold == 0.0 || (c->gc_threshold > 0.0 && c->gc_threshold < 1.0),
          "garbage_collection_threshold %g accepted", c->gc_threshold);
  for (int i = 0; i < RECAP__ALLOC_ROUNDUP_INTERVALS; ++i)
    REQUIRE(c->roundup_divisions[i] <= 1024 && is_pow2_or_0(c->roundup_divisions[i]),
            "roundup divisions %u accepted for interval %d", c->roundup_divisions[i], i);
  /* Request sizes around every interval boundary up to 64 TiB (far beyond any device). */
  for (int shift = 0; shift <= 46; ++shift) {
    for (int delta = -1; delta <= 1; ++delta) {
      size_t size = ((size_t)1 << shift) + (size_t)(ptrdiff_t)delta;
      if (size == 0) continue;
      size_t r = recap__alloc_round_size(c, size);
      REQUIRE(r >= size && r % RECAP__ALLOC_MIN_BLOCK == 0, "a request of %zu bytes rounds to %zu",
              size, r);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  /* The variable is a C string: the parser sees the bytes up to the first NUL. */
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  recap__alloc_config cfg, before;
  memset(&cfg, 0xA5, sizeof cfg);
  before = cfg;
  recap_status st = recap__alloc_config_parse(text, &cfg);
  if (st == RECAP_OK) {
    check_config(&cfg);
    REQUIRE(recap_alloc_conf_check(text) == RECAP_OK, "the public check disagrees");
  } else {
    REQUIRE(st == RECAP_STATUS_INVALID_ARGUMENT, "unexpected status %s", recap_status_name(st));
    REQUIRE(memcmp(&cfg, &before, sizeof cfg) == 0, "a refused configuration changed *out");
    REQUIRE(strstr(recap_last_error(), "RECAP_ALLOC_CONF") != NULL,
            "the message does not name RECAP_ALLOC_CONF");
    REQUIRE(recap_alloc_conf_check(text) == st, "the public check disagrees");
  }
  free(text);
  return 0;
}
