/*
 * memviz_fuzz.c: libFuzzer target for `recap memviz`'s reader and drawing
 * (cli/memviz_model.h): arbitrary bytes are a whole snapshot file. An accepted snapshot
 * is then drawn into memory, as `recap memviz --svg` does.
 *
 * Besides crashes, leaks and hangs, the target aborts when the reader's contract breaks:
 * - a status other than RECAP_OK, RECAP_STATUS_INVALID_ARGUMENT or RECAP_STATUS_OUT_OF_MEMORY
 *   (the input is within the size bound), or a refusal whose message does not name the file;
 * - an output written on failure;
 * - an accepted model that breaks the rules the drawing relies on: counts within their bounds,
 *   each segment's blocks inside the block array and tiling the segment in address order,
 *   segments sorted without overlap, totals equal to the blocks' sums;
 * - drawing an accepted model failing, or producing no closing </svg>.
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/memviz_model.h"

enum { MAX_INPUT = 1 << 20 };

static const char NAME[] = "fuzz.json";

#define REQUIRE(cond, ...)                                           \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "memviz_fuzz: contract broken: " __VA_ARGS__); \
      fprintf(stderr, "\n  last error: %s\n", recap_last_error());   \
      abort();                                                       \
    }                                                                \
  } while (0)

static void check_model(const cli_memviz_model *m) {
  REQUIRE(m->num_segments <= CLI_MEMVIZ_MAX_SEGMENTS && m->num_blocks <= CLI_MEMVIZ_MAX_BLOCKS,
          "%zu segments, %zu blocks", m->num_segments, m->num_blocks);
  REQUIRE(memchr(m->backend, 0, sizeof m->backend) != NULL, "backend name not terminated");
  uint64_t reserved = 0, allocated = 0, active = 0;
  for (size_t i = 0; i < m->num_segments; i++) {
    const cli_memviz_segment *s = &m->segments[i];
    REQUIRE(s->total_size > 0, "segment %zu is empty", i);
    REQUIRE(i == 0 || s->address >= m->segments[i - 1].address + m->segments[i - 1].total_size,
            "segment %zu overlaps its predecessor", i);
    REQUIRE(s->block_count > 0 && s->first_block <= m->num_blocks &&
                s->block_count <= m->num_blocks - s->first_block,
            "segment %zu's blocks [%zu, +%zu) outside %zu", i, s->first_block, s->block_count,
            m->num_blocks);
    uint64_t at = s->address, alloc = 0, act = 0;
    for (size_t k = 0; k < s->block_count; k++) {
      const cli_memviz_block *b = &m->blocks[s->first_block + k];
      REQUIRE(b->address == at && b->size > 0 && b->requested <= b->size &&
                  (unsigned)b->state < CLI_MEMVIZ_STATE_COUNT,
              "segment %zu block %zu is inconsistent", i, k);
      at += b->size;
      if (b->state == CLI_MEMVIZ_ALLOCATED) alloc += b->size;
      if (b->state != CLI_MEMVIZ_INACTIVE) act += b->size;
    }
    REQUIRE(at == s->address + s->total_size, "segment %zu is not tiled", i);
    REQUIRE(alloc == s->allocated && act == s->active, "segment %zu's totals", i);
    reserved += s->total_size;
    allocated += alloc;
    active += act;
  }
  REQUIRE(reserved == m->reserved && allocated == m->allocated && active == m->active,
          "model totals");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  cli_memviz_model *m = (cli_memviz_model *)(uintptr_t)1;
  recap_status st = cli_memviz_parse((const char *)data, size, NAME, &m);
  if (st != RECAP_OK) {
    REQUIRE(st == RECAP_STATUS_INVALID_ARGUMENT || st == RECAP_STATUS_OUT_OF_MEMORY,
            "unexpected status %s", recap_status_name(st));
    REQUIRE(strstr(recap_last_error(), NAME) != NULL, "a refusal without the file's name");
    REQUIRE(m == (cli_memviz_model *)(uintptr_t)1, "model written on failure");
    return 0;
  }
  check_model(m);
  char *svg = NULL;
  size_t svg_size = 0;
  FILE *f = open_memstream(&svg, &svg_size);
  if (f) {
    st = cli_memviz_write_svg(m, NAME, f);
    fclose(f);
    REQUIRE(st == RECAP_OK, "drawing failed: %s", recap_status_name(st));
    REQUIRE(svg && strstr(svg, "</svg>") != NULL, "no closing </svg>");
    free(svg);
  }
  cli_memviz_model_free(m);
  return 0;
}
