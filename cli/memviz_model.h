/*
 * memviz_model.h: an allocator snapshot (recap_memory_snapshot_json's format, include/recap.h,
 * recap's first format, or a torch.cuda.memory._snapshot() saved as JSON) read back from a
 * file that anyone may have written, and drawn as an SVG picture of its segments and blocks
 * (`recap memviz`).
 *
 * The parser trusts nothing: the text is bounded (CLI_MEMVIZ_MAX_BYTES), so are the segment
 * and block counts, string lengths and every number (non-negative integers below 2^60), and
 * the layout must be consistent (each segment's blocks tile it from its address, in order;
 * segments do not overlap, and the model lists them sorted by address; the totals a segment
 * states equal its blocks' sums, requested_size counting active blocks only).
 * A file that breaks any rule is refused with RECAP_STATUS_INVALID_ARGUMENT and a message
 * naming the file and the JSON path of the problem ("snap.json: segments[3].blocks[0].size:
 * ..."); RECAP_STATUS_IO_ERROR when the file cannot be read or is too large;
 * RECAP_STATUS_OUT_OF_MEMORY when memory runs out. Nothing is kept on failure.
 *
 *   cli_memviz_model *m;
 *   if (cli_memviz_load("snap.json", &m) != RECAP_OK) ... recap_last_error() ...
 *   FILE *f = fopen("snap.svg", "w");
 *   cli_memviz_write_svg(m, "snap.json", f);
 *   fclose(f);
 *   cli_memviz_model_free(m);
 */
#ifndef RECAP_CLI_MEMVIZ_MODEL_H
#define RECAP_CLI_MEMVIZ_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/recap.h"

enum {
  CLI_MEMVIZ_MAX_BYTES = 64 << 20, /* snapshot text */
  CLI_MEMVIZ_MAX_SEGMENTS = 100000,
  CLI_MEMVIZ_MAX_BLOCKS = 1000000, /* over all segments */
  CLI_MEMVIZ_MAX_POOLS = 100000,
  CLI_MEMVIZ_MAX_NAME = 32, /* the device's backend name, with its NUL */
};

typedef enum {
  CLI_MEMVIZ_ALLOCATED = 0, /* "active_allocated" */
  CLI_MEMVIZ_PENDING = 1,   /* "active_pending_free": freed, waiting for other streams */
  CLI_MEMVIZ_INACTIVE = 2,  /* "inactive": free, cached */
  CLI_MEMVIZ_STATE_COUNT = 3,
} cli_memviz_state;

typedef struct {
  uint64_t address, size, requested;
  cli_memviz_state state;
} cli_memviz_block;

typedef struct {
  uint64_t address, total_size, reserved_address_space;
  uint64_t allocated, active, requested; /* sums over its blocks */
  uint64_t stream, pool_id;
  bool small, expandable;
  size_t first_block, block_count; /* in cli_memviz_model.blocks */
} cli_memviz_segment;

typedef struct {
  uint64_t id, reserved_bytes;
  int64_t use_count;
} cli_memviz_pool;

typedef struct {
  char backend[CLI_MEMVIZ_MAX_NAME];
  int device_index;
  cli_memviz_segment *segments;
  size_t num_segments;
  cli_memviz_block *blocks;
  size_t num_blocks;
  cli_memviz_pool *pools; /* private pools */
  size_t num_pools;
  uint64_t reserved, allocated, active; /* sums over the segments */
  bool has_peaks; /* "memory_stats" (or the first format's "stats") gave the peaks below */
  uint64_t peak_reserved, peak_allocated;
} cli_memviz_model;

/* Parses `size` bytes of snapshot text; `name` (the file's) starts every message. */
recap_status cli_memviz_parse(const char *text, size_t size, const char *name,
                              cli_memviz_model **out);
/* Reads and parses the file at `path`. */
recap_status cli_memviz_load(const char *path, cli_memviz_model **out);
void cli_memviz_model_free(cli_memviz_model *model);

/* Draws the model: a header with the totals, a legend (block states, streams, pools), then
 * one row per segment, as wide as the picture, its blocks in proportion to their sizes,
 * coloured by state, with the segment's stream as a coloured tag and its pool, size and kind
 * as a label. Each block and segment carries a <title> (shown on hover) with its numbers.
 * `title` (escaped) heads the picture. RECAP_STATUS_IO_ERROR when writing fails. */
recap_status cli_memviz_write_svg(const cli_memviz_model *model, const char *title, FILE *out);

#endif
