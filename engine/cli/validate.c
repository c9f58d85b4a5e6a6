/* validate.c: `recap validate SPEC...`: checks specs without touching a device. */
#include <stdio.h>

#include "engine/cli/cli.h"

static const char *const CMD = "validate";

int cli_validate_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    printf("usage: recap validate SPEC...\n\n"
           "Checks each spec completely (YAML syntax and limits, keys, names, the DAG, shapes "
           "and\ndtypes for every bucket) without allocating anything on a device. Prints "
           "\"SPEC: ok\"\nper valid spec and every problem as FILE:LINE:COL: error: message on "
           "stderr.\n\nexit status: 0 when every spec is valid, 1 otherwise, 2 on a usage "
           "error.\n");
    return CLI_EXIT_OK;
  }
  if (argc == 0) {
    fprintf(stderr, "recap %s: no spec given (usage: recap validate SPEC...)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  for (int i = 0; i < argc; i++)
    if (!cli_positional(CMD, argv[i])) return CLI_EXIT_USAGE;

  int failed = 0;
  for (int i = 0; i < argc; i++) {
    recap__spec *spec = NULL;
    if (cli_load_spec(argv[i], &spec) != RECAP_OK) {
      failed++;
      continue;
    }
    size_t buckets = recap__spec_num_buckets(spec);
    printf("%s: ok (%s: %zu ops, %zu tensors, %zu bucket%s)\n", argv[i], spec->name,
           spec->num_ops, spec->num_tensors, buckets, buckets == 1 ? "" : "s");
    recap__spec_destroy(spec);
  }
  if (argc > 1 && failed) fprintf(stderr, "%d of %d specs invalid\n", failed, argc);
  return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
