/*
 * hf_config_fuzz.c: libFuzzer target for `recap import-hf`'s config.json reader
 * (cli/hf_model.h, cli_hf_config_parse): arbitrary bytes are a whole config.json, which comes
 * with a downloaded checkpoint and is untrusted.
 *
 * Besides crashes, leaks and hangs, the target aborts when the reader's contract breaks:
 * - a refusal without a message naming the file;
 * - an accepted config without an architecture, or with a size that is not positive (every
 *   size becomes a spec's dim), or heads that are not a multiple of the KV heads.
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/hf_model.h"

enum { MAX_INPUT = 1 << 20 };

static const char PATH[] = "fuzz/config.json";

#define REQUIRE(cond, ...)                                              \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "hf_config_fuzz: contract broken: " __VA_ARGS__); \
      fprintf(stderr, "\n");                                            \
      abort();                                                          \
    }                                                                   \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  /* A buffer of exactly the input's length: a read past it is an ASan error. */
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  memcpy(text, data, size);
  cli_hf_config c;
  char err[512] = "";
  bool ok = cli_hf_config_parse(text, size, PATH, &c, err, sizeof err);
  free(text);
  if (!ok) {
    REQUIRE(strstr(err, PATH) != NULL, "refused without naming the file: '%s'", err);
    return 0;
  }
  REQUIRE(c.arch != NULL, "accepted without an architecture");
  REQUIRE(c.hidden > 0 && c.layers > 0 && c.heads > 0 && c.kv_heads > 0 && c.head_dim > 0 &&
              c.intermediate > 0 && c.vocab > 0 && c.max_positions > 0,
          "accepted a size that is not positive (hidden %lld layers %lld heads %lld kv %lld "
          "head_dim %lld intermediate %lld vocab %lld positions %lld)",
          (long long)c.hidden, (long long)c.layers, (long long)c.heads, (long long)c.kv_heads,
          (long long)c.head_dim, (long long)c.intermediate, (long long)c.vocab,
          (long long)c.max_positions);
  REQUIRE(c.heads % c.kv_heads == 0, "accepted %lld heads over %lld KV heads", (long long)c.heads,
          (long long)c.kv_heads);
  return 0;
}
