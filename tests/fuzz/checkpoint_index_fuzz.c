/*
 * checkpoint_index_fuzz.c: libFuzzer target for the sharded-checkpoint index parser
 * (engine/checkpoint.h, recap__checkpoint_parse_index): arbitrary bytes are a whole
 * model.safetensors.index.json, whose shard names are untrusted.
 *
 * Besides crashes, leaks and hangs, the target aborts when the parser's contract breaks:
 * - a status other than RECAP_OK, RECAP_STATUS_IO_ERROR or RECAP_STATUS_OUT_OF_MEMORY;
 * - an IO_ERROR whose message does not name the index;
 * - an output written on failure;
 * - an accepted shard name that is empty, absolute, holds a `..` component, or is listed
 *   twice; a key whose shard index is out of range.
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"

enum { MAX_INPUT = 1 << 20 };

static const char PATH[] = "fuzz.index.json";

#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "checkpoint_index_fuzz: contract broken: " __VA_ARGS__); \
      fprintf(stderr, "\n  last error: %s\n", recap_last_error());             \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static int has_dotdot(const char *name) {
  for (const char *p = name; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
    p += n;
    if (*p == '/') ++p;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  /* A buffer of exactly the input's length: a read past it is an ASan error. */
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  memcpy(text, data, size);
  recap__checkpoint_index ix = {.num_keys = SIZE_MAX};
  recap_status st = recap__checkpoint_parse_index(text, size, PATH, &ix);
  free(text);
  if (st != RECAP_OK) {
    REQUIRE(st == RECAP_STATUS_IO_ERROR || st == RECAP_STATUS_OUT_OF_MEMORY, "status %s",
            recap_status_name(st));
    REQUIRE(strstr(recap_last_error(), PATH) != NULL, "%s without the index's name",
            recap_status_name(st));
    REQUIRE(ix.num_keys == SIZE_MAX && ix.keys == NULL, "index written on failure");
    return 0;
  }
  for (size_t s = 0; s < ix.num_shards; ++s) {
    const char *name = ix.shards[s];
    REQUIRE(name[0] != '\0' && name[0] != '/' && !has_dotdot(name), "shard '%s' accepted", name);
    for (size_t t = 0; t < s; ++t)
      REQUIRE(strcmp(ix.shards[t], name) != 0, "shard '%s' listed twice", name);
  }
  for (size_t k = 0; k < ix.num_keys; ++k)
    REQUIRE(ix.keys[k] && ix.key_shard[k] < ix.num_shards, "key %zu has shard %zu of %zu", k,
            ix.key_shard[k], ix.num_shards);
  recap__checkpoint_index_free(&ix);
  return 0;
}
