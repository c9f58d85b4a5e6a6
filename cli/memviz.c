/* memviz.c: `recap memviz SNAPSHOT.json [--svg FILE]`: checks an allocator snapshot (from
 * `recap run --memory-snapshot` or recap_memory_snapshot_json) and draws it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/memviz_model.h"

static const char *const CMD = "memviz";

static const cli_option memviz_options[] = {
    {.flag = "--svg", .value = "FILE", .kind = CLI_VALUE_FILE, .help = "write the picture to FILE"},
    {0}};
const cli_help cli_memviz_help = {
    .synopsis = "recap memviz SNAPSHOT.json [--svg FILE]",
    .description =
        "Reads an allocator snapshot (recap run --memory-snapshot FILE writes one), checks it\n"
        "and prints its totals per pool and per block state. With --svg, draws it: one row per\n"
        "segment (grouped by pool, tagged by stream), blocks coloured by state; hovering a\n"
        "block in a browser shows its address and sizes. A malformed file is refused with the\n"
        "JSON path of the problem (exit 1).",
    .operand = CLI_VALUE_FILE,
    .groups = {{.options = memviz_options}},
};

int cli_memviz_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_memviz_help);
    return CLI_EXIT_OK;
  }
  const char *path = NULL, *svg = NULL;
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--svg", &svg)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "snapshot", argv[i], &path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!path) {
    cli_help_print(stderr, &cli_memviz_help);
    return CLI_EXIT_USAGE;
  }
  if (svg && !cli_output_writable(CMD, svg)) return CLI_EXIT_USAGE;
  cli_memviz_model *model = NULL;
  recap_status st = cli_memviz_load(path, &model);
  if (st != RECAP_OK) {
    fprintf(stderr, "recap %s: %s\n", CMD, recap_last_error());
    return CLI_EXIT_FAILURE;
  }
  char b1[32], b2[32], b3[32];
  printf("%s: %s:%d, %zu %s, %zu %s, reserved %s, allocated %s, active %s\n", path, model->backend,
         model->device_index, model->num_segments,
         cli_plural((long long)model->num_segments, "segment", "segments"), model->num_blocks,
         cli_plural((long long)model->num_blocks, "block", "blocks"),
         cli_format_bytes(model->reserved, b1, sizeof b1),
         cli_format_bytes(model->allocated, b2, sizeof b2),
         cli_format_bytes(model->active, b3, sizeof b3));
  /* Per pool, in order of first appearance (the default pool is id 0). */
  for (size_t i = 0; i < model->num_segments; i++) {
    uint64_t id = model->segments[i].pool_id;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) seen = model->segments[j].pool_id == id;
    if (seen) continue;
    uint64_t reserved = 0, allocated = 0;
    size_t count = 0;
    for (size_t j = i; j < model->num_segments; j++)
      if (model->segments[j].pool_id == id) {
        reserved += model->segments[j].total_size;
        allocated += model->segments[j].allocated;
        count++;
      }
    if (id == 0)
      printf("  default pool:");
    else
      printf("  private pool %" PRIu64 ":", id);
    printf(" %zu segment%s, reserved %s, allocated %s\n", count, count == 1 ? "" : "s",
           cli_format_bytes(reserved, b1, sizeof b1), cli_format_bytes(allocated, b2, sizeof b2));
  }
  int rc = CLI_EXIT_OK;
  if (svg) {
    FILE *f = fopen(svg, "w");
    if (!f) {
      cli_report_write_failure(CMD, svg, errno);
      rc = CLI_EXIT_FAILURE;
    } else {
      st = cli_memviz_write_svg(model, path, f);
      if (fclose(f) != 0 && st == RECAP_OK) st = RECAP_STATUS_IO_ERROR;
      if (st != RECAP_OK) {
        fprintf(stderr, "recap %s: writing %s failed\n", CMD, svg);
        rc = CLI_EXIT_FAILURE;
      } else {
        printf("wrote %s\n", svg);
      }
    }
  }
  cli_memviz_model_free(model);
  return rc;
}
