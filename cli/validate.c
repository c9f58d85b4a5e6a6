/* validate.c: `recap validate SPEC...`: checks specs without touching a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/checkpoint.h"
#include "runtime/text.h"

static const char *const CMD = "validate";

/* Whether an op takes an expression (compiled with NVRTC when a pipeline loads on the GPU). */
static bool takes_expression(const recap__op_def *def) {
  for (const recap__attr_def *a = def ? def->attrs : NULL; a && a->name; a++)
    if (a->kind == RECAP_ATTR_EXPR) return true;
  return false;
}

/* One spec, through the engine's load path with its sizes checked against the memory of
 * the spec's device when this machine has it. Prints the ok line and what the check could not
 * cover. */
static recap__model *load(const char *path, const char *base_dir, const char *entry) {
  /* Sizes are checked against the device a run would use: the host backend where CUDA cannot
   * run, as `recap run` falls back to it. */
  recap__load_options o = {.spec = {.base_dir = base_dir, .entry = entry},
                           .capacity = RECAP__CAPACITY_IF_KNOWN,
                           .host_if_unavailable = true};
  recap__diag diag = {0};
  recap__model *model = NULL;
  recap_status st = recap__load_file(path, &o, &model, &diag);
  /* An entry's errors are the spec's lines under that entry's dims: say which entry first. */
  if (st != RECAP_OK && entry) fprintf(stderr, "%s: entry '%s' (its dims) fails:\n", path, entry);
  if (st == RECAP_STATUS_SPEC_ERROR && diag.count > 0)
    cli_print_diag(path, &diag);
  else if (st != RECAP_OK)
    fprintf(stderr, "%s: error: %s%s%s%s\n", path, entry ? "entry '" : "", entry ? entry : "",
            entry ? "': " : "", recap_last_error());
  recap__diag_free(&diag);
  return st == RECAP_OK ? model : NULL;
}

/* Each entry builds other IRs (its dims): shapes that hold for the spec's own dims may not
 * hold for an entry's. Appends a line per entry that holds to `lines`; *failed counts the
 * others (their errors are on stderr). */
static void validate_entries(const char *path, const char *base_dir, const recap__spec *spec,
                             recap__text *lines, size_t *failed) {
  *failed = 0;
  for (size_t e = 0; e < spec->num_entries; e++) {
    recap__model *m = load(path, base_dir, spec->entries[e].name);
    if (!m) {
      ++*failed;
      continue;
    }
    char aliases[512];
    bool any = cli_format_dim_aliases(m->spec, NULL, aliases, sizeof aliases) > 0;
    recap__text_put(lines, "  entry '%s': ok (%zu ops, %zu bucket%s%s%s)\n", spec->entries[e].name,
                    m->spec->num_ops, m->num_buckets, m->num_buckets == 1 ? "" : "s",
                    any ? "; " : "", aliases);
    recap__model_release(m);
  }
}

/* The files the spec's `init: file` tensors read: each checkpoint's files (a folder or an index
 * has several shards) and each distinct raw file. */
static size_t count_files(const recap__spec *spec) {
  size_t files = 0;
  for (size_t c = 0; c < spec->num_checkpoints; c++) files += spec->checkpoints[c]->num_files;
  for (size_t t = 0; t < spec->num_declared; t++) {
    const recap__spec_tensor *x = &spec->tensors[t];
    if (x->init.kind != RECAP_INIT_FILE || x->weights.checkpoint) continue;
    bool seen = false;
    for (size_t u = 0; u < t && !seen; u++) {
      const recap__spec_tensor *y = &spec->tensors[u];
      seen = y->init.kind == RECAP_INIT_FILE && !y->weights.checkpoint &&
             strcmp(y->init.path, x->init.path) == 0;
    }
    files += !seen;
  }
  return files;
}

