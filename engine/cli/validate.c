/* validate.c: `recap validate SPEC...`: checks specs without touching a device. */
#include <stdio.h>

#include "engine/cli/cli.h"

static const char *const CMD = "validate";

int cli_validate_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    printf("usage: recap validate SPEC... [--base-dir DIR]\n\n"
           "Checks each spec completely (YAML syntax and limits, keys, names, the DAG, shapes "
           "and\ndtypes for every bucket) without allocating anything on a device. Prints "
           "\"SPEC: ok\"\nper valid spec and every problem as FILE:LINE:COL: error: message on "
           "stderr.\n\n"
           "  --base-dir DIR     files the specs name (params) must lie under DIR (for specs "
           "from\n                     untrusted sources)\n\n"
           "exit status: 0 when every spec is valid, 1 otherwise, 2 on a usage error.\n");
    return CLI_EXIT_OK;
  }
  const char *base_dir = NULL;
  /* The specs, gathered in place at the front of argv (count never passes i). */
  char **paths = argv;
  int count = 0;
  for (int i = 0; i < argc; i++) {
    int m = cli_flag(CMD, argc, argv, &i, "--base-dir", &base_dir);
    if (m < 0) return CLI_EXIT_USAGE;
    if (m > 0) continue;
    if (!cli_positional(CMD, argv[i])) return CLI_EXIT_USAGE;
    paths[count++] = argv[i];
  }
  if (count == 0) {
    fprintf(stderr, "recap %s: no spec given (usage: recap validate SPEC...)\n", CMD);
    return CLI_EXIT_USAGE;
  }

  int failed = 0;
  for (int i = 0; i < count; i++) {
    recap__spec *spec = NULL;
    if (cli_load_spec(paths[i], base_dir, &spec) != RECAP_OK) {
      failed++;
      continue;
    }
    size_t buckets = recap__spec_num_buckets(spec);
    printf("%s: ok (%s: %zu ops, %zu tensors, %zu bucket%s)\n", paths[i], spec->name,
           spec->num_ops, spec->num_tensors, buckets, buckets == 1 ? "" : "s");
    recap__spec_destroy(spec);
  }
  if (count > 1 && failed) fprintf(stderr, "%d of %d specs invalid\n", failed, count);
  return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
