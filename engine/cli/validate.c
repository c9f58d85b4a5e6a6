/* validate.c: `recap validate SPEC...`: checks specs without touching a device. */
#include <stdio.h>
#include <string.h>

#include "engine/cli/cli.h"

static const char *const CMD = "validate";

/* The memory of the spec's device (device 0 of its backend), for the loader's capacity checks:
 * the host backend's cap (RECAP_HOST_MEMORY_BYTES, else the physical memory) or the GPU's total
 * memory. 0 with *why saying why when it cannot be known on this machine. Reading device
 * properties allocates nothing on the device. */
static uint64_t device_memory(recap_backend_kind kind, char *why, size_t size) {
  if (kind == RECAP_BACKEND_CUDA && !recap_device_is_available(RECAP_BACKEND_CUDA)) {
    snprintf(why, size, "%s",
             recap_backend_compiled(RECAP_BACKEND_CUDA) ? "no CUDA GPU on this machine"
                                                        : "this build has no CUDA backend");
    return 0;
  }
  recap_device_properties props;
  if (recap_device_properties_get((recap_device){kind, 0}, &props) != RECAP_OK) {
    snprintf(why, size, "%s", recap_last_error());
    return 0;
  }
  return props.total_memory;
}

/* Loads path with the capacity checks against `capacity` bytes, printing every error as
 * cli_load_spec does. */
static recap_status load_with_capacity(const char *path, const char *base_dir, uint64_t capacity,
                                       recap__spec **out) {
  recap__spec_options options = {.base_dir = base_dir, .device_memory_bytes = capacity};
  recap__diag diag = {0};
  recap_status st = recap__spec_load_file(path, &options, out, &diag);
  if (st == RECAP_STATUS_SPEC_ERROR && diag.count > 0) {
    for (size_t i = 0; i < diag.count; i++) fprintf(stderr, "%s\n", diag.messages[i]);
    if (diag.dropped > 0) fprintf(stderr, "%s: %zu more errors not shown\n", path, diag.dropped);
  } else if (st != RECAP_OK) {
    fprintf(stderr, "%s: error: %s\n", path, recap_last_error());
  }
  recap__diag_free(&diag);
  return st;
}

/* One spec: loaded once to learn its device, then again with that device's memory when it is
 * known. Prints the ok line and what the check could not cover. */
static bool validate_one(const char *path, const char *base_dir) {
  recap__spec *spec = NULL;
  if (cli_load_spec(path, base_dir, &spec) != RECAP_OK) return false;
  char why[512] = "";
  uint64_t capacity = device_memory(spec->device, why, sizeof why);
  if (capacity) {
    recap__spec_destroy(spec);
    spec = NULL;
    if (load_with_capacity(path, base_dir, capacity, &spec) != RECAP_OK) return false;
  }
  size_t buckets = recap__spec_num_buckets(spec), files = 0, exprs = 0;
  for (size_t t = 0; t < spec->num_declared; t++)
    files += spec->tensors[t].init.kind == RECAP_INIT_FILE;
  for (size_t o = 0; o < spec->num_ops; o++)
    exprs += spec->ops[o].def && strcmp(spec->ops[o].def->name, "expr") == 0;
  const char *device = recap_backend_name(spec->device);
  char memory[160] = "";
  if (capacity) {
    char bytes[32];
    snprintf(memory, sizeof memory, "; sizes checked against %s:0's %s", device,
             cli_format_bytes((size_t)capacity, bytes, sizeof bytes));
  }
  printf("%s: ok (%s: %zu ops, %zu tensors, %zu bucket%s%s)\n", path, spec->name, spec->num_ops,
         spec->num_tensors, buckets, buckets == 1 ? "" : "s", memory);
  /* What only a real run finds out, so that "ok" is not read as "will run". */
  if (!capacity) printf("  not checked: the sizes against %s memory (%s)\n", device, why);
  if (files)
    printf("  not checked: the data of %zu file%s (sizes and safetensors headers are checked; "
           "the values are read when a pipeline binds them)\n",
           files, files == 1 ? "" : "s");
  if (exprs && spec->device == RECAP_BACKEND_CUDA)
    printf("  not checked: compiling %zu expr op%s with NVRTC (done when a pipeline loads on "
           "the GPU)\n",
           exprs, exprs == 1 ? "" : "s");
  recap__spec_destroy(spec);
  return true;
}

int cli_validate_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    printf("usage: recap validate SPEC... [--base-dir DIR]\n\n"
           "Checks each spec completely (YAML syntax and limits, keys, names, the DAG, shapes "
           "and\ndtypes for every bucket, the size of raw weight files and the header of "
           ".safetensors\nfiles) without allocating anything on a device. Tensor sizes are "
           "checked against the\nmemory of the spec's device when this machine has it (the "
           "host backend's cap\nRECAP_HOST_MEMORY_BYTES, or the GPU's total memory). Prints "
           "\"SPEC: ok\" per valid spec,\nthen a \"not checked:\" line for each thing only a "
           "run can find out, and every problem\nas FILE:LINE:COL: error: message on stderr.\n\n"
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
  for (int i = 0; i < count; i++)
    if (!validate_one(paths[i], base_dir)) failed++;
  if (count > 1 && failed) fprintf(stderr, "%d of %d specs invalid\n", failed, count);
  return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