static bool validate_one(const char *path, const char *base_dir) {
  recap__model *model = load(path, base_dir, NULL);
  if (!model) return false;
  const recap__spec *spec = model->spec;
  size_t file_tensors = 0, exprs = 0;
  for (size_t t = 0; t < spec->num_declared; t++)
    file_tensors += spec->tensors[t].init.kind == RECAP_INIT_FILE;
  for (size_t o = 0; o < spec->num_ops; o++) exprs += takes_expression(spec->ops[o].def);
  const char *device = recap_backend_name(model->device.backend);
  char memory[200] = "";
  if (model->capacity) {
    char bytes[32];
    const bool fallback = model->device.backend != spec->device;
    snprintf(memory, sizeof memory, "; sizes checked against %s:0's %s%s%s%s", device,
             cli_format_bytes((size_t)model->capacity, bytes, sizeof bytes),
             fallback ? ", the host backend a run uses here (" : "",
             fallback ? cli_cuda_missing_why() : "", fallback ? ")" : "");
  }
  /* The entries first: "ok" is printed only for a spec whose every entry holds. */
  recap__text entries = {0};
  size_t failed = 0;
  validate_entries(path, base_dir, spec, &entries, &failed);
  if (failed) {
    printf("%s: %zu of %zu entr%s fail%s (the errors above)\n", path, failed, spec->num_entries,
           spec->num_entries == 1 ? "y" : "ies", failed == 1 ? "s" : "");
    free(entries.data);
    recap__model_release(model);
    return false;
  }
  char aliases[512];
  bool any = cli_format_dim_aliases(spec, NULL, aliases, sizeof aliases) > 0;
  printf("%s: ok (%s: %zu ops, %zu tensors, %zu bucket%s%s%s%s)\n", path, spec->name, spec->num_ops,
         spec->num_tensors, model->num_buckets, model->num_buckets == 1 ? "" : "s", any ? "; " : "",
         aliases, memory);
  /* What only a real run finds out, so that "ok" is not read as "will run". */
  if (!model->capacity)
    printf("  not checked: the sizes against %s memory (%s)\n", device, model->capacity_note);
  if (file_tensors) {
    size_t files = count_files(spec);
    printf(
        "  not checked: the data of %zu tensor%s in %zu file%s (sizes and safetensors headers "
        "are checked; the values are read when a pipeline binds them)\n",
        file_tensors, file_tensors == 1 ? "" : "s", files, files == 1 ? "" : "s");
  }
  if (exprs && model->device.backend == RECAP_BACKEND_CUDA)
    printf(
        "  not checked: compiling %zu expr op%s with NVRTC (done when a pipeline loads on "
        "the GPU)\n",
        exprs, exprs == 1 ? "" : "s");
  if (entries.data) fputs(entries.data, stdout);
  free(entries.data);
  recap__model_release(model);
  return !entries.failed;
}

static const cli_option validate_options[] = {
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the specs name (params) must lie under DIR (for specs from\n"
             "untrusted sources)"},
    {0}};
const cli_help cli_validate_help = {
    .synopsis = "recap validate SPEC... [--base-dir DIR]",
    .description =
        "Checks each spec completely (YAML syntax and limits, keys, names, the DAG, shapes and\n"
        "dtypes for every bucket, the size of raw weight files and the header of .safetensors\n"
        "files) without allocating anything on a device. Tensor sizes are checked against the\n"
        "memory of the device a run would use (the GPU's total memory, or the host backend's\n"
        "cap RECAP_HOST_MEMORY_BYTES for a host spec and, as `recap run` falls back to the\n"
        "host, for a CUDA spec where CUDA cannot run). Prints \"SPEC: ok\" per valid\n"
        "spec, then a \"not checked:\" line for each thing only a run can find out, and every\n"
        "problem as FILE:LINE:COL: error: message on stderr, in two rounds: the syntax, keys,\n"
        "names and DAG of the whole spec first, then, once those hold, its shapes and dtypes.",
    .exit_status = "0 when every spec is valid, 1 otherwise, 2 on a usage error.",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = validate_options}},
};

int cli_validate_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_validate_help);
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
  for (int i = 0; i < count; i++)
    if (!validate_one(paths[i], base_dir)) failed++;
  if (count > 1 && failed) fprintf(stderr, "%d of %d specs invalid\n", failed, count);
  return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
