/* plan.c: `recap plan SPEC [--dim B=8]`: what the fusion pass fused, where every tensor lives,
 * and the arena's size. The IR is fused exactly as a pipeline's would be (same switch), so the
 * plan shown is the one the engine uses. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan_text.h"

static const char *const CMD = "plan";

static const cli_option plan_options[] = {
    {.flag = "--dim",
     .value = "NAME=VALUE",
     .kind = CLI_VALUE_TEXT,
     .help = "for the bucketed dim: plan the bucket that runs a batch of VALUE (the\n"
             "smallest bucket >= VALUE); for any other dim: replaces the spec's\n"
             "value (repeatable; as in recap run)"},
    {.flag = "--entry",
     .value = "NAME",
     .kind = CLI_VALUE_TEXT,
     .help = "use the dims of the spec's entry NAME (`entries:`), before --dim"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names (params) must lie under DIR (for specs from\n"
             "untrusted sources)"},
    {.flag = "--no-fusion",
     .kind = CLI_VALUE_NONE,
     .help = "plan the spec's ops as written (no fusion pass; as RECAP_FUSION=0)"},
    {0}};
const cli_help cli_plan_help = {
    .synopsis = "recap plan SPEC [--dim NAME=VALUE] [--entry NAME] [--base-dir DIR] [--no-fusion]",
    .description =
        "Prints the fused ops (each with the spec ops it replaces, its inputs and its\n"
        "expression), then the memory plan of one bucket (default: the largest, which is the\n"
        "plan the engine uses for every bucket): per tensor its role, bytes, arena offset,\n"
        "lifetime in ops, stream and in-place/view notes; the cross-stream waits; then the\n"
        "arena size, the naive sum (one allocation per intermediate) and the max-live lower\n"
        "bound.",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = plan_options}},
};

int cli_plan_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_plan_help);
    return CLI_EXIT_OK;
  }
  const char *path = NULL, *base_dir = NULL, *entry = NULL;
  const char *dims[CLI_MAX_DIMS];
  int num_dims = 0;
  bool no_fusion = false;
  for (int i = 0; i < argc; i++) {
    int m = cli_dim_flag(CMD, argc, argv, &i, dims, &num_dims);
    if (m == 0) m = cli_flag(CMD, argc, argv, &i, "--base-dir", &base_dir);
    if (m == 0) m = cli_flag(CMD, argc, argv, &i, "--entry", &entry);
    if (m == 0 && (m = cli_flag(CMD, argc, argv, &i, "--no-fusion", NULL)) > 0) no_fusion = true;
    if (m < 0) return CLI_EXIT_USAGE;
    if (m > 0) continue;
    if (!cli_take_one(CMD, "spec", argv[i], &path)) return CLI_EXIT_USAGE;
  }
  if (!path) {
    cli_help_print(stderr, &cli_plan_help);
    return CLI_EXIT_USAGE;
  }

  recap__model *model = NULL;
  char *text = NULL, *fused = NULL;
  recap_status st;
  size_t bucket;
  int64_t batch;
  cli_load_request load = {.path = path,
                           .base_dir = base_dir,
                           .dims = dims,
                           .num_dims = num_dims,
                           .entry = entry,
                           .capacity = RECAP__CAPACITY_OFF,
                           .no_fusion = no_fusion};
  int rc = cli_load(CMD, &load, &model, &bucket, &batch);
  if (rc != CLI_EXIT_OK) goto done;
  rc = CLI_EXIT_FAILURE;
  const recap__spec *spec = model->spec;
  const recap__ir *ir = model->irs[bucket];
  if ((st = cli_fuse_format(ir, model->fused, &fused)) != RECAP_OK) {
    cli_report_failure(CMD, "formatting the fused ops", st);
    goto done;
  }
  if ((st = cli_plan_format(ir, model->plan, &text)) != RECAP_OK) {
    cli_report_failure(CMD, "formatting the plan", st);
    goto done;
  }
  if (spec->bucket_dim >= 0) {
    size_t n = recap__spec_num_buckets(spec);
    const char *name = spec->dims[spec->bucket_dim].name;
    int64_t value = recap__spec_bucket_value(spec, bucket);
    printf("%s: ", path);
    if (batch != value) printf("%s=%lld runs in ", name, (long long)batch);
    printf("bucket %s=%lld (%s of %zu buckets:", name, (long long)value,
           bucket + 1 == n ? "the largest" : "one", n);
    for (size_t b = 0; b < n; b++) printf(" %lld", (long long)recap__spec_bucket_value(spec, b));
    printf(")\n");
  }
  char aliases[512];
  if (cli_format_dim_aliases(spec, ir->dim_values, aliases, sizeof aliases))
    printf("%s: dim aliases: %s\n", path, aliases);
  /* The --dim flags that replaced a dim's value (the others picked the batch). */
  const char *bucketed = spec->bucket_dim >= 0 ? spec->dims[spec->bucket_dim].name : NULL;
  bool replaced = false;
  for (int i = 0; i < num_dims; i++) {
    size_t n = bucketed ? strlen(bucketed) : 0;
    if (spec->run_batch && strncmp(dims[i], bucketed, n) == 0 && dims[i][n] == '=') continue;
    if (!replaced) printf("%s: dims replaced:", path);
    printf(" %s", dims[i]);
    replaced = true;
  }
  if (replaced) printf("\n");
  fputs(fused, stdout);
  fputs(text, stdout);
  rc = CLI_EXIT_OK;
done:
  free(fused);
  free(text);
  recap__model_release(model);
  return rc;
}
